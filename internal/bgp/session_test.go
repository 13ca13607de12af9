package bgp

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/osrg/gobgp/v4/api"

	"github.com/xlbproject/xlb/testbed/testenv"
)

// TestSpeakerAgainstGoBGPRouter runs a Speaker in a node namespace
// against a plain GoBGP router in another, joined by a veth: the route
// arrives with our next hop and attributes, attribute changes re-announce,
// Withdraw sends a real UPDATE withdrawal, PeerDown drops the session at
// once and keeps it down, PeerUp brings it back.
func TestSpeakerAgainstGoBGPRouter(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	for _, tc := range []struct {
		name      string
		routerASN uint32
	}{
		{"ebgp", 65000},
		{"ibgp", 65001},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testAgainstGoBGPRouter(t, tc.routerASN)
		})
	}
}

func testAgainstGoBGPRouter(t *testing.T, routerASN uint32) {
	const localASN = 65001
	node, rtr := newNamespace(t, "node"), newNamespace(t, "rtr")
	nodeIP, rtrIP := mustAddr("10.251.1.2"), mustAddr("10.251.1.1")
	connect(t, node, "eth0", []string{nodeIP.String()}, rtr, "eth0", []string{rtrIP.String()})
	router := startRouter(t, rtr, routerASN, rtrIP, routerPeer{Address: nodeIP, ASN: localASN})

	sp := startSpeaker(t, node, helperOptions{ASN: localASN, NextHop: nodeIP, Peers: []Peer{
		{Address: rtrIP, ASN: routerASN, HoldTime: 9 * time.Second},
	}})
	waitEstablished(t, sp, rtrIP, 15*time.Second)
	up := sp.peer(rtrIP)
	if up.Uptime <= 0 || up.Since.IsZero() || up.ASN != routerASN {
		t.Errorf("established peer status = %+v, want uptime > 0, since set, ASN %d", up, routerASN)
	}

	vip, vip2 := mustPrefix("10.99.0.1/32"), mustPrefix("10.99.0.2/32")
	attrs := Attributes{
		Communities:      []string{"65000:100", "no-export"},
		LargeCommunities: []string{"65000:1:2"},
		MED:              u32(50),
		LocalPref:        u32(200),
	}
	if err := sp.Announce(vip, attrs); err != nil {
		t.Fatal(err)
	}
	if err := sp.Announce(vip2, Attributes{}); err != nil {
		t.Fatal(err)
	}
	ibgp := routerASN == localASN
	wantRoute := func(lp *uint32, med uint32, comm []uint32) func() (bool, string) {
		return func() (bool, string) {
			rr, ok := router.rib(t)[vip]
			if !ok {
				return false, "no route"
			}
			okAttrs := rr.NextHop == nodeIP &&
				slices.Equal(rr.Communities, comm) &&
				slices.Equal(rr.Large, []string{"65000:1:2"}) &&
				rr.MED != nil && *rr.MED == med
			if ibgp {
				okAttrs = okAttrs && rr.LocalPref != nil && *rr.LocalPref == *lp && rr.ASPath == ""
			} else {
				// LOCAL_PREF never crosses an eBGP session; the AS path
				// is ours alone.
				okAttrs = okAttrs && rr.LocalPref == nil && rr.ASPath == fmt.Sprint(localASN)
			}
			return okAttrs, rr.String()
		}
	}
	testenv.Eventually(t, 5*time.Second, "route with attributes on the router", wantRoute(u32(200), 50, []uint32{65000<<16 | 100, 0xFFFFFF01}))
	testenv.Eventually(t, 5*time.Second, "second route on the router", func() (bool, string) {
		rr, ok := router.rib(t)[vip2]
		return ok && rr.NextHop == nodeIP, rr.String()
	})
	testenv.Eventually(t, 5*time.Second, "both routes counted as sent", func() (bool, string) {
		c := sp.peer(rtrIP).Counters
		return c != nil && c.PrefixesSent == 2, fmt.Sprintf("counters %+v", c)
	})

	// Same attributes again: nothing to do. Changed: re-announced.
	if err := sp.Announce(vip, attrs); err != nil {
		t.Fatal(err)
	}
	attrs.MED, attrs.LocalPref, attrs.Communities = u32(7), u32(300), []string{"65000:101"}
	if err := sp.Announce(vip, attrs); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "changed attributes on the router", wantRoute(u32(300), 7, []uint32{65000<<16 | 101}))

	// Withdraw: an UPDATE withdrawal on a session that stays up.
	if err := sp.Withdraw(vip); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "route withdrawn on the router", func() (bool, string) {
		_, ok := router.rib(t)[vip]
		return !ok && router.withdrawals(vip) > 0, fmt.Sprintf("in RIB %v, withdrawals received %d", ok, router.withdrawals(vip))
	})
	if _, ok := router.rib(t)[vip2]; !ok {
		t.Errorf("withdrawing %s also removed %s", vip, vip2)
	}
	if got := sp.peer(rtrIP); got.State != StateEstablished || got.Flaps != 0 {
		t.Errorf("after withdraw: peer %+v, want established with no flaps (a withdrawal is no session reset)", got)
	}
	if err := sp.Withdraw(vip); err != nil {
		t.Errorf("withdrawing twice: %v", err)
	}
	if got := sp.Announced(); len(got) != 1 || got[0].Prefix != vip2 || got[0].NextHop != nodeIP {
		t.Errorf("Announced() = %+v, want only %s via %s", got, vip2, nodeIP)
	}

	// PeerDown: the session leaves Established at once, the router drops
	// our routes, and it stays down.
	start := time.Now()
	if err := sp.PeerDown(rtrIP, "BFD: neighbor down"); err != nil {
		t.Fatal(err)
	}
	// Polled every 5ms to measure how fast the router notices.
	for router.peerState(t, nodeIP) == api.PeerState_SESSION_STATE_ESTABLISHED {
		if time.Since(start) > 2*time.Second {
			t.Fatal("router still established 2s after PeerDown")
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("PeerDown to session down on the router: %s", time.Since(start).Round(time.Millisecond))
	testenv.Eventually(t, 2*time.Second, "routes gone on the router after PeerDown", func() (bool, string) {
		_, has := router.rib(t)[vip2]
		return !has, "still has " + vip2.String()
	})
	// The speaker learns of the session's end from GoBGP's peer events,
	// which may come a few milliseconds after the router's view (a loaded
	// CI machine once read it still established): wait for it, then check
	// all of it.
	var down PeerStatus
	testenv.Eventually(t, 2*time.Second, "the speaker sees the session down after PeerDown", func() (bool, string) {
		down = sp.peer(rtrIP)
		return down.State != StateEstablished, fmt.Sprintf("%+v", down)
	})
	if down.ForcedDown != "BFD: neighbor down" || down.Flaps != 1 || down.Uptime != 0 {
		t.Errorf("after PeerDown: %+v", down)
	}
	if want := "forced down: BFD: neighbor down"; down.LastError != want {
		t.Errorf("LastError = %q, want %q", down.LastError, want)
	}
	time.Sleep(7 * time.Second) // longer than GoBGP's idle hold
	if st := sp.peer(rtrIP); st.State == StateEstablished {
		t.Fatalf("session came back while forced down: %+v", st)
	}

	// PeerUp: the session and the remaining route come back.
	start = time.Now()
	if err := sp.PeerUp(rtrIP); err != nil {
		t.Fatal(err)
	}
	waitEstablished(t, sp, rtrIP, 15*time.Second)
	t.Logf("PeerUp to established: %s (GoBGP's idle hold, 5s; the speaker connects as soon as it ends)", time.Since(start).Round(100*time.Millisecond))
	testenv.Eventually(t, 5*time.Second, "route back after PeerUp", func() (bool, string) {
		rr, ok := router.rib(t)[vip2]
		return ok && rr.NextHop == nodeIP, rr.String()
	})
	if st := sp.peer(rtrIP); st.ForcedDown != "" || st.Flaps != 1 {
		t.Errorf("after PeerUp: %+v", st)
	}

	// WithdrawAll keeps the session and removes every route.
	if err := sp.WithdrawAll(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "all routes withdrawn", func() (bool, string) {
		rib := router.rib(t)
		return len(rib) == 0 && router.withdrawals(vip2) > 0, fmt.Sprint(rib)
	})
	if st := sp.peer(rtrIP); st.State != StateEstablished {
		t.Errorf("after WithdrawAll: %+v, want established", st)
	}

	// PeerDown and PeerUp back to back, as when a peer restarts its BFD
	// session at once: GoBGP drops the second admin request while the
	// first is queued, and the session must still come back.
	for i := range 3 {
		if err := sp.PeerDown(rtrIP, "BFD: neighbor down"); err != nil {
			t.Fatal(err)
		}
		if err := sp.PeerUp(rtrIP); err != nil {
			t.Fatal(err)
		}
		start = time.Now()
		waitEstablished(t, sp, rtrIP, 20*time.Second)
		t.Logf("down and up back to back (%d): established again after %s", i+1, time.Since(start).Round(100*time.Millisecond))
	}
}

func waitEstablished(t *testing.T, sp *remoteSpeaker, addr netip.Addr, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, "session with "+addr.String()+" established", func() (bool, string) {
		for _, p := range sp.Peers() {
			if p.Address == addr {
				return p.State == StateEstablished, fmt.Sprintf("%+v", p)
			}
		}
		return false, "peer missing"
	})
}
