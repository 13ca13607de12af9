// Command lbbench measures the LB program's cost per packet on a VIP hit
// beside two floors, with BPF_PROG_TEST_RUN, and writes the results as
// JSON (with kernel and CPU) and as a plot. `make bench` runs it.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/internal/dataplane"
)

type report struct {
	Date     string                  `json:"date"`
	Kernel   string                  `json:"kernel"`
	CPU      string                  `json:"cpu"`
	CPUs     int                     `json:"cpus"`
	Go       string                  `json:"go"`
	Backends int                     `json:"backends"`
	Repeat   uint32                  `json:"repeat"`
	Rounds   int                     `json:"rounds"`
	Results  []dataplane.BenchResult `json:"results"`
	// RatioNet is the full LB path over the parse-and-encapsulate floor,
	// both less the harness cost; RatioRaw the same with it.
	RatioNet    float64 `json:"ratio_lb_over_encap_floor_net"`
	RatioRaw    float64 `json:"ratio_lb_over_encap_floor_raw"`
	RatioMedian float64 `json:"ratio_lb_over_encap_floor_median"`
	Target      float64 `json:"target_ratio"`
}

func main() {
	out := flag.String("out", "bench/results", "directory for the JSON results")
	svg := flag.String("svg", "docs/img/bench-lb.svg", "plot to write (\"\" for none)")
	backends := flag.Int("backends", 16, "backends of the benchmarked service")
	repeat := flag.Uint("repeat", 300_000, "repetitions per round")
	rounds := flag.Int("rounds", 61, "rounds, interleaved over the programs")
	doc := flag.String("doc", "", "markdown file whose generated results section to rewrite (\"\" for none)")
	flag.Parse()

	res, err := dataplane.RunBenchmark(dataplane.BenchConfig{Backends: *backends, Repeat: uint32(*repeat), Rounds: *rounds})
	if err != nil {
		fmt.Fprintln(os.Stderr, "lbbench:", err)
		os.Exit(1)
	}
	r := report{
		Date: time.Now().UTC().Format(time.RFC3339), Kernel: kernel(), CPU: cpuModel(), CPUs: runtime.NumCPU(),
		Go: runtime.Version(), Backends: *backends, Repeat: uint32(*repeat), Rounds: *rounds, Results: res, Target: 1.3,
	}
	by := map[string]dataplane.BenchResult{}
	for _, x := range res {
		by[x.Name] = x
	}
	r.RatioNet = by["bench_lb"].NetNs / by["floor_parse_encap"].NetNs
	r.RatioRaw = by["bench_lb"].MinNs / by["floor_parse_encap"].MinNs
	r.RatioMedian = by["bench_lb"].MedianNs / by["floor_parse_encap"].MedianNs

	fmt.Printf("kernel %s, %s, %d backends, %d rounds x %d runs\n", r.Kernel, r.CPU, r.Backends, r.Rounds, r.Repeat)
	fmt.Printf("%-18s %8s %10s %8s  %s\n", "program", "min ns", "median ns", "net ns", "what")
	for _, x := range res {
		fmt.Printf("%-18s %8.1f %10.1f %8.1f  %s\n", x.Name, x.MinNs, x.MedianNs, x.NetNs, x.Description)
	}
	fmt.Printf("full LB / parse+encap floor: %.2fx (best rounds), %.2fx (medians), %.2fx net of the harness; target <= %.2fx\n",
		r.RatioRaw, r.RatioMedian, r.RatioNet, r.Target)

	if err := os.MkdirAll(*out, 0o755); err != nil {
		fail(err)
	}
	data, _ := json.MarshalIndent(r, "", "  ")
	name := filepath.Join(*out, "lb-"+time.Now().UTC().Format("20060102-150405")+".json")
	for _, p := range []string{name, filepath.Join(*out, "lb-latest.json")} {
		if err := os.WriteFile(p, append(data, '\n'), 0o644); err != nil {
			fail(err)
		}
	}
	fmt.Println("wrote", name)
	if *doc != "" {
		if err := rewriteDoc(*doc, r, filepath.Base(name)); err != nil {
			fail(err)
		}
		fmt.Println("updated", *doc)
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
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#3a7bd5"/>`+"\n", float64(left)+harness*scale, y+4, max(x.NetNs, 0)*scale, barH-10)
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
	fmt.Fprintf(&t, "%s\n\nRun of %s on %s (%d CPUs), kernel %s, %s; %d backends, %d rounds of %d runs, interleaved. Raw data: `bench/results/%s`.\n\n",
		docBegin, r.Date, r.CPU, r.CPUs, r.Kernel, r.Go, r.Backends, r.Rounds, r.Repeat, jsonName)
	t.WriteString("| program | best round (ns/packet) | median (ns/packet) | net of harness (ns) | what it does |\n|---|---:|---:|---:|---|\n")
	for _, x := range r.Results {
		fmt.Fprintf(&t, "| `%s` | %.0f | %.0f | %.0f | %s |\n", x.Name, x.MinNs, x.MedianNs, x.NetNs, x.Description)
	}
	verdict := "meets"
	if r.RatioRaw > r.Target {
		verdict = "misses"
	}
	fmt.Fprintf(&t, "\nFull LB path / parse-and-encapsulate floor: **%.2fx** on the best rounds (%.2fx on medians; %.2fx counting only what each program adds to the harness). Target %.2fx: this run %s it on best rounds.\n\n%s",
		r.RatioRaw, r.RatioMedian, r.RatioNet, r.Target, verdict, docEnd)
	s = s[:i] + t.String() + s[j+len(docEnd):]
	return os.WriteFile(path, []byte(s), 0o644)
}
