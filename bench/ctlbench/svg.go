package main

import (
	"fmt"
	"math"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
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

// layout sizes the plot's panels.
var layout = benchutil.Layout{PanelW: 380, PanelH: 340, Left: 48, Below: 118}

// plotSVG draws the panels side by side under a title and subtitle.
func plotSVG(title, subtitle string, panels []panel) string {
	s := benchutil.NewSVG(layout, len(panels), title, subtitle)
	for i, p := range panels {
		p.draw(s.Panel(i, p.title))
	}
	return s.String()
}

// draw draws the panel into its plot area.
func (p panel) draw(a *benchutil.Panel) {
	lo, hi, ticks := p.axis()
	x := func(v float64) float64 {
		if p.log {
			v = math.Log10(max(v, lo))
			return a.Left + (v-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*a.Width
		}
		return a.Left + (min(v, hi)-lo)/(hi-lo)*a.Width
	}
	y := func(f float64) float64 { return a.Top + (1-f)*a.Height }

	for _, f := range []float64{0, 0.25, 0.5, 0.75, 1} {
		a.HGrid(y(f), fmt.Sprintf("%g", f))
	}
	for _, t := range ticks {
		a.VGrid(x(t), fmt.Sprintf("%g", t))
	}
	a.XLabel("ms" + map[bool]string{true: " (log scale)"}[p.log])
	a.YLabel("fraction of events")

	for _, m := range p.markers {
		a.Marker(x(m.at), m.color)
	}
	for _, s := range p.series {
		a.Curve(benchutil.CDF(s.samples), x, y, true, s.color)
	}

	// Legend below the axis label: series, then markers.
	var items []benchutil.LegendItem
	for _, s := range p.series {
		items = append(items, benchutil.LegendItem{Label: fmt.Sprintf("%s (n=%d)", s.label, len(s.samples)), Color: s.color})
	}
	for _, m := range p.markers {
		items = append(items, benchutil.LegendItem{Label: m.label, Color: m.color, Swatch: benchutil.SwatchDashed})
	}
	a.Legend(1, items)
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
