package main

import (
	"strings"
	"testing"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
	"github.com/xlbproject/xlb/internal/dataplane"
)

// TestBackendSection: the generated backend section carries its markers
// once each, so that the next run finds and replaces it, and the LB
// section's markers never, so that it cannot take that section's place.
func TestBackendSection(t *testing.T) {
	r := report{Backend: backendReport{
		Results: []dataplane.DecapBenchResult{{Name: caseGUE, MinNs: 100}, {Name: caseSocket, MinNs: 180}},
		OverGUE: map[string]ratio{caseSocket: {Raw: 1.8}},
	}}
	s := backendSection(r, "lb-x.json")
	if err := benchutil.CheckSection(s, backendBegin, backendEnd); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(s, docBegin) || strings.Contains(s, docEnd) {
		t.Errorf("the backend section contains the LB section's markers:\n%s", s)
	}
	if !strings.Contains(s, "| `gue_hint_socket` | 180 |") || !strings.Contains(s, "**1.80x**") {
		t.Errorf("section:\n%s", s)
	}
}

// TestMatrixSection: the matrix section carries its markers once each,
// a row per case, the worst hit's ratio against the target, and the
// plot's link relative to the document.
func TestMatrixSection(t *testing.T) {
	hit := func(proto string, b, s int, lb, floor float64) dataplane.MatrixResult {
		return dataplane.MatrixResult{MatrixCase: dataplane.MatrixCase{Proto: proto, Backends: b, Services: s},
			LB: dataplane.BenchResult{MinNs: lb, MedianNs: lb + 1}, Floor: dataplane.BenchResult{MinNs: floor}, Ratio: lb / floor, Paired: lb / floor * 1.01, Mpps: 1e3 / lb}
	}
	r := report{Target: 1.3, Matrix: []dataplane.MatrixResult{
		hit("tcp", 16, 1, 58, 45), hit("udp", 1024, 1000, 60, 45),
		{MatrixCase: dataplane.MatrixCase{Proto: "tcp", Services: 1000, Miss: true}, LB: dataplane.BenchResult{MinNs: 30}, Floor: dataplane.BenchResult{MinNs: 27}, Ratio: 30.0 / 27},
	}}
	s := matrixSection(r, "lb-x.json", "docs/img/m.png", "docs/benchmarks.md")
	if err := benchutil.CheckSection(s, matrixBegin, matrixEnd); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| tcp, 16 backends, 1 services | 58 | 59 | 45 (`floor_parse_encap`) | 1.29x | 1.30x | 17.2 | 0 |",
		"| miss (tcp to a non-VIP address), 1000 services | 30 |", "udp, 1024 backends, 1000 services at **1.33x** its floor, beyond the 1.30x target; on paired rounds (the median of each round's LB / floor): udp, 1024 backends, 1000 services at 1.35x",
		"](img/m.png)"} {
		if !strings.Contains(s, want) {
			t.Errorf("section lacks %q:\n%s", want, s)
		}
	}
}
