package benchutil

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/netns"
	"github.com/xlbproject/xlb/testbed/testenv"
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

// BuildCommand is how XLB builds the binary, for a report's commands.
const BuildCommand = "go build -o TMPDIR/xlb github.com/xlbproject/xlb/cmd/xlb"

// XLB returns the xlb binary a bench runs: given when it is set (the
// -xlb flag), otherwise one built now, which remove deletes. cmds is what
// made it, for the report's commands: BuildCommand, or nothing.
func XLB(given string, progress func(string, ...any)) (bin string, cmds []string, remove func(), err error) {
	if given != "" {
		return given, nil, func() {}, nil
	}
	progress("building xlb")
	bin, remove, err = testenv.BuildXLB()
	if err != nil {
		return "", nil, nil, err
	}
	return bin, []string{BuildCommand}, remove, nil
}
