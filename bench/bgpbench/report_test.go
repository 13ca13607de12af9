package main

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
	"github.com/xlbproject/xlb/testbed/lab"
)

func sampleReport() *Report {
	scale := func(start, stop []float64, bfd float64) *ScaleResult {
		s := &ScaleResult{PollMs: 5, PauseMinMs: 500, PauseMaxMs: 2000}
		for _, v := range start {
			ag, se, ro, bf := 300.0, v-310, 10.0, bfd
			s.Events = append(s.Events, ScaleEvent{Op: opStart, Node: "node1", Ms: v, Seen: seenNotify, AgentMs: &ag, SessionMs: &se, RouterMs: &ro, BFDUpMs: &bf})
		}
		for _, v := range stop {
			ro := v - 1
			s.Events = append(s.Events, ScaleEvent{Op: opStop, Node: "node2", Ms: v, Seen: seenPoll, RouterMs: &ro})
		}
		s.summarize()
		return s
	}
	fail := func(kind string, bfd bool, hold time.Duration, ms ...float64) FailureRun {
		f := FailureRun{Kind: kind, Mode: agentMode{BFD: bfd, HoldTime: hold}}
		for _, v := range ms {
			f.Events = append(f.Events, FailureEvent{Node: "node3", Ms: v, Seen: seenNotify})
		}
		f.Detect = benchutil.Summarize(ms)
		return f
	}
	run := func(nodes, round int, rps float64, idle float64) ThroughputRun {
		return ThroughputRun{Round: round, Nodes: nodes, wrkResult: wrkResult{Requests: int(rps * 3), RPS: rps, LatP50Ms: 1, LatP99Ms: 9},
			NodePackets: uint64(rps * 3 * 2), NodeShare: make([]float64, nodes),
			CPU: CPUUse{IdlePct: idle, SoftirqPct: 20, Roles: []RoleCPU{
				{Role: roleClient, Cores: 0.4, System: 0.36}, {Role: roleBackends, Cores: 0.9}, {Role: roleAgents, Cores: 0.01},
				{Role: roleOthers, Cores: 0.3}, {Role: roleUnattributed, Cores: 0.1}}}}
	}
	return &Report{
		Date: "2026-11-22T00:00:00Z", Machine: benchutil.Machine{CPU: "test CPU", CPUs: 2, MemMiB: 1024, Kernel: "6.1", Go: "go1.26"},
		TargetP99Ms: targetP99Ms, TargetBFDMs: targetBFDMs, DrainMs: 1000, FailuresPerKind: 3, Seed: 42,
		Routers: []RouterResult{
			{Router: lab.RouterEmbedded, Scale: scale([]float64{1500, 2000, 3000}, []float64{3, 5, 9}, -1500),
				Failures: []FailureRun{
					fail(failKill, true, 9*time.Second, 4, 5, 6), fail(failHang, true, 9*time.Second, 250, 270, 290),
					fail(failKill, false, 3*time.Second, 4, 5, 6), fail(failHang, false, 3*time.Second, 2100, 2500, 2900),
				}},
			{Router: lab.RouterFRR, Scale: scale([]float64{600, 700, 800}, []float64{40, 60, 90}, 1800),
				Failures: []FailureRun{fail(failHang, true, 9*time.Second, 300, 8300), fail(failHang, false, 3*time.Second, 2600, 3050)}},
		},
		Throughput: &ThroughputResult{Router: lab.RouterEmbedded, Command: "wrk -t 2", Threads: 2, Conns: 64, Seconds: 3, Rounds: 2, IRQTimeAccounting: "n",
			Direct: []ThroughputRun{run(0, 1, 30000, 3), run(0, 2, 31000, 2)},
			Runs:   []ThroughputRun{run(1, 1, 20000, 1), run(2, 1, 19000, 1), run(2, 2, 21000, 4), run(1, 2, 18000, 0)}},
	}
}

