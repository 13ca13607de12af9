package main

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
)

// The sections of a run.
const (
	sectionVariants = "variants"
	sectionStats    = "bpf-stats"
	sectionCores    = "cores"
	// sectionNAT is the NAT variants', each direction separately;
	// sectionNATStats one run of each with BPF statistics on.
	sectionNAT      = "nat"
	sectionNATStats = "nat-bpf-stats"
)

// Report is what a run writes to bench/results/pkt-<stamp>.json.
type Report struct {
	Date     string            `json:"date"`
	Machine  benchutil.Machine `json:"machine"`
	Command  string            `json:"command"`
	Quick    bool              `json:"quick"`
	Settings Settings          `json:"settings"`
	// Commands are the commands and rules pktbench ran, in order.
	Commands []string `json:"commands"`
	Runs     []Run    `json:"runs"`
	// Summary and Cores are derived from Runs.
	Summary []Summary    `json:"summary"`
	Cores   []CoreResult `json:"cores"`
	// NAT is derived from the runs of sectionNAT.
	NAT     []NATSummary `json:"nat,omitempty"`
	Seconds float64      `json:"seconds"`
	// LBBench is the LB program's cost per packet that bench/lbbench
	// measured (its latest result beside ours), for comparison; nil
	// without one.
	LBBench *LBBenchRef `json:"lbbench,omitempty"`
}

// LBBenchRef is bench/lbbench's figure for the full LB path.
type LBBenchRef struct {
	File     string  `json:"file"`
	Date     string  `json:"date"`
	MedianNs float64 `json:"bench_lb_median_ns"`
}

// Settings are a run's sizes.
type Settings struct {
	Rounds       int    `json:"rounds"`
	Packets      uint64 `json:"packets_per_run"`
	Warmup       uint64 `json:"warmup_packets"`
	StatsPackets uint64 `json:"packets_per_stats_run"`
	CoreRounds   int    `json:"core_rounds"`
	CorePackets  uint64 `json:"packets_per_core_run"`
	// NATPackets are the frames of each NAT run, each direction;
	// NATStatsPackets of each NAT statistics run.
	NATPackets      uint64  `json:"packets_per_nat_run,omitempty"`
	NATStatsPackets uint64  `json:"packets_per_nat_stats_run,omitempty"`
	TimeoutS        float64 `json:"timeout_per_run_s"`
	FrameBytes      int     `json:"frame_bytes"`
	Flows           int     `json:"flows"`
	PathQueues      int     `json:"path_queues"`
}

// Run is one measurement: frames of one variant from one or more
// generator threads, and what every counter saw.
type Run struct {
	// Section is sectionVariants (the comparison of variants, one core),
	// sectionStats (one run per variant with BPF statistics on) or
	// sectionCores.
	Section string `json:"section"`
	Variant string `json:"variant"`
	// Direction is a NAT variant's (sectionNAT): dirForward, frames
	// from the client counted at the backends' sockets, or dirReverse,
	// frames from backend 1 to the client counted at the client's.
	Direction string `json:"direction,omitempty"`
	Round     int    `json:"round"`
	// Cores is the number of generator threads, each pinned to its CPU
	// (CPUs). Every packet is processed on the CPU that sent it.
	Cores      int   `json:"cores"`
	CPUs       []int `json:"cpus"`
	NodeQueues int   `json:"node_queues"`
	Stats      bool  `json:"bpf_stats"`

	Sent      uint64 `json:"sent"`
	Delivered uint64 `json:"delivered"`
	// PerBackend is what each backend's sockets got (forward runs).
	PerBackend []uint64 `json:"delivered_per_backend"`
	// NoPorts counts datagrams the receiving UDP layer (the backends',
	// or the client's in a reverse run) found no socket for: should
	// stay 0 (a GUE packet the backend failed to decapsulate would land
	// here).
	NoPorts uint64  `json:"backend_udp_noports"`
	LossPct float64 `json:"loss_pct"`

	ElapsedS float64   `json:"elapsed_s"`
	Calls    int       `json:"test_runs"`
	GenCPUS  []float64 `json:"generator_thread_cpu_s"`
	// SoftirqdS is the run time of ksoftirqd on the generator CPUs.
	SoftirqdS float64 `json:"ksoftirqd_cpu_s"`
	// PathCPUS is GenCPUS + SoftirqdS: the CPU the whole path took.
	PathCPUS float64 `json:"path_cpu_s"`

	PPS        float64 `json:"pps_delivered"`
	NsPerPkt   float64 `json:"path_cpu_ns_per_packet"`
	PPSPerCore float64 `json:"packets_per_cpu_second"`
	// StatSoftirqNs is /proc/stat's softirq time of all CPUs per
	// packet delivered (10 ms ticks).
	StatSoftirqNs float64 `json:"proc_stat_softirq_ns_per_packet"`
	// CPU is each CPU's time during the run, by kind, in percent.
	CPU []CPUShare `json:"cpu"`

	Node   IPDelta                 `json:"node_ip"`
	Router IPDelta                 `json:"router_ip"`
	Links  map[string]linkCounters `json:"links"`
	// XLB is what the agent counted (xlb variants).
	XLB *XLBDelta `json:"xlb,omitempty"`
	// BPF is the run time of each XDP program along the path (Stats).
	BPF  map[string]BPFRun `json:"bpf,omitempty"`
	Note string            `json:"note,omitempty"`
}

