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
	"container/list"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// Hints returns a hint for each slot of the Maglev table of current, a
// table of m slots, and the table's generation: the end of the newest
// past set (zero without a history). past may be in any order, but for
// sets that ended in the same second, which count in the order given; it
// is not modified.
//
// A slot's previous owner is its owner in the newest past table where it
// differs from the current one, and the slot changed when that table
// ended; the next is its owner in the newest older table where it
// differs from those, and so on. A set without an active backend (all
// weights 0, or none) owned no slot: a slot it "owned" had no
// connections to keep, so it is skipped.
func Hints(current []maglev.Backend, past []Past, m uint32) ([]Hint, time.Time, error) {
	s, err := (*Tables)(nil).Slots(current, past, m)
	if err != nil {
		return nil, time.Time{}, err
	}
	hints := make([]Hint, m)
	for slot := range hints {
		hints[slot] = s.Hint(slot)
	}
	return hints, s.Generation, nil
}

// Slots holds the hints of a table's slots compactly: a few backends
// name the earlier owners of every slot, and a few past sets' ends date
// every slot's latest change.
type Slots struct {
	// Keys are the backends named, Keys[0] "" for none.
	Keys []string
	// Prev are each slot's earlier owners as indices into Keys, newest
	// first; 0 where there are fewer.
	Prev [][Depth]int32
	// Changed is, for each slot with an earlier owner, the index into
	// Ends of its latest change.
	Changed []int32
	// Ends are the past sets' ends, newest first.
	Ends []time.Time
	// Generation is the table's: the newest end; zero without a history.
	Generation time.Time
}

// Hint returns slot's hint.
func (s *Slots) Hint(slot int) Hint {
	var h Hint
	p := s.Prev[slot]
	if p[0] == 0 {
		return h
	}
	for i, id := range p {
		h.Prev[i] = s.Keys[id]
	}
	h.Changed = s.Ends[s.Changed[slot]]
	return h
}

// Slots computes the hints as Hints does, in their compact form, with the
// tables of the sets taken from c where it has them, and kept there. A nil
// c keeps nothing.
func (c *Tables) Slots(current []maglev.Backend, past []Past, m uint32) (*Slots, error) {
	out := &Slots{Keys: []string{""}, Prev: make([][Depth]int32, m), Changed: make([]int32, m)}
	if len(past) == 0 {
		return out, nil
	}
	// Backends by number: the slots are compared as numbers, and a set's
	// table needs one number per backend, not one per slot.
	ids := map[string]int32{"": 0}
	number := func(t *setTable) []int32 {
		local := make([]int32, len(t.keys))
		for i, k := range t.keys {
			id, ok := ids[k]
			if !ok {
				id = int32(len(out.Keys))
				ids[k] = id
				out.Keys = append(out.Keys, k)
			}
			local[i] = id
		}
		return local
	}
	cur := make([]int32, m) // all 0 for a set without an active backend
	if active(current) {
		t, _, err := c.table(current, m)
		if err != nil {
			return nil, fmt.Errorf("the current set: %w", err)
		}
		local := number(t)
		for slot, o := range t.slots {
			cur[slot] = local[o]
		}
	}

	// Newest first. Sets that ended in the same second (an agent's own
	// record of two quick changes) count in the order given: the later
	// one is the newer.
	byAge := slices.Clone(past)
	slices.Reverse(byAge)
	slices.SortStableFunc(byAge, func(a, b Past) int { return b.Until.Compare(a.Until) })
	out.Ends = make([]time.Time, len(byAge))
	for k, p := range byAge {
		out.Ends[k] = p.Until
	}
	out.Generation = out.Ends[0]
	open := int(m) // slots with fewer than Depth previous owners
	for k, p := range byAge {
		if open == 0 {
			break
		}
		if !active(p.Backends) {
			continue
		}
		t, _, err := c.table(p.Backends, m)
		if err != nil {
			return nil, fmt.Errorf("the set that ended %s: %w", p.Until.UTC().Format(time.RFC3339), err)
		}
		local := number(t)
		for slot, o := range t.slots {
			h := &out.Prev[slot]
			id := local[o]
			if id == cur[slot] || h[Depth-1] != 0 {
				continue
			}
			for i := range h {
				if h[i] == id {
					break
				}
				if h[i] == 0 {
					h[i] = id
					if i == 0 {
						out.Changed[slot] = int32(k)
					}
					if i == Depth-1 {
						open--
					}
					break
				}
			}
		}
	}
	return out, nil
}

