package lb

import (
	"fmt"
	"maps"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/internal/flowhash"
)

// Service index geometry (XLB_SVC_SLOTS, XLB_SVC_PROBES in
// bpf/xlb_consts.h, which explains the numbers).
const (
	SvcSlots  = 262144
	svcProbes = 16
)

// tombstonePort marks a deleted slot (vip 0): lookups probe past it.
const tombstonePort = 0xffff

// svcIndex mirrors the svc_index map: an open-addressing table where a
// service sits within svcProbes slots of its home slot. The program
// reads it without locks, so every write keeps each intermediate state
// valid: a new service is written with vip 0 (invisible) and then with
// its vip; a deleted one becomes a tombstone.
type svcIndex struct {
	slots [SvcSlots]wire.SvcSlot
	// used are the slots that hold a service (vip set), so that listing
	// the services does not read all SvcSlots of them.
	used map[int]struct{}
}

// slotWriter is where the index writes its slots: the svc_index map (slot
// number to wire.SvcSlot), or a test's stand-in for it.
type slotWriter interface {
	Put(key, value any) error
}

// svcHash is svc_hash in bpf/xlb_maps.h: the home slot of a key given as
// the program loads it (little-endian loads of the wire bytes), through
// MurmurHash3's 64-bit finalizer.
func svcHash(vip uint32, port uint16, proto uint8) uint32 {
	return uint32(flowhash.Mix64(uint64(vip) | uint64(port)<<32 | uint64(proto)<<48))
}

// slotHash is the home slot of a slot key: svcHash for an IPv4 key,
// svc_hash6 (bpf/xlb_svc.h) for an IPv6 one, whose other 12 VIP bytes
// are mixed into the IPv4 hash's word first.
func slotHash(key wire.SvcSlot) uint32 {
	if key.Proto&wire.SvcProtoV6 == 0 {
		return svcHash(key.Vip, key.Port, key.Proto)
	}
	first := uint64(key.Vip) | uint64(key.Port)<<32 | uint64(key.Proto)<<48
	rest := flowhash.Mix64((uint64(key.Vip6[0])|uint64(key.Vip6[1])<<32)^hashSeed64) ^ uint64(key.Vip6[2])
	return uint32(flowhash.Mix64(first ^ rest))
}

// load reads the index from m. Pinned by an earlier agent, it must have
// been written with this hash and geometry: a service this program would
// not find where it sits would be invisible to packets, and this mirror
// would add it a second time and never remove the stale copy. A change of
// the slot count makes the agent migrate to fresh maps before this runs;
// a change of the hash alone is caught here.
func (x *svcIndex) load(m *ebpf.Map) error {
	if m.MaxEntries() != SvcSlots {
		return fmt.Errorf("read service index: it has %d slots, want %d", m.MaxEntries(), SvcSlots)
	}
	err := bpfobj.EachInArray(m, func(k uint32, v *wire.SvcSlot) {
		if k < SvcSlots {
			x.set(int(k), *v)
		}
	})
	if err != nil {
		return fmt.Errorf("read service index: %w", err)
	}
	for i, s := range x.slots {
		if s.Vip == 0 {
			continue
		}
		if at, _ := x.find(s); at != i {
			vip, port, proto := s.Service()
			return fmt.Errorf("pinned service index: slot %d holds %v:%d (protocol %d), where this xlb does not look for it: an xlb with another service hash wrote the index. Stop the agent that runs, then run `xlb cleanup` (drops established flows)",
				i, vip, port, proto)
		}
	}
	return nil
}

func sameKey(a, b wire.SvcSlot) bool {
	return a.Vip == b.Vip && a.Port == b.Port && a.Proto == b.Proto && a.Vip6 == b.Vip6
}

// find returns the slot holding key (or -1) and the first free slot on
// its probe path (or -1).
func (x *svcIndex) find(key wire.SvcSlot) (at, free int) {
	at, free = -1, -1
	h := slotHash(key)
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

func (x *svcIndex) write(m slotWriter, idx int, v wire.SvcSlot) error {
	if err := m.Put(uint32(idx), v); err != nil {
		return fmt.Errorf("write service index slot %d: %w", idx, err)
	}
	x.set(idx, v)
	return nil
}

// set records slot idx as v in the mirror.
func (x *svcIndex) set(idx int, v wire.SvcSlot) {
	x.slots[idx] = v
	if v.Vip == 0 {
		delete(x.used, idx)
		return
	}
	if x.used == nil {
		x.used = map[int]struct{}{}
	}
	x.used[idx] = struct{}{}
}

// place returns the slot for key: where it is, or the first free slot on
// its probe path.
func (x *svcIndex) place(key wire.SvcSlot) (int, error) {
	at, free := x.find(key)
	if at >= 0 {
		return at, nil
	}
	if free < 0 {
		return -1, fmt.Errorf("service index: no free slot among the %d from this service's home slot on (too many services hash together); remove a service or report this", svcProbes)
	}
	return free, nil
}

// upsert installs key (with its Id and Encap) or updates it in place.
func (x *svcIndex) upsert(m slotWriter, key wire.SvcSlot) error {
	idx, err := x.place(key)
	if err != nil {
		return err
	}
	if x.slots[idx] == key {
		return nil
	}
	if x.slots[idx].Vip == 0 {
		hidden := key
		hidden.Vip = 0
		if err := x.write(m, idx, hidden); err != nil {
			return err
		}
	}
	return x.write(m, idx, key)
}

// remove deletes key, leaving a tombstone, and turns tombstones that end
// a probe path back into empty slots so misses stay short.
func (x *svcIndex) remove(m slotWriter, key wire.SvcSlot) error {
	at, _ := x.find(key)
	if at < 0 {
		return nil
	}
	if err := x.write(m, at, wire.SvcSlot{Port: tombstonePort}); err != nil {
		return err
	}
	for i := at; ; i = (i - 1 + SvcSlots) % SvcSlots {
		next := x.slots[(i+1)%SvcSlots]
		cur := x.slots[i]
		if !(cur.Vip == 0 && cur.Port == tombstonePort) || !(next.Vip == 0 && next.Port == 0 && next.Proto == 0) {
			return nil
		}
		if err := x.write(m, i, wire.SvcSlot{}); err != nil {
			return err
		}
	}
}

// services returns the installed services, in slot order.
func (x *svcIndex) services() []wire.SvcSlot {
	idx := slices.Sorted(maps.Keys(x.used))
	out := make([]wire.SvcSlot, 0, len(idx))
	for _, i := range idx {
		out = append(out, x.slots[i])
	}
	return out
}
