package lb

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// UpsertService installs or replaces a service. A new table is written
// into a fresh inner map and swapped in with one update of the outer
// map, so a packet sees either the old or the new table, never a mix. A
// new service becomes visible in the service index only once its table
// is in place. When the installed table already holds exactly these
// entries (backend IDs and the addresses they carry), as a table recorded
// by an earlier agent on the same pinned maps may (tables.go), it is
// kept: no new table, no swap. The table's backends must exist
// (UpsertBackend) before the call and stay until it returns.
//
// An EncapGUEHint service's packets take their backend and hint
// (Chain, Generation) from its chain table, swapped in the same way and
// kept when unchanged (chains.go); a service of another encapsulation has
// none. A stateful service cannot have hints.
func (d *Dataplane) UpsertService(s Service) error {
	key, err := d.checkUpsert(s)
	if err != nil {
		return err
	}
	d.svcMu[s.ID].Lock()
	defer d.svcMu[s.ID].Unlock()

	// The backends the table names count for the service from now on,
	// and its entries carry their addresses.
	named := d.backends.named(s.Table)
	d.mu.Lock()
	if err := d.checkFamilies(s, named); err != nil {
		d.mu.Unlock()
		return err
	}
	addrs, err := d.backends.claim(s.ID, named)
	d.mu.Unlock()
	if err != nil {
		return fmt.Errorf("service %d: %w", s.ID, err)
	}
	// Without d.mu from here to the swap: filling and swapping take
	// milliseconds each, which other services' calls can use.
	entries := tableEntries(s.Table, addrs)
	if err := d.tables.install(s, entries, addrs); err != nil {
		return fmt.Errorf("service %d: %w", s.ID, err)
	}
	// Last the index: packets find the service once its tables are in.
	return d.index(s, key)
}

// checkUpsert checks what UpsertService takes and returns the service's
// index slot key.
func (d *Dataplane) checkUpsert(s Service) (wire.SvcSlot, error) {
	key, err := checkService(s)
	if err != nil {
		return key, err
	}
	if uint32(len(s.Table)) != d.tables.size {
		return key, fmt.Errorf("service %d: table has %d slots, want %d", s.ID, len(s.Table), d.tables.size)
	}
	if s.Encap == EncapGUEHint {
		if err := d.tables.checkChain(s.Chain); err != nil {
			return key, fmt.Errorf("service %d: %w", s.ID, err)
		}
	}
	return key, nil
}

// checkService checks what UpsertService and KeepService take alike and
// returns the service's index slot key.
func checkService(s Service) (wire.SvcSlot, error) {
	if s.ID >= MaxServices {
		return wire.SvcSlot{}, fmt.Errorf("service %d: id out of range", s.ID)
	}
	switch s.Encap {
	case EncapIPIP, EncapGUE, EncapGUEHint, EncapNAT, EncapDNAT:
	default:
		return wire.SvcSlot{}, fmt.Errorf("service %d: unknown encapsulation %d", s.ID, s.Encap)
	}
	if s.Encap == EncapGUEHint && s.Stateful {
		return wire.SvcSlot{}, fmt.Errorf("service %d: a stateful service has no daisy-chaining hints; use EncapGUE", s.ID)
	}
	if (s.Encap == EncapNAT || s.Encap == EncapDNAT) && s.Stateful {
		return wire.SvcSlot{}, fmt.Errorf("service %d: a NAT service keeps a session per connection already; it cannot also be stateful", s.ID)
	}
	key, err := slotKey(s.Key)
	if err != nil {
		return wire.SvcSlot{}, fmt.Errorf("service %d: %w", s.ID, err)
	}
	if s.Key.VIP.Is6() {
		if err := checkService6(s); err != nil {
			return wire.SvcSlot{}, fmt.Errorf("service %d (%v): %w", s.ID, s.Key.VIP, err)
		}
	}
	return key, nil
}

