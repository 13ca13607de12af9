package benchutil

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// The benchmark plots are plain SVG in one style: white ground,
// sans-serif, grey notes; a title and a subtitle over panels side by
// side, each panel a title over a plot area, with the x labels and the
// legend below it.
const (
	svgTop        = 58 // above the panels: title and subtitle
	svgPanelTitle = 28 // inside a panel, above the plot area: its title
	svgRight      = 16 // inside a panel, right of the plot area
	svgGap        = 10 // left of the panels, and between them
)

// Layout sizes the panels of a plot, in pixels.
type Layout struct {
	PanelW, PanelH int // one panel, margins included
	Left           int // inside a panel, left of the plot area: the y axis labels
	Below          int // below the plot area: x labels and legend
}

// SVG is a plot being drawn.
type SVG struct {
	layout Layout
	b      strings.Builder
}

// NewSVG starts a plot of panels side by side under a title and a
// subtitle.
func NewSVG(l Layout, panels int, title, subtitle string) *SVG {
	s := &SVG{layout: l}
	w, h := l.PanelW*panels+svgGap, svgTop+l.PanelH
	s.Printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	s.Printf(`<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	s.Printf(`<text x="10" y="20" font-size="15">%s</text>`+"\n", EscapeXML(title))
	s.Printf(`<text x="10" y="40" fill="#555">%s</text>`+"\n", EscapeXML(subtitle))
	return s
}

// Printf writes SVG markup; text in it must be escaped (EscapeXML).
func (s *SVG) Printf(format string, args ...any) { fmt.Fprintf(&s.b, format, args...) }

// String returns the finished document.
func (s *SVG) String() string { return s.b.String() + "</svg>\n" }

// Panel writes the title of panel k (from 0, left to right) and returns
// its plot area.
func (s *SVG) Panel(k int, title string) *Panel {
	l := s.layout
	x0, y0 := svgGap+k*l.PanelW, svgTop
	s.Printf(`<text x="%d" y="%d" font-size="13">%s</text>`+"\n", x0, y0+14, EscapeXML(title))
	return &Panel{svg: s, x0: x0,
		Left: float64(x0 + l.Left), Top: float64(y0 + svgPanelTitle),
		Width:  float64(l.PanelW - l.Left - svgRight - svgGap),
		Height: float64(l.PanelH - svgPanelTitle - l.Below),
	}
}

// Panel is the plot area of one panel, in pixels; its methods draw the
// parts all plots share, the caller the rest (with Printf).
type Panel struct {
	svg                      *SVG
	x0                       int // the panel's left edge
	Left, Top, Width, Height float64
}

// Printf writes SVG markup, as SVG.Printf.
func (p *Panel) Printf(format string, args ...any) { p.svg.Printf(format, args...) }

// HGrid draws a horizontal grid line at y with its label on the y axis.
func (p *Panel) HGrid(y float64, label string) {
	p.Printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", p.Left, y, p.Left+p.Width, y)
	p.Printf(`<text x="%.1f" y="%.1f" text-anchor="end" fill="#555">%s</text>`+"\n", p.Left-4, y+4, EscapeXML(label))
}

// VGrid draws a vertical grid line at x with its label on the x axis.
func (p *Panel) VGrid(x float64, label string) {
	p.Printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x, p.Top, x, p.Top+p.Height)
	p.XTick(x, label)
}

// XTick writes a label on the x axis at x.
func (p *Panel) XTick(x float64, label string) {
	p.Printf(`<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%s</text>`+"\n", x, p.Top+p.Height+15, EscapeXML(label))
}

// XLabel writes the x axis's label, under its ticks.
func (p *Panel) XLabel(label string) {
	p.Printf(`<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%s</text>`+"\n", p.Left+p.Width/2, p.Top+p.Height+30, EscapeXML(label))
}

// YLabel writes the y axis's label, turned, left of its ticks.
func (p *Panel) YLabel(label string) {
	cy := p.Top + p.Height/2
	p.Printf(`<text x="%d" y="%.1f" fill="#555" transform="rotate(-90 %d %.1f)" text-anchor="middle">%s</text>`+"\n", p.x0+10, cy, p.x0+10, cy, EscapeXML(label))
}

// Marker draws a dashed vertical line at x across the plot area.
func (p *Panel) Marker(x float64, color string) {
	p.Printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="4 3"/>`+"\n", x, p.Top, x, p.Top+p.Height, color)
}

// Curve draws pts, which x and y map to pixels, as a 2 px line; if step,
// as the steps of a CDF (from 0, across at the previous level, then up).
// No points draw nothing.
func (p *Panel) Curve(pts [][2]float64, x, y func(float64) float64, step bool, color string) {
	if len(pts) == 0 {
		return
	}
	var d strings.Builder
	if step {
		fmt.Fprintf(&d, "M%.1f %.1f", x(pts[0][0]), y(0))
		for _, pt := range pts {
			fmt.Fprintf(&d, " H%.1f V%.1f", x(pt[0]), y(pt[1]))
		}
	} else {
		for i, pt := range pts {
			fmt.Fprintf(&d, "%s%.1f %.1f", map[bool]string{true: "M", false: " L"}[i == 0], x(pt[0]), y(pt[1]))
		}
	}
	p.Printf(`<path d="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", d.String(), color)
}

// Swatch is how a legend item shows its colour.
type Swatch int

const (
	SwatchLine   Swatch = iota // a line, for a curve
	SwatchDashed               // a dashed line, for a Marker
	SwatchBand                 // a wide pale line, for a shaded range
	SwatchBox                  // a box, for bars
)

// LegendItem is one entry of a legend.
type LegendItem struct {
	Label, Color string
	Swatch       Swatch
}

// legendLine is the style of each Swatch drawn as a line.
var legendLine = map[Swatch]string{
	SwatchLine:   ` stroke-width="2"`,
	SwatchDashed: ` stroke-width="2" stroke-dasharray="4 3"`,
	SwatchBand:   ` stroke-width="8" stroke-opacity="0.25"`,
}

// Legend writes items below the x axis's label, in rows of columns.
func (p *Panel) Legend(columns int, items []LegendItem) {
	ly := p.Top + p.Height + 48
	for i, it := range items {
		lx, yy := p.Left+float64(i%columns)*(p.Width/float64(columns)), ly+float64(i/columns)*16
		if it.Swatch == SwatchBox {
			p.Printf(`<rect x="%.1f" y="%.1f" width="18" height="9" fill="%s"/>`+"\n", lx, yy-9, it.Color)
		} else {
			p.Printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"%s/>`+"\n", lx, yy-4, lx+18, yy-4, it.Color, legendLine[it.Swatch])
		}
		p.Printf(`<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+22, yy, EscapeXML(it.Label))
	}
}

// CDF returns the empirical CDF of samples as (value, fraction at or
// below it) points, one per distinct value, ascending.
func CDF(samples []float64) [][2]float64 {
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

// EscapeXML escapes text for SVG.
func EscapeXML(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

// SVGElements counts the elements of an SVG document by name, or says
// where it is not well-formed XML: what a test of a plot checks.
func SVGElements(svg string) (map[string]int, error) {
	d := xml.NewDecoder(strings.NewReader(svg))
	n := map[string]int{}
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return nil, fmt.Errorf("not well-formed: %w", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			n[se.Name.Local]++
		}
	}
}
