// Package maglev builds Maglev lookup tables (Eisenbud et al., "Maglev: A
// Fast and Reliable Software Network Load Balancer", NSDI'16) with weights.
//
// The table depends only on the set of (Key, Weight) pairs: backends are
// sorted by Key internally and hashed with a fixed, documented function, so
// every xlb instance, on any machine and Go version, builds the identical
// table and a flow that ECMP moves to another instance still reaches the
// same backend. See docs/maglev.md for the algorithm and measurements.
package maglev

import (
	"fmt"
	"slices"
	"strings"
)

// DefaultSize is the default table size, the prime 2^16+1. With up to 655
// equal-weight backends (M/N >= 100) the largest and smallest shares differ
// by at most 1%; beyond that they still differ by at most one slot.
const DefaultSize = 65537

// maxSize bounds the table so that a bad configuration value (the largest
// uint32 prime is 4294967291) yields an error instead of an allocation of
// tens of gigabytes. 2^24 entries is far above any useful BPF table.
const maxSize = 1 << 24

// Backend is one table member.
type Backend struct {
	// Key is the backend's stable identity, e.g. "10.0.3.2:80". It alone
	// decides the backend's place in the table; it must be unique and
	// non-empty.
	Key string
	// Weight is the backend's relative share of slots. Weight 0 drains the
	// backend: it gets no slots and the table is the same as without it.
	Weight uint32
}

// Build returns a table of length m; entry i is the index into backends
// (the caller's slice, caller's order) of the backend owning slot i. The
// table content depends only on the SET of (Key, Weight), never on input
// order.
//
// Errors: m not prime, m < number of backends with weight > 0, m above
// 2^24, duplicate keys, empty key, no backend with weight > 0.
//
// Weights follow a credit scheme: in every round each backend earns its
// weight in credit and, for each full maxWeight of credit, claims the next
// free slot of its preference list, in key order within the round. A
// backend's slot count is then proportional to its weight; with equal
// weights every backend claims one slot per round, which is exactly the
// classic Maglev population.
func Build(backends []Backend, m uint32) ([]int, error) {
	members, err := sortedMembers(backends, m)
	if err != nil {
		return nil, err
	}
	var maxWeight, sumWeight uint64
	for i := range members {
		maxWeight = max(maxWeight, members[i].weight)
		sumWeight += members[i].weight
	}
	table := make([]int, m)
	for i := range table {
		table[i] = -1
	}
	// Two ways to replay the same rounds (TestFillersAgree checks they
	// match). Stepping through every round visits all N members per round:
	// about M·maxWeight/avgWeight visits, i.e. M when weights are equal,
	// which is the paper's own loop and the fastest; it degrades to O(M·N)
	// when one weight dwarfs the rest. The heap costs O(log N) per slot
	// whatever the weights.
	if maxWeight*uint64(len(members)) <= roundLoopLimit*sumWeight {
		fillRounds(members, table, maxWeight)
	} else {
		fillHeap(members, table, maxWeight)
	}
	for i, idx := range table {
		table[i] = members[idx].caller
	}
	return table, nil
}

// sortedMembers validates the input and returns the weight>0 backends
// sorted by key, with their permutation state initialised.
func sortedMembers(backends []Backend, m uint32) ([]member, error) {
	order := make([]int, len(backends))
	active := 0
	for i, b := range backends {
		if b.Key == "" {
			return nil, fmt.Errorf("maglev: backend %d has an empty key", i)
		}
		order[i] = i
		if b.Weight > 0 {
			active++
		}
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(backends[a].Key, backends[b].Key) })
	for i := 1; i < len(order); i++ {
		if a, b := order[i-1], order[i]; backends[a].Key == backends[b].Key {
			return nil, fmt.Errorf("maglev: backends %d and %d have the same key %q", min(a, b), max(a, b), backends[a].Key)
		}
	}
	switch {
	case active == 0:
		return nil, fmt.Errorf("maglev: none of %d backends has a weight > 0", len(backends))
	case !IsPrime(m):
		return nil, fmt.Errorf("maglev: table size %d is not prime", m)
	case m > maxSize:
		return nil, fmt.Errorf("maglev: table size %d exceeds the limit of %d", m, maxSize)
	case uint64(m) < uint64(active):
		return nil, fmt.Errorf("maglev: table size %d is smaller than the %d backends with weight > 0", m, active)
	}

	members := make([]member, 0, active)
	for _, i := range order {
		b := backends[i]
		if b.Weight == 0 {
			continue
		}
		offset, skip := permutation(b.Key, m)
		members = append(members, member{caller: i, weight: uint64(b.Weight), pos: offset, skip: skip})
	}
	return members, nil
}

