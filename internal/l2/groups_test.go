package l2

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/testbed/netns"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// The sender holds the interface in the solicited-node group of each
// IPv6 VIP (`ip maddr` shows it), leaves the group of a VIP that went,
// and joins nothing for an IPv4 VIP.
func TestSolicitedNodeGroups(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces")
	ns := fmt.Sprintf("xlbl2g%d", os.Getpid()%100000)
	sh := func(argv ...string) string {
		t.Helper()
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v: %s", argv, err, out)
		}
		return string(out)
	}
	sh("ip", "netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	sh("ip", "-n", ns, "link", "add", "g0", "type", "veth", "peer", "name", "g1")
	sh("ip", "-n", ns, "link", "set", "g0", "up")
	var g *garpSender
	if err := netns.Do(ns, func() error {
		ifc, err := net.InterfaceByName("g0")
		if err != nil {
			return err
		}
		g, err = newGARPSender(ifc.Index, ifc.HardwareAddr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer g.close()
	a, b := netip.MustParseAddr("fd00:99::12:3456"), netip.MustParseAddr("2001:db8::ab:cdef")
	groups := func() string { return sh("ip", "-n", ns, "maddr", "show", "dev", "g0") }
	if err := g.join([]netip.Addr{a, b, netip.MustParseAddr("10.99.0.1")}); err != nil {
		t.Fatal(err)
	}
	got := groups()
	for _, mac := range []string{"33:33:ff:12:34:56", "33:33:ff:ab:cd:ef"} {
		if !strings.Contains(got, "link  "+mac) {
			t.Errorf("group %s not joined:\n%s", mac, got)
		}
	}
	if err := g.join([]netip.Addr{a}); err != nil {
		t.Fatal(err)
	}
	if got := groups(); !strings.Contains(got, "33:33:ff:12:34:56") || strings.Contains(got, "33:33:ff:ab:cd:ef") {
		t.Errorf("after b went, want a's group alone:\n%s", got)
	}
	if got := SolicitedNodeMAC(a).String(); got != "33:33:ff:12:34:56" {
		t.Errorf("solicited-node MAC of %s: %s", a, got)
	}
}
