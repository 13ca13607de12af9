// Command lbbench measures the LB program's cost per packet on a VIP hit
// beside two floors, and the backend program's on the paths a tunnelled
// packet takes (decapsulation, daisy chaining), with BPF_PROG_TEST_RUN,
// and writes the results as JSON (with kernel and CPU), as a plot of the
// LB program and as tables in the benchmark document. `make bench` runs
// it.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
	"github.com/xlbproject/xlb/bench/internal/lbharness"
)

// runInfo says when, where and by what command a report was made.
type runInfo struct {
	Date string `json:"date"`
	// Command is the command line that made the report.
	Command string `json:"command"`
	Kernel  string `json:"kernel"`
	CPU     string `json:"cpu"`
	CPUs    int    `json:"cpus"`
	Go      string `json:"go"`
}

// docLine says in a generated section what made its figures: command,
// date, machine, kernel and Go.
func (r runInfo) docLine() string {
	return fmt.Sprintf("`%s` (as root), run of %s on %s (%d CPUs), kernel %s, %s", r.Command, r.Date, r.CPU, r.CPUs, r.Kernel, r.Go)
}

func thisRun() runInfo {
	return runInfo{
		Date:    time.Now().UTC().Format(time.RFC3339),
		Command: strings.Join(append([]string{"go run ./bench/lbbench"}, os.Args[1:]...), " "),
		Kernel:  kernel(), CPU: cpuModel(), CPUs: runtime.NumCPU(), Go: runtime.Version(),
	}
}

type report struct {
	runInfo
	Backends int    `json:"backends"`
	Repeat   uint32 `json:"repeat"`
	Rounds   int    `json:"rounds"`
	// NATSessions is the size of the full-table NAT cases' table.
	NATSessions int                     `json:"nat_sessions,omitempty"`
	Results     []lbharness.BenchResult `json:"results"`
	// RatioNet is the full LB path over the parse-and-encapsulate floor,
	// both less the harness cost; RatioRaw the same with it.
	RatioNet    float64 `json:"ratio_lb_over_encap_floor_net"`
	RatioRaw    float64 `json:"ratio_lb_over_encap_floor_raw"`
	RatioMedian float64 `json:"ratio_lb_over_encap_floor_median"`
	// RatioPaired is the median over rounds of the LB's round over the
	// floor's in the same round: the rounds are interleaved, so both
	// met the same disturbances.
	RatioPaired float64 `json:"ratio_lb_over_encap_floor_paired"`
	// RatioFib is the full LB path over floor 3, which looks the route
	// up for every packet, on best rounds.
	RatioFib float64 `json:"ratio_lb_over_encap_fib_floor_raw"`
	Target   float64 `json:"target_ratio"`
	// IPv6 is the IPv6 hit path (bench_lb6) against the IPv4 one
	// (bench_lb) of the same run, and against its own floor.
	IPv6 ipv6Report `json:"ipv6"`
	// Backend is the backend program (xlb_decap), measured after the LB
	// program with the same repetitions and rounds.
	Backend backendReport `json:"backend"`
	// Matrix is the LB program over protocols, backend and service
	// counts, and the miss path, each case against its floor.
	Matrix       []lbharness.MatrixResult `json:"matrix,omitempty"`
	MatrixRepeat uint32                   `json:"matrix_repeat,omitempty"`
	MatrixRounds int                      `json:"matrix_rounds,omitempty"`
	// Ablations are the LB path with one part taken out at a time
	// (ablate.go), measured after the backend program.
	Ablations []ablation `json:"ablations,omitempty"`
	// Policy is the LB path with deny lists of several sizes and with
	// source ranges, and the deny table against an LPM trie (policy.go).
	Policy *lbharness.PolicyReport `json:"policy,omitempty"`
	// NATConns is the NAT connection-life case: every packet of a
	// connection, one test run each (-nat-conns).
	NATConns     []lbharness.NATConnResult `json:"nat_conns,omitempty"`
	PolicyRepeat uint32                    `json:"policy_repeat,omitempty"`
	PolicyRounds int                       `json:"policy_rounds,omitempty"`
}

