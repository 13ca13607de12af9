package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
	"github.com/xlbproject/xlb/testbed/labrun"
	"github.com/xlbproject/xlb/testbed/netns"
)

// testReport is a run of every path with 1 and 4 backends, two rounds,
// and a few latency runs. rps gives each IPv4 path's best rate per mode
// and backend count, an IPv6 path's is 0.95x its twin's; the other round
// is 10 % lower.
func testReport() *Report {
	r := &Report{
		Date: "2026-01-02T03:04:05Z", Command: "go run ./bench/httpbench",
		Machine: benchutil.Machine{CPU: "Test CPU", CPUs: 2, MemMiB: 2048, Kernel: "6.1", Go: "go1.26", LoadStart: "1 1 1", LoadEnd: "2 2 2"},
		Wrk:     wrkSettings{Threads: 8, Conns: 160, Duration: 3 * time.Second, Timeout: 2 * time.Second},
		Warmup:  time.Second, Rounds: 2, QuietCores: 0.25, BackendCounts: []int{1, 4}, Modes: []string{modeKeepAlive, modeClose},
		LatencyRates: []float64{1000}, LatencyBackends: 4, LatencyDuration: 4 * time.Second, LatencyWarmup: time.Second,
		Response:          ResponseBytes{Request: 35, Head: 164, Body: 13},
		Paths:             paths(),
		IRQTimeAccounting: "n",
		Configs:           []ConfigSet{{Backends: 1, Nft: "nft 1\n"}, {Backends: 4, Nft: "nft 4\n"}},
		BackendNginx:      "worker_processes 1;\n",
		Setup:             []string{"xlb lab up --prefix xhb1"},
	}
	rps := map[string][2]float64{ // keep-alive, new connection; ×1 with 1 backend, ×1.1 with 4
		keyIPIP: {40000, 9000}, keyGUE: {38000, 8500}, keyNft: {39000, 7000}, keyIptables: {41000, 7500},
		keyNginx: {19000, 4000}, keyHAProxy: {18000, 4200}, keyDirect: {44000, 9500},
		keyNAT: {40000, 8500}, keyDNAT: {41000, 8000}, keyFloor: {42000, 9000},
	}
	for _, p := range r.Paths {
		for m, mode := range r.Modes {
			for _, n := range r.BackendCounts {
				v := rps[baseKey(p.Key)][m]
				if isV6(p.Key) {
					v *= 0.95 // an IPv6 path: 0.95x its IPv4 twin
				}
				if n == 4 {
					v *= 1.1
				}
				served := make([]int, labBackends)
				for i := range n {
					served[i] = int(v) / n
				}
				for round, f := range []float64{0.5, 1, 0.9} {
					r.Runs = append(r.Runs, Run{Path: p.Key, Mode: mode, Backends: n, Round: round,
						Command:   "wrk " + p.Key + " " + mode,
						WrkResult: WrkResult{Requests: int(v * f * 3), RPS: v * f, P99Ms: 10},
						Served:    served, XDPPackets: uint64(v * f * 3 * 2),
						CPU: CPUUse{IdlePct: 1, SoftirqPct: 30, Client: 0.7, Backends: 0.6, Other: 0.1}})
				}
			}
		}
	}
	for _, k := range latencyPaths {
		r.Latency = append(r.Latency, LatencyRun{Path: k, Backends: 4, Command: "httpbench openloop -rate 1000",
			OpenloopResult: OpenloopResult{Rate: 1000, Seconds: 4, Scheduled: 4000, OK: 3990, Achieved: 997.5,
				Errors: map[string]int{"read": 10}, P50Ms: 0.8, P90Ms: 1.5, P99Ms: 3.2, MaxMs: 9}})
	}
	return r
}

func TestBestAndRatio(t *testing.T) {
	r := testReport()
	if b, d := r.best(keyIPIP, modeKeepAlive, 1); b == nil || b.RPS != 40000 || b.Round != 1 || d {
		t.Fatalf("best: %+v, disturbed %v", b, d)
	}
	if got := r.ratio(keyIPIP, keyNginx, modeKeepAlive, 4); math.Abs(got-40000.0/19000) > 1e-9 {
		t.Errorf("ratio %g", got)
	}
	if !math.IsNaN(r.ratio(keyIPIP, keyNft, modeKeepAlive, 2)) {
		t.Error("a ratio without runs must be NaN")
	}
	// The warm-up (round 0) never counts, even if it is the fastest.
	r.Runs = append(r.Runs, Run{Path: keyDirect, Mode: modeKeepAlive, Backends: 1, Round: 0, WrkResult: WrkResult{RPS: 1e9}})
	if r.bestRPS(keyDirect, modeKeepAlive, 1) != 44000 {
		t.Error("the warm-up counted")
	}
}

