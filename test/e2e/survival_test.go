package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/survival"
)

// Beamer's experiment (Olteanu et al., NSDI'18, §6), at this machine's
// scale (testbed/survival): persistent HTTP connections stay busy while
// backends leave one by one and come back, an xlb instance leaves and
// comes back, and a new instance that never saw the old backend sets
// starts. Each flows mode runs the same sequence. Daisy chaining must
// break no connection, and must chain packets to do it; plain Maglev must
// break some (or the sequence moved nothing, and the test proves
// nothing).
func TestConnectionSurvival(t *testing.T) {
	needRoot(t)
	prefix := labPrefix + "s"
	useLab(t, prefix)
	ctx, cancel := context.WithTimeout(interrupted, 8*time.Minute)
	defer cancel()
	p, err := lab.Up(ctx, survival.Spec(prefix, xlbBinary))
	if err != nil {
		t.Fatal(err)
	}
	logAgentsOnFailure(t, p)

	results := map[config.Flows]survival.Result{}
	for _, flows := range []config.Flows{config.FlowsDaisyChain, config.FlowsStateless, config.FlowsStateful} {
		r, err := survival.Run(ctx, p, flows, survival.Options{Logf: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		results[flows] = r
		t.Logf("%-11s %d connections, %d broken, %d requests; chained on the backends: %d packets %v", r.Flows, r.Conns, r.Broken, r.Requests, r.Chained, r.Steps)
		for _, e := range r.Errors {
			t.Logf("%-11s   %s", r.Flows, e)
		}
		for _, e := range r.Impossible {
			t.Errorf("%s: %s: TCP cannot do that, the measurement is wrong", r.Flows, e)
		}
	}
	if r := results[config.FlowsDaisyChain]; r.Broken != 0 {
		t.Errorf("daisy chaining broke %d of %d connections, want none", r.Broken, r.Conns)
	}
	if r := results[config.FlowsDaisyChain]; r.Chained == 0 {
		t.Errorf("daisy chaining kept every connection without chaining a packet: the sequence moved no connection")
	}
	if r := results[config.FlowsStateless]; r.Broken == 0 {
		t.Errorf("plain Maglev broke no connection: the sequence moved no connection, so it shows nothing")
	}
	if r := results[config.FlowsStateful]; r.Conns == 0 || r.Requests == 0 {
		t.Errorf("the stateful run made no requests: %+v", r)
	}
}
