package pngplot

import (
	"image"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// decode reads a PNG and checks its size and that it is not blank.
func decode(t *testing.T, path string, w, h int) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("decode %s: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() != w || b.Dy() != h {
		t.Fatalf("%s is %dx%d, want %dx%d", path, b.Dx(), b.Dy(), w, h)
	}
	colours := map[[4]uint32]int{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, a := img.At(x, y).RGBA()
			colours[[4]uint32{r, g, bl, a}]++
		}
	}
	if len(colours) < 5 {
		t.Fatalf("%s looks blank: %d distinct colours", path, len(colours))
	}
	return img
}

// hasColour reports whether some pixel of img is exactly the palette colour i.
func hasColour(img image.Image, i int) bool {
	wr, wg, wb, _ := Palette[i].RGBA()
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r == wr && g == wg && bl == wb {
				return true
			}
		}
	}
	return false
}

func TestBars(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bars.png")
	groups := []string{"1 backend", "2 backends", "4 backends"}
	series := []BarSeries{
		{Name: "xlb", Values: []float64{1.2e6, 2.3e6, 4.1e6}},
		{Name: "ipvs", Values: []float64{0.9e6, math.NaN(), 3.0e6}},
		{Name: "iptables", Values: []float64{0.5e6, 0.8e6, 1.1e6}},
	}
	if err := Bars(path, "Throughput", "packets/s", groups, series); err != nil {
		t.Fatal(err)
	}
	img := decode(t, path, 8*DPI, 4.5*DPI)
	for i := range series {
		if !hasColour(img, i) {
			t.Errorf("series %d colour missing from chart", i)
		}
	}
	// Rewriting the same path replaces it, and leaves no temporary files.
	if err := Bars(path, "", "", groups[:1], []BarSeries{{"only", []float64{math.NaN()}}}); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(filepath.Dir(path))
	if err != nil || len(ents) != 1 {
		t.Fatalf("directory holds %v (%v), want only bars.png", ents, err)
	}
}

func TestLines(t *testing.T) {
	dir := t.TempDir()
	var model Line
	model.Name, model.Dashed = "model", true
	for x := 1.0; x <= 1000; x *= 1.1 {
		model.X = append(model.X, x)
		model.Y = append(model.Y, 5+x/10)
	}
	lines := []Line{
		{Name: "measured", X: []float64{1, 10, 100, 1000}, Y: []float64{5, 6.2, 15, 104}, Points: true},
		model,
		{Name: "p99", X: []float64{1, 10, 100, 1000}, Y: []float64{9, 11, 30, 190}},
	}
	for _, tc := range []struct {
		name string
		opt  Options
		w, h int
	}{
		{"linear", Options{}, 8 * DPI, 4.5 * DPI},
		{"loglog", Options{LogX: true, LogY: true}, 8 * DPI, 4.5 * DPI},
		{"fixed", Options{YMin: 0, YMax: 50, Width: 6, Height: 4}, 6 * DPI, 4 * DPI},
		{"narrowlog", Options{LogY: true, YMin: 3, YMax: 8}, 8 * DPI, 4.5 * DPI},
	} {
		path := filepath.Join(dir, tc.name+".png")
		if err := Lines(path, "Latency vs load", "connections/s", "µs", lines, tc.opt); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		img := decode(t, path, tc.w, tc.h)
		for i := range lines {
			if !hasColour(img, i) {
				t.Errorf("%s: line %d colour missing from chart", tc.name, i)
			}
		}
	}
	// A single point on log axes must not collapse the range.
	one := []Line{{Name: "one", X: []float64{1}, Y: []float64{1}}}
	if err := Lines(filepath.Join(dir, "one.png"), "", "", "", one, Options{LogX: true, LogY: true}); err != nil {
		t.Fatal(err)
	}
}

func TestErrors(t *testing.T) {
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok.png")
	g := []string{"a", "b"}
	good := []Line{{Name: "l", X: []float64{1, 2}, Y: []float64{1, 2}}}
	for _, tc := range []struct {
		name, want string
		err        error
	}{
		{"no groups", "no groups", Bars(ok, "", "", nil, []BarSeries{{"s", nil}})},
		{"no series", "no series", Bars(ok, "", "", g, nil)},
		{"bar lengths", "has 1 values for 2 groups", Bars(ok, "", "", g, []BarSeries{{"s", []float64{1}}})},
		{"bar inf", "infinite", Bars(ok, "", "", g, []BarSeries{{"s", []float64{1, math.Inf(1)}}})},
		{"no lines", "no lines", Lines(ok, "", "", "", nil, Options{})},
		{"xy lengths", "has 2 x and 1 y values", Lines(ok, "", "", "", []Line{{Name: "l", X: []float64{1, 2}, Y: []float64{1}}}, Options{})},
		{"empty line", "has no points", Lines(ok, "", "", "", []Line{{Name: "l"}}, Options{})},
		{"nan", "not finite", Lines(ok, "", "", "", []Line{{Name: "l", X: []float64{1}, Y: []float64{math.NaN()}}}, Options{})},
		{"log x", "not positive on a log axis", Lines(ok, "", "", "", []Line{{Name: "l", X: []float64{0, 1}, Y: []float64{1, 2}}}, Options{LogX: true})},
		{"log y", "not positive on a log axis", Lines(ok, "", "", "", []Line{{Name: "l", X: []float64{1, 2}, Y: []float64{-1, 2}}}, Options{LogY: true})},
		{"log y range", "not positive on a log axis", Lines(ok, "", "", "", good, Options{LogY: true, YMin: 0, YMax: 10})},
		{"y range", "invalid y range", Lines(ok, "", "", "", good, Options{YMin: 5, YMax: 1})},
		{"too wide", "too wide to plot", Bars(ok, "", "", g[:1], []BarSeries{{"a", []float64{1e308}}, {"b", []float64{-1e308}}})},
		{"size", "invalid size", Lines(ok, "", "", "", good, Options{Width: -1})},
		{"empty path", "empty output path", Lines("", "", "", "", good, Options{})},
		{"unwritable", "no such file or directory", Lines(filepath.Join(dir, "missing", "x.png"), "", "", "", good, Options{})},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: got error %v, want one containing %q", tc.name, tc.err, tc.want)
		}
	}
	if _, err := os.Stat(ok); !os.IsNotExist(err) {
		t.Errorf("failed calls wrote %s (stat: %v)", ok, err)
	}
}
