// Package health checks backends: TCP connects and HTTP requests on a
// schedule, with rise and fall thresholds, for thousands of targets
// without a goroutine per target.
//
// One scheduler goroutine keeps a min-heap of next-due times and hands
// each due probe to a pool of workers, with at most a bounded number of
// probes in flight. Workers are started as needed and end when idle, so
// the pool is as large as the probes' concurrency, not as the number of
// targets. Probes go from this host straight to the target's address,
// never through a VIP.
package health

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/xlbproject/xlb/internal/config"
)

// Check says how to probe one target. Zero fields take defaults: Type ""
// is none, Interval 1s (at least 10ms), Timeout the shorter of 1s and
// Interval, Rise and Fall 2, Path "/", StatusMin 200, StatusMax 399.
type Check struct {
	Type      config.CheckType // tcp | http | none
	Port      uint16           // port to probe
	Path      string           // http only, e.g. "/healthz"
	StatusMin int              // http only: lowest status counted as healthy (e.g. 200)
	StatusMax int              // http only: highest status counted as healthy (e.g. 399)
	Interval  time.Duration    // time between the starts of two probes
	Timeout   time.Duration    // a probe not done within this fails
	Rise      int              // consecutive successes that bring a down target up
	Fall      int              // consecutive failures that take an up target down
}

// Target is one thing to probe. Key identifies it across Set calls.
type Target struct {
	Key   string
	Addr  netip.Addr
	Check Check
}

// State is what the prober knows about one target.
type State string

const (
	// Unknown: not probed yet. Counts as up, so that adding a backend or
	// restarting the agent never takes traffic away before a probe says so.
	Unknown State = "unknown"
	Up      State = "up"
	Down    State = "down"
)

// Result is a target's current health.
type Result struct {
	State       State
	Since       time.Time     // when State last changed
	LastCheck   time.Time     // when the last probe finished (zero: none yet)
	LastError   string        // "" when the last probe succeeded
	LastLatency time.Duration // duration of the last probe
	Successes   int           // consecutive successes so far
	Failures    int           // consecutive failures so far
}

// Healthy reports whether the target should receive new flows.
func (r Result) Healthy() bool { return r.State != Down }

// Prober probes targets. It is safe for concurrent use.
type Prober struct {
	log     *slog.Logger
	epoch   time.Time     // origin of every target's probe slots
	changes chan struct{} // Changes: capacity 1, sends never block
	wake    chan struct{} // tells Run to look at the heap again; capacity 1

	mu       sync.Mutex
	targets  map[string]*entry
	sets     uint64    // calls of Set so far
	busy     float64   // Σ entry.busy over targets (limitFor)
	down     int       // targets whose State is Down
	queue    queue     // targets waiting for their next probe, by due time
	inflight int       // probes handed to workers and not finished
	limit    int       // most probes allowed in flight at once
	workers  int       // worker goroutines: inflight + len(idle)
	idle     []*worker // workers waiting for a job, most recently idle last
	running  bool      // Run is active

	// observe, if set (by tests), sees every recorded probe result,
	// under mu, in order.
	observe func(key string, r Result)
}

// New returns a prober; Run drives it. A nil log logs to slog.Default().
func New(log *slog.Logger) *Prober {
	if log == nil {
		log = slog.Default()
	}
	return &Prober{
		log:     log,
		epoch:   time.Now(),
		changes: make(chan struct{}, 1),
		wake:    make(chan struct{}, 1),
		targets: map[string]*entry{},
		limit:   minInflight,
	}
}

// Set replaces the set of targets. A target whose Key and Check are
// unchanged keeps its state and schedule; a new or changed one starts
// Unknown and is probed at once (then every Interval, with a small
// deterministic jitter so that targets do not all fire together).
// "At once" is within min(Interval, 100ms), spread by a hash of the key,
// so that a thousand new targets are not dialled in one burst.
// Type none targets are always Up and never probed.
//
// A changed Addr counts as a changed target. If a key appears more than
// once, the last one wins. A result of a probe still in flight for a
// removed or changed target is dropped. Changes is signalled if a target
// that was Down is reset by a change.
func (p *Prober) Set(targets []Target) {
	p.update(targets, nil, true)
}

