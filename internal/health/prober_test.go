package health

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// TestRiseFall switches a server between healthy and unhealthy and checks
// every result the prober records, and the Changes signals.
func TestRiseFall(t *testing.T) {
	const rise, fall = 3, 2
	srv := newSwitchServer(t, http.StatusOK)
	p := newProber(t)
	rec := observe(p)
	p.Set([]Target{{Key: "web", Addr: loopback, Check: Check{
		Type: config.CheckHTTP, Port: srv.port, Path: "/", Interval: 20 * time.Millisecond, Timeout: 5 * time.Second, Rise: rise, Fall: fall,
	}}})
	start(t, p)

	n := func() int { return len(rec.of("web")) }
	testenv.EventuallyTrue(t, 10*time.Second, "a first result", func() bool { return n() >= 1 })
	if signalled(p) {
		t.Error("Changes signalled for unknown -> up, which is no flip")
	}
	count := n()
	testenv.EventuallyTrue(t, 10*time.Second, "more successes", func() bool { return n() >= count+3 })

	srv.status.Store(http.StatusServiceUnavailable)
	testenv.EventuallyTrue(t, 10*time.Second, "the target to go down", func() bool { return stateOf(p, "web") == Down })
	select {
	case <-p.Changes():
	case <-time.After(10 * time.Second):
		t.Fatal("no Changes signal after up -> down")
	}
	count = n()
	testenv.EventuallyTrue(t, 10*time.Second, "more failures", func() bool { return n() >= count+3 })

	srv.status.Store(http.StatusOK)
	testenv.EventuallyTrue(t, 10*time.Second, "the target to come back up", func() bool { return stateOf(p, "web") == Up })
	select {
	case <-p.Changes():
	case <-time.After(10 * time.Second):
		t.Fatal("no Changes signal after down -> up")
	}

	// Replay the recorded outcomes: each result must be what rise and
	// fall make of the outcomes so far, and the switches above must show
	// up as exactly fall failures before down and rise successes before up.
	rs := rec.of("web")
	state, succ, fail := Unknown, 0, 0
	var trace strings.Builder
	var downs, ups int
	for i, r := range rs {
		ok := r.LastError == ""
		if !ok && r.LastError != "HTTP 503" {
			t.Fatalf("result %d: error %q, want HTTP 503", i, r.LastError)
		}
		if ok {
			succ, fail = succ+1, 0
			trace.WriteByte('+')
		} else {
			succ, fail = 0, fail+1
			trace.WriteByte('-')
		}
		prev := state
		switch {
		case state == Unknown && ok, state == Down && succ == rise:
			state = Up
		case state == Unknown, state == Up && fail == fall:
			state = Down
		}
		if prev == Up && state == Down {
			downs++
		}
		if prev == Down && state == Up {
			ups++
		}
		if r.State != state || r.Successes != succ || r.Failures != fail {
			t.Fatalf("after outcomes %s: state %q, %d successes, %d failures; want %q, %d, %d", trace.String(), r.State, r.Successes, r.Failures, state, succ, fail)
		}
		if i > 0 && r.State == rs[i-1].State && !r.Since.Equal(rs[i-1].Since) {
			t.Fatalf("result %d: Since moved without a state change", i)
		}
		if i > 0 && r.State != rs[i-1].State && !r.Since.Equal(r.LastCheck) {
			t.Fatalf("result %d: state changed but Since %v is not the check time %v", i, r.Since, r.LastCheck)
		}
	}
	if downs != 1 || ups != 1 {
		t.Errorf("outcomes %s: %d up->down and %d down->up, want 1 each", trace.String(), downs, ups)
	}
}

