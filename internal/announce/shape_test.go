package announce

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/xlbproject/xlb/internal/config"
)

// TestShape: the BGPAdvertisements' peers restrict a VIP's route, a VIP
// sent to no peer is not announced, and an aggregate is announced while
// one of its VIPs is served.
func TestShape(t *testing.T) {
	ip, pfx := netip.MustParseAddr, netip.MustParsePrefix
	lp := uint32(200)
	routes := []Route{
		{Prefix: pfx("10.99.0.1/32"), Serve: true},
		{Prefix: pfx("10.99.0.2/32"), Serve: false, Why: "every backend is down"},
		{Prefix: pfx("10.99.1.1/32"), Serve: true},
		{Prefix: pfx("10.99.2.1/32"), Serve: true},
	}
	ann := &config.Announcements{
		Peers: map[netip.Addr][]netip.Addr{ip("10.99.0.1"): {ip("10.0.0.1")}, ip("10.99.2.1"): {}},
		Aggregates: []config.Aggregate{
			{Prefix: pfx("10.99.0.0/24"), Attrs: config.RouteAttributes{LocalPreference: &lp}, Peers: []netip.Addr{ip("10.0.0.2")}, VIPs: []netip.Addr{ip("10.99.0.1"), ip("10.99.0.2")}},
			{Prefix: pfx("10.99.3.0/24"), VIPs: []netip.Addr{ip("10.99.3.1")}},
			{Prefix: pfx("10.99.2.0/24"), VIPs: []netip.Addr{ip("10.99.2.1")}},
		},
	}
	got := Shape(routes, ann)
	want := []Route{
		{Prefix: pfx("10.99.0.1/32"), Serve: true, Peers: []netip.Addr{ip("10.0.0.1")}},
		{Prefix: pfx("10.99.0.2/32"), Serve: false, Why: "every backend is down"},
		{Prefix: pfx("10.99.1.1/32"), Serve: true},
		{Prefix: pfx("10.99.2.1/32"), Serve: false, Why: "no BGPAdvertisement sends it to a peer of this node (an aggregate may cover it)", Peers: []netip.Addr{}},
		{Prefix: pfx("10.99.0.0/24"), Attrs: config.RouteAttributes{LocalPreference: &lp}, Serve: true, Peers: []netip.Addr{ip("10.0.0.2")}},
		{Prefix: pfx("10.99.3.0/24"), Why: "no address it covers is served by this node"},
		{Prefix: pfx("10.99.2.0/24"), Serve: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Shape:\n got %+v\nwant %+v", got, want)
	}
	if got := Shape(routes, nil); !reflect.DeepEqual(got, routes) {
		t.Errorf("Shape without announcements changed the routes: %+v", got)
	}
	// Sync hands the peers to the speaker, and announces no route that
	// goes to none.
	fs := newFakeSpeaker()
	a := newAnnouncer(&config.BGP{ASN: 65001}, ip("10.0.0.10"), ip("10.0.0.10"), fs, quietLogger())
	if err := a.Sync(got); err != nil {
		t.Fatal(err)
	}
	announced := map[netip.Prefix][]netip.Addr{}
	for _, c := range fs.drained() {
		if c.op == "Announce" {
			announced[c.prefix] = c.attrs.Peers
		}
	}
	wantPeers := map[netip.Prefix][]netip.Addr{
		pfx("10.99.0.1/32"): {ip("10.0.0.1")}, pfx("10.99.1.1/32"): nil,
		pfx("10.99.0.0/24"): {ip("10.0.0.2")}, pfx("10.99.2.0/24"): nil,
	}
	if !reflect.DeepEqual(announced, wantPeers) {
		t.Errorf("announced (prefix: peers) %v, want %v", announced, wantPeers)
	}
	// Status names a restricted route's peers.
	for _, r := range a.Status().Routes {
		if r.Announced && !reflect.DeepEqual(r.Peers, wantPeers[r.Prefix]) {
			t.Errorf("status of %s: peers %v, want %v", r.Prefix, r.Peers, wantPeers[r.Prefix])
		}
	}
}
