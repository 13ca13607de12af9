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
