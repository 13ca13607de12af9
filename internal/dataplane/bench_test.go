package dataplane

import (
	"strings"
	"testing"
)

// The benchmark `make bench` runs must keep working: a short run of it.
func TestRunBenchmarkSmoke(t *testing.T) {
	requirePrivileges(t)
	res, err := RunBenchmark(BenchConfig{Backends: 16, Repeat: 1000, Rounds: 3})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, r := range res {
		names[r.Name] = true
		if r.MinNs <= 0 {
			t.Errorf("%s: %v ns per packet", r.Name, r.MinNs)
		}
	}
	for _, want := range []string{"bench_lb", "floor_parse_encap"} {
		if !names[want] {
			t.Errorf("no result for %s in %+v", want, res)
		}
	}
}

// An A/B run of the benchmark object against itself, and the objects it
// must refuse.
func TestRunABSmoke(t *testing.T) {
	requirePrivileges(t)
	res, err := RunAB(BenchConfig{Backends: 16, Repeat: 1000, Rounds: 3}, "bench_bpfel.o")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{ABFloor, ABLB, ABOtherLB, ABOtherFloor}
	if len(res) != len(want) {
		t.Fatalf("%d results, want %d: %+v", len(res), len(want), res)
	}
	for i, r := range res {
		if r.Name != want[i] || len(r.RoundsNs) != 3 || r.MinNs <= 0 {
			t.Errorf("result %d: %s, %d rounds, %v ns; want %s over 3 rounds", i, r.Name, len(r.RoundsNs), r.MinNs, want[i])
		}
	}
	if _, err := RunAB(BenchConfig{Backends: 16, Repeat: 10, Rounds: 1}, "pass_bpfel.o"); err == nil || !strings.Contains(err.Error(), "has no program bench_lb") {
		t.Errorf("an object without the benchmark programs: %v, want it refused", err)
	}
	if _, err := RunAB(BenchConfig{Backends: 16, Repeat: 10, Rounds: 1}, "no-such.o"); err == nil {
		t.Error("a missing object was not refused")
	}
}
