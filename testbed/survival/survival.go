// Package survival runs Beamer's connection-survival experiment (Olteanu
// et al., NSDI'18, §6) in a lab: persistent HTTP connections stay busy
// while backends leave one by one and come back, an xlb instance leaves
// and comes back, and a new instance that never saw the old backend sets
// starts. A connection is broken when one of its requests fails. The
// end-to-end test (test/e2e) and the benchmark (bench/survivalbench) run
// the same sequence; docs/connection-survival.md has the design and the
// results.
package survival

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/dataplane/decap"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
)

// Defaults of Options.
const (
	DefaultConns = 300
	DefaultEvery = 200 * time.Millisecond
	DefaultPause = 2 * time.Second
)

// Spec is the lab the experiment needs: clients, three xlb nodes (the
// third starts late) and four backends behind the embedded router. The
// backends send complete checksums, as the NAT run's replies pass a
// node that rewrites them.
func Spec(prefix, binary string) lab.Spec {
	return lab.Spec{Prefix: prefix, Clients: 2, Nodes: 3, Backends: 4, Binary: binary, Router: lab.RouterEmbedded, FullBackendChecksums: true}
}

// Options tune a run.
type Options struct {
	Conns int           // persistent connections (DefaultConns)
	Every time.Duration // between two requests of a connection (DefaultEvery)
	Pause time.Duration // after each change (DefaultPause)
	// Logf, if set, reports progress.
	Logf func(format string, args ...any)
	// Forwarding is the service's forwarding mode; "": dsr-gue. With nat
	// or dnat the flows mode must be "" (a NAT service keeps a session
	// per connection on the node that saw its first packet).
	Forwarding config.Forwarding
}

// Step is one change of the sequence and what happened while it was
// the latest: the packets the backends chained, and the connections
// whose failed request started then.
type Step struct {
	What    string `json:"what"`
	Chained uint64 `json:"chained"`
	Broken  int    `json:"broken"`
}

// Result is one run.
type Result struct {
	Flows string `json:"flows"`
	// Forwarding is the service's forwarding mode.
	Forwarding string   `json:"forwarding,omitempty"`
	Conns      int      `json:"connections"`
	Broken     int      `json:"broken"`
	Requests   int      `json:"requests"`
	Chained    uint64   `json:"chained"`
	Steps      []Step   `json:"steps"`
	Errors     []string `json:"errors,omitempty"` // the first few broken connections
	// Impossible lists answers from another backend than a connection's
	// first: TCP cannot do that, so the measurement itself is wrong.
	Impossible []string `json:"impossible,omitempty"`
	// brokenAt are the start times of the failed requests, one per
	// broken connection.
	brokenAt []time.Time
}

// Mode names the run: its flows mode, or its forwarding mode if that is
// nat or dnat.
func (r Result) Mode() string {
	if f := config.Forwarding(r.Forwarding); f.Translates() {
		return string(f)
	}
	return r.Flows
}

// Run runs the sequence for one flows mode in lab p (see Spec), with no
// agent running, and stops every agent it started.
func Run(ctx context.Context, p lab.Plan, flows config.Flows, opts Options) (Result, error) {
	if len(p.Nodes) < 3 || len(p.Backends) < 3 || len(p.Clients) == 0 {
		return Result{}, fmt.Errorf("lab %q: want 3 nodes, 3 or more backends and a client", p.Spec.Prefix)
	}
	if opts.Conns <= 0 {
		opts.Conns = DefaultConns
	}
	if opts.Every <= 0 {
		opts.Every = DefaultEvery
	}
	if opts.Pause <= 0 {
		opts.Pause = DefaultPause
	}
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	r := &run{ctx: ctx, p: p, flows: flows, logf: logf}
	for _, b := range p.Backends {
		r.all = append(r.all, b.Addr)
	}
	fwd := opts.Forwarding
	if fwd == "" {
		fwd = config.DSRGUE
	}
	if fwd.Translates() && flows != "" {
		return Result{}, fmt.Errorf("forwarding %s with flows %s: a NAT service takes no flows mode", fwd, flows)
	}
	r.svc = labrun.Service{Name: "web", VIP: p.VIPs[0], Port: lab.HTTPPort, Protocol: config.TCP, Forwarding: fwd,
		Flows: flows, Backends: r.all}
	defer r.stopAll()
	res, err := r.sequence(opts)
	res.Flows, res.Forwarding = flows.Name(), string(fwd)
	return res, err
}

