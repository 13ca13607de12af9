package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/dataplane"
	"github.com/xlbproject/xlb/internal/lab"
	"github.com/xlbproject/xlb/internal/labrun"
)

// Beamer's experiment (Olteanu et al., NSDI'18, §6), at this machine's
// scale: persistent HTTP connections stay busy while backends leave one by
// one and come back, an xlb instance leaves and comes back, and a new
// instance that never saw the old backend sets starts. Each flows mode
// runs the same sequence; a connection is broken when one of its requests
// fails. Daisy chaining must break none; plain Maglev must break some (or
// the sequence moved nothing, and the test proves nothing).
func TestConnectionSurvival(t *testing.T) {
	needRoot(t)
	prefix := labPrefix + "s"
	useLab(t, prefix)
	ctx, cancel := context.WithTimeout(interrupted, 8*time.Minute)
	defer cancel()
	p, err := lab.Up(ctx, lab.Spec{Prefix: prefix, Clients: 2, Nodes: 3, Backends: 4, Binary: xlbBinary, Router: lab.RouterEmbedded})
	if err != nil {
		t.Fatal(err)
	}
	logAgentsOnFailure(t, p)

	results := map[config.Flows]survival{}
	for _, flows := range []config.Flows{config.FlowsDaisyChain, config.FlowsStateless, config.FlowsStateful} {
		r := runSurvival(t, ctx, p, flows)
		results[flows] = r
		t.Logf("%-11s %d connections, %d broken, %d requests; chained on the backends: %d packets", flows, r.conns, r.broken, r.requests, r.chained)
		for _, e := range r.firstErrs {
			t.Logf("%-11s   %s", flows, e)
		}
		if t.Failed() {
			return
		}
	}
	if r := results[config.FlowsDaisyChain]; r.broken != 0 {
		t.Errorf("daisy chaining broke %d of %d connections, want none", r.broken, r.conns)
	}
	if r := results[config.FlowsDaisyChain]; r.chained == 0 {
		t.Errorf("daisy chaining kept every connection without chaining a packet: the sequence moved no connection")
	}
	if r := results[config.FlowsStateless]; r.broken == 0 {
		t.Errorf("plain Maglev broke no connection: the sequence moved no connection, so it shows nothing")
	}
}

// survivalConns is how many persistent connections each run keeps busy
// (a third opened before the changes, a third after each of the first
// two), and survivalEvery how often each sends a request.
const (
	survivalConns = 300
	survivalEvery = 200 * time.Millisecond
)

type survival struct {
	conns, broken, requests int
	chained                 uint64
	firstErrs               []string
}