type ipv6Report struct {
	// OverIPv4 is bench_lb6 over bench_lb: best rounds, medians, paired
	// rounds (the median of each round's ratio).
	OverIPv4 ratioPaired `json:"over_ipv4"`
	// OverFloor is bench_lb6 over floor_parse_encap6.
	OverFloor ratioPaired `json:"over_floor"`
	Target    float64     `json:"target_over_ipv4"`
}

type ratioPaired struct {
	Raw    float64 `json:"raw"`
	Median float64 `json:"median"`
	Paired float64 `json:"paired"`
}

// ratioOf is a over b on best rounds, medians and paired rounds.
func ratioOf(a, b lbharness.BenchResult) ratioPaired {
	return ratioPaired{Raw: a.MinNs / b.MinNs, Median: a.MedianNs / b.MedianNs, Paired: lbharness.PairedRatio(a.RoundsNs, b.RoundsNs)}
}

type backendReport struct {
	Results []lbharness.DecapBenchResult `json:"results"`
	// OverGUE is each case with a daisy-chain hint over plain GUE (no
	// hint), by case name: what the hint's decision, the socket lookup
	// above all, adds to decapsulation.
	OverGUE map[string]ratio `json:"ratio_over_gue"`
}

// ratio is a case over another: on best rounds (Raw), on medians, and
// counting only what each adds to the harness (Net).
type ratio struct {
	Raw    float64 `json:"raw"`
	Median float64 `json:"median"`
	Net    float64 `json:"net"`
}

// The backend cases the document and the summary line single out: the
// socket lookup that delivers, and the one that misses and chains.
const (
	caseGUE    = "gue"
	caseSocket = "gue_hint_socket"
	caseChain  = "gue_hint_chain"
)