// CPUShare is one CPU's time during a run, in percent.
type CPUShare struct {
	CPU     int     `json:"cpu"`
	User    float64 `json:"user"`
	System  float64 `json:"system"`
	SoftIRQ float64 `json:"softirq"`
	Steal   float64 `json:"steal"`
	Idle    float64 `json:"idle"`
}

// IPDelta is what a namespace's IP layer counted during a run.
type IPDelta struct {
	InReceives    uint64 `json:"in_receives"`
	ForwDatagrams uint64 `json:"forwarded"`
	InDiscards    uint64 `json:"in_discards"`
	OutDiscards   uint64 `json:"out_discards"`
}

// XLBDelta is what the agent's data plane counted during a run.
type XLBDelta struct {
	Forwarded uint64            `json:"forwarded"`
	Reasons   map[string]uint64 `json:"reasons,omitempty"`
	// NAT is what the NAT session table counted (NAT variants).
	NAT *NATDelta `json:"nat,omitempty"`
}

// NATDelta is what the agent's NAT counters saw during a run: sessions
// created, packets dropped for want of one, reverse packets that matched
// none (passed to the kernel), and the sessions in use at the end.
type NATDelta struct {
	Created       uint64 `json:"created"`
	AllocFailures uint64 `json:"allocation_failures"`
	ReverseMisses uint64 `json:"reverse_misses"`
	SessionsAfter uint64 `json:"sessions_after"`
}

// BPFRun is one program's statistics during a run.
type BPFRun struct {
	Runs          uint64  `json:"runs"`
	NsPerRun      float64 `json:"ns_per_run"`
	RunsPerPacket float64 `json:"runs_per_packet_delivered"`
}