// checkService6 refuses what an IPv6 service cannot have yet: nothing
// any more (NAT, DNAT and daisy-chaining hints all take IPv6 VIPs and
// backends).
func checkService6(Service) error {
	return nil
}

// checkFamilies checks that service s can reach the backends named (the
// IDs its table names) in its encapsulation, per the family matrix of
// docs/decisions/0008-ipv6-data-plane.md: an IPv6 backend takes an IPv6
// outer header, which needs the node's IPv6 address, and only the IPIP
// and GUE paths have one (stateless, stateful or daisy-chained); an IPv4
// backend or VIP needs the node's IPv4 address (an IPv6-only node serves
// IPv6 alone). NAT and DNAT rewrite within one family: their backends are
// of the VIP's (docs/decisions/0007-nat-sessions.md). A daisy-chained
// slot's hint names owners of its backend's family (checkChainFamilies).
// Called with d.mu held.
func (d *Dataplane) checkFamilies(s Service, named []uint32) error {
	if s.Key.VIP.Is4() && !d.node4 {
		return fmt.Errorf("service %d: VIP %v is IPv4, and the node has no IPv4 address: the program answers IPv4 clients from it (fragmentation needed); set the node's IPv4 address or give the service an IPv6 VIP", s.ID, s.Key.VIP)
	}
	nat := s.Encap == EncapNAT || s.Encap == EncapDNAT
	for _, b := range named {
		a := d.backends.addrs[b].Addr()
		if nat && a.Is6() != s.Key.VIP.Is6() {
			return fmt.Errorf("service %d: backend %d (%v) is %s and the VIP %v is %s: NAT and DNAT rewrite addresses within one family (no NAT64); "+
				"give the service backends of its VIP's family, or use dsr-ipip or dsr-gue, which tunnel between families", s.ID, b, a, family(a), s.Key.VIP, family(s.Key.VIP))
		}
		if a.Is4() && !d.node4 {
			return fmt.Errorf("service %d: backend %d (%v) is IPv4, and the node has no IPv4 address to send from: set the node's IPv4 address or remove the backend", s.ID, b, a)
		}
		if a.Is6() && !d.node6 {
			return fmt.Errorf("service %d: backend %d (%v) is IPv6, and the node has no IPv6 address to send from: set the node's IPv6 address or remove the backend", s.ID, b, a)
		}
	}
	if s.Encap == EncapGUEHint {
		return d.checkChainFamilies(s)
	}
	return nil
}

// checkChainFamilies refuses a daisy-chained slot whose hint names a
// previous owner of the other family than the slot's backend: the hint
// travels in the backend's family (16-byte owners over IPv6, 4-byte ones
// over IPv4), and a backend chains by rewriting the outer header, so it
// reaches owners of that family only. The agent leaves such owners out
// and counts them (docs/decisions/0008-ipv6-data-plane.md). Called with
// d.mu held.
func (d *Dataplane) checkChainFamilies(s Service) error {
	if len(s.Chain) != len(s.Table) {
		return nil // no hints (checkChain checked the length)
	}
	for i, c := range s.Chain {
		id := s.Table[i]
		be := d.backends.addrs[id].Addr()
		if !be.IsValid() {
			continue // no backend: a slot without one is dropped
		}
		for _, p := range []netip.Addr{c.Prev, c.Prev2} {
			if p.IsValid() && !p.IsUnspecified() && p.Is6() != be.Is6() {
				return fmt.Errorf("service %d: chain slot %d: previous owner %v is %s and the slot's backend %d (%v) is %s: a hint names owners of its backend's family only (it travels in that family, and the backend chains by rewriting the outer header); leave the owner out of the slot's hint", s.ID, i, p, family(p), id, be, family(be))
			}
		}
	}
	return nil
}

// family names a's address family for messages.
func family(a netip.Addr) string {
	if a.Is6() {
		return "IPv6"
	}
	return "IPv4"
}

