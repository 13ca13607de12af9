// Package pngplot renders the benchmark programs' results as PNG charts:
// grouped bar charts (one bar per series in each group) and XY line charts
// with optional logarithmic axes. It is a thin layer over gonum.org/v1/plot
// that fixes the look (size, fonts, a colour-blind friendly palette, legend
// outside the data area), validates input and writes files atomically.
//
// Series get their colour from their position, so the same series order gives
// the same colours in every chart.
package pngplot

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// DPI is the resolution of the written images; the default 8 x 4.5 in
// chart is 1152 x 648 pixels.
const DPI = 144

// Palette is the Okabe-Ito colour-blind friendly palette. Series i gets
// Palette[i%len(Palette)]; line series also cycle through marker shapes.
var Palette = []color.Color{
	color.RGBA{0x00, 0x72, 0xB2, 0xff}, // blue
	color.RGBA{0xE6, 0x9F, 0x00, 0xff}, // orange
	color.RGBA{0x00, 0x9E, 0x73, 0xff}, // bluish green
	color.RGBA{0xD5, 0x5E, 0x00, 0xff}, // vermillion
	color.RGBA{0xCC, 0x79, 0xA7, 0xff}, // reddish purple
	color.RGBA{0x56, 0xB4, 0xE9, 0xff}, // sky blue
	color.RGBA{0x00, 0x00, 0x00, 0xff}, // black
	color.RGBA{0xF0, 0xE4, 0x42, 0xff}, // yellow
}

var shapes = []draw.GlyphDrawer{
	draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{},
	draw.PyramidGlyph{}, draw.CrossGlyph{}, draw.PlusGlyph{}, draw.RingGlyph{},
} // 7 shapes against 8 colours: the first 56 lines differ in colour or shape

// maxMarkers is the number of points above which a non-Points series is drawn
// without markers: a dense curve reads better as a plain line.
const maxMarkers = 40

// BarSeries is one bar per group: Values[i] belongs to groups[i]; NaN = no bar.
type BarSeries struct {
	Name   string
	Values []float64
}

// Bars writes a grouped bar chart: groups along the x axis (e.g. "1 backend",
// "2 backends"), one coloured bar per series inside each group, a legend,
// value axis starting at 0.
func Bars(path, title, ylabel string, groups []string, series []BarSeries) error {
	if len(groups) == 0 {
		return errors.New("pngplot: bar chart has no groups")
	}
	if len(series) == 0 {
		return errors.New("pngplot: bar chart has no series")
	}
	for i, s := range series {
		if len(s.Values) != len(groups) {
			return fmt.Errorf("pngplot: bar series %d (%q) has %d values for %d groups", i, s.Name, len(s.Values), len(groups))
		}
		for j, v := range s.Values {
			if math.IsInf(v, 0) {
				return fmt.Errorf("pngplot: bar series %d (%q) value %d (group %q) is infinite", i, s.Name, j, groups[j])
			}
		}
	}
	p := newPlot(title, "", ylabel)
	p.Add(&plotter.Grid{Horizontal: plotter.DefaultGridLineStyle})
	p.NominalX(groups...)
	var leg []legendEntry
	var bars [][]*plotter.BarChart // bars[i]: series i's bars, to size later
	for i, s := range series {
		var mine []*plotter.BarChart
		for j, v := range s.Values {
			if math.IsNaN(v) {
				continue
			}
			b, err := plotter.NewBarChart(plotter.Values{v}, 1)
			if err != nil {
				return fmt.Errorf("pngplot: bar series %q: %w", s.Name, err)
			}
			b.XMin, b.Color, b.LineStyle.Width = float64(j), Palette[i%len(Palette)], 0
			p.Add(b)
			mine = append(mine, b)
		}
		bars = append(bars, mine)
		thumb := &plotter.BarChart{Color: Palette[i%len(Palette)]}
		leg = append(leg, legendEntry{s.Name, []plot.Thumbnailer{thumb}})
	}
	p.X.Min, p.X.Max = -0.5, float64(len(groups))-0.5
	p.X.Padding = 0 // bars stand on the x axis
	p.Y.Min, p.Y.Max = math.Min(p.Y.Min, 0), math.Max(p.Y.Max, 0)
	if err := checkSpan("bar", p.Y); err != nil {
		return err
	}
	if h := p.Y.Max + (p.Y.Max-p.Y.Min)/20; p.Y.Max > 0 && !math.IsInf(h, 0) {
		p.Y.Max = h // headroom above the tallest bar
	} else if p.Y.Max == 0 && p.Y.Min == 0 {
		p.Y.Max = 1 // nothing to show (all NaN or zero)
	}
	return render(path, p, leg, 0, 0, func(dc draw.Canvas) {
		// Each group gets 80% of its slot, shared equally by the series.
		w := dc.Size().X / vg.Length(len(groups)) * 0.8 / vg.Length(len(series))
		for i, bs := range bars {
			for _, b := range bs {
				b.Width = w
				b.Offset = (vg.Length(i) - vg.Length(len(series)-1)/2) * w
			}
		}
	})
}

