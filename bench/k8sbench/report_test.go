package main

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

func TestParseStatus(t *testing.T) {
	status := "Name:\txlb\nState:\tS (sleeping)\nVmPeak:\t 2000000 kB\nVmHWM:\t  123456 kB\nVmRSS:\t   65432 kB\nThreads:\t12\n"
	rss, hwm, err := parseStatus(status)
	if err != nil || rss != 65432<<10 || hwm != 123456<<10 {
		t.Errorf("parseStatus = %d, %d, %v; want %d, %d", rss, hwm, err, 65432<<10, 123456<<10)
	}
	// A zombie or kernel thread has no memory lines.
	if _, _, err := parseStatus("Name:\tkworker/0:1\nState:\tI (idle)\n"); err == nil {
		t.Error("parseStatus of a status without VmRSS: no error")
	}
	if _, _, err := parseStatus("VmRSS:\t lots kB\nVmHWM:\t 1 kB\n"); err == nil {
		t.Error("parseStatus of a malformed VmRSS: no error")
	}
}

func TestParseStat(t *testing.T) {
	// The command name may hold spaces and parentheses.
	line := "4242 (xlb (agent) x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 1500 250 0 0 20 0 14 0 9999 2000000000 16000 18446744073709551615\n"
	u, s, err := parseStat(line)
	if err != nil || u != 1500 || s != 250 {
		t.Errorf("parseStat = %d, %d, %v; want 1500, 250", u, s, err)
	}
	for _, bad := range []string{"no parenthesis", "1 (x) S 1 2 3", "1 (x) S 1 2 3 4 5 6 7 8 9 10 u s"} {
		if _, _, err := parseStat(bad); err == nil {
			t.Errorf("parseStat(%q): no error", bad)
		}
	}
}

// agentLog is the agent's JSON log around one change, as slog writes it.
const agentLog = `{"time":"2026-11-23T10:00:00.100000000Z","level":"INFO","msg":"configuration from the cluster","source":"kubernetes","services":1000,"peers":0,"events":1,"latency":40000000,"build":12000000}
{"time":"2026-11-23T10:00:00.160000000Z","level":"INFO","msg":"configuration reloaded","path":"/tmp/agent.yaml","trigger":"kubernetes","generation":7,"services":1000}
{"time":"2026-11-23T10:00:00.170000000Z","level":"WARN","msg":"left out of the configuration","object":"Service k8sbench/x","reason":"r"}
panic: something
`

func TestParseLogAndAttribute(t *testing.T) {
	lines := parseLog([]byte(agentLog))
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 4: %+v", len(lines), lines)
	}
	if l := lines[0]; l.Msg != msgCluster || l.Latency != 40e6 || l.Build != 12e6 || l.Events != 1 || l.Services != 1000 {
		t.Errorf("first line: %+v", l)
	}
	if lines[3].Msg != "panic: something" || lines[3].Level != "" {
		t.Errorf("a line that is not JSON: %+v", lines[3])
	}
	if got := problems(lines); len(got) != 2 || got[0] != "left out of the configuration" || got[1] != "panic: something" {
		t.Errorf("problems = %q", got)
	}

	base := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	t0 := base.Add(55 * time.Millisecond)  // the patch returned
	t1 := base.Add(150 * time.Millisecond) // the table was seen
	var e Change
	attribute(&e, lines, t0, t1)
	// The source saw the change at 100 - 40 = 60 ms, 5 ms after t0; it
	// handed the configuration over at 100 ms; the table came 50 ms
	// later; the apply was logged 60 ms after the hand-over.
	want := Change{Matched: true, Events: 1, WatchMs: 5, SourceMs: 40, BuildMs: 12, AgentMs: 50, ApplyMs: 60}
	if e != want {
		t.Errorf("attribute = %+v, want %+v", e, want)
	}
	if got := e.WatchMs + e.SourceMs + e.AgentMs; got != benchutil.Ms(t1.Sub(t0)) {
		t.Errorf("the parts add up to %v ms, want %v", got, benchutil.Ms(t1.Sub(t0)))
	}

	// Two configurations (or none) for one change: not attributed.
	var two Change
	attribute(&two, append(lines, lines[0]), t0, t1)
	if two.Matched {
		t.Errorf("two configurations attributed: %+v", two)
	}
}