// fill derives a run's figures from what the generator reported and the
// counters before and after.
func fill(r *Run, sr sendResult, before, after snapshot) {
	r.Sent = sr.Sent
	r.Calls = sr.Calls
	r.ElapsedS = benchutil.Round3(sr.Elapsed.Seconds())
	if r.Direction == dirReverse {
		r.Delivered = delta(after.client.UDP.delivered(), before.client.UDP.delivered())
		r.NoPorts = delta(after.client.UDP.NoPorts, before.client.UDP.NoPorts)
	} else {
		for i := range after.backends {
			d := delta(after.backends[i].UDP.delivered(), before.backends[i].UDP.delivered())
			r.PerBackend = append(r.PerBackend, d)
			r.Delivered += d
			r.NoPorts += delta(after.backends[i].UDP.NoPorts, before.backends[i].UDP.NoPorts)
		}
	}
	if r.Sent > 0 {
		r.LossPct = round2(100 * (1 - float64(r.Delivered)/float64(r.Sent)))
	}
	var gen time.Duration
	for _, c := range sr.ThreadCPU {
		r.GenCPUS = append(r.GenCPUS, benchutil.Round3(c.Seconds()))
		gen += c
	}
	var softirqd uint64
	for _, cpu := range r.CPUs {
		softirqd += delta(after.softirqd[cpu], before.softirqd[cpu])
	}
	r.SoftirqdS = benchutil.Round3(float64(softirqd) / 1e9)
	path := gen.Seconds() + float64(softirqd)/1e9
	r.PathCPUS = benchutil.Round3(path)
	if r.Delivered > 0 {
		r.NsPerPkt = round1(path * 1e9 / float64(r.Delivered))
	}
	if path > 0 {
		r.PPSPerCore = math.Round(float64(r.Delivered) / path)
	}
	if sr.Elapsed > 0 {
		r.PPS = math.Round(float64(r.Delivered) / sr.Elapsed.Seconds())
	}
	var softirqTicks uint64
	for _, cpu := range slices.Sorted(maps.Keys(after.cpus)) {
		d := after.cpus[cpu].sub(before.cpus[cpu])
		softirqTicks += d.SoftIRQ
		t := float64(d.total())
		if t == 0 {
			continue
		}
		pct := func(v uint64) float64 { return round1(100 * float64(v) / t) }
		r.CPU = append(r.CPU, CPUShare{CPU: cpu, User: pct(d.User + d.Nice), System: pct(d.System + d.IRQ),
			SoftIRQ: pct(d.SoftIRQ), Steal: pct(d.Steal), Idle: pct(d.Idle + d.IOWait)})
	}
	if r.Delivered > 0 {
		r.StatSoftirqNs = round1(float64(softirqTicks) * 1e9 / userHZ / float64(r.Delivered))
	}
	r.Node = ipDelta(after.node.IP, before.node.IP)
	r.Router = ipDelta(after.router.IP, before.router.IP)
	r.Links = map[string]linkCounters{}
	for k, v := range after.links {
		r.Links[k] = v.sub(before.links[k])
	}
	if after.xlbStatus != nil && before.xlbStatus != nil {
		x := &XLBDelta{Reasons: map[string]uint64{}}
		var a, b uint64
		for _, s := range after.xlbStatus.Services {
			a += s.Counters.Packets
		}
		for _, s := range before.xlbStatus.Services {
			b += s.Counters.Packets
		}
		x.Forwarded = delta(a, b)
		for k, v := range after.xlbStatus.Reasons {
			if d := delta(v, before.xlbStatus.Reasons[k]); d > 0 {
				x.Reasons[k] = d
			}
		}
		if a, b := after.xlbStatus.NAT, before.xlbStatus.NAT; a != nil && b != nil {
			x.NAT = &NATDelta{Created: delta(a.Created, b.Created), AllocFailures: delta(a.AllocFailures, b.AllocFailures),
				ReverseMisses: delta(a.ReverseMisses, b.ReverseMisses), SessionsAfter: a.Sessions}
		}
		r.XLB = x
	}
	if after.bpf != nil {
		r.BPF = map[string]BPFRun{}
		for k, a := range after.bpf {
			b := before.bpf[k]
			runs := delta(a.RunCount, b.RunCount)
			br := BPFRun{Runs: runs}
			if runs > 0 {
				br.NsPerRun = round1(float64(a.Runtime-b.Runtime) / float64(runs))
			}
			if r.Delivered > 0 {
				br.RunsPerPacket = round2(float64(runs) / float64(r.Delivered))
			}
			r.BPF[k] = br
		}
	}
}

func ipDelta(a, b ipCounters) IPDelta {
	return IPDelta{delta(a.InReceives, b.InReceives), delta(a.ForwDatagrams, b.ForwDatagrams),
		delta(a.InDiscards, b.InDiscards), delta(a.OutDiscards, b.OutDiscards)}
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }
func round2(v float64) float64 { return math.Round(v*100) / 100 }

