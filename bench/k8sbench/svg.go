package main

import (
	"fmt"
	"math"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
)

// layout sizes the plot's panels.
var layout = benchutil.Layout{PanelW: 400, PanelH: 340, Left: 52, Below: 100}

// line is one series of (x, y) points; step draws it as a CDF does.
type line struct {
	label string
	color string
	pts   [][2]float64
	step  bool
}

// vmark is a labelled vertical line; band, if wider than 0, shades from
// at to at + band.
type vmark struct {
	label string
	color string
	at    float64
	band  float64
}

// chart is one panel with linear axes.
type chart struct {
	title, xlabel, ylabel string
	xmax, ymax            float64
	lines                 []line
	marks                 []vmark
}

// draw draws the chart into its plot area.
func (c chart) draw(a *benchutil.Panel) {
	xmax, xstep := niceAxis(c.xmax)
	ymax, ystep := niceAxis(c.ymax)
	x := func(v float64) float64 { return a.Left + math.Min(math.Max(v, 0), xmax)/xmax*a.Width }
	y := func(v float64) float64 { return a.Top + (1-math.Min(math.Max(v, 0), ymax)/ymax)*a.Height }

	for _, m := range c.marks {
		if m.band > 0 {
			a.Printf(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="0.12"/>`+"\n", x(m.at), a.Top, x(m.at+m.band)-x(m.at), a.Height, m.color)
		}
	}
	for v := 0.0; v <= ymax*1.0001; v += ystep {
		a.HGrid(y(v), tick(v))
	}
	for v := 0.0; v <= xmax*1.0001; v += xstep {
		a.VGrid(x(v), tick(v))
	}
	a.XLabel(c.xlabel)
	a.YLabel(c.ylabel)
	for _, m := range c.marks {
		if m.band == 0 {
			a.Marker(x(m.at), m.color)
		}
	}
	for _, l := range c.lines {
		a.Curve(l.pts, x, y, l.step, l.color)
	}

	// Legend below the axis label: lines, then marks.
	var items []benchutil.LegendItem
	for _, l := range c.lines {
		items = append(items, benchutil.LegendItem{Label: l.label, Color: l.color})
	}
	for _, m := range c.marks {
		it := benchutil.LegendItem{Label: m.label, Color: m.color, Swatch: benchutil.SwatchDashed}
		if m.band > 0 {
			it.Swatch = benchutil.SwatchBand
		}
		items = append(items, it)
	}
	a.Legend(2, items)
}

// niceAxis rounds top up to 1, 2 or 5 × a power of ten steps, at most
// eight of them.
func niceAxis(top float64) (hi, step float64) {
	if !(top > 0) || math.IsInf(top, 0) {
		return 1, 0.25
	}
	mag := math.Pow(10, math.Floor(math.Log10(top/8)))
	for _, f := range []float64{1, 2, 2.5, 5, 10} {
		step = f * mag
		if top/step <= 8 {
			break
		}
	}
	return math.Ceil(top/step-1e-9) * step, step
}

func tick(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%g", benchutil.Round3(v))
}

// cpuRate turns cumulative CPU seconds into cores over windows of at
// least window seconds: a 10 ms tick is too coarse for shorter ones.
func cpuRate(samples []Sample, window float64) [][2]float64 {
	var out [][2]float64
	if len(samples) == 0 {
		return out
	}
	from := samples[0]
	for _, s := range samples[1:] {
		if dt := s.T - from.T; dt >= window {
			out = append(out, [2]float64{(from.T + s.T) / 2, benchutil.Round3((s.CPUS - from.CPUS) / dt)})
			from = s
		}
	}
	return out
}

// plot draws the latency CDF and the agent's memory and CPU over the run.
func plot(r *Report) string {
	c := r.Changes
	var upd, src []float64
	for _, e := range c.Events {
		upd = append(upd, e.UpdateMs)
		if e.Matched {
			src = append(src, e.WatchMs+e.SourceMs)
		}
	}
	xmax := c.TargetP99Ms
	for _, v := range upd {
		xmax = max(xmax, v)
	}
	cdf := chart{title: "EndpointSlice patch → data plane (CDF)", xlabel: "ms", ylabel: "fraction of changes", xmax: xmax, ymax: 1,
		lines: []line{{label: fmt.Sprintf("→ table swapped (n=%d)", len(upd)), color: "#3a7bd5", pts: benchutil.CDF(upd), step: true}},
		marks: []vmark{{label: fmt.Sprintf("target p99 %s ms", benchutil.FmtMs(c.TargetP99Ms)), color: "#c0392b", at: c.TargetP99Ms}}}
	if len(src) > 0 {
		cdf.lines = append(cdf.lines, line{label: "→ agent took the config", color: "#2e9e5b", pts: benchutil.CDF(src), step: true})
	}

	var tmax, rmax float64
	pts := make([][2]float64, 0, len(r.Samples))
	for _, s := range r.Samples {
		pts = append(pts, [2]float64{s.T, s.RSSMiB})
		tmax, rmax = max(tmax, s.T), max(rmax, s.RSSMiB)
	}
	var marks []vmark
	colors := map[string]string{phaseStart: "#e08a1e", phaseIdle: "#888888", phaseChanges: "#8e44ad"}
	for _, p := range r.Resources {
		marks = append(marks, vmark{label: p.Name, color: colors[p.Name], at: p.FromS, band: max(p.Seconds, 0.001)})
	}
	mem := chart{title: "agent memory (VmRSS)", xlabel: "s since the agent's exec", ylabel: "MiB", xmax: tmax, ymax: rmax * 1.1,
		lines: []line{{label: "RSS", color: "#3a7bd5", pts: pts}}, marks: marks}
	rate := cpuRate(r.Samples, 1)
	var cmax float64
	for _, p := range rate {
		cmax = max(cmax, p[1])
	}
	cpu := chart{title: "agent CPU (utime + stime, 1 s windows)", xlabel: "s since the agent's exec", ylabel: "cores", xmax: tmax, ymax: max(cmax*1.1, 0.1),
		lines: []line{{label: "CPU", color: "#2e9e5b", pts: rate}}, marks: marks}

	panels := []chart{cdf, mem, cpu}
	s := benchutil.NewSVG(layout, len(panels),
		fmt.Sprintf("xlb agent, Kubernetes source: %d Services × %d endpoints on a real API server", r.Setup.Services, r.Setup.Endpoints),
		fmt.Sprintf("%s, kernel %s; p50 %s ms, p99 %s ms; the table swap seen through the pinned maps every %s ms",
			r.Machine.CPU, r.Machine.Kernel, benchutil.FmtMs(c.Update.P50), benchutil.FmtMs(c.Update.P99), benchutil.FmtMs(c.PollMs)))
	for i, p := range panels {
		p.draw(s.Panel(i, p.title))
	}
	return s.String()
}