func main() {
	out := flag.String("out", "bench/results", "directory for the JSON results")
	svg := flag.String("svg", "docs/img/bench-lb.svg", "plot to write (\"\" for none)")
	backends := flag.Int("backends", 16, "backends of the benchmarked service")
	repeat := flag.Uint("repeat", 300_000, "repetitions per round")
	rounds := flag.Int("rounds", 61, "rounds, interleaved over the programs")
	natSessions := flag.Int("nat-sessions", 200_000, fmt.Sprintf("established sessions of the full-table NAT cases, every run on another (0 for none; at most %d)", lbharness.MaxNATSessions))
	doc := flag.String("doc", "", "markdown file whose generated results section to rewrite (\"\" for none)")
	matrix := flag.Bool("matrix", true, "also run the matrix: TCP and UDP, 1/16/1024 backends, 1/100/10000 services, the miss path")
	matrixRepeat := flag.Uint("matrix-repeat", 100_000, "repetitions per round in the matrix")
	matrixRounds := flag.Int("matrix-rounds", 41, "rounds per matrix case")
	png := flag.String("png", "docs/img/bench-lb-matrix.png", "plot of the matrix; the policy cases' plot goes beside it, as "+policyPNG+" (\"\" for neither)")
	ablate := flag.String("ablate", "bench/lbbench/ablations", "directory of patches to bpf/ that each take a part out of the LB path, measured against the real one (\"\" for none; needs clang and git)")
	bpfDir := flag.String("bpf", "bpf", "the eBPF sources the ablation patches apply to")
	policy := flag.Bool("policy", true, "also run the policy cases: deny lists of 1/100/10000/100000 prefixes and source ranges, the deny table against an LPM trie")
	policyOnly := flag.Bool("policy-only", false, "run the policy cases alone (writes bench/results/lb-policy-*.json with them, and their doc section)")
	policyRepeat := flag.Uint("policy-repeat", 100_000, "repetitions per round in the policy cases")
	policyRounds := flag.Int("policy-rounds", 41, "rounds of the policy cases")
	against := flag.String("against", "", "instead, an A/B run: the LB path and floor 2 of this object (a build of a variant of bpf/bench_floors.c) beside the built-in ones, interleaved on the same maps; writes only bench/results/ab-*.json")
	natConns := flag.Int("nat-conns", 20000, "NAT connections whose every packet is timed, over 10000 client ports beside 30000 other sessions (0 for none)")
	natConnsOnly := flag.Bool("nat-conns-only", false, "run the NAT connection-life case alone and print it")
	flag.Parse()
	policyFile := policyPlotPath(*png)

	if *against != "" {
		runAB(*against, *out, *backends, uint32(*repeat), *rounds)
		return
	}
	runPolicy := func(r *report) {
		fmt.Println("LB program with deny lists and source ranges, the deny table against an LPM trie ...")
		r.PolicyRepeat, r.PolicyRounds = uint32(*policyRepeat), *policyRounds
		p, err := lbharness.RunPolicy(lbharness.PolicyConfig{Sizes: lbharness.DefaultPolicySizes, Repeat: r.PolicyRepeat, Rounds: r.PolicyRounds})
		if err != nil {
			fail(fmt.Errorf("policy: %w", err))
		}
		r.Policy = &p
	}
	runNATConns := func(r *report) {
		fmt.Println("NAT connections, every packet timed ...")
		res, err := lbharness.RunNATConns(lbharness.NATConnConfig{Backends: *backends, Sessions: 30000, Ports: 10000, Conns: *natConns})
		if err != nil {
			fail(fmt.Errorf("NAT connections: %w", err))
		}
		r.NATConns = res
	}
	if *natConnsOnly {
		r := report{runInfo: thisRun()}
		runNATConns(&r)
		printNATConns(r)
		return
	}
	if *policyOnly {
		r := report{runInfo: thisRun()}
		runPolicy(&r)
		printPolicy(r)
		writePolicy(r, *out, *doc, policyFile)
		return
	}

	res, err := lbharness.RunBenchmark(lbharness.BenchConfig{Backends: *backends, Repeat: uint32(*repeat), Rounds: *rounds, NATSessions: *natSessions})
	if err != nil {
		fmt.Fprintln(os.Stderr, "lbbench:", err)
		os.Exit(1)
	}
	r := report{
		runInfo: thisRun(), Backends: *backends, Repeat: uint32(*repeat), Rounds: *rounds, NATSessions: *natSessions, Results: res, Target: 1.3,
	}
	by := map[string]lbharness.BenchResult{}
	for _, x := range res {
		by[x.Name] = x
	}
	r.RatioNet = by["bench_lb"].NetNs / by["floor_parse_encap"].NetNs
	r.RatioRaw = by["bench_lb"].MinNs / by["floor_parse_encap"].MinNs
	r.RatioMedian = by["bench_lb"].MedianNs / by["floor_parse_encap"].MedianNs
	r.RatioPaired = lbharness.PairedRatio(by["bench_lb"].RoundsNs, by["floor_parse_encap"].RoundsNs)
	if fib, ok := by["floor_parse_encap_fib"]; ok {
		r.RatioFib = by["bench_lb"].MinNs / fib.MinNs
	}
	r.IPv6 = ipv6Report{OverIPv4: ratioOf(by["bench_lb6"], by["bench_lb"]), OverFloor: ratioOf(by["bench_lb6"], by["floor_parse_encap6"]), Target: 1.15}

	back, err := lbharness.RunDecapBenchmark(lbharness.DecapBenchConfig{Repeat: uint32(*repeat), Rounds: *rounds})
	if err != nil {
		fmt.Fprintln(os.Stderr, "lbbench: backend program:", err)
		os.Exit(1)
	}
	r.Backend = backendReport{Results: back, OverGUE: map[string]ratio{}}
	var gue lbharness.DecapBenchResult
	for _, x := range back {
		if x.Name == caseGUE {
			gue = x
		}
	}
	for _, x := range back {
		if x.Name != caseGUE && strings.HasPrefix(x.Name, caseGUE+"_") {
			r.Backend.OverGUE[x.Name] = ratio{Raw: x.MinNs / gue.MinNs, Median: x.MedianNs / gue.MedianNs, Net: x.NetNs / gue.NetNs}
		}
	}

	if *ablate != "" {
		fmt.Println("LB path with one part taken out at a time (" + *ablate + ") ...")
		if r.Ablations, err = runAblations(*ablate, *bpfDir, lbharness.BenchConfig{Backends: *backends, Repeat: uint32(*repeat), Rounds: *rounds}); err != nil {
			fmt.Fprintln(os.Stderr, "lbbench: ablations:", err)
			os.Exit(1)
		}
	}

	if *matrix {
		fmt.Println("LB program matrix: TCP and UDP, 1/16/1024 backends, 1/100/10000 services, the miss path ...")
		r.MatrixRepeat, r.MatrixRounds = uint32(*matrixRepeat), *matrixRounds
		if r.Matrix, err = lbharness.RunMatrix(lbharness.MatrixConfig{Cases: lbharness.DefaultMatrix(), Repeat: r.MatrixRepeat, Rounds: r.MatrixRounds}); err != nil {
			fmt.Fprintln(os.Stderr, "lbbench: matrix:", err)
			os.Exit(1)
		}
	}

	if *policy {
		runPolicy(&r)
	}
	if *natConns > 0 {
		runNATConns(&r)
	}

	fmt.Printf("kernel %s, %s, %d backends, %d rounds x %d runs\n", r.Kernel, r.CPU, r.Backends, r.Rounds, r.Repeat)
	fmt.Printf("%-21s %8s %10s %8s  %s\n", "program", "min ns", "median ns", "net ns", "what")
	for _, x := range res {
		fmt.Printf("%-21s %8.1f %10.1f %8.1f  %s\n", x.Name, x.MinNs, x.MedianNs, x.NetNs, x.Description)
	}
	fmt.Printf("full LB / parse+encap floor: %.2fx (best rounds), %.2fx (medians), %.2fx (paired rounds), %.2fx net of the harness; target <= %.2fx; / floor with a route lookup: %.2fx\n",
		r.RatioRaw, r.RatioMedian, r.RatioPaired, r.RatioNet, r.Target, r.RatioFib)
	fmt.Printf("IPv6 hit path / IPv4 hit path: %.2fx (best rounds), %.2fx (medians), %.2fx (paired rounds); target <= %.2fx; / its own floor (floor_parse_encap6): %.2fx (best rounds)\n",
		r.IPv6.OverIPv4.Raw, r.IPv6.OverIPv4.Median, r.IPv6.OverIPv4.Paired, r.IPv6.Target, r.IPv6.OverFloor.Raw)
	if f, rev := by["bench_lb_nat_fwd"], by["bench_lb_nat_rev"]; f.MinNs > 0 {
		fmt.Printf("NAT session hit: client to backend %.1f ns, backend to client %.1f ns (best rounds; %.2fx and %.2fx the DSR path, paired)\n",
			f.MinNs, rev.MinNs, lbharness.PairedRatio(f.RoundsNs, by["bench_lb"].RoundsNs), lbharness.PairedRatio(rev.RoundsNs, by["bench_lb"].RoundsNs))
	}
	if line := r.natFullLine(); line != "" {
		fmt.Println(line)
	}
	printNATConns(r)
	fmt.Printf("\nbackend program (xlb_decap)\n%-24s %8s %10s %8s  %s\n", "case", "min ns", "median ns", "net ns", "what")
	for _, x := range back {
		fmt.Printf("%-24s %8.1f %10.1f %8.1f  %s\n", x.Name, x.MinNs, x.MedianNs, x.NetNs, x.Description)
	}
	for _, name := range []string{caseSocket, caseChain} {
		q := r.Backend.OverGUE[name]
		fmt.Printf("%s / %s: %.2fx (best rounds), %.2fx (medians), %.2fx net of the harness\n", name, caseGUE, q.Raw, q.Median, q.Net)
	}

	if len(r.Matrix) > 0 {
		fmt.Printf("\nLB program matrix (%d rounds x %d runs per case)\n%-44s %8s %8s %7s %7s %8s %7s\n", r.MatrixRounds, r.MatrixRepeat, "case", "LB ns", "floor ns", "ratio", "paired", "Mpps", "probes")
		for _, m := range r.Matrix {
			fmt.Printf("%-44s %8.1f %8.1f %6.2fx %6.2fx %8.1f %7d\n", m.MatrixCase.String(), m.LB.MinNs, m.Floor.MinNs, m.Ratio, m.Paired, m.Mpps, m.Probes)
		}
	}

	if r.Policy != nil {
		printPolicy(r)
	}

	name, err := benchutil.WriteJSON(*out, "lb", time.Now().UTC().Format(benchutil.StampLayout), r)
	if err != nil {
		fail(err)
	}
	fmt.Println("wrote", name)
	if *doc != "" && r.Policy != nil {
		if err := benchutil.RewriteDoc(*doc, policyBegin, policyEnd, policySection(r, filepath.Base(name), policyFile, *doc)); err != nil {
			fail(err)
		}
	}
	if r.Policy != nil {
		writePolicyPlot(policyFile, r)
	}
	if *doc != "" {
		if err := rewriteDoc(*doc, r, filepath.Base(name)); err != nil {
			fail(err)
		}
		if err := benchutil.RewriteDoc(*doc, backendBegin, backendEnd, backendSection(r, filepath.Base(name))); err != nil {
			fail(err)
		}
		if len(r.Ablations) > 0 {
			if err := benchutil.RewriteDoc(*doc, ablateBegin, ablateEnd, ablateSection(r, filepath.Base(name))); err != nil {
				fail(err)
			}
		}
		if len(r.Matrix) > 0 {
			if err := benchutil.RewriteDoc(*doc, matrixBegin, matrixEnd, matrixSection(r, filepath.Base(name), *png, *doc)); err != nil {
				fail(err)
			}
		}
		fmt.Println("updated", *doc)
	}
	if *png != "" && len(r.Matrix) > 0 {
		if err := matrixPlot(*png, r); err != nil {
			fail(err)
		}
		fmt.Println("wrote", *png)
	}
	if *svg != "" {
		if err := os.MkdirAll(filepath.Dir(*svg), 0o755); err != nil {
			fail(err)
		}
		if err := os.WriteFile(*svg, []byte(plot(r)), 0o644); err != nil {
			fail(err)
		}
		fmt.Println("wrote", *svg)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "lbbench:", err)
	os.Exit(1)
}

