package agent

// idSet hands out the lowest free ID in [0, limit). Lowest-first keeps the
// IDs of a small configuration small and dense, which makes data-plane
// dumps easy to read and reuses freed slots of the BPF array maps.
type idSet struct {
	limit uint32
	words []uint64 // bit i set: ID i is in use
}

func newIDSet(limit uint32) *idSet {
	return &idSet{limit: limit, words: make([]uint64, (uint64(limit)+63)/64)}
}

// take marks id as used, e.g. one adopted from the data plane. It reports
// false when id lies outside the set's range.
func (s *idSet) take(id uint32) bool {
	if id >= s.limit {
		return false
	}
	s.words[id/64] |= 1 << (id % 64)
	return true
}

// alloc returns the lowest free ID, or false when every ID is in use.
func (s *idSet) alloc() (uint32, bool) {
	for w, bits := range s.words {
		if bits == ^uint64(0) {
			continue
		}
		for b := uint32(0); b < 64; b++ {
			id := uint32(w)*64 + b
			if id >= s.limit {
				return 0, false
			}
			if bits&(1<<b) == 0 {
				s.words[w] |= 1 << b
				return id, true
			}
		}
	}
	return 0, false
}

// free releases id; IDs outside the range are ignored.
func (s *idSet) free(id uint32) {
	if id < s.limit {
		s.words[id/64] &^= 1 << (id % 64)
	}
}
