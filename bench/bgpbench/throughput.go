package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
	"github.com/xlbproject/xlb/testbed/netns"
)

// The load generator: wrk, as in the dissertation, with one thread per
// CPU and enough connections that ECMP spreads them over four nodes.
const (
	wrkBin     = "wrk"
	wrkConns   = 64
	wrkWarmup  = time.Second
	wrkTimeout = 2 * time.Second // wrk's own per-request timeout
)

// ThroughputResult is the aggregate throughput with 1 → 4 xlb nodes.
type ThroughputResult struct {
	Router   string  `json:"router"`
	Command  string  `json:"command"`
	Threads  int     `json:"threads"`
	Conns    int     `json:"connections"`
	Seconds  float64 `json:"duration_s"`
	Backends int     `json:"backends"`
	// IRQTimeAccounting is the kernel's CONFIG_IRQ_TIME_ACCOUNTING: "n"
	// means softirq time is also charged to the interrupted process.
	IRQTimeAccounting string `json:"irq_time_accounting,omitempty"`
	Rounds            int    `json:"rounds"`
	// Direct is the client against one backend's own address, no xlb in
	// the path: what the client and one backend manage on this machine;
	// one run per round.
	Direct []ThroughputRun `json:"direct"`
	Runs   []ThroughputRun `json:"runs"`
}

// ThroughputRun is one wrk run.
type ThroughputRun struct {
	Round  int    `json:"round"`
	Nodes  int    `json:"nodes"` // 0 for Direct
	Target string `json:"target"`
	wrkResult
	// NodeShare is each running node's share of the packets its
	// interface received during the run, in percent, in node order.
	NodeShare []float64 `json:"node_share_pct,omitempty"`
	// NodePackets is the packets all running nodes received during
	// the run: the client's half of the traffic, which xlb carries.
	NodePackets uint64 `json:"node_packets,omitempty"`
	CPU         CPUUse `json:"cpu"`
}

// CPUUse is where the CPU time went during a run.
type CPUUse struct {
	// Shares of all CPUs' time, machine-wide from /proc/stat, in
	// percent: user (with nice), system, softirq, idle (with iowait),
	// the rest (irq, steal).
	UserPct    float64 `json:"user_pct"`
	SystemPct  float64 `json:"system_pct"`
	SoftirqPct float64 `json:"softirq_pct"`
	IdlePct    float64 `json:"idle_pct"`
	OtherPct   float64 `json:"other_pct"`
	// Roles: CPU time per wall time of groups of processes (1 = one
	// core), user + system.
	Roles []RoleCPU `json:"roles"`
}

// RoleCPU is the CPU use of one group of processes.
type RoleCPU struct {
	Role   string  `json:"role"`
	Cores  float64 `json:"cores"`
	System float64 `json:"system_cores"` // of Cores
}

// wrkResult is what wrk reports.
type wrkResult struct {
	Requests    int     `json:"requests"`
	RPS         float64 `json:"requests_per_s"`
	LatP50Ms    float64 `json:"latency_p50_ms"`
	LatP90Ms    float64 `json:"latency_p90_ms"`
	LatP99Ms    float64 `json:"latency_p99_ms"`
	SocketErrs  int     `json:"socket_errors"`
	Non2xx      int     `json:"non_2xx"`
	WrkDuration float64 `json:"wrk_duration_s"`
}

