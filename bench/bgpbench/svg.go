package main

import (
	"fmt"
	"math"
	"strings"
)

// The plots are plain SVG in the style of the other benchmark plots:
// white ground, sans-serif, grey notes; panels side by side.
const (
	panelW    = 400 // one panel, margins included
	panelH    = 360
	plotTop   = 58 // above the panels: title and subtitle
	plotLeft  = 52 // inside a panel: room for the y axis labels
	plotRight = 16
	plotTitle = 28  // inside a panel: room for its title
	plotBelow = 118 // below the plot area: x labels and legend
)

// logAxis maps milliseconds to x on a log10 scale from lo to hi.
type logAxis struct {
	lo, hi      float64 // milliseconds, powers of ten
	left, width float64 // pixels
}

func (a logAxis) x(v float64) float64 {
	v = math.Min(math.Max(v, a.lo), a.hi)
	return a.left + (math.Log10(v)-math.Log10(a.lo))/(math.Log10(a.hi)-math.Log10(a.lo))*a.width
}

// decades returns the powers of ten that enclose samples (at least one
// decade), for a log axis.
func decades(samples []float64) (lo, hi float64) {
	lo, hi = math.Inf(1), 0
	for _, v := range samples {
		if v > 0 {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	if hi == 0 {
		return 1, 10
	}
	lo = math.Pow(10, math.Floor(math.Log10(lo)))
	hi = math.Pow(10, math.Ceil(math.Log10(hi)))
	if hi <= lo {
		hi = lo * 10
	}
	return lo, hi
}

// binsPerDecade is the resolution of the histograms.
const binsPerDecade = 10

// histogram counts samples into binsPerDecade log-spaced bins per decade
// from lo to hi; a sample at or above hi goes into the last bin.
func histogram(samples []float64, lo, hi float64) []int {
	n := int(math.Round(math.Log10(hi/lo))) * binsPerDecade
	counts := make([]int, n)
	for _, v := range samples {
		if v <= 0 {
			continue
		}
		i := int(math.Floor((math.Log10(v) - math.Log10(lo)) * binsPerDecade))
		counts[min(max(i, 0), n-1)]++
	}
	return counts
}

// svgDoc collects an SVG document.
type svgDoc struct {
	b    strings.Builder
	w, h int
}

func newSVG(title, subtitle string, panels int) *svgDoc {
	d := &svgDoc{w: panelW*panels + 10, h: plotTop + panelH}
	d.f(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", d.w, d.h)
	d.f(`<rect width="%d" height="%d" fill="white"/>`+"\n", d.w, d.h)
	d.f(`<text x="10" y="20" font-size="15">%s</text>`+"\n", esc(title))
	d.f(`<text x="10" y="40" fill="#555">%s</text>`+"\n", esc(subtitle))
	return d
}

func (d *svgDoc) f(format string, args ...any) { fmt.Fprintf(&d.b, format, args...) }

func (d *svgDoc) String() string { return d.b.String() + "</svg>\n" }

// frame is the plot area of panel k.
type frame struct {
	x0, y0                   int     // the panel's top left corner
	left, top, width, height float64 // the plot area
}

func (d *svgDoc) panel(k int, title string) frame {
	x0, y0 := 10+k*panelW, plotTop
	d.f(`<text x="%d" y="%d" font-size="13">%s</text>`+"\n", x0, y0+14, esc(title))
	return frame{x0: x0, y0: y0, left: float64(x0 + plotLeft), top: float64(y0 + plotTitle),
		width: float64(panelW - plotLeft - plotRight - 10), height: float64(panelH - plotTitle - plotBelow)}
}

// logTicks draws the x axis of a log axis: a grid line and label per
// decade, and the axis label.
func (d *svgDoc) logTicks(fr frame, a logAxis, label string) {
	for t := a.lo; t <= a.hi*1.0001; t *= 10 {
		d.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", a.x(t), fr.top, a.x(t), fr.top+fr.height)
		d.f(`<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%s</text>`+"\n", a.x(t), fr.top+fr.height+15, msLabel(t))
	}
	d.f(`<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%s</text>`+"\n", fr.left+fr.width/2, fr.top+fr.height+30, esc(label))
}

// marker draws a dashed vertical line at x.
func (d *svgDoc) marker(fr frame, x float64, color string) {
	d.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="4 3"/>`+"\n", x, fr.top, x, fr.top+fr.height, color)
}

// legend writes the legend items under the plot area.
func (d *svgDoc) legend(fr frame, items []legendItem) {
	ly := fr.top + fr.height + 48
	for i, it := range items {
		lx, yy := fr.left+float64(i%2)*(fr.width/2), ly+float64(i/2)*16
		if it.dashed {
			d.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2" stroke-dasharray="4 3"/>`+"\n", lx, yy-4, lx+18, yy-4, it.color)
		} else {
			d.f(`<rect x="%.1f" y="%.1f" width="18" height="9" fill="%s"/>`+"\n", lx, yy-9, it.color)
		}
		d.f(`<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+22, yy, esc(it.label))
	}
}

type legendItem struct {
	label, color string
	dashed       bool
}

// yGrid draws horizontal grid lines and labels for a linear y axis from
// 0 to top, with the axis label.
func (d *svgDoc) yGrid(fr frame, top float64, steps int, label string) {
	for i := 0; i <= steps; i++ {
		v := top * float64(i) / float64(steps)
		y := fr.top + fr.height - fr.height*float64(i)/float64(steps)
		d.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", fr.left, y, fr.left+fr.width, y)
		d.f(`<text x="%.1f" y="%.1f" text-anchor="end" fill="#555">%s</text>`+"\n", fr.left-4, y+4, shortNum(v))
	}
	cy := fr.top + fr.height/2
	d.f(`<text x="%d" y="%.1f" fill="#555" transform="rotate(-90 %d %.1f)" text-anchor="middle">%s</text>`+"\n", fr.x0+10, cy, fr.x0+10, cy, esc(label))
}

// niceTop rounds v up to a round axis maximum and says into how many
// steps to divide it.
func niceTop(v float64) (float64, int) {
	if v <= 0 {
		return 1, 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []struct {
		f     float64
		steps int
	}{{1, 5}, {1.5, 3}, {2, 4}, {2.5, 5}, {3, 3}, {4, 4}, {5, 5}, {6, 3}, {8, 4}, {10, 5}} {
		if m.f*p >= v {
			return m.f * p, m.steps
		}
	}
	return 10 * p, 5
}

// msLabel writes a millisecond value for an axis: ms below a second,
// seconds above.
func msLabel(v float64) string {
	if v >= 1000 {
		return shortNum(v/1000) + " s"
	}
	return shortNum(v) + " ms"
}

func shortNum(v float64) string {
	switch {
	case v >= 10000:
		return fmt.Sprintf("%.0fk", v/1000)
	case v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%g", math.Round(v*100)/100)
}

// esc escapes text for SVG.
func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
