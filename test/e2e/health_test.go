package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
)

// The health checks of the health tests: fast, so that the tests are.
const (
	checkInterval = 200 * time.Millisecond
	checkTimeout  = 150 * time.Millisecond
	checkRise     = 2
	checkFall     = 2
)

// Bounds of the measurements. The slack covers the scheduling jitter of
// the prober, the agent's reaction and the status polling, on a loaded
// machine with two cores.
const (
	slack = time.Second
	// detectBound: after a backend fails, no new connection reaches it.
	detectBound = checkFall*checkInterval + slack
	// hangBound: as detectBound, but every failed probe takes a timeout.
	hangBound = checkFall*checkInterval + checkTimeout + slack
	// recoverBound: after a backend is back, it gets new connections.
	recoverBound = checkRise*checkInterval + slack
)

// Parameters of the request stream that watches where connections go.
const (
	// streamEvery is the time between two new connections: the
	// resolution of the measurements.
	streamEvery = 2 * time.Millisecond
	// streamTimeout ends a request to a hanging backend.
	streamTimeout = time.Second
)

// testHealthChecks turns health checks on in the running agents, makes
// backends fail in the ways a check must notice, and measures how fast
// traffic moves away from them and back.
func (e *env) testHealthChecks(t *testing.T) {
	ctx := testCtx(t)
	httpCheck := &labrun.Check{Type: config.CheckHTTP, Path: "/", Interval: checkInterval, Timeout: checkTimeout, Rise: checkRise, Fall: checkFall}
	// The echo service is UDP; its check connects to the backends' HTTP
	// port, which sees a hanging server as healthy.
	tcpCheck := &labrun.Check{Type: config.CheckTCP, Port: lab.HTTPPort, Interval: checkInterval, Timeout: checkTimeout, Rise: checkRise, Fall: checkFall}
	checked := labrun.WithCheck(labrun.WithCheck(e.services, e.web().Name, httpCheck), e.echo().Name, tcpCheck)

	t.Cleanup(func() {
		for _, be := range e.p.Backends {
			if err := labrun.SetHTTP(interrupted, e.p, be, lab.HTTPStart); err != nil {
				t.Errorf("restore the HTTP server: %v", err)
			}
		}
		if _, err := labrun.Reconfigure(interrupted, e.p, e.services); err != nil {
			t.Errorf("restore the configuration: %v", err)
		}
	})
	if _, err := labrun.Reconfigure(ctx, e.p, checked); err != nil {
		t.Fatal(err)
	}
	for _, s := range checked {
		for _, addr := range s.Backends {
			if _, err := labrun.WaitHealth(ctx, e.p, s.Name, addr, api.StateUp, 5*time.Second); err != nil {
				t.Fatal(err)
			}
		}
	}

	t.Cleanup(func() {
		if t.Failed() {
			e.logHealthEvents(t)
		}
	})
	t.Run("StoppedBackend", e.testStoppedBackend)
	t.Run("HangingBackend", e.testHangingBackend)
	t.Run("AllBackendsDown", e.testAllBackendsDown)
}

// logHealthEvents logs what the agents logged about health, to explain
// a failure.
func (e *env) logHealthEvents(t *testing.T) {
	for _, n := range e.p.Nodes {
		b, err := os.ReadFile(lab.LogFile(e.p.Spec.Prefix, labrun.AgentName(n)))
		if err != nil {
			t.Log(err)
			continue
		}
		for line := range strings.Lines(string(b)) {
			if strings.Contains(line, "health") || strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
				t.Logf("%s: %s", n.Name, strings.TrimSpace(line))
			}
		}
	}
}

// streamOf runs labrun.Stream to the web service in the background until
// the returned stop is called, which returns the attempts.
func (e *env) streamOf(t *testing.T, ctx context.Context) (stop func() []labrun.Attempt) {
	t.Helper()
	return streamTo(t, ctx, e.client.Namespace, e.web().Target(), streamEvery, streamTimeout)
}

// streamTo runs labrun.Stream from namespace ns to target in the
// background until the returned stop is called, which returns the
// attempts.
func streamTo(t *testing.T, ctx context.Context, ns string, target netip.AddrPort, every, timeout time.Duration) (stop func() []labrun.Attempt) {
	t.Helper()
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan []labrun.Attempt, 1)
	go func() {
		a, err := labrun.Stream(sctx, ns, target, every, timeout)
		if err != nil {
			t.Error(err)
		}
		done <- a
	}()
	// Safe to call more than once; the test's cleanup calls it too, so a
	// failing test never leaves the stream running.
	stop = sync.OnceValue(func() []labrun.Attempt {
		cancel()
		return <-done
	})
	t.Cleanup(func() { stop() })
	return stop
}

