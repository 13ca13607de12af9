package dataplane

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// Service index geometry (XLB_SVC_SLOTS, XLB_SVC_PROBES in
// bpf/xlb_consts.h).
const (
	SvcSlots  = 4096
	svcProbes = 8
)

// tombstonePort marks a deleted slot (vip 0): lookups probe past it.
const tombstonePort = 0xffff

// svcIndex mirrors the svc_index map: an open-addressing table where a
// service sits within svcProbes slots of its home slot. The program
// reads it without locks, so every write keeps each intermediate state
// valid: a new service is written with vip 0 (invisible) and then with
// its vip; a deleted one becomes a tombstone.
type svcIndex struct {
	slots [SvcSlots]lbSvcSlot
}

// svcHash is svc_hash in bpf/xlb_maps.h: the home slot of a key given as
// the program loads it (little-endian loads of the wire bytes).
func svcHash(vip uint32, port uint16, proto uint8) uint32 {
	h := vip * 0x9e3779b1
	h ^= (uint32(port)<<8 | uint32(proto)) * 0x85ebca77
	h ^= h >> 15
	return h
}

func (x *svcIndex) load(m *ebpf.Map) error {
	var k uint32
	var v lbSvcSlot
	it := m.Iterate()
	for it.Next(&k, &v) {
		if k < SvcSlots {
			x.slots[k] = v
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read service index: %w", err)
	}
	return nil
}

func sameKey(a, b lbSvcSlot) bool {
	return a.Vip == b.Vip && a.Port == b.Port && a.Proto == b.Proto
}

// find returns the slot holding key (or -1) and the first free slot on
// its probe path (or -1).
func (x *svcIndex) find(key lbSvcSlot) (at, free int) {
	at, free = -1, -1
	h := svcHash(key.Vip, key.Port, key.Proto)
	for i := uint32(0); i < svcProbes; i++ {
		idx := int((h + i) & (SvcSlots - 1))
		s := x.slots[idx]
		if s.Vip != 0 && sameKey(s, key) {
			return idx, free
		}
		if s.Vip == 0 {
			if free < 0 {
				free = idx
			}
			if s.Port == 0 && s.Proto == 0 {
				break // empty: no key lies further on this path
			}
		}
	}
	return at, free
}

func (x *svcIndex) write(m *ebpf.Map, idx int, v lbSvcSlot) error {
	if err := m.Put(uint32(idx), v); err != nil {
		return fmt.Errorf("write service index slot %d: %w", idx, err)
	}
	x.slots[idx] = v
	return nil
}

// upsert installs key (with its Id and Encap) or updates it in place.
func (x *svcIndex) upsert(m *ebpf.Map, key lbSvcSlot) error {
	at, free := x.find(key)
	if at >= 0 {
		if x.slots[at] == key {
			return nil
		}
		return x.write(m, at, key)
	}
	if free < 0 {
		return errors.New("service index: no free slot near this service's home slot (too many services hash together); remove a service or report this")
	}
	hidden := key
	hidden.Vip = 0
	if err := x.write(m, free, hidden); err != nil {
		return err
	}
	return x.write(m, free, key)
}

// remove deletes key, leaving a tombstone, and turns tombstones that end
// a probe path back into empty slots so misses stay short.
func (x *svcIndex) remove(m *ebpf.Map, key lbSvcSlot) error {
	at, _ := x.find(key)
	if at < 0 {
		return nil
	}
	if err := x.write(m, at, lbSvcSlot{Port: tombstonePort}); err != nil {
		return err
	}
	for i := at; ; i = (i - 1 + SvcSlots) % SvcSlots {
		next := x.slots[(i+1)%SvcSlots]
		cur := x.slots[i]
		if !(cur.Vip == 0 && cur.Port == tombstonePort) || !(next.Vip == 0 && next.Port == 0 && next.Proto == 0) {
			return nil
		}
		if err := x.write(m, i, lbSvcSlot{}); err != nil {
			return err
		}
	}
}

// services returns the installed services.
func (x *svcIndex) services() []lbSvcSlot {
	var out []lbSvcSlot
	for _, s := range x.slots {
		if s.Vip != 0 {
			out = append(out, s)
		}
	}
	return out
}
