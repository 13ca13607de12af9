package announce

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/bfd"
	"github.com/xlbproject/xlb/internal/bgp"
	"github.com/xlbproject/xlb/internal/config"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// call is one call the announcer made on its speaker.
type call struct {
	op     string
	peer   netip.Addr
	prefix netip.Prefix
	reason string
	attrs  bgp.Attributes // of an Announce
	at     time.Time
	err    error // what the speaker answered
}

func (c call) String() string {
	switch {
	case c.peer.IsValid():
		return fmt.Sprintf("%s(%s %q)", c.op, c.peer, c.reason)
	case c.prefix.IsValid():
		return fmt.Sprintf("%s(%s)", c.op, c.prefix)
	}
	return c.op + "()"
}

// errRefused is the fake speaker's answer to a call it fails.
var errRefused = errors.New("refused by the fake speaker")

// fakeSpeaker records the calls; it stands in for *bgp.Speaker. It
// fails the calls fail asks it to.
type fakeSpeaker struct {
	calls chan call

	mu      sync.Mutex
	fails   map[string]int // op → how many of its next calls fail; -1: all
	failErr error          // what a failed call returns; errRefused if nil
	peers   []bgp.PeerStatus
}

func newFakeSpeaker() *fakeSpeaker {
	return &fakeSpeaker{calls: make(chan call, 100), fails: map[string]int{}}
}

// fail makes the next n calls of op fail (n = -1: all, 0: none).
func (f *fakeSpeaker) fail(op string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fails[op] = n
}

func (f *fakeSpeaker) record(c call) error {
	c.at = time.Now()
	f.mu.Lock()
	if n := f.fails[c.op]; n != 0 {
		c.err = f.failErr
		if c.err == nil {
			c.err = errRefused
		}
		if n > 0 {
			f.fails[c.op] = n - 1
		}
	}
	f.mu.Unlock()
	f.calls <- c
	return c.err
}

func (f *fakeSpeaker) Start(context.Context) error { return f.record(call{op: "Start"}) }
func (f *fakeSpeaker) Stop(context.Context) error  { return f.record(call{op: "Stop"}) }
func (f *fakeSpeaker) StopGraceful(context.Context) error {
	return f.record(call{op: "StopGraceful"})
}
func (f *fakeSpeaker) Announce(p netip.Prefix, a bgp.Attributes) error {
	return f.record(call{op: "Announce", prefix: p, attrs: a})
}
func (f *fakeSpeaker) Withdraw(p netip.Prefix) error {
	return f.record(call{op: "Withdraw", prefix: p})
}
func (f *fakeSpeaker) WithdrawAll() error        { return f.record(call{op: "WithdrawAll"}) }
func (f *fakeSpeaker) SetPeers([]bgp.Peer) error { return f.record(call{op: "SetPeers"}) }
func (f *fakeSpeaker) PeerDown(peer netip.Addr, reason string) error {
	return f.record(call{op: "PeerDown", peer: peer, reason: reason})
}
func (f *fakeSpeaker) PeerUp(peer netip.Addr) error { return f.record(call{op: "PeerUp", peer: peer}) }
func (f *fakeSpeaker) Peers() []bgp.PeerStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.peers
}

// next returns the next call, failing the test if none comes in time.
func (f *fakeSpeaker) next(t *testing.T, within time.Duration) call {
	t.Helper()
	select {
	case c := <-f.calls:
		return c
	case <-time.After(within):
		t.Fatalf("no call on the speaker within %s", within)
		return call{}
	}
}

// drained returns the calls made so far.
func (f *fakeSpeaker) drained() []call {
	var out []call
	for {
		select {
		case c := <-f.calls:
			out = append(out, c)
		default:
			return out
		}
	}
}

var (
	node = netip.MustParseAddr("10.0.1.2")
	vip  = netip.MustParsePrefix("10.99.0.1/32")
)