// runThroughput measures, in each of rounds rounds, the direct run and
// 1 to labNodes nodes, for d each, and leaves every agent running.
func runThroughput(ctx context.Context, l *benchLab, xlb string, d time.Duration, rounds int, progress func(string)) (*ThroughputResult, error) {
	if _, err := exec.LookPath(wrkBin); err != nil {
		return nil, fmt.Errorf("%s: %w (install the Debian package wrk: make deps)", wrkBin, err)
	}
	threads := max(benchutil.ThisMachine().CPUs, 1)
	res := &ThroughputResult{
		Threads: threads, Conns: wrkConns, Seconds: d.Seconds(), Backends: len(l.p.Backends), Rounds: rounds,
		IRQTimeAccounting: kernelConfig("CONFIG_IRQ_TIME_ACCOUNTING"),
	}
	res.Command = strings.Join(wrkArgs(threads, d, netip.AddrPortFrom(l.vip, lab.HTTPPort)), " ")

	be := l.p.Backends[0]
	for round := range rounds {
		direct, err := l.wrkRun(ctx, xlb, 0, threads, d, netip.AddrPortFrom(be.Addr, lab.HTTPPort))
		if err != nil {
			return nil, fmt.Errorf("direct to %s: %w", be.Name, err)
		}
		direct.Round = round + 1
		res.Direct = append(res.Direct, direct)
		progress(fmt.Sprintf("%s: throughput round %d, direct to %s: %.0f requests/s", l.kind, round+1, be.Name, direct.RPS))
		for _, n := range nodeOrder(round) {
			if err := l.runExactly(ctx, n); err != nil {
				return nil, err
			}
			run, err := l.wrkRun(ctx, xlb, n, threads, d, netip.AddrPortFrom(l.vip, lab.HTTPPort))
			if err != nil {
				return nil, fmt.Errorf("%d nodes: %w", n, err)
			}
			run.Round = round + 1
			res.Runs = append(res.Runs, run)
			progress(fmt.Sprintf("%s: throughput round %d, %d node(s): %.0f requests/s, %.0f %% idle, node shares %v %%",
				l.kind, round+1, n, run.RPS, run.CPU.IdlePct, run.NodeShare))
		}
	}
	if err := l.runExactly(ctx, labNodes); err != nil {
		return nil, err
	}
	return res, nil
}

// nodeOrder is the order of the node counts in a round: up from 1 in
// even rounds, down from labNodes in odd ones, so that every count is
// measured early and late, and a drift of the shared machine's load
// evens out.
func nodeOrder(round int) []int {
	out := make([]int, labNodes)
	for i := range out {
		out[i] = i + 1
		if round%2 == 1 {
			out[i] = labNodes - i
		}
	}
	return out
}

// runExactly makes the agents of the first n nodes run and no others,
// and waits until the route has exactly their next hops.
func (l *benchLab) runExactly(ctx context.Context, n int) error {
	var want []netip.Addr
	for i := range l.agents {
		switch {
		case i < n && l.agents[i].pid == 0:
			res, err := l.start(ctx, i)
			if err != nil {
				return err
			}
			if err := res.wait(); err != nil {
				return err
			}
		case i >= n && l.agents[i].pid != 0:
			if err := l.signal(i, syscall.SIGTERM); err != nil {
				return err
			}
		}
		if i < n {
			want = append(want, l.node(i).Addr)
		}
	}
	if _, hops, _, err := l.fib.wait(ctx, startTimeout, exactly(want)); err != nil {
		return fmt.Errorf("%d nodes: %w (route via %v)", n, err, hops)
	}
	return nil
}

func wrkArgs(threads int, d time.Duration, target netip.AddrPort) []string {
	return []string{wrkBin, "-t", strconv.Itoa(threads), "-c", strconv.Itoa(wrkConns), "-d", fmt.Sprintf("%ds", int(d.Seconds())),
		"--timeout", fmt.Sprintf("%ds", int(wrkTimeout.Seconds())), "--latency", "http://" + target.String() + "/"}
}

// wrkRun runs wrk from the client namespace against target for d after
// a warm-up, with the first nodes nodes running, and measures the CPU
// use around it.
func (l *benchLab) wrkRun(ctx context.Context, xlb string, nodes, threads int, d time.Duration, target netip.AddrPort) (ThroughputRun, error) {
	run := ThroughputRun{Nodes: nodes, Target: target.String()}
	if _, _, err := l.wrk(ctx, xlb, wrkArgs(threads, wrkWarmup, target)); err != nil {
		return run, fmt.Errorf("warm-up: %w", err)
	}
	before, err := l.snapshot(nodes)
	if err != nil {
		return run, err
	}
	out, wrkTimes, err := l.wrk(ctx, xlb, wrkArgs(threads, d, target))
	if err != nil {
		return run, err
	}
	after, err := l.snapshot(nodes)
	if err != nil {
		return run, err
	}
	if run.wrkResult, err = parseWrk(out); err != nil {
		return run, fmt.Errorf("wrk output: %w\n%s", err, out)
	}
	if run.SocketErrs > 0 || run.Non2xx > 0 {
		return run, fmt.Errorf("wrk: %d socket errors, %d non-2xx answers:\n%s", run.SocketErrs, run.Non2xx, out)
	}
	run.CPU = cpuUse(before, after, wrkTimes)
	run.NodeShare = shares(before.rx, after.rx)
	for i := range after.rx {
		run.NodePackets += after.rx[i] - before.rx[i]
	}
	return run, nil
}