type run struct {
	ctx     context.Context
	p       lab.Plan
	flows   config.Flows
	logf    func(string, ...any)
	all     []netip.Addr
	svc     labrun.Service
	running []lab.Host
}

func (r *run) sequence(opts Options) (Result, error) {
	chained, err := ChainedPackets(r.p)
	if err != nil {
		return Result{}, err
	}
	var steps []Step
	var starts []time.Time
	mark := func(what string) error {
		starts = append(starts, time.Now())
		now, err := ChainedPackets(r.p)
		if err != nil {
			return err
		}
		if n := len(steps); n > 0 {
			steps[n-1].Chained = now - chained
		}
		chained = now
		steps = append(steps, Step{What: what})
		r.logf("%s: %s", r.flows.Name(), what)
		return nil
	}
	if err := r.start(r.p.Nodes[0]); err != nil {
		return Result{}, err
	}
	if err := r.start(r.p.Nodes[1]); err != nil {
		return Result{}, err
	}
	// Connections start before and between the changes, as in Beamer's
	// experiment, so that they live on different tables.
	load := NewLoad(r.ctx, r.p, r.svc.Target(), opts.Every)
	defer load.Stop()
	third := opts.Conns / 3
	b := r.all
	steps0 := []struct {
		what string
		do   func() error
		open int
	}{
		{"connections open", func() error { return nil }, third},
		{"backend 1 leaves", func() error { return r.reconfigure(b[1:]...) }, third},
		{"backend 2 leaves", func() error { return r.reconfigure(b[2:]...) }, opts.Conns - 2*third},
		{"backend 1 is back", func() error { return r.reconfigure(append([]netip.Addr{b[0]}, b[2:]...)...) }, 0},
		{"backend 2 is back", func() error { return r.reconfigure(b...) }, 0},
		{r.p.Nodes[1].Name + " leaves", func() error { return r.stop(r.p.Nodes[1]) }, 0},
		{r.p.Nodes[1].Name + " is back", func() error { return r.start(r.p.Nodes[1]) }, 0},
		{r.p.Nodes[2].Name + " starts after the changes", func() error { return r.start(r.p.Nodes[2]) }, 0},
	}
	for _, s := range steps0 {
		// A step's packets are those from just before its change to
		// just before the next one's.
		if err := mark(s.what); err != nil {
			return Result{}, err
		}
		if err := s.do(); err != nil {
			return Result{}, fmt.Errorf("%s: %w", s.what, err)
		}
		if err := load.Open(s.open); err != nil {
			return Result{}, err
		}
		select {
		case <-r.ctx.Done():
			return Result{}, context.Cause(r.ctx)
		case <-time.After(opts.Pause):
		}
	}
	// A connection the last change broke fails its next request, which
	// may take a whole labrun.RequestTimeout: a node without its session
	// (stateful, nat) drops the packet, and the client waits. Stopping
	// the load before that would not count it.
	if settle := labrun.RequestTimeout + opts.Every - opts.Pause; settle > 0 {
		select {
		case <-r.ctx.Done():
			return Result{}, context.Cause(r.ctx)
		case <-time.After(settle):
		}
	}
	res := load.Stop()
	if err := mark("end"); err != nil {
		return Result{}, err
	}
	res.Steps = steps[:len(steps)-1]
	for _, s := range res.Steps {
		res.Chained += s.Chained
	}
	// Each broken connection counts for the step during which its
	// failed request started.
	for _, at := range res.brokenAt {
		i := len(res.Steps) - 1
		for i > 0 && at.Before(starts[i]) {
			i--
		}
		res.Steps[i].Broken++
	}
	return res, nil
}

// reconfigure makes backends the service's, as a deployment tool would:
// the earlier set goes into the history with the time it ended, the same
// for every node.
func (r *run) reconfigure(backends ...netip.Addr) error {
	if r.flows == config.FlowsDaisyChain {
		r.svc.History = append(r.svc.History, labrun.Generation{Until: time.Now(), Backends: r.svc.Backends})
	}
	r.svc.Backends = slices.Clone(backends)
	q := r.p
	q.Nodes = r.running
	_, err := labrun.Reconfigure(r.ctx, q, []labrun.Service{r.svc})
	return err
}

func (r *run) addrs() []netip.Addr {
	var out []netip.Addr
	for _, n := range r.running {
		out = append(out, n.Addr)
	}
	return out
}