// TestQuiet: a quiet round beats a faster disturbed one; without a
// quiet round the fastest is shown, marked.
func TestQuiet(t *testing.T) {
	r := testReport()
	loud := CPUUse{Other: 0.9}
	r.Runs = append(r.Runs,
		Run{Path: keyNft, Mode: modeKeepAlive, Backends: 1, Round: 3, WrkResult: WrkResult{RPS: 99999}, CPU: loud})
	if b, d := r.best(keyNft, modeKeepAlive, 1); b.RPS != 39000 || d {
		t.Errorf("best %g, disturbed %v: want the quiet 39000", b.RPS, d)
	}
	for i := range r.Runs {
		if x := &r.Runs[i]; x.Path == keyNft && x.Mode == modeKeepAlive && x.Backends == 1 {
			x.CPU = loud
		}
	}
	if b, d := r.best(keyNft, modeKeepAlive, 1); b.RPS != 99999 || !d || r.hasQuiet(keyNft, modeKeepAlive, 1) {
		t.Errorf("best %g, disturbed %v: want the disturbed 99999", b.RPS, d)
	}
	if !strings.Contains(r.rpsTable(modeKeepAlive), "| nftables DNAT | 99999\\* |") {
		t.Errorf("the disturbed figure is not marked:\n%s", r.rpsTable(modeKeepAlive))
	}
	if !strings.Contains(r.targetSummary(), "1 of the 4 compare a disturbed round") {
		t.Errorf("target summary:\n%s", r.targetSummary())
	}
}

func TestRatioTableAndTargets(t *testing.T) {
	r := testReport()
	table := r.ratioTable()
	// ipip/nft keep-alive 1: 40000/39000 = 1.03 ✓; ipip/nginx: 2.11 ✓;
	// ipip/direct: 0.91 ✓; gue/nft: 0.97 ✗.
	for _, want := range []string{
		"| keep-alive | 1 | 1.03x ✓ | 2.11x ✓ | 0.91x ✓ | 0.97x ✗ | 2.00x ✓ | 0.86x ✗ | 1.05x | 0.95x |",
		"| new-connection | 4 | 1.29x ✓ | 2.25x ✓ | 0.95x ✓ | 1.21x ✓ | 2.12x ✓ | 0.89x ✗ |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("ratio table lacks\n%s\nin\n%s", want, table)
		}
	}
	sum := r.targetSummary()
	for _, want := range []string{
		"xlb dsr-ipip ≥ 1.0x nftables DNAT: **met in 4 of 4**.",
		"xlb dsr-gue ≥ 1.0x nftables DNAT: **met in 2 of 4** (missed: keep-alive with 1: 0.97x; keep-alive with 4: 0.97x).",
	} {
		if !strings.Contains(sum, want) {
			t.Errorf("target summary lacks %q:\n%s", want, sum)
		}
	}
}

func TestNATTargets(t *testing.T) {
	r := testReport()
	table := r.natRatioTable()
	// nat/nft: keep-alive 40000/39000 = 1.03 ≥ 1.0 ✓, new-connection
	// 8500/7000 = 1.21 ≥ 1.2 ✓; nat/HAProxy: 2.22 ✓, 2.02 ✓; dnat unmarked.
	for _, want := range []string{
		"xlb nat / nftables DNAT (≥ 1.0x keep-alive, 1.2x new-connection)",
		"xlb nat / HAProxy tcp (≥ 1.5x)",
		"| keep-alive | 1 | 1.03x ✓ | 2.22x ✓ | 1.03x ✓ (2) | 2.22x ✓ (2) | 1.05x | 2.28x |",
		"| new-connection | 4 | 1.21x ✓ | 2.02x ✓ | 1.21x ✓ (2) | 2.02x ✓ (2) | 1.14x | 1.90x |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("NAT ratio table lacks\n%s\nin\n%s", want, table)
		}
	}
	r.Runs = append(r.Runs, Run{Path: keyNft, Mode: modeClose, Backends: 1, Round: 1, WrkResult: WrkResult{RPS: 8000}})
	sum := r.natTargetSummary()
	for _, want := range []string{
		"xlb nat ≥ 1.0x keep-alive, 1.2x new-connection nftables DNAT: **met in 3 of 4** (missed: new-connection with 1: 1.06x).",
		"xlb nat ≥ 1.5x HAProxy tcp: **met in 4 of 4**.",
	} {
		if !strings.Contains(sum, want) {
			t.Errorf("NAT target summary lacks %q:\n%s", want, sum)
		}
	}
}