// window selects the attempts that started in [from, to).
func window(as []labrun.Attempt, from, to time.Time) []labrun.Attempt {
	var out []labrun.Attempt
	for _, a := range as {
		if !a.Start.Before(from) && a.Start.Before(to) {
			out = append(out, a)
		}
	}
	return out
}

// summary counts attempts: answers per backend and failures.
type summary struct {
	total, failed int
	by            labrun.Tally
	lastFail      labrun.Attempt // the failed attempt that started last
	firstErr      error
}

func summarize(as []labrun.Attempt) summary {
	s := summary{by: labrun.Tally{}}
	for _, a := range as {
		s.total++
		if a.Err != nil {
			s.failed++
			if s.firstErr == nil {
				s.firstErr = a.Err
			}
			if a.Start.After(s.lastFail.Start) {
				s.lastFail = a
			}
			continue
		}
		s.by[a.Backend]++
	}
	return s
}

func (s summary) String() string {
	return fmt.Sprintf("%d requests, %d failed, answers %v", s.total, s.failed, s.by)
}

// testStoppedBackend stops a backend's HTTP server: connections to it are
// refused, by its kernel, as soon as it stops. Under DSR the node cannot
// retry elsewhere, so each new connection that the tables still send to
// it fails until both nodes have taken it out; the test measures how long
// that lasts, then that every request succeeds, then how soon the
// backend gets traffic again once it serves again.
func (e *env) testStoppedBackend(t *testing.T) {
	ctx := testCtx(t)
	victim := e.p.Backends[0]
	stop := e.streamOf(t, ctx)

	time.Sleep(500 * time.Millisecond) // every backend answers
	t0 := time.Now()
	if err := labrun.SetHTTP(ctx, e.p, victim, lab.HTTPStop); err != nil {
		t.Fatal(err)
	}
	downAt, err := labrun.WaitHealth(ctx, e.p, e.web().Name, victim.Addr, api.StateDown, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The tcp check of echo sees the refused connects too.
	if _, err := labrun.WaitHealth(ctx, e.p, e.echo().Name, victim.Addr, api.StateDown, 5*time.Second); err != nil {
		t.Error(err)
	}
	time.Sleep(time.Until(t0.Add(detectBound + 500*time.Millisecond)))
	t1 := time.Now()
	if err := labrun.SetHTTP(ctx, e.p, victim, lab.HTTPStart); err != nil {
		t.Fatal(err)
	}
	upAt, err := labrun.WaitHealth(ctx, e.p, e.web().Name, victim.Addr, api.StateUp, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(t1.Add(recoverBound + 500*time.Millisecond)))
	t2 := time.Now()
	attempts := stop()

	// Requests under way when the server stopped were cut by it, as a
	// dying server cuts its connections: they count with the stop.
	var done, cut []labrun.Attempt
	for _, a := range window(attempts, time.Time{}, t0) {
		if a.End.Before(t0) {
			done = append(done, a)
		} else {
			cut = append(cut, a)
		}
	}
	before := summarize(done)
	during := summarize(append(cut, window(attempts, t0, t1)...))
	after := summarize(window(attempts, t1, t2))
	t.Logf("before stopping %s: %s", victim.Name, before)
	t.Logf("stopped: %s, of which %d were under way at the stop; status down on both nodes after %s",
		during, len(cut), downAt.Sub(t0).Round(time.Millisecond))
	if before.failed > 0 || before.by[victim.Name] == 0 {
		t.Fatalf("before the stop: %s; want no failure and answers from %s (%v)", before, victim.Name, before.firstErr)
	}
	for _, a := range cut {
		if a.Err != nil {
			t.Logf("under way at the stop, %s before it: %v", t0.Sub(a.Start).Round(time.Millisecond), a.Err)
		}
	}
	if d := downAt.Sub(t0); d > detectBound {
		t.Errorf("the agents report %s down %s after it stopped, want within %s", victim.Name, d, detectBound)
	}
	if during.failed == 0 {
		t.Errorf("no request failed after %s stopped: the test did not see its connections refused", victim.Name)
	} else {
		last := during.lastFail.Start.Sub(t0)
		t.Logf("the last connection that reached %s started %s after the stop (%v); %d of %d requests failed until then",
			victim.Name, last.Round(time.Millisecond), during.lastFail.Err, during.failed, len(cut)+len(window(attempts, t0, during.lastFail.Start.Add(time.Nanosecond))))
		if last > detectBound {
			t.Errorf("connections still reached the stopped %s %s after it stopped, want none after %s", victim.Name, last, detectBound)
		}
		if !strings.Contains(during.lastFail.Err.Error(), "connection refused") {
			t.Errorf("a request failed with %v, want connection refused", during.lastFail.Err)
		}
	}
	// After the window, every request succeeds, and on the others.
	settled := summarize(window(attempts, t0.Add(detectBound), t1))
	if settled.failed > 0 || settled.by[victim.Name] > 0 || settled.total == 0 {
		t.Errorf("from %s after the stop on: %s, want every request answered, none by %s (%v)", detectBound, settled, victim.Name, settled.firstErr)
	}

	// Back: the first connection it answers.
	first := time.Time{}
	for _, a := range window(attempts, t1, t2) {
		if a.Err == nil && a.Backend == victim.Name {
			first = a.Start
			break
		}
	}
	t.Logf("started again: %s; status up on both nodes after %s", after, upAt.Sub(t1).Round(time.Millisecond))
	if first.IsZero() {
		t.Fatalf("%s answered nothing in %s after it started again", victim.Name, t2.Sub(t1).Round(time.Millisecond))
	}
	t.Logf("%s answers again %s after it started", victim.Name, first.Sub(t1).Round(time.Millisecond))
	if d := first.Sub(t1); d > recoverBound {
		t.Errorf("%s got new connections %s after it started again, want within %s", victim.Name, d, recoverBound)
	}
	// A connection open on another backend while its table slot moves
	// back to the returning backend breaks (its next packet reaches a
	// backend without its socket, which resets it): with a stateless
	// table there is no way around it. Such failures may only happen
	// around the moment the backend comes back.
	for _, a := range window(attempts, t1, t2) {
		if a.Err != nil && a.Start.After(upAt.Add(200*time.Millisecond)) {
			t.Errorf("request from %s to %s failed, away from the backend's return at %s: %v",
				a.Start.Sub(t1).Round(time.Millisecond), a.End.Sub(t1).Round(time.Millisecond), upAt.Sub(t1).Round(time.Millisecond), a.Err)
		}
	}
}

// testHangingBackend makes a backend accept connections but never answer:
// the http check of web notices, the tcp check of echo must not.
func (e *env) testHangingBackend(t *testing.T) {
	ctx := testCtx(t)
	victim := e.p.Backends[1]
	stop := e.streamOf(t, ctx)

	time.Sleep(300 * time.Millisecond)
	t0 := time.Now()
	if err := labrun.SetHTTP(ctx, e.p, victim, lab.HTTPHang); err != nil {
		t.Fatal(err)
	}
	downAt, err := labrun.WaitHealth(ctx, e.p, e.web().Name, victim.Addr, api.StateDown, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("status: %s down on both nodes %s after it started hanging", victim.Name, downAt.Sub(t0).Round(time.Millisecond))
	if d := downAt.Sub(t0); d > hangBound {
		t.Errorf("the agents report %s down %s after it hung, want within %s", victim.Name, d, hangBound)
	}
	// Hung requests end after streamTimeout; wait for those and for a
	// stretch of requests that must all succeed.
	time.Sleep(time.Until(t0.Add(hangBound + streamTimeout + 500*time.Millisecond)))
	t1 := time.Now()

	// The tcp check of echo still connects: up, and checked recently.
	for _, n := range e.p.Nodes {
		h, err := labrun.BackendHealth(e.p, n, e.echo().Name, victim.Addr)
		if err != nil {
			t.Fatal(err)
		}
		if h.State != api.StateUp || !h.LastCheck.After(t0.Add(checkFall*checkInterval)) {
			t.Errorf("%s: echo's tcp check of the hanging %s: %+v, want up and checked after it hung", n.Name, victim.Name, h)
		}
	}

	// What an operator sees: `xlb status --json`.
	out, err := exec.CommandContext(ctx, xlbBinary, "status", "--json", "--socket", labrun.Socket(e.p, e.p.Nodes[0])).Output()
	if err != nil {
		t.Fatalf("xlb status --json: %v", err)
	}
	var st api.Status
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("xlb status --json: %v\n%s", err, out)
	}
	var web api.Backend
	for _, s := range st.Services {
		for _, b := range s.Backends {
			if s.Name == e.web().Name && b.Address == victim.Addr {
				web = b
			}
		}
	}
	t.Logf("xlb status --json on %s: %s of web: %+v", e.p.Nodes[0].Name, victim.Name, web.Health)
	if h := web.Health; h.State != api.StateDown || h.Check != "http" || !strings.Contains(h.LastError, "timeout") || h.LastCheck.Before(t0) {
		t.Errorf("xlb status --json shows %s of web as %+v, want down with a timeout as its last error", victim.Name, h)
	}

	if err := labrun.SetHTTP(ctx, e.p, victim, lab.HTTPStart); err != nil {
		t.Fatal(err)
	}
	if _, err := labrun.WaitHealth(ctx, e.p, e.web().Name, victim.Addr, api.StateUp, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	attempts := stop()

	during := summarize(window(attempts, t0, t1))
	t.Logf("hanging: %s", during)
	if during.failed == 0 {
		t.Errorf("no request failed while %s hung: the test did not see its connections hang", victim.Name)
	} else {
		last := during.lastFail.Start.Sub(t0)
		t.Logf("the last connection that reached %s started %s after it hung (%v)", victim.Name, last.Round(time.Millisecond), during.lastFail.Err)
		if last > hangBound {
			t.Errorf("connections still reached the hanging %s %s after it hung, want none after %s", victim.Name, last, hangBound)
		}
	}
	settled := summarize(window(attempts, t0.Add(hangBound), t1))
	if settled.failed > 0 || settled.by[victim.Name] > 0 || settled.total == 0 {
		t.Errorf("from %s after the hang on: %s, want every request answered, none by %s (%v)", hangBound, settled, victim.Name, settled.firstErr)
	}
}

// testAllBackendsDown stops every backend: the services are down, and the
// nodes drop their packets as drop_no_backend.
func (e *env) testAllBackendsDown(t *testing.T) {
	ctx := testCtx(t)
	t0 := time.Now()
	for _, be := range e.p.Backends {
		if err := labrun.SetHTTP(ctx, e.p, be, lab.HTTPStop); err != nil {
			t.Fatal(err)
		}
	}
	for _, be := range e.p.Backends {
		if _, err := labrun.WaitHealth(ctx, e.p, e.web().Name, be.Addr, api.StateDown, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("every backend down on both nodes %s after they stopped", time.Since(t0).Round(time.Millisecond))
	// A backend's health in the status is the prober's at once; the
	// service's state follows when the agent has applied it to the data
	// plane, a moment later.
	e.waitServiceState(t, e.web().Name, api.StateDown, 5*time.Second)
	drops := func() uint64 {
		t.Helper()
		var n uint64
		for _, node := range e.p.Nodes {
			st, err := api.GetStatus(labrun.Socket(e.p, node))
			if err != nil {
				t.Fatal(err)
			}
			if s := serviceNamed(st, e.web().Name); s.State != api.StateDown {
				t.Errorf("%s: web is %q with every backend down, want down", node.Name, s.State)
			}
			n += st.Reasons["drop_no_backend"]
		}
		return n
	}
	before := drops()
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := labrun.DialHTTP(cctx, e.client.Namespace, e.web().Target())
	cancel()
	if err == nil {
		t.Fatal("a connection to web succeeded with every backend down")
	}
	after := drops()
	t.Logf("a connection attempt to web: %v; drop_no_backend on the nodes went from %d to %d", err, before, after)
	if after <= before {
		t.Errorf("drop_no_backend went from %d to %d, want the connection's SYNs counted", before, after)
	}

	for _, be := range e.p.Backends {
		if err := labrun.SetHTTP(ctx, e.p, be, lab.HTTPStart); err != nil {
			t.Fatal(err)
		}
	}
	for _, be := range e.p.Backends {
		if _, err := labrun.WaitHealth(ctx, e.p, e.web().Name, be.Addr, api.StateUp, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	e.waitServiceState(t, e.web().Name, api.StateUp, 5*time.Second)
	if _, err := labrun.HTTPLoad(ctx, e.client.Namespace, e.web().Target(), 40, parallel, nil); err != nil {
		t.Errorf("web with its backends back: %v", err)
	}
}

func serviceNamed(st *api.Status, name string) api.Service {
	for _, s := range st.Services {
		if s.Name == name {
			return s
		}
	}
	return api.Service{}
}

// waitServiceState waits up to timeout for service name to be in state
// want on every node, and fails the test with each node's state if it
// is not.
func (e *env) waitServiceState(t *testing.T, name, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var got []string
		for _, node := range e.p.Nodes {
			st, err := api.GetStatus(labrun.Socket(e.p, node))
			if err != nil {
				t.Fatal(err)
			}
			if s := serviceNamed(st, name); s.State != want {
				got = append(got, fmt.Sprintf("%s: %q", node.Name, s.State))
			}
		}
		if len(got) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("service %s is not %q on every node after %s: %s", name, want, timeout, strings.Join(got, ", "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
