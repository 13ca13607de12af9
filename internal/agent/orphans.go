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
	addr   map[uint32]netip.Addr
	byAddr map[netip.Addr]map[uint32]bool
}

func newOrphanSet() *orphanSet {
	return &orphanSet{addr: map[uint32]netip.Addr{}, byAddr: map[netip.Addr]map[uint32]bool{}}
}

func (o *orphanSet) len() int { return len(o.addr) }

// add records backend id with address addr as an orphan.
func (o *orphanSet) add(id uint32, addr netip.Addr) {
	o.remove(id)
	o.addr[id] = addr
	if o.byAddr[addr] == nil {
		o.byAddr[addr] = map[uint32]bool{}
	}
	o.byAddr[addr][id] = true
}

// remove forgets backend id, if it is an orphan.
func (o *orphanSet) remove(id uint32) {
	addr, ok := o.addr[id]
	if !ok {
		return
	}
	delete(o.addr, id)
	delete(o.byAddr[addr], id)
	if len(o.byAddr[addr]) == 0 {
		delete(o.byAddr, addr)
	}
}

// withAddr lists the orphans with address addr, lowest ID first.
func (o *orphanSet) withAddr(addr netip.Addr) []uint32 {
	return slices.Sorted(maps.Keys(o.byAddr[addr]))
}

// ids lists every orphan, lowest ID first.
func (o *orphanSet) ids() []uint32 {
	return slices.Sorted(maps.Keys(o.addr))
}
