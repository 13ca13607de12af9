package pngplot

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestGrid(t *testing.T) {
	path := filepath.Join(t.TempDir(), "grid.png")
	cells := []Cell{
		{X: 0, Y: 0, W: 24, H: 1, Title: "Traffic", Heading: true},
		{X: 0, Y: 1, W: 6, H: 4, Title: "Agents", Value: "2"},
		{X: 6, Y: 1, W: 6, H: 4, Title: "NAT", Message: "no data"},
		{X: 12, Y: 1, W: 12, H: 4, Title: "Packets", Lines: []Line{
			{Name: "web", X: []float64{0, 1, 2}, Y: []float64{10, 20, 15}},
			{Name: "dns", X: []float64{0, 1, 2}, Y: []float64{1, 1, 1}, Dashed: true},
		}, YMin: 0, YMax: 25},
		{X: 0, Y: 5, W: 24, H: 4, Title: "Flat", Lines: []Line{{Name: "up", X: []float64{0, 1}, Y: []float64{1, 1}}}},
	}
	if err := Grid(path, "xlb", cells, 8, 0.25, 72); err != nil {
		t.Fatal(err)
	}
	// 8 in wide; 0.5 in of title and 9 rows of 0.25 in, at 72 dpi.
	decode(t, path, 576, 198)

	for _, c := range []struct {
		cells []Cell
		want  string
	}{
		{nil, "no cells"},
		{[]Cell{{X: 20, W: 6, H: 1}}, "outside"},
		{[]Cell{{W: 6, H: 2, Lines: []Line{{Name: "x", X: []float64{0}, Y: []float64{1, 2}}}}}, "1 x and 2 y"},
	} {
		if err := Grid(filepath.Join(t.TempDir(), "bad.png"), "", c.cells, 8, 0.25, 72); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want %q", c.cells, err, c.want)
		}
	}
}
