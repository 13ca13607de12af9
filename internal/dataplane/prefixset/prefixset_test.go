package prefixset

import (
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// naive is the reference: an address is in the set when a prefix of the
// list contains it.
func naive(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func addr4(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// randomPrefixes draws n IPv4 prefixes of every length, clustered in a
// few /8s so that they overlap, nest and share nodes and leaves.
func randomPrefixes(rng *rand.Rand, n int) []netip.Prefix {
	out := make([]netip.Prefix, n)
	for i := range out {
		v := rng.Uint32()
		if rng.IntN(4) > 0 {
			v = v&0x00ffffff | uint32(10+rng.IntN(3))<<24
		}
		// Long prefixes most, as deny lists hold; now and then a short
		// one that covers others.
		var bits int
		switch rng.IntN(24) {
		case 0:
			bits = 10 + rng.IntN(9)
		case 1:
			if rng.IntN(50) == 0 {
				bits = 4 + rng.IntN(6)
			} else {
				bits = 16 + rng.IntN(3)
			}
		case 2, 3, 4, 5:
			bits = 19 + rng.IntN(6)
		default:
			bits = 25 + rng.IntN(8)
		}
		out[i] = netip.PrefixFrom(addr4(v), bits).Masked()
	}
	return out
}

// probes are the addresses whose verdict a prefix's edges decide: its
// first and last address and the ones just outside, and random others.
func probes(rng *rand.Rand, ps []netip.Prefix, random int) []netip.Addr {
	var out []netip.Addr
	for _, p := range ps {
		s := spanOf(p)
		out = append(out, addr4(s.lo), addr4(s.hi), addr4(s.lo-1), addr4(s.hi+1), addr4(s.lo+uint32(rng.Uint64N(uint64(s.hi-s.lo)+1))))
	}
	for range random {
		out = append(out, addr4(rng.Uint32()))
	}
	return append(out, addr4(0), addr4(^uint32(0)))
}

// The deny table answers as the list does, address by address, on
// random lists of every size and shape.
func TestDeny4AgreesWithNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 5, 30, 300, 3000} {
		for round := range 5 {
			ps := randomPrefixes(rng, n)
			d, err := BuildDeny4(ps, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Cells) > RootCells+2*len(ps) {
				t.Errorf("%d prefixes: %d cells, more than the root and one node and one leaf per prefix (%d)", n, len(d.Cells), RootCells+2*len(ps))
			}
			bad := 0
			for _, a := range probes(rng, ps, 2000) {
				if got, want := d.Denies(a), naive(ps, a); got != want {
					if bad++; bad <= 5 {
						t.Errorf("%d prefixes (round %d): %v denied %v, want %v", n, round, a, got, want)
					}
				}
			}
		}
	}
}

func TestDeny4Edges(t *testing.T) {
	for _, tc := range []struct {
		list  []string
		in    []string
		out   []string
		cells int
	}{
		{list: nil, out: []string{"0.0.0.0", "255.255.255.255", "10.0.0.1"}, cells: RootCells},
		{list: []string{"0.0.0.0/0"}, in: []string{"0.0.0.0", "255.255.255.255", "10.1.2.3"}, cells: RootCells},
		{list: []string{"10.0.0.1/32"}, in: []string{"10.0.0.1"}, out: []string{"10.0.0.0", "10.0.0.2", "10.0.1.1", "11.0.0.1"}, cells: RootCells + 2},
		{list: []string{"255.255.255.255/32"}, in: []string{"255.255.255.255"}, out: []string{"255.255.255.254", "0.0.0.0"}},
		{list: []string{"0.0.0.0/32"}, in: []string{"0.0.0.0"}, out: []string{"0.0.0.1", "255.255.255.255"}},
		// A /18 is a root entry; one bit shorter and longer.
		{list: []string{"10.0.64.0/18"}, in: []string{"10.0.64.0", "10.0.127.255"}, out: []string{"10.0.63.255", "10.0.128.0"}, cells: RootCells},
		{list: []string{"10.0.0.0/17"}, in: []string{"10.0.0.0", "10.0.127.255"}, out: []string{"9.255.255.255", "10.0.128.0"}, cells: RootCells},
		{list: []string{"10.0.0.0/19"}, in: []string{"10.0.0.0", "10.0.31.255"}, out: []string{"9.255.255.255", "10.0.32.0"}, cells: RootCells + 1},
		// A /24 is a node bit; a /25 a leaf.
		{list: []string{"10.0.5.0/24"}, in: []string{"10.0.5.0", "10.0.5.255"}, out: []string{"10.0.4.255", "10.0.6.0"}, cells: RootCells + 1},
		{list: []string{"10.0.5.128/25"}, in: []string{"10.0.5.128", "10.0.5.255"}, out: []string{"10.0.5.127", "10.0.6.0"}, cells: RootCells + 2},
		// Leaves of one node in order: the popcount finds each.
		{list: []string{"10.0.1.7/32", "10.0.3.9/32", "10.0.63.1/32", "10.0.2.0/24"}, in: []string{"10.0.1.7", "10.0.3.9", "10.0.63.1", "10.0.2.77"},
			out: []string{"10.0.1.8", "10.0.3.8", "10.0.63.0", "10.0.0.7"}, cells: RootCells + 1 + 3},
		// Covered prefixes take no room.
		{list: []string{"10.0.0.0/8", "10.1.2.3/32", "10.200.0.0/16"}, in: []string{"10.255.255.255"}, out: []string{"11.0.0.0"}, cells: RootCells},
	} {
		ps := parse(t, tc.list)
		d, err := BuildDeny4(ps, 0)
		if err != nil {
			t.Fatalf("%v: %v", tc.list, err)
		}
		for _, a := range tc.in {
			if !d.Denies(netip.MustParseAddr(a)) {
				t.Errorf("%v: %s allowed, want denied", tc.list, a)
			}
		}
		for _, a := range tc.out {
			if d.Denies(netip.MustParseAddr(a)) {
				t.Errorf("%v: %s denied, want allowed", tc.list, a)
			}
		}
		if tc.cells != 0 && len(d.Cells) != tc.cells {
			t.Errorf("%v: %d cells, want %d", tc.list, len(d.Cells), tc.cells)
		}
	}
}

func TestDeny4Refuses(t *testing.T) {
	for _, tc := range []struct {
		list []string
		want string
	}{
		{[]string{"2001:db8::/32"}, "an IPv6 prefix in an IPv4 structure"},
		{[]string{"::ffff:10.0.0.0/104"}, "IPv4-mapped"},
	} {
		if _, err := BuildDeny4(parse(t, tc.list), 0); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one saying %q", tc.list, err, tc.want)
		}
	}
	if _, err := BuildDeny4([]netip.Prefix{netip.PrefixFrom(netip.MustParseAddr("10.0.0.1"), 8)}, 0); err == nil || !strings.Contains(err.Error(), "host bits") {
		t.Errorf("host bits: %v", err)
	}
	ps := parse(t, []string{"10.0.0.1/32", "10.1.0.1/32"})
	if _, err := BuildDeny4(ps, RootCells+3); err == nil {
		t.Error("4 cells beyond the root fit in 3")
	}
	if _, err := BuildDeny4(ps, RootCells+4); err != nil {
		t.Error(err)
	}
}