func (r *run) start(n lab.Host) error {
	if err := labrun.WriteConfig(r.p, n, []labrun.Service{r.svc}); err != nil {
		return err
	}
	if _, err := labrun.StartAgent(r.ctx, r.p, n, []labrun.Service{r.svc}); err != nil {
		return err
	}
	r.running = append(r.running, n)
	return lab.WaitNextHops(r.ctx, r.p, r.svc.VIP, r.addrs(), 30*time.Second)
}

func (r *run) stop(n lab.Host) error {
	pid, err := labrun.AgentPID(r.p, n)
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return err
	}
	r.running = slices.DeleteFunc(r.running, func(h lab.Host) bool { return h.Name == n.Name })
	if err := lab.WaitNextHops(r.ctx, r.p, r.svc.VIP, r.addrs(), 10*time.Second); err != nil {
		return err
	}
	return labrun.WaitExit(r.ctx, pid, 10*time.Second)
}

// stopAll stops the agents still running, also after a failure.
func (r *run) stopAll() {
	for _, n := range slices.Clone(r.running) {
		if pid, err := labrun.AgentPID(r.p, n); err == nil {
			_ = syscall.Kill(pid, syscall.SIGTERM)
			_ = labrun.WaitExit(context.Background(), pid, 10*time.Second)
		}
	}
	r.running = nil
}

// ChainedPackets sums what the backends' programs handed on to a
// previous owner so far.
func ChainedPackets(p lab.Plan) (uint64, error) {
	var n uint64
	for _, b := range p.Backends {
		st, err := decap.ChainStats(b.PinDir)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", b.Name, err)
		}
		n += st["chained"].Packets
	}
	return n, nil
}

// Load keeps persistent connections to a target busy: each sends a
// request every interval until Stop, which closes them and counts. A
// connection is broken when one of its requests fails.
type Load struct {
	ctx    context.Context
	cancel context.CancelFunc
	p      lab.Plan
	target netip.AddrPort
	every  time.Duration
	wg     sync.WaitGroup
	mu     sync.Mutex
	res    Result
	// OnBroken, when set before Open, is called with the client end of
	// a connection as it breaks, before the connection is closed: a
	// test can look at its sockets while they still say why.
	OnBroken func(from netip.AddrPort)
}

// NewLoad returns a load without connections; Open adds them.
func NewLoad(ctx context.Context, p lab.Plan, target netip.AddrPort, every time.Duration) *Load {
	lctx, cancel := context.WithCancel(ctx)
	return &Load{ctx: lctx, cancel: cancel, p: p, target: target, every: every}
}

// Open adds n connections, spread over the lab's clients, each
// established before Open returns.
func (l *Load) Open(n int) error {
	for range n {
		l.mu.Lock()
		i := l.res.Conns
		l.mu.Unlock()
		c, err := labrun.DialHTTP(l.ctx, l.p.Clients[i%len(l.p.Clients)].Namespace, l.target)
		if err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		l.mu.Lock()
		l.res.Conns++
		l.mu.Unlock()
		l.wg.Go(func() { l.run(i, c) })
	}
	return nil
}

func (l *Load) run(i int, c *labrun.HTTPConn) {
	defer c.Close()
	// Spread the requests over the interval.
	time.Sleep(time.Duration(rand.Int64N(int64(l.every))))
	var first string
	n := 0
	defer func() {
		l.mu.Lock()
		l.res.Requests += n
		l.mu.Unlock()
	}()
	for l.ctx.Err() == nil {
		start := time.Now()
		name, err := c.Get(l.ctx, false)
		if l.ctx.Err() != nil {
			return
		}
		if err != nil {
			if l.OnBroken != nil {
				l.OnBroken(c.LocalAddr())
			}
			l.mu.Lock()
			defer l.mu.Unlock()
			l.res.Broken++
			l.res.brokenAt = append(l.res.brokenAt, start)
			if len(l.res.Errors) < 5 {
				l.res.Errors = append(l.res.Errors, fmt.Sprintf("connection %d to %s, after %d requests, at %s: %v", i, first, n, start.Format("15:04:05.000"), err))
			}
			return
		}
		if first == "" {
			first = name
		} else if name != first {
			l.mu.Lock()
			l.res.Impossible = append(l.res.Impossible, fmt.Sprintf("connection %d answered by %s, then by %s", i, first, name))
			l.mu.Unlock()
		}
		n++
		select {
		case <-l.ctx.Done():
		case <-time.After(l.every):
		}
	}
}

// Stop ends the load and returns its counts; later calls return the same.
func (l *Load) Stop() Result {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.res
}
