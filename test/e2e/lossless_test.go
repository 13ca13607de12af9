package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
	"github.com/xlbproject/xlb/testbed/netns"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// testLossless checks the promise that nothing an operator does to a
// running agent costs a connection: a broken configuration file, and a
// restart of the agent, graceful or not.
func (e *env) testLossless(t *testing.T) {
	t.Run("InvalidConfigWhileServing", e.testInvalidConfig)
	t.Run("RestartSIGTERM", func(t *testing.T) { e.testRestart(t, restart{sig: syscall.SIGTERM}) })
	t.Run("RestartSIGKILL", func(t *testing.T) { e.testRestart(t, restart{sig: syscall.SIGKILL}) })
	t.Run("UpgradeBytecode", e.testUpgrade)
	t.Run("LayoutMigration", e.testLayoutMigration)
}

// restart says how testRestart restarts the agents.
type restart struct {
	sig syscall.Signal
	// binary starts the new agents ("": the lab's xlb).
	binary string
	// config, if set, rewrites each node's configuration file while no
	// agent runs.
	config func(t *testing.T, node lab.Host)
	// migrates: the new agents cannot adopt the pinned maps' layout and
	// program fresh ones, so the counters restart.
	migrates bool
}

// testUpgrade restarts the agents with a build whose LB program has other
// bytecode (`-tags xlbupgradetest`, see internal/dataplane/gen.go) and the
// same maps: the new program must replace the old one in the pinned link
// with nothing lost, counters included, and the attached program's tag
// must change.
func (e *env) testUpgrade(t *testing.T) {
	next, remove, err := testenv.BuildXLB("xlbupgradetest")
	if err != nil {
		t.Fatal(err)
	}
	defer remove()
	before := e.attachedTags(t)
	e.testRestart(t, restart{sig: syscall.SIGTERM, binary: next})
	after := e.attachedTags(t)
	for i, n := range e.p.Nodes {
		t.Logf("%s: program tag %s before, %s after the upgrade", n.Name, before[i], after[i])
		if before[i] == after[i] {
			t.Errorf("%s: the attached program's tag stayed %s: the upgrade did not replace the bytecode", n.Name, before[i])
		}
	}
	// Back to the lab's build, also without loss.
	e.testRestart(t, restart{sig: syscall.SIGTERM})
	if back := e.attachedTags(t); !slices.Equal(back, before) {
		t.Errorf("program tags %v after the downgrade, want %v", back, before)
	}
}

// testLayoutMigration restarts the agents with a configuration that sizes
// the backend maps differently, so the pinned maps no longer fit: the new
// agent programs fresh maps and switches over without loss; then back.
func (e *env) testLayoutMigration(t *testing.T) {
	bigger := func(t *testing.T, node lab.Host) {
		path := labrun.ConfigPath(e.p, node)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		const at = "\n  pinPath: "
		if !strings.Contains(string(b), at) {
			t.Fatalf("%s: no dataplane.pinPath line to add maxBackends beside:\n%s", path, b)
		}
		b = []byte(strings.Replace(string(b), at, "\n  maxBackends: 32768"+at, 1))
		if err := writeFile(path, b); err != nil {
			t.Fatal(err)
		}
	}
	standard := func(t *testing.T, node lab.Host) {
		if err := labrun.WriteConfig(e.p, node, e.services); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, n := range e.p.Nodes {
			standard(t, n)
		}
	})
	e.testRestart(t, restart{sig: syscall.SIGTERM, config: bigger, migrates: true})
	e.testRestart(t, restart{sig: syscall.SIGTERM, config: standard, migrates: true})
}