// Line is one XY series drawn with lines and point markers.
//
// Markers are drawn only for series of at most 40 points (and always when
// Points is set); Points wins over Dashed.
type Line struct {
	Name   string
	X, Y   []float64
	Dashed bool // e.g. a model curve beside measurements
	Points bool // markers only, no line (measurements)
}

// Options tunes a line chart.
type Options struct {
	LogX, LogY    bool
	YMin, YMax    float64 // both zero: automatic
	Width, Height float64 // inches; zero: 8 x 4.5
}

// Lines writes an XY chart with a legend.
func Lines(path, title, xlabel, ylabel string, lines []Line, opt Options) error {
	if len(lines) == 0 {
		return errors.New("pngplot: line chart has no lines")
	}
	fixedY := opt.YMin != 0 || opt.YMax != 0
	if fixedY && !(opt.YMin < opt.YMax) || math.IsInf(opt.YMin, 0) || math.IsInf(opt.YMax, 0) {
		return fmt.Errorf("pngplot: invalid y range [%g, %g]", opt.YMin, opt.YMax)
	}
	if fixedY && opt.LogY && opt.YMin <= 0 {
		return fmt.Errorf("pngplot: y range [%g, %g] is not positive on a log axis", opt.YMin, opt.YMax)
	}
	p := newPlot(title, xlabel, ylabel)
	p.Add(plotter.NewGrid())
	var leg []legendEntry
	for i, l := range lines {
		if len(l.X) != len(l.Y) {
			return fmt.Errorf("pngplot: line %d (%q) has %d x and %d y values", i, l.Name, len(l.X), len(l.Y))
		}
		if len(l.X) == 0 {
			return fmt.Errorf("pngplot: line %d (%q) has no points", i, l.Name)
		}
		xys := make(plotter.XYs, len(l.X))
		for j := range l.X {
			x, y := l.X[j], l.Y[j]
			if math.IsNaN(x) || math.IsInf(x, 0) || math.IsNaN(y) || math.IsInf(y, 0) {
				return fmt.Errorf("pngplot: line %d (%q) point %d (%g, %g) is not finite", i, l.Name, j, x, y)
			}
			if opt.LogX && x <= 0 || opt.LogY && y <= 0 {
				return fmt.Errorf("pngplot: line %d (%q) point %d (%g, %g) is not positive on a log axis", i, l.Name, j, x, y)
			}
			xys[j] = plotter.XY{X: x, Y: y}
		}
		c := Palette[i%len(Palette)]
		var thumbs []plot.Thumbnailer
		if !l.Points {
			ln := &plotter.Line{XYs: xys, LineStyle: draw.LineStyle{Color: c, Width: vg.Points(1.5)}}
			if l.Dashed {
				ln.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
			}
			p.Add(ln)
			thumbs = append(thumbs, ln)
		}
		if l.Points || len(xys) <= maxMarkers {
			sc := &plotter.Scatter{XYs: xys, GlyphStyle: draw.GlyphStyle{
				Color: c, Radius: vg.Points(3), Shape: shapes[i%len(shapes)]}}
			p.Add(sc)
			thumbs = append(thumbs, sc)
		}
		leg = append(leg, legendEntry{l.Name, thumbs})
	}
	if fixedY {
		p.Y.Min, p.Y.Max = opt.YMin, opt.YMax
	}
	if err := checkSpan("x", p.X); err != nil {
		return err
	}
	if err := checkSpan("y", p.Y); err != nil {
		return err
	}
	if opt.LogX {
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, logTicks{}
		widenLog(&p.X)
	}
	if opt.LogY {
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, logTicks{}
		widenLog(&p.Y)
	}
	return render(path, p, leg, opt.Width, opt.Height, nil)
}

type legendEntry struct {
	name   string
	thumbs []plot.Thumbnailer
}

var sans = font.Font{Typeface: "Liberation", Variant: "Sans"}

func newPlot(title, xlabel, ylabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font = font.From(sans, 14)
	p.Title.Padding = vg.Points(8)
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font = font.From(sans, 12)
		a.Tick.Label.Font = font.From(sans, 10)
		a.Tick.Marker = linTicks{}
	}
	p.X.Label.Text, p.Y.Label.Text = xlabel, ylabel
	return p
}

// checkSpan rejects axis ranges too wide to compute with.
func checkSpan(what string, a plot.Axis) error {
	if math.IsInf(a.Max-a.Min, 0) {
		return fmt.Errorf("pngplot: %s values span [%g, %g], too wide to plot", what, a.Min, a.Max)
	}
	return nil
}

