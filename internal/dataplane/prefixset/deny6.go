package prefixset

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// Deny6 is a built IPv6 deny table (struct xlb_deny6_node): its nodes,
// the root first, in the order the program indexes them. Nodes beyond
// Nodes' length are zero.
type Deny6 struct {
	Nodes []wire.Deny6Node
	// Prefixes is how many prefixes it holds once those covered by
	// another are left out.
	Prefixes int
}

// node6 is a node of the IPv6 trie while it is built: the byte it
// indexes (depth), the address bytes before it (prefix), the byte values
// denied whole there, and its children by byte value.
type node6 struct {
	depth  int
	prefix [16]byte
	deny   [4]uint64
	kids   map[byte]*node6
}

// skip is n, or the first node below it that denies something or has
// more than one child: the nodes in between would only lead on to it,
// and the one that takes their place checks the bytes they would have
// read (path compression).
func (n *node6) skip() *node6 {
	for n.deny == [4]uint64{} && len(n.kids) == 1 {
		for _, k := range n.kids {
			n = k
		}
	}
	return n
}

// checkPrefix6 returns why p is no prefix the IPv6 table keys: invalid,
// IPv4 or IPv4-mapped, or with host bits set.
func checkPrefix6(p netip.Prefix) error {
	switch {
	case !p.IsValid():
		return fmt.Errorf("invalid prefix %v", p)
	case p.Addr().Is4In6():
		return fmt.Errorf("%v: an IPv4-mapped IPv6 prefix; write it as IPv4", p)
	case p.Addr().Is4():
		return fmt.Errorf("%v: an IPv4 prefix in the IPv6 table", p)
	case p.Masked() != p:
		return fmt.Errorf("%v has host bits set: its network is %v", p, p.Masked())
	}
	return nil
}

// disjoint6 is disjoint for IPv6 prefixes: those no other one covers,
// sorted by address.
func disjoint6(ps []netip.Prefix) []netip.Prefix {
	sorted := slices.Clone(ps)
	slices.SortFunc(sorted, func(a, b netip.Prefix) int {
		return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
	})
	out := sorted[:0]
	for _, p := range sorted {
		// Prefixes nest or are apart: sorted so, p is covered exactly
		// when the last one kept holds its first address.
		if n := len(out); n > 0 && out[n-1].Contains(p.Addr()) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// ErrDeny6Full is the error of an IPv6 list whose table needs more nodes
// than the map has.
var ErrDeny6Full = errors.New("the IPv6 deny table is full")

// BuildDeny6 builds the deny table of IPv6 prefixes ps: every address a
// prefix covers is denied, any other allowed. Overlapping prefixes are
// fine. A prefix of n bits denies, at depth (n-1)/8 of the trie, the
// byte values it covers there (leaf pushing within the byte); the bytes
// before lead down through children, past the nodes that would only lead
// on (path compression). It fails on an IPv4 or IPv4-mapped
// prefix or one with host bits set, or when the table would need more
// than maxNodes nodes (0: no limit).
func BuildDeny6(ps []netip.Prefix, maxNodes int) (Deny6, error) {
	for _, p := range ps {
		if err := checkPrefix6(p); err != nil {
			return Deny6{}, err
		}
	}
	list := disjoint6(ps)
	root := &node6{}
	for _, p := range list {
		a := p.Addr().As16()
		n := root
		if p.Bits() == 0 {
			n.deny = [4]uint64{^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)}
			continue
		}
		depth := (p.Bits() - 1) / 8
		for d := range depth {
			if n.kids == nil {
				n.kids = map[byte]*node6{}
			}
			k := n.kids[a[d]]
			if k == nil {
				k = &node6{depth: d + 1}
				copy(k.prefix[:d+1], a[:d+1])
				n.kids[a[d]] = k
			}
			n = k
		}
		// The byte values at depth that the prefix covers: its own,
		// with the bits past the prefix free.
		free := 8*(depth+1) - p.Bits()
		for b := int(a[depth]); b <= int(a[depth])|(1<<free-1); b++ {
			n.deny[b/64] |= 1 << (b % 64)
		}
	}
	// Breadth first: each node's children (each past the nodes its path
	// skips) take consecutive indexes, in the order of their byte
	// values. The root stays, whatever it holds: the walk starts there.
	var nodes []wire.Deny6Node
	queue := []*node6{root}
	next := uint32(1)
	for len(queue) > 0 {
		if maxNodes > 0 && len(nodes)+len(queue) > maxNodes {
			return Deny6{}, fmt.Errorf("%w: %d prefixes need more than the %d nodes it has room for; aggregate them into shorter prefixes", ErrDeny6Full, len(list), maxNodes)
		}
		n := queue[0]
		queue = queue[1:]
		var w wire.Deny6Node
		w.Deny = n.deny
		w.Depth = uint8(n.depth)
		w.PreHi = binary.BigEndian.Uint64(n.prefix[:8])
		w.PreLo = binary.BigEndian.Uint64(n.prefix[8:])
		w.First = next
		keys := make([]int, 0, len(n.kids))
		for b := range n.kids {
			keys = append(keys, int(b))
		}
		slices.Sort(keys)
		for _, b := range keys {
			w.Kids[b/64] |= 1 << (b % 64)
			queue = append(queue, n.kids[byte(b)].skip())
		}
		for j := 1; j < 4; j++ {
			w.Before[j] = w.Before[j-1] + uint16(bits.OnesCount64(w.Kids[j-1]))
		}
		if len(keys) == 0 {
			w.First = 0
		}
		next += uint32(len(keys))
		nodes = append(nodes, w)
	}
	return Deny6{Nodes: nodes, Prefixes: len(list)}, nil
}

// Denies reports whether the table denies IPv6 address a, reading it as
// the program does (deny_v6).
func (t Deny6) Denies(a netip.Addr) bool {
	if !a.Is6() || len(t.Nodes) == 0 {
		return false
	}
	b := a.As16()
	i := uint32(0)
	for range 16 {
		if int(i) >= len(t.Nodes) {
			return true
		}
		n := &t.Nodes[i]
		d := int(n.Depth)
		if d > 15 {
			return true
		}
		var pre [16]byte
		binary.BigEndian.PutUint64(pre[:8], n.PreHi)
		binary.BigEndian.PutUint64(pre[8:], n.PreLo)
		if [16]byte(append(b[:d:d], make([]byte, 16-d)...)) != pre {
			return false // off the compressed path
		}
		j, bit := b[d]/64, uint64(1)<<(b[d]%64)
		if n.Deny[j]&bit != 0 {
			return true
		}
		if n.Kids[j]&bit == 0 {
			return false
		}
		i = n.First + uint32(n.Before[j]) + uint32(bits.OnesCount64(n.Kids[j]&(bit-1)))
	}
	return false
}
