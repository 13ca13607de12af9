package pngplot

import (
	"errors"
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// GridColumns is the width of a Grid in cells, as in a Grafana dashboard.
const GridColumns = 24

// Cell is one panel of a Grid, placed in grid units like a Grafana panel's
// gridPos. It is a line chart (Lines), a single value (Value), a heading
// across the grid (Heading), or a message where there is nothing to draw.
type Cell struct {
	X, Y, W, H int
	Title      string
	Lines      []Line
	YMin, YMax float64 // both zero: automatic
	Value      string
	Heading    bool
	Message    string
}

// Grid writes cells as one image, like a dashboard: width inches wide,
// unit inches per grid row, at dpi.
func Grid(path, title string, cells []Cell, width, unit float64, dpi int) (err error) {
	if len(cells) == 0 {
		return errors.New("pngplot: grid has no cells")
	}
	if !(width > 0 && width <= 40 && unit > 0 && dpi > 0 && dpi <= 300) {
		return fmt.Errorf("pngplot: invalid grid size %g in, %g in per row, %d dpi", width, unit, dpi)
	}
	rows := 0
	for i, c := range cells {
		if c.W <= 0 || c.H <= 0 || c.X < 0 || c.Y < 0 || c.X+c.W > GridColumns {
			return fmt.Errorf("pngplot: cell %d (%q) at %d,%d size %dx%d is outside the %d columns", i, c.Title, c.X, c.Y, c.W, c.H, GridColumns)
		}
		rows = max(rows, c.Y+c.H)
	}
	const titleIn = 0.5
	height := titleIn + float64(rows)*unit
	if height > 60 {
		return fmt.Errorf("pngplot: grid of %d rows is %g in tall", rows, height)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("pngplot: rendering %s: %v", path, r)
		}
	}()
	img := vgimg.NewWith(vgimg.UseWH(vg.Length(width)*vg.Inch, vg.Length(height)*vg.Inch), vgimg.UseDPI(dpi))
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	top := dc.Max.Y
	dc.FillText(textStyle(16, color.Black, draw.XLeft), vg.Point{X: dc.Min.X + vg.Points(8), Y: top - vg.Length(titleIn)*vg.Inch/2}, title)

	colW := vg.Length(width) * vg.Inch / GridColumns
	rowH := vg.Length(unit) * vg.Inch
	gap := vg.Points(3)
	for i, c := range cells {
		r := vg.Rectangle{
			Min: vg.Point{X: vg.Length(c.X)*colW + gap, Y: top - vg.Length(titleIn)*vg.Inch - vg.Length(c.Y+c.H)*rowH + gap},
			Max: vg.Point{X: vg.Length(c.X+c.W)*colW - gap, Y: top - vg.Length(titleIn)*vg.Inch - vg.Length(c.Y)*rowH - gap},
		}
		cc := draw.Canvas{Canvas: dc.Canvas, Rectangle: r}
		if err := drawCell(cc, c); err != nil {
			return fmt.Errorf("pngplot: cell %d (%q): %w", i, c.Title, err)
		}
	}
	return writeAtomic(path, vgimg.PngCanvas{Canvas: img})
}

var (
	panelBorder = color.RGBA{0xcc, 0xcc, 0xcc, 0xff}
	muted       = color.RGBA{0x66, 0x66, 0x66, 0xff}
)

func textStyle(size float64, c color.Color, x draw.XAlignment) text.Style {
	return text.Style{Color: c, Font: font.From(sans, font.Length(size)), XAlign: x, YAlign: draw.YCenter, Handler: plot.DefaultTextHandler}
}