// wrk runs the command line args inside the client namespace (through
// xlb's netns-exec, which execs, so the process is wrk itself) and
// returns its output and CPU times.
func (l *benchLab) wrk(ctx context.Context, xlb string, args []string) (string, procTimes, error) {
	cmd := exec.CommandContext(ctx, xlb, append([]string{netns.ExecCommand, l.p.Clients[0].Namespace, "--"}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), procTimes{}, fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out.String())
	}
	var t procTimes
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		t = rusageTimes(ru)
	}
	return out.String(), t, nil
}

// snapshot is the counters around a run.
type snapshot struct {
	at    time.Time
	cpu   cpuTimes
	roles map[string]procTimes
	all   map[int]procTimes // every process on the machine
	rx    []uint64          // packets received by each running node's interface
}

// The roles of CPUUse, in the order reported.
const (
	roleClient    = "client: wrk"
	roleBackends  = "backends: xlb lab serve"
	roleAgents    = "xlb agents"
	roleKsoftirqd = "ksoftirqd"
	roleSelf      = "bgpbench"
	// roleOthers is every other process on the machine: other users'
	// work on a shared machine.
	roleOthers = "other processes"
	// roleUnattributed is busy CPU time no process was charged with:
	// softirq work that ran while a CPU was idle, and processes that
	// ended during the run.
	roleUnattributed = "unattributed"
)

func (l *benchLab) snapshot(nodes int) (snapshot, error) {
	s := snapshot{roles: map[string]procTimes{}}
	add := func(role string, pid int) {
		t := readProcTimes(pid)
		r := s.roles[role]
		s.roles[role] = procTimes{r.user + t.user, r.system + t.system}
	}
	for _, be := range l.p.Backends {
		pid, err := lab.PID(l.p.Spec.Prefix, lab.ServerName(be))
		if err != nil {
			return s, err
		}
		add(roleBackends, pid)
	}
	for _, i := range l.running() {
		add(roleAgents, l.agents[i].pid)
	}
	for _, pid := range ksoftirqds() {
		add(roleKsoftirqd, pid)
	}
	add(roleSelf, os.Getpid())
	s.all = allProcTimes()
	for i := range nodes {
		st, err := labrun.ReadLink(l.node(i).Namespace, lab.HostInterface)
		if err != nil {
			return s, err
		}
		s.rx = append(s.rx, st.RxPackets)
	}
	cpu, err := readCPUTimes()
	s.cpu, s.at = cpu, time.Now()
	return s, err
}

// cpuUse computes where the CPU went between two snapshots; wrk's times
// are its own (it ran entirely between them, and has exited).
func cpuUse(a, b snapshot, wrk procTimes) CPUUse {
	d := func(x, y uint64) float64 { return float64(y - x) }
	total := d(a.cpu.total(), b.cpu.total())
	var u CPUUse
	if total > 0 {
		pct := func(v float64) float64 { return benchutil.Round3(100 * v / total) }
		u.UserPct = pct(d(a.cpu.user+a.cpu.nice, b.cpu.user+b.cpu.nice))
		u.SystemPct = pct(d(a.cpu.system, b.cpu.system))
		u.SoftirqPct = pct(d(a.cpu.softirq, b.cpu.softirq))
		u.IdlePct = pct(d(a.cpu.idle+a.cpu.iowait, b.cpu.idle+b.cpu.iowait))
		u.OtherPct = pct(d(a.cpu.irq+a.cpu.steal, b.cpu.irq+b.cpu.steal))
	}
	wall := b.at.Sub(a.at).Seconds()
	role := func(name string, t procTimes) {
		if wall > 0 {
			u.Roles = append(u.Roles, RoleCPU{Role: name,
				Cores:  benchutil.Round3(float64(t.user+t.system) / userHZ / wall),
				System: benchutil.Round3(float64(t.system) / userHZ / wall)})
		}
	}
	role(roleClient, wrk)
	var ours procTimes
	for _, name := range []string{roleBackends, roleAgents, roleKsoftirqd, roleSelf} {
		t := minus(b.roles[name], a.roles[name])
		ours.user, ours.system = ours.user+t.user, ours.system+t.system
		role(name, t)
	}
	all := grown(a.all, b.all)
	role(roleOthers, minus(all, ours))
	busy := a.cpu.total() - a.cpu.idle - a.cpu.iowait
	busy = b.cpu.total() - b.cpu.idle - b.cpu.iowait - busy
	charged := all.user + all.system + wrk.user + wrk.system
	if busy > charged {
		role(roleUnattributed, procTimes{system: busy - charged})
	} else {
		role(roleUnattributed, procTimes{})
	}
	return u
}