// TestLogTail: each call returns the complete lines written since the
// last, and keeps a partial line for later.
func TestLogTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tail := &logTail{path: path}
	lines := strings.SplitAfter(agentLog, "\n")
	if _, err := f.WriteString(lines[0] + lines[1][:20]); err != nil {
		t.Fatal(err)
	}
	got, err := tail.next()
	if err != nil || len(got) != 1 || got[0].Msg != msgCluster {
		t.Fatalf("first read: %+v, %v", got, err)
	}
	if _, err := f.WriteString(lines[1][20:]); err != nil {
		t.Fatal(err)
	}
	got, err = tail.next()
	if err != nil || len(got) != 1 || got[0].Msg != msgReloaded || got[0].Trigger != "kubernetes" {
		t.Fatalf("second read: %+v, %v", got, err)
	}
	if got, err := tail.next(); err != nil || len(got) != 0 {
		t.Fatalf("nothing new: %+v, %v", got, err)
	}
}

func TestAddresses(t *testing.T) {
	for _, tc := range []struct {
		got  netip.Addr
		want string
	}{
		{vip(0), "10.99.0.1"}, {vip(254), "10.99.0.255"}, {vip(1023), "10.99.4.0"},
		{endpointAddr(0, 0, 10), "10.128.0.1"}, {endpointAddr(0, 9, 10), "10.128.0.10"},
		{endpointAddr(1, 0, 10), "10.128.0.11"}, {endpointAddr(999, 9, 10), "10.128.39.16"},
	} {
		if tc.got.String() != tc.want {
			t.Errorf("got %s, want %s", tc.got, tc.want)
		}
	}
	seen := map[netip.Addr]bool{}
	for i := range 1024 {
		for j := range 100 {
			a := endpointAddr(i, j, 100)
			if seen[a] {
				t.Fatalf("endpoint %d of service %d: %s is used twice", j, i, a)
			}
			seen[a] = true
		}
	}
	if got := string(readyPatch(3, false)); got != `[{"op":"replace","path":"/endpoints/3/conditions/ready","value":false}]` {
		t.Errorf("readyPatch = %s", got)
	}
	sl := endpointSlice(7, 10)
	if sl.Name != "svc-0007" || sl.Labels["kubernetes.io/service-name"] != "svc-0007" || len(sl.Endpoints) != 10 || *sl.Endpoints[9].Conditions.Ready != true {
		t.Errorf("endpointSlice(7, 10) = %+v", sl)
	}
}

func TestWirePort(t *testing.T) {
	// Port 80 in network byte order, loaded little-endian: 0x5000.
	if got := wire.PortFrom(0x5000); got != 80 {
		t.Errorf("wire.PortFrom(0x5000) = %d, want 80", got)
	}
}

func sampleReport() *Report {
	var events []Change
	var upd []float64
	for i := range 120 {
		v := 50 + float64(i)
		upd = append(upd, v)
		events = append(events, Change{Service: i, UpdateMs: v, Matched: i%2 == 0, WatchMs: 3, SourceMs: 40, AgentMs: v - 43})
	}
	return &Report{
		Date: "2026-11-23T00:00:00Z", Machine: benchutil.Machine{CPU: "test CPU", CPUs: 2, MemMiB: 1024, Kernel: "6.1", Go: "go1.26"},
		Seed:  1,
		Setup: Setup{Services: 1000, Endpoints: 10, TableSize: 65537, APICalls: 3003, Concurrency: 8, Seconds: 30},
		Start: Start{SyncedMs: 1500, AllTablesMs: 31500, FirstTableMs: 1600, PollMs: 100, AppliedMs: 31450},
		Changes: Changes{TargetP99Ms: 200, PollMs: 1, PauseMinMs: 100, PauseMaxMs: 300, QuietMs: 30, MaxDelayMs: 200,
			Update: benchutil.Summarize(upd), Call: benchutil.Summarize([]float64{3, 4}),
			Watch: benchutil.Summarize([]float64{3}), Source: benchutil.Summarize([]float64{40}), Agent: benchutil.Summarize([]float64{60}),
			Matched: 60, Events: events},
		Resources: []Phase{
			{Name: phaseStart, Seconds: 31.5, CPUSeconds: 25, Cores: 0.8, RSSMiB: 90, RSSMaxMiB: 120, HWMMiB: 121},
			{Name: phaseIdle, FromS: 36.5, Seconds: 20, CPUSeconds: 0.1, Cores: 0.005, RSSMiB: 85, RSSMaxMiB: 86, HWMMiB: 121},
			{Name: phaseChanges, FromS: 57, Seconds: 60, CPUSeconds: 12, Cores: 0.2, RSSMiB: 95, RSSMaxMiB: 99, HWMMiB: 121, PerChangeMs: 100, NetPerChangeMs: 99},
		},
		Samples: []Sample{{T: 0, RSSMiB: 10}, {T: 0.5, RSSMiB: 50, CPUS: 0.3}, {T: 1.5, RSSMiB: 80, CPUS: 1.1}, {T: 120, RSSMiB: 95, CPUS: 40}},
	}
}