func drawCell(c draw.Canvas, cell Cell) error {
	if cell.Heading {
		c.FillText(textStyle(13, color.Black, draw.XLeft), vg.Point{X: c.Min.X + vg.Points(4), Y: (c.Min.Y + c.Max.Y) / 2}, cell.Title)
		return nil
	}
	c.StrokeLines(draw.LineStyle{Color: panelBorder, Width: vg.Points(0.75)}, []vg.Point{
		{X: c.Min.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Max.Y}, {X: c.Min.X, Y: c.Max.Y}, {X: c.Min.X, Y: c.Min.Y}})
	inner := draw.Crop(c, vg.Points(4), -vg.Points(4), vg.Points(4), -vg.Points(4))
	switch {
	case cell.Value != "":
		inner.FillText(textStyle(10, color.Black, draw.XLeft), vg.Point{X: inner.Min.X, Y: inner.Max.Y - vg.Points(6)}, cell.Title)
		inner.FillText(textStyle(26, Palette[0], draw.XCenter), vg.Point{X: (inner.Min.X + inner.Max.X) / 2, Y: (inner.Min.Y+inner.Max.Y)/2 - vg.Points(4)}, cell.Value)
		return nil
	case len(cell.Lines) == 0:
		inner.FillText(textStyle(10, color.Black, draw.XLeft), vg.Point{X: inner.Min.X, Y: inner.Max.Y - vg.Points(6)}, cell.Title)
		inner.FillText(textStyle(10, muted, draw.XCenter), vg.Point{X: (inner.Min.X + inner.Max.X) / 2, Y: (inner.Min.Y + inner.Max.Y) / 2}, cell.Message)
		return nil
	}
	p := plot.New()
	p.Title.Text = cell.Title
	p.Title.TextStyle.Font = font.From(sans, 10)
	p.Title.Padding = vg.Points(2)
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Tick.Label.Font = font.From(sans, 8)
		a.Tick.Marker = linTicks{}
		a.Padding = vg.Points(2)
	}
	p.Add(plotter.NewGrid())
	l := plot.NewLegend()
	l.Top, l.Left = true, true
	l.TextStyle.Font = font.From(sans, 8)
	l.ThumbnailWidth = vg.Points(12)
	l.Padding = vg.Points(1)
	for i, ln := range cell.Lines {
		if len(ln.X) != len(ln.Y) || len(ln.X) == 0 {
			return fmt.Errorf("line %d (%q) has %d x and %d y values", i, ln.Name, len(ln.X), len(ln.Y))
		}
		xys := make(plotter.XYs, len(ln.X))
		for j := range ln.X {
			if math.IsNaN(ln.X[j]) || math.IsInf(ln.X[j], 0) || math.IsNaN(ln.Y[j]) || math.IsInf(ln.Y[j], 0) {
				return fmt.Errorf("line %d (%q) point %d is not finite", i, ln.Name, j)
			}
			xys[j] = plotter.XY{X: ln.X[j], Y: ln.Y[j]}
		}
		line := &plotter.Line{XYs: xys, LineStyle: draw.LineStyle{Color: Palette[i%len(Palette)], Width: vg.Points(1.25)}}
		if ln.Dashed {
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		}
		p.Add(line)
		l.Add(ln.Name, line)
	}
	if cell.YMin != 0 || cell.YMax != 0 {
		p.Y.Min, p.Y.Max = cell.YMin, cell.YMax
	}
	if p.Y.Min == p.Y.Max { // a flat line: keep it off the frame
		if p.Y.Min == 0 {
			p.Y.Max = 1
		} else {
			p.Y.Min, p.Y.Max = min(0, 2*p.Y.Min), max(0, 2*p.Y.Max)
		}
	}
	if err := checkSpan("y", p.Y); err != nil {
		return err
	}
	area := inner
	if r := l.Rectangle(inner); r.Size().X > 0 {
		lw := min(r.Size().X+vg.Points(6), inner.Size().X/2)
		area = draw.Crop(inner, 0, -lw, 0, 0)
		p.Draw(area)
		dc := p.DataCanvas(area)
		l.Draw(draw.Canvas{Canvas: inner.Canvas, Rectangle: vg.Rectangle{
			Min: vg.Point{X: inner.Max.X - lw + vg.Points(6), Y: inner.Min.Y},
			Max: vg.Point{X: inner.Max.X, Y: dc.Max.Y}}})
		return nil
	}
	p.Draw(area)
	return nil
}
