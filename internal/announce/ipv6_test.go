package announce

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/bgp"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/testbed/netns"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// A dual-stack node announces each VIP in its family, next hop the
// node's address of that family: IPv4 VIPs as /32s, IPv6 VIPs as /128s.
func TestDualStackRoutes(t *testing.T) {
	node6 := netip.MustParseAddr("fd00:1::2")
	cfg := &config.BGP{ASN: 65001, Peers: []config.Peer{
		{Address: netip.MustParseAddr("10.0.1.1"), ASN: 65000},
		{Address: netip.MustParseAddr("fd00:1::1"), ASN: 65000},
	}}
	a, err := New(cfg, node, node6, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	one := uint32(1)
	services := []config.Service{
		{Name: "web", VIP: vip.Addr(), Port: 80, Protocol: config.TCP, Backends: []config.Backend{{Address: netip.MustParseAddr("10.0.3.2"), Port: 80, Weight: 1}}},
		{Name: "web6", VIP: netip.MustParseAddr("fd00:99::1"), Port: 80, Protocol: config.TCP, BGP: config.RouteAttributes{MED: &one},
			Backends: []config.Backend{{Address: netip.MustParseAddr("fd00:3::2"), Port: 80, Weight: 1}}},
	}
	routes := Plan(services, nil, func(config.Service) bool { return true })
	if err := a.Sync(routes); err != nil {
		t.Fatal(err)
	}
	want := []bgp.Route{
		{Prefix: vip, NextHop: node},
		{Prefix: netip.MustParsePrefix("fd00:99::1/128"), NextHop: node6, Attributes: bgp.Attributes{MED: &one}},
	}
	if got := a.sp.(*bgp.Speaker).Announced(); !routesEqual(got, want) {
		t.Errorf("announced:\n%s\nwant:\n%s", fmtRoutes(got), fmtRoutes(want))
	}
	if st := a.Status(); st.NextHop != node || st.NextHop6 != node6 {
		t.Errorf("status next hops %s %s, want %s %s", st.NextHop, st.NextHop6, node, node6)
	}
}

// BFD runs per family: the IPv4 peers' sessions from the node's IPv4
// address, the IPv6 peers' from its IPv6 address.
func TestBFDPerFamily(t *testing.T) {
	testenv.RequireRoot(t, "BFD sockets in a network namespace")
	ns := fmt.Sprintf("xann%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	local4, local6 := netip.MustParseAddr("10.98.0.1"), netip.MustParseAddr("fd00:98::1")
	peer4, peer6 := netip.MustParseAddr("10.98.0.2"), netip.MustParseAddr("fd00:98::2")
	for _, args := range [][]string{
		// A link to nowhere for the peers to be on: a veth pair whose
		// other end has no address.
		{"link", "add", "d0", "type", "veth", "peer", "name", "d1"},
		{"link", "set", "d0", "up"},
		{"link", "set", "d1", "up"},
		{"addr", "add", local4.String() + "/24", "dev", "d0"},
		{"addr", "add", local6.String() + "/64", "dev", "d0", "nodad"},
	} {
		if out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	bfdCfg := &config.BFD{MinTx: 300 * time.Millisecond, MinRx: 300 * time.Millisecond, Multiplier: 3}
	cfg := &config.BGP{ASN: 65001, Peers: []config.Peer{
		{Address: peer4, ASN: 65000, BFD: bfdCfg},
		{Address: peer6, ASN: 65000, BFD: bfdCfg},
	}}
	a := newAnnouncer(cfg, local4, local4, newFakeSpeaker(), quietLogger())
	a.node6 = local6
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := netns.Do(ns, func() error { return a.Start(ctx) }); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	var got [2][]netip.Addr
	for fam, m := range a.bfd {
		if m == nil {
			t.Fatalf("no BFD manager for %s", familyNames[fam])
		}
		for _, s := range m.Sessions() {
			got[fam] = append(got[fam], s.Peer)
		}
	}
	a.mu.Unlock()
	if !slices.Equal(got[0], []netip.Addr{peer4}) || !slices.Equal(got[1], []netip.Addr{peer6}) {
		t.Errorf("BFD sessions: IPv4 manager %v, IPv6 manager %v; want [%s] and [%s]", got[0], got[1], peer4, peer6)
	}
	if err := a.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	// Without an IPv6 address, an IPv6 peer's BFD cannot run: said so.
	b := newAnnouncer(cfg, local4, local4, newFakeSpeaker(), quietLogger())
	err := netns.Do(ns, func() error { return b.Start(ctx) })
	defer func() { _ = b.Shutdown(ctx) }()
	if err == nil || err.Error() != "BFD: a peer is IPv6, but the node has no IPv6 address to run BFD from" {
		t.Errorf("Start without an IPv6 address = %v", err)
	}
}