// TestHangingBackend: a backend that accepts connections and never
// answers is down for an http check and up for a tcp check.
func TestHangingBackend(t *testing.T) {
	hang := newHangServer(t)
	p := newProber(t)
	check := Check{Port: hang.port, Interval: 50 * time.Millisecond, Timeout: 200 * time.Millisecond, Rise: 1, Fall: 1}
	httpCheck, tcpCheck := check, check
	httpCheck.Type, tcpCheck.Type = config.CheckHTTP, config.CheckTCP
	p.Set([]Target{
		{Key: "http", Addr: loopback, Check: httpCheck},
		{Key: "tcp", Addr: loopback, Check: tcpCheck},
	})
	start(t, p)
	testenv.EventuallyTrue(t, 10*time.Second, "both targets probed", func() bool {
		s := p.Snapshot()
		return !s["http"].LastCheck.IsZero() && !s["tcp"].LastCheck.IsZero()
	})
	s := p.Snapshot()
	if r := s["http"]; r.State != Down || r.Healthy() || r.LastError != "timeout after 200ms: no response headers" {
		t.Errorf("http check of a hanging backend: %+v; want down after a timeout", r)
	}
	if r := s["tcp"]; r.State != Up || !r.Healthy() || r.LastError != "" {
		t.Errorf("tcp check of a hanging backend: %+v; want up", r)
	}
}

