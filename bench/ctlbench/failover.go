package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
)

// FailoverResult is the failure → removal and return → re-entry
// measurement.
type FailoverResult struct {
	Check CheckParams `json:"check"`
	// Backends of the service; the victims take turns.
	Backends  int     `json:"backends"`
	TableSize uint32  `json:"table_size"`
	PollMs    float64 `json:"table_poll_ms"`
	// DetectMs is interval × fall, RecoverMs interval × rise: the
	// detection times the check's parameters imply.
	DetectMs  float64 `json:"implied_detect_ms"`
	RecoverMs float64 `json:"implied_recover_ms"`
	// Removal: stop → table without the backend; Excess: the same less
	// DetectMs. Return: start → table with the backend again.
	Removal       benchutil.Summary `json:"removal"`
	RemovalExcess benchutil.Summary `json:"removal_excess"`
	Return        benchutil.Summary `json:"return"`
	ReturnExcess  benchutil.Summary `json:"return_excess"`
	Events        []FailoverEvent   `json:"events"`
}

// FailoverEvent is one stop and start of a backend's HTTP server.
type FailoverEvent struct {
	Victim string `json:"victim"`
	// ControlMs is how long the control socket took to stop the server;
	// the stop happened within it and RemovalMs counts from its start.
	ControlMs float64 `json:"control_ms"`
	RemovalMs float64 `json:"removal_ms"`
	ReturnMs  float64 `json:"return_ms"`
	// OtherChanges counts table changes seen before the expected one.
	OtherChanges int `json:"other_changes,omitempty"`
}

// runFailover stops one backend's HTTP server n times, each time timing
// how long until the agent's table no longer names it, then starts it
// again and times how long until the table names it again.
func runFailover(ctx context.Context, l *benchLab, n int, progress func(string)) (*FailoverResult, error) {
	_, slots, err := l.currentTable()
	if err != nil {
		return nil, err
	}
	size := 0
	for _, c := range slots {
		size += c
	}
	res := &FailoverResult{Check: l.params(), Backends: len(l.p.Backends), TableSize: uint32(size), PollMs: benchutil.Ms(tablePoll)}
	res.DetectMs, res.RecoverMs = res.Check.detectMs(), res.Check.recoverMs()
	var removal, ret []float64
	for i := range n {
		victim := l.p.Backends[i%len(l.p.Backends)]
		ev, err := failOnce(ctx, l, victim)
		if err != nil {
			return nil, fmt.Errorf("event %d (%s): %w", i+1, victim.Name, err)
		}
		res.Events = append(res.Events, ev)
		removal, ret = append(removal, ev.RemovalMs), append(ret, ev.ReturnMs)
		if (i+1)%10 == 0 || i+1 == n {
			progress(fmt.Sprintf("failover: %d/%d events, last: removed after %.0f ms, back after %.0f ms", i+1, n, ev.RemovalMs, ev.ReturnMs))
		}
		// Start the next event at a random phase of the probe schedule.
		if err := benchutil.Sleep(ctx, 100*time.Millisecond+rand.N(labCheck.interval)); err != nil {
			return nil, err
		}
	}
	res.Removal, res.Return = benchutil.Summarize(removal), benchutil.Summarize(ret)
	res.RemovalExcess = benchutil.Summarize(benchutil.Shift(removal, res.DetectMs))
	res.ReturnExcess = benchutil.Summarize(benchutil.Shift(ret, res.RecoverMs))
	return res, nil
}

func failOnce(ctx context.Context, l *benchLab, victim lab.Host) (FailoverEvent, error) {
	ev := FailoverEvent{Victim: victim.Name}
	before, slots, err := l.currentTable()
	if err != nil {
		return ev, err
	}
	if slots[victim.Addr] == 0 {
		return ev, fmt.Errorf("%s is not in the table before it stops: %v", victim.Name, slots)
	}
	t0 := time.Now()
	if err := labrun.SetHTTP(ctx, l.p, victim, lab.HTTPStop); err != nil {
		return ev, err
	}
	ev.ControlMs = benchutil.Ms(time.Since(t0))
	gone := func(s map[netip.Addr]int) bool { return s[victim.Addr] == 0 }
	t1, after, others, err := l.waitTable(ctx, before, gone)
	if err != nil {
		return ev, fmt.Errorf("removal: %w", err)
	}
	ev.RemovalMs, ev.OtherChanges = benchutil.Ms(t1.Sub(t0)), others

	// Right after the removal the next probe is a whole interval away:
	// start at a random phase instead.
	if err := benchutil.Sleep(ctx, rand.N(labCheck.interval)); err != nil {
		return ev, err
	}
	t2 := time.Now()
	if err := labrun.SetHTTP(ctx, l.p, victim, lab.HTTPStart); err != nil {
		return ev, err
	}
	back := func(s map[netip.Addr]int) bool { return s[victim.Addr] > 0 }
	t3, _, others, err := l.waitTable(ctx, after, back)
	if err != nil {
		return ev, fmt.Errorf("return: %w", err)
	}
	ev.ReturnMs, ev.OtherChanges = benchutil.Ms(t3.Sub(t2)), ev.OtherChanges+others
	return ev, nil
}
