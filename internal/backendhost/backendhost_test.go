package backendhost

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/xlbproject/xlb/internal/dataplane"
	"github.com/xlbproject/xlb/internal/netns"
	"github.com/xlbproject/xlb/internal/testenv"
)

func ipcmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// loVIPs lists the /32 addresses on lo in ns.
func loVIPs(t *testing.T, ns string) []netip.Addr {
	t.Helper()
	var out []netip.Addr
	err := netns.Do(ns, func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		addrs, err := netlink.AddrList(lo, netlink.FAMILY_V4)
		for _, a := range addrs {
			if ones, _ := a.Mask.Size(); ones == 32 {
				ip, _ := netip.AddrFromSlice(a.IP.To4())
				out = append(out, ip)
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

func TestSetupAndCleanup(t *testing.T) {
	testenv.RequireRoot(t, "backend set-up tests (BPF, network namespaces)")
	ns := fmt.Sprintf("xlbtest-bh-%d", os.Getpid())
	ipcmd(t, "netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	ipcmd(t, "-n", ns, "link", "set", "lo", "up")
	ipcmd(t, "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
	ipcmd(t, "-n", ns, "addr", "add", "10.0.3.2/24", "dev", "eth0")
	ipcmd(t, "-n", ns, "link", "set", "eth0", "up")
	pin := filepath.Join(dataplane.BPFFSRoot, fmt.Sprintf("xlbtest-bh-%d", os.Getpid()))
	t.Cleanup(func() { os.RemoveAll(pin) })

	v1, v2, v3 := netip.MustParseAddr("10.99.0.1"), netip.MustParseAddr("10.99.0.2"), netip.MustParseAddr("10.99.0.3")
	setup := func(vips ...netip.Addr) Result {
		t.Helper()
		var res Result
		err := netns.Do(ns, func() error {
			var err error
			res, err = Setup(Options{Interface: "eth0", VIPs: vips, PinPath: pin})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := setup(v1, v2)
	if len(res.HostAddrs) != 1 || res.HostAddrs[0] != netip.MustParseAddr("10.0.3.2") || res.Mode != dataplane.ModeNative {
		t.Errorf("result %+v", res)
	}
	if got := loVIPs(t, ns); !slices.Equal(got, []netip.Addr{v1, v2}) {
		t.Errorf("VIPs on lo %v, want %v %v", got, v1, v2)
	}
	err := netns.Do(ns, func() error {
		for k, want := range sysctls {
			b, err := os.ReadFile(filepath.Join("/proc/sys", k))
			if err != nil {
				return err
			}
			if strings.TrimSpace(string(b)) != want {
				return fmt.Errorf("%s = %s, want %s", k, b, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}

	// A second set-up replaces the VIP set: v1 leaves lo, v3 arrives.
	setup(v2, v3)
	if got := loVIPs(t, ns); !slices.Equal(got, []netip.Addr{v2, v3}) {
		t.Errorf("VIPs on lo after re-setup %v, want %v %v", got, v2, v3)
	}

	for i := 0; i < 2; i++ { // safe to run twice
		err := netns.Do(ns, func() error {
			_, err := Cleanup(pin)
			return err
		})
		if err != nil {
			t.Fatalf("cleanup %d: %v", i+1, err)
		}
	}
	if got := loVIPs(t, ns); len(got) != 0 {
		t.Errorf("VIPs left on lo: %v", got)
	}
	if _, err := os.Stat(pin); !os.IsNotExist(err) {
		t.Errorf("pin directory left: %v", err)
	}
}

func TestSetupRefusesBadInput(t *testing.T) {
	if _, err := Setup(Options{Interface: "eth0"}); err == nil || !strings.Contains(err.Error(), "--vip") {
		t.Errorf("no VIPs: %v", err)
	}
	if _, err := Setup(Options{Interface: "eth0", VIPs: []netip.Addr{netip.MustParseAddr("::1")}}); err == nil || !strings.Contains(err.Error(), "IPv4") {
		t.Errorf("IPv6 VIP: %v", err)
	}
}