func testAnnouncer(t *testing.T, drain time.Duration) (*Announcer, *fakeSpeaker) {
	t.Helper()
	cfg := &config.BGP{ASN: 65001, DrainTime: drain, Peers: []config.Peer{{Address: netip.MustParseAddr("10.0.1.1"), ASN: 65000}}}
	fs := newFakeSpeaker()
	return newAnnouncer(cfg, node, node, fs, quietLogger()), fs
}

// TestShutdownDrains: on shutdown the routes are withdrawn at once, the
// sessions stay up for the drain time (so the routers move the traffic
// away while this node still forwards), and only then are they closed.
func TestShutdownDrains(t *testing.T) {
	const drain = 300 * time.Millisecond
	ops := func(cs []call) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.op)
		}
		return out
	}

	t.Run("waits drainTime", func(t *testing.T) {
		a, fs := testAnnouncer(t, drain)
		if err := a.Sync([]Route{{Prefix: vip, Serve: true}}); err != nil {
			t.Fatal(err)
		}
		fs.drained()
		if err := a.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		cs := fs.drained()
		if got := ops(cs); !reflect.DeepEqual(got, []string{"WithdrawAll", "Stop"}) {
			t.Fatalf("calls %v, want WithdrawAll then Stop", got)
		}
		if gap := cs[1].at.Sub(cs[0].at); gap < drain {
			t.Errorf("sessions closed %s after the withdrawal, before the drain time %s", gap, drain)
		}
	})

	t.Run("reload changes it", func(t *testing.T) {
		a, fs := testAnnouncer(t, 0)
		longer := 2 * drain
		cfg := &config.BGP{ASN: 65001, DrainTime: longer, Peers: []config.Peer{{Address: netip.MustParseAddr("10.0.1.1"), ASN: 65000}}}
		if err := a.Reconfigure(context.Background(), cfg); err != nil {
			t.Fatal(err)
		}
		if err := a.Sync([]Route{{Prefix: vip, Serve: true}}); err != nil {
			t.Fatal(err)
		}
		fs.drained()
		if err := a.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		cs := fs.drained()
		if len(cs) != 2 || cs[1].at.Sub(cs[0].at) < longer {
			t.Errorf("after a reload with drainTime %s: calls %v, %v apart", longer, cs, cs[len(cs)-1].at.Sub(cs[0].at))
		}
	})

	t.Run("nothing announced", func(t *testing.T) {
		// Nothing to move away: no reason to wait.
		a, fs := testAnnouncer(t, time.Hour)
		if err := a.Sync([]Route{{Prefix: vip, Serve: false, Why: "no healthy backend"}}); err != nil {
			t.Fatal(err)
		}
		done := make(chan error)
		go func() { done <- a.Shutdown(context.Background()) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Shutdown with nothing announced waits for the drain time")
		}
		if got := ops(fs.drained()); !reflect.DeepEqual(got, []string{"WithdrawAll", "Stop"}) {
			t.Errorf("calls %v", got)
		}
	})

	t.Run("canceled", func(t *testing.T) {
		// A second signal (ctx) cuts the drain short; the sessions are
		// still closed properly.
		a, fs := testAnnouncer(t, time.Hour)
		if err := a.Sync([]Route{{Prefix: vip, Serve: true}}); err != nil {
			t.Fatal(err)
		}
		fs.drained()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- a.Shutdown(ctx) }()
		time.Sleep(50 * time.Millisecond)
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Shutdown ignores its context")
		}
		if got := ops(fs.drained()); !reflect.DeepEqual(got, []string{"WithdrawAll", "Stop"}) {
			t.Errorf("calls %v, want WithdrawAll then Stop", got)
		}
	})
}