// TestMarkdownVerdict: the verdict follows the measured p99.
func TestMarkdownVerdict(t *testing.T) {
	r := sampleReport() // p99 of 50..169 is 168
	md := markdown(r, "x.json", "")
	if !strings.Contains(md, "This run **meets** it: p99 is 168 ms over 120 changes") {
		t.Errorf("p99 168 ms against a 200 ms target:\n%s", md)
	}
	if err := benchutil.CheckSection(md, docBegin, docEnd); err != nil {
		t.Error(err)
	}
	if strings.Contains(md, "![") {
		t.Errorf("an image link without a plot:\n%s", md)
	}
	if !strings.Contains(md, "the agent (apply up to the table swap), 60 ms") {
		t.Errorf("the largest part is the agent's:\n%s", md)
	}
	r.Changes.Update = benchutil.Summarize([]float64{50, 100, 250})
	if md := markdown(r, "x.json", "img/bench-k8s.svg"); !strings.Contains(md, "This run **misses** it: p99 is 250 ms") || !strings.Contains(md, "](img/bench-k8s.svg)") {
		t.Errorf("p99 250 ms against a 200 ms target:\n%s", md)
	}
	r.Changes.Update = benchutil.Summary{}
	if v := verdict(r.Changes); v != "misses" {
		t.Errorf("verdict without samples = %s", v)
	}
}

// TestPlotIsSVG: the plot is well-formed XML with one path per line.
func TestPlotIsSVG(t *testing.T) {
	if n, err := benchutil.SVGElements(plot(sampleReport())); err != nil || n["path"] != 4 {
		t.Errorf("%d paths (%v), want 4: two CDFs, RSS, CPU", n["path"], err)
	}
}

func TestNiceAxis(t *testing.T) {
	for _, tc := range []struct{ top, hi, step float64 }{
		{168, 175, 25}, {200, 200, 25}, {1, 1, 0.2}, {31.5, 35, 5}, {0, 1, 0.25}, {1234, 1400, 200},
	} {
		hi, step := niceAxis(tc.top)
		if hi < tc.top || hi/step > 8.0001 || (tc.hi != 0 && (hi != tc.hi || step != tc.step)) {
			t.Errorf("niceAxis(%g) = %g, %g; want %g, %g", tc.top, hi, step, tc.hi, tc.step)
		}
	}
}

func TestCPURate(t *testing.T) {
	s := []Sample{{T: 0, CPUS: 0}, {T: 0.5, CPUS: 0.4}, {T: 1, CPUS: 0.5}, {T: 1.5, CPUS: 0.5}, {T: 2.5, CPUS: 0.75}}
	got := cpuRate(s, 1)
	want := [][2]float64{{0.5, 0.5}, {1.75, 0.167}} // 0.25 s over 1.5 s
	if len(got) != len(want) {
		t.Fatalf("cpuRate = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("cpuRate[%d] = %v, want %v", i, got[i], want[i])
		}
	}
}