func kernel() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// plot draws a horizontal bar chart of the best-round cost per packet:
// the harness share in grey, what each program adds in blue.
func plot(r report) string {
	const w, barH, left, right = 760, 34, 170, 230
	h := 70 + barH*len(r.Results)
	maxV := 0.0
	for _, x := range r.Results {
		maxV = max(maxV, x.MinNs)
	}
	scale := float64(w-left-right) / maxV
	harness := r.Results[0].MinNs
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="13">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="10" y="20" font-size="15">xlb LB program, ns per packet (BPF_PROG_TEST_RUN, best of %d rounds x %d)</text>`+"\n", r.Rounds, r.Repeat)
	fmt.Fprintf(&b, `<text x="10" y="40" fill="#555">%s, kernel %s; full path / encap floor = %.2fx (medians %.2fx); grey: harness</text>`+"\n", r.CPU, r.Kernel, r.RatioRaw, r.RatioMedian)
	for i, x := range r.Results {
		y := 55 + i*barH
		fmt.Fprintf(&b, `<text x="10" y="%d">%s</text>`+"\n", y+18, x.Name)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="#bbb"/>`+"\n", left, y+4, harness*scale, barH-10)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#3a7bd5"/>`+"\n", float64(left)+harness*scale, y+4, max(x.MinNs-harness, 0)*scale, barH-10)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d">%.0f ns (+%.0f; median %.0f)</text>`+"\n", float64(left)+x.MinNs*scale+6, y+18, x.MinNs, x.NetNs, x.MedianNs)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

