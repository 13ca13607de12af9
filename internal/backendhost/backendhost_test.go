package backendhost

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/testbed/netns"
	"github.com/xlbproject/xlb/testbed/testenv"
	"github.com/xlbproject/xlb/testbed/xdptest"
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
	pin := filepath.Join(bpfobj.BPFFSRoot, fmt.Sprintf("xlbtest-bh-%d", os.Getpid()))
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
	if len(res.HostAddrs) != 1 || res.HostAddrs[0] != netip.MustParseAddr("10.0.3.2") || res.Mode != bpfobj.ModeNative {
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
	// IPv6 VIPs go on lo as /128s beside them, and leave as the IPv4
	// ones do.
	v6a, v6b := netip.MustParseAddr("fd00:99::1"), netip.MustParseAddr("2001:db8:99::2")
	setup(v2, v3, v6a, v6b)
	if got := loVIPs6(t, ns); !slices.Equal(got, []netip.Addr{v6b, v6a}) {
		t.Errorf("IPv6 VIPs on lo %v, want %v %v", got, v6a, v6b)
	}
	setup(v2, v3, v6b)
	if got := loVIPs6(t, ns); !slices.Equal(got, []netip.Addr{v6b}) {
		t.Errorf("IPv6 VIPs on lo after re-setup %v, want %v", got, v6b)
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
	if got := loVIPs6(t, ns); len(got) != 0 {
		t.Errorf("IPv6 VIPs left on lo: %v", got)
	}
	if _, err := os.Stat(pin); !os.IsNotExist(err) {
		t.Errorf("pin directory left: %v", err)
	}
}

func TestSetupRefusesBadInput(t *testing.T) {
	if _, err := Setup(Options{Interface: "eth0"}); err == nil || !strings.Contains(err.Error(), "--vip") {
		t.Errorf("no VIPs: %v", err)
	}
	// IPv6 VIPs no load balancer tunnels to are refused, saying why,
	// before anything is touched (the interface is not even looked up).
	for vip, want := range map[string]string{
		"::1":              "is the loopback address",
		"fe80::1":          "is link-local",
		"ff05::2":          "is a multicast address",
		"::":               "is the unspecified address",
		"::ffff:10.99.0.1": "give the IPv4 address 10.99.0.1 instead",
	} {
		_, err := Setup(Options{Interface: "no-such-interface", VIPs: []netip.Addr{fxVIP1, netip.MustParseAddr(vip)}})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("VIP %s: %v, want %q", vip, err, want)
		}
	}
}

