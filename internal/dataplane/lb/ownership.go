package lb

import "slices"

// ownership records which service each backend id counts for (as the
// service id + 1, 0 for none), both ways, so that a service's counters
// are summed over its own backends only.
type ownership struct {
	of      map[uint32]uint32
	members map[uint32]map[uint32]bool
}

func newOwnership() ownership {
	return ownership{of: map[uint32]uint32{}, members: map[uint32]map[uint32]bool{}}
}

func (o ownership) get(b uint32) uint32 { return o.of[b] }

// set makes owner (a service id + 1; 0 for none) the owner of b.
func (o ownership) set(b, owner uint32) {
	if old := o.of[b]; old != 0 {
		delete(o.members[old], b)
		if len(o.members[old]) == 0 {
			delete(o.members, old)
		}
	}
	if owner == 0 {
		delete(o.of, b)
		return
	}
	o.of[b] = owner
	if o.members[owner] == nil {
		o.members[owner] = map[uint32]bool{}
	}
	o.members[owner][b] = true
}

// backends lists the backends owner owns, in id order.
func (o ownership) backends(owner uint32) []uint32 {
	out := make([]uint32, 0, len(o.members[owner]))
	for b := range o.members[owner] {
		out = append(out, b)
	}
	slices.Sort(out)
	return out
}
