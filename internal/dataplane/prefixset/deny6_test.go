package prefixset

import (
	"errors"
	"math/big"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// num6 and addr6 convert between an IPv6 address and its 128-bit number.
func num6(a netip.Addr) *big.Int {
	b := a.As16()
	return new(big.Int).SetBytes(b[:])
}

func addr6(n *big.Int) netip.Addr {
	var b [16]byte
	m := new(big.Int).And(n, new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 128), big.NewInt(1)))
	m.FillBytes(b[:])
	return netip.AddrFrom16(b)
}

// randomPrefixes6 draws n IPv6 prefixes of every length, clustered under
// a few /16s and /32s so that they overlap, nest and share nodes.
func randomPrefixes6(rng *rand.Rand, n int) []netip.Prefix {
	bases := []netip.Addr{netip.MustParseAddr("2001:db8::"), netip.MustParseAddr("2a02:1234::"), netip.MustParseAddr("fd00::")}
	out := make([]netip.Prefix, n)
	for i := range out {
		var b [16]byte
		for j := range b {
			b[j] = byte(rng.IntN(256))
		}
		if rng.IntN(4) > 0 {
			base := bases[rng.IntN(len(bases))].As16()
			keep := 2 + 2*rng.IntN(3) // the base's first 2, 4 or 6 bytes
			copy(b[:keep], base[:keep])
		}
		var bits int
		switch rng.IntN(12) {
		case 0:
			bits = rng.IntN(33) // short ones, /0 now and then
			if bits == 0 && rng.IntN(20) > 0 {
				bits = 20
			}
		case 1, 2, 3:
			bits = 33 + rng.IntN(32)
		case 4, 5, 6:
			bits = 44 + rng.IntN(21) // around /48 and /56, as deny lists hold
		default:
			bits = 64 + rng.IntN(65)
		}
		out[i] = netip.PrefixFrom(netip.AddrFrom16(b), bits).Masked()
	}
	return out
}

// probes6 are the addresses a prefix's edges decide: its first and last
// address, the ones just outside, one inside, and random others.
func probes6(rng *rand.Rand, ps []netip.Prefix, random int) []netip.Addr {
	one := big.NewInt(1)
	var out []netip.Addr
	for _, p := range ps {
		lo := num6(p.Addr())
		size := new(big.Int).Lsh(one, uint(128-p.Bits()))
		hi := new(big.Int).Sub(new(big.Int).Add(lo, size), one)
		r := new(big.Int).Or(new(big.Int).Lsh(new(big.Int).SetUint64(rng.Uint64()), 64), new(big.Int).SetUint64(rng.Uint64()))
		in := new(big.Int).Or(lo, r.And(r, new(big.Int).Sub(size, one)))
		out = append(out, addr6(lo), addr6(hi), addr6(new(big.Int).Sub(lo, one)), addr6(new(big.Int).Add(hi, one)), addr6(in))
	}
	for range random {
		var b [16]byte
		for j := range b {
			b[j] = byte(rng.IntN(256))
		}
		out = append(out, netip.AddrFrom16(b))
	}
	return append(out, netip.IPv6Unspecified(), netip.MustParseAddr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"))
}

// The IPv6 deny table answers as the list does, address by address, on
// random lists of every size and shape (with compressed paths), and it
// holds at most two nodes per prefix.
func TestDeny6AgreesWithNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 24))
	for _, n := range []int{0, 1, 2, 5, 30, 300, 3000} {
		for round := range 4 {
			ps := randomPrefixes6(rng, n)
			d, err := BuildDeny6(ps, 0)
			if err != nil {
				t.Fatal(err)
			}
			// With paths compressed, every node but the root denies
			// something or branches: at most two per prefix.
			if len(d.Nodes) > max(1, 2*len(ps)) {
				t.Errorf("%d prefixes: %d nodes, more than two per prefix", n, len(d.Nodes))
			}
			bad := 0
			for _, a := range probes6(rng, ps, 2000) {
				if got, want := d.Denies(a), naive(ps, a); got != want {
					if bad++; bad <= 5 {
						t.Errorf("%d prefixes (round %d): %v denied %v, want %v", n, round, a, got, want)
					}
				}
			}
		}
	}
}

