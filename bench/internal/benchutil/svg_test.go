package benchutil

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

// TestSVG: a panel's plot area follows the layout, and what the methods
// draw is well-formed SVG in the plots' style.
func TestSVG(t *testing.T) {
	s := NewSVG(Layout{PanelW: 200, PanelH: 200, Left: 40, Below: 60}, 2, "a & b", "<sub>")
	s.Panel(0, "first")
	p := s.Panel(1, "second")
	if got, want := [4]float64{p.Left, p.Top, p.Width, p.Height}, [4]float64{250, 86, 134, 112}; got != want {
		t.Errorf("plot area (left, top, width, height) %v, want %v", got, want)
	}
	x := func(v float64) float64 { return p.Left + v }
	y := func(v float64) float64 { return p.Top + p.Height - 100*v }
	p.HGrid(y(0.5), "0.5")
	p.VGrid(x(10), "10")
	p.XTick(x(20), "20")
	p.XLabel("ms")
	p.YLabel("fraction")
	p.Marker(x(30), "red")
	cdf := [][2]float64{{1, 0.5}, {2, 1}}
	p.Curve(cdf, x, y, true, "blue")
	p.Curve(cdf, x, y, false, "green")
	p.Curve(nil, x, y, false, "none")
	p.Legend(2, []LegendItem{{"line", "blue", SwatchLine}, {"dashed", "red", SwatchDashed}, {"band", "grey", SwatchBand}, {"box", "green", SwatchBox}})
	out := s.String()
	for _, want := range []string{
		`<svg xmlns="http://www.w3.org/2000/svg" width="410" height="258" font-family="sans-serif" font-size="12">` + "\n" +
			`<rect width="410" height="258" fill="white"/>` + "\n" +
			`<text x="10" y="20" font-size="15">a &amp; b</text>` + "\n" +
			`<text x="10" y="40" fill="#555">&lt;sub&gt;</text>` + "\n" +
			`<text x="10" y="72" font-size="13">first</text>` + "\n" +
			`<text x="210" y="72" font-size="13">second</text>` + "\n",
		`<line x1="250.0" y1="148.0" x2="384.0" y2="148.0" stroke="#ddd"/>` + "\n" + `<text x="246.0" y="152.0" text-anchor="end" fill="#555">0.5</text>`,
		`<line x1="260.0" y1="86.0" x2="260.0" y2="198.0" stroke="#ddd"/>` + "\n" + `<text x="260.0" y="213.0" text-anchor="middle" fill="#555">10</text>`,
		`<text x="270.0" y="213.0" text-anchor="middle" fill="#555">20</text>`,
		`<text x="317.0" y="228.0" text-anchor="middle" fill="#555">ms</text>`,
		`<text x="220" y="142.0" fill="#555" transform="rotate(-90 220 142.0)" text-anchor="middle">fraction</text>`,
		`<line x1="280.0" y1="86.0" x2="280.0" y2="198.0" stroke="red" stroke-dasharray="4 3"/>`,
		`<path d="M251.0 198.0 H251.0 V148.0 H252.0 V98.0" fill="none" stroke="blue" stroke-width="2"/>`,
		`<path d="M251.0 148.0 L252.0 98.0" fill="none" stroke="green" stroke-width="2"/>`,
		`<line x1="250.0" y1="242.0" x2="268.0" y2="242.0" stroke="blue" stroke-width="2"/>` + "\n" + `<text x="272.0" y="246.0">line</text>`,
		`<line x1="317.0" y1="242.0" x2="335.0" y2="242.0" stroke="red" stroke-width="2" stroke-dasharray="4 3"/>`,
		`<line x1="250.0" y1="258.0" x2="268.0" y2="258.0" stroke="grey" stroke-width="8" stroke-opacity="0.25"/>`,
		`<rect x="317.0" y="253.0" width="18" height="9" fill="green"/>` + "\n" + `<text x="339.0" y="262.0">box</text>`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no\n%s\nin\n%s", want, out)
		}
	}
	n, err := SVGElements(out)
	if err != nil {
		t.Fatal(err)
	}
	if n["svg"] != 1 || n["path"] != 2 || !strings.HasSuffix(out, "</svg>\n") {
		t.Errorf("elements %v:\n%s", n, out)
	}
}

func TestSVGElements(t *testing.T) {
	n, err := SVGElements(`<svg><g><path/><path/></g><text>a &amp; b</text></svg>`)
	if want := map[string]int{"svg": 1, "g": 1, "path": 2, "text": 1}; err != nil || !maps.Equal(n, want) {
		t.Errorf("SVGElements = %v, %v; want %v", n, err, want)
	}
	for _, bad := range []string{`<svg><path></svg>`, `<svg>a & b</svg>`, `<svg>`} {
		if _, err := SVGElements(bad); err == nil {
			t.Errorf("SVGElements(%q): no error", bad)
		}
	}
}

func TestCDF(t *testing.T) {
	if got, want := CDF([]float64{3, 1, 3, 2}), [][2]float64{{1, 0.25}, {2, 0.5}, {3, 1}}; !slices.Equal(got, want) {
		t.Errorf("CDF = %v, want %v", got, want)
	}
	if got := CDF(nil); len(got) != 0 {
		t.Errorf("CDF(nil) = %v", got)
	}
}

func TestEscapeXML(t *testing.T) {
	if got, want := EscapeXML(`a<b & "c">`), "a&lt;b &amp; &quot;c&quot;&gt;"; got != want {
		t.Errorf("EscapeXML = %q, want %q", got, want)
	}
}
