package dataplane

import "testing"

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
