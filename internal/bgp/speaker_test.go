package bgp

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	gobgp "github.com/osrg/gobgp/v4/pkg/packet/bgp"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newTestSpeaker(t *testing.T, peers ...Peer) *Speaker {
	t.Helper()
	s, err := New(Options{ASN: 65001, NextHop: mustAddr("10.0.1.2"), Peers: peers, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAnnounceRejectsBadInput(t *testing.T) {
	s := newTestSpeaker(t)
	for _, tc := range []struct {
		prefix  netip.Prefix
		attrs   Attributes
		wantErr string
	}{
		{netip.Prefix{}, Attributes{}, "invalid prefix"},
		{mustPrefix("2001:db8::1/128"), Attributes{}, "bgp: announce 2001:db8::1/128: the node has no IPv6 address to announce it with as next hop (set node.address6)"},
		{mustPrefix("::ffff:10.99.0.1/128"), Attributes{}, "IPv4-mapped"},
		{mustPrefix("2001:db8::1/64"), Attributes{}, "host bits set (did you mean 2001:db8::/64?)"},
		{mustPrefix("10.99.0.1/24"), Attributes{}, "host bits set (did you mean 10.99.0.0/24?)"},
		{mustPrefix("10.99.0.1/32"), Attributes{Communities: []string{"x"}}, `announce 10.99.0.1/32: communities[0]: community "x"`},
	} {
		err := s.Announce(tc.prefix, tc.attrs)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("Announce(%s, %+v) = %v, want %q", tc.prefix, tc.attrs, err, tc.wantErr)
		}
	}
	if err := s.Withdraw(mustPrefix("10.99.0.1/24")); err == nil {
		t.Error("Withdraw accepted a prefix with host bits")
	}
	if got := s.Announced(); len(got) != 0 {
		t.Errorf("rejected announcements recorded: %+v", got)
	}
}

func TestPeerControlNeedsKnownPeer(t *testing.T) {
	s := newTestSpeaker(t, Peer{Address: mustAddr("10.0.1.1"), ASN: 65000})
	stranger := mustAddr("10.0.1.9")
	if err := s.PeerDown(stranger, "x"); err == nil || !strings.Contains(err.Error(), "10.0.1.9 is not a configured peer") {
		t.Errorf("PeerDown(unknown) = %v", err)
	}
	if err := s.PeerUp(stranger); err == nil {
		t.Error("PeerUp(unknown) succeeded")
	}
	// Before Start PeerDown is remembered and shows in the status.
	if err := s.PeerDown(mustAddr("10.0.1.1"), "bfd down"); err != nil {
		t.Fatal(err)
	}
	st := s.Peers()
	if len(st) != 1 || st[0].ForcedDown != "bfd down" || st[0].State != StateIdle || st[0].LastError != "forced down: bfd down" {
		t.Errorf("status after PeerDown: %+v", st)
	}
	if err := s.PeerUp(mustAddr("10.0.1.1")); err != nil {
		t.Fatal(err)
	}
	if st := s.Peers(); st[0].ForcedDown != "" {
		t.Errorf("status after PeerUp: %+v", st)
	}
}

func TestSetPeersBeforeStart(t *testing.T) {
	a, b, c := mustAddr("10.0.1.1"), mustAddr("10.0.1.3"), mustAddr("10.0.1.4")
	s := newTestSpeaker(t, Peer{Address: a, ASN: 65000}, Peer{Address: b, ASN: 65000})
	if err := s.PeerDown(b, "held"); err != nil {
		t.Fatal(err)
	}
	// An invalid list changes nothing.
	if err := s.SetPeers([]Peer{{Address: a, ASN: 65000}, {Address: a, ASN: 65000}}); err == nil || !strings.Contains(err.Error(), "listed twice") {
		t.Errorf("duplicate peers accepted: %v", err)
	}
	if got := addrs(s.Peers()); !slices.Equal(got, []netip.Addr{a, b}) {
		t.Errorf("after invalid SetPeers: %v", got)
	}
	// b changes (keeps its forced-down state), a goes, c comes.
	if err := s.SetPeers([]Peer{{Address: c, ASN: 65010}, {Address: b, ASN: 65011}}); err != nil {
		t.Fatal(err)
	}
	st := s.Peers()
	if got := addrs(st); !slices.Equal(got, []netip.Addr{c, b}) {
		t.Fatalf("after SetPeers: %v", got)
	}
	if st[1].ASN != 65011 || st[1].ForcedDown != "held" || st[0].ASN != 65010 {
		t.Errorf("after SetPeers: %+v", st)
	}
}

func addrs(st []PeerStatus) []netip.Addr {
	var out []netip.Addr
	for _, p := range st {
		out = append(out, p.Address)
	}
	return out
}

// TestSpeakerRIB runs the embedded GoBGP without peers (no sockets, so
// no root needed) and checks what Announce and Withdraw put into its
// RIB, including the routes recorded before Start.
func TestSpeakerRIB(t *testing.T) {
	s := newTestSpeaker(t)
	early := mustPrefix("10.99.0.9/32")
	if err := s.Announce(early, Attributes{MED: u32(1)}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(ctx) })
	if err := s.Start(ctx); err == nil {
		t.Error("second Start succeeded")
	}

	vip := mustPrefix("10.99.0.1/32")
	attrs := Attributes{Communities: []string{"65000:100", "no-export"}, LargeCommunities: []string{"65000:1:2"}, MED: u32(50), LocalPref: u32(200)}
	if err := s.Announce(vip, attrs); err != nil {
		t.Fatal(err)
	}
	rib := speakerRIB(t, s)
	got, ok := rib[vip]
	want := "comm=[4259840100 4294967041] large=[65000:1:2] lp=200 med=50 nh=10.0.1.2 origin=0"
	if !ok || got != want {
		t.Errorf("RIB entry for %s = %q, want %q", vip, got, want)
	}
	if got := rib[early]; got != "med=1 nh=10.0.1.2 origin=0" {
		t.Errorf("route announced before Start: RIB has %q", got)
	}

	// Re-announcing with changed attributes replaces the path.
	attrs.Communities, attrs.MED = nil, nil
	if err := s.Announce(vip, attrs); err != nil {
		t.Fatal(err)
	}
	if got := speakerRIB(t, s)[vip]; got != "large=[65000:1:2] lp=200 nh=10.0.1.2 origin=0" {
		t.Errorf("after re-announce: %q", got)
	}
	routes := s.Announced()
	if len(routes) != 2 || routes[0].Prefix != vip || routes[1].Prefix != early || routes[0].Attributes.MED != nil {
		t.Errorf("Announced() = %+v", routes)
	}

	if err := s.Withdraw(vip); err != nil {
		t.Fatal(err)
	}
	rib = speakerRIB(t, s)
	if _, ok := rib[vip]; ok || len(rib) != 1 {
		t.Errorf("after Withdraw: %v", rib)
	}
	if err := s.WithdrawAll(); err != nil {
		t.Fatal(err)
	}
	if rib := speakerRIB(t, s); len(rib) != 0 || len(s.Announced()) != 0 {
		t.Errorf("after WithdrawAll: %v %v", rib, s.Announced())
	}

	// Stop, then start again: a fresh GoBGP, nothing announced.
	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(stopCtx); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if rib := speakerRIB(t, s); len(rib) != 0 {
		t.Errorf("after restart: %v", rib)
	}
}

// speakerRIB renders the speaker's GoBGP global RIB, one line per prefix.
func speakerRIB(t *testing.T, s *Speaker) map[netip.Prefix]string {
	t.Helper()
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	out := map[netip.Prefix]string{}
	err := srv.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: gobgp.RF_IPv4_UC},
		func(nlri gobgp.NLRI, paths []*apiutil.Path) {
			var parts []string
			for _, a := range paths[0].Attrs {
				switch a := a.(type) {
				case *gobgp.PathAttributeNextHop:
					parts = append(parts, "nh="+a.Value.String())
				case *gobgp.PathAttributeOrigin:
					parts = append(parts, fmt.Sprintf("origin=%d", a.Value))
				case *gobgp.PathAttributeCommunities:
					parts = append(parts, fmt.Sprintf("comm=%v", a.Value))
				case *gobgp.PathAttributeLargeCommunities:
					var l []string
					for _, c := range a.Values {
						l = append(l, LargeCommunity{c.ASN, c.LocalData1, c.LocalData2}.String())
					}
					parts = append(parts, "large=["+strings.Join(l, " ")+"]")
				case *gobgp.PathAttributeMultiExitDisc:
					parts = append(parts, fmt.Sprintf("med=%d", a.Value))
				case *gobgp.PathAttributeLocalPref:
					parts = append(parts, fmt.Sprintf("lp=%d", a.Value))
				}
			}
			// Sorted: the order GoBGP keeps attributes in is its business.
			slices.Sort(parts)
			out[netip.MustParsePrefix(nlri.String())] = strings.Join(parts, " ")
		})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPeerUpRefusedStaysHeld: when GoBGP refuses to release a held-down
