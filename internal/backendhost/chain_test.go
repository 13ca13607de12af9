package backendhost

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/dataplane"
	"github.com/xlbproject/xlb/internal/netns"
	"github.com/xlbproject/xlb/internal/testenv"
)

// TestSetupChainForwarding: daisy chaining needs IPv4 forwarding on the
// tunnels' interface (bpf_fib_lookup refuses a lookup from an interface
// that does not forward), so Setup turns it on, says so once, and leaves
// it alone with chaining off.
func TestSetupChainForwarding(t *testing.T) {
	testenv.RequireRoot(t, "backend set-up tests (BPF, network namespaces)")
	vip := netip.MustParseAddr("10.99.0.1")
	for _, c := range []struct {
		name   string
		window time.Duration
		want   string // forwarding after set-up
	}{
		{"chaining on", 2 * time.Minute, "1"},
		{"chaining off", 0, "0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := fmt.Sprintf("xlbtest-bhc-%d-%d", os.Getpid(), c.window/time.Second)
			ipcmd(t, "netns", "add", ns)
			t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
			ipcmd(t, "-n", ns, "link", "set", "lo", "up")
			ipcmd(t, "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
			ipcmd(t, "-n", ns, "addr", "add", "10.0.3.2/24", "dev", "eth0")
			ipcmd(t, "-n", ns, "link", "set", "eth0", "up")
			pin := filepath.Join(dataplane.BPFFSRoot, ns)
			t.Cleanup(func() { os.RemoveAll(pin) })
			fwd := "/proc/sys/net/ipv4/conf/eth0/forwarding"
			var first, second Result
			var got []byte
			err := netns.Do(ns, func() error {
				if err := os.WriteFile(fwd, []byte("0\n"), 0o644); err != nil {
					return err
				}
				var err error
				opts := Options{Interface: "eth0", VIPs: []netip.Addr{vip}, PinPath: pin, ChainWindow: c.window}
				if first, err = Setup(opts); err != nil {
					return err
				}
				if second, err = Setup(opts); err != nil {
					return err
				}
				got, err = os.ReadFile(fwd)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(string(got)) != c.want {
				t.Errorf("forwarding on eth0 = %s, want %s", strings.TrimSpace(string(got)), c.want)
			}
			if first.ForwardingOn != (c.want == "1") || second.ForwardingOn {
				t.Errorf("ForwardingOn: first set-up %v, second %v; want %v, false", first.ForwardingOn, second.ForwardingOn, c.want == "1")
			}
			st, err := dataplane.ChainStats(pin)
			if err != nil || len(st) != len(dataplane.ChainStatNames) {
				t.Errorf("ChainStats: %v, %v", st, err)
			}
		})
	}
}

func TestSetupRejectsChainWindow(t *testing.T) {
	_, err := Setup(Options{Interface: "lo", VIPs: []netip.Addr{netip.MustParseAddr("10.99.0.1")}, ChainWindow: -time.Second})
	if err == nil || !strings.Contains(err.Error(), "negative") {
		t.Fatalf("Setup with a negative chain window: %v, want an error saying so", err)
	}
}