// slotKey is the index slot key of k: its VIP, port and protocol as the
// program compares them.
func slotKey(k ServiceKey) (wire.SvcSlot, error) {
	if err := usableAddr(k.VIP); err != nil {
		return wire.SvcSlot{}, fmt.Errorf("VIP %w", err)
	}
	if k.Proto != ProtoTCP && k.Proto != ProtoUDP {
		return wire.SvcSlot{}, fmt.Errorf("protocol %d is not TCP or UDP", k.Proto)
	}
	return wire.SvcKey(k.VIP, k.Port, k.Proto), nil
}

// usableAddr says why a is no VIP or backend address: IPv4 other than
// 0.0.0.0, or IPv6 other than unspecified, multicast, link-local (which
// a FIB cannot route without an interface) and IPv4-mapped (which is
// IPv4, to be given as such). The message starts with the address.
func usableAddr(a netip.Addr) error {
	switch {
	case !a.IsValid():
		return errors.New("missing: give an IPv4 or IPv6 address")
	case a.Is4():
		if a.IsUnspecified() {
			return fmt.Errorf("%v is not a usable IPv4 address", a)
		}
	case a.Zone() != "":
		return fmt.Errorf("%v has a zone: give a global IPv6 address", a)
	case a.Is4In6():
		return fmt.Errorf("%v is an IPv4-mapped IPv6 address: give it as IPv4 (%v)", a, a.Unmap())
	case a.IsUnspecified():
		return fmt.Errorf("%v is the unspecified IPv6 address", a)
	case a.IsMulticast():
		return fmt.Errorf("%v is an IPv6 multicast address: give a unicast one", a)
	case a.IsLinkLocalUnicast():
		return fmt.Errorf("%v is an IPv6 link-local address: give a global (or unique local) one", a)
	}
	return nil
}

// index writes service s's index slot, key plus its ID, encapsulation and
// flags, once its table and source ranges are in place, and drops the
// hints of a service that has none. Called with service s.ID's lock held,
// without d.mu: a chain's deletion waits for an RCU grace period.
func (d *Dataplane) index(s Service, key wire.SvcSlot) error {
	if s.Encap == EncapDNAT {
		// Its replies pass the node as transit traffic, which the
		// program looks up only from now on.
		if err := d.enableDNAT(); err != nil {
			return fmt.Errorf("service %d: %w", s.ID, err)
		}
	}
	key.Id, key.Encap = s.ID, uint8(s.Encap)
	if s.Stateful {
		key.Flags |= wire.SvcStateful
	}
	if s.ClientIP {
		key.Flags |= wire.SvcClientIP
	}
	if err := d.withRanges(s.ID, s.SourceRanges, key); err != nil {
		return err
	}
	if s.Encap != EncapGUEHint {
		// Once the index says so, no packet of the service reads its
		// hints any more.
		if err := d.tables.dropChain(s.ID); err != nil {
			return fmt.Errorf("service %d: %w", s.ID, err)
		}
	}
	return nil
}

// ErrNotKept is KeepService's answer when it cannot vouch for the table
// a service has: the caller builds the table and upserts it.
var ErrNotKept = errors.New("no installed table built from this origin")

