package lb

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"unsafe"

	"github.com/cespare/xxhash/v2"
	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// tableStore holds the services' tables: a Maglev table per service
// (maglev_tables) and a chain table per daisy-chained service
// (chain_tables, chains.go), each an inner map that is filled once,
// swapped in whole and never written again, with the records of what each
// holds (xlb_table_sums, xlb_chain_sums: see below). Its methods on one
// service are called with that service's lock held, and without the data
// plane's mu: a swap waits for an RCU grace period.
type tableStore struct {
	size        uint32 // slots of a Maglev table
	maglev      *ebpf.Map
	chainTables *ebpf.Map
	sums        *ebpf.Map // table records; nil: none kept
	chainSums   *ebpf.Map // chain table records; nil: none kept
	// chains says of each service whether it has no chain table for
	// sure (chains.go).
	chains [MaxServices]chainRecord
}

// openTables makes the table store of the outer maps maglev and chains,
// with its records pinned under pinPath ("": not pinned).
func openTables(maglev, chains *ebpf.Map, size uint32, pinPath string) (tableStore, error) {
	t := tableStore{size: size, maglev: maglev, chainTables: chains}
	var err error
	if t.sums, err = openSums(pinPath, sumSpec[tableSum](sumsPin)); err != nil {
		return tableStore{}, err
	}
	if t.chainSums, err = openSums(pinPath, sumSpec[chainSum](chainSumsPin)); err != nil {
		t.sums.Close()
		return tableStore{}, err
	}
	return t, nil
}

// close releases the records' handles.
func (t *tableStore) close() error {
	var err error
	for _, m := range []**ebpf.Map{&t.sums, &t.chainSums} {
		if *m != nil {
			err = errors.Join(err, (*m).Close())
			*m = nil
		}
	}
	return err
}

// install makes entries service s's Maglev table and, for a daisy-chained
// service, entries with s's hints its chain table: each kept when its
// record says it holds them already, else filled and swapped in.
func (t *tableStore) install(s Service, entries []wire.TableEntry, addrs []netip.Addr) error {
	sum := digest(entries)
	var tableErr error
	var table sync.WaitGroup
	if !t.keepTable(s.ID, sum, s.Origin) {
		table.Go(func() { tableErr = t.swapTable(s.ID, entries, sum, s.Origin) })
	}
	if s.Encap == EncapGUEHint {
		// What the program reads for this service: backends and hints
		// in one swap (chains.go). While the index says the service has
		// hints, its packets read no Maglev table, and the index changes
		// after both swaps: so the two may run side by side. Each waits
		// out an RCU grace period; together they wait about one.
		if err := t.installChain(s.ID, entries, addrs, s.Chain, s.Generation, s.Origin, s.HintsOrigin); err != nil {
			table.Wait()
			return err
		}
	}
	table.Wait()
	return tableErr
}

// swapTable fills a new inner map with entries and makes it service id's
// table, then records what it holds.
func (t *tableStore) swapTable(id uint32, entries []wire.TableEntry, sum [digestSize]byte, origin Origin) error {
	inner, err := NewFilledTable(entries)
	if err != nil {
		return err
	}
	defer inner.Close()
	// Returns once no program can still be reading the old table.
	if err := t.maglev.Put(id, inner); err != nil {
		return fmt.Errorf("swap table: %w", err)
	}
	t.record(id, inner, sum, origin)
	return nil
}

// delete removes service id's tables and their records.
func (t *tableStore) delete(id uint32) error {
	if err := t.maglev.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete table: %w", err)
	}
	t.forget(id)
	if id < MaxServices {
		return t.dropChain(id)
	}
	return nil
}

// table reads service id's current Maglev table (Dataplane.Table).
func (t *tableStore) table(id uint32) ([]uint32, error) {
	var innerID ebpf.MapID
	if err := t.maglev.Lookup(id, &innerID); err != nil {
		return nil, fmt.Errorf("table of service %d: %w", id, err)
	}
	table, err := t.readInner(innerID)
	if err != nil {
		return nil, fmt.Errorf("read table of service %d: %w", id, err)
	}
	return table, nil
}

