package lb

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// The tables of daisy-chained services (EncapGUEHint) live in
// chain_tables: per service, an inner array of table size + 1 entries,
// swapped whole. Entry [slot] holds the slot's backend with its hint,
// entry [table size] the service's generation. The program reads such a
// service's backends from here only, so backend and hint change in one
// step; the service's Maglev table is written as for any service, for
// the control plane's own bookkeeping (adoption, Table).

// chainRecord is what this process last made of a service's chain
// entry, so that a service without hints costs no deletion each time it
// is upserted. Unknown until then (after a restart on pinned maps, say):
// the chain is deleted once. What a chain table holds is recorded in the
// pinned chain records (xlb_chain_sums), as tables are in xlb_table_sums
// (tables.go): an agent restarted on an unchanged configuration keeps
// every chain table, and KeepService even builds none.
type chainRecord struct {
	known bool
	inner ebpf.MapID // 0: no chain installed
}

// chainEntries lays out a service's chain table as the program reads it:
// its Maglev table's entries, each with its backend's address from addrs
// (indexed by id, as tableEntries has them), with the hints. An IPv6
// backend's entry has no address and its id carries wire.TableEntryV6,
// as in the Maglev table: the program reads the address from the
// registry, and the IPv4 path tells it from an IPv4 one by the branch it
// took for "no backend" (xlb_lb_chained).
func (t *tableStore) chainEntries(table []wire.TableEntry, addrs []netip.Addr, chain []ChainSlot, generation uint32) []wire.ChainEntry {
	entries := make([]wire.ChainEntry, t.size+1)
	for i, e := range table {
		a := addrOf(addrs, e.Backend())
		if a.Is6() && !a.Is4In6() {
			entries[i].Bid = e.Backend() | wire.TableEntryV6
			continue
		}
		entries[i].Bid, entries[i].Addr = e.Backend(), wire.AddrOf(a)
	}
	for i, c := range chain {
		entries[i].Prev = ownerAddr(c.Prev)
		entries[i].Prev2 = ownerAddr(c.Prev2)
		entries[i].Changed = c.Changed
	}
	entries[t.size].Changed = generation
	return entries
}

// ownerAddr is a hint's previous owner as the chain table holds it: all
// zero for none (the invalid address, 0.0.0.0 or ::), which both hint
// forms read as none.
func ownerAddr(a netip.Addr) wire.Addr {
	if !a.IsValid() || a.IsUnspecified() {
		return wire.Addr{}
	}
	return wire.AddrOf(a)
}

// checkChain validates a service's chain against the table size.
func (t *tableStore) checkChain(chain []ChainSlot) error {
	if chain != nil && uint32(len(chain)) != t.size {
		return fmt.Errorf("chain has %d slots, want %d (the table size) or none", len(chain), t.size)
	}
	for i, c := range chain {
		for _, p := range []netip.Addr{c.Prev, c.Prev2} {
			if p.IsValid() && p.Is4In6() {
				return fmt.Errorf("chain slot %d: previous owner %v is an IPv4-mapped IPv6 address; give it as IPv4", i, p)
			}
		}
	}
	return nil
}

// chainDigest identifies a chain's entries, in slot order (sum128, in
// host order: records never leave their host).
func chainDigest(entries []wire.ChainEntry) [digestSize]byte {
	return sum128("xlb chain v4", len(entries), words(entries))
}

// chainSum is a service's chain record (xlb_chain_sums): what its chain
// table holds, as tableSum says it of a Maglev table, with two origins:
// the Maglev table's whose backends its entries carry (Service.Origin),
// and the hints' (Service.HintsOrigin).
type chainSum struct {
	Inner  uint32
	Pad    uint32
	Sum    [digestSize]byte
	Origin Origin
	Hints  Origin
}

// chainInstalled returns service id's chain record if it names the chain
// table the service has. Called with service id's lock held.
func (t *tableStore) chainInstalled(id uint32) (chainSum, bool) {
	var rec chainSum
	if t.chainSums == nil || t.chainSums.Lookup(id, &rec) != nil || rec.Inner == 0 || rec.Inner != currentInner(t.chainTables, id) {
		return chainSum{}, false
	}
	return rec, true
}

// chainBuiltFrom reports whether service id's chain table was built for
// the Maglev table of origin, with hints from hints (zero: any hints), as
// its record says, and notes what it has. Called with service id's lock
// held.
func (t *tableStore) chainBuiltFrom(id uint32, origin, hints Origin) bool {
	rec, ok := t.chainInstalled(id)
	if !ok || origin == (Origin{}) || rec.Origin != origin || hints != (Origin{}) && rec.Hints != hints {
		return false
	}
	t.chains[id] = chainRecord{known: true, inner: ebpf.MapID(rec.Inner)}
	return true
}

