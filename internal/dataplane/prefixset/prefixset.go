// Package prefixset builds the LB program's policy structures from lists
// of prefixes, in the layouts the program reads (bpf/xlb_policy.h): the
// node's deny table, a trie of fixed depth whose lookup reads at most
// three cells whatever the list holds, and a service's source ranges,
// sorted intervals that a binary search of fixed depth walks. Each is
// built whole here and swapped in whole by internal/dataplane/lb, so a
// packet never sees a half-built one. Pure Go. Each family has builders
// and layouts of its own (its addresses need other strides), which is why
// the names carry the family: the IPv6 deny table is a trie of stride 8
// (deny6.go); IPv6 source ranges are built by internal/dataplane/lb.
package prefixset

import (
	"cmp"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// Geometry of the deny table (enum xlb_deny_layout): root entries per
// /rootBits, 8 to a cell; a node's bit per /24; a leaf's bit per address.
const (
	rootBits     = wire.DenyRootBits
	nodeBits     = wire.DenyNodeBits
	leafBits     = 32 - rootBits - nodeBits
	rootEntries  = 1 << rootBits
	entriesPer   = 8
	RootCells    = rootEntries / entriesPer
	nodeSlots    = 1 << nodeBits
	leafAddrs    = 1 << leafBits
	leafPrefix   = rootBits + nodeBits // a leaf covers a /24
	denyAllEntry = wire.DenyAll
)

// ErrFamily is the error of an IPv6 prefix given to an IPv4 builder.
var ErrFamily = errors.New("an IPv6 prefix in an IPv4 structure")

// checkPrefix returns p as the structures key it (IPv4, network address),
// or why it cannot be: invalid, IPv6, or with host bits set.
func checkPrefix(p netip.Prefix) (netip.Prefix, error) {
	switch {
	case !p.IsValid():
		return p, fmt.Errorf("invalid prefix %v", p)
	case p.Addr().Is4In6():
		return p, fmt.Errorf("%v: an IPv4-mapped IPv6 prefix; write it as IPv4", p)
	case !p.Addr().Is4():
		return p, fmt.Errorf("%v: %w", p, ErrFamily)
	case p.Masked() != p:
		return p, fmt.Errorf("%v has host bits set: its network is %v", p, p.Masked())
	}
	return p, nil
}

// span is an inclusive interval of IPv4 addresses in host order.
type span struct{ lo, hi uint32 }

func spanOf(p netip.Prefix) span {
	a := p.Addr().As4()
	lo := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	return span{lo, lo | uint32(uint64(1)<<(32-p.Bits())-1)}
}

// disjoint returns the prefixes of ps that no other one covers, sorted by
// address: the same set of addresses, each covered once. ps must be
// checked (checkPrefix).
func disjoint(ps []netip.Prefix) []netip.Prefix {
	sorted := slices.Clone(ps)
	// By address, and the shorter prefix first where two start alike:
	// then a prefix is covered exactly when it starts within the last
	// one kept.
	slices.SortFunc(sorted, func(a, b netip.Prefix) int {
		return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
	})
	out := sorted[:0]
	var end uint32
	for i, p := range sorted {
		s := spanOf(p)
		if i > 0 && len(out) > 0 && s.lo <= end {
			continue
		}
		out = append(out, p)
		end = s.hi
	}
	return out
}

// Deny4 is a built IPv4 deny table: its cells, in the order the program
// indexes them. Cells beyond Cells' length are zero.
type Deny4 struct {
	Cells []wire.DenyCell
	// Prefixes is how many prefixes it holds once those covered by
	// another are left out.
	Prefixes int
}

// node is a /rootBits block with prefixes longer than /rootBits, while
// the table is built.
type node struct {
	deny, kids uint64
	leaves     [][leafAddrs / 32]uint32 // in the order of kids' bits
}

// BuildDeny4 builds the deny table of IPv4 prefixes ps: every address a
// prefix covers is denied, any other allowed. Overlapping prefixes are
// fine. It fails on an IPv6 prefix or one with host bits set, or when
// the table would need more than maxCells cells (0: no limit).
func BuildDeny4(ps []netip.Prefix, maxCells int) (Deny4, error) {
	for _, p := range ps {
		if _, err := checkPrefix(p); err != nil {
			return Deny4{}, err
		}
	}
	list := disjoint(ps)
	root := make([]uint32, rootEntries)
	var nodes []*node
	var nodeAt []uint32 // the root entry of each node
	nodeOf := func(r uint32) *node {
		if n := len(nodes); n > 0 && nodeAt[n-1] == r {
			return nodes[n-1]
		}
		n := &node{}
		nodes, nodeAt = append(nodes, n), append(nodeAt, r)
		return n
	}
	for _, p := range list {
		s := spanOf(p)
		if p.Bits() <= rootBits {
			for r := s.lo >> (32 - rootBits); r <= s.hi>>(32-rootBits); r++ {
				root[r] = denyAllEntry
			}
			continue
		}
		// Sorted and disjoint: a node's prefixes come one after another,
		// and its /24s in order.
		n := nodeOf(s.lo >> (32 - rootBits))
		if p.Bits() <= leafPrefix {
			for i := (s.lo >> leafBits) & (nodeSlots - 1); i <= (s.hi>>leafBits)&(nodeSlots-1); i++ {
				n.deny |= 1 << i
			}
			continue
		}
		i := (s.lo >> leafBits) & (nodeSlots - 1)
		if n.kids&(1<<i) == 0 {
			n.kids |= 1 << i
			n.leaves = append(n.leaves, [leafAddrs / 32]uint32{})
		}
		leaf := &n.leaves[len(n.leaves)-1]
		for b := s.lo & (leafAddrs - 1); b <= s.hi&(leafAddrs-1); b++ {
			leaf[b/32] |= 1 << (b % 32)
		}
	}
	nLeaves := 0
	for _, n := range nodes {
		nLeaves += len(n.leaves)
	}
	total := RootCells + len(nodes) + nLeaves
	if maxCells > 0 && total > maxCells {
		return Deny4{}, fmt.Errorf("the deny table of %d prefixes needs %d cells, more than the %d it has room for", len(list), total, maxCells)
	}
	cells := make([]wire.DenyCell, total)
	// Nodes after the root, then each node's leaves in turn.
	next := uint32(RootCells + len(nodes))
	for k, n := range nodes {
		at := uint32(RootCells + k)
		root[nodeAt[k]] = at
		c := &cells[at]
		c.W[0], c.W[1] = uint32(n.deny), uint32(n.deny>>32)
		c.W[2], c.W[3] = uint32(n.kids), uint32(n.kids>>32)
		c.W[4] = next
		for _, l := range n.leaves {
			cells[next].W = l
			next++
		}
	}
	for r, e := range root {
		cells[r/entriesPer].W[r%entriesPer] = e
	}
	return Deny4{Cells: cells, Prefixes: len(list)}, nil
}

// Denies reports whether the table denies IPv4 address a, reading it as
// the program does (deny_lookup4).
func (t Deny4) Denies(a netip.Addr) bool {
	if !a.Is4() || len(t.Cells) < RootCells {
		return false
	}
	b := a.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	r := v >> (32 - rootBits)
	e := t.Cells[r/entriesPer].W[r%entriesPer]
	switch {
	case e == 0:
		return false
	case e == denyAllEntry:
		return true
	case int(e) >= len(t.Cells):
		return true
	}
	n := &t.Cells[e]
	deny := uint64(n.W[0]) | uint64(n.W[1])<<32
	kids := uint64(n.W[2]) | uint64(n.W[3])<<32
	bit := uint64(1) << ((v >> leafBits) & (nodeSlots - 1))
	if deny&bit != 0 {
		return true
	}
	if kids&bit == 0 {
		return false
	}
	leaf := int(n.W[4]) + bits.OnesCount64(kids&(bit-1))
	if leaf >= len(t.Cells) {
		return true
	}
	x := v & (leafAddrs - 1)
	return t.Cells[leaf].W[x/32]>>(x%32)&1 != 0
}

// Ranges4 builds a service's source ranges from IPv4 prefixes ps, at
// least one: their union as disjoint intervals, sorted, the last one
// repeated to fill the structure. It fails on an IPv6 prefix, one with
// host bits set, or more intervals than wire.MaxRanges (never with at
// most wire.MaxRanges prefixes).
func Ranges4(ps []netip.Prefix) (wire.Ranges4, error) {
	var r wire.Ranges4
	if len(ps) == 0 {
		return r, errors.New("no source ranges")
	}
	for _, p := range ps {
		if _, err := checkPrefix(p); err != nil {
			return r, err
		}
	}
	var spans []span
	for _, p := range disjoint(ps) {
		s := spanOf(p)
		// Adjacent ones merge too: fewer intervals, the same addresses.
		if n := len(spans); n > 0 && spans[n-1].hi != ^uint32(0) && spans[n-1].hi+1 == s.lo {
			spans[n-1].hi = s.hi
			continue
		}
		spans = append(spans, s)
	}
	if len(spans) > wire.MaxRanges {
		return r, fmt.Errorf("%d source ranges, more than the %d a service holds", len(spans), wire.MaxRanges)
	}
	for i := range wire.MaxRanges {
		s := spans[min(i, len(spans)-1)]
		r.Lo[i], r.Hi[i] = s.lo, s.hi
	}
	return r, nil
}

// Holds reports whether IPv4 address a is in ranges r, searching them as
// the program does (ranges_hold4).
func Holds(r *wire.Ranges4, a netip.Addr) bool {
	if !a.Is4() {
		return false
	}
	b := a.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	i := 0
	for s := wire.MaxRanges / 2; s > 0; s >>= 1 {
		if r.Lo[(i+s)&(wire.MaxRanges-1)] <= v {
			i += s
		}
	}
	return r.Lo[i] <= v && v <= r.Hi[i]
}