// Filling a table and swapping it in is costly (docs/decisions/0002-tables.md),
// so an agent restarted on pinned maps must not rewrite every table
// before its first change can reach the data plane. Table records let
// UpsertService keep a table that already holds exactly what it is asked
// to install, without reading it back (a read costs as much as a fill);
// with what the table was built from recorded too, KeepService keeps it
// without the agent building it at all.
//
// A record says which entries an inner map was filled with: (the inner
// map's ID, a digest of its entries). It is sound because an installed
// table is never written: every change fills a new inner map and swaps it
// in. So "inner map X holds entries with digest H" stays true for as long
// as X lives, and a record vouches for a service's table only while the
// outer map holds X for that service. A table swapped in without a record
// (by an xlb from before records, or a crash between the swap and the
// record) has an ID that no record names, and is rewritten once. The
// kernel hands out map IDs cyclically up to 2^31, so a dead map's ID does
// not come back for a live one. An xlb that ever writes into an installed
// table in place must delete this map.
//
// No program reads the records. They are kept in a map of their own,
// pinned beside the program's maps but not one of them: adding it changed
// no pinned map's layout, and the layout record does not cover it. A
// pinned map of another shape under its name is replaced, which costs one
// rewrite of every table.

// sumsPin is the file name of the pinned record map inside a pin
// directory; chainSumsPin that of the records of daisy-chained services'
// chain tables (chains.go), which are made the same way.
const (
	sumsPin      = "xlb_table_sums"
	chainSumsPin = "xlb_chain_sums"
)

// tableSum is one service's record, indexed by service ID. Inner 0: none.
// Origin is what the caller built the table from (Service.Origin; zero:
// unknown), so that a restarted agent can keep a table without building
// it again (KeepService). It took the second half of what was
// a 32-byte Sum whose second half was always zero: the map kept its
// shape, and an older agent's records read as records without an origin.
type tableSum struct {
	Inner  uint32
	Pad    uint32
	Sum    [digestSize]byte
	Origin Origin
}

// sumSpec is the shape of a record map whose records are of type R.
func sumSpec[R tableSum | chainSum](name string) ebpf.MapSpec {
	var r R
	return ebpf.MapSpec{
		Name:       name,
		Type:       ebpf.Array,
		KeySize:    4,
		ValueSize:  uint32(binary.Size(r)),
		MaxEntries: MaxServices,
	}
}

// openSums returns the record map spec.Name pinned under pinPath, creating
// and pinning a new, empty one if there is none or the pinned one has
// another shape. With pinPath "" the map is not pinned.
func openSums(pinPath string, spec ebpf.MapSpec) (*ebpf.Map, error) {
	name := spec.Name
	if pinPath == "" {
		m, err := ebpf.NewMap(&spec)
		if err != nil {
			return nil, fmt.Errorf("create records %s: %w", name, err)
		}
		return m, nil
	}
	path := filepath.Join(pinPath, name)
	m, err := ebpf.LoadPinnedMap(path, nil)
	switch {
	case err == nil && m.Type() == spec.Type && m.KeySize() == spec.KeySize && m.ValueSize() == spec.ValueSize && m.MaxEntries() >= spec.MaxEntries:
		return m, nil
	case err == nil:
		m.Close()
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("open records %s: %w", path, err)
	}
	m, err = ebpf.NewMap(&spec)
	if err != nil {
		return nil, fmt.Errorf("create records %s: %w", name, err)
	}
	if err := bpfobj.ReplacePin(m, path); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// digestSize is the size of a record's digest; the record map's value
// size depends on it.
const digestSize = 16

// digest identifies a table's entries, in slot order, as the program
// reads them (host byte order: records never leave their host). It is
// sum128 of the entries; the label changes whenever what is hashed or how
// does, and an agent then finds no record it can use and rewrites each
// table once. A configuration's own tables need no cryptographic
// strength, and label v1's SHA-256 cost several times as much
// (docs/decisions/0002-tables.md).
func digest(entries []wire.TableEntry) [digestSize]byte {
	return sum128("xlb maglev table v2", len(entries), words(entries))
}

// sum128 is two 64-bit xxHash sums under different seeds of label, n and
// body.
func sum128(label string, n int, body []byte) [digestSize]byte {
	head := binary.LittleEndian.AppendUint32(append([]byte(label), 0), uint32(n))
	var out [digestSize]byte
	for i, seed := range []uint64{0x786c62207461626c, 0x65206469676573ad} {
		h := xxhash.NewWithSeed(seed)
		h.Write(head)
		h.Write(body)
		binary.LittleEndian.PutUint64(out[8*i:], h.Sum64())
	}
	return out
}

// words is the memory of a slice of fixed-size, padding-free values as
// bytes, in host order.
func words[T wire.TableEntry | wire.ChainEntry | wire.DenyCell | wire.Deny6Node](v []T) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*int(unsafe.Sizeof(v[0])))
}