// The shapes at the edges of the trie: /0, /1, a prefix that ends on a
// byte, one that ends within one, /127 and /128, prefixes that share a
// node, and a branch below a compressed path.
func TestDeny6Edges(t *testing.T) {
	for _, c := range []struct {
		list    []string
		in, out []string
		nodes   int
	}{
		{[]string{"::/0"}, []string{"::", "2001:db8::1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"}, nil, 1},
		{[]string{"8000::/1"}, []string{"8000::", "ffff::1"}, []string{"::", "7fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"}, 1},
		{[]string{"2001:db8::/32"}, []string{"2001:db8::", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff"}, []string{"2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", "2001:db9::"}, 2},
		{[]string{"2001:db8:ab00::/44"}, []string{"2001:db8:ab00::", "2001:db8:ab0f:ffff:ffff:ffff:ffff:ffff"}, []string{"2001:db8:aaff:ffff:ffff:ffff:ffff:ffff", "2001:db8:ab10::"}, 2},
		{[]string{"2001:db8::1/128"}, []string{"2001:db8::1"}, []string{"2001:db8::", "2001:db8::2", "2001:db9::1", "2001:db8:0:1::1", "::1"}, 2},
		{[]string{"2001:db8::/127"}, []string{"2001:db8::", "2001:db8::1"}, []string{"2001:db8::2", "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff"}, 2},
		{[]string{"2001:db8:1::/48", "2001:db8:2::/48", "2001:db8::/32"}, []string{"2001:db8:1::", "2001:db8:3::"}, []string{"2001:db9::"}, 2},
		{[]string{"2001:db8:1::/48", "2001:db8:2::/48", "2001:db8:2:5::/64"}, []string{"2001:db8:1::", "2001:db8:2:ffff::"}, []string{"2001:db8:3::", "2001:db8::"}, 2},
		// A branch deep down: the root, the node of byte 14 (the path to it
		// compressed), and one node of byte 15 on each side; addresses that
		// differ only in the bytes the compressed path skips are allowed.
		{[]string{"2001:db8::1/128", "2001:db8::100/128"}, []string{"2001:db8::1", "2001:db8::100"},
			[]string{"2001:db8::2", "2001:db8::101", "2001:db8::200", "2001:db9::1", "2001:db8:1::1", "2001:db8::1:1", "3001:db8::1"}, 4},
	} {
		ps := parse(t, c.list)
		d, err := BuildDeny6(ps, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Nodes) != c.nodes {
			t.Errorf("%v: %d nodes, want %d", c.list, len(d.Nodes), c.nodes)
		}
		for _, s := range c.in {
			if !d.Denies(netip.MustParseAddr(s)) {
				t.Errorf("%v: %s allowed, want denied", c.list, s)
			}
		}
		for _, s := range c.out {
			if d.Denies(netip.MustParseAddr(s)) {
				t.Errorf("%v: %s denied, want allowed", c.list, s)
			}
		}
	}
}

// What the IPv6 table refuses, and a list that needs more nodes than it
// may take.
func TestDeny6Refuses(t *testing.T) {
	for _, s := range []string{"10.0.0.0/8", "::ffff:10.0.0.0/104", "2001:db8::1/64"} {
		if _, err := BuildDeny6(parse(t, []string{s}), 0); err == nil {
			t.Errorf("%s: built, want an error", s)
		}
	}
	// The root, the branch at byte 5, one node of byte 15 each: 4.
	ps := parse(t, []string{"2001:db8::1/128", "2001:db8:1::1/128"})
	if _, err := BuildDeny6(ps, 3); !errors.Is(err, ErrDeny6Full) {
		t.Fatalf("4 nodes in 3: %v, want ErrDeny6Full", err)
	}
	if d, err := BuildDeny6(ps, 4); err != nil || len(d.Nodes) != 4 {
		t.Fatalf("4 nodes in 4: %d nodes, %v", len(d.Nodes), err)
	}
}