// Change removes the targets keyed in remove, then adds or replaces the
// targets of add as Set does; every other target stays as it is. A
// caller whose targets changed in a few places hands over just those:
// Set with every target listed costs a map lookup per target, and of an
// agent's apply of a one-service change at 10 000 backends it was half.
// A key in both is replaced: it is removed first.
func (p *Prober) Change(add []Target, remove []string) {
	p.update(add, remove, false)
}

// update is Set (all: targets are every target) and Change.
func (p *Prober) update(targets []Target, remove []string, all bool) {
	now := time.Now()
	var invalid []*entry

	// The map is updated in place, and what Set needs of all targets is
	// kept up to date as they come and go: a configuration change lists
	// every target again, and a new map of ten thousand entries, or a
	// pass over all of them, cost more than the rest of Set together.
	p.mu.Lock()
	p.sets++
	set := p.sets
	for _, key := range remove {
		if e := p.targets[key]; e != nil {
			p.drop(e)
			delete(p.targets, key)
		}
	}
	var fresh []*entry
	flipped := false
	listed := 0 // distinct targets of this Set
	for _, t := range targets {
		old := p.targets[t.Key]
		if old != nil && old.addr == t.Addr && old.raw == t.Check {
			if old.set != set {
				old.set = set
				listed++
			}
			continue
		}
		e := p.newEntry(t, now)
		e.set = set
		if old == nil || old.set != set {
			listed++
		}
		if old != nil {
			if old.res.Healthy() != e.res.Healthy() {
				flipped = true
			}
			p.drop(old)
		}
		p.targets[t.Key] = e
		p.busy += e.busy()
		fresh = append(fresh, e)
	}
	if all && listed < len(p.targets) {
		for key, e := range p.targets {
			if e.set != set {
				p.drop(e)
				delete(p.targets, key)
			}
		}
	}
	if len(p.targets) == 0 {
		p.busy = 0 // no rounding left over
	}
	for _, e := range fresh {
		if p.targets[e.key] != e || e.spec.check.Type == config.CheckNone {
			continue // a later duplicate replaced it, or nothing to probe
		}
		if e.spec.err != nil {
			invalid = append(invalid, e)
		}
		p.queue.push(e)
	}
	p.limit = limitFor(p.busy)
	if flipped {
		p.signal()
	}
	p.mu.Unlock()

	p.poke()
	for _, e := range invalid {
		p.log.Warn("health check cannot run; the target will be down until its check is fixed",
			"key", e.key, "addr", e.addr, "error", e.spec.err,
			"fix", "correct the backend's healthCheck as the error says")
	}
}

// drop takes e, which Set replaces or removes, out of the queue and of
// what the Prober keeps over all targets. Callers hold mu.
func (p *Prober) drop(e *entry) {
	if e.index >= 0 {
		p.queue.remove(e)
	}
	p.busy -= e.busy()
	if !e.res.Healthy() {
		p.down--
	}
}

// Changes is signalled (coalesced, never blocking the prober) whenever a
// target's Healthy() value flips.
func (p *Prober) Changes() <-chan struct{} { return p.changes }

// Snapshot returns every target's result by Key.
func (p *Prober) Snapshot() map[string]Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := make(map[string]Result, len(p.targets))
	for k, e := range p.targets {
		m[k] = e.res
	}
	return m
}

// Unhealthy returns the results of the targets that are not healthy:
// what a caller that applies health needs, without a copy of every
// result (Snapshot).
func (p *Prober) Unhealthy() map[string]Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := make(map[string]Result)
	if p.down == 0 {
		return m
	}
	for k, e := range p.targets {
		if !e.res.Healthy() {
			m[k] = e.res
		}
	}
	return m
}

// signal notes a flip on the Changes channel. Callers hold mu.
func (p *Prober) signal() {
	select {
	case p.changes <- struct{}{}:
	default: // a signal is already pending; the reader sees this one too
	}
}

// poke makes Run re-read the heap.
func (p *Prober) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Run probes until ctx ends. It returns once the probes it started have
// ended (they are cut short); a later Run carries on where it stopped.
// Only one Run may be active at a time; another returns at once.
func (p *Prober) Run(ctx context.Context) {
	p.mu.Lock()
	if p.running {
		p.mu.Unlock()
		p.log.Error("health: Run called while another Run is active; ignoring it",
			"fix", "a bug in the caller: report it; the running Run keeps probing")
		return
	}
	p.running = true
	p.mu.Unlock()

	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		p.mu.Lock()
		p.running = false
		p.mu.Unlock()
	}()
	p.schedule(ctx, &wg)
}