// minus is b − a per field, 0 where a is larger.
func minus(b, a procTimes) procTimes {
	sub := func(y, x uint64) uint64 {
		if y < x {
			return 0
		}
		return y - x
	}
	return procTimes{sub(b.user, a.user), sub(b.system, a.system)}
}

// shares turns counter readings before and after into percentages of
// their total growth.
func shares(before, after []uint64) []float64 {
	if len(before) != len(after) {
		return nil
	}
	var sum uint64
	for i := range before {
		sum += after[i] - before[i]
	}
	out := make([]float64, len(before))
	for i := range before {
		if sum > 0 {
			out[i] = math.Round(1000*float64(after[i]-before[i])/float64(sum)) / 10
		}
	}
	return out
}

var (
	wrkRequestsRE = regexp.MustCompile(`(?m)^\s*(\d+) requests in ([0-9.]+)(us|ms|s|m)\b`)
	wrkRPSRE      = regexp.MustCompile(`(?m)^Requests/sec:\s*([0-9.]+)`)
	wrkLatencyRE  = regexp.MustCompile(`(?m)^\s*(50|90|99)%\s+([0-9.]+)(us|ms|s)\s*$`)
	wrkSocketRE   = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
	wrkNon2xxRE   = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
)

// parseWrk reads wrk's report (with --latency).
func parseWrk(out string) (wrkResult, error) {
	var r wrkResult
	m := wrkRequestsRE.FindStringSubmatch(out)
	if m == nil {
		return r, errors.New(`no "N requests in T" line`)
	}
	r.Requests, _ = strconv.Atoi(m[1])
	r.WrkDuration = benchutil.Round3(durationMs(m[2], m[3]) / 1000)
	m = wrkRPSRE.FindStringSubmatch(out)
	if m == nil {
		return r, errors.New(`no "Requests/sec" line`)
	}
	r.RPS, _ = strconv.ParseFloat(m[1], 64)
	lat := map[string]*float64{"50": &r.LatP50Ms, "90": &r.LatP90Ms, "99": &r.LatP99Ms}
	for _, m := range wrkLatencyRE.FindAllStringSubmatch(out, -1) {
		*lat[m[1]] = benchutil.Round3(durationMs(m[2], m[3]))
	}
	if r.LatP50Ms == 0 || r.LatP99Ms == 0 {
		return r, errors.New("no latency distribution (run wrk with --latency)")
	}
	if m := wrkSocketRE.FindStringSubmatch(out); m != nil {
		for _, v := range m[1:] {
			n, _ := strconv.Atoi(v)
			r.SocketErrs += n
		}
	}
	if m := wrkNon2xxRE.FindStringSubmatch(out); m != nil {
		r.Non2xx, _ = strconv.Atoi(m[1])
	}
	return r, nil
}

// durationMs converts one of wrk's durations to milliseconds.
func durationMs(v, unit string) float64 {
	f, _ := strconv.ParseFloat(v, 64)
	switch unit {
	case "us":
		return f / 1000
	case "ms":
		return f
	case "s":
		return f * 1000
	case "m":
		return f * 60000
	}
	return f
}