// attachedTags returns the tag (a hash of the bytecode) of the XDP
// program on each node's interface.
func (e *env) attachedTags(t *testing.T) []string {
	t.Helper()
	var tags []string
	for _, n := range e.p.Nodes {
		var id uint32
		err := netns.Do(n.Namespace, func() error {
			l, err := netlink.LinkByName(n.Interface)
			if err != nil {
				return err
			}
			if x := l.Attrs().Xdp; x != nil && x.Attached {
				id = x.ProgId
			}
			return nil
		})
		if err != nil || id == 0 {
			t.Fatalf("%s: no XDP program on %s (%v)", n.Name, n.Interface, err)
		}
		p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
		if err != nil {
			t.Fatal(err)
		}
		info, err := p.Info()
		p.Close()
		if err != nil {
			t.Fatal(err)
		}
		tags = append(tags, info.Tag)
	}
	return tags
}

// statuses returns every node's agent status, in node order.
func (e *env) statuses(t *testing.T) []*api.Status {
	t.Helper()
	var out []*api.Status
	for _, n := range e.p.Nodes {
		st, err := api.GetStatus(labrun.Socket(e.p, n))
		if err != nil {
			t.Fatalf("%s: %v", n.Name, err)
		}
		out = append(out, st)
	}
	return out
}

