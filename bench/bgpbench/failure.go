package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
)

// The kinds of failure.
const (
	failKill = "kill" // SIGKILL: the kernel closes the agent's sockets
	failHang = "hang" // SIGSTOP: sockets stay open, nothing answers, as on a frozen host
)

// shortHold is the hold time of the runs without BFD: the hang is then
// detected only by the hold timer, and 3 s keeps the run short. BGP
// takes the smaller of both sides' proposals, so the agents' 3 s wins
// over the router's 9 s.
const shortHold = 3 * time.Second

// Pauses before each failure, at random so that failures fall at every
// phase of the BFD and keepalive timers.
const (
	failPauseMin = 200 * time.Millisecond
	failPauseMax = 700 * time.Millisecond
)

// readyTimeout bounds the wait for a victim's next hop to be back in the
// route before its next failure.
const readyTimeout = 30 * time.Second

// FailureRun is one kind of failure under one agent mode.
type FailureRun struct {
	Kind   string            `json:"kind"`
	Mode   agentMode         `json:"agent_mode"`
	Detect benchutil.Summary `json:"detect"`
	Events []FailureEvent    `json:"events"`
}

// FailureEvent is one failure: T0 the signal, T1 the route without the
// node's next hop.
type FailureEvent struct {
	Node    string  `json:"node"`
	PauseMs float64 `json:"pause_before_ms"`
	// ReadyMs is how long the event first waited for the victim's next
	// hop to be back after its previous failure, and with BFD for its
	// BFD session to be up; not part of Ms.
	ReadyMs float64 `json:"wait_ready_ms,omitempty"`
	Ms      float64 `json:"ms"`
	Seen    string  `json:"seen"`
}

// failureModes are the agent modes of the failure measurement, in order:
// with BFD as the lab runs it, then without BFD and with shortHold.
func failureModes(l *benchLab) []agentMode {
	return []agentMode{l.defaultMode(), {BFD: false, HoldTime: shortHold}}
}

// runFailures measures n failures of each kind with and without BFD on
// l, whose agents all run, and leaves them all running with the lab's
// default mode.
func runFailures(ctx context.Context, l *benchLab, n int, rng *rand.Rand, progress func(string)) ([]FailureRun, error) {
	var runs []FailureRun
	for _, m := range failureModes(l) {
		if l.mode != m {
			progress(fmt.Sprintf("%s: restarting the agents with %s", l.kind, m))
			if err := l.restartAll(ctx, m); err != nil {
				return nil, err
			}
		}
		for _, kind := range []string{failKill, failHang} {
			run, err := failures(ctx, l, kind, n, rng)
			if err != nil {
				return nil, fmt.Errorf("%s with %s: %w", kind, m, err)
			}
			progress(fmt.Sprintf("%s: %d × %s with %s: p50 %s ms, max %s ms", l.kind, n, kind, m,
				benchutil.FmtMs(run.Detect.P50), benchutil.FmtMs(run.Detect.Max)))
			runs = append(runs, run)
		}
	}
	if l.mode != l.defaultMode() {
		if err := l.restartAll(ctx, l.defaultMode()); err != nil {
			return nil, err
		}
	}
	return runs, nil
}

// failures fails the nodes' agents in turn, n times: it waits until the
// victim's next hop is in the route (and its BFD session up), pauses, signals the agent and times
// its next hop leaving the route. Then it kills what is left of the
// agent and starts a new one, and goes on with the next node while that
// one's BGP session comes up (about 2 s): its route comes back during
// later events, and is waited for before it is the victim again.
func failures(ctx context.Context, l *benchLab, kind string, n int, rng *rand.Rand) (FailureRun, error) {
	run := FailureRun{Kind: kind, Mode: l.mode}
	sig, timeout := syscall.SIGKILL, 5*time.Second
	if kind == failHang {
		sig, timeout = syscall.SIGSTOP, l.mode.HoldTime+5*time.Second
	}
	var samples []float64
	for k := range n {
		i := k % labNodes
		node := l.node(i)
		r0 := time.Now()
		if err := l.waitReady(ctx, i, readyTimeout); err != nil {
			return run, err
		}
		ev := FailureEvent{Node: node.Name, ReadyMs: benchutil.Ms(time.Since(r0))}
		if ev.ReadyMs < 1 {
			ev.ReadyMs = 0
		}
		pause := failPauseMin + time.Duration(rng.Int64N(int64(failPauseMax-failPauseMin)))
		ev.PauseMs = benchutil.Ms(pause)
		if err := benchutil.Sleep(ctx, pause); err != nil {
			return run, err
		}
		t0 := time.Now()
		if err := l.signal(i, sig); err != nil {
			return run, err
		}
		t1, _, how, err := l.fib.wait(ctx, timeout, lacks(node.Addr))
		if err != nil {
			l.signal(i, syscall.SIGKILL)
			return run, fmt.Errorf("%s: %w", node.Name, err)
		}
		ev.Ms, ev.Seen = benchutil.Ms(t1.Sub(t0)), how
		run.Events = append(run.Events, ev)
		samples = append(samples, ev.Ms)
		if kind == failHang {
			if err := l.signal(i, syscall.SIGKILL); err != nil {
				return run, err
			}
		}
		res, err := l.start(ctx, i)
		if err != nil {
			return run, err
		}
		if err := res.wait(); err != nil {
			return run, err
		}
	}
	run.Detect = benchutil.Summarize(samples)
	return run, nil
}
