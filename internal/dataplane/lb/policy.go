package lb

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/prefixset"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// policy owns the program's policy maps: the node's deny tables (deny4, deny6),
// the services' source ranges (svc_ranges4, svc_ranges6) and what each service
// dropped for its source (svc_src_drops). Both structures are inner
// maps, built whole (internal/dataplane/prefixset) and swapped in with
// one update, so a packet sees the old list or the new one, never a mix:
// a source allowed by both is never dropped while a list changes. A swap
// waits for an RCU grace period: the methods run without the data
// plane's mu.
type policy struct {
	deny4, deny6, ranges4, ranges6, stats *ebpf.Map
	// denyCells and deny6Nodes are the sizes of the deny tables' inner
	// maps.
	denyCells, deny6Nodes uint32

	denyMu sync.Mutex // serialises SetDenyList
	// ranges is, per service ID, the source ranges installed by this
	// process (nil: none, or not known after a restart). Read and
	// written under the service's lock.
	ranges [MaxServices][]netip.Prefix
}

func newPolicy(deny4, deny6, ranges4, ranges6, stats *ebpf.Map, denyCells, deny6Nodes uint32) *policy {
	return &policy{deny4: deny4, deny6: deny6, ranges4: ranges4, ranges6: ranges6, stats: stats,
		denyCells: denyCells, deny6Nodes: deny6Nodes}
}

// MaxDenyPrefixes is how many prefixes the node's deny list holds
// (XLB_DENY_MAX_PREFIXES): its table has room for one node and one leaf
// per prefix beside its root.
func (d *Dataplane) MaxDenyPrefixes() int {
	return (int(d.policy.denyCells) - prefixset.RootCells) / 2
}

// SetDenyList makes prefixes the node's deny list: packets to any VIP
// from a source they cover are dropped (drop_denied) before anything
// else is looked up. The table is built whole and swapped in with one
// update; an empty list removes it. Each family has a table of its own
// (IPv4 sources are looked up in deny4, IPv6 ones in deny6): both are
// built before either is swapped, so a list one table cannot hold
// changes neither.
func (d *Dataplane) SetDenyList(prefixes []netip.Prefix) error {
	d.policy.denyMu.Lock()
	defer d.policy.denyMu.Unlock()
	return d.policy.setDeny(prefixes)
}

func (p *policy) setDeny(prefixes []netip.Prefix) error {
	var v4, v6 []netip.Prefix
	for _, q := range prefixes {
		if q.Addr().Is4() {
			v4 = append(v4, q)
		} else {
			v6 = append(v6, q)
		}
	}
	var inner4, inner6 *ebpf.Map
	if len(v4) > 0 {
		t, err := prefixset.BuildDeny4(v4, int(p.denyCells))
		if err != nil {
			return fmt.Errorf("deny list: %w", err)
		}
		if inner4, err = NewDenyTable(t, p.denyCells); err != nil {
			return fmt.Errorf("deny list: %w", err)
		}
		defer inner4.Close()
	}
	if len(v6) > 0 {
		t, err := prefixset.BuildDeny6(v6, int(p.deny6Nodes))
		if err != nil {
			return fmt.Errorf("deny list: %w", err)
		}
		if inner6, err = NewDeny6Table(t, p.deny6Nodes); err != nil {
			return fmt.Errorf("deny list: %w", err)
		}
		defer inner6.Close()
	}
	return errors.Join(swapDeny(p.deny4, inner4, "IPv4"), swapDeny(p.deny6, inner6, "IPv6"))
}

// swapDeny makes inner outer's table (at key 0), or removes the table
// when inner is nil.
func swapDeny(outer, inner *ebpf.Map, family string) error {
	const key = uint32(0)
	if inner == nil {
		if err := outer.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove the %s deny table: %w", family, err)
		}
		return nil
	}
	// Returns once no program can still be reading the old table.
	if err := outer.Put(key, inner); err != nil {
		return fmt.Errorf("deny list: swap the %s table: %w", family, err)
	}
	return nil
}

// NewDeny6Table returns a new inner map for deny6 of nodes entries that
// holds t, as SetDenyList makes one before it swaps it in.
func NewDeny6Table(t prefixset.Deny6, nodes uint32) (*ebpf.Map, error) {
	if len(t.Nodes) > int(nodes) {
		return nil, fmt.Errorf("the IPv6 table takes %d nodes, more than the %d of the map", len(t.Nodes), nodes)
	}
	inner, err := newTable("xlb_deny6", uint32(unsafe.Sizeof(wire.Deny6Node{})), nodes)
	if err != nil {
		return nil, fmt.Errorf("create the IPv6 deny table: %w", err)
	}
	err = fillTable(inner, func(dst []byte, i int) {
		if i < len(t.Nodes) {
			copy(dst, words(t.Nodes[i:i+1]))
		}
	})
	if err != nil {
		inner.Close()
		return nil, fmt.Errorf("fill the IPv6 deny table: %w", err)
	}
	return inner, nil
}

