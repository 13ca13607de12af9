package health

import (
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/config"
)

func TestRecord(t *testing.T) {
	// Probe outcomes: + success, - failure. States: ? unknown, U up, D down.
	tests := []struct {
		name       string
		rise, fall int
		outcomes   string
		states     string // the state after each outcome
	}{
		{"first success is up at once", 3, 3, "+", "U"},
		{"first failure is down at once", 3, 3, "-", "D"},
		{"fall 2", 2, 2, "+--", "UUD"},
		{"fall 3 interrupted", 2, 3, "+--+--+---", "UUUUUUUUUD"},
		{"rise 3", 3, 1, "-+++", "DDDU"},
		{"rise 3 interrupted", 3, 1, "-++-+++", "DDDDDDU"},
		{"fall 1 rise 1 follows every probe", 1, 1, "+-+-", "UDUD"},
		{"flap down and up", 2, 2, "+--++--", "UUDDUUD"},
		{"long run up stays up", 2, 2, "+++++", "UUUUU"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Check{Rise: tt.rise, Fall: tt.fall}
			t0 := time.Unix(1000, 0)
			r := Result{State: Unknown, Since: t0}
			since := t0
			succ, fail := 0, 0
			for i, o := range tt.outcomes {
				now := t0.Add(time.Duration(i+1) * time.Second)
				ok := o == '+'
				errText := ""
				if !ok {
					errText = "HTTP 503"
				}
				prev := r.State
				got := r.record(c, ok, errText, time.Millisecond, now)
				if got != prev {
					t.Fatalf("probe %d: record returned %q, state before was %q", i, got, prev)
				}
				if ok {
					succ, fail = succ+1, 0
				} else {
					succ, fail = 0, fail+1
				}
				want := map[byte]State{'?': Unknown, 'U': Up, 'D': Down}[tt.states[i]]
				if r.State != want {
					t.Fatalf("after %q: state %q, want %q", tt.outcomes[:i+1], r.State, want)
				}
				if r.State != prev {
					since = now
				}
				if r.Since != since || r.LastCheck != now || r.LastError != errText || r.Successes != succ || r.Failures != fail {
					t.Fatalf("after %q: %+v; want since %v, successes %d, failures %d, error %q", tt.outcomes[:i+1], r, since, succ, fail, errText)
				}
			}
		})
	}
}