// TestSet checks that Set keeps unchanged targets, resets changed ones,
// drops removed ones, and drops results of probes made for a target
// before it changed.
func TestSet(t *testing.T) {
	srv := newAcceptServer(t)
	hang := newHangServer(t)
	web := newSwitchServer(t, http.StatusOK)
	tcp := Check{Type: config.CheckTCP, Port: srv.port, Interval: 30 * time.Millisecond, Timeout: 5 * time.Second, Rise: 2, Fall: 2}
	changed := tcp
	changed.Rise = 3
	dead := Check{Type: config.CheckTCP, Port: closedPort(t), Interval: 30 * time.Millisecond, Timeout: 5 * time.Second}
	slow := Check{Type: config.CheckHTTP, Port: hang.port, Interval: 5 * time.Second, Timeout: 2 * time.Second, Rise: 1, Fall: 1}
	toWeb := Check{Type: config.CheckHTTP, Port: web.port, Interval: time.Second, Timeout: 5 * time.Second, Rise: 1, Fall: 1}

	p := newProber(t)
	rec := observe(p)
	p.Set([]Target{
		{Key: "keep", Addr: loopback, Check: tcp},
		{Key: "change", Addr: loopback, Check: tcp},
		{Key: "remove", Addr: loopback, Check: tcp},
		{Key: "dead", Addr: loopback, Check: dead},
		{Key: "stale", Addr: loopback, Check: slow},
	})
	start(t, p)
	testenv.EventuallyTrue(t, 10*time.Second, "targets up and down", func() bool {
		s := p.Snapshot()
		return s["keep"].State == Up && s["change"].State == Up && s["remove"].State == Up && s["dead"].State == Down
	})
	testenv.EventuallyTrue(t, 10*time.Second, "a probe in flight to the hanging server", func() bool { a, _, _ := hang.counts(); return a > 0 })
	before := p.Snapshot()
	drain(p)

	set := time.Now()
	p.Set([]Target{
		{Key: "keep", Addr: loopback, Check: tcp},
		{Key: "change", Addr: loopback, Check: changed},
		{Key: "dead", Addr: loopback, Check: tcp},      // fixed: reset to unknown, which is healthy
		{Key: "stale", Addr: loopback, Check: toWeb},   // its hanging probe must not count
		{Key: "added", Addr: loopback, Check: Check{}}, // type none
	})
	after := p.Snapshot()
	if !signalled(p) {
		t.Error("no Changes signal after a down target was reset to unknown")
	}
	if len(after) != 5 {
		t.Errorf("snapshot has %d targets, want 5: %v", len(after), after)
	}
	if _, ok := after["remove"]; ok {
		t.Error("a removed target is still in the snapshot")
	}
	if a, b := after["keep"], before["keep"]; a.State != Up || !a.Since.Equal(b.Since) || a.LastCheck.Before(b.LastCheck) {
		t.Errorf("unchanged target lost its state: %+v, was %+v", a, b)
	}
	for _, key := range []string{"change", "dead", "stale"} {
		r := after[key]
		if !r.LastCheck.IsZero() && !r.LastCheck.Before(set) {
			// A changed target's first probe comes within 100 ms, by a
			// hash of its key (for "stale", after about a millisecond),
			// and may have run already: the state is then its.
			t.Logf("changed target %s was probed already: %+v", key, r)
			continue
		}
		if r.State != Unknown || !r.LastCheck.IsZero() || r.Successes != 0 || r.Failures != 0 || r.Since.Before(set) {
			t.Errorf("changed target %s: %+v; want a fresh unknown state", key, r)
		}
	}
	if r := after["added"]; r.State != Up || !r.LastCheck.IsZero() {
		t.Errorf("added type-none target: %+v; want up, never probed", r)
	}

	// Changed targets are probed at once.
	testenv.EventuallyTrue(t, 10*time.Second, "changed targets probed", func() bool {
		s := p.Snapshot()
		return s["change"].State == Up && s["dead"].State == Up && s["stale"].State == Up
	})
	// The hanging probe ends at its timeout; then no probe is in flight
	// for it, and its result must have been dropped.
	testenv.EventuallyTrue(t, 10*time.Second, "the stale probe to end", func() bool {
		_, c, _ := hang.counts()
		if c == 0 {
			return false
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.inflight == 0
	})
	for _, r := range rec.of("stale") {
		if r.LastError != "" {
			t.Errorf("result of a probe for the old check was recorded: %+v", r)
		}
	}
	if r := p.Snapshot()["stale"]; r.State != Up {
		t.Errorf("target whose check changed: %+v, want up", r)
	}
	if n := web.requests.Load(); n == 0 {
		t.Error("the new check of a changed target never reached its server")
	}
}

// TestNone: type none targets are up at once and never probed.
func TestNone(t *testing.T) {
	srv := newAcceptServer(t)
	p := newProber(t)
	p.Set([]Target{
		{Key: "none", Addr: loopback, Check: Check{Type: config.CheckNone, Port: srv.port, Interval: 10 * time.Millisecond}},
		{Key: "empty", Addr: loopback, Check: Check{Port: srv.port}},
		{Key: "no address", Check: Check{Type: config.CheckNone}},
	})
	check := func(when string) {
		t.Helper()
		s := p.Snapshot()
		for _, key := range []string{"none", "empty", "no address"} {
			if r := s[key]; r.State != Up || !r.LastCheck.IsZero() || r.Since.IsZero() {
				t.Errorf("%s: %s: %+v; want up, never checked", when, key, r)
			}
		}
	}
	check("before Run")
	start(t, p)
	time.Sleep(200 * time.Millisecond)
	check("after Run")
	if n := srv.accepted.Load(); n != 0 {
		t.Errorf("type none targets were probed: %d connections", n)
	}

	// Turning a none check into a tcp check probes it.
	p.Set([]Target{{Key: "none", Addr: loopback, Check: Check{Type: config.CheckTCP, Port: srv.port}}})
	testenv.EventuallyTrue(t, 10*time.Second, "the tcp check", func() bool { return !p.Snapshot()["none"].LastCheck.IsZero() })
	// The check is done once the kernel completes the handshake, which
	// can be before the server's Accept returns: wait for the server.
	testenv.EventuallyTrue(t, 10*time.Second, "the server to accept the tcp check's connection", func() bool { return srv.accepted.Load() > 0 })
}

// TestChangesUnknownToDown: a first failure is a flip (unknown counted as
// healthy).
func TestChangesUnknownToDown(t *testing.T) {
	p := newProber(t)
	p.Set([]Target{{Key: "dead", Addr: loopback, Check: Check{Type: config.CheckTCP, Port: closedPort(t), Interval: time.Second}}})
	start(t, p)
	select {
	case <-p.Changes():
	case <-time.After(10 * time.Second):
		t.Fatal("no Changes signal after unknown -> down")
	}
	r := p.Snapshot()["dead"]
	if r.State != Down || !strings.HasSuffix(r.LastError, ": connection refused") || r.Failures != 1 {
		t.Errorf("result %+v; want down after one refused connect", r)
	}
}

// TestNoOverlap: a probe still running when the next is due is not
// started again. Each probe of a hanging backend lasts its whole timeout,
// so probes that never overlap end at least a timeout apart.
func TestNoOverlap(t *testing.T) {
	const timeout = 150 * time.Millisecond
	hang := newHangServer(t)
	p := newProber(t)
	rec := observe(p)
	p.Set([]Target{{Key: "slow", Addr: loopback, Check: Check{
		Type: config.CheckHTTP, Port: hang.port, Interval: 20 * time.Millisecond, Timeout: timeout,
	}}})
	start(t, p)
	testenv.EventuallyTrue(t, 10*time.Second, "four probes", func() bool { return len(rec.of("slow")) >= 4 })
	rs := rec.of("slow")
	for i := 1; i < len(rs); i++ {
		if gap := rs[i].LastCheck.Sub(rs[i-1].LastCheck); gap < timeout {
			t.Errorf("probes %d and %d ended %v apart; each lasts %v, so they overlapped", i-1, i, gap, timeout)
		}
	}
}

// TestInflightBound: hanging targets never have more probes in flight
// than the limit.
func TestInflightBound(t *testing.T) {
	hang := newHangServer(t)
	p := newProber(t)
	rec := observe(p)
	var targets []Target
	for i := range 100 {
		targets = append(targets, Target{Key: fmt.Sprint(i), Addr: loopback, Check: Check{
			Type: config.CheckHTTP, Port: hang.port, Interval: time.Second, Timeout: 300 * time.Millisecond,
		}})
	}
	p.Set(targets)
	if p.limit != minInflight {
		t.Fatalf("limit %d, want %d", p.limit, minInflight)
	}
	finished := func() int {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		n := 0
		for _, rs := range rec.byKey {
			n += len(rs)
		}
		return n
	}
	start(t, p)
	// A connection the server has accepted is from a probe that is in
	// flight or finished, so accepted minus finished never exceeds the
	// probes in flight, whatever the server's lag.
	peak, workers := 0, 0
	testenv.EventuallyTrue(t, 20*time.Second, "every target probed", func() bool {
		accepted, _, _ := hang.counts()
		done := finished()
		peak = max(peak, accepted-done)
		p.mu.Lock()
		workers = max(workers, p.workers)
		p.mu.Unlock()
		return len(rec.byKeyCopy()) == len(targets)
	})
	if peak > minInflight || peak < minInflight/2 {
		t.Errorf("at most %d probes in flight at once; want up to the limit %d, not more", peak, minInflight)
	}
	if workers > minInflight {
		t.Errorf("%d workers, more than the limit %d", workers, minInflight)
	}
}

// TestRunStops: Run cuts hanging probes short when its context ends,
// records nothing for them, and a later Run carries on.
func TestRunStops(t *testing.T) {
	hang := newHangServer(t)
	p := newProber(t)
	p.Set([]Target{{Key: "slow", Addr: loopback, Check: Check{Type: config.CheckHTTP, Port: hang.port, Interval: time.Minute, Timeout: time.Minute}}})
	stop := start(t, p)
	testenv.EventuallyTrue(t, 10*time.Second, "a probe in flight", func() bool { a, _, _ := hang.counts(); return a == 1 })
	second := make(chan struct{})
	go func() { p.Run(context.Background()); close(second) }()
	select {
	case <-second:
	case <-time.After(10 * time.Second):
		t.Fatal("a second Run while one is active did not return")
	}
	begin := time.Now()
	stop()
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("Run took %v to return, with a probe whose timeout is a minute", d)
	}
	if r := p.Snapshot()["slow"]; r.State != Unknown || !r.LastCheck.IsZero() {
		t.Errorf("a probe cut short by the end of Run was recorded: %+v", r)
	}
	p.mu.Lock()
	if p.inflight != 0 || p.workers != 0 || len(p.idle) != 0 || len(p.queue) != 1 {
		t.Errorf("after Run: %d in flight, %d workers, %d idle, %d queued; want 0, 0, 0, 1", p.inflight, p.workers, len(p.idle), len(p.queue))
	}
	p.mu.Unlock()
	start(t, p)
	testenv.EventuallyTrue(t, 10*time.Second, "a second Run to probe again", func() bool { a, _, _ := hang.counts(); return a == 2 })
}

