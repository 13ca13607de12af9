package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/lb"
	"github.com/xlbproject/xlb/testbed/k8stest"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// Bounds of the waits.
const (
	startTimeout  = 5 * time.Minute  // exec → every table
	changeTimeout = 10 * time.Second // one change → its table
	stopGrace     = 15 * time.Second // SIGTERM → SIGKILL
	startPoll     = 100 * time.Millisecond
	samplePeriod  = 250 * time.Millisecond
)

// measure runs everything and cleans up after itself whatever happens.
func measure(ctx context.Context, o options, rng *rand.Rand, r *Report, progress func(string)) (err error) {
	cleanup := func(what string, f func() error) {
		progress("cleanup: " + what)
		if cerr := f(); cerr != nil {
			progress("cleanup: " + what + ": " + cerr.Error())
			err = errors.Join(err, fmt.Errorf("%s: %w", what, cerr))
		}
	}
	bin := o.xlb
	if bin == "" {
		progress("building xlb")
		b, remove, err := testenv.BuildXLB()
		if err != nil {
			return err
		}
		defer remove()
		bin = b
	}
	name := stalePrefix + strconv.Itoa(os.Getpid())
	dir, err := os.MkdirTemp("", name+"-")
	if err != nil {
		return err
	}
	defer cleanup("remove "+dir, func() error { return os.RemoveAll(dir) })

	progress("control plane: starting (etcd, kube-apiserver, kube-controller-manager)")
	cp, err := k8stest.Start(ctx, k8stest.Options{})
	if err != nil {
		return err
	}
	defer cleanup("stop the control plane", cp.Stop)
	c, err := connect(cp)
	if err != nil {
		return err
	}

	progress(fmt.Sprintf("creating %d Services of type LoadBalancer with their address and an EndpointSlice of %d endpoints each", o.services, o.endpoints))
	t := time.Now()
	calls, err := c.setUp(ctx, o, progress)
	if err != nil {
		return fmt.Errorf("set-up: %w", err)
	}
	r.Setup = Setup{Services: o.services, Endpoints: o.endpoints, TableSize: uint32(o.tableSize), APICalls: calls,
		Concurrency: o.concurrency, Seconds: benchutil.Round3(time.Since(t).Seconds())}
	if r.Setup.TableSize == 0 {
		r.Setup.TableSize = config.DefaultTableSize
	}
	progress(fmt.Sprintf("set-up: %d API calls in %.1f s", calls, r.Setup.Seconds))

	progress("namespace " + name + ": veth pair, the API server relayed into it")
	defer cleanup("remove namespace "+name, func() error { return removeNamespace(name) })
	if err := makeNamespace(name); err != nil {
		return err
	}
	relay, err := cp.Relay(name, dir)
	if err != nil {
		return err
	}
	defer cleanup("close the relay", func() error { relay.Close(); return nil })

	pin := filepath.Join(bpfobj.BPFFSRoot, name)
	socket, cfgPath := filepath.Join(dir, "xlb.sock"), filepath.Join(dir, "agent.yaml")
	maxBackends := 0
	if n := o.services * o.endpoints; n+1024 > lb.DefaultMaxBackends {
		maxBackends = n + 1024 // a backend that comes back takes a new ID before the old one is freed
	}
	if err := os.WriteFile(cfgPath, []byte(agentConfig(socket, pin, relay.Kubeconfig, o.tableSize, maxBackends)), 0o600); err != nil {
		return err
	}
	// Registered before the agent's stop, so that it runs after it.
	defer cleanup("remove the pinned data plane "+pin, func() error { return removePins(pin) })

	logPath := filepath.Join(dir, "agent.log")
	progress("agent: " + bin + " " + "netns-exec " + name + " -- xlb agent --config " + cfgPath + " --log-format json")
	a, err := startAgent(bin, name, cfgPath, logPath)
	if err != nil {
		return err
	}
	progress(fmt.Sprintf("agent: PID %d, log %s", a.pid, logPath))
	defer cleanup(fmt.Sprintf("stop the agent (PID %d)", a.pid), func() error { return a.stop(stopGrace) })
	defer func() {
		if err != nil && ctx.Err() == nil {
			progress("the agent's log ends:\n" + lastLines(logPath, 15))
		}
	}()
	smp := startSampler(a)
	defer smp.stop()

	tail := &logTail{path: logPath}
	watch, err := waitStart(ctx, a, pin, tail, o.services, r, progress)
	if err != nil {
		return err
	}
	defer watch.Close()
	startUsage, err := readUsage(a.pid)
	if err != nil {
		return fmt.Errorf("the agent's /proc: %w", err)
	}
	r.Resources = append(r.Resources, phaseOf(phaseStart, a.started, procUsage{at: a.started}, startUsage, smp.between(a.started, startUsage.at)))
	progress(fmt.Sprintf("start: %.1f CPU s, RSS %.0f MiB (peak %.0f MiB)", startUsage.cpu.Seconds(), benchutil.MiB(startUsage.rss), benchutil.MiB(startUsage.hwm)))

	ids, err := serviceIDs(pin, svcPort)
	if err != nil {
		return err
	}
	if len(ids) != o.services {
		return fmt.Errorf("the data plane's service index has %d services on port %d, want %d", len(ids), svcPort, o.services)
	}

	progress(fmt.Sprintf("idle: settling %s, then measuring %s", o.settle, o.idle))
	if err := benchutil.Sleep(ctx, o.settle); err != nil {
		return err
	}
	u0, err := readUsage(a.pid)
	if err != nil {
		return err
	}
	if err := benchutil.Sleep(ctx, o.idle); err != nil {
		return err
	}
	u1, err := readUsage(a.pid)
	if err != nil {
		return err
	}
	idle := phaseOf(phaseIdle, a.started, u0, u1, smp.between(u0.at, u1.at))
	r.Resources = append(r.Resources, idle)
	progress(fmt.Sprintf("idle: %.3f cores, RSS %.0f MiB", idle.Cores, idle.RSSMiB))

	before, err := api.GetStatus(socket)
	if err != nil {
		return err
	}
	if _, err := tail.next(); err != nil { // the start's lines are read
		return err
	}
	progress(fmt.Sprintf("changes: %d, polling the table every %s", o.changes, o.poll))
	u0, err = readUsage(a.pid)
	if err != nil {
		return err
	}
	ch, err := runChanges(ctx, c, a, watch, ids, tail, o, rng, progress)
	if err != nil {
		return err
	}
	u1, err = readUsage(a.pid)
	if err != nil {
		return err
	}
	chPhase := phaseOf(phaseChanges, a.started, u0, u1, smp.between(u0.at, u1.at))
	chPhase.PerChangeMs = benchutil.Round3(chPhase.CPUSeconds * 1000 / float64(o.changes))
	chPhase.NetPerChangeMs = benchutil.Round3((chPhase.CPUSeconds - idle.Cores*chPhase.Seconds) * 1000 / float64(o.changes))
	r.Resources = append(r.Resources, chPhase)
	r.Changes = ch

	after, err := api.GetStatus(socket)
	if err != nil {
		return err
	}
	if b, a := before.Reconciles["config"], after.Reconciles["config"]; a.Count > b.Count {
		r.Changes.Reconciles = a.Count - b.Count
		r.Changes.ApplyMeanMs = benchutil.Round3((a.SumSeconds - b.SumSeconds) * 1000 / float64(a.Count-b.Count))
	}
	r.Final.Services = len(after.Services)
	for _, s := range after.Services {
		if s.Installed {
			r.Final.Installed++
		}
		r.Final.Backends += len(s.Backends)
	}
	r.Samples = smp.samples(a.started)
	progress(fmt.Sprintf("changes: p50 %s ms, p99 %s ms (target %d ms: %s); the agent's status: %d services, %d installed, %d backends",
		benchutil.FmtMs(ch.Update.P50), benchutil.FmtMs(ch.Update.P99), targetP99Ms, verdict(ch), r.Final.Services, r.Final.Installed, r.Final.Backends))
	if lines, err := tail.next(); err == nil {
		for _, p := range problems(lines) {
			progress("  the agent logged: " + p)
		}
	}
	return nil
}