// TestRestart: with graceful restart on a peer, a restart withdraws
// nothing and does not wait: the sessions end without a NOTIFICATION;
// without, it is Shutdown (withdraw, drain, Cease).
func TestRestart(t *testing.T) {
	const drain = 300 * time.Millisecond
	for _, tc := range []struct {
		name     string
		graceful *config.GracefulRestart
		want     []string
	}{
		{"with graceful restart", &config.GracefulRestart{RestartTime: config.DefaultRestartTime}, []string{"StopGraceful"}},
		{"without", nil, []string{"WithdrawAll", "Stop"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &config.BGP{ASN: 65001, DrainTime: drain, Peers: []config.Peer{
				{Address: netip.MustParseAddr("10.0.1.1"), ASN: 65000},
				{Address: netip.MustParseAddr("10.0.1.3"), ASN: 65000, GracefulRestart: tc.graceful},
			}}
			fs := newFakeSpeaker()
			a := newAnnouncer(cfg, node, node, fs, quietLogger())
			if err := a.Sync([]Route{{Prefix: vip, Serve: true}}); err != nil {
				t.Fatal(err)
			}
			fs.drained()
			if err := a.Restart(context.Background()); err != nil {
				t.Fatal(err)
			}
			cs := fs.drained()
			var got []string
			for _, c := range cs {
				got = append(got, c.op)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("calls %v, want %v", got, tc.want)
			}
			// The drain, where there is one, is covered by TestShutdownDrains.
		})
	}
	// A shutdown (SIGUSR1) drains also with graceful restart.
	cfg := &config.BGP{ASN: 65001, Peers: []config.Peer{{Address: netip.MustParseAddr("10.0.1.1"), ASN: 65000,
		GracefulRestart: &config.GracefulRestart{RestartTime: config.DefaultRestartTime}}}}
	fs := newFakeSpeaker()
	a := newAnnouncer(cfg, node, node, fs, quietLogger())
	if err := a.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range fs.drained() {
		got = append(got, c.op)
	}
	if !reflect.DeepEqual(got, []string{"WithdrawAll", "Stop"}) {
		t.Errorf("Shutdown with graceful restart: calls %v, want WithdrawAll then Stop", got)
	}
}

// TestFollowBFD drives the announcer's BFD follower with events as the
// BFD manager sends them and checks what it does to the BGP sessions.
func TestFollowBFD(t *testing.T) {
	a, fs := testAnnouncer(t, 0)
	events := make(chan bfd.Event)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		a.followBFD(ctx, events)
		close(stopped)
	}()
	defer func() {
		cancel()
		<-stopped
	}()
	peer, other := netip.MustParseAddr("10.0.1.1"), netip.MustParseAddr("10.0.1.9")
	send := func(ev bfd.Event) {
		t.Helper()
		select {
		case events <- ev:
		case <-time.After(5 * time.Second):
			t.Fatal("followBFD does not read its events")
		}
	}
	// sentinel proves that the events before it caused no call: they
	// are handled in order, so its PeerUp must be the next call.
	sentinel := func(what string) {
		t.Helper()
		send(bfd.Event{Peer: other, State: bfd.StateUp, Previous: bfd.StateInit})
		if c := fs.next(t, 5*time.Second); c.op != "PeerUp" || c.peer != other {
			t.Fatalf("%s: speaker got %v", what, c)
		}
	}

	// Up: the BGP session may run.
	send(bfd.Event{Peer: peer, State: bfd.StateUp, Previous: bfd.StateDown})
	if c := fs.next(t, 5*time.Second); c.op != "PeerUp" || c.peer != peer {
		t.Fatalf("BFD up: speaker got %v, want PeerUp(%s)", c, peer)
	}

	// A failure while Up: the session goes down at once, with the
	// reason, and is released bfdResetHold later (a reset, not a
	// lock-out).
	for _, diag := range []bfd.Diag{bfd.DiagDetectionTimeExpired, bfd.DiagNeighborDown} {
		send(bfd.Event{Peer: peer, State: bfd.StateDown, Previous: bfd.StateUp, Diag: diag, RemoteDiag: bfd.DiagNone})
		down := fs.next(t, 5*time.Second)
		if down.op != "PeerDown" || down.peer != peer || down.reason != fmt.Sprintf("BFD session down (%s)", diag) {
			t.Fatalf("BFD down (%s): speaker got %v", diag, down)
		}
		up := fs.next(t, bfdResetHold+5*time.Second)
		if up.op != "PeerUp" || up.peer != peer {
			t.Fatalf("after BFD down (%s): speaker got %v, want PeerUp(%s)", diag, up, peer)
		}
		if gap := up.at.Sub(down.at); gap < bfdResetHold {
			t.Errorf("BFD down (%s): session released after %s, before bfdResetHold (%s)", diag, gap, bfdResetHold)
		}
	}

	// The peer turned BFD off on purpose (RFC 5882 §3.2): BGP is left
	// alone.
	send(bfd.Event{Peer: peer, State: bfd.StateDown, Previous: bfd.StateUp, Diag: bfd.DiagNeighborDown, RemoteDiag: bfd.DiagAdminDown})
	sentinel("peer's BFD administratively down")

	// Down without having been Up (a session that never came up, or
	// went from Init to Down): no BGP session to take down.
	send(bfd.Event{Peer: peer, State: bfd.StateDown, Previous: bfd.StateInit, Diag: bfd.DiagDetectionTimeExpired})
	sentinel("BFD down from Init")

	if got := fs.drained(); len(got) != 0 {
		t.Errorf("unexpected calls: %v", got)
	}
	close(events)
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Error("followBFD still runs after its events closed")
	}
}