// writeFile replaces path by renaming a complete new file over it, as
// labrun.WriteConfig does, so the agent never reads half of it.
func writeFile(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// testInvalidConfig writes a configuration with an invalid backend
// address to both nodes while new connections stream in: the agents must
// keep serving the previous configuration, fail no request, and say what
// is wrong and where. A valid file afterwards must apply.
func (e *env) testInvalidConfig(t *testing.T) {
	ctx := testCtx(t)
	t.Cleanup(func() {
		if _, err := labrun.Reconfigure(interrupted, e.p, e.services); err != nil {
			t.Errorf("restore the configuration: %v", err)
		}
	})
	before := e.statuses(t)

	// The broken file is the running one with the address of web's last
	// backend spoiled, so the error has a known line.
	victim := e.p.Backends[len(e.p.Backends)-1]
	badLine := make([]int, len(e.p.Nodes))
	bad := make([][]byte, len(e.p.Nodes))
	for i, n := range e.p.Nodes {
		b, err := os.ReadFile(labrun.ConfigPath(e.p, n))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		j := slices.IndexFunc(lines, func(l string) bool {
			return strings.TrimSpace(l) == "- address: "+victim.Addr.String()
		})
		if j < 0 {
			t.Fatalf("%s: no line \"- address: %s\" in the configuration:\n%s", n.Name, victim.Addr, b)
		}
		lines[j] = strings.Replace(lines[j], victim.Addr.String(), "10.300.0.1", 1)
		badLine[i], bad[i] = j+1, []byte(strings.Join(lines, "\n"))
	}

	stop := e.streamOf(t, ctx)
	time.Sleep(300 * time.Millisecond)
	t0 := time.Now()
	for i, n := range e.p.Nodes {
		if err := writeFile(labrun.ConfigPath(e.p, n), bad[i]); err != nil {
			t.Fatal(err)
		}
	}
	// The agents poll the file every 500 ms.
	after := make([]*api.Status, len(e.p.Nodes))
	for i, n := range e.p.Nodes {
		deadline := time.Now().Add(5 * time.Second)
		for {
			st, err := api.GetStatus(labrun.Socket(e.p, n))
			if err != nil {
				t.Fatal(err)
			}
			if st.Config.Reloads[api.ResultError] > before[i].Config.Reloads[api.ResultError] {
				after[i] = st
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no failed reload reported 5s after the broken write: %+v", n.Name, st.Config)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Logf("both agents report the failed reload %s after the write", time.Since(t0).Round(time.Millisecond))
	time.Sleep(500 * time.Millisecond) // traffic goes on with the file broken
	attempts := stop()

	s := summarize(window(attempts, time.Time{}, time.Now()))
	t.Logf("new connections around the broken write: %s", s)
	if s.failed > 0 || s.total == 0 {
		t.Errorf("with a broken configuration file written: %s, want every request answered (%v)", s, s.firstErr)
	}
	for i, n := range e.p.Nodes {
		c := after[i].Config
		where := fmt.Sprintf("%s:%d:", filepath.Base(labrun.ConfigPath(e.p, n)), badLine[i])
		if c.Result != api.ResultError || !strings.Contains(c.Error, where) || !strings.Contains(c.Error, "10.300.0.1") {
			t.Errorf("%s: status config %+v; want result %q and an error that names %q and the bad address", n.Name, c, api.ResultError, where)
		}
		if c.Generation != before[i].Config.Generation {
			t.Errorf("%s: generation %d after a failed reload, want %d, as before", n.Name, c.Generation, before[i].Config.Generation)
		}
		if web := serviceNamed(after[i], e.web().Name); !web.Installed || len(web.Backends) != len(e.web().Backends) {
			t.Errorf("%s: web after a failed reload: installed %v, %d backends; want the previous configuration, %d backends",
				n.Name, web.Installed, len(web.Backends), len(e.web().Backends))
		}
	}

	// What an operator sees: `xlb status`, as JSON and as text.
	node := e.p.Nodes[0]
	out, err := exec.CommandContext(ctx, xlbBinary, "status", "--json", "--socket", labrun.Socket(e.p, node)).Output()
	if err != nil {
		t.Fatalf("xlb status --json: %v", err)
	}
	var st api.Status
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("xlb status --json: %v\n%s", err, out)
	}
	if st.Config.Result != api.ResultError || st.Config.Error != after[0].Config.Error {
		t.Errorf("xlb status --json on %s: config %+v, want the failed reload %q", node.Name, st.Config, after[0].Config.Error)
	}
	text, err := exec.CommandContext(ctx, xlbBinary, "status", "--socket", labrun.Socket(e.p, node)).CombinedOutput()
	if err != nil {
		t.Logf("xlb status: %v", err) // it may exit non-zero to flag the error
	}
	where := fmt.Sprintf("%s:%d:", filepath.Base(labrun.ConfigPath(e.p, node)), badLine[0])
	if !strings.Contains(string(text), where) {
		t.Errorf("xlb status on %s does not show the error at %q:\n%s", node.Name, where, text)
	}

	// Fixed, and with a visible change: the victim is gone.
	without := labrun.Without(e.services, victim.Addr)
	gens, err := labrun.Reconfigure(ctx, e.p, without)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range e.p.Nodes {
		if want := before[i].Config.Generation + 1; gens[i] != want {
			t.Errorf("%s: generation %d after the fix, want %d", n.Name, gens[i], want)
		}
	}
	const n = 200
	tally, err := labrun.HTTPLoad(ctx, e.client.Namespace, e.web().Target(), n, parallel, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fixed without %s: generations %v: %v", victim.Name, gens, tally)
	want := e.backendNames(without[0].Backends)
	checkTally(t, tally, want)
	if tally[victim.Name] > 0 || tally.Total() != n {
		t.Errorf("after the fix: %v; want %d answers, none from the removed %s", tally, n, victim.Name)
	}
}

// agentPID returns the PID of node's agent, from its lab pid file.
func (e *env) agentPID(t *testing.T, node lab.Host) int {
	t.Helper()
	pid, err := labrun.AgentPID(e.p, node)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// stopAgent sends sig to node's agent and waits until it has exited.
func (e *env) stopAgent(t *testing.T, node lab.Host, sig syscall.Signal) {
	t.Helper()
	pid := e.agentPID(t, node)
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatalf("%s: signal %v to the agent (PID %d): %v", node.Name, sig, pid, err)
	}
	waitExit(t, node, pid, 5*time.Second)
}

// waitExit waits until node's agent, PID pid, has exited.
func waitExit(t *testing.T, node lab.Host, pid int, timeout time.Duration) {
	t.Helper()
	if err := labrun.WaitExit(interrupted, pid, timeout); err != nil {
		t.Fatalf("%s: the agent, told to stop: %v", node.Name, err)
	}
}

// ensureAgents starts the agent of every node whose agent does not
// answer, as a cleanup, so that later subtests find them running.
func (e *env) ensureAgents(t *testing.T) {
	for _, n := range e.p.Nodes {
		if _, err := api.GetStatus(labrun.Socket(e.p, n)); err == nil {
			continue
		}
		if err := labrun.WriteConfig(e.p, n, e.services); err != nil {
			t.Error(err)
			continue
		}
		if _, err := labrun.StartAgent(interrupted, e.p, n, e.services); err != nil {
			t.Errorf("restart the agent of %s: %v", n.Name, err)
		}
	}
}

// liveConns keeps a few keep-alive connections to web busy, a request
// every interval on each, until stop; stop returns how many requests
// each made and every error. A connection that fails once stops.
func (e *env) liveConns(t *testing.T, ctx context.Context, k int, every time.Duration) (stop func() ([]int, []error)) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	counts := make([]int, k)
	for i := range k {
		conn, err := labrun.DialHTTP(ctx, e.client.Namespace, e.web().Target())
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		wg.Go(func() {
			defer conn.Close()
			tick := time.NewTicker(every)
			defer tick.Stop()
			backend := ""
			// Bounded by the subtest's context and by a count.
			for range 2000 {
				name, err := conn.Get(ctx, false)
				if ctx.Err() != nil {
					return
				}
				if err == nil && backend != "" && name != backend {
					err = fmt.Errorf("connection %s: answered by %s, then by %s", conn.LocalAddr(), backend, name)
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("after %d requests at %s: %w", counts[i], time.Now().Format("15:04:05.000"), err))
					mu.Unlock()
					return
				}
				backend = name
				counts[i]++
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		})
	}
	return func() ([]int, []error) {
		cancel()
		wg.Wait()
		return counts, errs
	}
}

// testRestart stops both agents with sig while new and long-lived
// connections flow, leaves the nodes without agents for a second, and
// starts the agents again: the pinned data plane must forward throughout,
// and the new agents must adopt it, counters included.
func (e *env) testRestart(t *testing.T, r restart) {
	sig := r.sig
	ctx := testCtx(t)
	logAgentsOnFailure(t, e.p)
	t.Cleanup(func() { e.ensureAgents(t) })
	const (
		conns     = 4
		connEvery = 50 * time.Millisecond
		gap       = time.Second
		// inFlight: client segments not yet counted by a node when the
		// snapshot after the restart reads the client (it reads the
		// nodes first): some 40 ms of the stream's traffic.
		inFlight = 100
	)

	stopLive := e.liveConns(t, ctx, conns, connEvery)
	liveStopped := false
	defer func() {
		if !liveStopped {
			stopLive()
		}
	}()
	stop := e.streamOf(t, ctx)

	time.Sleep(500 * time.Millisecond)
	before := e.statuses(t)
	s0 := e.snapshot(t)
	t0 := time.Now()
	for _, n := range e.p.Nodes {
		e.stopAgent(t, n, sig)
	}
	t1 := time.Now()
	if r.config != nil {
		for _, n := range e.p.Nodes {
			r.config(t, n)
		}
	}
	time.Sleep(gap)
	t2 := time.Now()
	restarted := make([]*api.Status, len(e.p.Nodes))
	binary := r.binary
	if binary == "" {
		binary = e.p.Spec.Binary
	}
	for i, n := range e.p.Nodes {
		st, err := labrun.StartAgentBinary(ctx, e.p, n, e.services, binary)
		if err != nil {
			t.Fatal(err)
		}
		restarted[i] = st
	}
	t3 := time.Now()
	s1 := e.snapshot(t)
	time.Sleep(time.Second)
	attempts := stop()
	counts, errs := stopLive()
	liveStopped = true

	t.Logf("%v: agents stopped in %s, started again in %s", sig, t1.Sub(t0).Round(time.Millisecond), t3.Sub(t2).Round(time.Millisecond))
	all := summarize(attempts)
	down := summarize(window(attempts, t1, t2))
	t.Logf("new connections: %s; of which with no agent running: %s", all, down)
	if all.failed > 0 {
		t.Errorf("new connections across the restart: %s, want none failed (%v)", all, all.firstErr)
	}
	if down.total == 0 {
		t.Errorf("no new connection started while the agents were down: the test did not test the gap")
	}
	t.Logf("long-lived connections: requests per connection %v", counts)
	for _, err := range errs {
		t.Errorf("long-lived connection broken across the restart: %v", err)
	}
	// Each connection made a request every connEvery across the whole
	// restart: at least half of what it could have.
	if minimum := int(time.Since(t0)/connEvery) / 2; slices.Min(counts) < minimum {
		t.Errorf("long-lived connections made %v requests, want at least %d each", counts, minimum)
	}

	// The counters live in the pinned maps: the new agents read on from
	// where the old ones stopped, and count what the data plane forwarded
	// without them: every segment the client sent meanwhile.
	var fwd int64
	for i := range e.p.Nodes {
		fwd += int64(s1.Nodes[i].Services[e.web().Name]) - int64(s0.Nodes[i].Services[e.web().Name])
	}
	sent := int64(s1.Clients[0].IP.TCPOutSegs) - int64(s0.Clients[0].IP.TCPOutSegs)
	t.Logf("from just before the stop to just after the start: the client sent %d TCP segments, the nodes' web counters grew by %d", sent, fwd)
	if !r.migrates && fwd < sent-inFlight {
		t.Errorf("the nodes' web counters grew by %d across the restart, the client sent %d segments: want the counters continued, not reset", fwd, sent)
	}
	for i, n := range e.p.Nodes {
		st := restarted[i]
		var names, want []string
		for _, s := range st.Services {
			names = append(names, s.Name)
			if !s.Installed {
				t.Errorf("%s: restarted agent: service %q not installed", n.Name, s.Name)
			}
		}
		for _, s := range before[i].Services {
			want = append(want, s.Name)
		}
		slices.Sort(names)
		slices.Sort(want)
		if !slices.Equal(names, want) {
			t.Errorf("%s: restarted agent serves %v, want %v", n.Name, names, want)
		}
		old, cur := serviceNamed(before[i], e.web().Name).Counters, serviceNamed(st, e.web().Name).Counters
		t.Logf("%s: web counters %d packets before, %d after the restart", n.Name, old.Packets, cur.Packets)
		log, err := os.ReadFile(lab.LogFile(e.p.Spec.Prefix, labrun.AgentName(n)))
		if err != nil {
			t.Fatal(err)
		}
		last := string(log)
		if i := strings.LastIndex(last, "--- "); i >= 0 {
			last = last[i:]
		}
		migrated := strings.Contains(last, "the pinned maps do not fit this version")
		if migrated != r.migrates {
			t.Errorf("%s: the restarted agent migrated the maps: %v, want %v: %s", n.Name, migrated, r.migrates, last)
		}
		if r.migrates {
			// Fresh maps: the counters start again, with what the
			// new maps counted since the switch.
			if cur.Packets >= old.Packets {
				t.Errorf("%s: web counters %+v after migrating, %+v before: want them restarted", n.Name, cur, old)
			}
			continue
		}
		if old.Packets == 0 || cur.Packets <= old.Packets || cur.Bytes <= old.Bytes {
			t.Errorf("%s: web counters %+v after the restart, %+v before: want them continued, not reset", n.Name, cur, old)
		}
		for _, b := range serviceNamed(before[i], e.web().Name).Backends {
			j := slices.IndexFunc(serviceNamed(st, e.web().Name).Backends, func(c api.Backend) bool { return c.Address == b.Address })
			if j < 0 {
				t.Errorf("%s: backend %s of web missing after the restart", n.Name, b.Address)
			} else if c := serviceNamed(st, e.web().Name).Backends[j].Counters; c.Packets < b.Counters.Packets {
				t.Errorf("%s: backend %s of web: %d packets after the restart, %d before", n.Name, b.Address, c.Packets, b.Counters.Packets)
			}
		}
		if !strings.Contains(last, "adopted the pinned data plane state") {
			t.Errorf("%s: the restarted agent's log does not say it adopted the pinned state: %s", n.Name, labrun.AgentLogs(e.p)[n.Name])
		}
	}
}