// installChain makes table, chain and generation service id's chain
// table, built from origin and hints, keeping the installed inner map
// when its record says it holds them. Called with service id's lock
// held, without the data plane's mu.
func (t *tableStore) installChain(id uint32, table []wire.TableEntry, addrs []netip.Addr, chain []ChainSlot, generation uint32, origin, hints Origin) error {
	entries := t.chainEntries(table, addrs, chain, generation)
	sum := chainDigest(entries)
	if rec, ok := t.chainInstalled(id); ok && rec.Sum == sum {
		if rec.Origin != origin || rec.Hints != hints {
			// Best effort, as record: without it, the next agent
			// builds this chain once more to compare.
			rec.Origin, rec.Hints = origin, hints
			_ = t.chainSums.Put(id, rec)
		}
		t.chains[id] = chainRecord{known: true, inner: ebpf.MapID(rec.Inner)}
		return nil
	}
	rec := &t.chains[id]
	inner, err := newTable("xlb_chain", uint32(unsafe.Sizeof(wire.ChainEntry{})), t.size+1)
	if err != nil {
		return fmt.Errorf("create chain: %w", err)
	}
	defer inner.Close()
	if err := fillTable(inner, func(dst []byte, i int) {
		copy(dst, words(entries[i:i+1]))
	}); err != nil {
		return fmt.Errorf("fill chain: %w", err)
	}
	*rec = chainRecord{} // unknown while the swap is under way
	if err := t.chainTables.Put(id, inner); err != nil {
		return fmt.Errorf("swap chain: %w", err)
	}
	if mid := innerID(inner); mid != 0 {
		if t.chainSums != nil {
			_ = t.chainSums.Put(id, chainSum{Inner: mid, Sum: sum, Origin: origin, Hints: hints})
		}
		*rec = chainRecord{known: true, inner: ebpf.MapID(mid)}
	}
	return nil
}

// dropChain removes service id's hints: its packets carry zero hints.
// Called with service id's lock held, without the data plane's mu (a
// delete from a map-in-map waits for the programs reading the old inner
// map).
func (t *tableStore) dropChain(id uint32) error {
	rec := &t.chains[id]
	if rec.known && rec.inner == 0 {
		return nil
	}
	if err := t.chainTables.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		*rec = chainRecord{}
		return fmt.Errorf("delete chain: %w", err)
	}
	if t.chainSums != nil {
		// A record left behind names a map that is gone: harmless.
		_ = t.chainSums.Put(id, chainSum{})
	}
	*rec = chainRecord{known: true}
	return nil
}

// chain reads service id's installed daisy-chain hints (Dataplane.Chain).
func (t *tableStore) chain(id uint32) ([]ChainSlot, uint32, error) {
	var innerID ebpf.MapID
	if err := t.chainTables.Lookup(id, &innerID); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, 0, nil
		}
		return nil, 0, fmt.Errorf("chain of service %d: %w", id, err)
	}
	inner, err := ebpf.NewMapFromID(innerID)
	if err != nil {
		return nil, 0, fmt.Errorf("chain of service %d: %w", id, err)
	}
	defer inner.Close()
	n := inner.MaxEntries()
	keys := make([]uint32, n)
	vals := make([]wire.ChainEntry, n)
	var cursor ebpf.MapBatchCursor
	got, err := inner.BatchLookup(&cursor, keys, vals, nil)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil, 0, fmt.Errorf("read chain of service %d: %w", id, err)
	}
	if n != t.size+1 || got != int(n) {
		return nil, 0, fmt.Errorf("chain of service %d: read %d of %d entries, want %d", id, got, n, t.size+1)
	}
	chain := make([]ChainSlot, t.size)
	var generation uint32
	for i := range got {
		e := vals[i]
		if keys[i] == t.size {
			generation = e.Changed
			continue
		}
		chain[keys[i]].Prev = e.Prev.IP()
		chain[keys[i]].Prev2 = e.Prev2.IP()
		chain[keys[i]].Changed = e.Changed
	}
	if generation == 0 && !slices.ContainsFunc(chain, func(c ChainSlot) bool { return c != ChainSlot{} }) {
		return nil, 0, nil // no hints: only backends
	}
	return chain, generation, nil
}