// TestRouteAttributesFromConfig: a service's bgp section in the
// configuration file reaches the speaker's route as it was written
// (canonical form), a reload with other attributes re-announces, and a
// service that cannot be served is withdrawn.
func TestRouteAttributesFromConfig(t *testing.T) {
	const file = `
node: {interface: eth0, address: 10.0.1.2}
bgp:
  asn: 65001
  peers: [{address: 10.0.1.1, asn: 65000}]
services:
  - name: web
    vip: 10.99.0.1
    port: 80
    bgp:
      communities: [NO-EXPORT, "65000:100"]
      largeCommunities: ["65000:1:2", "4200000000:7:8"]
      localPreference: 200
      med: 10
    backends: [{address: 10.0.3.2}]
  - name: web-tls
    vip: 10.99.0.1
    port: 443
    bgp:
      communities: [no-export, "65000:100"]
      largeCommunities: ["4200000000:7:8", "65000:1:2"]
      localPreference: 200
      med: 10
    backends: [{address: 10.0.3.2}]
  - name: plain
    vip: 10.99.0.2
    port: 80
    backends: [{address: 10.0.3.3}]
`
	cfg, err := config.Parse("xlb.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(cfg.BGP, cfg.Node.Address, netip.Addr{}, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	sp := a.sp.(*bgp.Speaker)
	routes := func(c *config.Config, serve bool) []Route {
		var out []Route
		for _, s := range c.Services {
			out = append(out, Route{Prefix: netip.PrefixFrom(s.VIP, 32), Attrs: s.BGP, Serve: serve, Why: "no healthy backend"})
		}
		return out
	}
	// The speaker records what is announced before it starts: no
	// sockets needed to see what it would send.
	if err := a.Sync(routes(cfg, true)); err != nil {
		t.Fatal(err)
	}
	want := []bgp.Route{
		{Prefix: vip, NextHop: node, Attributes: bgp.Attributes{
			Communities:      []string{"65000:100", "no-export"},
			LargeCommunities: []string{"65000:1:2", "4200000000:7:8"},
			LocalPref:        u32(200), MED: u32(10)}},
		{Prefix: netip.MustParsePrefix("10.99.0.2/32"), NextHop: node, Attributes: bgp.Attributes{}},
	}
	if got := sp.Announced(); !routesEqual(got, want) {
		t.Errorf("announced:\n%s\nwant:\n%s", fmtRoutes(got), fmtRoutes(want))
	}

	// A reload with other attributes re-announces the route.
	changed := strings.Replace(strings.Replace(file, "med: 10", "med: 20", 2), `[NO-EXPORT, "65000:100"]`, `["65000:101"]`, 1)
	changed = strings.Replace(changed, `[no-export, "65000:100"]`, `["65000:101"]`, 1)
	cfg2, err := config.Parse("xlb.yaml", []byte(changed))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(routes(cfg2, true)); err != nil {
		t.Fatal(err)
	}
	want[0].Attributes.Communities, want[0].Attributes.MED = []string{"65000:101"}, u32(20)
	if got := sp.Announced(); !routesEqual(got, want) {
		t.Errorf("after reload:\n%s\nwant:\n%s", fmtRoutes(got), fmtRoutes(want))
	}

	// Nothing to serve: withdrawn, and the status says why.
	if err := a.Sync(routes(cfg2, false)); err != nil {
		t.Fatal(err)
	}
	if got := sp.Announced(); len(got) != 0 {
		t.Errorf("after withdrawal: %s", fmtRoutes(got))
	}
	st := a.Status()
	if len(st.Routes) != 2 || st.Routes[0].Announced || st.Routes[0].Reason != "no healthy backend" {
		t.Errorf("status routes: %+v", st.Routes)
	}
}

func u32(v uint32) *uint32 { return &v }

func routesEqual(a, b []bgp.Route) bool {
	return fmtRoutes(a) == fmtRoutes(b)
}

func fmtRoutes(rs []bgp.Route) string {
	var b strings.Builder
	for _, r := range rs {
		at := r.Attributes
		deref := func(p *uint32) string {
			if p == nil {
				return "-"
			}
			return fmt.Sprint(*p)
		}
		fmt.Fprintf(&b, "  %s via %s comm %v large %v lp %s med %s\n", r.Prefix, r.NextHop, at.Communities, at.LargeCommunities, deref(at.LocalPref), deref(at.MED))
	}
	return b.String()
}

// quickRetries shortens a's retry timing for a test.
func quickRetries(a *Announcer, first, max time.Duration) {
	a.retryFirst, a.retryMax = first, max
}

// quiet fails the test if the speaker gets a call within d.
func (f *fakeSpeaker) quiet(t *testing.T, d time.Duration) {
	t.Helper()
	time.Sleep(d)
	if got := f.drained(); len(got) != 0 {
		t.Errorf("unexpected calls: %v", got)
	}
}

// expect returns the next call, failing the test unless it is op on
// prefix or peer and answered with err (nil: success).
func (f *fakeSpeaker) expect(t *testing.T, op string, err error, within time.Duration) call {
	t.Helper()
	c := f.next(t, within)
	if c.op != op || !errors.Is(c.err, err) || (err == nil && c.err != nil) {
		t.Fatalf("speaker got %v (error %v), want %s (error %v)", c, c.err, op, err)
	}
	return c
}

func routeStatus(t *testing.T, a *Announcer, p netip.Prefix) (announced bool, reason string) {
	t.Helper()
	for _, r := range a.Status().Routes {
		if r.Prefix == p {
			return r.Announced, r.Reason
		}
	}
	t.Fatalf("%s missing from the status", p)
	return false, ""
}

// TestFailedRoutesRetried: a route the speaker refuses to announce or
// withdraw is not taken as done: it is tried again at the next Sync, and
// by itself with a growing delay when no Sync comes, and the status
// shows the error until it clears.
func TestFailedRoutesRetried(t *testing.T) {
	const first, most = 50 * time.Millisecond, 200 * time.Millisecond
	serve := []Route{{Prefix: vip, Serve: true}}
	idle := []Route{{Prefix: vip, Why: "every backend is down"}}

	t.Run("announce, without a Sync", func(t *testing.T) {
		a, fs := testAnnouncer(t, 0)
		quickRetries(a, first, most)
		fs.fail("Announce", 2)
		if err := a.Sync(serve); !errors.Is(err, errRefused) {
			t.Fatalf("Sync = %v, want the speaker's error", err)
		}
		c0 := fs.expect(t, "Announce", errRefused, time.Second)
		if on, why := routeStatus(t, a, vip); on || !strings.Contains(why, errRefused.Error()) {
			t.Errorf("status after the failure: announced %v, reason %q", on, why)
		}
		c1 := fs.expect(t, "Announce", errRefused, 5*time.Second)
		c2 := fs.expect(t, "Announce", nil, 5*time.Second)
		if g := c1.at.Sub(c0.at); g < first {
			t.Errorf("first retry after %s, want %s", g, first)
		}
		if g := c2.at.Sub(c1.at); g < 2*first {
			t.Errorf("second retry after %s, want %s", g, 2*first)
		}
		if on, why := routeStatus(t, a, vip); !on || why != "" {
			t.Errorf("status after the retry: announced %v, reason %q", on, why)
		}
		fs.quiet(t, 3*most)
	})

	t.Run("announce, at the next Sync", func(t *testing.T) {
		a, fs := testAnnouncer(t, 0)
		quickRetries(a, time.Hour, time.Hour)
		fs.fail("Announce", 1)
		if err := a.Sync(serve); err == nil {
			t.Fatal("Sync hid the speaker's error")
		}
		if err := a.Sync(serve); err != nil {
			t.Fatal(err)
		}
		fs.expect(t, "Announce", errRefused, time.Second)
		fs.expect(t, "Announce", nil, time.Second)
		if on, _ := routeStatus(t, a, vip); !on {
			t.Error("status: not announced")
		}
	})

	t.Run("withdraw", func(t *testing.T) {
		a, fs := testAnnouncer(t, 0)
		quickRetries(a, first, most)
		if err := a.Sync(serve); err != nil {
			t.Fatal(err)
		}
		fs.expect(t, "Announce", nil, time.Second)
		fs.fail("Withdraw", 1)
		if err := a.Sync(idle); !errors.Is(err, errRefused) {
			t.Fatalf("Sync = %v, want the speaker's error", err)
		}
		fs.expect(t, "Withdraw", errRefused, time.Second)
		if on, why := routeStatus(t, a, vip); !on || !strings.Contains(why, "every backend is down") || !strings.Contains(why, errRefused.Error()) {
			t.Errorf("status after the failure: announced %v, reason %q", on, why)
		}
		fs.expect(t, "Withdraw", nil, 5*time.Second)
		if on, why := routeStatus(t, a, vip); on || why != "every backend is down" {
			t.Errorf("status after the retry: announced %v, reason %q", on, why)
		}
		fs.quiet(t, 3*most)
	})

	t.Run("backs off, stops at Shutdown", func(t *testing.T) {
		a, fs := testAnnouncer(t, 0)
		quickRetries(a, first/2, most/2)
		fs.fail("Announce", -1)
		if err := a.Sync(serve); err == nil {
			t.Fatal("Sync hid the speaker's error")
		}
		prev := fs.expect(t, "Announce", errRefused, time.Second)
		wait := first / 2
		for i := range 6 {
			c := fs.expect(t, "Announce", errRefused, 5*time.Second)
			if g := c.at.Sub(prev.at); g < wait {
				t.Errorf("retry %d after %s, want %s", i+1, g, wait)
			}
			prev, wait = c, min(2*wait, most/2)
		}
		// Unbounded doubling would wait 1.6 s by now.
		c := fs.expect(t, "Announce", errRefused, 4*most)
		if g := c.at.Sub(prev.at); g < most/2 {
			t.Errorf("retry after %s, want %s", g, most/2)
		}
		if err := a.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		var ops []string
		for _, c := range fs.drained() {
			ops = append(ops, c.op)
		}
		// An Announce may have raced the Shutdown; none may follow it.
		if n := len(ops); n < 2 || ops[n-2] != "WithdrawAll" || ops[n-1] != "Stop" {
			t.Fatalf("calls at Shutdown: %v", ops)
		}
		fs.quiet(t, 3*most)
	})

	t.Run("no longer wanted", func(t *testing.T) {
		a, fs := testAnnouncer(t, 0)
		quickRetries(a, first, most)
		fs.fail("Announce", -1)
		if err := a.Sync(serve); err == nil {
			t.Fatal("Sync hid the speaker's error")
		}
		fs.expect(t, "Announce", errRefused, time.Second)
		// Never announced: nothing to withdraw, nothing to retry.
		if err := a.Sync(idle); err != nil {
			t.Fatal(err)
		}
		fs.quiet(t, 3*first)
		if on, why := routeStatus(t, a, vip); on || why != "every backend is down" {
			t.Errorf("status: announced %v, reason %q", on, why)
		}
	})
}

// TestReleaseRetried: a held-down BGP session that the speaker refuses
// to release, after BFD came up or after the reset hold, is released
// again with a growing delay until the speaker agrees; BFD going down
// again cancels that; Shutdown ends it.
func TestReleaseRetried(t *testing.T) {
	const first, most = 50 * time.Millisecond, 200 * time.Millisecond
	peer := netip.MustParseAddr("10.0.1.1")
	up := bfd.Event{Peer: peer, State: bfd.StateUp, Previous: bfd.StateDown}
	down := bfd.Event{Peer: peer, State: bfd.StateDown, Previous: bfd.StateUp, Diag: bfd.DiagDetectionTimeExpired}

	start := func(t *testing.T) (*Announcer, *fakeSpeaker, func(bfd.Event)) {
		a, fs := testAnnouncer(t, 0)
		quickRetries(a, first, most)
		events := make(chan bfd.Event)
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan struct{})
		go func() {
			a.followBFD(ctx, events)
			close(stopped)
		}()
		t.Cleanup(func() {
			cancel()
			<-stopped
		})
		send := func(ev bfd.Event) {
			t.Helper()
			select {
			case events <- ev:
			case <-time.After(5 * time.Second):
				t.Fatal("followBFD does not read its events")
			}
		}
		return a, fs, send
	}

	t.Run("after BFD up", func(t *testing.T) {
		_, fs, send := start(t)
		fs.fail("PeerUp", 2)
		send(up)
		c0 := fs.expect(t, "PeerUp", errRefused, 5*time.Second)
		c1 := fs.expect(t, "PeerUp", errRefused, 5*time.Second)
		c2 := fs.expect(t, "PeerUp", nil, 5*time.Second)
		if g := c1.at.Sub(c0.at); g < first {
			t.Errorf("first retry after %s, want %s", g, first)
		}
		if g := c2.at.Sub(c1.at); g < 2*first {
			t.Errorf("second retry after %s, want %s", g, 2*first)
		}
		fs.quiet(t, 3*most)
	})

	t.Run("after the reset hold", func(t *testing.T) {
		_, fs, send := start(t)
		fs.fail("PeerUp", 1)
		send(down)
		d := fs.expect(t, "PeerDown", nil, 5*time.Second)
		c0 := fs.expect(t, "PeerUp", errRefused, bfdResetHold+5*time.Second)
		c1 := fs.expect(t, "PeerUp", nil, 5*time.Second)
		if g := c0.at.Sub(d.at); g < bfdResetHold {
			t.Errorf("released %s after PeerDown, before bfdResetHold", g)
		}
		if g := c1.at.Sub(c0.at); g < first {
			t.Errorf("retry after %s, want %s", g, first)
		}
		fs.quiet(t, 3*most)
	})

	t.Run("BFD down again", func(t *testing.T) {
		// The pending retry must not cut the new hold short.
		_, fs, send := start(t)
		fs.fail("PeerUp", -1)
		send(up)
		fs.expect(t, "PeerUp", errRefused, 5*time.Second)
		send(down)
		d := fs.expect(t, "PeerDown", nil, 5*time.Second)
		fs.fail("PeerUp", 0)
		c := fs.expect(t, "PeerUp", nil, bfdResetHold+5*time.Second)
		if g := c.at.Sub(d.at); g < bfdResetHold {
			t.Errorf("released %s after PeerDown, before bfdResetHold", g)
		}
		fs.quiet(t, 3*most)
	})

	t.Run("peer removed", func(t *testing.T) {
		// A reload removed the peer: nothing is held, nothing to retry.
		_, fs, send := start(t)
		fs.mu.Lock()
		fs.failErr = fmt.Errorf("bgp: peer up: %s is %w", peer, bgp.ErrUnknownPeer)
		fs.mu.Unlock()
		fs.fail("PeerUp", -1)
		send(up)
		fs.expect(t, "PeerUp", bgp.ErrUnknownPeer, 5*time.Second)
		fs.quiet(t, 3*most)
	})

	t.Run("Shutdown", func(t *testing.T) {
		a, fs, send := start(t)
		fs.fail("PeerUp", -1)
		send(up)
		fs.expect(t, "PeerUp", errRefused, 5*time.Second)
		if err := a.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		var ops []string
		for _, c := range fs.drained() {
			ops = append(ops, c.op)
		}
		// A retry may have raced the Shutdown; none may follow it.
		if n := len(ops); n < 2 || ops[n-2] != "WithdrawAll" || ops[n-1] != "Stop" {
			t.Fatalf("calls at Shutdown: %v", ops)
		}
		fs.quiet(t, 3*most)
	})
}

