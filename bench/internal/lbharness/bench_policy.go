package lbharness

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/dataplane/lb"
	"github.com/xlbproject/xlb/internal/dataplane/prefixset"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/testbed/netns"
)

// PolicyConfig sets a run of the policy cases: the LB path with a deny
// list of each size, and with source ranges, beside the path without
// any, and the deny table against a kernel LPM trie of the same prefixes.
type PolicyConfig struct {
	Sizes  []int // deny list sizes, e.g. 1, 100, 10 000, 100 000
	Repeat uint32
	Rounds int
}

// DefaultPolicySizes are the deny list sizes the flatness target names.
var DefaultPolicySizes = []int{1, 100, 10_000, 100_000}

// PolicyResult is one program on one list, measured in the same rounds
// as every other.
type PolicyResult struct {
	BenchResult
	// Case says what the maps hold: "none", "deny N", "ranges N" or
	// "deny N + ranges M".
	Case     string `json:"case"`
	Prefixes int    `json:"prefixes"`         // in the deny list
	Ranges   int    `json:"ranges,omitempty"` // in the service's source ranges
	// OverBase is the median over rounds of this program's round less
	// its base's in the same round: the LB path without any list for
	// bench_lb, floor_parse_tx for the floors.
	OverBase float64 `json:"over_base_ns"`
}

// PolicyUpdate is what a deny list of a size costs to install.
type PolicyUpdate struct {
	// Structure is "table" (the LB's deny table, built in Go and
	// swapped in whole) or "lpm" (a kernel LPM trie, filled entry by
	// entry).
	Structure string `json:"structure"`
	Prefixes  int    `json:"prefixes"`
	// Seconds is the median of the installs timed: for the table, from
	// the prefix list to the swap's return (build, create, fill, swap);
	// for the trie, the updates of every prefix into an empty trie.
	Seconds float64 `json:"seconds"`
	Runs    int     `json:"runs"`
	// Bytes is the kernel's memlock of the structure's map (its
	// memory); PerPrefix that over Prefixes.
	Bytes     uint64  `json:"bytes"`
	PerPrefix float64 `json:"bytes_per_prefix"`
	// Cells is how many of the table's cells the list uses (the rest
	// are zero), for the table.
	Cells int `json:"cells,omitempty"`
}

// PolicyReport is a policy run.
type PolicyReport struct {
	Harness BenchResult    `json:"harness"`
	Floor   BenchResult    `json:"floor"` // floor_parse_tx
	Results []PolicyResult `json:"results"`
	Updates []PolicyUpdate `json:"updates"`
	// Spread is the most any deny list size's LB path takes over the
	// least, on best rounds; SpreadPaired the same on each round's
	// difference (median over rounds) between the largest and the
	// smallest list. FirstList is what the smallest list costs over
	// none (median of the rounds' differences).
	Spread       float64 `json:"spread_ns"`
	SpreadPaired float64 `json:"spread_paired_ns"`
	FirstList    float64 `json:"first_list_ns"`
	// Target is the most Spread may be.
	Target float64 `json:"target_ns"`
}

// policyStack is one load of the benchmark programs on a data plane of
// their own, with one set of lists.
type policyStack struct {
	objs *benchObjects
	d    *lb.Dataplane
}

func (s policyStack) close() { closeBench(s.objs, s.d) }

// benchSource is the source of benchFrame's packet: every list leaves
// it allowed, and holds 10.0.2.3/32 beside it, so that the deny table's
// lookup for it reads all three levels (root, node, leaf) at every size.
var (
	benchSource   = netip.MustParseAddr("10.0.2.2")
	benchNeighbor = netip.MustParsePrefix("10.0.2.3/32")
)

