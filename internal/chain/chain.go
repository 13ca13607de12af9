// Package chain computes the daisy-chaining hints of a service's Maglev
// table (Beamer, Olteanu et al., NSDI'18): for every slot, the backend that
// owned it before its latest change and when that change happened. A
// packet carries its slot's hint; a backend without the packet's
// connection hands it on to the previous owner, which has it.
//
// The hints depend only on the current table and the service's earlier
// backend sets with the times they ended, never on when or in which order
// an instance learned them. So every xlb instance that is given the same
// history computes the same hints, one started after the change included,
// and a flow that ECMP moves between instances carries the same hint from
// each. docs/connection-survival.md has the whole design.
package chain

import (
	"fmt"
	"slices"
	"time"

	"github.com/xlbproject/xlb/internal/maglev"
)

// Past is a backend set that was the service's until Until.
type Past struct {
	Until    time.Time
	Backends []maglev.Backend
}

// Depth is how many earlier owners a hint names: a slot may change hands
// that many times within the window and every connection on it still
// finds its backend. Backends that leave one after the other move some
// slots twice (TestEveryEarlierOwnerNamed).
const Depth = 2

// Hint is one slot's: the keys of the backends that owned the slot
// before, newest first, each once and none the current owner ("" where
// there are fewer), and when the latest change happened.
type Hint struct {
	Prev    [Depth]string
	Changed time.Time
}

// Hints returns a hint for each slot of current, a table of m slots given
// as the key of each slot's owner ("" for a slot without one), and the
// table's generation: the end of the newest past set (zero without a
// history). past may be in any order, but for sets that ended in the
// same second, which count in the order given; it is not modified.
//
// A slot's previous owner is its owner in the newest past table where it
// differs from the current one, and the slot changed when that table
// ended; the next is its owner in the newest older table where it
// differs from those, and so on. A set without an active backend (all
// weights 0, or none) owned no slot: a slot it "owned" had no
// connections to keep, so it is skipped.
func Hints(current []string, past []Past, m uint32) ([]Hint, time.Time, error) {
	if uint32(len(current)) != m {
		return nil, time.Time{}, fmt.Errorf("the current table has %d slots, want %d", len(current), m)
	}
	hints := make([]Hint, m)
	if len(past) == 0 {
		return hints, time.Time{}, nil
	}
	// Newest first. Sets that ended in the same second (an agent's own
	// record of two quick changes) count in the order given: the later
	// one is the newer.
	byAge := slices.Clone(past)
	slices.Reverse(byAge)
	slices.SortStableFunc(byAge, func(a, b Past) int { return b.Until.Compare(a.Until) })
	open := int(m) // slots with fewer than Depth previous owners
	for _, p := range byAge {
		if open == 0 {
			break
		}
		if !slices.ContainsFunc(p.Backends, func(b maglev.Backend) bool { return b.Weight > 0 }) {
			continue
		}
		owners, err := maglev.Build(p.Backends, m)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("the set that ended %s: %w", p.Until.UTC().Format(time.RFC3339), err)
		}
		for slot, idx := range owners {
			h := &hints[slot]
			key := p.Backends[idx].Key
			if key == current[slot] || h.Prev[Depth-1] != "" {
				continue
			}
			for i := range h.Prev {
				if h.Prev[i] == key {
					break
				}
				if h.Prev[i] == "" {
					h.Prev[i] = key
					if i == 0 {
						h.Changed = p.Until
					}
					if i == Depth-1 {
						open--
					}
					break
				}
			}
		}
	}
	return hints, byAge[0].Until, nil
}
