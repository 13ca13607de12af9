package lbharness

import (
	"slices"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/testbed/testenv"
)

// TestDecapBenchPaths: a short run of the backend benchmark `make bench`
// runs, which must measure every case on the path its name promises:
// the verdict and the counters each repetition moved are fixed here,
// apart from the benchmark's own table, so that a change to either
// cannot silently measure something else.
func TestDecapBenchPaths(t *testing.T) {
	testenv.RequireRoot(t, "benchmarks (BPF, network namespaces)")
	res, err := RunDecapBenchmark(DecapBenchConfig{Repeat: 50, Rounds: 2})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name, verdict string
		counters      []string
	}{
		{"harness", "XDP_PASS", nil},
		{"ipip", "XDP_PASS", []string{"decap_ipip"}},
		{"gue", "XDP_PASS", []string{"decap_gue"}},
		{"gue_hint_socket", "XDP_PASS", []string{"decap_gue", "socket"}},
		{"gue_hint_chain", "XDP_TX", []string{"chained"}},
		{"gue_hint_chain_nolisten", "XDP_TX", []string{"chained"}},
		{"gue_hint_syn", "XDP_PASS", []string{"decap_gue", "syn"}},
	}
	if len(res) != len(want) {
		t.Fatalf("%d results, want %d: %+v", len(res), len(want), res)
	}
	for i, w := range want {
		r := res[i]
		if r.Name != w.name || r.Verdict != w.verdict || !slices.Equal(r.Counters, w.counters) {
			t.Errorf("case %d: %s, %s, counters %q; want %s, %s, %q", i, r.Name, r.Verdict, r.Counters, w.name, w.verdict, w.counters)
		}
		if len(r.RoundsNs) != 2 || r.MinNs <= 0 || r.MedianNs < r.MinNs {
			t.Errorf("%s: rounds %v, min %v, median %v", r.Name, r.RoundsNs, r.MinNs, r.MedianNs)
		}
	}
}

// TestDecapBenchCatchesWrongPath: a case whose packets take another
// path with the same verdict must fail the run rather than be timed.
// Without host addresses, GUE to the host is passed as not ours: XDP_PASS
// too, but counted as pass_not_ours and not decap_gue.
func TestDecapBenchCatchesWrongPath(t *testing.T) {
	testenv.RequireRoot(t, "benchmarks (BPF, network namespaces)")
	objs, err := loadDecapBench()
	if err != nil {
		t.Fatal(err)
	}
	defer objs.Close()
	c := decapCase{name: "gue", frame: decapFrame([]byte{0, 4, 0, 0}, 40001, dbPort, 0x10),
		verdict: xdpVerdictPass, counters: []string{"decap_gue"}}
	_, err = objs.runCase(c, 1, 10) // ifindex 1: lo, in the test's namespace
	if err == nil || !strings.Contains(err.Error(), "counter") {
		t.Fatalf("a case that took another path: err %v, want a counter mismatch", err)
	}
}