// PolicyPrefixes returns n IPv4 prefixes spread over the address space,
// /24 to /32 as deny lists of attackers' addresses hold, none covering
// benchSource, the first benchNeighbor. The same n gives the same list.
func PolicyPrefixes(n int) []netip.Prefix {
	rng := rand.New(rand.NewPCG(uint64(n), 22))
	out := []netip.Prefix{benchNeighbor}
	for len(out) < n {
		var b [4]byte
		v := rng.Uint32()
		b[0], b[1], b[2], b[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
		p := netip.PrefixFrom(netip.AddrFrom4(b), 24+rng.IntN(9)).Masked()
		if p.Contains(benchSource) {
			continue
		}
		out = append(out, p)
	}
	return out[:n]
}

// rangesFor returns a service's n source ranges, n at most
// wire.MaxRanges: disjoint /24s, one of them benchSource's.
func rangesFor(n int) []netip.Prefix {
	out := []netip.Prefix{netip.MustParsePrefix("10.0.2.0/24")}
	for i := 1; i < n; i++ {
		out = append(out, netip.PrefixFrom(netip.AddrFrom4([4]byte{172, 16, byte(i), 0}), 24))
	}
	return out
}

// RunPolicy measures the LB program with no list, with a deny list of
// each of cfg.Sizes, with source ranges of 1 and wire.MaxRanges
// intervals, and with the largest deny list and the most ranges
// together; and the deny table against a kernel LPM trie of the same
// prefixes (each a floor with one lookup). Every program is interleaved
// with every other, round after round, in one namespace: each list is
// in a data plane of its own, all of them forwarding the same packet
// (allowed by every list) to the same backends. Then it times installing
// each list size in either structure and reads their memory.
func RunPolicy(cfg PolicyConfig) (PolicyReport, error) {
	var rep PolicyReport
	rep.Target = 3
	ns := fmt.Sprintf("xlb-bench-policy-%d", os.Getpid())
	if err := benchNS(ns); err != nil {
		return rep, err
	}
	defer exec.Command("ip", "netns", "del", ns).Run()

	var stacks []policyStack
	defer func() {
		for _, s := range stacks {
			s.close()
		}
	}()
	vip := netip.MustParseAddr("10.99.0.1")
	key := lb.ServiceKey{VIP: vip, Port: 80, Proto: lb.ProtoTCP}
	stack := func(deny, ranges int) (policyStack, error) {
		objs, d, err := loadBenchDataplane(netip.MustParseAddr("10.0.1.2"))
		if err != nil {
			return policyStack{}, err
		}
		s := policyStack{objs, d}
		stacks = append(stacks, s)
		if err := benchService(d, key, 16); err != nil {
			return s, err
		}
		if deny > 0 {
			ps := PolicyPrefixes(deny)
			if err := d.SetDenyList(ps); err != nil {
				return s, err
			}
			if err := fillLPM(objs.BenchDenyLpm, ps); err != nil {
				return s, err
			}
		}
		if ranges > 0 {
			if err := d.SetSourceRanges(0, key, rangesFor(ranges)); err != nil {
				return s, err
			}
		}
		return s, nil
	}

	base, err := stack(0, 0)
	if err != nil {
		return rep, err
	}
	progs := []benchProg{
		{"wrap_only", base.objs.WrapOnly, xdpVerdictTX, nil},
		{"floor_parse_tx", base.objs.FloorParseTx, xdpVerdictTX, nil},
		{"bench_lb", base.objs.BenchLb, xdpVerdictTX, nil},
	}
	results := []PolicyResult{{Case: "none"}}
	type ref struct{ prog, base int }
	var refs []ref
	refs = append(refs, ref{2, 2})
	add := func(s policyStack, c PolicyResult) {
		progs = append(progs, benchProg{"bench_lb", s.objs.BenchLb, xdpVerdictTX, nil})
		results = append(results, c)
		refs = append(refs, ref{len(progs) - 1, 2})
	}
	largest := 0
	for _, n := range cfg.Sizes {
		s, err := stack(n, 0)
		if err != nil {
			return rep, err
		}
		largest = max(largest, n)
		add(s, PolicyResult{Case: fmt.Sprintf("deny %d", n), Prefixes: n})
		for _, f := range []struct {
			name string
			prog *ebpf.Program
		}{{"floor_deny_table", s.objs.FloorDenyTable}, {"floor_deny_lpm", s.objs.FloorDenyLpm}} {
			progs = append(progs, benchProg{f.name, f.prog, xdpVerdictTX, nil})
			results = append(results, PolicyResult{Case: fmt.Sprintf("deny %d", n), Prefixes: n})
			refs = append(refs, ref{len(progs) - 1, 1})
		}
	}
	for _, r := range []int{1, wire.MaxRanges} {
		s, err := stack(0, r)
		if err != nil {
			return rep, err
		}
		add(s, PolicyResult{Case: fmt.Sprintf("ranges %d", r), Ranges: r})
	}
	if largest > 0 {
		s, err := stack(largest, wire.MaxRanges)
		if err != nil {
			return rep, err
		}
		add(s, PolicyResult{Case: fmt.Sprintf("deny %d + ranges %d", largest, wire.MaxRanges), Prefixes: largest, Ranges: wire.MaxRanges})
	}

	out, err := runInterleaved(ns, benchFrame(vip), progs, cfg.Rounds, cfg.Repeat)
	if err != nil {
		return rep, err
	}
	rep.Harness, rep.Floor = out[0], out[1]
	for i, r := range refs {
		res := &results[i]
		res.BenchResult = out[r.prog]
		res.BenchResult.Description = policyDescriptions[out[r.prog].Name]
		res.NetNs = res.MinNs - rep.Harness.MinNs
		res.OverBase = PairedDiff(out[r.prog].RoundsNs, out[r.base].RoundsNs)
	}
	rep.Results = results

	// Every LB run forwarded: no list dropped the packet.
	for _, s := range stacks {
		c, err := s.d.ServiceCounters(0)
		if err != nil {
			return rep, err
		}
		if err := checkHits(s.d, c.Packets, uint64(cfg.Rounds)*uint64(cfg.Repeat)+1); err != nil {
			return rep, err
		}
	}

	// And the lists were read: a packet from their first prefix, or from
	// outside the ranges, is dropped by every data plane that has them.
	if err := checkPolicyDrops(ns, vip, stacks, cfg.Sizes); err != nil {
		return rep, err
	}

	var deny []PolicyResult
	for _, r := range rep.Results {
		if r.Name == "bench_lb" && r.Prefixes > 0 && r.Ranges == 0 {
			deny = append(deny, r)
		}
	}
	if len(deny) > 0 {
		lo, hi := deny[0].MinNs, deny[0].MinNs
		for _, r := range deny {
			lo, hi = min(lo, r.MinNs), max(hi, r.MinNs)
		}
		rep.Spread = hi - lo
		first, last := deny[0], deny[len(deny)-1]
		rep.SpreadPaired = PairedDiff(last.RoundsNs, first.RoundsNs)
		rep.FirstList = first.OverBase
	}

	if rep.Updates, err = policyUpdates(cfg.Sizes); err != nil {
		return rep, err
	}
	return rep, nil
}

var policyDescriptions = map[string]string{
	"bench_lb":         "the full LB path (bench_lb) with these lists",
	"floor_deny_table": "parse, one lookup of the source in the LB's deny table, XDP_TX",
	"floor_deny_lpm":   "parse, one lookup of the source in a kernel LPM trie of the same prefixes, XDP_TX",
}

// fillLPM puts ps into an LPM trie keyed as xlb's (wire.PrefixKey).
func fillLPM(m *ebpf.Map, ps []netip.Prefix) error {
	for _, p := range ps {
		if err := m.Put(wire.PrefixKey(p), uint8(1)); err != nil {
			return fmt.Errorf("LPM trie: put %v: %w", p, err)
		}
	}
	return nil
}

// policyUpdates times installing a deny list of each size in the LB's
// deny table (SetDenyList, onto a table that holds another list of the
// same size, as a change does) and in an empty LPM trie, and reads each
// structure's memory.
func policyUpdates(sizes []int) ([]PolicyUpdate, error) {
	var out []PolicyUpdate
	for _, n := range sizes {
		runs := 5
		if n <= 10_000 {
			runs = 11
		}
		d, err := lb.New(lb.Options{NodeAddr: netip.MustParseAddr("10.0.1.2"), TableSize: 251})
		if err != nil {
			return nil, err
		}
		ps := PolicyPrefixes(n)
		other := PolicyPrefixes(n + 1)[1:]
		var times []float64
		for i := range runs {
			list := ps
			if i%2 == 1 {
				list = other
			}
			start := time.Now()
			if err := d.SetDenyList(list); err != nil {
				d.Close()
				return nil, err
			}
			times = append(times, time.Since(start).Seconds())
		}
		objs := d.Maps()
		var inner ebpf.MapID
		err = objs["deny4"].Lookup(uint32(0), &inner)
		var mem uint64
		if err == nil {
			mem, err = memlockOfID(inner)
		}
		d.Close()
		if err != nil {
			return nil, fmt.Errorf("memory of the deny table: %w", err)
		}
		t, _ := buildCells(ps)
		out = append(out, PolicyUpdate{Structure: "table", Prefixes: n, Seconds: median(times), Runs: runs, Bytes: mem, PerPrefix: float64(mem) / float64(n), Cells: t})

		spec, err := loadBench()
		if err != nil {
			return nil, err
		}
		times = nil
		for range runs {
			m, err := ebpf.NewMap(spec.Maps["bench_deny_lpm"])
			if err != nil {
				return nil, err
			}
			start := time.Now()
			err = fillLPM(m, ps)
			times = append(times, time.Since(start).Seconds())
			if err == nil {
				mem, err = memlockOf(m)
			}
			m.Close()
			if err != nil {
				return nil, err
			}
		}
		out = append(out, PolicyUpdate{Structure: "lpm", Prefixes: n, Seconds: median(times), Runs: runs, Bytes: mem, PerPrefix: float64(mem) / float64(n)})
	}
	return out, nil
}

// buildCells is how many cells of the deny table ps take.
func buildCells(ps []netip.Prefix) (int, error) {
	t, err := prefixset.BuildDeny4(ps, 0)
	return len(t.Cells), err
}

// memlockOfID reads the memory of the map with kernel ID id.
func memlockOfID(id ebpf.MapID) (uint64, error) {
	m, err := ebpf.NewMapFromID(id)
	if err != nil {
		return 0, err
	}
	defer m.Close()
	return memlockOf(m)
}

// memlockOf reads a map's memory as the kernel accounts it (memlock in
// its fdinfo).
func memlockOf(m *ebpf.Map) (uint64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/self/fdinfo/%d", m.FD()))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "memlock:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, errors.New("no memlock in the map's fdinfo")
}

// checkPolicyDrops runs, through each stack's LB program, a packet from
// the deny lists' first prefix (benchNeighbor) and one from outside the
// ranges, and checks that the stacks with lists drop them: the measured
// runs read the lists they were meant to. Stacks are in RunPolicy's
// order: none, one per deny list size, ranges 1 and 64, both.
func checkPolicyDrops(ns string, vip netip.Addr, stacks []policyStack, sizes []int) error {
	denied := benchFrame(vip)
	copy(denied[14+12:], benchNeighbor.Addr().AsSlice())
	outside := benchFrame(vip)
	copy(outside[14+12:], []byte{192, 0, 2, 1})
	for _, f := range [][]byte{denied, outside} {
		fixChecksum(f)
	}
	return netns.Do(ns, func() error {
		idx, err := benchThread()
		if err != nil {
			return err
		}
		for i, s := range stacks {
			hasDeny := i >= 1 && i <= len(sizes) || i == len(stacks)-1 && len(stacks) > len(sizes)+3
			hasRanges := i > len(sizes)
			for _, c := range []struct {
				frame []byte
				want  bool
			}{{denied, hasDeny}, {outside, hasRanges}} {
				v, _, _, err := testRunXDP(s.objs.BenchLb.FD(), c.frame, idx, 1)
				if err != nil {
					return err
				}
				if dropped := v == xdpVerdictDrop; dropped != c.want {
					return fmt.Errorf("data plane %d of the policy run: a packet that its lists should drop=%v got %s", i, c.want, xdpVerdictName(v))
				}
			}
		}
		return nil
	})
}

// fixChecksum writes the IPv4 header checksum of an Ethernet frame.
func fixChecksum(f []byte) {
	ip := f[14:34]
	ip[10], ip[11] = 0, 0
	var s uint32
	for i := 0; i < 20; i += 2 {
		s += uint32(ip[i])<<8 | uint32(ip[i+1])
	}
	s = (s & 0xffff) + s>>16
	s = (s & 0xffff) + s>>16
	ip[10], ip[11] = byte(^s>>8), byte(^s)
}
