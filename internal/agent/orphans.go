package agent

import (
	"maps"
	"net/netip"
	"slices"
)

// orphanSet holds the backends in the data plane that no service owns,
// by ID and by address. An agent restarted on a large data plane adopts
// every backend as an orphan, and each service then claims its own by
// address: a scan of all orphans per claim would cost the square of the
// number of backends.
type orphanSet struct {
	addr map[uint32]netip.Addr
	// byAddr holds the orphans of each address in ascending order:
	// usually one, so that a claim costs neither a map iteration nor a
	// sort (100 000 claims took 100 ms of an agent's restart that way).
	byAddr map[netip.Addr][]uint32
}

func newOrphanSet() *orphanSet {
	return &orphanSet{addr: map[uint32]netip.Addr{}, byAddr: map[netip.Addr][]uint32{}}
}

func (o *orphanSet) len() int { return len(o.addr) }

// add records backend id with address addr as an orphan.
func (o *orphanSet) add(id uint32, addr netip.Addr) {
	o.remove(id)
	o.addr[id] = addr
	ids := o.byAddr[addr]
	i, _ := slices.BinarySearch(ids, id)
	o.byAddr[addr] = slices.Insert(ids, i, id)
}

// remove forgets backend id, if it is an orphan.
func (o *orphanSet) remove(id uint32) {
	addr, ok := o.addr[id]
	if !ok {
		return
	}
	delete(o.addr, id)
	ids := o.byAddr[addr]
	if i, found := slices.BinarySearch(ids, id); found {
		ids = slices.Delete(ids, i, i+1)
	}
	if len(ids) == 0 {
		delete(o.byAddr, addr)
	} else {
		o.byAddr[addr] = ids
	}
}

// withAddr lists the orphans with address addr, lowest ID first. The
// list is the set's own: valid until the set changes, and not to be
// changed.
func (o *orphanSet) withAddr(addr netip.Addr) []uint32 {
	return o.byAddr[addr]
}

// ids lists every orphan, lowest ID first.
func (o *orphanSet) ids() []uint32 {
	return slices.Sorted(maps.Keys(o.addr))
}
