package main

import (
	"fmt"
	"math"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
)

// layout sizes the plots' panels.
var layout = benchutil.Layout{PanelW: 400, PanelH: 360, Left: 52, Below: 118}

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

// logTicks draws the x axis of a log axis: a grid line and label per
// decade, and the axis label.
func logTicks(fr *benchutil.Panel, a logAxis, label string) {
	for t := a.lo; t <= a.hi*1.0001; t *= 10 {
		fr.VGrid(a.x(t), msLabel(t))
	}
	fr.XLabel(label)
}

// yGrid draws horizontal grid lines and labels for a linear y axis from
// 0 to top, with the axis label.
func yGrid(fr *benchutil.Panel, top float64, steps int, label string) {
	for i := 0; i <= steps; i++ {
		v := top * float64(i) / float64(steps)
		fr.HGrid(fr.Top+fr.Height-fr.Height*float64(i)/float64(steps), shortNum(v))
	}
	fr.YLabel(label)
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