// peer, the peer stays held down, so that a second PeerUp asks GoBGP
// again instead of finding nothing to do.
func TestPeerUpRefusedStaysHeld(t *testing.T) {
	peer := Peer{Address: mustAddr("10.0.1.1"), ASN: 65000}
	// Held down from the start: the session never dials out.
	s := newTestSpeaker(t, peer)
	if err := s.PeerDown(peer.Address, "bfd down"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(ctx) })
	s.mu.Lock()
	srv, gaddr := s.srv, s.peers[peer.Address].gobgpAddr
	s.mu.Unlock()

	// GoBGP loses the peer behind the speaker's back: it refuses the release.
	if err := srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: gaddr.String()}); err != nil {
		t.Fatal(err)
	}
	if err := s.PeerUp(peer.Address); err == nil {
		t.Fatal("PeerUp succeeded though GoBGP does not know the peer")
	}
	st := s.Peers()
	if st[0].ForcedDown != "bfd down" || !strings.Contains(st[0].LastError, "GoBGP refused to release it") {
		t.Errorf("status after a refused PeerUp: %+v", st[0])
	}

	// GoBGP has the peer again, still administratively down: the next
	// PeerUp must release it.
	s.mu.Lock()
	relay, standIn := s.relay, s.peers[peer.Address].standIn
	s.mu.Unlock()
	if err := srv.AddPeer(ctx, &api.AddPeerRequest{Peer: s.apiPeer(peer, true, relay, standIn)}); err != nil {
		t.Fatal(err)
	}
	if err := s.PeerUp(peer.Address); err != nil {
		t.Fatal(err)
	}
	if st := s.Peers(); st[0].ForcedDown != "" {
		t.Errorf("status after PeerUp: %+v", st[0])
	}
	// GoBGP applies the release from its own goroutine.
	deadline := time.Now().Add(5 * time.Second)
	for {
		down, ok := gobgpAdminDown(ctx, srv, gaddr)
		if ok && !down {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GoBGP holds the peer down after PeerUp (known: %v)", ok)
		}
		time.Sleep(adminCheckEvery)
	}
}