func active(bs []maglev.Backend) bool {
	return slices.ContainsFunc(bs, func(b maglev.Backend) bool { return b.Weight > 0 })
}

// Tables keeps the Maglev tables of the backend sets it was last asked
// for. A daisy-chained service's hints need the table of every set in its
// history, and a change adds one set to the history, the one that was
// current until then: an agent that keeps the tables builds one new table
// per change instead of one per earlier set. Safe for concurrent use.
type Tables struct {
	mu    sync.Mutex
	max   int
	lru   *list.List // of *setTable, most recently used first
	bySet map[string]*list.Element
}

// NewTables returns a Tables that keeps up to max tables. A table of m
// slots takes 4 × m bytes (256 KiB at the default size).
func NewTables(max int) *Tables {
	return &Tables{max: max, lru: list.New(), bySet: map[string]*list.Element{}}
}

// setTable is a set's table: keys are the keys of its backends with a
// weight, in key order, and slots[slot] the index in keys of the slot's
// owner.
type setTable struct {
	set   string
	keys  []string
	slots []int32
}

// Build returns the Maglev table of backends as maglev.Build does:
// each slot's owner as an index into backends. A table c keeps is not
// built again.
func (c *Tables) Build(backends []maglev.Backend, m uint32) ([]int, error) {
	if c == nil || c.max <= 0 {
		return maglev.Build(backends, m) // nothing to keep it in
	}
	t, order, err := c.table(backends, m)
	if err != nil {
		return nil, err
	}
	out := make([]int, m)
	for slot, o := range t.slots {
		out[slot] = order[o]
	}
	return out, nil
}

// table returns the table of backends, from c or built (and kept), and
// the index in backends of each of its keys.
func (c *Tables) table(backends []maglev.Backend, m uint32) (*setTable, []int, error) {
	// A table depends on the keys and weights of the backends with a
	// weight alone, as maglev.Build's does; but an empty or repeated key
	// anywhere is an error, and maglev.Build says which.
	keys := make([]string, len(backends))
	for i, b := range backends {
		keys[i] = b.Key
	}
	slices.Sort(keys)
	if len(keys) > 0 && keys[0] == "" || len(slices.Compact(keys)) < len(backends) {
		_, err := maglev.Build(backends, m)
		return nil, nil, err
	}
	var order []int
	for i, b := range backends {
		if b.Weight > 0 {
			order = append(order, i)
		}
	}
	if len(order) == 0 {
		_, err := maglev.Build(backends, m) // no backend with a weight
		return nil, nil, err
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(backends[a].Key, backends[b].Key) })
	sorted := make([]maglev.Backend, len(order))
	for i, o := range order {
		sorted[i] = backends[o]
	}
	keep := c != nil && c.max > 0
	var set string
	if keep {
		var b strings.Builder
		b.WriteString(strconv.FormatUint(uint64(m), 10))
		for _, be := range sorted {
			b.WriteByte(' ')
			b.WriteString(strconv.Quote(be.Key))
			b.WriteByte('/')
			b.WriteString(strconv.FormatUint(uint64(be.Weight), 10))
		}
		set = b.String()
		c.mu.Lock()
		if e, ok := c.bySet[set]; ok {
			c.lru.MoveToFront(e)
			c.mu.Unlock()
			return e.Value.(*setTable), order, nil
		}
		c.mu.Unlock()
	}
	idx, err := maglev.Build(sorted, m)
	if err != nil {
		return nil, nil, err
	}
	t := &setTable{set: set, keys: make([]string, len(sorted)), slots: make([]int32, m)}
	for i, be := range sorted {
		t.keys[i] = be.Key
	}
	for slot, o := range idx {
		t.slots[slot] = int32(o)
	}
	if keep {
		c.mu.Lock()
		defer c.mu.Unlock()
		if e, ok := c.bySet[set]; ok { // built meanwhile by another caller
			c.lru.MoveToFront(e)
			return e.Value.(*setTable), order, nil
		}
		c.bySet[set] = c.lru.PushFront(t)
		for c.lru.Len() > c.max {
			old := c.lru.Remove(c.lru.Back()).(*setTable)
			delete(c.bySet, old.set)
		}
	}
	return t, order, nil
}
