package main

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
)

// The plot is plain SVG in the style of the other benchmark plots: white
// ground, sans-serif, grey notes, panels side by side.
const (
	panelW    = 400 // one panel, margins included
	panelH    = 340
	plotTop   = 58 // above the panels: title and subtitle
	plotLeft  = 52 // inside a panel: room for the y axis labels
	plotRight = 16
	plotTitle = 28  // inside a panel: room for its title
	plotBelow = 100 // below the plot area: x labels and legend
)

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

func (c chart) draw(b *strings.Builder, x0, y0 int) {
	pw := float64(panelW - plotLeft - plotRight - 10)
	ph := float64(panelH - plotTitle - plotBelow)
	left, top := float64(x0+plotLeft), float64(y0+plotTitle)
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="13">%s</text>`+"\n", x0, y0+14, esc(c.title))
	xmax, xstep := niceAxis(c.xmax)
	ymax, ystep := niceAxis(c.ymax)
	x := func(v float64) float64 { return left + math.Min(math.Max(v, 0), xmax)/xmax*pw }
	y := func(v float64) float64 { return top + (1-math.Min(math.Max(v, 0), ymax)/ymax)*ph }

	for _, m := range c.marks {
		if m.band > 0 {
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="0.12"/>`+"\n", x(m.at), top, x(m.at+m.band)-x(m.at), ph, m.color)
		}
	}
	for v := 0.0; v <= ymax*1.0001; v += ystep {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, y(v), left+pw, y(v))
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end" fill="#555">%s</text>`+"\n", left-4, y(v)+4, tick(v))
	}
	for v := 0.0; v <= xmax*1.0001; v += xstep {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x(v), top, x(v), top+ph)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%s</text>`+"\n", x(v), top+ph+15, tick(v))
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%s</text>`+"\n", left+pw/2, top+ph+30, esc(c.xlabel))
	fmt.Fprintf(b, `<text x="%d" y="%.1f" fill="#555" transform="rotate(-90 %d %.1f)" text-anchor="middle">%s</text>`+"\n", x0+10, top+ph/2, x0+10, top+ph/2, esc(c.ylabel))
	for _, m := range c.marks {
		if m.band == 0 {
			fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="4 3"/>`+"\n", x(m.at), top, x(m.at), top+ph, m.color)
		}
	}
	for _, l := range c.lines {
		if len(l.pts) == 0 {
			continue
		}
		var path strings.Builder
		if l.step {
			fmt.Fprintf(&path, "M%.1f %.1f", x(l.pts[0][0]), y(0))
			for _, pt := range l.pts {
				fmt.Fprintf(&path, " H%.1f V%.1f", x(pt[0]), y(pt[1]))
			}
		} else {
			for i, pt := range l.pts {
				fmt.Fprintf(&path, "%s%.1f %.1f", map[bool]string{true: "M", false: " L"}[i == 0], x(pt[0]), y(pt[1]))
			}
		}
		fmt.Fprintf(b, `<path d="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", path.String(), l.color)
	}

	// Legend below the axis label: lines, then marks.
	ly := top + ph + 48
	for i := range len(c.lines) + len(c.marks) {
		var color, label, attrs string
		if i < len(c.lines) {
			color, label = c.lines[i].color, c.lines[i].label
		} else {
			m := c.marks[i-len(c.lines)]
			color, label, attrs = m.color, m.label, ` stroke-dasharray="4 3"`
			if m.band > 0 {
				attrs = ` stroke-width="8" stroke-opacity="0.25"`
			}
		}
		lx, yy := left+float64(i%2)*pw/2, ly+float64(i/2)*16
		if attrs == "" || strings.Contains(attrs, "dash") {
			attrs = ` stroke-width="2"` + attrs
		}
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"%s/>`+"\n", lx, yy-4, lx+18, yy-4, color, attrs)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+22, yy, esc(label))
	}
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

// cdfPoints returns the empirical CDF of samples as (value, fraction at
// or below it) points, one per distinct value, ascending.
func cdfPoints(samples []float64) [][2]float64 {
	s := slices.Clone(samples)
	slices.Sort(s)
	var pts [][2]float64
	for i, v := range s {
		f := float64(i+1) / float64(len(s))
		if n := len(pts); n > 0 && pts[n-1][0] == v {
			pts[n-1][1] = f
			continue
		}
		pts = append(pts, [2]float64{v, f})
	}
	return pts
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
		lines: []line{{label: fmt.Sprintf("→ table swapped (n=%d)", len(upd)), color: "#3a7bd5", pts: cdfPoints(upd), step: true}},
		marks: []vmark{{label: fmt.Sprintf("target p99 %s ms", benchutil.FmtMs(c.TargetP99Ms)), color: "#c0392b", at: c.TargetP99Ms}}}
	if len(src) > 0 {
		cdf.lines = append(cdf.lines, line{label: "→ agent took the config", color: "#2e9e5b", pts: cdfPoints(src), step: true})
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
	w, h := panelW*len(panels)+10, plotTop+panelH
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="10" y="20" font-size="15">%s</text>`+"\n",
		esc(fmt.Sprintf("xlb agent, Kubernetes source: %d Services × %d endpoints on a real API server", r.Setup.Services, r.Setup.Endpoints)))
	fmt.Fprintf(&b, `<text x="10" y="40" fill="#555">%s</text>`+"\n",
		esc(fmt.Sprintf("%s, kernel %s; p50 %s ms, p99 %s ms; the table swap seen through the pinned maps every %s ms",
			r.Machine.CPU, r.Machine.Kernel, benchutil.FmtMs(c.Update.P50), benchutil.FmtMs(c.Update.P99), benchutil.FmtMs(c.PollMs))))
	for i, p := range panels {
		p.draw(&b, 10+i*panelW, plotTop)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// esc escapes text for SVG.
func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