const (
	docBegin = "<!-- lbbench:begin (generated by `make bench`; do not edit by hand) -->"
	docEnd   = "<!-- lbbench:end -->"
)

// rewriteDoc replaces the generated section of the benchmark document
// with this run's table.
func rewriteDoc(path string, r report, jsonName string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(b)
	i, j := strings.Index(s, docBegin), strings.Index(s, docEnd)
	if i < 0 || j < i {
		return fmt.Errorf("%s: no %q ... %q section to rewrite", path, docBegin, docEnd)
	}
	var t strings.Builder
	fmt.Fprintf(&t, "%s\n\n%s; %d backends, %d rounds of %d runs, interleaved. Raw data: `bench/results/%s`.\n\n",
		docBegin, r.docLine(), r.Backends, r.Rounds, r.Repeat, jsonName)
	t.WriteString("| program | best round (ns/packet) | median (ns/packet) | net of harness (ns) | what it does |\n|---|---:|---:|---:|---|\n")
	for _, x := range r.Results {
		fmt.Fprintf(&t, "| `%s` | %.0f | %.0f | %.0f | %s |\n", x.Name, x.MinNs, x.MedianNs, x.NetNs, x.Description)
	}
	verdict := "meets"
	if r.RatioRaw > r.Target {
		verdict = "misses"
	}
	fmt.Fprintf(&t, "\nFull LB path / parse-and-encapsulate floor: **%.2fx** on the best rounds (%.2fx on medians, %.2fx as the median of each round's ratio; %.2fx counting only what each program adds to the harness). Target %.2fx: this run %s it on best rounds. Against floor 3, which looks the route up for every packet as the LB program would without its next-hop cache: %.2fx.\n",
		r.RatioRaw, r.RatioMedian, r.RatioPaired, r.RatioNet, r.Target, verdict, r.RatioFib)
	if q := r.IPv6.OverIPv4; q.Raw > 0 {
		verdict6 := "meets"
		if q.Raw > r.IPv6.Target {
			verdict6 = "misses"
		}
		fmt.Fprintf(&t, "\nIPv6 hit path (`bench_lb6`, IPv6-in-IPv6) / IPv4 hit path (`bench_lb`): **%.2fx** on the best rounds (%.2fx on medians, %.2fx paired). Target %.2fx: this run %s it on best rounds. Against its own floor (`floor_parse_encap6`): %.2fx.\n",
			q.Raw, q.Median, q.Paired, r.IPv6.Target, verdict6, r.IPv6.OverFloor.Raw)
	}
	if line := r.natFullLine(); line != "" {
		fmt.Fprintf(&t, "\n%s\n", line)
	}
	if tab := r.natConnsTable(); tab != "" {
		fmt.Fprintf(&t, "\n%s", tab)
	}
	fmt.Fprintf(&t, "\n%s", docEnd)
	s = s[:i] + t.String() + s[j+len(docEnd):]
	return os.WriteFile(path, []byte(s), 0o644)
}