// KeepService installs service s (key, encapsulation, flags) with the
// table it has, which the caller need not build, and so need not hold:
// s.Table and s.Chain are not read. It keeps the table if the record of
// the installed one says it was built from s.Origin (UpsertService
// recorded it, with the entries' digest) and if every backend in names,
// the IDs the table may name, already counts for the service, so that
// claiming them would change nothing. Otherwise it changes nothing and
// returns ErrNotKept. A daisy-chained service keeps its chain table (its
// hints) the same way, if the chain's record says it was built for the
// same Maglev table (s.Origin) with hints from s.HintsOrigin; with
// s.HintsOrigin zero, whatever history its hints came from (a restarted
// agent that no longer knows the history an earlier one recorded keeps
// that one's hints instead of writing none).
//
// It is sound as long as equal origins mean equal tables: the caller's
// origin must cover everything the table is built from, the table size
// included, and change whenever how it is built does. An agent restarted
// on pinned maps then touches no table's half megabyte
// (docs/benchmarks.md, ctlbench's restart case).
func (d *Dataplane) KeepService(s Service, names []uint32) error {
	key, err := checkService(s)
	if err != nil {
		return err
	}
	if s.Origin == (Origin{}) {
		return ErrNotKept
	}
	d.svcMu[s.ID].Lock()
	defer d.svcMu[s.ID].Unlock()
	if !d.tables.builtFrom(s.ID, s.Origin) || s.Encap == EncapGUEHint && !d.tables.chainBuiltFrom(s.ID, s.Origin, s.HintsOrigin) {
		return ErrNotKept
	}
	d.mu.Lock()
	owned := d.backends.countFor(s.ID, names)
	d.mu.Unlock()
	if !owned {
		return ErrNotKept
	}
	return d.index(s, key)
}

// DeleteService removes a service: first from the index, so no packet
// finds it, then its tables and source ranges, and last its claim on its
// backends and its counters.
func (d *Dataplane) DeleteService(id uint32, key ServiceKey) error {
	k, err := slotKey(key)
	if err != nil {
		return err
	}
	if id < MaxServices {
		d.svcMu[id].Lock()
		defer d.svcMu[id].Unlock()
	}
	d.mu.Lock()
	err = d.svcs.remove(k)
	d.mu.Unlock()
	if err != nil {
		return fmt.Errorf("delete service %d: %w", id, err)
	}
	// Without d.mu: like a swap, a delete waits for an RCU grace period.
	if err := d.tables.delete(id); err != nil {
		return fmt.Errorf("delete service %d: %w", id, err)
	}
	if id < MaxServices {
		if err := d.policy.forget(id); err != nil {
			return fmt.Errorf("delete service %d: %w", id, err)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.backends.release(id); err != nil {
		return err
	}
	return d.svcs.repair()
}

// Installed is what the data plane holds, for an agent to adopt.
type Installed struct {
	// Services are the installed services, without tables or hints.
	Services []Service
	// Backends are the installed backends' addresses by id.
	Backends map[uint32]netip.Addr
	// AddrPorts are the installed backends' addresses with their ports
	// by id (what UpsertBackend was given): a NAT service's backend is
	// an address and a port.
	AddrPorts map[uint32]netip.AddrPort
	// Owners maps each backend that counts for a service to that
	// service's ID: the service whose table named it last. Adoption
	// gives every service back its own backend IDs with it, without
	// reading the tables, which would cost as much as writing them.
	Owners map[uint32]uint32
}

// Installed lists the installed services and backends.
func (d *Dataplane) Installed() (Installed, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var in Installed
	for _, s := range d.svcs.list() {
		vip, port, proto := s.Service()
		in.Services = append(in.Services, Service{
			ID:       s.Id,
			Key:      ServiceKey{VIP: vip, Port: port, Proto: proto},
			Encap:    Encap(s.Encap),
			Stateful: s.Flags&wire.SvcStateful != 0,
			ClientIP: s.Flags&wire.SvcClientIP != 0,
		})
	}
	in.AddrPorts, in.Owners = d.backends.list()
	in.Backends = make(map[uint32]netip.Addr, len(in.AddrPorts))
	for id, ap := range in.AddrPorts {
		in.Backends[id] = ap.Addr()
	}
	return in, nil
}

// Table reads service id's current Maglev table.
func (d *Dataplane) Table(id uint32) ([]uint32, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.tables.table(id)
}

// Chain reads service id's installed daisy-chain hints: one per table
// slot, and the generation. A service without hints (not EncapGUEHint, or
// all of them zero) has none: nil, 0.
func (d *Dataplane) Chain(id uint32) ([]ChainSlot, uint32, error) {
	if id >= MaxServices {
		return nil, 0, fmt.Errorf("chain of service %d: id out of range", id)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.tables.chain(id)
}