// Summary is one variant over the rounds of the main comparison (one
// generator core): medians, and ratios taken round by round, each
// between runs of the same round.
type Summary struct {
	Variant    string  `json:"variant"`
	What       string  `json:"what"`
	Rounds     int     `json:"rounds"`
	PPS        float64 `json:"pps_delivered_median"`
	PPSMin     float64 `json:"pps_delivered_min"`
	PPSMax     float64 `json:"pps_delivered_max"`
	NsPerPkt   float64 `json:"path_cpu_ns_per_packet_median"`
	PPSPerCore float64 `json:"packets_per_cpu_second_median"`
	LossPct    float64 `json:"loss_pct_max"`
	// OverDirectNs and OverRoutedNs are the path CPU per packet above
	// the direct and routed variants' (medians of the per-round
	// differences): what the node's hop costs, and what load balancing
	// costs beyond a node that only routes.
	OverDirectNs float64 `json:"ns_per_packet_over_direct"`
	OverRoutedNs float64 `json:"ns_per_packet_over_routed"`
	// Ratios to the floor (direct) and to nftables DNAT, per round,
	// then the median: delivered pps (wall clock) and packets per CPU
	// second.
	PPSVsDirect  float64 `json:"pps_ratio_to_direct"`
	CoreVsDirect float64 `json:"per_cpu_ratio_to_direct"`
	PPSVsNFT     float64 `json:"pps_ratio_to_nftables"`
	CoreVsNFT    float64 `json:"per_cpu_ratio_to_nftables"`
	// BPF is the statistics run's per-program cost.
	BPF map[string]BPFRun `json:"bpf,omitempty"`
}

