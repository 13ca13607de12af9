package lb

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// UpsertBackend registers backend id with its address and port. Tables
// carry the address of each backend they name (copied when the table is
// written), so an id keeps its address and port until DeleteBackend frees
// it. DSR services ignore the port (they deliver to VIP:port); NAT and
// DNAT services rewrite the destination to it (port 0: the service's
// own).
func (d *Dataplane) UpsertBackend(id uint32, ap netip.AddrPort) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.backends.upsert(id, ap)
}

// DeleteBackend clears backend id and its counters. Tables must no longer
// reference it.
func (d *Dataplane) DeleteBackend(id uint32) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.backends.delete(id)
}

// ServiceCounters is what service id has forwarded: the sum of its
// backends' counters and of those its departed backends had counted.
func (d *Dataplane) ServiceCounters(id uint32) (Counters, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.backends.serviceCounters(id)
}

// BackendCounters sums backend id's per-CPU counters.
func (d *Dataplane) BackendCounters(id uint32) (Counters, error) {
	return d.backends.counters(id)
}

// registry is the backend registry: the backend IDs with their addresses
// and the service each counts for (the backends map), their per-CPU
// counters and cached next hops (backend_stats), what the backends a
// service no longer has had counted for it (svc_retired), and the
// generation that keeps the next hops fresh (nh_gen). Its methods are
// called with the data plane's mu held.
type registry struct {
	backends, stats, retired *ebpf.Map
	nhGen                    *ebpf.Variable
	max                      uint32                    // backend IDs the maps hold
	addrs                    map[uint32]netip.AddrPort // mirror of backends: id -> address and port
	owner                    ownership                 // mirror of backends: which service each counts for
}

func newRegistry(backends, stats, retired *ebpf.Map, nhGen *ebpf.Variable, max uint32) registry {
	return registry{backends: backends, stats: stats, retired: retired, nhGen: nhGen, max: max,
		addrs: map[uint32]netip.AddrPort{}, owner: newOwnership()}
}

// load reads the backends an earlier agent left in the map.
func (r *registry) load() error {
	err := bpfobj.EachInArray(r.backends, func(id uint32, be *wire.Backend) {
		if a := be.Addr.IP(); a.IsValid() {
			r.addrs[id] = netip.AddrPortFrom(a, wire.PortFrom(be.Port))
		}
		r.owner.set(id, be.Owner)
	})
	if err != nil {
		return fmt.Errorf("read backends: %w", err)
	}
	return nil
}

func (r *registry) upsert(id uint32, ap netip.AddrPort) error {
	if id >= r.max {
		return fmt.Errorf("backend %d %v: id out of range", id, ap)
	}
	if err := usableAddr(ap.Addr()); err != nil {
		return fmt.Errorf("backend %d: address %w", id, err)
	}
	if old, ok := r.addrs[id]; ok {
		if old == ap {
			return nil
		}
		return fmt.Errorf("backend %d already has address %v: delete it before reusing the id", id, old)
	}
	if err := r.backends.Put(id, backendEntry(ap, r.owner.get(id))); err != nil {
		return fmt.Errorf("write backend %d: %w", id, err)
	}
	r.addrs[id] = ap
	return r.invalidateNextHops()
}

// backendEntry is the registry's entry of backend ap owned by owner.
func backendEntry(ap netip.AddrPort, owner uint32) wire.Backend {
	return wire.Backend{Addr: wire.AddrOf(ap.Addr()), Owner: owner, Port: wire.Port(ap.Port())}
}

func (r *registry) delete(id uint32) error {
	if id >= r.max {
		return fmt.Errorf("backend %d: id out of range", id)
	}
	if err := r.retire(id); err != nil {
		return err
	}
	if err := r.backends.Put(id, wire.Backend{}); err != nil {
		return fmt.Errorf("clear backend %d: %w", id, err)
	}
	delete(r.addrs, id)
	r.owner.set(id, 0)
	if err := r.invalidateNextHops(); err != nil {
		return err
	}
	return bpfobj.ZeroPerCPU[wire.BackendState](r.stats, id)
}

// named lists the backend ids that table names, each once, leaving out
// those beyond the backend maps (no backend can have them). It reads
// nothing that changes: callers need not hold mu.
func (r *registry) named(table []uint32) []uint32 {
	seen := make([]uint64, (r.max+63)/64)
	var out []uint32
	for _, id := range table {
		if id >= r.max {
			continue
		}
		if w, bit := id/64, uint64(1)<<(id%64); seen[w]&bit == 0 {
			seen[w] |= bit
			out = append(out, id)
		}
	}
	return out
}

