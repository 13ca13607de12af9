package bgp

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/testbed/testenv"
)

// TestPeerRoutesNotImported: a peer announces tens of thousands of
// prefixes. They arrive (the session counts them), but the speaker's RIB
// takes in none, and none is passed on to its other peer: a node between
// two eBGP routers is no transit for them.
func TestPeerRoutesNotImported(t *testing.T) {
	requireRoot(t)
	// Not parallel, nor TestPrefixLimit: their test routers would start
	// while other tests' routers run, and GoBGP's StartBgp writes package
	// variables (route selection options) that every GoBGP server in the
	// process reads, which -race reports.
	const n = 20000
	node, rtr := newNamespace(t, "node"), newNamespace(t, "rtr")
	nodeIP, floodIP, routerIP := mustAddr("10.251.8.2"), mustAddr("10.251.8.1"), mustAddr("10.251.8.3")
	connect(t, node, "eth0", []string{nodeIP.String()}, rtr, "eth0", []string{floodIP.String(), routerIP.String()})
	flood := startFloodPeer(t, rtr, floodIP, 65000, n)
	router := startRouter(t, rtr, 65002, routerIP, routerPeer{Address: nodeIP, ASN: 65001})
	sp := startSpeaker(t, node, helperOptions{ASN: 65001, NextHop: nodeIP, Quiet: true, Peers: []Peer{
		{Address: floodIP, ASN: 65000, MaxPrefixes: 2 * n},
		{Address: routerIP, ASN: 65002},
	}})
	vip := mustPrefix("10.99.8.1/32")
	if err := sp.Announce(vip, Attributes{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, fmt.Sprintf("%d prefixes received from %s", n, flood), func() (bool, string) {
		p := sp.peer(floodIP)
		return p.State == StateEstablished && p.Counters != nil && p.Counters.PrefixesReceived == n, fmt.Sprintf("%+v", p)
	})
	testenv.Eventually(t, 10*time.Second, "the VIP on the router", func() (bool, string) {
		_, ok := router.rib(t)[vip]
		return ok, "not there"
	})

	if got, err := sp.learned(); err != nil || got != 0 {
		t.Errorf("the speaker's RIB holds %d routes learned from its peers (err %v), want none", got, err)
	}
	// What GoBGP sends the router, and what the router took.
	var toRouter *Counters
	testenv.Eventually(t, 5*time.Second, "counters of the router's session", func() (bool, string) {
		toRouter = sp.peer(routerIP).Counters
		return toRouter != nil, "unknown"
	})
	if toRouter.PrefixesSent != 1 {
		t.Errorf("the speaker advertises %d prefixes to the other peer, want 1 (%s)", toRouter.PrefixesSent, vip)
	}
	rib := router.rib(t)
	if _, ok := rib[vip]; !ok || len(rib) != 1 {
		var leaked []string
		for p := range rib {
			if p != vip && len(leaked) < 3 {
				leaked = append(leaked, p.String())
			}
		}
		t.Errorf("the other peer's RIB has %d routes from this node, want only %s (e.g. %s)", len(rib), vip, strings.Join(leaked, " "))
	}
	if p := sp.peer(floodIP); p.Flaps != 0 || p.PrefixLimit != nil {
		t.Errorf("flooding peer's session disturbed: %+v", p)
	}
}

// TestPrefixLimit: a peer that sends more prefixes than maxPrefixes has
// its session closed with a Cease (maximum number of prefixes reached),
// the log and the status say so and what to do, the session re-forms
// after the hold (and is closed again), and a raised limit lets it up.
func TestPrefixLimit(t *testing.T) {
	requireRoot(t)
	const n, limit = 3000, 1000
	node, rtr := newNamespace(t, "node"), newNamespace(t, "rtr")
	nodeIP, floodIP, goodIP := mustAddr("10.251.9.2"), mustAddr("10.251.9.1"), mustAddr("10.251.9.3")
	connect(t, node, "eth0", []string{nodeIP.String()}, rtr, "eth0", []string{floodIP.String(), goodIP.String()})
	flood := startFloodPeer(t, rtr, floodIP, 65000, n)
	startRouter(t, rtr, 65002, goodIP, routerPeer{Address: nodeIP, ASN: 65001})
	peers := []Peer{{Address: floodIP, ASN: 65000, MaxPrefixes: limit}, {Address: goodIP, ASN: 65002}}
	sp := startSpeaker(t, node, helperOptions{ASN: 65001, NextHop: nodeIP, Quiet: true, PrefixLimitRetry: 2 * time.Second, Peers: peers})
	waitEstablished(t, sp, goodIP, 15*time.Second)

	const cease = "Cease / maximum number of prefixes reached"
	var held PeerStatus
	testenv.Eventually(t, 30*time.Second, "session closed for its prefix limit", func() (bool, string) {
		held = sp.peer(floodIP)
		return held.PrefixLimit != nil && held.State != StateEstablished, fmt.Sprintf("%+v", held)
	})
	if h := held.PrefixLimit; h.Limit != limit || h.Times != 1 || !h.RetryAt.After(h.At) || held.MaxPrefixes != limit {
		t.Errorf("prefix limit hold = %+v (maxPrefixes %d), want limit %d, the first time, a retry after the hold", h, held.MaxPrefixes, limit)
	}
	if !strings.Contains(held.LastError, cease) || !strings.Contains(held.LastError, fmt.Sprint(limit)) {
		t.Errorf("last error %q, want it to name the NOTIFICATION (%s) and the limit", held.LastError, cease)
	}
	testenv.Eventually(t, 5*time.Second, "the NOTIFICATION at the peer", func() (bool, string) {
		notes := flood.notifications()
		return slices.Contains(notes, cease), fmt.Sprint(notes)
	})
	log := sp.logText()
	var line string
	for l := range strings.Lines(log) {
		if strings.Contains(l, "it sent more prefixes than its limit allows") {
			line = l
			break
		}
	}
	for _, want := range []string{"level=WARN", "peer=" + floodIP.String(), fmt.Sprintf("maxPrefixes=%d", limit), "retryIn=", "fix=", "raise maxPrefixes", "imports no routes"} {
		if !strings.Contains(line, want) {
			t.Errorf("log line %q lacks %q", line, want)
		}
	}
	t.Logf("log: %s", strings.TrimSpace(line))
	t.Logf("status: state %s, last error %q, hold %+v", held.State, held.LastError, *held.PrefixLimit)
	if strings.Contains(log, "level=WARN msg=\"prefix limit reached\"") {
		t.Errorf("GoBGP's own warning went to the log too:\n%s", log)
	}

	// After the hold the session re-forms, and the peer goes over the
	// limit again: the next hold is longer.
	testenv.Eventually(t, 30*time.Second, "second hold", func() (bool, string) {
		held = sp.peer(floodIP)
		return held.PrefixLimit != nil && held.PrefixLimit.Times == 2, fmt.Sprintf("%+v", held)
	})
	if sessions, _ := flood.counts(); sessions < 2 {
		t.Errorf("flood peer saw %d sessions, want a second one after the hold", sessions)
	}
	if h := held.PrefixLimit; h.RetryAt.Sub(h.At) < 3*time.Second {
		t.Errorf("second hold %+v: want about twice the first (2s)", h)
	}
	if g := sp.peer(goodIP); g.State != StateEstablished || g.Flaps != 0 {
		t.Errorf("the other peer's session was disturbed: %+v", g)
	}

	// A limit above what the peer sends: the session comes up at once
	// and stays.
	peers[0].MaxPrefixes = 2 * n
	if err := sp.SetPeers(peers); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 15*time.Second, "session up with every prefix", func() (bool, string) {
		p := sp.peer(floodIP)
		return p.State == StateEstablished && p.PrefixLimit == nil && p.Counters != nil && p.Counters.PrefixesReceived == n, fmt.Sprintf("%+v", p)
	})
}