func median(v []float64) float64 {
	v = slices.DeleteFunc(slices.Clone(v), func(x float64) bool { return math.IsNaN(x) })
	if len(v) == 0 {
		return math.NaN()
	}
	sort.Float64s(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// mainRuns returns the runs of the main comparison: one generator core,
// statistics off, every round.
func mainRuns(runs []Run) []Run {
	return slices.DeleteFunc(slices.Clone(runs), func(r Run) bool { return r.Section != sectionVariants })
}

// summarize derives a Summary per variant from the main runs, and takes
// each variant's BPF figures from its statistics run.
func summarize(runs []Run) []Summary {
	main := mainRuns(runs)
	byRound := map[int]map[string]Run{}
	for _, r := range main {
		if byRound[r.Round] == nil {
			byRound[r.Round] = map[string]Run{}
		}
		byRound[r.Round][r.Variant] = r
	}
	var out []Summary
	for _, v := range variantOrder {
		var pps, ns, core, loss, overD, overR, pD, cD, pN, cN []float64
		for _, round := range slices.Sorted(maps.Keys(byRound)) {
			rs := byRound[round]
			r, ok := rs[v]
			if !ok || r.Delivered == 0 {
				continue
			}
			pps = append(pps, r.PPS)
			ns = append(ns, r.NsPerPkt)
			core = append(core, r.PPSPerCore)
			loss = append(loss, r.LossPct)
			if d, ok := rs[vDirect]; ok && d.Delivered > 0 {
				overD = append(overD, r.NsPerPkt-d.NsPerPkt)
				pD = append(pD, r.PPS/d.PPS)
				cD = append(cD, r.PPSPerCore/d.PPSPerCore)
			}
			if d, ok := rs[vRouted]; ok && d.Delivered > 0 {
				overR = append(overR, r.NsPerPkt-d.NsPerPkt)
			}
			if d, ok := rs[vNFT]; ok && d.Delivered > 0 {
				pN = append(pN, r.PPS/d.PPS)
				cN = append(cN, r.PPSPerCore/d.PPSPerCore)
			}
		}
		if len(pps) == 0 {
			continue
		}
		s := Summary{Variant: v, What: variantWhat[v], Rounds: len(pps),
			PPS: math.Round(median(pps)), PPSMin: slices.Min(pps), PPSMax: slices.Max(pps),
			NsPerPkt: round1(median(ns)), PPSPerCore: math.Round(median(core)), LossPct: slices.Max(loss),
			OverDirectNs: round1(median(overD)), OverRoutedNs: round1(median(overR)),
			PPSVsDirect: round2(median(pD)), CoreVsDirect: round2(median(cD)),
			PPSVsNFT: round2(median(pN)), CoreVsNFT: round2(median(cN))}
		for _, r := range runs {
			if r.Section == sectionStats && r.Variant == v {
				s.BPF = r.BPF
			}
		}
		out = append(out, s)
	}
	return out
}

// NATSummary is one NAT variant in one direction over the rounds:
// medians, and ratios taken round by round against the runs of the same
// round.
type NATSummary struct {
	Variant    string  `json:"variant"`
	Direction  string  `json:"direction"`
	Rounds     int     `json:"rounds"`
	PPS        float64 `json:"pps_delivered_median"`
	PPSMin     float64 `json:"pps_delivered_min"`
	PPSMax     float64 `json:"pps_delivered_max"`
	NsPerPkt   float64 `json:"path_cpu_ns_per_packet_median"`
	PPSPerCore float64 `json:"packets_per_cpu_second_median"`
	LossPct    float64 `json:"loss_pct_max"`
	// CoreVsNFTMasq is the packets per CPU-second over nftables-masq's
	// in the same direction. This and the two below are 0 where they do
	// not apply (nftables-masq itself; the other direction).
	CoreVsNFTMasq float64 `json:"per_cpu_ratio_to_nftables_masq"`
	// ReverseOverForwardNs (reverse rows) is the path CPU per packet
	// above the same variant's forward run of the same round.
	ReverseOverForwardNs float64 `json:"reverse_ns_over_forward"`
	// OverRoutedNs is the path CPU per packet above the routed
	// variant's in the same direction and round: what the translation
	// adds to a node that only routes.
	OverRoutedNs float64 `json:"ns_per_packet_over_routed"`
	// BPF is the statistics run's per-program cost (the NAT variants).
	BPF map[string]BPFRun `json:"bpf,omitempty"`
}

// medianOr0 is the median, 0 of nothing (JSON has no NaN).
func medianOr0(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return median(v)
}

func natRuns(runs []Run) []Run {
	return slices.DeleteFunc(slices.Clone(runs), func(r Run) bool { return r.Section != sectionNAT })
}

// natRows are the rows of the NAT table, each forward and reverse: the
// floors first (their forward runs are the main comparison's).
var natRows = append([]string{vDirect, vRouted}, natVariantOrder...)

// summarizeNAT derives a NATSummary per row of natRows and direction.
// The forward runs of direct and routed are the main comparison's of
// the same round; their reverse runs, and both of the NAT variants', are
// sectionNAT's.
func summarizeNAT(runs []Run) []NATSummary {
	type key struct{ v, dir string }
	byRound := map[int]map[key]Run{}
	add := func(r Run, dir string) {
		if byRound[r.Round] == nil {
			byRound[r.Round] = map[key]Run{}
		}
		byRound[r.Round][key{r.Variant, dir}] = r
	}
	hasNAT := false
	for _, r := range runs {
		switch {
		case r.Section == sectionNAT:
			add(r, r.Direction)
			hasNAT = true
		case r.Section == sectionVariants && (r.Variant == vDirect || r.Variant == vRouted):
			add(r, dirForward)
		}
	}
	if !hasNAT {
		return nil
	}
	var out []NATSummary
	for _, v := range natRows {
		for _, dir := range []string{dirForward, dirReverse} {
			var pps, ns, core, loss, vsNFT, overFwd, overRouted []float64
			for _, round := range slices.Sorted(maps.Keys(byRound)) {
				rs := byRound[round]
				r, ok := rs[key{v, dir}]
				if !ok || r.Delivered == 0 {
					continue
				}
				pps = append(pps, r.PPS)
				ns = append(ns, r.NsPerPkt)
				core = append(core, r.PPSPerCore)
				loss = append(loss, r.LossPct)
				if n, ok := rs[key{vNFTMasq, dir}]; ok && n.Delivered > 0 && v != vNFTMasq {
					vsNFT = append(vsNFT, r.PPSPerCore/n.PPSPerCore)
				}
				if f, ok := rs[key{v, dirForward}]; ok && f.Delivered > 0 && dir == dirReverse {
					overFwd = append(overFwd, r.NsPerPkt-f.NsPerPkt)
				}
				if rt, ok := rs[key{vRouted, dir}]; ok && rt.Delivered > 0 {
					overRouted = append(overRouted, r.NsPerPkt-rt.NsPerPkt)
				}
			}
			if len(pps) == 0 {
				continue
			}
			s := NATSummary{Variant: v, Direction: dir, Rounds: len(pps),
				PPS: math.Round(median(pps)), PPSMin: slices.Min(pps), PPSMax: slices.Max(pps),
				NsPerPkt: round1(median(ns)), PPSPerCore: math.Round(median(core)), LossPct: slices.Max(loss),
				CoreVsNFTMasq: round2(medianOr0(vsNFT)), ReverseOverForwardNs: round1(medianOr0(overFwd)), OverRoutedNs: round1(medianOr0(overRouted))}
			for _, r := range runs {
				if r.Section == sectionNATStats && r.Variant == v && r.Direction == dir {
					s.BPF = r.BPF
				}
			}
			out = append(out, s)
		}
	}
	return out
}

// CoreResult is one variant with a number of generator cores and node
// queues, over the core rounds.
type CoreResult struct {
	Variant    string  `json:"variant"`
	NodeQueues int     `json:"node_queues"`
	Cores      int     `json:"cores"`
	Rounds     int     `json:"rounds"`
	PPS        float64 `json:"pps_delivered_median"`
	NsPerPkt   float64 `json:"path_cpu_ns_per_packet_median"`
	LossPct    float64 `json:"loss_pct_max"`
	// Scaling is the pps over the same variant's and queues' with one
	// core in the same round, median over the rounds (for 2 cores).
	Scaling float64 `json:"pps_over_one_core"`
	// Busy is the share of both CPUs' time the path took (its CPU time
	// over cores × elapsed), median, in percent.
	PathShare float64 `json:"path_share_of_its_cpus_pct"`
}

func coreRuns(runs []Run) []Run {
	return slices.DeleteFunc(slices.Clone(runs), func(r Run) bool { return r.Section != sectionCores })
}

func summarizeCores(runs []Run) []CoreResult {
	type key struct {
		v        string
		q, cores int
	}
	groups := map[key][]Run{}
	var keys []key
	for _, r := range coreRuns(runs) {
		k := key{r.Variant, r.NodeQueues, r.Cores}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], r)
	}
	var out []CoreResult
	for _, k := range keys {
		var pps, ns, loss, share, scaling []float64
		for _, r := range groups[k] {
			pps = append(pps, r.PPS)
			ns = append(ns, r.NsPerPkt)
			loss = append(loss, r.LossPct)
			if r.ElapsedS > 0 {
				share = append(share, 100*r.PathCPUS/(float64(r.Cores)*r.ElapsedS))
			}
			if k.cores == 1 {
				continue
			}
			// Against the one-core run of the same round.
			for _, o := range groups[key{k.v, k.q, 1}] {
				if o.Round == r.Round && o.PPS > 0 {
					scaling = append(scaling, r.PPS/o.PPS)
				}
			}
		}
		c := CoreResult{Variant: k.v, NodeQueues: k.q, Cores: k.cores, Rounds: len(pps), PPS: math.Round(median(pps)),
			NsPerPkt: round1(median(ns)), LossPct: slices.Max(loss), PathShare: round1(median(share))}
		if len(scaling) > 0 {
			c.Scaling = round2(median(scaling))
		}
		out = append(out, c)
	}
	return out
}

// progress formats one run for the console.
func (r Run) String() string {
	var b strings.Builder
	name := r.Variant
	if r.Direction != "" {
		name += " " + r.Direction
	}
	fmt.Fprintf(&b, "%-9s cores %d queues %d: sent %d delivered %d (loss %.2f%%), %.0f pps, path %.0f ns/packet (%.0f per CPU-second)",
		name, r.Cores, r.NodeQueues, r.Sent, r.Delivered, r.LossPct, r.PPS, r.NsPerPkt, r.PPSPerCore)
	if r.XLB != nil {
		fmt.Fprintf(&b, ", xlb forwarded %d", r.XLB.Forwarded)
		if n := r.XLB.NAT; n != nil {
			fmt.Fprintf(&b, " (NAT: %d sessions created, %d reverse misses, %d allocation failures)", n.Created, n.ReverseMisses, n.AllocFailures)
		}
	}
	if r.NoPorts > 0 {
		fmt.Fprintf(&b, ", %d to no socket", r.NoPorts)
	}
	if r.Note != "" {
		b.WriteString(" [" + r.Note + "]")
	}
	return b.String()
}