// TestMarkdownVerdicts: each verdict follows its numbers.
func TestMarkdownVerdicts(t *testing.T) {
	md := markdown(sampleReport(), "bench/results/bgp-x.json", "img/bench-bgp.svg", "img/bench-bgp-throughput.svg")
	if err := benchutil.CheckSection(md, docBegin, docEnd); err != nil {
		t.Error(err)
	}
	for _, want := range []string{
		"| embedded | start → next hop in | 3 | 2000 | 3000 | 3000 | 3000 | **misses** |",
		"| embedded | SIGTERM → next hop out | 3 | 5.0 | 9.0 | 9.0 | 9.0 | meets |",
		"| FRR | start → next hop in | 3 | 700 | 800 | 800 | 800 | meets |",
		"| embedded | SIGSTOP (hang) | 100 ms × 3 | 9 s | 3 | 270 | 290 | 290 | 290 | ≤ 500 ms: meets |",
		"| embedded | SIGSTOP (hang) | none | 3 s | 3 | 2500 | 2900 | 2900 | 2900 | ≤ hold time + the router's 8.0 ms: meets |",
		"| FRR | SIGSTOP (hang) | none | 3 s | 2 | 2600 | 3050 | 3050 | 3050 | ≤ hold time + the router's 89 ms: meets |",
		"Through one xlb node the machine serves 65 % of what it serves directly",
		"| FRR | SIGSTOP (hang) | 100 ms × 3 | 9 s | 2 | 300 | 8300 | 8300 | 8300 | ≤ 500 ms: **misses** |",
		"the poll saw 6 of the 28 changes first",
		"Best run per node count (requests/s): 1: 20000, 2: 21000; direct: 31000.",
		"at the best rate, 21000 requests/s,",
		"| 2 nodes | 2 | 21000 | 1.0 / 9.0 | 2.0 |",
		"no run left more than 4 % of them idle",
		"-seed 42",
		"With the embedded router a started agent's BFD session is up before its BGP session (p50 1500 ms before)",
		"With the FRR router a started agent's BFD session comes up only 1800 ms (p50; 1800–1800) after",
		"| embedded | 300 / 300 / 300 | 1690 / 2690 / 2690 | 10 / 10 / 10 | -1500 / -1500 / -1500 |",
		"![Histograms", "](img/bench-bgp.svg)", "](img/bench-bgp-throughput.svg)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("missing %q in:\n%s", want, md)
		}
	}
	if strings.Count(md, docBegin) != 1 || strings.Count(md, docEnd) != 1 || !strings.HasPrefix(md, docBegin) || !strings.HasSuffix(md, docEnd) {
		t.Errorf("markers: the section must start and end with them once")
	}
	if !strings.Contains(md, "**Starting** misses the target") {
		t.Errorf("a start p99 above the target and no word of it")
	}
	if !strings.Contains(md, "Sessions slower than 1000 ms waited for a second connection attempt") {
		t.Errorf("sessions over a second (1690–2690 ms) and no word of them")
	}
	fast := sampleReport()
	fast.Routers[0].Scale = fast.Routers[1].Scale
	if md := markdown(fast, "x.json", "", ""); !strings.Contains(md, "**Starting** meets the target too. The agent connects to its peers itself") ||
		!strings.Contains(md, "exec → GoBGP running, p50 300 ms, at most 300) and the session (TCP, OPEN, KEEPALIVE: p50 390 ms, at most 490)") ||
		strings.Contains(md, "Sessions slower") {
		t.Errorf("every start within the target:\n%s", md)
	}
	r := sampleReport()
	f := &r.Routers[1].Failures[1]
	f.Events[1].Ms = 3100
	f.Detect = benchutil.Summarize([]float64{2600, 3100})
	if md := markdown(r, "x.json", "", ""); !strings.Contains(md, "| 3100 | ≤ hold time + the router's 89 ms: **misses** |") {
		t.Errorf("a hang found after hold time + the router's time passes:\n%s", md)
	}
}

// TestMarkdownParts: sections without data are left out, and so are
// images not drawn.
func TestMarkdownParts(t *testing.T) {
	r := sampleReport()
	r.Throughput = nil
	for i := range r.Routers {
		r.Routers[i].Failures = nil
		r.Routers[i].Scale.Events = r.Routers[i].Scale.Events[3:] // stops only
		r.Routers[i].Scale.summarize()
	}
	md := markdown(r, "x.json", "", "")
	for _, absent := range []string{"### Failure detection", "### Aggregate throughput", "![", "**Starting** misses"} {
		if strings.Contains(md, absent) {
			t.Errorf("%q present:\n%s", absent, md)
		}
	}
	if !strings.Contains(md, "### Route convergence") {
		t.Errorf("no convergence section:\n%s", md)
	}
	if err := benchutil.CheckSection(md, docBegin, docEnd); err != nil {
		t.Error(err)
	}
}

// TestPlots: both plots are well-formed SVG, with a bar per non-empty
// histogram bin and a dot per failure.
func TestPlots(t *testing.T) {
	r := sampleReport()
	elems := func(svg string) map[string]int {
		n, err := benchutil.SVGElements(svg)
		if err != nil {
			t.Fatalf("%v\n%s", err, svg)
		}
		return n
	}
	got := elems(plot(r))
	if got["circle"] != 16 {
		t.Errorf("%d dots, want 16 (one per failure)", got["circle"])
	}
	// Bars: every sample of each panel falls into a bin of its own here
	// (1500, 2000, 3000 ms: bins 31, 33, 34; 3, 5, 9 ms: 4, 6, 9; ...);
	// plus the white ground and the legend swatches (2 per scale panel,
	// 2 in the failure panel).
	if want := 1 + 12 + 2*2 + 2; got["rect"] != want {
		t.Errorf("%d rects, want %d", got["rect"], want)
	}
	tp := elems(plotThroughput(r))
	if tp["rect"] < 1+6+6 {
		t.Errorf("throughput plot: %d rects", tp["rect"])
	}
}

func TestHistogram(t *testing.T) {
	lo, hi := decades([]float64{3, 2500})
	if lo != 1 || hi != 10000 {
		t.Fatalf("decades = %v, %v", lo, hi)
	}
	h := histogram([]float64{1, 1.2, 3, 9.99, 10, 2500, 10000, 50000, 0, -1}, lo, hi)
	if len(h) != 4*binsPerDecade {
		t.Fatalf("%d bins", len(h))
	}
	want := map[int]int{0: 1, 0 + int(math.Floor(math.Log10(1.2)*binsPerDecade)): 1, 4: 1, 9: 1, 10: 1, 33: 1, 39: 2}
	want[0] = 2 // 1 and 1.2 share the first bin
	for i, c := range h {
		if c != want[i] {
			t.Errorf("bin %d: %d, want %d (all: %v)", i, c, want[i], h)
		}
	}
	for _, tc := range []struct {
		v     float64
		top   float64
		steps int
	}{{4, 4, 4}, {5, 5, 5}, {7, 8, 4}, {25170, 30000, 3}, {31000, 40000, 4}, {0, 1, 1}, {1, 1, 5}} {
		if top, steps := niceTop(tc.v); top != tc.top || steps != tc.steps {
			t.Errorf("niceTop(%v) = %v, %d; want %v, %d", tc.v, top, steps, tc.top, tc.steps)
		}
	}
}