func TestMarkdown(t *testing.T) {
	r := testReport()
	md := markdown(r, "bench/results/http-20260102-030405.json", images{KeepAlive: "img/a.png", Close: "img/b.png", Latency: "img/c.png", Model: "img/d.png"})
	if err := benchutil.CheckSection(md, docBegin, docEnd); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| xlb dsr-ipip | 40000 | 44000 |",
		"| direct | 9500 | 10450 |",
		"![Requests per second, keep-alive](img/a.png)",
		"![Latency at fixed rates](img/c.png)",
		"| xlb dsr-gue | 1000 | 998 | 0.80 | 1.50 | 3.20 | 9.00 | 10 (0.2%: read 10) |",
		"### What limited these numbers",
		"**The two CPUs, shared by everything.**",
		"CONFIG_IRQ_TIME_ACCOUNTING=n",
		"nft 1\n", // the configurations of the smallest count when 2 was not run
		"wrk xlb-ipip keep-alive",
		"`bench/results/http-20260102-030405.json`",
		"2 rounds of 3s",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("section lacks %q", want)
		}
	}
	if strings.Contains(md, "NaN") || strings.Contains(md, "%!") {
		t.Errorf("section has a formatting error:\n%s", md)
	}
	// The model table: the DSR paths are bound by the client's link, the
	// others by the node's, so DNAT's ceiling is lower.
	if g1dsr, g1dnat := r.modelRate(modeKeepAlive, modelPath(keyGUE), 4, 1e9), r.modelRate(modeKeepAlive, modelPath(keyNft), 4, 1e9); !(g1dnat < g1dsr) {
		t.Errorf("model: DNAT %g, DSR %g", g1dnat, g1dsr)
	}
}