// claim records service svc as the owner of the backends named, those
// its table names, and returns their addresses indexed by id (the zero
// netip.Addr for an id that has none). A backend that moves from another
// service takes its history along into that service's retired counters
// first.
func (r *registry) claim(svc uint32, named []uint32) ([]netip.Addr, error) {
	var addrs []netip.Addr
	if len(named) > 0 {
		addrs = make([]netip.Addr, slices.Max(named)+1)
	}
	for _, b := range named {
		addrs[b] = r.addrs[b].Addr()
		if _, ok := r.addrs[b]; !ok || r.owner.get(b) == svc+1 {
			continue
		}
		if r.owner.get(b) != 0 {
			if err := r.retire(b); err != nil {
				return nil, err
			}
			if err := bpfobj.ZeroPerCPU[wire.BackendState](r.stats, b); err != nil {
				return nil, err
			}
		}
		if err := r.setOwner(b, svc+1); err != nil {
			return nil, err
		}
	}
	return addrs, nil
}

// tableEntries is a table as the program reads it: each slot's backend
// id with the address it has in addrs (indexed by id). An id without one
// gets address 0: the program drops its packets.
func tableEntries(table []uint32, addrs []netip.Addr) []wire.TableEntry {
	entries := make([]wire.TableEntry, len(table))
	for i, id := range table {
		entries[i] = wire.NewTableEntry(id, addrOf(addrs, id))
	}
	return entries
}

// addrOf is backend id's address in addrs (indexed by id); none beyond.
func addrOf(addrs []netip.Addr, id uint32) netip.Addr {
	if int(id) < len(addrs) {
		return addrs[id]
	}
	return netip.Addr{}
}

// countFor says whether every backend in names exists and counts for
// service svc already.
func (r *registry) countFor(svc uint32, names []uint32) bool {
	for _, b := range names {
		if _, ok := r.addrs[b]; !ok || r.owner.get(b) != svc+1 {
			return false
		}
	}
	return true
}

// release ends service svc's claim on its backends, whose counters
// restart, and resets its retired counters: neither counts towards a
// later service that gets its id.
func (r *registry) release(svc uint32) error {
	for _, b := range r.owner.backends(svc + 1) {
		if err := r.setOwner(b, 0); err != nil {
			return err
		}
		if err := bpfobj.ZeroPerCPU[wire.BackendState](r.stats, b); err != nil {
			return err
		}
	}
	if err := r.retired.Put(svc, wire.Counter{}); err != nil {
		return fmt.Errorf("reset counters of service %d: %w", svc, err)
	}
	return nil
}

// list returns the backends by id, and the service each counts for. The
// mirrors hold what the map holds: read from it when the data plane was
// opened, and changed only with it since (the pin path's lock keeps other
// agents out).
func (r *registry) list() (addrs map[uint32]netip.AddrPort, owners map[uint32]uint32) {
	addrs = maps.Clone(r.addrs)
	owners = make(map[uint32]uint32, len(r.owner.of))
	for b, o := range r.owner.of {
		owners[b] = o - 1
	}
	return addrs, owners
}

func (r *registry) serviceCounters(svc uint32) (Counters, error) {
	var c wire.Counter
	if err := r.retired.Lookup(svc, &c); err != nil {
		return Counters{}, fmt.Errorf("read counters of service %d: %w", svc, err)
	}
	total := Counters{Packets: c.Packets, Bytes: c.Bytes}
	for _, b := range r.owner.backends(svc + 1) {
		bc, err := r.counters(b)
		if err != nil {
			return Counters{}, err
		}
		total.Packets += bc.Packets
		total.Bytes += bc.Bytes
	}
	return total, nil
}

// counters sums backend id's per-CPU counters. It reads only the map:
// callers need not hold mu.
func (r *registry) counters(id uint32) (Counters, error) {
	return bpfobj.SumPerCPUOf(r.stats, id, func(s wire.BackendState) wire.Counter { return s.Stats })
}

// retire adds backend b's counters to its owner's retired counters.
func (r *registry) retire(b uint32) error {
	o := r.owner.get(b)
	if o == 0 {
		return nil
	}
	bc, err := r.counters(b)
	if err != nil {
		return err
	}
	var c wire.Counter
	if err := r.retired.Lookup(o-1, &c); err != nil {
		return fmt.Errorf("read counters of service %d: %w", o-1, err)
	}
	c.Packets += bc.Packets
	c.Bytes += bc.Bytes
	if err := r.retired.Put(o-1, c); err != nil {
		return fmt.Errorf("write counters of service %d: %w", o-1, err)
	}
	return nil
}

func (r *registry) setOwner(b, owner uint32) error {
	if err := r.backends.Put(b, backendEntry(r.addrs[b], owner)); err != nil {
		return fmt.Errorf("write backend %d: %w", b, err)
	}
	r.owner.set(b, owner)
	return nil
}

// invalidateNextHops bumps the next-hop cache generation: every CPU's
// cached FIB result becomes stale and the next packet to each backend
// takes bpf_fib_lookup again.
func (r *registry) invalidateNextHops() error {
	var gen uint32
	if err := r.nhGen.Get(&gen); err != nil {
		return fmt.Errorf("read next-hop generation: %w", err)
	}
	// Odd values only: 0, the generation of an entry never filled, must
	// never be current.
	if err := r.nhGen.Set((gen + 2) | 1); err != nil {
		return fmt.Errorf("bump next-hop generation: %w", err)
	}
	return nil
}