// The worst a list can do: every prefix a /32 in a /18 and /24 of its
// own takes one node and one leaf.
func TestDeny4Worst(t *testing.T) {
	var ps []netip.Prefix
	for i := range 1000 {
		ps = append(ps, netip.PrefixFrom(addr4(uint32(i)<<14|0x101), 32))
	}
	d, err := BuildDeny4(ps, RootCells+2*len(ps))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Cells) != RootCells+2*len(ps) {
		t.Errorf("%d cells, want %d", len(d.Cells), RootCells+2*len(ps))
	}
	for _, p := range ps {
		if !d.Denies(p.Addr()) || d.Denies(p.Addr().Next()) {
			t.Fatalf("%v", p)
		}
	}
}

func TestRanges4AgreesWithNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 2, 3, 7, 16, 33, 64} {
		for round := range 20 {
			ps := randomPrefixes(rng, n)
			r, err := Ranges4(ps)
			if err != nil {
				t.Fatal(err)
			}
			bad := 0
			for _, a := range probes(rng, ps, 500) {
				if got, want := Holds(&r, a), naive(ps, a); got != want {
					if bad++; bad <= 5 {
						t.Errorf("%d prefixes (round %d): %v in ranges %v, want %v", n, round, a, got, want)
					}
				}
			}
		}
	}
}