// roundLoopLimit is the largest maxWeight/avgWeight for which Build steps
// through rounds one by one instead of using the heap: up to this ratio the
// round loop makes at most about roundLoopLimit member visits per slot,
// each cheaper than a heap operation.
const roundLoopLimit = 4

// member is a backend with weight > 0, in key order.
type member struct {
	caller int    // index into the caller's slice
	weight uint64 // > 0
	pos    uint32 // next slot in its preference list
	skip   uint32
	claims uint64 // slots claimed so far
	credit uint64 // round loop only: credit not yet spent, < maxWeight
}

// take claims the member's most preferred free slot for member index idx.
// The preference list is a permutation of all m slots, so the walk ends as
// long as one slot is free.
func (b *member) take(table []int, idx int, m uint32) {
	p := b.pos
	for table[p] >= 0 {
		p += b.skip
		if p >= m {
			p -= m
		}
	}
	table[p] = idx
	b.pos = p + b.skip
	if b.pos >= m {
		b.pos -= m
	}
	b.claims++
}

// fillRounds is the credit scheme as written: every round each member earns
// its weight and, once it holds maxWeight of credit, takes one slot. Since
// weight <= maxWeight it takes at most one slot per round.
func fillRounds(members []member, table []int, maxWeight uint64) {
	m := uint32(len(table))
	filled := uint32(0)
	for {
		for i := range members {
			b := &members[i]
			b.credit += b.weight
			if b.credit < maxWeight {
				continue
			}
			b.credit -= maxWeight
			b.take(table, i, m)
			if filled++; filled == m {
				return
			}
		}
	}
}

// fillHeap replays the same rounds event by event: members sit in a
// min-heap keyed by the round of their next claim, ties broken by key
// order. The k-th claim (k = 1, 2, ...) of a member with weight w falls in
// round ceil(k·maxWeight/w), the first round after which its accumulated
// credit reaches k·maxWeight, so popping the heap yields exactly the claims
// of fillRounds in the same order.
func fillHeap(members []member, table []int, maxWeight uint64) {
	m := uint32(len(table))
	h := make(claimHeap, len(members))
	for i := range members {
		h[i] = claim{round: nextRound(1, maxWeight, members[i].weight), idx: int32(i)}
	}
	h.init()
	for range m {
		i := int(h[0].idx)
		b := &members[i]
		b.take(table, i, m)
		// claims+1 <= m <= 2^24 and maxWeight < 2^32: no overflow.
		h[0].round = nextRound(b.claims+1, maxWeight, b.weight)
		h.down(0)
	}
}

// nextRound is the round in which a backend of the given weight makes its
// k-th claim: ceil(k*maxWeight/weight), with k >= 1 and weight >= 1.
func nextRound(k, maxWeight, weight uint64) uint64 {
	return (k*maxWeight-1)/weight + 1
}

// claim is a member's next claim: its round, then its key-order index.
type claim struct {
	round uint64
	idx   int32
}

func (a claim) less(b claim) bool {
	return a.round < b.round || (a.round == b.round && a.idx < b.idx)
}

// claimHeap is a binary min-heap of claims. It is hand-rolled rather than
// container/heap because it runs once per slot, where container/heap's
// interface calls would cost more than the comparisons themselves.
type claimHeap []claim

func (h claimHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h claimHeap) down(i int) {
	n := len(h)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if r := c + 1; r < n && h[r].less(h[c]) {
			c = r
		}
		if !h[c].less(h[i]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}
