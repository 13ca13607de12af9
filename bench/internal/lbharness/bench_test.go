package lbharness

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/testbed/testenv"
)

// The benchmark `make bench` runs must keep working: a short run of it.
func TestRunBenchmarkSmoke(t *testing.T) {
	testenv.RequireRoot(t, "benchmarks (BPF, network namespaces)")
	res, err := RunBenchmark(BenchConfig{Backends: 16, Repeat: 1000, Rounds: 3, NATSessions: 2000})
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
	for _, want := range []string{"bench_lb", "floor_parse_encap", "wrap_pick", "bench_lb_nat_fwd_full", "bench_lb_nat_rev_full"} {
		if !names[want] {
			t.Errorf("no result for %s in %+v", want, res)
		}
	}
}

// An A/B run of the benchmark object against itself, and the objects it
// must refuse.
func TestRunABSmoke(t *testing.T) {
	testenv.RequireRoot(t, "benchmarks (BPF, network namespaces)")
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
	if _, err := RunAB(BenchConfig{Backends: 16, Repeat: 10, Rounds: 1}, "../../../testbed/xdppass/pass_bpfel.o"); err == nil || !strings.Contains(err.Error(), "has no program bench_lb") {
		t.Errorf("an object without the benchmark programs: %v, want it refused", err)
	}
	if _, err := RunAB(BenchConfig{Backends: 16, Repeat: 10, Rounds: 1}, "no-such.o"); err == nil {
		t.Error("a missing object was not refused")
	}
}

// The other object of an A/B run shares the built-in one's maps by name,
// gets the maps only it has created empty, and is refused when a map of
// a shared name has another layout.
func TestLoadOtherMaps(t *testing.T) {
	testenv.RequireRoot(t, "benchmarks (BPF, network namespaces)")
	node := netip.MustParseAddr("10.0.1.2")
	objs, d, err := loadBenchDataplane(node)
	if err != nil {
		t.Fatal(err)
	}
	defer closeBench(objs, d)

	spec, err := loadBench()
	if err != nil {
		t.Fatal(err)
	}
	extra := spec.Maps["svc_retired"].Copy()
	extra.Name = "variant_only"
	spec.Maps["variant_only"] = extra
	other, err := loadOther(spec, d, node)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if mapID(t, other.Maps["svc_index"]) != mapID(t, objs.SvcIndex) {
		t.Error("the other object's svc_index is not the built-in one's")
	}
	m := other.Maps["variant_only"]
	if m == nil || mapID(t, m) == mapID(t, objs.SvcRetired) {
		t.Fatalf("the map only the other object has: %v, want a new one", m)
	}

	spec, err = loadBench()
	if err != nil {
		t.Fatal(err)
	}
	spec.Maps["svc_retired"].MaxEntries++
	if o, err := loadOther(spec, d, node); err == nil {
		o.Close()
		t.Error("a variant whose svc_retired has another size was not refused")
	}
}

func TestPairedDiff(t *testing.T) {
	if d := PairedDiff([]float64{10, 12, 30}, []float64{9, 10, 11}); d != 2 {
		t.Errorf("PairedDiff = %v, want 2 (the median of 1, 2, 19)", d)
	}
	if d := PairedDiff([]float64{10, 12}, []float64{9, 9, 9}); d != 2 {
		t.Errorf("PairedDiff over the shorter one's rounds = %v, want 2 (the median of 1, 3)", d)
	}
	if d := PairedDiff(nil, []float64{1}); d != 0 {
		t.Errorf("PairedDiff of nothing = %v", d)
	}
}

// mapID is the kernel's ID of map m.
func mapID(t *testing.T, m *ebpf.Map) ebpf.MapID {
	t.Helper()
	info, err := m.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, _ := info.ID()
	return id
}