func TestRanges4Edges(t *testing.T) {
	for _, tc := range []struct {
		list    []string
		in, out []string
	}{
		{[]string{"0.0.0.0/0"}, []string{"0.0.0.0", "255.255.255.255"}, nil},
		{[]string{"10.0.0.0/8"}, []string{"10.0.0.0", "10.255.255.255"}, []string{"9.255.255.255", "11.0.0.0", "0.0.0.0", "255.255.255.255"}},
		{[]string{"192.0.2.7/32"}, []string{"192.0.2.7"}, []string{"192.0.2.6", "192.0.2.8"}},
		{[]string{"255.255.255.255/32", "0.0.0.0/32"}, []string{"255.255.255.255", "0.0.0.0"}, []string{"255.255.255.254", "0.0.0.1"}},
		// Adjacent and nested ranges merge.
		{[]string{"10.0.0.0/25", "10.0.0.128/25", "10.0.0.5/32"}, []string{"10.0.0.0", "10.0.0.255"}, []string{"10.0.1.0"}},
	} {
		r, err := Ranges4(parse(t, tc.list))
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range tc.in {
			if !Holds(&r, netip.MustParseAddr(a)) {
				t.Errorf("%v: %s outside, want inside", tc.list, a)
			}
		}
		for _, a := range tc.out {
			if Holds(&r, netip.MustParseAddr(a)) {
				t.Errorf("%v: %s inside, want outside", tc.list, a)
			}
		}
	}
	// Merged, 128 prefixes that make two intervals fit.
	var ps []netip.Prefix
	for i := range 128 {
		ps = append(ps, netip.PrefixFrom(addr4(0x0a000000+uint32(i)), 32), netip.PrefixFrom(addr4(0x0b000000+uint32(i)), 32))
	}
	r, err := Ranges4(ps)
	if err != nil {
		t.Fatal(err)
	}
	if r.Lo[0] != 0x0a000000 || r.Hi[0] != 0x0a00007f || r.Lo[1] != 0x0b000000 || r.Lo[wire.MaxRanges-1] != 0x0b000000 {
		t.Errorf("intervals %x-%x, %x, last %x", r.Lo[0], r.Hi[0], r.Lo[1], r.Lo[wire.MaxRanges-1])
	}
	// 65 disjoint ones do not.
	ps = nil
	for i := range wire.MaxRanges + 1 {
		ps = append(ps, netip.PrefixFrom(addr4(0x0a000000+2*uint32(i)), 32))
	}
	if _, err := Ranges4(ps); err == nil {
		t.Errorf("%d disjoint ranges fit", len(ps))
	}
	if _, err := Ranges4(nil); err == nil {
		t.Error("no ranges built")
	}
}

func parse(t *testing.T, list []string) []netip.Prefix {
	t.Helper()
	var out []netip.Prefix
	for _, s := range list {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// Building a list of 100 000 prefixes spread over the address space, as
// a deny list of attackers' addresses is.
func BenchmarkBuildDeny4(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	ps := make([]netip.Prefix, 100_000)
	for i := range ps {
		ps[i] = netip.PrefixFrom(addr4(rng.Uint32()), 24+rng.IntN(9)).Masked()
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := BuildDeny4(ps, 0); err != nil {
			b.Fatal(err)
		}
	}
}
