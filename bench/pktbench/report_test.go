package main

import (
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/testbed/lab"
)

func TestFill(t *testing.T) {
	before := snapshot{
		cpus:     map[int]cpuTimes{0: {User: 100, System: 100, SoftIRQ: 100, Idle: 100}, 1: {Idle: 500}},
		softirqd: map[int]uint64{0: 1_000_000, 1: 5_000_000},
		backends: []snmp{{UDP: udpCounters{InDatagrams: 10, RcvbufErrors: 90}}, {UDP: udpCounters{InDatagrams: 5, RcvbufErrors: 95}}},
		node:     snmp{IP: ipCounters{ForwDatagrams: 7}},
		links:    map[string]linkCounters{"router/n1": {TxPackets: 10, TxDropped: 1}},
		bpf:      map[string]ebpf.ProgramStats{"node1/eth0": {Runtime: 1000, RunCount: 10}},
		xlbStatus: &api.Status{Services: []api.Service{{Counters: api.Counters{Packets: 50}}},
			Reasons: map[string]uint64{"pass_not_ipv4": 1}},
	}
	after := snapshot{
		cpus:     map[int]cpuTimes{0: {User: 110, System: 120, SoftIRQ: 160, Idle: 110}, 1: {User: 50, Idle: 550}},
		softirqd: map[int]uint64{0: 101_000_000, 1: 900_000_000}, // CPU 1 is not the generator's: not counted
		backends: []snmp{{UDP: udpCounters{InDatagrams: 12, RcvbufErrors: 498_088}}, {UDP: udpCounters{InDatagrams: 5, RcvbufErrors: 500_095}}},
		node:     snmp{IP: ipCounters{ForwDatagrams: 1007}},
		links:    map[string]linkCounters{"router/n1": {TxPackets: 1010, TxDropped: 3}},
		bpf:      map[string]ebpf.ProgramStats{"node1/eth0": {Runtime: 1000 + 200*1_000_000, RunCount: 10 + 1_000_000}},
		xlbStatus: &api.Status{Services: []api.Service{{Counters: api.Counters{Packets: 1_000_050}}},
			Reasons: map[string]uint64{"pass_not_ipv4": 3, "drop_no_backend": 0}},
	}
	r := Run{CPUs: []int{0}}
	sr := sendResult{Sent: 1_000_000, Elapsed: 2 * time.Second, Calls: 62, ThreadCPU: []time.Duration{1900 * time.Millisecond}}
	fill(&r, sr, before, after)
	if r.Delivered != 998_000 || r.PerBackend[0] != 498_000 || r.PerBackend[1] != 500_000 {
		t.Fatalf("delivered %d %v", r.Delivered, r.PerBackend)
	}
	if r.LossPct != 0.2 {
		t.Errorf("loss %.2f%%, want 0.2%%", r.LossPct)
	}
	// Path CPU: 1.9 s of the thread and 0.1 s of ksoftirqd/0.
	if r.PathCPUS != 2 || r.SoftirqdS != 0.1 {
		t.Errorf("path %v s, ksoftirqd %v s; want 2 and 0.1", r.PathCPUS, r.SoftirqdS)
	}
	if want := round1(2e9 / 998_000); r.NsPerPkt != want {
		t.Errorf("ns per packet %v, want %v", r.NsPerPkt, want)
	}
	if r.PPS != 499_000 || r.PPSPerCore != 499_000 {
		t.Errorf("pps %v, per CPU-second %v; want 499000 both", r.PPS, r.PPSPerCore)
	}
	// CPU 0: 10 user, 20 system, 60 softirq, 10 idle of 100 ticks.
	if len(r.CPU) != 2 || r.CPU[0] != (CPUShare{CPU: 0, User: 10, System: 20, SoftIRQ: 60, Idle: 10}) {
		t.Errorf("CPU shares %+v", r.CPU)
	}
	if want := round1(60 * 1e9 / userHZ / 998_000); r.StatSoftirqNs != want {
		t.Errorf("/proc/stat softirq ns %v, want %v", r.StatSoftirqNs, want)
	}
	if r.Node.ForwDatagrams != 1000 || r.Links["router/n1"] != (linkCounters{TxPackets: 1000, TxDropped: 2}) {
		t.Errorf("node %+v, links %+v", r.Node, r.Links)
	}
	if r.XLB == nil || r.XLB.Forwarded != 1_000_000 || len(r.XLB.Reasons) != 1 || r.XLB.Reasons["pass_not_ipv4"] != 2 {
		t.Errorf("xlb %+v", r.XLB)
	}
	if b := r.BPF["node1/eth0"]; b.Runs != 1_000_000 || b.NsPerRun != 200 || b.RunsPerPacket != 1 {
		t.Errorf("bpf %+v", b)
	}
}