// egressPrograms lists the TCX egress programs on ifname in ns.
func egressPrograms(t *testing.T, ns, ifname string) []ebpf.ProgramID {
	t.Helper()
	var ids []ebpf.ProgramID
	err := netns.Do(ns, func() error {
		iface, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		res, err := link.QueryPrograms(link.QueryOptions{Target: iface.Index, Attach: ebpf.AttachTCXEgress})
		if err != nil {
			return err
		}
		for _, p := range res.Programs {
			ids = append(ids, p.ID)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestSetupNAT: the Kubernetes mode attaches the reply program next to
// the decapsulation program, a second set-up replaces the translations
// and the reply program in place, a set-up without translations detaches
// it, and Cleanup leaves nothing.
func TestSetupNAT(t *testing.T) {
	testenv.RequireRoot(t, "backend set-up tests (BPF, network namespaces)")
	ns := fmt.Sprintf("xlbtest-bhnat-%d", os.Getpid())
	ipcmd(t, "netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	ipcmd(t, "-n", ns, "link", "set", "lo", "up")
	ipcmd(t, "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
	ipcmd(t, "-n", ns, "addr", "add", "10.0.2.2/24", "dev", "eth0")
	ipcmd(t, "-n", ns, "link", "set", "eth0", "up")
	pin := filepath.Join(bpfobj.BPFFSRoot, fmt.Sprintf("xlbtest-bhnat-%d", os.Getpid()))
	t.Cleanup(func() { os.RemoveAll(pin) })

	setup := func(opts Options) (Result, error) {
		opts.Interface, opts.PinPath = "eth0", pin
		var res Result
		err := netns.Do(ns, func() error {
			var err error
			res, err = Setup(opts)
			return err
		})
		return res, err
	}
	forwarding := func(on string) {
		t.Helper()
		err := netns.Do(ns, func() error { return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte(on), 0o644) })
		if err != nil {
			t.Fatal(err)
		}
	}
	pod := netip.MustParseAddr("10.244.1.2")
	first := []NATEntry{{fxVIP1, 80, 6, pod, 8080}, {fxVIP2, 80, 6, pod, 8080}}
	second := []NATEntry{{fxVIP1, 80, 6, pod, 9090}}

	if _, err := setup(Options{NAT: first}); err == nil || !strings.Contains(err.Error(), "ip_forward") {
		t.Fatalf("set-up without forwarding: %v", err)
	}
	forwarding("1")
	if _, err := setup(Options{NAT: []NATEntry{{fxVIP1, 80, 6, netip.MustParseAddr("10.0.2.2"), 80}}}); err == nil || !strings.Contains(err.Error(), "address of eth0") {
		t.Fatalf("pod IP of the host: %v", err)
	}

	res, err := setup(Options{NAT: first})
	if err != nil {
		t.Fatal(err)
	}
	if res.NAT != (NATChange{Added: 2, NoNetns: 1}) || xdpAttached(t, ns, "eth0") == 0 {
		t.Errorf("first set-up: %+v, XDP program %d", res, xdpAttached(t, ns, "eth0"))
	}
	progs := egressPrograms(t, ns, "eth0")
	if len(progs) != 1 {
		t.Fatalf("egress programs after set-up: %v", progs)
	}
	if got := loVIPs(t, ns); len(got) != 0 {
		t.Errorf("the Kubernetes mode put %v on lo", got)
	}

	res, err = setup(Options{NAT: second})
	if err != nil {
		t.Fatal(err)
	}
	if res.NAT != (NATChange{Updated: 1, Removed: 1, NoNetns: 1}) {
		t.Errorf("second set-up changed %+v", res.NAT)
	}
	if again := egressPrograms(t, ns, "eth0"); len(again) != 1 {
		t.Errorf("egress programs after a second set-up: %v (the link should be reused)", again)
	}
	svcs, err := pinnedSvcs(pin)
	if err != nil || len(svcs) != 1 || svcs[wire.NATSvcKey{Vip: wire.AddrOf(fxVIP1), Pod: wire.AddrOf(pod), Port: wire.Port(80), Proto: 6}] != wire.Port(9090) {
		t.Errorf("translations after the second set-up: %v, %v", svcs, err)
	}

	// Back to the host mode: the reply program and the translations go.
	if _, err := setup(Options{VIPs: []netip.Addr{fxVIP1}}); err != nil {
		t.Fatal(err)
	}
	if !testenv.Poll(5*time.Second, func() bool { return len(egressPrograms(t, ns, "eth0")) == 0 }) {
		t.Errorf("egress programs without translations: %v", egressPrograms(t, ns, "eth0"))
	}
	if svcs, err := pinnedSvcs(pin); err != nil || len(svcs) != 0 {
		t.Errorf("translations left: %v, %v", svcs, err)
	}
	// Translations without the reply program would break every flow.
	if _, err := SetNAT(pin, first, NATOptions{}); err == nil || !strings.Contains(err.Error(), "no reply program") {
		t.Errorf("SetNAT without the reply program: %v", err)
	}

	if _, err := setup(Options{NAT: first}); err != nil {
		t.Fatal(err)
	}
	err = netns.Do(ns, func() error {
		_, err := Cleanup(pin)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !testenv.Poll(5*time.Second, func() bool { return len(egressPrograms(t, ns, "eth0")) == 0 && xdpAttached(t, ns, "eth0") == 0 }) {
		t.Errorf("after cleanup: egress programs %v, XDP program %d", egressPrograms(t, ns, "eth0"), xdpAttached(t, ns, "eth0"))
	}
}

func pinnedSvcs(pin string) (map[wire.NATSvcKey]uint16, error) {
	m, err := openNATMaps(pin)
	if err != nil {
		return nil, err
	}
	defer m.close()
	return readMap[wire.NATSvcKey, uint16](m.svcs)
}

// xdpAttached is the XDP program attached to ifname in namespace ns (0:
// none).
func xdpAttached(t *testing.T, ns, ifname string) uint32 {
	t.Helper()
	id, err := xdptest.AttachedProgram(ns, ifname)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
