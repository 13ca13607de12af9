package lb

import (
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// services is the program's service lookup: the service index
// (svc_index, mirrored by svcIndex) and the VIP set in front of it (vips
// and vip_filter, mirrored by vipSet). The VIP set is derived from the
// index. Its methods are called with the data plane's mu held.
type services struct {
	slotMap, vipMap, filterMap *ebpf.Map
	index                      svcIndex
	vips                       vipSet
}

func newServices(slots, vips, filter *ebpf.Map) services {
	return services{slotMap: slots, vipMap: vips, filterMap: filter}
}

func (s *services) vipMaps() vipMaps {
	return vipMaps{vips: s.vipMap, filter: s.filterMap}
}

// load reads the index an earlier agent left, and makes the VIP set its
// own again: an agent that stopped between writing the one and the other
// left them apart, and tables that need no rewrite no longer bring them
// together.
func (s *services) load() error {
	if err := s.index.load(s.slotMap); err != nil {
		return err
	}
	return s.resync()
}

// install puts key in the index, or updates it there, and its VIP in the
// VIP set.
func (s *services) install(key wire.SvcSlot) error {
	at, _ := s.index.find(key)
	if at >= 0 && s.index.slots[at] == key {
		return nil // installed exactly (same ID and encap): nor has the VIP set changed
	}
	// An earlier write failed: the maps may lack VIPs the index has. A
	// VIP in the set before its service is in the index costs nothing;
	// the reverse would pass the VIP's fragments.
	if err := s.repair(); err != nil {
		return err
	}
	if at < 0 {
		if err := s.vips.add(s.vipMaps(), vipOf(key)); err != nil {
			return err
		}
	}
	if err := s.index.upsert(s.slotMap, key); err != nil {
		if at < 0 {
			_ = s.vips.remove(s.vipMaps(), vipOf(key))
		}
		return err
	}
	return nil
}

// remove takes key out of the index, and then its VIP out of the VIP set:
// no packet finds the service while its VIP is already unknown.
func (s *services) remove(key wire.SvcSlot) error {
	at, _ := s.index.find(key)
	if err := s.index.remove(s.slotMap, key); err != nil || at < 0 {
		return err
	}
	return s.vips.remove(s.vipMaps(), vipOf(key))
}

// vipOf is the VIP of a slot key.
func vipOf(key wire.SvcSlot) netip.Addr {
	vip, _, _ := key.Service()
	return vip
}

// repair rewrites the VIP set from the index if a write failed since it
// was last whole.
func (s *services) repair() error {
	if !s.vips.dirty {
		return nil
	}
	return s.resync()
}

// resync rewrites the VIP set and its filter from the index.
func (s *services) resync() error {
	want := map[netip.Addr]uint32{}
	for _, slot := range s.index.services() {
		want[vipOf(slot)]++
	}
	var inMap []netip.Addr
	var vip wire.Addr
	var n uint32
	it := s.vipMap.Iterate()
	for it.Next(&vip, &n) {
		inMap = append(inMap, vip.IP())
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read VIP set: %w", err)
	}
	return s.vips.reset(s.vipMaps(), want, inMap)
}

// list returns the installed services' slots.
func (s *services) list() []wire.SvcSlot { return s.index.services() }

// IndexService installs service id on key in the service index, and its
// VIP in the VIP set, without a table: its packets find the service and
// are dropped for want of a backend. For benchmarks of the index with
// more services than tables would fit in memory; the agent installs a
// service with UpsertService.
func (d *Dataplane) IndexService(id uint32, key ServiceKey, encap Encap) error {
	k, err := slotKey(key)
	if err != nil {
		return err
	}
	k.Id, k.Encap = id, uint8(encap)
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.svcs.install(k)
}

// IndexProbes says how many slots past its home slot the service on key
// sits in the index (0: at home); false if the index has no such
// service. Benchmarks report it beside the cost of a lookup.
func (d *Dataplane) IndexProbes(key ServiceKey) (int, bool) {
	k, err := slotKey(key)
	if err != nil {
		return 0, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	at, _ := d.svcs.index.find(k)
	if at < 0 {
		return 0, false
	}
	return (at - int(svcHash(k.Vip, k.Port, k.Proto)%SvcSlots) + SvcSlots) % SvcSlots, true
}

// VIPFilterHit says whether addr's bit in the VIP filter is set, so that
// a packet to it that is no service's is looked up in the VIP set too,
// and whether addr is a VIP. Benchmarks pick addresses for the miss path
// with it.
func (d *Dataplane) VIPFilterHit(addr netip.Addr) (bit, vip bool) {
	b := vipFilterBit(addr)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.svcs.vips.words != nil {
		bit = d.svcs.vips.words[b/64]&(1<<(b%64)) != 0
	}
	return bit, d.svcs.vips.count[addr] != 0
}