// waitStart waits until the agent has a table for every one of n
// services, reading the pinned maps from outside, and fills r.Start. It
// returns the open table watch.
func waitStart(ctx context.Context, a *agentProc, pin string, tail *logTail, n int, r *Report, progress func(string)) (*lb.TableWatch, error) {
	deadline := a.started.Add(startTimeout)
	var watch *lb.TableWatch
	var first time.Time
	lastReport := time.Now()
	fail := func(err error) (*lb.TableWatch, error) {
		if watch != nil {
			watch.Close()
		}
		return nil, err
	}
	for {
		if a.exited() {
			return fail(fmt.Errorf("the agent exited during its start: %v", a.err))
		}
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("the agent did not have all %d tables within %s of its start", n, startTimeout))
		}
		if watch == nil {
			if _, err := os.Stat(filepath.Join(pin, "maglev_tables")); err == nil {
				w, err := lb.WatchTables(pin)
				if err != nil {
					return fail(err)
				}
				watch = w
			}
		}
		if watch != nil {
			ids, err := watch.Services()
			if err != nil {
				return fail(err)
			}
			now := time.Now()
			if len(ids) > 0 && first.IsZero() {
				first = now
			}
			if len(ids) >= n {
				r.Start.FirstTableMs = benchutil.Ms(first.Sub(a.started))
				r.Start.AllTablesMs = benchutil.Ms(now.Sub(a.started))
				break
			}
			if time.Since(lastReport) >= 5*time.Second {
				progress(fmt.Sprintf("start: %d of %d tables", len(ids), n))
				lastReport = time.Now()
			}
		}
		time.Sleep(startPoll)
	}
	r.Start.PollMs = benchutil.Ms(startPoll)
	// The agent logs the configuration applied once its whole first
	// apply has returned, a little after the last table.
	var lines []logLine
	for wait := time.Now().Add(10 * time.Second); ; {
		more, err := tail.next()
		if err != nil {
			return fail(err)
		}
		lines = append(lines, more...)
		if _, ok := find(lines, msgApplied); ok || time.Now().After(wait) || a.exited() {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if l, ok := find(lines, msgFirst); ok {
		r.Start.SyncedMs = benchutil.Ms(l.Time.Sub(a.started))
		r.Start.BuildMs = benchutil.Ms(time.Duration(l.Build))
	}
	if l, ok := find(lines, msgApplied); ok {
		r.Start.AppliedMs = benchutil.Ms(l.Time.Sub(a.started))
	}
	for _, p := range problems(lines) {
		progress("  the agent logged: " + p)
	}
	progress(fmt.Sprintf("start: synced after %.0f ms, all %d tables after %.0f ms", r.Start.SyncedMs, n, r.Start.AllTablesMs))
	return watch, nil
}

// runChanges flips one endpoint's ready condition at a time and times
// each change to the data plane.
func runChanges(ctx context.Context, c *cluster, a *agentProc, watch *lb.TableWatch, ids map[netip.Addr]uint32,
	tail *logTail, o options, rng *rand.Rand, progress func(string),
) (Changes, error) {
	quiet, maxDelay := sourceDebounce()
	out := Changes{TargetP99Ms: targetP99Ms, PollMs: benchutil.Ms(o.poll), PauseMinMs: benchutil.Ms(o.pauseMin), PauseMaxMs: benchutil.Ms(o.pauseMax),
		QuietMs: quiet, MaxDelayMs: maxDelay}
	// unready[i] is the endpoint of Service i that is not ready, -1 if
	// all are: a change takes it back, or takes a random one out.
	unready := make([]int, o.services)
	for i := range unready {
		unready[i] = -1
	}
	var update, call, watchMs, source, build, agentMs, apply []float64
	for k := range o.changes {
		if a.exited() {
			return out, fmt.Errorf("the agent exited: %v", a.err)
		}
		i := rng.IntN(o.services)
		j, ready := unready[i], true
		if j < 0 {
			j, ready = rng.IntN(o.endpoints), false
		}
		id, ok := ids[vip(i)]
		if !ok {
			return out, fmt.Errorf("service %s (%s) is not in the data plane's index", svcName(i), vip(i))
		}
		from, err := watch.TableID(id)
		if err != nil {
			return out, err
		}
		addr := endpointAddr(i, j, o.endpoints)
		want := func(slots map[netip.Addr]int) bool {
			_, has := slots[addr]
			n := o.endpoints
			if !ready {
				n--
			}
			return has == ready && len(slots) == n
		}
		sent, t0, err := c.setReady(ctx, i, j, ready)
		if err != nil {
			return out, err
		}
		t1, others, err := awaitTable(ctx, watch, id, from, o.poll, want)
		if err != nil {
			return out, fmt.Errorf("change %d (%s endpoint %d ready=%t): %w", k+1, svcName(i), j, ready, err)
		}
		if ready {
			unready[i] = -1
		} else {
			unready[i] = j
		}
		e := Change{Service: i, Endpoint: j, Ready: ready, CallMs: benchutil.Ms(t0.Sub(sent)), UpdateMs: benchutil.Ms(t1.Sub(t0)), Others: others}
		pause := o.pauseMin + time.Duration(rng.Int64N(int64(o.pauseMax-o.pauseMin)+1))
		e.PauseMs = benchutil.Ms(pause)
		if err := benchutil.Sleep(ctx, pause); err != nil {
			return out, err
		}
		lines, err := tail.next()
		if err != nil {
			return out, err
		}
		attribute(&e, lines, t0, t1)
		out.Events = append(out.Events, e)
		update, call = append(update, e.UpdateMs), append(call, e.CallMs)
		if e.Matched {
			watchMs, source, build, agentMs = append(watchMs, e.WatchMs), append(source, e.SourceMs), append(build, e.BuildMs), append(agentMs, e.AgentMs)
			if e.ApplyMs != 0 {
				apply = append(apply, e.ApplyMs)
			}
			out.Matched++
		}
		for _, p := range problems(lines) {
			progress("  the agent logged: " + p)
		}
		if (k+1)%25 == 0 || k+1 == o.changes {
			s := benchutil.Summarize(update)
			progress(fmt.Sprintf("changes: %d of %d; so far p50 %s ms, p99 %s ms, max %s ms", k+1, o.changes, benchutil.FmtMs(s.P50), benchutil.FmtMs(s.P99), benchutil.FmtMs(s.Max)))
		}
	}
	out.Update, out.Call = benchutil.Summarize(update), benchutil.Summarize(call)
	out.Watch, out.Source, out.Build = benchutil.Summarize(watchMs), benchutil.Summarize(source), benchutil.Summarize(build)
	out.Agent, out.Apply = benchutil.Summarize(agentMs), benchutil.Summarize(apply)
	return out, nil
}

// attribute splits a change's time by the agent's log lines written
// since the change (the pause after it included): with exactly one new
// configuration from the cluster, its time and latency say when the
// source saw the change and when the agent took it.
func attribute(e *Change, lines []logLine, t0, t1 time.Time) {
	var cluster []logLine
	for _, l := range lines {
		if l.Msg == msgCluster {
			cluster = append(cluster, l)
		}
	}
	if len(cluster) != 1 {
		return
	}
	l := cluster[0]
	seen := l.Time.Add(-time.Duration(l.Latency))
	e.Matched, e.Events = true, l.Events
	e.WatchMs = benchutil.Ms(seen.Sub(t0))
	e.SourceMs = benchutil.Ms(time.Duration(l.Latency))
	e.BuildMs = benchutil.Ms(time.Duration(l.Build))
	e.AgentMs = benchutil.Ms(t1.Sub(l.Time))
	if done, ok := find(lines, msgReloaded); ok && done.Trigger == "kubernetes" {
		e.ApplyMs = benchutil.Ms(done.Time.Sub(l.Time))
	}
}

// awaitTable polls the service's table entry every poll until it names
// a table other than from that satisfies ok. It returns the time of the
// read that saw that table's ID, and how many other tables it saw first.
func awaitTable(ctx context.Context, w *lb.TableWatch, service uint32, from ebpf.MapID, poll time.Duration, ok func(map[netip.Addr]int) bool) (time.Time, int, error) {
	deadline := time.Now().Add(changeTimeout)
	others := 0
	for {
		id, err := w.TableID(service)
		seen := time.Now()
		if err != nil {
			return time.Time{}, others, err
		}
		if id != from && id != 0 {
			got, slots, err := w.Slots(service)
			if err != nil {
				return time.Time{}, others, err
			}
			if ok(slots) {
				return seen, others, nil
			}
			others++
			from = got
		}
		if seen.After(deadline) {
			return time.Time{}, others, fmt.Errorf("no table with the change within %s (%d other table changes)", changeTimeout, others)
		}
		if err := ctx.Err(); err != nil {
			return time.Time{}, others, err
		}
		time.Sleep(poll)
	}
}

// phaseOf describes the agent's use between two readings; during are
// the sampler's readings in between, for the maximum RSS. origin is the
// agent's exec.
func phaseOf(name string, origin time.Time, from, to procUsage, during []procUsage) Phase {
	secs := to.at.Sub(from.at).Seconds()
	cpu := (to.cpu - from.cpu).Seconds()
	rssMax := max(from.rss, to.rss)
	for _, u := range during {
		rssMax = max(rssMax, u.rss)
	}
	p := Phase{Name: name, FromS: benchutil.Round3(from.at.Sub(origin).Seconds()), Seconds: benchutil.Round3(secs), CPUSeconds: benchutil.Round3(cpu),
		RSSMiB: benchutil.MiB(to.rss), RSSMaxMiB: benchutil.MiB(rssMax), HWMMiB: benchutil.MiB(to.hwm)}
	if secs > 0 {
		p.Cores = benchutil.Round3(cpu / secs)
	}
	return p
}

// sampler reads the agent's /proc every samplePeriod while it runs.
type sampler struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	got    []procUsage
}

func startSampler(a *agentProc) *sampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &sampler{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(samplePeriod)
		defer tick.Stop()
		for {
			if u, err := readUsage(a.pid); err == nil && !a.exited() {
				s.mu.Lock()
				s.got = append(s.got, u)
				s.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-a.done:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *sampler) stop() {
	s.cancel()
	<-s.done
}

// between returns the readings taken from from to to.
func (s *sampler) between(from, to time.Time) []procUsage {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []procUsage
	for _, u := range s.got {
		if !u.at.Before(from) && !u.at.After(to) {
			out = append(out, u)
		}
	}
	return out
}

// samples returns every reading, in seconds since start.
func (s *sampler) samples(start time.Time) []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Sample, 0, len(s.got))
	for _, u := range s.got {
		out = append(out, Sample{T: benchutil.Round3(u.at.Sub(start).Seconds()), RSSMiB: benchutil.MiB(u.rss), CPUS: benchutil.Round3(u.cpu.Seconds())})
	}
	return out
}

// lastLines returns the last n lines of a file, for an error report.
func lastLines(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
