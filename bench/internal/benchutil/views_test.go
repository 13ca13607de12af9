package benchutil

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// run is a result as the programs have them: a date and measurements.
type run struct {
	Date string `json:"date"`
	N    int    `json:"n"`
}

const (
	runBegin = "<!-- run:begin -->"
	runEnd   = "<!-- run:end -->"
)

// TestResultsSaveAndRender: Save writes the JSON files, the plots and the
// section; Render draws the same from the JSON, naming the dated file
// while it exists and the given one after.
func TestResultsSaveAndRender(t *testing.T) {
	dir := t.TempDir()
	doc := filepath.Join(dir, "docs", "benchmarks.md")
	if err := os.MkdirAll(filepath.Dir(doc), 0o755); err != nil {
		t.Fatal(err)
	}
	var named []string // the JSON file each section names
	rs := Results[run]{Name: "x", Views: func(r *run) Views {
		return Views{
			Plots: []Plot{
				{Path: filepath.Join(dir, "docs", "img", "x.svg"), Draw: func() string { return "<svg/>\n" }},
				{Path: "", Draw: func() string { t.Error("drew a plot without a path"); return "" }},
			},
			Doc: doc, Begin: runBegin, End: runEnd,
			Section: func(jsonName string, img []string) string {
				named = append(named, jsonName)
				return runBegin + "\n" + strings.Join(img, ",") + " " + strings.Repeat("n", r.N) + "\n" + runEnd
			},
		}
	}}
	start := time.Date(2026, 11, 22, 7, 29, 21, 0, time.UTC)
	var said []string
	if err := rs.Save(filepath.Join(dir, "results"), start, &run{Date: start.Format(time.RFC3339), N: 3}, func(m string) { said = append(said, m) }); err != nil {
		t.Fatal(err)
	}
	dated := filepath.Join(dir, "results", "x-20261122-072921.json")
	latest := filepath.Join(dir, "results", "x-latest.json")
	if want := []string{"wrote " + dated, "wrote " + filepath.Join(dir, "docs", "img", "x.svg"), "updated " + doc}; !slices.Equal(said, want) {
		t.Errorf("progress %q, want %q", said, want)
	}
	b, err := os.ReadFile(doc)
	if want := runBegin + "\nimg/x.svg, nnn\n" + runEnd; err != nil || string(b) != want {
		t.Errorf("document %q (%v), want %q", b, err, want)
	}

	if err := rs.Render(latest); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dated); err != nil {
		t.Fatal(err)
	}
	if err := rs.Render(latest); err != nil {
		t.Fatal(err)
	}
	if want := []string{dated, dated, latest}; !slices.Equal(named, want) {
		t.Errorf("sections named %q, want %q", named, want)
	}
	if b2, _ := os.ReadFile(doc); string(b2) != string(b) {
		t.Errorf("rendered document %q, saved %q", b2, b)
	}

	if err := os.WriteFile(latest, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := rs.Render(latest); err == nil || !strings.Contains(err.Error(), latest) {
		t.Errorf("a broken result: %v, want an error naming it", err)
	}
}

// TestViewsWithoutDoc: the plots are written, nothing else.
func TestViewsWithoutDoc(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "new", "p.svg")
	v := Views{
		Plots:   []Plot{{Path: svg, Draw: func() string { return "<svg/>\n" }}},
		Section: func(string, []string) string { t.Error("a section without a document"); return "" },
	}
	if err := v.Write("x.json", func(string) {}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(svg); err != nil || string(b) != "<svg/>\n" {
		t.Errorf("plot %q (%v)", b, err)
	}
}

func TestDocLink(t *testing.T) {
	for _, tc := range []struct{ doc, path, want string }{
		{"docs/benchmarks.md", "docs/img/bench-ctl.svg", "img/bench-ctl.svg"},
		{"/tmp/doc.md", "/tmp/x.svg", "x.svg"},
		{"/tmp/d/doc.md", "/tmp/img/p.svg", "../img/p.svg"},
		{"docs/benchmarks.md", "/tmp/x.svg", "/tmp/x.svg"}, // no relative path from a relative directory
	} {
		if got := DocLink(tc.doc, tc.path); got != tc.want {
			t.Errorf("DocLink(%q, %q) = %q, want %q", tc.doc, tc.path, got, tc.want)
		}
	}
}
