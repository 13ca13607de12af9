package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"syscall"
	"time"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
)

// The operations of a scale event.
const (
	opStart = "start" // start a stopped node's agent
	opStop  = "stop"  // SIGTERM a running one: it withdraws, drains, exits
)

// Pauses between scale events, as the issue asks: random, so that
// events fall at every phase of the speakers' timers.
const (
	pauseMin = 500 * time.Millisecond
	pauseMax = 2 * time.Second
)

// How long one scale event may take before the run gives up: a start
// waits for the agent's start-up and its first BGP session.
const (
	startTimeout = 15 * time.Second
	stopTimeout  = 10 * time.Second
)

// scaleStep is one planned scale event.
type scaleStep struct {
	Op    string
	Node  int           // index into the lab's nodes
	Pause time.Duration // before the event
}

// planScale plans n random scale events over nodes nodes, of which those
// with running[i] set run at first. Each event starts a stopped node or
// stops a running one, chosen at random, keeping 1 to nodes running: with
// every node running it must stop one, with one left it must start one,
// otherwise a coin decides. The node is chosen at random among those the
// operation applies to.
func planScale(rng *rand.Rand, running []bool, n int) ([]scaleStep, error) {
	up := slices.Clone(running)
	count := 0
	for _, r := range up {
		if r {
			count++
		}
	}
	if len(up) < 2 || count < 1 {
		return nil, fmt.Errorf("%d nodes with %d running: want at least 2 nodes and 1 running", len(up), count)
	}
	steps := make([]scaleStep, 0, n)
	for range n {
		op := opStart
		switch {
		case count == len(up):
			op = opStop
		case count == 1:
			op = opStart
		case rng.IntN(2) == 0:
			op = opStop
		}
		var candidates []int
		for i, r := range up {
			if r == (op == opStop) {
				candidates = append(candidates, i)
			}
		}
		node := candidates[rng.IntN(len(candidates))]
		up[node] = op == opStart
		if op == opStart {
			count++
		} else {
			count--
		}
		pause := pauseMin + time.Duration(rng.Int64N(int64(pauseMax-pauseMin)+1))
		steps = append(steps, scaleStep{Op: op, Node: node, Pause: pause.Round(time.Millisecond)})
	}
	return steps, nil
}

// ScaleEvent is one measured scale event.
type ScaleEvent struct {
	Op   string `json:"op"`
	Node string `json:"node"`
	// Running is how many agents run after the event.
	Running int     `json:"running_after"`
	PauseMs float64 `json:"pause_before_ms"`
	// WaitMs is how long a start first waited for the node's previous
	// agent to exit (it drains after SIGTERM); not part of Ms.
	WaitMs float64 `json:"wait_exit_ms,omitempty"`
	// Ms is T0 (exec or SIGTERM) → T1 (the route gained or lost the
	// node's next hop).
	Ms   float64 `json:"ms"`
	Seen string  `json:"seen"`
	// Where the time went, from the agent's log (millisecond stamps):
	// AgentMs is T0 → "bgp speaker started" for a start, T0 → "bgp
	// routes withdrawn" for a stop; SessionMs is "bgp speaker started"
	// → "bgp peer up" (the speaker connects, OPEN, KEEPALIVE); RouterMs is
	// the rest up to T1 (the UPDATE, the router, its FIB write).
	AgentMs   *float64 `json:"agent_ms,omitempty"`
	SessionMs *float64 `json:"session_ms,omitempty"`
	RouterMs  *float64 `json:"router_ms,omitempty"`
	// BFDUpMs is "bgp peer up" → the agent's BFD session up (negative:
	// BFD came first); until then only the hold time would notice a
	// hang.
	BFDUpMs *float64 `json:"bfd_up_ms,omitempty"`

	t0        time.Time
	t1        time.Time
	node      int
	logOffset int64
}

// ScaleResult is the convergence measurement with one router.
type ScaleResult struct {
	Mode       agentMode         `json:"agent_mode"`
	Seed       uint64            `json:"seed"`
	PauseMinMs float64           `json:"pause_min_ms"`
	PauseMaxMs float64           `json:"pause_max_ms"`
	PollMs     float64           `json:"fib_poll_ms"`
	Start      benchutil.Summary `json:"start"`
	Stop       benchutil.Summary `json:"stop"`
	Breakdown  []Breakdown       `json:"breakdown"`
	Events     []ScaleEvent      `json:"events"`
}

// Breakdown summarizes one part of the events' time.
type Breakdown struct {
	Op      string            `json:"op"`
	Part    string            `json:"part"`
	Summary benchutil.Summary `json:"summary"`
}