// installed returns service id's record if it vouches for the table the
// service has: if it names the inner map the outer map holds for it. A
// record that cannot be read counts as none. Called with service id's
// lock held.
func (t *tableStore) installed(id uint32) (tableSum, bool) {
	var rec tableSum
	if t.sums == nil || t.sums.Lookup(id, &rec) != nil || rec.Inner == 0 || rec.Inner != currentInner(t.maglev, id) {
		return tableSum{}, false
	}
	return rec, true
}

// currentInner is the ID of the inner map that outer holds at id; 0 for
// none.
func currentInner(outer *ebpf.Map, id uint32) uint32 {
	var cur ebpf.MapID
	if outer.Lookup(id, &cur) != nil {
		return 0
	}
	return uint32(cur)
}

// innerID is a map's kernel ID; 0 if it cannot be had.
func innerID(m *ebpf.Map) uint32 {
	info, err := m.Info()
	if err != nil {
		return 0
	}
	id, _ := info.ID()
	return uint32(id)
}

// keepTable reports whether service id's table holds entries of digest
// sum, as its record says (installed); if so, it records origin as what
// the table was built from, unless the record says so already. Otherwise
// the table is written again. Called with service id's lock held.
func (t *tableStore) keepTable(id uint32, sum [digestSize]byte, origin Origin) bool {
	rec, ok := t.installed(id)
	if !ok || rec.Sum != sum {
		return false
	}
	if rec.Origin != origin {
		// Best effort, as record: without it, the next agent builds
		// this table once more to compare.
		rec.Origin = origin
		_ = t.sums.Put(id, rec)
	}
	return true
}

// record notes that inner, now service id's table, holds entries with
// digest sum, built from origin. Without it, the next agent rewrites the
// table once: a failure costs time, not correctness, so it is not
// reported. Called with service id's lock held.
func (t *tableStore) record(id uint32, inner *ebpf.Map, sum [digestSize]byte, origin Origin) {
	if mid := innerID(inner); t.sums != nil && mid != 0 {
		_ = t.sums.Put(id, tableSum{Inner: mid, Sum: sum, Origin: origin})
	}
}

// builtFrom reports whether service id's table was built from origin, as
// its record says (installed). Called with service id's lock held.
func (t *tableStore) builtFrom(id uint32, origin Origin) bool {
	rec, ok := t.installed(id)
	return ok && origin != (Origin{}) && rec.Origin == origin
}

// readInner reads the backend IDs of the Maglev table in inner map id.
func (t *tableStore) readInner(id ebpf.MapID) ([]uint32, error) {
	inner, err := ebpf.NewMapFromID(id)
	if err != nil {
		return nil, err
	}
	defer inner.Close()
	if inner.MaxEntries() != t.size || inner.ValueSize() != 8 {
		return nil, fmt.Errorf("inner map %d: %d entries of %d bytes, want %d of 8", id, inner.MaxEntries(), inner.ValueSize(), t.size)
	}
	table := make([]uint32, t.size)
	err = readTable(inner, func(src []byte, i int) {
		table[i] = wire.TableEntry(binary.NativeEndian.Uint64(src)).Backend()
	})
	if err != nil {
		return nil, err
	}
	return table, nil
}

// forget clears service id's record. A record left behind names a map
// that is gone, which no table can be again, so a failure is not
// reported either. Called with service id's lock held.
func (t *tableStore) forget(id uint32) {
	if t.sums != nil {
		_ = t.sums.Put(id, tableSum{})
	}
}
