package bgp

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/osrg/gobgp/v4/api"

	"github.com/xlbproject/xlb/testbed/testenv"
)

// TestSpeakerSendsRoutesToTheirPeers: a route with Attributes.Peers
// reaches those peers alone; changing its peers withdraws it from the
// peers it leaves and sends it to those it gains, over sessions that
// stay up; a route without Peers reaches every peer.
func TestSpeakerSendsRoutesToTheirPeers(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	const localASN = 65001
	node, rtr := newNamespace(t, "node"), newNamespace(t, "rtr")
	nodeIP, ipA, ipB := mustAddr("10.251.7.2"), mustAddr("10.251.7.1"), mustAddr("10.251.7.3")
	connect(t, node, "eth0", []string{nodeIP.String()}, rtr, "eth0", []string{ipA.String(), ipB.String()})
	routerA := startRouter(t, rtr, 65000, ipA, routerPeer{Address: nodeIP, ASN: localASN})
	routerB := startRouter(t, rtr, 65002, ipB, routerPeer{Address: nodeIP, ASN: localASN})
	sp := startSpeaker(t, node, helperOptions{ASN: localASN, NextHop: nodeIP, Peers: []Peer{
		{Address: ipA, ASN: 65000, HoldTime: 9 * time.Second},
		{Address: ipB, ASN: 65002, HoldTime: 9 * time.Second},
	}})
	waitEstablished(t, sp, ipA, 15*time.Second)
	waitEstablished(t, sp, ipB, 15*time.Second)

	all, toA, toB := mustPrefix("10.99.0.1/32"), mustPrefix("10.99.0.2/32"), mustPrefix("10.99.0.0/24")
	for p, a := range map[netip.Prefix]Attributes{
		all: {},
		toA: {Peers: []netip.Addr{ipA}, Communities: []string{"65000:1"}},
		toB: {Peers: []netip.Addr{ipB}},
	} {
		if err := sp.Announce(p, a); err != nil {
			t.Fatal(err)
		}
	}
	// has says which of the prefixes each router holds.
	has := func(want map[*testRouter][]netip.Prefix) func() (bool, string) {
		return func() (bool, string) {
			ok := true
			var got string
			for name, r := range map[string]*testRouter{"A": routerA, "B": routerB} {
				rib := r.rib(t)
				got += fmt.Sprintf("%s:", name)
				for _, p := range []netip.Prefix{all, toA, toB} {
					_, in := rib[p]
					wanted := false
					for _, w := range want[r] {
						wanted = wanted || w == p
					}
					ok = ok && in == wanted
					if in {
						got += " " + p.String()
					}
				}
				got += "; "
			}
			return ok, got
		}
	}
	testenv.Eventually(t, 10*time.Second, "each router holds its routes", has(map[*testRouter][]netip.Prefix{
		routerA: {all, toA}, routerB: {all, toB}}))

	// toA moves to B; toB goes to every peer.
	if err := sp.Announce(toA, Attributes{Peers: []netip.Addr{ipB}, Communities: []string{"65000:1"}}); err != nil {
		t.Fatal(err)
	}
	if err := sp.Announce(toB, Attributes{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the routes follow their new peers", has(map[*testRouter][]netip.Prefix{
		routerA: {all, toB}, routerB: {all, toA, toB}}))
	if routerA.withdrawals(toA) == 0 {
		t.Errorf("router A got no withdrawal of %s", toA)
	}
	for _, addr := range []netip.Addr{ipA, ipB} {
		if p := sp.peer(addr); p.State != StateEstablished || p.Flaps != 0 {
			t.Errorf("peer %s: %+v, want established without flaps (a change of peers is no session reset)", addr, p)
		}
	}
	// A withdrawn restricted route leaves the others as they were.
	if err := sp.Withdraw(toA); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the withdrawn route gone, the rest kept", has(map[*testRouter][]netip.Prefix{
		routerA: {all, toB}, routerB: {all, toB}}))

	// Peers that go and come back (a new stand-in address in GoBGP):
	// a route for B alone reaches the new B, and never A.
	if err := sp.Announce(toA, Attributes{Peers: []netip.Addr{ipB}}); err != nil {
		t.Fatal(err)
	}
	peerA := Peer{Address: ipA, ASN: 65000, HoldTime: 9 * time.Second}
	if err := sp.SetPeers([]Peer{peerA}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "B gone", func() (bool, string) {
		st := routerB.peerState(t, nodeIP)
		return st != api.PeerState_SESSION_STATE_ESTABLISHED, st.String()
	})
	if err := sp.SetPeers([]Peer{peerA, {Address: ipB, ASN: 65002, HoldTime: 9 * time.Second}}); err != nil {
		t.Fatal(err)
	}
	waitEstablished(t, sp, ipB, 15*time.Second)
	testenv.Eventually(t, 10*time.Second, "the new B gets its route, A does not", has(map[*testRouter][]netip.Prefix{
		routerA: {all, toB}, routerB: {all, toA, toB}}))
}
