package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// series is one distribution drawn as an empirical CDF.
type series struct {
	label   string
	color   string
	samples []float64 // milliseconds
}

// marker is a labelled vertical line in a panel.
type marker struct {
	label string
	color string
	at    float64 // milliseconds
}

// panel is one CDF chart: x in milliseconds, linear from 0 or log10.
type panel struct {
	title   string
	log     bool
	series  []series
	markers []marker
}

// Layout of the plot, in pixels.
const (
	svgPanelW = 380 // one panel, margins included
	svgPanelH = 340
	svgTop    = 58 // above the panels: title and subtitle
	svgLeft   = 48 // inside a panel: room for the y axis labels
	svgRight  = 16
	svgPlotT  = 28  // inside a panel: room for its title
	svgPlotB  = 118 // below the plot: x labels and legend
)

// plotSVG draws the panels side by side under a title and subtitle, in
// the plain style of lbbench's chart (white ground, sans-serif, grey
// notes).
func plotSVG(title, subtitle string, panels []panel) string {
	w, h := svgPanelW*len(panels)+10, svgTop+svgPanelH
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="10" y="20" font-size="15">%s</text>`+"\n", esc(title))
	fmt.Fprintf(&b, `<text x="10" y="40" fill="#555">%s</text>`+"\n", esc(subtitle))
	for i, p := range panels {
		p.draw(&b, 10+i*svgPanelW, svgTop)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// draw writes the panel with its top left corner at (x0, y0).
func (p panel) draw(b *strings.Builder, x0, y0 int) {
	pw := float64(svgPanelW - svgLeft - svgRight - 10)
	ph := float64(svgPanelH - svgPlotT - svgPlotB)
	left, top := float64(x0+svgLeft), float64(y0+svgPlotT)
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="13">%s</text>`+"\n", x0, y0+14, esc(p.title))

	lo, hi, ticks := p.axis()
	x := func(v float64) float64 {
		if p.log {
			v = math.Log10(max(v, lo))
			return left + (v-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*pw
		}
		return left + (min(v, hi)-lo)/(hi-lo)*pw
	}
	y := func(f float64) float64 { return top + (1-f)*ph }

	// Grid and axes.
	for _, f := range []float64{0, 0.25, 0.5, 0.75, 1} {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, y(f), left+pw, y(f))
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end" fill="#555">%g</text>`+"\n", left-4, y(f)+4, f)
	}
	for _, t := range ticks {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x(t), top, x(t), top+ph)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%g</text>`+"\n", x(t), top+ph+15, t)
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">ms%s</text>`+"\n", left+pw/2, top+ph+30, map[bool]string{true: " (log scale)"}[p.log])
	fmt.Fprintf(b, `<text x="%d" y="%.1f" fill="#555" transform="rotate(-90 %d %.1f)" text-anchor="middle">fraction of events</text>`+"\n", x0+10, top+ph/2, x0+10, top+ph/2)

	for _, m := range p.markers {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="4 3"/>`+"\n", x(m.at), top, x(m.at), top+ph, m.color)
	}
	for _, s := range p.series {
		pts := cdfPoints(s.samples)
		if len(pts) == 0 {
			continue
		}
		var path strings.Builder
		fmt.Fprintf(&path, "M%.1f %.1f", x(pts[0][0]), y(0))
		for _, pt := range pts {
			// A step: across at the previous level, then up.
			fmt.Fprintf(&path, " H%.1f V%.1f", x(pt[0]), y(pt[1]))
		}
		fmt.Fprintf(b, `<path d="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", path.String(), s.color)
	}

	// Legend below the axis label: series, then markers.
	ly := top + ph + 48
	items := len(p.series) + len(p.markers)
	for i := range items {
		color, label, dash := "", "", ""
		if i < len(p.series) {
			color, label = p.series[i].color, fmt.Sprintf("%s (n=%d)", p.series[i].label, len(p.series[i].samples))
		} else {
			m := p.markers[i-len(p.series)]
			color, label, dash = m.color, m.label, ` stroke-dasharray="4 3"`
		}
		lx, yy := left, ly+float64(i)*16
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`+"\n", lx, yy-4, lx+18, yy-4, color, dash)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+22, yy, esc(label))
	}
}

// axis picks the panel's x range and ticks: for a linear axis 0 to the
// largest sample or marker rounded up to a multiple of 100 ms, for a
// log axis whole decades around the samples.
func (p panel) axis() (lo, hi float64, ticks []float64) {
	top, bottom := 0.0, math.Inf(1)
	for _, s := range p.series {
		for _, v := range s.samples {
			top, bottom = max(top, v), min(bottom, v)
		}
	}
	for _, m := range p.markers {
		top = max(top, m.at)
	}
	if p.log {
		lo = math.Pow(10, math.Floor(math.Log10(max(min(bottom, top), 0.1))))
		hi = math.Pow(10, math.Ceil(math.Log10(max(top, lo*10))))
		if hi <= lo {
			hi = lo * 10
		}
		for t := lo; t <= hi*1.0001; t *= 10 {
			ticks = append(ticks, t)
		}
		return lo, hi, ticks
	}
	hi = math.Max(100, math.Ceil(top/100)*100)
	step := 100.0
	for hi/step > 8 {
		step *= 2
	}
	for t := 0.0; t <= hi; t += step {
		ticks = append(ticks, t)
	}
	return 0, hi, ticks
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

// esc escapes text for SVG.
func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