// mainRun makes a main-section run with the figures summarize reads.
func mainRun(v string, round int, pps, ns float64) Run {
	return Run{Section: sectionVariants, Variant: v, Round: round, Cores: 1, NodeQueues: pathQueues,
		Delivered: 1000, PPS: pps, NsPerPkt: ns, PPSPerCore: math.Round(1e9 / ns)}
}

func TestSummarizeRatiosRoundByRound(t *testing.T) {
	runs := []Run{
		mainRun(vDirect, 1, 300_000, 2500), mainRun(vRouted, 1, 150_000, 5000), mainRun(vXLBGUE, 1, 160_000, 4900), mainRun(vNFT, 1, 120_000, 6000),
		// Round 2 ran on a busier machine: every wall-clock rate is
		// half, the CPU per packet the same.
		mainRun(vDirect, 2, 150_000, 2500), mainRun(vRouted, 2, 75_000, 5000), mainRun(vXLBGUE, 2, 80_000, 4900), mainRun(vNFT, 2, 60_000, 6000),
		{Section: sectionStats, Variant: vXLBGUE, BPF: map[string]BPFRun{"node1/eth0": {Runs: 10, NsPerRun: 180}}, PPS: 1},
		{Section: sectionCores, Variant: vXLBGUE, Cores: 2, NodeQueues: 1, PPS: 1e9, Delivered: 1},
	}
	sum := summarize(runs)
	if len(sum) != 4 {
		t.Fatalf("%d summaries, want 4 (variants without runs are left out)", len(sum))
	}
	x := sum[2]
	if x.Variant != vXLBGUE || x.Rounds != 2 {
		t.Fatalf("third summary %s over %d rounds", x.Variant, x.Rounds)
	}
	// Round by round the ratios are the same although the rates halved.
	if x.PPSVsDirect != round2(160.0/300) || x.PPSVsNFT != round2(160.0/120) {
		t.Errorf("pps ratios %v %v", x.PPSVsDirect, x.PPSVsNFT)
	}
	if x.CoreVsDirect != round2(2500.0/4900) || x.CoreVsNFT != round2(6000.0/4900) {
		t.Errorf("per-CPU ratios %v %v", x.CoreVsDirect, x.CoreVsNFT)
	}
	if x.OverDirectNs != 2400 || x.OverRoutedNs != -100 {
		t.Errorf("over direct %v, over routed %v", x.OverDirectNs, x.OverRoutedNs)
	}
	if x.PPS != 120_000 || x.PPSMin != 80_000 || x.PPSMax != 160_000 {
		t.Errorf("pps median %v min %v max %v", x.PPS, x.PPSMin, x.PPSMax)
	}
	if x.BPF["node1/eth0"].NsPerRun != 180 {
		t.Errorf("BPF figures not taken from the statistics run: %+v", x.BPF)
	}
}

func TestSummarizeCores(t *testing.T) {
	c := func(v string, q, cores int, pps float64, round int) Run {
		return Run{Section: sectionCores, Variant: v, NodeQueues: q, Cores: cores, Round: round, PPS: pps, NsPerPkt: 5000,
			Delivered: 1, PathCPUS: float64(cores), ElapsedS: 2}
	}
	got := summarizeCores([]Run{
		c(vXLBGUE, 1, 1, 100, 1), c(vXLBGUE, 1, 2, 150, 1), c(vXLBGUE, 2, 1, 100, 1), c(vXLBGUE, 2, 2, 190, 1),
		c(vXLBGUE, 2, 2, 170, 2), mainRun(vXLBGUE, 1, 1, 1),
	})
	if len(got) != 4 {
		t.Fatalf("%d results, want 4: %+v", len(got), got)
	}
	want := []struct {
		q, cores  int
		pps, scal float64
	}{{1, 1, 100, 0}, {1, 2, 150, 1.5}, {2, 1, 100, 0},
		// Scaling pairs runs of the same round: round 2 has no one-core
		// run, so only round 1's 190/100 counts.
		{2, 2, 180, 1.9}}
	for i, w := range want {
		g := got[i]
		if g.NodeQueues != w.q || g.Cores != w.cores || g.PPS != w.pps || g.Scaling != w.scal || g.PathShare != 50 {
			t.Errorf("result %d: %+v, want queues %d cores %d pps %v scaling %v share 50", i, g, w.q, w.cores, w.pps, w.scal)
		}
	}
	groups, one, two := coreGroups(got)
	if len(groups) != 2 || groups[0] != "xlb-gue, node 1 queue" || one[1] != 0.1 || two[1] != 0.18 {
		t.Errorf("plot groups %q, %v, %v", groups, one, two)
	}
}

