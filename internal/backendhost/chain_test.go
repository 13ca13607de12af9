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

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/decap"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/testbed/netns"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// TestSetupChainForwarding: daisy chaining needs IPv4 forwarding on the
// tunnels' interface (bpf_fib_lookup refuses a lookup from an interface
// that does not forward), and IPv6 forwarding there when the interface
// has an IPv6 address (tunnels over IPv6 are chained over IPv6), so Setup
// turns them on (an IPv6 interface that took router advertisements keeps
// taking them: accept_ra 2), says so once, and leaves them alone when
// nothing can be chained: chaining off, or no sets of xlb nodes and
// previous owners (the default).
func TestSetupChainForwarding(t *testing.T) {
	testenv.RequireRoot(t, "backend set-up tests (BPF, network namespaces)")
	vip := netip.MustParseAddr("10.99.0.1")
	from := []netip.Prefix{netip.MustParsePrefix("10.0.1.0/24")}
	to := []netip.Prefix{netip.MustParsePrefix("10.0.3.0/24")}
	for i, c := range []struct {
		name     string
		window   time.Duration
		from, to []netip.Prefix
		want     string // forwarding after set-up
		ipv6     bool   // eth0 has an IPv6 address
	}{
		{"chaining on", 2 * time.Minute, from, to, "1", false},
		{"chaining on, an IPv6 address", 2 * time.Minute, from, to, "1", true},
		{"chaining off", 0, from, to, "0", true},
		{"no sets (the default)", 2 * time.Minute, nil, nil, "0", false},
		{"no previous owners", 2 * time.Minute, from, nil, "0", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := fmt.Sprintf("xlbtest-bhc-%d-%d", os.Getpid(), i)
			ipcmd(t, "netns", "add", ns)
			t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
			ipcmd(t, "-n", ns, "link", "set", "lo", "up")
			ipcmd(t, "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
			ipcmd(t, "-n", ns, "addr", "add", "10.0.3.2/24", "dev", "eth0")
			if c.ipv6 {
				ipcmd(t, "-n", ns, "addr", "add", "fd00:3::2/64", "dev", "eth0", "nodad")
			}
			ipcmd(t, "-n", ns, "link", "set", "eth0", "up")
			pin := filepath.Join(bpfobj.BPFFSRoot, ns)
			t.Cleanup(func() { os.RemoveAll(pin) })
			fwd := "/proc/sys/net/ipv4/conf/eth0/forwarding"
			fwd6, ra := "/proc/sys/net/ipv6/conf/eth0/forwarding", "/proc/sys/net/ipv6/conf/eth0/accept_ra"
			var first, second Result
			var got, got6, gotRA []byte
			err := netns.Do(ns, func() error {
				for f, v := range map[string]string{fwd: "0", fwd6: "0", ra: "1"} {
					if err := os.WriteFile(f, []byte(v+"\n"), 0o644); err != nil {
						return err
					}
				}
				var err error
				opts := Options{Interface: "eth0", VIPs: []netip.Addr{vip}, PinPath: pin, ChainWindow: c.window, ChainFrom: c.from, ChainTo: c.to}
				if first, err = Setup(opts); err != nil {
					return err
				}
				if second, err = Setup(opts); err != nil {
					return err
				}
				if got, err = os.ReadFile(fwd); err != nil {
					return err
				}
				if got6, err = os.ReadFile(fwd6); err != nil {
					return err
				}
				gotRA, err = os.ReadFile(ra)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(string(got)) != c.want {
				t.Errorf("forwarding on eth0 = %s, want %s", strings.TrimSpace(string(got)), c.want)
			}
			want6, wantRA := "0", "1"
			if c.ipv6 && c.want == "1" {
				want6, wantRA = "1", "2"
			}
			if g6, gra := strings.TrimSpace(string(got6)), strings.TrimSpace(string(gotRA)); g6 != want6 || gra != wantRA {
				t.Errorf("IPv6 forwarding on eth0 = %s, accept_ra %s; want %s, %s", g6, gra, want6, wantRA)
			}
			if first.ForwardingOn != (c.want == "1") || second.ForwardingOn {
				t.Errorf("ForwardingOn: first set-up %v, second %v; want %v, false", first.ForwardingOn, second.ForwardingOn, c.want == "1")
			}
			if first.Chaining != (c.want == "1") {
				t.Errorf("Chaining %v, want %v", first.Chaining, c.want == "1")
			}
			st, err := decap.ChainStats(pin)
			if err != nil || len(st) != len(wire.ChainStatNames) {
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

// TestSetNATPodNetns: SetNAT records, for every local pod behind a veth
// of the node, the ID of the pod's network namespace (the veth's
// link-netnsid), where daisy chaining looks for the pod's sockets; a pod
// it cannot find so is counted, and a pod that leaves loses its entry.
func TestSetNATPodNetns(t *testing.T) {
	testenv.RequireRoot(t, "backend set-up tests (BPF, network namespaces)")
	ns := fmt.Sprintf("xlbtest-bhn-%d", os.Getpid())
	podNS := ns + "-pod"
	for _, n := range []string{ns, podNS} {
		ipcmd(t, "netns", "add", n)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", n).Run() })
		ipcmd(t, "-n", n, "link", "set", "lo", "up")
	}
	ipcmd(t, "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
	ipcmd(t, "-n", ns, "addr", "add", "10.0.3.2/24", "dev", "eth0")
	ipcmd(t, "-n", ns, "link", "set", "eth0", "up")
	ipcmd(t, "-n", ns, "link", "add", "vpod", "type", "veth", "peer", "name", "eth0", "netns", podNS)
	ipcmd(t, "-n", ns, "link", "set", "vpod", "up")
	pod := netip.MustParseAddr("10.244.1.2")
	ipcmd(t, "-n", ns, "route", "add", pod.String()+"/32", "dev", "vpod")
	// A pod the node routes through a gateway is not behind a veth here.
	away := netip.MustParseAddr("10.244.2.2")
	ipcmd(t, "-n", ns, "route", "add", away.String()+"/32", "via", "10.0.3.1")
	pin := filepath.Join(bpfobj.BPFFSRoot, ns)
	t.Cleanup(func() { os.RemoveAll(pin) })
	vip := netip.MustParseAddr("10.99.0.1")

	var res Result
	var want int
	var after NATChange
	err := netns.Do(ns, func() error {
		if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
			return err
		}
		l, err := netlink.LinkByName("vpod")
		if err != nil {
			return err
		}
		want = l.Attrs().NetNsID
		opts := Options{Interface: "eth0", PinPath: pin, ChainWindow: time.Minute,
			NAT: []NATEntry{{vip, 80, 6, pod, 8080}, {vip, 80, 6, away, 8080}}}
		if res, err = Setup(opts); err != nil {
			return err
		}
		after, err = SetNAT(pin, []NATEntry{{vip, 80, 6, away, 8080}}, NATOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if want < 0 {
		t.Fatal("the pod's veth has no link-netnsid")
	}
	if res.NAT.NoNetns != 1 || after.NoNetns != 1 {
		t.Errorf("pods without a network namespace ID: %d, then %d; want 1 (%v) both times", res.NAT.NoNetns, after.NoNetns, away)
	}
	m, err := ebpf.LoadPinnedMap(filepath.Join(pin, natNetnsMap), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	got, err := readMap[wire.Addr, uint32](m)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("after the pod left, %s holds %v", natNetnsMap, got)
	}
	// Back, and the entry is there again, with the veth's ID.
	err = netns.Do(ns, func() error {
		_, err := SetNAT(pin, []NATEntry{{vip, 80, 6, pod, 8080}}, NATOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ = readMap[wire.Addr, uint32](m); len(got) != 1 || got[wire.AddrOf(pod)] != uint32(want) {
		t.Errorf("%s holds %v, want %v -> %d", natNetnsMap, got, pod, want)
	}
}
