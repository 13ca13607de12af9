package lbharness

import (
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/dataplane/lb"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/internal/maglev"
)

// The programs an A/B run measures, in the order of each round: the
// built-in floor 2 and LB path, then the other object's LB path and
// floor 2.
const (
	ABFloor      = "floor_parse_encap"
	ABLB         = "bench_lb"
	ABOtherLB    = "other:bench_lb"
	ABOtherFloor = "other:floor_parse_encap"
)

// RunAB measures the built-in LB path and floor 2 beside the same two
// programs from another build of bpf/bench_floors.c (the object at path:
// a variant of the code, compiled by hand), interleaved round by round on
// one CPU. The other object runs on the built-in object's maps, so both
// forward the same service through the same tables, next-hop cache and
// counters; a variant that changes a map's layout is refused, and maps
// only the variant has are created empty. This is how
// docs/benchmarks.md profiles by elimination and weighs a change before
// it is made.
func RunAB(cfg BenchConfig, path string) ([]BenchResult, error) {
	spec, err := ebpf.LoadCollectionSpec(path)
	if err != nil {
		return nil, fmt.Errorf("the object to compare: %w", err)
	}
	for _, name := range []string{"bench_lb", "floor_parse_encap"} {
		if spec.Programs[name] == nil {
			return nil, fmt.Errorf("the object to compare, %s, has no program %s: build it from bpf/bench_floors.c", path, name)
		}
	}

	env, err := openBenchEnv("xlb-bench-ab", cfg.Backends)
	if err != nil {
		return nil, err
	}
	defer env.close()
	objs := env.objs

	other, err := loadOther(spec, env.d, env.node)
	if err != nil {
		return nil, err
	}
	defer other.Close()

	progs := []benchProg{
		{ABFloor, objs.FloorParseEncap, xdpVerdictTX, nil}, {ABLB, objs.BenchLb, xdpVerdictTX, nil},
		{ABOtherLB, other.Programs["bench_lb"], xdpVerdictTX, nil}, {ABOtherFloor, other.Programs["floor_parse_encap"], xdpVerdictTX, nil},
	}
	out, err := runInterleaved(env.ns, benchFrame(env.vip), progs, cfg.Rounds, cfg.Repeat)
	if err != nil {
		return nil, err
	}
	// The built-in LB program must have counted every run as a forward;
	// the other may count less (a variant without counters), but no
	// packet of either may have taken a pass or drop reason.
	if err := env.checkForwarded(cfg); err != nil {
		return nil, err
	}
	return out, nil
}

// loadOther loads the object to compare on the maps of the built-in one,
// with the same load-time parameters.
func loadOther(spec *ebpf.CollectionSpec, d *lb.Dataplane, node netip.Addr) (*ebpf.Collection, error) {
	for name, v := range map[string]any{"node_addr": wire.Addr4(node), "table_size": uint32(maglev.DefaultSize)} {
		if sv, ok := spec.Variables[name]; ok {
			if err := sv.Set(v); err != nil {
				return nil, fmt.Errorf("the object to compare: %s: %w", name, err)
			}
		}
	}
	for name, size := range map[string]uint32{"maglev_tables": maglev.DefaultSize, "chain_tables": maglev.DefaultSize + 1} {
		if m, ok := spec.Maps[name]; ok && m.InnerMap != nil {
			m.InnerMap.MaxEntries = size
		}
	}
	// A map of the built-in object's name must be the same map: loading
	// refuses one whose type, sizes or flags differ. A map the built-in
	// object lacks (a variant's new layout) is created empty.
	own := d.Maps()
	repl := map[string]*ebpf.Map{}
	for name := range spec.Maps {
		if m, ok := own[name]; ok {
			repl[name] = m
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: repl})
	if err != nil {
		return nil, &LoadError{Err: err}
	}
	// Odd, as Open and loadBenchOn make it: generation 0 never
	// matches, so the next-hop cache works as on a node.
	if v, ok := coll.Variables["nh_gen"]; ok {
		if err := v.Set(uint32(1)); err != nil {
			coll.Close()
			return nil, err
		}
	}
	return coll, nil
}

// LoadError is RunAB's error when the kernel refused the object to
// compare (the verifier: too much stack, say), as opposed to a broken
// harness.
type LoadError struct{ Err error }

func (e *LoadError) Error() string {
	return "load the object to compare on the built-in one's maps: " + e.Err.Error()
}

func (e *LoadError) Unwrap() error { return e.Err }