const (
	backendBegin = "<!-- lbbench-backend:begin (generated by `make bench`; do not edit by hand) -->"
	backendEnd   = "<!-- lbbench-backend:end -->"
)

// backendSection is the generated section of the benchmark document on
// the backend program.
func backendSection(r report, jsonName string) string {
	var t strings.Builder
	fmt.Fprintf(&t, "%s\n\n%s; %d rounds of %d runs, interleaved. Raw data: `bench/results/%s` (`backend`).\n\n",
		backendBegin, r.docLine(), r.Rounds, r.Repeat, jsonName)
	t.WriteString("| case | best round (ns/packet) | median (ns/packet) | net of harness (ns) | / `gue`, best rounds | verdict | what it does |\n|---|---:|---:|---:|---:|---|---|\n")
	for _, x := range r.Backend.Results {
		over := ""
		if q, ok := r.Backend.OverGUE[x.Name]; ok {
			over = fmt.Sprintf("%.2fx", q.Raw)
		}
		fmt.Fprintf(&t, "| `%s` | %.0f | %.0f | %.0f | %s | %s | %s |\n", x.Name, x.MinNs, x.MedianNs, x.NetNs, over, x.Verdict, x.Description)
	}
	s, c := r.Backend.OverGUE[caseSocket], r.Backend.OverGUE[caseChain]
	fmt.Fprintf(&t, "\nCost of the socket lookup, over plain GUE: delivered to a local connection (`%s`) **%.2fx** on the best rounds (%.2fx on medians; %.2fx counting only what each adds to the harness); missed and chained to the previous owner (`%s`, with its FIB lookup) **%.2fx** (%.2fx; %.2fx).\n\n%s",
		caseSocket, s.Raw, s.Median, s.Net, caseChain, c.Raw, c.Median, c.Net, backendEnd)
	return t.String()
}