// The status passes on what the speaker knows of each session, and says
// nothing where it knows nothing: unknown counters stay unknown.
func TestStatusPeers(t *testing.T) {
	ip := netip.MustParseAddr
	cfg := &config.BGP{ASN: 65001, Peers: []config.Peer{
		{Address: ip("10.0.1.1"), ASN: 65000, Port: 179, MaxPrefixes: 300},
		{Address: ip("10.0.1.3"), ASN: 65000, Port: 179, MaxPrefixes: config.DefaultMaxPrefixes},
	}}
	for i, p := range peers(cfg) {
		if p.MaxPrefixes != cfg.Peers[i].MaxPrefixes {
			t.Errorf("speaker peer %s: maxPrefixes %d, want the configuration's %d", p.Address, p.MaxPrefixes, cfg.Peers[i].MaxPrefixes)
		}
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	sp := newFakeSpeaker()
	sp.peers = []bgp.PeerStatus{
		{Address: ip("10.0.1.1"), ASN: 65000, State: bgp.StateIdle, MaxPrefixes: 300,
			Counters:    &bgp.Counters{At: at, PrefixesSent: 0, PrefixesReceived: 0, MessagesSent: 4, MessagesReceived: 30},
			PrefixLimit: &bgp.PrefixLimitHold{Limit: 300, At: at, Times: 2, RetryAt: at.Add(time.Minute)}},
		{Address: ip("10.0.1.3"), ASN: 65000, State: bgp.StateEstablished, MaxPrefixes: config.DefaultMaxPrefixes},
	}
	a := newAnnouncer(cfg, ip("10.0.1.2"), ip("10.0.1.2"), sp, slog.New(slog.DiscardHandler))
	st := a.Status()
	if len(st.Peers) != 2 {
		t.Fatalf("peers: %+v", st.Peers)
	}
	held, unknown := st.Peers[0], st.Peers[1]
	if held.PrefixesReceived == nil || *held.PrefixesReceived != 0 || held.PrefixesSent == nil || held.MessagesReceived == nil || *held.MessagesReceived != 30 ||
		held.MessagesSent == nil || *held.MessagesSent != 4 || !held.CountersAt.Equal(at) || held.MaxPrefixes != 300 {
		t.Errorf("known counters: %+v", held)
	}
	if l := held.PrefixLimit; l == nil || l.Limit != 300 || l.Times != 2 || !l.At.Equal(at) || !l.RetryAt.Equal(at.Add(time.Minute)) {
		t.Errorf("prefix limit hold: %+v", held.PrefixLimit)
	}
	if unknown.PrefixesReceived != nil || unknown.PrefixesSent != nil || unknown.MessagesReceived != nil || unknown.MessagesSent != nil ||
		!unknown.CountersAt.IsZero() || unknown.PrefixLimit != nil || unknown.MaxPrefixes != config.DefaultMaxPrefixes {
		t.Errorf("unknown counters reported as %+v", unknown)
	}
}