// runScale runs n random scale events on l, whose agents all run, and
// leaves them all running again.
func runScale(ctx context.Context, l *benchLab, n int, seed uint64, progress func(string)) (*ScaleResult, error) {
	running := make([]bool, labNodes)
	for _, i := range l.running() {
		running[i] = true
	}
	steps, err := planScale(rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), running, n)
	if err != nil {
		return nil, err
	}
	res := &ScaleResult{Mode: l.mode, Seed: seed, PauseMinMs: benchutil.Ms(pauseMin), PauseMaxMs: benchutil.Ms(pauseMax), PollMs: benchutil.Ms(fibPoll)}
	for k, st := range steps {
		if err := benchutil.Sleep(ctx, st.Pause); err != nil {
			return nil, err
		}
		ev, err := scaleOnce(ctx, l, st)
		if err != nil {
			return nil, fmt.Errorf("event %d (%s %s): %w", k+1, st.Op, l.node(st.Node).Name, err)
		}
		res.Events = append(res.Events, ev)
		if (k+1)%10 == 0 || k+1 == n {
			progress(fmt.Sprintf("%s: scale %d/%d events, last: %s %s → route after %s ms (%d running)",
				l.kind, k+1, n, ev.Op, ev.Node, benchutil.FmtMs(ev.Ms), ev.Running))
		}
	}
	// Every agent has exited or runs: the logs are complete.
	if err := l.startAll(ctx, startTimeout); err != nil {
		return nil, err
	}
	for k := range res.Events {
		ev := &res.Events[k]
		text, err := l.agentLog(ev.node, ev.logOffset)
		if err != nil {
			return nil, err
		}
		breakdown(ev, parseAgentLog(text))
	}
	res.summarize()
	return res, nil
}

func scaleOnce(ctx context.Context, l *benchLab, st scaleStep) (ScaleEvent, error) {
	node := l.node(st.Node)
	ev := ScaleEvent{Op: st.Op, Node: node.Name, PauseMs: benchutil.Ms(st.Pause), node: st.Node}
	switch st.Op {
	case opStop:
		ev.logOffset = l.logSize(st.Node)
		ev.t0 = time.Now()
		if err := l.signal(st.Node, syscall.SIGTERM); err != nil {
			return ev, err
		}
		t1, _, how, err := l.fib.wait(ctx, stopTimeout, lacks(node.Addr))
		if err != nil {
			return ev, err
		}
		ev.t1, ev.Seen = t1, how
	case opStart:
		w0 := time.Now()
		if err := l.reap(ctx, st.Node); err != nil {
			return ev, err
		}
		ev.WaitMs = benchutil.Ms(time.Since(w0))
		res, err := l.start(ctx, st.Node)
		if err != nil {
			return ev, err
		}
		ev.t0, ev.logOffset = res.T0, res.LogOffset
		t1, _, how, err := l.fib.wait(ctx, startTimeout, has(node.Addr))
		werr := res.wait()
		if err != nil {
			return ev, err
		}
		if werr != nil {
			return ev, werr
		}
		ev.t1, ev.Seen = t1, how
	default:
		return ev, fmt.Errorf("unknown operation %q", st.Op)
	}
	ev.Ms = benchutil.Ms(ev.t1.Sub(ev.t0))
	ev.Running = len(l.running())
	return ev, nil
}

// breakdown splits ev's time at the agent's log stamps. Parts whose
// stamps are missing stay unset.
func breakdown(ev *ScaleEvent, lg agentLog) {
	span := func(a, b time.Time) *float64 {
		if a.IsZero() || b.IsZero() {
			return nil
		}
		v := benchutil.Ms(b.Sub(a))
		return &v
	}
	switch ev.Op {
	case opStart:
		ev.AgentMs = span(ev.t0, lg.speakerStarted)
		ev.SessionMs = span(lg.speakerStarted, lg.peerUp)
		ev.RouterMs = span(lg.peerUp, ev.t1)
		ev.BFDUpMs = span(lg.peerUp, lg.bfdUp)
	case opStop:
		ev.AgentMs = span(ev.t0, lg.withdrawn)
		ev.RouterMs = span(lg.withdrawn, ev.t1)
	}
}

// summarize fills in the summaries from the events.
func (r *ScaleResult) summarize() {
	var start, stop []float64
	parts := map[string][]float64{}
	for _, ev := range r.Events {
		if ev.Op == opStart {
			start = append(start, ev.Ms)
		} else {
			stop = append(stop, ev.Ms)
		}
		for _, p := range []struct {
			name string
			v    *float64
		}{{partAgent, ev.AgentMs}, {partSession, ev.SessionMs}, {partRouter, ev.RouterMs}, {partBFD, ev.BFDUpMs}} {
			if p.v != nil {
				parts[ev.Op+"/"+p.name] = append(parts[ev.Op+"/"+p.name], *p.v)
			}
		}
	}
	r.Start, r.Stop = benchutil.Summarize(start), benchutil.Summarize(stop)
	r.Breakdown = nil
	for _, op := range []string{opStart, opStop} {
		for _, part := range []string{partAgent, partSession, partRouter, partBFD} {
			if s := parts[op+"/"+part]; len(s) > 0 {
				r.Breakdown = append(r.Breakdown, Breakdown{Op: op, Part: part, Summary: benchutil.Summarize(s)})
			}
		}
	}
}

// The parts of a scale event's time (ScaleEvent's AgentMs, SessionMs,
// RouterMs).
const (
	partAgent   = "agent"
	partSession = "session"
	partRouter  = "router"
	partBFD     = "bfd" // not a part of the time to the route: when BFD is up
)
