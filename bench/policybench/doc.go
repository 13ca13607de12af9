package main

import (
	"fmt"
	"math"
	"strings"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
	"github.com/xlbproject/xlb/bench/internal/pngplot"
)

// variantName is a variant as the document and the plot name it.
var variantName = map[string]string{
	vXLB:      "xlb deny list (XDP)",
	vIPTNone:  "iptables, no rule matches",
	vIPTFirst: "iptables, first rule matches",
	vNFTSet:   "nftables set",
}

// find returns variant v's run with n rules, false if there is none.
func (r *Report) find(v string, n int) (Run, bool) {
	for _, x := range r.Runs {
		if x.Variant == v && x.Rules == n {
			return x, true
		}
	}
	return Run{}, false
}

// change is the relative change of a figure from a to b, in percent.
func change(a, b float64) float64 {
	if a == 0 {
		return math.NaN()
	}
	return (b - a) / a * 100
}

// trend says, for variant v, how throughput and latency at n rules
// compare with no rules.
func (r *Report) trend(v string, n int) (tput, lat float64, ok bool) {
	base, ok1 := r.find(v, 0)
	x, ok2 := r.find(v, n)
	if !ok1 || !ok2 {
		return 0, 0, false
	}
	return change(base.Gbps, x.Gbps), change(base.Latency.P50, x.Latency.P50), true
}

// markdown is the document section.
func markdown(r *Report, jsonPath, png, doc string) string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "%s\n\n`%s` (as root), run of %s on %s (%d CPUs), kernel %s, %s; %.0f s in all. Raw data, every command and rule file: `bench/results/%s`.\n\n",
		docBegin, r.Command, r.Date, m.CPU, m.CPUs, m.Kernel, m.Go, r.Seconds, baseName(jsonPath))
	b.WriteString("One client, the router, one node and one backend (`xlb lab`, static router), the client's checksums and segmentation in software as on a real wire (1500-byte segments). ")
	fmt.Fprintf(&b, "Throughput: an iperf3 TCP stream for %d s after %d s of warm-up; latency: %d HTTP requests of ~100 bytes, answered with ~200, one after another on one connection (the lab server), each timed. ",
		r.Settings.StreamSeconds, r.Settings.OmitSeconds, r.Settings.Requests)
	b.WriteString("Every variant carries the client's packets through the node once, and the replies straight from the backend to the client:\n\n")
	for _, v := range r.Variants {
		fmt.Fprintf(&b, "- **%s**: %s.\n", variantName[v.Key], v.How)
	}
	b.WriteString("\n| rules |")
	for _, v := range variantOrder {
		fmt.Fprintf(&b, " %s: Gbit/s | p50 latency (µs) |", variantName[v])
	}
	b.WriteString("\n|---:|")
	for range variantOrder {
		b.WriteString("---:|---:|")
	}
	b.WriteString("\n")
	for _, n := range r.Settings.Counts {
		fmt.Fprintf(&b, "| %d |", n)
		for _, v := range variantOrder {
			x, ok := r.find(v, n)
			if !ok {
				b.WriteString(" – | – |")
				continue
			}
			fmt.Fprintf(&b, " %.2f | %.0f |", x.Gbps, x.Latency.P50*1000)
		}
		b.WriteString("\n")
	}
	b.WriteString("\nAgainst the same variant with no rules:\n\n| variant | throughput at 200 rules | at 100 000 | p50 latency at 200 | at 100 000 | p99 latency at 100 000 (µs) | installing 100 000 (s) |\n|---|---:|---:|---:|---:|---:|---:|\n")
	last := r.Settings.Counts[len(r.Settings.Counts)-1]
	for _, v := range variantOrder {
		t200, l200, ok200 := r.trend(v, 200)
		tl, ll, okl := r.trend(v, last)
		x, _ := r.find(v, last)
		cell := func(f float64, ok bool) string {
			if !ok || math.IsNaN(f) {
				return "–"
			}
			return fmt.Sprintf("%+.0f %%", f)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %.0f | %.2f |\n", variantName[v], cell(t200, ok200), cell(tl, okl), cell(l200, ok200), cell(ll, okl), x.Latency.P99*1000, x.InstallSeconds)
	}
	if png != "" {
		fmt.Fprintf(&b, "\n![Throughput by rule count](%s)\n\n![Latency by rule count](%s)\n", benchutil.DocLink(doc, png), benchutil.DocLink(doc, latencyPath(png)))
	}
	fmt.Fprintf(&b, "\n%s", docEnd)
	return b.String()
}

func baseName(p string) string {
	if i := strings.LastIndex(p, "/"); i >= 0 {
		return p[i+1:]
	}
	return p
}

// plotX places a rule count on the plot's logarithmic axis: 0 rules at
// 0.5.
func plotX(n int) float64 {
	if n == 0 {
		return 0.5
	}
	return float64(n)
}

// plot draws throughput by rule count, one line per variant, and writes
// a second plot of latency beside it (the name with "-latency").
func plot(r *Report, path string) error {
	var tput, lat []pngplot.Line
	for _, v := range variantOrder {
		t := pngplot.Line{Name: variantName[v]}
		l := pngplot.Line{Name: variantName[v]}
		for _, n := range r.Settings.Counts {
			if x, ok := r.find(v, n); ok {
				t.X, t.Y = append(t.X, plotX(n)), append(t.Y, x.Gbps)
				l.X, l.Y = append(l.X, plotX(n)), append(l.Y, x.Latency.P50*1000)
			}
		}
		tput, lat = append(tput, t), append(lat, l)
	}
	top := 0.0
	for _, l := range tput {
		for _, y := range l.Y {
			top = max(top, y)
		}
	}
	if err := pngplot.Lines(path, "TCP throughput through the node by rule count (0 rules at 0.5)", "rules", "Gbit/s", tput,
		pngplot.Options{LogX: true, YMin: 0, YMax: max(top*1.1, 0.1)}); err != nil {
		return err
	}
	return pngplot.Lines(latencyPath(path), "Request/response latency (p50) by rule count (0 rules at 0.5)", "rules", "µs", lat, pngplot.Options{LogX: true, LogY: true})
}

// latencyPath is the latency plot's file beside the throughput plot's.
func latencyPath(path string) string {
	return strings.TrimSuffix(path, ".png") + "-latency.png"
}

// consoleTable is the run's figures for the terminal.
func consoleTable(r *Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-22s %8s %10s %12s %12s %12s\n", "variant", "rules", "Gbit/s", "p50 µs", "p99 µs", "install s")
	for _, v := range variantOrder {
		for _, n := range r.Settings.Counts {
			if x, ok := r.find(v, n); ok {
				fmt.Fprintf(&b, "%-22s %8d %10.2f %12.0f %12.0f %12.2f\n", v, n, x.Gbps, x.Latency.P50*1000, x.Latency.P99*1000, x.InstallSeconds)
			}
		}
	}
	return b.String()
}