// TestWriteViews writes the plots and the section into a document that
// has text around the markers, twice, and keeps that text.
func TestWriteViews(t *testing.T) {
	dir := t.TempDir()
	doc := filepath.Join(dir, "benchmarks.md")
	head, tail := "# Benchmarks\n\nintro\n\n"+docBegin+"\nold\n"+docEnd+"\n", "\n## The bandwidth model\n\nmodel text\n"
	if err := os.WriteFile(doc, []byte(head+tail), 0o644); err != nil {
		t.Fatal(err)
	}
	r := testReport()
	img := filepath.Join(dir, "img")
	for range 2 {
		if err := writeViews(r, "bench/results/http-x.json", img, doc, func(string, ...any) {}); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if !strings.HasPrefix(s, "# Benchmarks\n\nintro\n\n"+docBegin) || !strings.HasSuffix(s, docEnd+"\n"+tail) || strings.Contains(s, "\nold\n") {
		t.Errorf("document:\n%s", s)
	}
	for _, name := range []string{imgKeepAlive, imgClose, imgLatency, imgModel} {
		fi, err := os.Stat(filepath.Join(img, name))
		if err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
		if !strings.Contains(s, "](img/"+name+")") {
			t.Errorf("the section does not link %s", name)
		}
	}
}

func TestStubStatus(t *testing.T) {
	page := "Active connections: 1 \nserver accepts handled requests\n 17 17 4321 \nReading: 0 Writing: 1 Waiting: 0 \n"
	if n, err := parseStubStatus(page); err != nil || n != 4321 {
		t.Errorf("got %d, %v", n, err)
	}
	if _, err := parseStubStatus("HTTP/1.1 404 Not Found\r\n\r\n"); err == nil {
		t.Error("a page without the counters parsed")
	}
	// Each read counts itself: between two reads a backend answered the
	// difference less one.
	got := servedDelta([]int{10, 20, 5}, []int{111, 21, 6})
	if got[0] != 100 || got[1] != 0 || got[2] != 0 {
		t.Errorf("servedDelta: %v", got)
	}
}

func TestCheckSpread(t *testing.T) {
	for _, tc := range []struct {
		name     string
		served   []int
		n, total int
		ok       bool
	}{
		{"even", []int{50, 50, 0, 0}, 2, 100, true},
		{"answers still open at wrk's end", []int{51, 52, 0, 0}, 2, 100, true},
		{"a backend in use idle", []int{100, 0, 0, 0}, 2, 100, false},
		{"a backend not in use answered", []int{50, 49, 1, 0}, 2, 99, false},
		{"fewer answers than wrk counted", []int{40, 40, 0, 0}, 2, 100, false},
	} {
		if err := checkSpread(tc.served, tc.n, tc.total); (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

func TestOrder(t *testing.T) {
	ps := paths()
	if order(ps, 0)[0].Key != keyIPIP || order(ps, 1)[0].Key != ps[len(ps)-1].Key || order(ps, 2)[0].Key != keyIPIP {
		t.Error("want forward, backward, forward")
	}
	if ps[0].Key != keyIPIP {
		t.Error("order changed its argument")
	}
}

func TestParseFlags(t *testing.T) {
	if got, err := parseInts("4, 1,2,4"); err != nil || len(got) != 3 || got[0] != 1 || got[2] != 4 {
		t.Errorf("parseInts: %v %v", got, err)
	}
	if _, err := parseRates("1000,x"); err == nil {
		t.Error("parseRates accepted x")
	}
	if got, err := parseRates(""); err != nil || len(got) != 0 {
		t.Errorf("parseRates(\"\"): %v %v", got, err)
	}
	cfg := "# CONFIG_FOO is not set\nCONFIG_IRQ_TIME_ACCOUNTING=y\n"
	if configValue(cfg, "CONFIG_IRQ_TIME_ACCOUNTING") != "y" || configValue(cfg, "CONFIG_FOO") != "n" {
		t.Error("configValue")
	}
}

// TestNetstatCounters: /proc/net/netstat has /proc/net/snmp's format, so
// synCounters reads it with labrun.ParseSNMP; a section's names may
// repeat in another section.
func TestNetstatCounters(t *testing.T) {
	text := "TcpExt: SyncookiesSent TCPSynRetrans TCPOrigDataSent\nTcpExt: 0 17 250\nIpExt: InNoRoutes TCPSynRetrans\nIpExt: 3 9\n"
	var retrans, noRoutes uint64
	if err := labrun.ParseSNMP(strings.NewReader(text), map[string]*uint64{"TcpExt.TCPSynRetrans": &retrans, "IpExt.InNoRoutes": &noRoutes}); err != nil || retrans != 17 || noRoutes != 3 {
		t.Errorf("TcpExt TCPSynRetrans = %d, IpExt InNoRoutes = %d, %v; want 17, 3", retrans, noRoutes, err)
	}
	var missing uint64
	if err := labrun.ParseSNMP(strings.NewReader(text), map[string]*uint64{"TcpExt.Missing": &missing}); err == nil {
		t.Error("a missing field gave no error")
	}
}

// TestSYNRetransFromNamespace: /proc/thread-self/net, which synRetrans
// reads, follows the namespace netns.Do joined (or every round would read
// the host's counters): a link made in a namespace of its own shows there
// and not on the host.
func TestSYNRetransFromNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	ns := fmt.Sprintf("xlbhb%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	defer exec.Command("ip", "netns", "del", ns).Run()
	const link = "xlbhbprobe"
	if out, err := exec.Command("ip", "-n", ns, "link", "add", link, "type", "veth", "peer", "name", link+"p").CombinedOutput(); err != nil {
		t.Fatalf("ip link add: %v: %s", err, out)
	}
	var dev, netstat []byte
	if err := netns.Do(ns, func() (err error) {
		if dev, err = os.ReadFile("/proc/thread-self/net/dev"); err != nil {
			return err
		}
		netstat, err = os.ReadFile("/proc/thread-self/net/netstat")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	host, err := os.ReadFile("/proc/thread-self/net/dev")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(dev), link) || strings.Contains(string(host), link) {
		t.Errorf("the namespace's /proc/thread-self/net/dev:\n%s\nthe host's:\n%s\nwant %s in the first only", dev, host, link)
	}
	var n uint64
	if err := labrun.ParseSNMP(bytes.NewReader(netstat), map[string]*uint64{"TcpExt.TCPSynRetrans": &n}); err != nil || n != 0 {
		t.Errorf("TCPSynRetrans in a fresh namespace: %d (%v), want 0", n, err)
	}
}

// TestPairedRatio: the median of the per-round ratios, over the rounds
// both paths ran; the warm-up and unpaired rounds do not count.
func TestPairedRatio(t *testing.T) {
	run := func(path string, round int, rps float64) Run {
		return Run{Path: path, Mode: modeClose, Backends: 8, Round: round, WrkResult: WrkResult{RPS: rps}}
	}
	r := &Report{Runs: []Run{
		run(keyNAT, 0, 1), run(keyNft, 0, 100), // warm-up
		run(keyNAT, 1, 120), run(keyNft, 1, 100), // 1.2
		run(keyNAT, 2, 90), run(keyNft, 2, 100), // 0.9
		run(keyNAT, 3, 260), run(keyNft, 3, 200), // 1.3
		run(keyNAT, 4, 500), // no pair
	}}
	if v, n := r.pairedRatio(keyNAT, keyNft, modeClose, 8); n != 3 || math.Abs(v-1.2) > 1e-9 {
		t.Errorf("three pairs: %v over %d, want 1.2 over 3", v, n)
	}
	r.Runs = append(r.Runs, run(keyNft, 4, 1000)) // 0.5
	if v, n := r.pairedRatio(keyNAT, keyNft, modeClose, 8); n != 4 || math.Abs(v-1.05) > 1e-9 {
		t.Errorf("four pairs: %v over %d, want 1.05 (the mean of the middle two) over 4", v, n)
	}
	if v, n := r.pairedRatio(keyNAT, keyHAProxy, modeClose, 8); n != 0 || !math.IsNaN(v) {
		t.Errorf("no pair: %v over %d, want NaN over 0", v, n)
	}
}