// natFullLine says what the NAT session hit costs in a full table against
// one hot session, each net of its own harness ("" without the
// full-table cases).
func (r report) natFullLine() string {
	by := map[string]lbharness.BenchResult{}
	for _, x := range r.Results {
		by[x.Name] = x
	}
	ff, rf := by["bench_lb_nat_fwd_full"], by["bench_lb_nat_rev_full"]
	if ff.MinNs == 0 || rf.MinNs == 0 {
		return ""
	}
	fh, rh := by["bench_lb_nat_fwd"], by["bench_lb_nat_rev"]
	return fmt.Sprintf("NAT session hit, one hot session / a full table of %d established sessions, another one every run (net of each case's harness, best rounds): client to backend %.0f / **%.0f ns**, backend to client %.0f / **%.0f ns**; paired rounds, the full table less the hot session: %.0f and %.0f ns, of which %.0f ns is the full-table harness's writing the next session into the packet (`wrap_pick` less `wrap_only`).",
		r.NATSessions, fh.NetNs, ff.NetNs, rh.NetNs, rf.NetNs,
		lbharness.PairedDiff(ff.RoundsNs, fh.RoundsNs), lbharness.PairedDiff(rf.RoundsNs, rh.RoundsNs),
		lbharness.PairedDiff(by["wrap_pick"].RoundsNs, by["wrap_only"].RoundsNs))
}

// natConnsTable is the NAT connection-life case as a markdown table
// ("" if it did not run).
func (r report) natConnsTable() string {
	if len(r.NATConns) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("A NAT connection's life, packet by packet (`-nat-conns`: one test run per packet, so that each meets caches as cold as a node's packets do; net of the harness; a port's next connection, whose SYN reopens the closing session of its last in place, beside 30 000 other established sessions):\n\n| packet | what it does to the session | median ns | p90 ns |\n|---|---|---:|---:|\n")
	what := map[string]string{
		"connection": "**the whole connection**",
		"syn_first":  "a port's first SYN (no session to reopen: a port claimed, both embryonic entries written)",
	}
	for _, s := range lbharness.NATConnSteps {
		what[s.Name] = s.Session
	}
	for _, x := range r.NATConns {
		fmt.Fprintf(&b, "| %s | %s | %.0f | %.0f |\n", x.Step, what[x.Step], x.MedianNs, x.P90Ns)
	}
	return b.String()
}

// printNATConns prints the NAT connection-life case, if it ran.
func printNATConns(r report) {
	if len(r.NATConns) == 0 {
		return
	}
	fmt.Printf("\nNAT connection, every packet one test run, net of the harness\n%-12s %9s %9s %9s\n", "step", "median ns", "p90 ns", "mean ns")
	for _, x := range r.NATConns {
		fmt.Printf("%-12s %9.0f %9.0f %9.0f\n", x.Step, x.MedianNs, x.P90Ns, x.MeanNs)
	}
}