// TestManyTargets: 2000 targets complete a round within an interval on a
// bounded number of goroutines, and go on round after round.
func TestManyTargets(t *testing.T) {
	if testing.Short() {
		t.Skip("2000 targets")
	}
	const n = 2000
	const interval = time.Second
	// The listeners run in another process, so that the goroutines
	// counted here are the prober's and the test's alone.
	l := startListeners(t, 4)
	var targets []Target
	for i := range n {
		c := Check{Type: config.CheckTCP, Port: l.tcp[i%len(l.tcp)], Interval: interval, Timeout: interval / 20}
		if i%4 == 0 {
			c = Check{Type: config.CheckHTTP, Port: l.http[i%len(l.http)], Interval: interval, Timeout: interval / 20}
		}
		targets = append(targets, Target{Key: fmt.Sprintf("svc/%d", i), Addr: loopback, Check: c})
	}
	p := New(nil)
	rec := observe(p)
	p.Set(targets)
	runtime.GC()
	base := runtime.NumGoroutine()

	begin := time.Now()
	start(t, p)
	peak, workers := 0, 0
	sample := func() {
		peak = max(peak, runtime.NumGoroutine()-base)
		p.mu.Lock()
		workers = max(workers, p.workers)
		p.mu.Unlock()
	}
	probed := func() int {
		c := 0
		for _, r := range p.Snapshot() {
			if !r.LastCheck.IsZero() {
				c++
			}
		}
		return c
	}
	deadline := begin.Add(10 * interval)
	for probed() < n && time.Now().Before(deadline) {
		sample()
		time.Sleep(time.Millisecond)
	}
	round := time.Since(begin)
	if got := probed(); got < n {
		t.Fatalf("after %v only %d of %d targets were probed", round, got, n)
	}
	t.Logf("first round of %d targets took %v; at most %d workers (limit %d) and %d goroutines above the %d before Run", n, round, workers, p.limit, peak, base)
	// About one interval when idle; the race detector on a busy machine
	// can double that.
	if round > 3*interval {
		t.Errorf("first round took %v, want about one interval (%v)", round, interval)
	}
	// Keep watching for two more rounds.
	watch := time.Now()
	for time.Since(watch) < 2*interval {
		sample()
		time.Sleep(5 * time.Millisecond)
	}
	// The pool never outgrows the in-flight limit. The scheduler, and
	// the net package's short-lived goroutines for dials that reach
	// their deadline, come on top.
	if workers > p.limit {
		t.Errorf("%d workers, more than the limit of %d probes in flight", workers, p.limit)
	}
	if peak >= 200 {
		t.Errorf("%d goroutines above those before Run; want a bounded pool, not one per target", peak)
	}
	elapsed := time.Since(begin)
	var down int
	for i := range n {
		key := fmt.Sprintf("svc/%d", i)
		rs := rec.of(key)
		// Each round starts every interval; allow one for the first
		// probe made at once, one for the next slot, and one of slack.
		if maxProbes := int(elapsed/interval) + 3; len(rs) < 2 || len(rs) > maxProbes {
			t.Fatalf("%s probed %d times in %v, want 2..%d", key, len(rs), elapsed, maxProbes)
		}
		if rs[len(rs)-1].State != Up {
			down++
		}
	}
	// A loaded machine may miss a 50ms timeout now and then; many
	// misses mean the prober does not keep up.
	t.Logf("%d of %d targets down after %v", down, n, elapsed)
	if down > n/50 {
		t.Errorf("%d of %d targets down against local listeners", down, n)
	}
}