// widenLog keeps a single-valued log axis away from zero.
func widenLog(a *plot.Axis) {
	if a.Min == a.Max {
		a.Min, a.Max = a.Min/2, a.Max*2
	}
}

// render draws p with the legend to the right of the plot area and writes
// the PNG to path. size, if not nil, is called with the data area before
// drawing. Panics from the plotting library are returned as errors.
func render(path string, p *plot.Plot, leg []legendEntry, wIn, hIn float64, size func(draw.Canvas)) (err error) {
	if path == "" {
		return errors.New("pngplot: empty output path")
	}
	if wIn == 0 {
		wIn = 8
	}
	if hIn == 0 {
		hIn = 4.5
	}
	if !(wIn > 0 && wIn <= 40 && hIn > 0 && hIn <= 40) {
		return fmt.Errorf("pngplot: invalid size %g x %g in", wIn, hIn)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("pngplot: rendering %s: %v", path, r)
		}
	}()
	img := vgimg.NewWith(vgimg.UseWH(vg.Length(wIn)*vg.Inch, vg.Length(hIn)*vg.Inch), vgimg.UseDPI(DPI))
	c := draw.Crop(draw.New(img), vg.Points(6), -vg.Points(10), vg.Points(6), -vg.Points(6))
	l := plot.NewLegend()
	l.Top, l.Left = true, true
	l.TextStyle.Font = font.From(sans, 11)
	l.ThumbnailWidth = vg.Points(24)
	l.Padding = vg.Points(4)
	for _, e := range leg {
		if e.name != "" {
			l.Add(e.name, e.thumbs...)
		}
	}
	area := c
	var lw vg.Length
	if r := l.Rectangle(c); r.Size().X > 0 {
		lw = r.Size().X + vg.Points(12)
		area = draw.Crop(c, 0, -lw, 0, 0)
	}
	dc := p.DataCanvas(area)
	if size != nil {
		size(dc)
	}
	p.Draw(area)
	if lw > 0 {
		l.Draw(draw.Canvas{Canvas: c.Canvas, Rectangle: vg.Rectangle{
			Min: vg.Point{X: c.Max.X - lw + vg.Points(12), Y: c.Min.Y},
			Max: vg.Point{X: c.Max.X, Y: dc.Max.Y}}})
	}
	return writeAtomic(path, vgimg.PngCanvas{Canvas: img})
}

// writeAtomic writes w to a temporary file beside path and renames it.
func writeAtomic(path string, w io.WriterTo) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp*")
	if err != nil {
		return fmt.Errorf("pngplot: %w", err)
	}
	defer os.Remove(f.Name()) // no-op after a successful rename
	_, err = w.WriteTo(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("pngplot: writing %s: %w", path, err)
	}
	return nil
}

// linTicks puts three to seven labelled ticks at round values inside the range.
type linTicks struct{}

func (linTicks) Ticks(lo, hi float64) []plot.Tick {
	raw := (hi - lo) / 7
	if !(raw > 0) || math.IsInf(raw, 0) {
		return nil
	}
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 2.5, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var ticks []plot.Tick
	for k := math.Ceil(lo / step); k*step <= hi*(1+1e-12) && len(ticks) < 50; k++ {
		ticks = append(ticks, plot.Tick{Value: k * step, Label: label(k * step)})
	}
	return ticks
}

// logTicks labels the decades of a log axis (and 2 and 5 within them when
// the range spans at most two decades), falling back to linear ticks when
// the range holds fewer than two labels.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	e0, e1 := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	narrow, minor := math.Log10(hi/lo) <= 2, e1-e0 <= 12
	step := math.Max(1, math.Ceil((e1-e0)/10))
	var ticks []plot.Tick
	labels := 0
	for e := e0; e <= e1; e++ {
		for d := 1.0; d < 10; d++ {
			v := d * math.Pow(10, e)
			if v < lo*(1-1e-9) || v > hi*(1+1e-9) || (d > 1 && !minor) {
				continue
			}
			t := plot.Tick{Value: v}
			if d == 1 && math.Mod(e-e0, step) == 0 || narrow && (d == 2 || d == 5) {
				t.Label = label(v)
				labels++
			}
			ticks = append(ticks, t)
		}
	}
	if labels >= 2 {
		return ticks
	}
	return linTicks{}.Ticks(lo, hi)
}

// label formats a tick value compactly: 1500000 as "1.5M", 0.25 as "0.25".
func label(v float64) string {
	for _, u := range []struct {
		div    float64
		suffix string
	}{{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if math.Abs(v) >= u.div && math.Abs(v) < 1e15 {
			return strconv.FormatFloat(v/u.div, 'g', 6, 64) + u.suffix
		}
	}
	if v == 0 {
		return "0" // not "-0"
	}
	return strconv.FormatFloat(v, 'g', 6, 64)
}
