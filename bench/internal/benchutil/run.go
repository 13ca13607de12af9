package benchutil

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/xlbproject/xlb/internal/lab"
	"github.com/xlbproject/xlb/internal/netns"
)

// Run is the frame of a lab bench's run: a context that ends on a signal
// (Interruptible) or when the budget is spent, and progress lines stamped
// with the time since Start.
type Run struct {
	Ctx   context.Context
	Start time.Time
	stop  []func()
}

// Begin starts a run of bench name within budget, and first takes down
// the labs that earlier runs left behind: those named stalePrefix and the
// PID of a process that is gone (a run killed before it could clean up).
func Begin(name, stalePrefix string, budget time.Duration) *Run {
	ctx, stop := Interruptible(name)
	ctx, cancel := context.WithTimeout(ctx, budget)
	r := &Run{Ctx: ctx, Start: time.Now(), stop: []func(){cancel, stop}}
	for _, pid := range StaleRuns(stalePrefix, lab.StateDir(""), lab.PinDir(""), netns.Dir) {
		r.Progress("removing what run %d left behind", pid)
		if err := lab.Down(stalePrefix + strconv.Itoa(pid)); err != nil {
			r.Progress("  %v", err)
		}
	}
	return r
}

// Progress prints a line stamped with the seconds since the start.
func (r *Run) Progress(format string, args ...any) {
	fmt.Printf("[%5.1fs] %s\n", time.Since(r.Start).Seconds(), fmt.Sprintf(format, args...))
}

// End releases the run's context and its signal handling.
func (r *Run) End() {
	for _, f := range r.stop {
		f()
	}
}