func TestMarkdownSection(t *testing.T) {
	var runs []Run
	for round := 1; round <= 2; round++ {
		for i, v := range variantOrder {
			runs = append(runs, mainRun(v, round, float64(300_000-40_000*i), float64(2500+700*i)))
		}
	}
	for _, v := range variantOrder {
		runs = append(runs, Run{Section: sectionStats, Variant: v, BPF: map[string]BPFRun{
			"generator": {Runs: 1, NsPerRun: 60, RunsPerPacket: 1}, "node1/eth0": {Runs: 1, NsPerRun: 185, RunsPerPacket: 1},
			"be1/eth0": {Runs: 1, NsPerRun: 120, RunsPerPacket: 0.5}}})
	}
	for _, q := range []int{1, 2} {
		for _, cores := range []int{1, 2} {
			r := Run{Section: sectionCores, Variant: vXLBGUE, NodeQueues: q, Cores: cores, Round: 1, PPS: float64(100_000 * cores), NsPerPkt: 5500, Delivered: 1, PathCPUS: 1, ElapsedS: 2}
			if q == 1 && cores == 2 {
				r.LossPct = 16.8
				r.Links = map[string]linkCounters{"router/n1": {TxDropped: 27562}, "node1/eth0": {RxDropped: 3}}
			}
			runs = append(runs, r)
		}
	}
	rep := &Report{Date: "2026-11-25T00:00:00Z", Machine: benchutil.Machine{CPU: "Test CPU", CPUs: 2, Kernel: "6.18", Go: "go1.26"},
		Command: "go run ./bench/pktbench", Settings: sizes(false), Runs: runs}
	rep.Settings.Flows, rep.Settings.FrameBytes, rep.Settings.PathQueues = 4096, minFrame, pathQueues
	rep.Summary, rep.Cores = summarize(runs), summarizeCores(runs)
	rep.LBBench = &LBBenchRef{Date: "2026-11-25T03:18:18Z", MedianNs: 71}
	md := markdown(rep, "bench/results/pkt-x.json", plotFiles{Variants: "img/bench-pkt.png", Cores: "img/bench-cores.png"})
	if err := benchutil.CheckSection(md, docBegin, docEnd); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## Packet rate through a real path", "| `xlb-gue` |", "| `iptables` |", "bench/results/pkt-x.json",
		"![Delivered packets per variant](img/bench-pkt.png)", "### Cores", "router/n1 (transmit) (27562 in one run)",
		"### What limited these numbers", "185 (1.00)", "The xlb program took 185 ns per packet",
		"measured the same fast path at 71 ns per packet",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the section lacks %q", want)
		}
	}
	if strings.Contains(md, "NaN") || strings.Contains(md, "%!") {
		t.Errorf("the section has a formatting error:\n%s", md)
	}
	// Put into a document twice: the second time replaces the first.
	doc := "# Benchmarks\n\n<!-- lbbench-backend:end -->\n"
	once, err := benchutil.ReplaceSection(doc, docBegin, docEnd, md)
	if err != nil {
		t.Fatal(err)
	}
	twice, err := benchutil.ReplaceSection(once, docBegin, docEnd, md)
	if err != nil || twice != once {
		t.Fatalf("rewriting the section is not idempotent (err %v)", err)
	}
}

func TestRules(t *testing.T) {
	vip := netip.MustParseAddr("10.99.0.1")
	bs := []lab.Host{{Addr: netip.MustParseAddr("10.0.3.2")}, {Addr: netip.MustParseAddr("10.0.3.3")}, {Addr: netip.MustParseAddr("10.0.3.4")}}
	ipt := iptablesRules(vip, bs)
	for _, want := range []string{
		"-A KUBE-SERVICES -d 10.99.0.1/32 -p udp -m udp --dport 7777 -j KUBE-SVC-PKT",
		"--probability 0.33333 -j KUBE-SEP-1", "--probability 0.50000 -j KUBE-SEP-2", "-A KUBE-SVC-PKT -j KUBE-SEP-3",
		"-A KUBE-SEP-3 -p udp -m udp -j DNAT --to-destination 10.0.3.4:7777", "COMMIT",
	} {
		if !strings.Contains(ipt, want) {
			t.Errorf("iptables rules lack %q:\n%s", want, ipt)
		}
	}
	nft := nftRules(vip, bs[:2])
	for _, want := range []string{
		"elements = { 10.99.0.1 . udp . 7777 : goto svc-pkt }", "numgen random mod 2 vmap { 0 : goto ep-1, 1 : goto ep-2 }",
		"meta l4proto udp dnat to 10.0.3.3:7777", "type nat hook prerouting priority dstnat",
	} {
		if !strings.Contains(nft, want) {
			t.Errorf("nftables rules lack %q:\n%s", want, nft)
		}
	}
	if strings.Count(nft, "{") != strings.Count(nft, "}") {
		t.Errorf("unbalanced braces:\n%s", nft)
	}
}