// NewDenyTable returns a new inner map for deny4 of cells entries that
// holds t, as SetDenyList makes one before it swaps it in.
func NewDenyTable(t prefixset.Deny4, cells uint32) (*ebpf.Map, error) {
	if len(t.Cells) > int(cells) {
		return nil, fmt.Errorf("the table takes %d cells, more than the %d of the map", len(t.Cells), cells)
	}
	inner, err := newTable("xlb_deny4", uint32(unsafe.Sizeof(wire.DenyCell{})), cells)
	if err != nil {
		return nil, fmt.Errorf("create the deny table: %w", err)
	}
	err = fillTable(inner, func(dst []byte, i int) {
		if i < len(t.Cells) {
			copy(dst, words(t.Cells[i:i+1]))
		}
	})
	if err != nil {
		inner.Close()
		return nil, fmt.Errorf("fill the deny table: %w", err)
	}
	return inner, nil
}

// SetSourceRanges makes prefixes the source ranges of installed service
// id on key: from then on only sources they cover reach it, the others
// are dropped (drop_source_range, and counted for the service) before any
// table lookup. No prefixes: every source. UpsertService and KeepService
// take a service's ranges (Service.SourceRanges) themselves; this changes
// them alone.
func (d *Dataplane) SetSourceRanges(id uint32, key ServiceKey, prefixes []netip.Prefix) error {
	k, err := slotKey(key)
	if err != nil {
		return err
	}
	if id >= MaxServices {
		return fmt.Errorf("service %d: id out of range", id)
	}
	d.svcMu[id].Lock()
	defer d.svcMu[id].Unlock()
	d.mu.Lock()
	at, _ := d.svcs.index.find(k)
	var slot wire.SvcSlot
	if at >= 0 {
		slot = d.svcs.index.slots[at]
	}
	d.mu.Unlock()
	if at < 0 || slot.Id != id {
		return fmt.Errorf("service %d (%v:%d): not installed", id, key.VIP, key.Port)
	}
	slot.Flags &^= wire.SvcSourceRanges
	return d.withRanges(id, prefixes, slot)
}

// withRanges installs slot, service id's index slot without the
// SOURCE_RANGES flag, with the service's source ranges: the ranges go in
// before the flag that makes packets read them, and out after it. Called
// with service id's lock held, without d.mu.
func (d *Dataplane) withRanges(id uint32, prefixes []netip.Prefix, slot wire.SvcSlot) error {
	if len(prefixes) > 0 {
		if err := d.policy.setRanges(id, prefixes, slot.Proto&wire.SvcProtoV6 != 0); err != nil {
			return fmt.Errorf("service %d: source ranges: %w", id, err)
		}
		slot.Flags |= wire.SvcSourceRanges
	}
	d.mu.Lock()
	err := d.svcs.install(slot)
	d.mu.Unlock()
	if err != nil {
		return fmt.Errorf("service %d: %w", id, err)
	}
	if len(prefixes) == 0 {
		// Once the index says so, no packet of the service reads them.
		if err := d.policy.dropRanges(id); err != nil {
			return fmt.Errorf("service %d: %w", id, err)
		}
	}
	return nil
}

// setRanges swaps in service id's source ranges (of an IPv6 service's
// if v6), unless this process installed the same already. Called with
// service id's lock held.
func (p *policy) setRanges(id uint32, prefixes []netip.Prefix, v6 bool) error {
	if slices.Equal(p.ranges[id], prefixes) {
		return nil
	}
	var value any
	name, size, outer := "xlb_ranges4", unsafe.Sizeof(wire.Ranges4{}), p.ranges4
	if v6 {
		r, err := ranges6(prefixes)
		if err != nil {
			return err
		}
		value, name, size, outer = &r, "xlb_ranges6", unsafe.Sizeof(r), p.ranges6
	} else {
		r, err := prefixset.Ranges4(prefixes)
		if err != nil {
			return err
		}
		value = &r
	}
	inner, err := ebpf.NewMap(&ebpf.MapSpec{Name: name, Type: ebpf.Array, KeySize: 4,
		ValueSize: uint32(size), MaxEntries: 1})
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	defer inner.Close()
	if err := inner.Put(uint32(0), value); err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	if err := outer.Put(id, inner); err != nil {
		return fmt.Errorf("swap: %w", err)
	}
	p.ranges[id] = slices.Clone(prefixes)
	return nil
}

// dropRanges removes service id's source ranges. Called with service
// id's lock held, once the index no longer says the service has them.
func (p *policy) dropRanges(id uint32) error {
	p.ranges[id] = nil
	for _, m := range []*ebpf.Map{p.ranges4, p.ranges6} {
		if err := m.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove source ranges: %w", err)
		}
	}
	return nil
}

// forget removes what service id, being deleted, has: its source ranges
// and what it dropped for its source, so that a service that gets the ID
// next starts from zero. Called with service id's lock held, once the
// service left the index.
func (p *policy) forget(id uint32) error {
	return errors.Join(p.dropRanges(id), bpfobj.ZeroPerCPU[wire.Counter](p.stats, id))
}

// SourceRangeDrops sums what service id dropped because its source was
// outside the service's ranges.
func (d *Dataplane) SourceRangeDrops(id uint32) (Counters, error) {
	if id >= MaxServices {
		return Counters{}, fmt.Errorf("service %d: id out of range", id)
	}
	return bpfobj.SumPerCPU(d.policy.stats, id)
}