// runSurvival runs the sequence for one flows mode and stops every agent
// it started.
func runSurvival(t *testing.T, ctx context.Context, p lab.Plan, flows config.Flows) survival {
	t.Helper()
	all := make([]netip.Addr, len(p.Backends))
	for i, b := range p.Backends {
		all[i] = b.Addr
	}
	svc := labrun.Service{Name: "web", VIP: p.VIPs[0], Port: lab.HTTPPort, Protocol: config.TCP, Forwarding: config.DSRGUE,
		Flows: flows, Backends: all}
	// What a deployment tool that changes the backends writes: the
	// earlier sets with the time each ended, the same for every node.
	change := func(backends ...netip.Addr) {
		if flows == config.FlowsDaisyChain {
			svc.History = append(svc.History, labrun.Generation{Until: time.Now(), Backends: svc.Backends})
		}
		svc.Backends = backends
	}
	running := []lab.Host{}
	runningPlan := func() lab.Plan {
		q := p
		q.Nodes = running
		return q
	}
	addrs := func() []netip.Addr {
		var out []netip.Addr
		for _, n := range running {
			out = append(out, n.Addr)
		}
		return out
	}
	start := func(n lab.Host) {
		t.Helper()
		if err := labrun.WriteConfig(p, n, []labrun.Service{svc}); err != nil {
			t.Fatal(err)
		}
		if _, err := labrun.StartAgent(ctx, p, n, []labrun.Service{svc}); err != nil {
			t.Fatal(err)
		}
		running = append(running, n)
		if err := lab.WaitNextHops(ctx, p, svc.VIP, addrs(), 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	stop := func(n lab.Host) {
		t.Helper()
		pid, err := labrun.AgentPID(p, n)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		running = slices.DeleteFunc(running, func(h lab.Host) bool { return h.Name == n.Name })
		if err := lab.WaitNextHops(ctx, p, svc.VIP, addrs(), 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := labrun.WaitExit(ctx, pid, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, n := range slices.Clone(running) {
			if pid, err := labrun.AgentPID(p, n); err == nil {
				_ = syscall.Kill(pid, syscall.SIGTERM)
				_ = labrun.WaitExit(ctx, pid, 10*time.Second)
			}
		}
	}()
	reconfigure := func(what string, backends ...netip.Addr) {
		t.Helper()
		change(backends...)
		if _, err := labrun.Reconfigure(ctx, runningPlan(), []labrun.Service{svc}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		t.Logf("%s: %s", flows, what)
		time.Sleep(2 * time.Second)
	}

	chainedBefore := chainedPackets(t, p)
	start(p.Nodes[0])
	start(p.Nodes[1])
	// Connections start before and between the changes, as in Beamer's
	// experiment, so they live on different tables.
	load := newBusyLoad(t, ctx, p, svc.Target())
	load.open(survivalConns / 3)
	time.Sleep(2 * time.Second)

	b := all
	reconfigure("backend 1 leaves", b[1], b[2], b[3])
	load.open(survivalConns / 3)
	reconfigure("backend 2 leaves", b[2], b[3])
	load.open(survivalConns - 2*(survivalConns/3))
	reconfigure("backend 1 is back", b[0], b[2], b[3])
	reconfigure("backend 2 is back", b[0], b[1], b[2], b[3])
	stop(p.Nodes[1])
	t.Logf("%s: %s left", flows, p.Nodes[1].Name)
	time.Sleep(2 * time.Second)
	start(p.Nodes[1])
	t.Logf("%s: %s is back", flows, p.Nodes[1].Name)
	time.Sleep(2 * time.Second)
	// The new instance never saw the earlier backend sets: it has only
	// what its configuration says.
	start(p.Nodes[2])
	t.Logf("%s: %s started after the changes", flows, p.Nodes[2].Name)
	time.Sleep(3 * time.Second)

	r := load.stop()
	r.chained = chainedPackets(t, p) - chainedBefore
	return r
}

// busyLoad keeps persistent connections to a target busy: each sends a
// request every survivalEvery until stop, which closes them and counts.
type busyLoad struct {
	t      *testing.T
	ctx    context.Context
	cancel context.CancelFunc
	p      lab.Plan
	target netip.AddrPort
	wg     sync.WaitGroup
	mu     sync.Mutex
	res    survival
}

func newBusyLoad(t *testing.T, ctx context.Context, p lab.Plan, target netip.AddrPort) *busyLoad {
	lctx, cancel := context.WithCancel(ctx)
	l := &busyLoad{t: t, ctx: lctx, cancel: cancel, p: p, target: target}
	t.Cleanup(func() { l.stop() })
	return l
}

// open adds n connections, spread over the lab's clients, each
// established before open returns.
func (l *busyLoad) open(n int) {
	l.t.Helper()
	for range n {
		i := l.res.conns
		c, err := labrun.DialHTTP(l.ctx, l.p.Clients[i%len(l.p.Clients)].Namespace, l.target)
		if err != nil {
			l.t.Fatalf("connection %d: %v", i, err)
		}
		l.mu.Lock()
		l.res.conns++
		l.mu.Unlock()
		l.wg.Go(func() { l.run(i, c) })
	}
}

func (l *busyLoad) run(i int, c *labrun.HTTPConn) {
	defer c.Close()
	// Spread the requests over the interval.
	time.Sleep(time.Duration(rand.Int64N(int64(survivalEvery))))
	var first string
	n := 0
	defer func() {
		l.mu.Lock()
		l.res.requests += n
		l.mu.Unlock()
	}()
	for l.ctx.Err() == nil {
		name, err := c.Get(l.ctx, false)
		if l.ctx.Err() != nil {
			return
		}
		if err != nil {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.res.broken++
			if len(l.res.firstErrs) < 5 {
				l.res.firstErrs = append(l.res.firstErrs, fmt.Sprintf("connection %d to %s, after %d requests: %v", i, first, n, err))
			}
			return
		}
		if first == "" {
			first = name
		} else if name != first {
			// Impossible for TCP: the test would be reading wrong.
			l.t.Errorf("connection %d answered by %s, then by %s", i, first, name)
		}
		n++
		select {
		case <-l.ctx.Done():
		case <-time.After(survivalEvery):
		}
	}
}

// stop ends the load and returns its counts; later calls return the same.
func (l *busyLoad) stop() survival {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.res
}

// chainedPackets sums what the backends' programs handed on to a previous
// owner.
func chainedPackets(t *testing.T, p lab.Plan) uint64 {
	t.Helper()
	var n uint64
	for _, b := range p.Backends {
		st, err := dataplane.ChainStats(b.PinDir)
		if err != nil {
			t.Fatalf("%s: %v", b.Name, err)
		}
		n += st["chained"].Packets
		var line []string
		for _, name := range dataplane.ChainStatNames {
			if c := st[name].Packets; c > 0 {
				line = append(line, fmt.Sprintf("%s %d", name, c))
			}
		}
		t.Logf("%s chain counters so far: %s", b.Name, strings.Join(line, ", "))
	}
	return n
}