// TestCountersWhileBusy: while GoBGP is busy with a peer's UPDATEs and
// answers no query, Peers still reports the session's counters (those
// GoBGP gave last, with their time), never zeros; once GoBGP answers
// again they move on.
func TestCountersWhileBusy(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	const n = 20000
	node, rtr := newNamespace(t, "node"), newNamespace(t, "rtr")
	nodeIP, floodIP := mustAddr("10.251.10.2"), mustAddr("10.251.10.1")
	connect(t, node, "eth0", []string{nodeIP.String()}, rtr, "eth0", []string{floodIP.String()})
	flood := startFloodPeer(t, rtr, floodIP, 65000, n)
	sp := startSpeaker(t, node, helperOptions{ASN: 65001, NextHop: nodeIP, Quiet: true, Peers: []Peer{
		{Address: floodIP, ASN: 65000, MaxPrefixes: 2 * n},
	}})
	var before PeerStatus
	testenv.Eventually(t, 60*time.Second, fmt.Sprintf("%d prefixes received from %s", n, flood), func() (bool, string) {
		before = sp.peer(floodIP)
		return before.Counters != nil && before.Counters.PrefixesReceived == n, fmt.Sprintf("%+v", before)
	})

	// The peer announces its prefixes again and again; GoBGP is held in
	// the middle of one of those UPDATEs.
	flood.setChurn(true)
	defer flood.setChurn(false)
	if err := sp.stall(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		peers, stalled := sp.peersStalled()
		var p PeerStatus
		for _, q := range peers {
			if q.Address == floodIP {
				p = q
			}
		}
		switch c := p.Counters; {
		case p.State != StateEstablished:
			t.Errorf("call %d: session %s while GoBGP is busy, want established: %+v", i+1, p.State, p)
		case c == nil:
			t.Errorf("call %d: counters unknown while GoBGP is busy, want the last ones it gave (%d prefixes received)", i+1, n)
		case c.PrefixesReceived != n || c.MessagesReceived == 0 || c.UpdatesReceived == 0 || c.At.IsZero():
			t.Errorf("call %d: counters %+v while GoBGP is busy, want the last ones it gave: %d prefixes received, messages counted, with their time", i+1, c, n)
		}
		if !stalled {
			sp.unstall()
			t.Fatalf("call %d: Peers returned only once GoBGP was no longer held: it waited for GoBGP, and the call shows nothing about a busy GoBGP", i+1)
		}
	}
	sp.unstall()
	testenv.Eventually(t, 30*time.Second, "counters read again after GoBGP answers", func() (bool, string) {
		c := sp.peer(floodIP).Counters
		return c != nil && c.At.After(before.Counters.At) && c.UpdatesReceived > before.Counters.UpdatesReceived, fmt.Sprintf("%+v", c)
	})
}