func TestNewSpec(t *testing.T) {
	addr := netip.MustParseAddr("10.0.3.2")
	tests := []struct {
		name    string
		addr    netip.Addr
		check   Check
		want    Check  // the check with defaults applied
		request string // http: the request sent
		err     string // the error every probe fails with
	}{
		{
			name:  "empty type is none",
			addr:  addr,
			check: Check{},
			want:  Check{Type: config.CheckNone, Interval: time.Second, Timeout: time.Second, Rise: 2, Fall: 2},
		},
		{
			name:  "tcp defaults",
			addr:  addr,
			check: Check{Type: config.CheckTCP, Port: 80},
			want:  Check{Type: config.CheckTCP, Port: 80, Interval: time.Second, Timeout: time.Second, Rise: 2, Fall: 2},
		},
		{
			name:  "timeout defaults to a shorter interval; tiny interval raised",
			addr:  addr,
			check: Check{Type: config.CheckTCP, Port: 80, Interval: time.Millisecond, Rise: 5, Fall: 7},
			want:  Check{Type: config.CheckTCP, Port: 80, Interval: 10 * time.Millisecond, Timeout: 10 * time.Millisecond, Rise: 5, Fall: 7},
		},
		{
			name:    "http defaults",
			addr:    addr,
			check:   Check{Type: config.CheckHTTP, Port: 8080},
			want:    Check{Type: config.CheckHTTP, Port: 8080, Path: "/", StatusMin: 200, StatusMax: 399, Interval: time.Second, Timeout: time.Second, Rise: 2, Fall: 2},
			request: "GET / HTTP/1.1\r\nHost: 10.0.3.2\r\nUser-Agent: xlb-health\r\nAccept: */*\r\nConnection: close\r\n\r\n",
		},
		{
			name:    "http ipv6 host",
			addr:    netip.MustParseAddr("fd00::2"),
			check:   Check{Type: config.CheckHTTP, Port: 80, Path: "/healthz?full=1", StatusMin: 204, StatusMax: 204, Interval: 2 * time.Second, Timeout: 300 * time.Millisecond, Rise: 1, Fall: 1},
			want:    Check{Type: config.CheckHTTP, Port: 80, Path: "/healthz?full=1", StatusMin: 204, StatusMax: 204, Interval: 2 * time.Second, Timeout: 300 * time.Millisecond, Rise: 1, Fall: 1},
			request: "GET /healthz?full=1 HTTP/1.1\r\nHost: [fd00::2]\r\n",
		},
		{name: "unknown type", addr: addr, check: Check{Type: "udp", Port: 53}, err: `unknown check type "udp" (want tcp, http or none)`},
		{name: "port 0", addr: addr, check: Check{Type: config.CheckTCP}, err: "check port is 0"},
		{name: "no address", check: Check{Type: config.CheckTCP, Port: 80}, err: "no address to probe"},
		{name: "empty status range", addr: addr, check: Check{Type: config.CheckHTTP, Port: 80, StatusMin: 500}, err: "expected status range 500..399 is empty"},
		{name: "relative path", addr: addr, check: Check{Type: config.CheckHTTP, Port: 80, Path: "healthz"}, err: `path "healthz" does not start with /`},
		{name: "path with a space", addr: addr, check: Check{Type: config.CheckHTTP, Port: 80, Path: "/a b"}, err: `path "/a b" contains ' '; percent-encode it`},
		{name: "path with a line break", addr: addr, check: Check{Type: config.CheckHTTP, Port: 80, Path: "/\r\nX: y"}, err: `contains '\r'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSpec(tt.addr, tt.check)
			if tt.err != "" {
				if s.err == nil || !strings.Contains(s.err.Error(), tt.err) {
					t.Fatalf("error %v, want one containing %q", s.err, tt.err)
				}
				return
			}
			if s.err != nil {
				t.Fatalf("unexpected error %v", s.err)
			}
			if s.check != tt.want {
				t.Errorf("check %+v\nwant  %+v", s.check, tt.want)
			}
			if !strings.HasPrefix(string(s.request), tt.request) || (tt.request == "") != (s.request == nil) {
				t.Errorf("request %q, want it to start with %q", s.request, tt.request)
			}
		})
	}
}

// TestSchedule checks the jitter: first probes soon and spread over the
// first-probe window, later ones on per-key slots spread over the
// interval, one interval apart.
func TestSchedule(t *testing.T) {
	p := New(nil)
	now := p.epoch.Add(1234567 * time.Microsecond)
	const n = 1000
	const buckets = 10
	iv := 700 * time.Millisecond
	var first, phase [buckets]int
	for i := range n {
		e := p.newEntry(Target{Key: fmt.Sprintf("svc/10.0.%d.%d:80", i/250, i%250), Addr: netip.MustParseAddr("10.0.0.1"), Check: Check{Type: config.CheckTCP, Port: 80, Interval: iv}}, now)
		wait := e.due.Sub(now)
		if wait < 0 || wait >= maxFirstDelay {
			t.Fatalf("%s: first probe in %v, want within [0, %v)", e.key, wait, maxFirstDelay)
		}
		first[wait*buckets/maxFirstDelay]++

		slot := p.nextSlot(e, now)
		if !slot.After(now) || slot.Sub(now) > iv {
			t.Fatalf("%s: next slot %v after %v, want within (0, %v]", e.key, slot.Sub(now), now, iv)
		}
		if next := p.nextSlot(e, slot); next.Sub(slot) != iv {
			t.Fatalf("%s: slots %v apart, want %v", e.key, next.Sub(slot), iv)
		}
		if off := slot.Sub(p.epoch) % iv; off != e.phase {
			t.Fatalf("%s: slot at offset %v in the interval, want the phase %v", e.key, off, e.phase)
		}
		phase[e.phase*buckets/iv]++
	}
	for i := range buckets {
		if first[i] < n/buckets/2 || first[i] > 2*n/buckets {
			t.Errorf("first probes per tenth of the window: %v; want them spread", first)
			break
		}
	}
	for i := range buckets {
		if phase[i] < n/buckets/2 || phase[i] > 2*n/buckets {
			t.Errorf("phases per tenth of the interval: %v; want them spread", phase)
			break
		}
	}

	// Slots are a function of the key: the same key gets the same one.
	a := p.newEntry(Target{Key: "k", Addr: netip.MustParseAddr("10.0.0.1"), Check: Check{Type: config.CheckTCP, Port: 80}}, now)
	b := p.newEntry(Target{Key: "k", Addr: netip.MustParseAddr("10.0.0.1"), Check: Check{Type: config.CheckTCP, Port: 80}}, now)
	if a.phase != b.phase || !a.due.Equal(b.due) {
		t.Errorf("same key, different schedule: %v/%v and %v/%v", a.phase, a.due, b.phase, b.due)
	}
}

func TestInflightLimit(t *testing.T) {
	mk := func(n int, c Check) map[string]*entry {
		m := map[string]*entry{}
		for i := range n {
			m[fmt.Sprint(i)] = &entry{spec: newSpec(netip.MustParseAddr("10.0.0.1"), c)}
		}
		return m
	}
	tcp := func(iv, to time.Duration) Check {
		return Check{Type: config.CheckTCP, Port: 80, Interval: iv, Timeout: to}
	}
	tests := []struct {
		name    string
		targets map[string]*entry
		want    int
	}{
		{"none", nil, minInflight},
		{"few", mk(10, tcp(time.Second, time.Second)), minInflight},
		{"none-type targets cost nothing", mk(5000, Check{Type: config.CheckNone}), minInflight},
		{"1000 at 1s/500ms", mk(1000, tcp(time.Second, 500*time.Millisecond)), 500},
		{"2000 at 1s/50ms", mk(2000, tcp(time.Second, 50*time.Millisecond)), 100},
		{"capped", mk(5000, tcp(time.Second, time.Second)), maxInflight},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := inflightLimit(tt.targets); got != tt.want {
				t.Errorf("limit %d, want %d", got, tt.want)
			}
		})
	}
}

// TestSetBookkeeping: what Set keeps over all targets as they come and
// go (the number Down, the load behind the probe pool's size) matches a
// count over the targets after every Set, duplicates and changed checks
// included, and Unhealthy is Snapshot's unhealthy part.
func TestSetBookkeeping(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	checks := []Check{
		{Type: config.CheckNone},
		{Type: config.CheckTCP, Port: 80, Interval: time.Second, Timeout: 300 * time.Millisecond},
		{Type: config.CheckTCP, Port: 80, Interval: 2 * time.Second, Timeout: time.Second},
		{Type: config.CheckHTTP, Port: 8080, Path: "/", Interval: 500 * time.Millisecond, Timeout: 400 * time.Millisecond},
	}
	addrs := []netip.Addr{netip.MustParseAddr("10.0.3.2"), netip.MustParseAddr("10.0.3.3")}
	p := New(slog.New(slog.DiscardHandler))
	// A key listed twice with different checks replaces its own entry
	// of the same Set: that must not count as a second target, or b
	// would stay.
	p.Set([]Target{{Key: "a", Addr: addrs[0], Check: checks[1]}, {Key: "b", Addr: addrs[0], Check: checks[1]}})
	p.Set([]Target{{Key: "a", Addr: addrs[0], Check: checks[2]}, {Key: "a", Addr: addrs[0], Check: checks[3]}})
	if s := p.Snapshot(); len(s) != 1 || p.targets["a"].raw != checks[3] {
		t.Fatalf("after a, a: targets %v, a's check %+v; want a alone, with the last check", s, p.targets["a"].raw)
	}
	for step := range 400 {
		ts := randomTargets(rng, addrs, checks, nil, 20)
		if step%50 == 49 {
			ts = nil
		}
		p.Set(ts)
		// Probes take some targets down, as finish does.
		p.mu.Lock()
		for _, e := range p.targets {
			if e.spec.check.Type != config.CheckNone && e.res.State != Down && rng.IntN(4) == 0 {
				e.res.State = Down
				p.down++
			}
		}
		down, busy := 0, 0.0
		for _, e := range p.targets {
			if e.res.State == Down {
				down++
			}
			busy += e.busy()
		}
		if p.down != down || math.Abs(p.busy-busy) > 1e-6 || p.limit != inflightLimit(p.targets) {
			t.Fatalf("step %d: down %d, busy %.6f, limit %d; counted over the targets: %d, %.6f, %d",
				step, p.down, p.busy, p.limit, down, busy, inflightLimit(p.targets))
		}
		if len(p.targets) != len(uniqueKeys(ts)) {
			t.Fatalf("step %d: %d targets kept, %d listed", step, len(p.targets), len(uniqueKeys(ts)))
		}
		p.mu.Unlock()
		want := p.Snapshot()
		maps.DeleteFunc(want, func(_ string, r Result) bool { return r.Healthy() })
		if got := p.Unhealthy(); !maps.Equal(got, want) {
			t.Fatalf("step %d: Unhealthy %v, want %v", step, got, want)
		}
	}
}

// randomTargets lists about two thirds of the keys k0 … k39, each with a
// random address and check; a key in last keeps its target there half the
// time. Each listed key is listed a second time, with a random check,
// with probability 1/twice: the last listing wins.
func randomTargets(rng *rand.Rand, addrs []netip.Addr, checks []Check, last map[string]Target, twice int) []Target {
	var ts []Target
	for k := range 40 {
		if rng.IntN(3) == 0 {
			continue
		}
		tg := Target{Key: fmt.Sprint("k", k), Addr: addrs[rng.IntN(len(addrs))], Check: checks[rng.IntN(len(checks))]}
		if old, ok := last[tg.Key]; ok && rng.IntN(2) == 0 {
			tg = old // most targets stay as they were
		}
		ts = append(ts, tg)
		if rng.IntN(twice) == 0 {
			tg.Check = checks[rng.IntN(len(checks))]
			ts = append(ts, tg)
		}
	}
	return ts
}

func uniqueKeys(ts []Target) map[string]bool {
	m := map[string]bool{}
	for _, t := range ts {
		m[t.Key] = true
	}
	return m
}

// inflightLimit is the probe pool for targets, summed over them: what Set
// keeps up to date without a pass over all targets.
func inflightLimit(targets map[string]*entry) int {
	var busy float64
	for _, e := range targets {
		busy += e.busy()
	}
	return limitFor(busy)
}

// TestChangeAgreesWithSet walks two probers through the same random
// target sets, one given every target by Set, the other only what
// changed by Change (with some unchanged targets thrown in, and keys
// listed twice). Probes take the same targets down in both. After every
// step they must hold the same targets with the same addresses, checks
// and results, and agree on the down count, the pool's load and the
// queue: Change keeps the state of what it is not given.
func TestChangeAgreesWithSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	checks := []Check{
		{Type: config.CheckNone},
		{Type: config.CheckTCP, Port: 80, Interval: time.Second, Timeout: 300 * time.Millisecond},
		{Type: config.CheckHTTP, Port: 8080, Path: "/", Interval: 500 * time.Millisecond, Timeout: 400 * time.Millisecond},
		{Type: config.CheckHTTP, Port: 8080, Path: "/", Interval: time.Second, Timeout: 2 * time.Second}, // invalid: down at once
	}
	addrs := []netip.Addr{netip.MustParseAddr("10.0.3.2"), netip.MustParseAddr("10.0.3.3")}
	whole := New(slog.New(slog.DiscardHandler))
	delta := New(slog.New(slog.DiscardHandler))
	last := map[string]Target{} // what delta was given, last one winning
	changed := 0
	for step := range 400 {
		ts := randomTargets(rng, addrs, checks, last, 30)
		if step%50 == 49 {
			ts = nil
		}
		now := map[string]Target{}
		listed := map[string]int{}
		for _, tg := range ts {
			now[tg.Key] = tg
			listed[tg.Key]++
		}
		// A key's listings go to Change whole: when the key is new or
		// changed, listed twice (a replacement within the call resets
		// it, as in Set), or at random.
		var add []Target
		var remove []string
		give := map[string]bool{}
		for key, tg := range now {
			old, ok := last[key]
			give[key] = !ok || old != tg || listed[key] > 1 || rng.IntN(10) == 0
		}
		for _, tg := range ts {
			if give[tg.Key] {
				add = append(add, tg)
			}
		}
		for key := range last {
			if _, ok := now[key]; !ok {
				remove = append(remove, key)
			}
		}
		changed += len(add)
		whole.Set(ts)
		delta.Change(add, remove)
		last = now

		// Probes take the same targets down in both.
		whole.mu.Lock()
		delta.mu.Lock()
		for key, e := range whole.targets {
			if e.spec.check.Type != config.CheckNone && e.res.State != Down && rng.IntN(4) == 0 {
				e.res.State = Down
				whole.down++
				if d := delta.targets[key]; d != nil && d.res.State != Down {
					d.res.State = Down
					delta.down++
				}
			}
		}
		if len(whole.targets) != len(delta.targets) {
			t.Fatalf("step %d: %d targets by Set, %d by Change", step, len(whole.targets), len(delta.targets))
		}
		for key, e := range whole.targets {
			d := delta.targets[key]
			if d == nil || d.addr != e.addr || d.raw != e.raw || d.res.State != e.res.State {
				t.Fatalf("step %d: target %s by Set %v %+v %v, by Change %+v", step, key, e.addr, e.raw, e.res.State, d)
			}
		}
		if whole.down != delta.down || math.Abs(whole.busy-delta.busy) > 1e-6 || whole.limit != delta.limit || len(whole.queue) != len(delta.queue) {
			t.Fatalf("step %d: down %d/%d, busy %.6f/%.6f, limit %d/%d, queued %d/%d (Set/Change)",
				step, whole.down, delta.down, whole.busy, delta.busy, whole.limit, delta.limit, len(whole.queue), len(delta.queue))
		}
		delta.mu.Unlock()
		whole.mu.Unlock()
	}
	if changed == 0 {
		t.Fatal("Change was never given a target")
	}
}
