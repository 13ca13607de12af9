package lb

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// recordFixture is a data plane on pinned maps in a namespace of its
// own, with a watch on its tables: what the tests of table records
// restart on.
type recordFixture struct {
	t    *testing.T
	f    *fixtureNS
	pin  string
	opts Options
	d    *Dataplane
	w    *TableWatch
}

// newRecordFixture opens it, with backends 0, 1, … at addrs; it is closed
// at the end of the test.
func newRecordFixture(t *testing.T, addrs ...netip.Addr) *recordFixture {
	t.Helper()
	requirePrivileges(t)
	x := &recordFixture{t: t, f: newFixtureNS(t), pin: testPinPath(t)}
	x.opts = Options{Interface: "veth0", NodeAddr: fxNode, PinPath: x.pin, TableSize: fxTableSize}
	x.reopen()
	t.Cleanup(func() { x.d.Close() })
	w, err := WatchTables(x.pin)
	if err != nil {
		t.Fatal(err)
	}
	x.w = w
	t.Cleanup(func() { w.Close() })
	for i, a := range addrs {
		if err := x.d.UpsertBackend(uint32(i), apOf(a)); err != nil {
			t.Fatal(err)
		}
	}
	return x
}

// reopen opens the data plane (again, once closed) on the pinned maps,
// as an agent that starts does, and returns it.
func (x *recordFixture) reopen() *Dataplane {
	x.t.Helper()
	d, err := openIn(x.t, x.f.Name, x.opts)
	if err != nil {
		x.t.Fatal(err)
	}
	x.d = d
	return d
}

// TestUpsertServiceKeepsRecordedTable: UpsertService of the table a
// service already has keeps it (no new inner map), also after a restart
// on the pinned maps, and only when a record vouches for the installed
// table: one swapped in without a record, or under a record of other
// entries, is written again.
func TestUpsertServiceKeepsRecordedTable(t *testing.T) {
	other := netip.MustParseAddr("10.0.3.3")
	x := newRecordFixture(t, fxBackend, other)
	f, pin, d, w := x.f, x.pin, x.d, x.w
	key := ServiceKey{fxVIP, 80, ProtoTCP}
	tableA := make([]uint32, fxTableSize)
	for i := range tableA {
		tableA[i] = uint32(i % 2)
	}
	tableB := slices.Clone(tableA)
	tableB[0] = 1
	upsert := func(d *Dataplane, table []uint32, encap Encap) ebpf.MapID {
		t.Helper()
		if err := d.UpsertService(Service{ID: 5, Key: key, Encap: encap, Table: table}); err != nil {
			t.Fatal(err)
		}
		id, err := w.TableID(5)
		if err != nil || id == 0 {
			t.Fatalf("table of service 5: %d, %v", id, err)
		}
		got, err := d.Table(5)
		if err != nil || !slices.Equal(got, table) {
			t.Fatalf("service 5 serves another table than the one just upserted (%v)", err)
		}
		return id
	}
	countOf := func(table []uint32, b uint32) int {
		n := 0
		for _, x := range table {
			if x == b {
				n++
			}
		}
		return n
	}

	a := upsert(d, tableA, EncapIPIP)
	if again := upsert(d, tableA, EncapIPIP); again != a {
		t.Errorf("the same table again: inner map %d replaced by %d, want it kept", a, again)
	}
	b := upsert(d, tableB, EncapIPIP)
	if b == a {
		t.Fatal("a changed table kept the old inner map")
	}
	if _, slots, err := w.Slots(5); err != nil || slots[fxBackend] != countOf(tableB, 0) || slots[other] != countOf(tableB, 1) {
		t.Fatalf("slots %v (%v): the table does not carry its backends' addresses", slots, err)
	}

	// Restart: the new data plane keeps the table it finds, and a new
	// encapsulation changes the service's entry, not its table.
	d.Close()
	d = x.reopen()
	if got := upsert(d, tableB, EncapIPIP); got != b {
		t.Errorf("after a restart: inner map %d replaced by %d, want it kept", b, got)
	}
	if got := upsert(d, tableB, EncapGUE); got != b {
		t.Errorf("encapsulation change: inner map %d replaced by %d, want it kept", b, got)
	}
	if svcs, _ := servicesOf(d); len(svcs) != 1 || svcs[0].Encap != EncapGUE {
		t.Errorf("services %+v, want service 5 with GUE", svcs)
	}
	if v, _ := f.Run(t, d.objs.XlbLbProg, tcpTo(fxVIP, 80).Frame(f.MAC)); v != xdpTX {
		t.Errorf("a packet to the kept table: verdict %s, want TX", verdictNames[v])
	}

	// A table with the same entries, swapped in by something that writes
	// no record (an xlb from before records): written again.
	entries := make([]wire.TableEntry, fxTableSize)
	for i, id := range tableB {
		entries[i] = wire.NewTableEntry(id, d.backends.addrs[id].Addr())
	}
	foreign := putForeignTable(t, d, 5, entries)
	if got := upsert(d, tableB, EncapGUE); got == foreign {
		t.Error("a table without a record was kept")
	}
	// A record whose entries differ from the installed table's: written
	// again.
	cur, _ := w.TableID(5)
	if err := d.tables.sums.Put(uint32(5), tableSum{Inner: uint32(cur), Sum: digest(make([]wire.TableEntry, fxTableSize))}); err != nil {
		t.Fatal(err)
	}
	if got := upsert(d, tableB, EncapGUE); got == cur {
		t.Error("a table under a record of other entries was kept")
	}

	// The service goes and comes back with the same table: a new one.
	cur, _ = w.TableID(5)
	if err := d.DeleteService(5, key); err != nil {
		t.Fatal(err)
	}
	if got := upsert(d, tableB, EncapGUE); got == cur {
		t.Error("a deleted table came back")
	}

	// Records of another shape (a future xlb's, say) are replaced: every
	// table is written once more, then kept again.
	d.Close()
	odd, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := bpfobj.ReplacePin(odd, filepath.Join(pin, sumsPin)); err != nil {
		t.Fatal(err)
	}
	odd.Close()
	d = x.reopen()
	cur, _ = w.TableID(5)
	first := upsert(d, tableB, EncapGUE)
	if first == cur {
		t.Error("kept a table under records of another shape")
	}
	if got := upsert(d, tableB, EncapGUE); got != first {
		t.Errorf("inner map %d replaced by %d, want it kept once recorded again", first, got)
	}
	if _, err := os.Stat(filepath.Join(pin, sumsPin)); err != nil {
		t.Errorf("records not pinned: %v", err)
	}
}

// TestKeepService: KeepService keeps the table a service has when it was
// upserted from the same origin, also after a restart on the pinned maps,
// and changes the service's entry (its encapsulation) without touching
// the table; it refuses, changing nothing, for another origin or the zero
// one, a table swapped in since (with another origin, without one, or
// without a record), a backend the table may name that does not count for
// the service yet, a service it does not know, and a daisy-chained one
// without a chain table. A table kept by an upsert that names an origin
// its record lacked (an older agent's record) is kept by origin from then
// on. A daisy-chained service's chain table is kept the same way, if it
// was built for the same Maglev table, with hints from the same history
// or, when the caller does not know, from any.
func TestKeepService(t *testing.T) {
	x := newRecordFixture(t, fxBackend, netip.MustParseAddr("10.0.3.3"), netip.MustParseAddr("10.0.3.4"))
	f, d, w := x.f, x.d, x.w
	key := ServiceKey{fxVIP, 80, ProtoTCP}
	tableA := make([]uint32, fxTableSize)
	for i := range tableA {
		tableA[i] = uint32(i % 2)
	}
	tableB := slices.Clone(tableA)
	tableB[1] = 0
	originA, originB := OriginOf([]byte("a")), OriginOf([]byte("b"))
	if originA == originB || originA == (Origin{}) {
		t.Fatalf("origins %x and %x: want two different, non-zero ones", originA, originB)
	}
	names := []uint32{0, 1}
	upsert := func(table []uint32, origin Origin) {
		t.Helper()
		if err := d.UpsertService(Service{ID: 5, Key: key, Encap: EncapIPIP, Table: table, Origin: origin}); err != nil {
			t.Fatal(err)
		}
	}
	// keep asks to keep service 5's table with encapsulation encap and
	// checks the answer, the table and the entry.
	keep := func(what string, origin Origin, encap Encap, names []uint32, want bool) {
		t.Helper()
		before, _ := w.TableID(5)
		svcs, _ := servicesOf(d)
		err := d.KeepService(Service{ID: 5, Key: key, Encap: encap, Origin: origin}, names)
		if want && err != nil || !want && !errors.Is(err, ErrNotKept) {
			t.Errorf("%s: KeepService: %v, want kept: %v", what, err, want)
		}
		if after, _ := w.TableID(5); after != before {
			t.Errorf("%s: inner map %d replaced by %d: KeepService never writes a table", what, before, after)
		}
		now, _ := servicesOf(d)
		switch {
		case want && (len(now) != 1 || now[0].Encap != encap):
			t.Errorf("%s: services %+v, want service 5 with encapsulation %d", what, now, encap)
		case !want && !reflect.DeepEqual(now, svcs):
			t.Errorf("%s: services %+v, were %+v: want nothing changed", what, now, svcs)
		}
	}

	keep("nothing installed", originA, EncapIPIP, names, false)
	upsert(tableA, originA)
	keep("same origin", originA, EncapIPIP, names, true)
	keep("another origin", originB, EncapIPIP, names, false)
	keep("the zero origin", Origin{}, EncapIPIP, names, false)
	keep("a backend that counts for no service", originA, EncapIPIP, []uint32{0, 1, 2}, false)
	keep("a backend that does not exist", originA, EncapIPIP, []uint32{0, 9}, false)
	keep("daisy-chained", originA, EncapGUEHint, names, false)
	if err := d.KeepService(Service{ID: MaxServices, Key: key, Encap: EncapIPIP, Origin: originA}, names); err == nil || errors.Is(err, ErrNotKept) {
		t.Errorf("service ID out of range: %v, want an error of its own", err)
	}
	d.Close()
	d = x.reopen()
	keep("after a restart, with another encapsulation", originA, EncapGUE, names, true)
	if v, _ := f.Run(t, d.objs.XlbLbProg, tcpTo(fxVIP, 80).Frame(f.MAC)); v != xdpTX {
		t.Errorf("a packet to the kept table: verdict %s, want TX", verdictNames[v])
	}

	// The same table under a new origin: kept, now for the new origin
	// only.
	upsert(tableA, originB)
	keep("kept under a new origin: the old one", originA, EncapIPIP, names, false)
	keep("kept under a new origin", originB, EncapIPIP, names, true)

	// Another table: the old origin vouches for nothing any more.
	upsert(tableB, originA)
	keep("another table from the first origin", originA, EncapIPIP, names, true)
	upsert(tableA, Origin{})
	keep("a table without origin", originA, EncapIPIP, names, false)

	// The record without an origin, as an older agent's: an upsert of
	// the same table with an origin records it, without a swap.
	before, _ := w.TableID(5)
	upsert(tableA, originA)
	if after, _ := w.TableID(5); after != before {
		t.Errorf("inner map %d replaced by %d: want the table kept", before, after)
	}
	keep("origin recorded for a kept table", originA, EncapIPIP, names, true)

	// A table swapped in by something that keeps no records.
	entries := make([]wire.TableEntry, fxTableSize)
	for i, id := range tableA {
		entries[i] = wire.NewTableEntry(id, d.backends.addrs[id].Addr())
	}
	putForeignTable(t, d, 5, entries)
	keep("a foreign table", originA, EncapIPIP, names, false)

	// Daisy-chained: the chain table is kept by origin too, also after
	// a restart, and never touched by KeepService.
	chainID := func() ebpf.MapID {
		var id ebpf.MapID
		_ = d.objs.ChainTables.Lookup(uint32(5), &id)
		return id
	}
	chain := make([]ChainSlot, fxTableSize)
	chain[3] = ChainSlot{Prev: netip.MustParseAddr("10.0.3.4"), Changed: 99}
	hintsA, hintsB := OriginOf([]byte("hints a")), OriginOf([]byte("hints b"))
	hinted := Service{ID: 5, Key: key, Encap: EncapGUEHint, Table: tableA, Chain: chain, Generation: 100, Origin: originB, HintsOrigin: hintsA}
	if err := d.UpsertService(hinted); err != nil {
		t.Fatal(err)
	}
	chained := chainID()
	// keepChain asks to keep service 5 daisy-chained, its Maglev table
	// from origin and its hints from hints.
	keepChain := func(what string, origin, hints Origin, want bool) {
		t.Helper()
		table, _ := w.TableID(5)
		err := d.KeepService(Service{ID: 5, Key: key, Encap: EncapGUEHint, Origin: origin, HintsOrigin: hints}, names)
		if want && err != nil || !want && !errors.Is(err, ErrNotKept) {
			t.Errorf("%s: KeepService: %v, want kept: %v", what, err, want)
		}
		if got := chainID(); got != chained {
			t.Errorf("%s: chain table %d replaced by %d: KeepService never writes one", what, chained, got)
		}
		if got, _ := w.TableID(5); got != table {
			t.Errorf("%s: inner map %d replaced by %d: KeepService never writes a table", what, table, got)
		}
	}
	keepChain("daisy-chained, same origins", originB, hintsA, true)
	keepChain("daisy-chained, hints from any history", originB, Origin{}, true)
	keepChain("daisy-chained, hints from another history", originB, hintsB, false)
	keepChain("daisy-chained, another table", originA, hintsA, false)
	d.Close()
	d = x.reopen()
	keepChain("daisy-chained, after a restart", originB, hintsA, true)
	if got, gen, err := d.Chain(5); err != nil || gen != 100 || len(got) != fxTableSize || got[3].Changed != 99 {
		t.Errorf("kept chain: generation %d, slot 3 %+v (%v); want 100 and the hint upserted", gen, got, err)
	}
	// The Maglev table's record vouches, the chain table's is for another
	// Maglev table (as after a swap of the one without the other): not
	// kept, even with hints from any history.
	var rec chainSum
	if err := d.tables.chainSums.Lookup(uint32(5), &rec); err != nil || rec.Inner != uint32(chained) {
		t.Fatalf("chain record %+v (%v): want one for chain table %d", rec, err, chained)
	}
	rec.Origin = originA
	if err := d.tables.chainSums.Put(uint32(5), rec); err != nil {
		t.Fatal(err)
	}
	keepChain("daisy-chained, the chain table for another Maglev table", originB, Origin{}, false)
	// An upsert of the same keeps the chain table as well, and records
	// its new origins.
	hinted.Origin, hinted.HintsOrigin = originA, hintsB
	if err := d.UpsertService(hinted); err != nil {
		t.Fatal(err)
	}
	if got := chainID(); got != chained {
		t.Errorf("the same chain upserted again: chain table %d replaced by %d", chained, got)
	}
	keepChain("daisy-chained, origins recorded by an upsert", originA, hintsB, true)
	keepChain("daisy-chained, the hints' old origin", originA, hintsA, false)
	// Out of daisy chaining, the chain goes, and so does its record: back
	// in, nothing vouches for a chain.
	keep("out of daisy chaining", originA, EncapGUE, names, true)
	if chainID() != 0 {
		t.Fatal("a service kept out of daisy chaining still has a chain table")
	}
	chained = 0
	keepChain("back to daisy chaining, without a chain table", originA, Origin{}, false)
}

// putForeignTable makes a table of entries service id's, as an agent that
// keeps no records would, and returns its ID.
func putForeignTable(t *testing.T, d *Dataplane, id uint32, entries []wire.TableEntry) ebpf.MapID {
	t.Helper()
	inner, err := newTable("foreign", 8, uint32(len(entries)))
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	keys := make([]uint32, len(entries))
	for i := range keys {
		keys[i] = uint32(i)
	}
	if _, err := inner.BatchUpdate(keys, entries, nil); err != nil {
		t.Fatal(err)
	}
	if err := d.objs.MaglevTables.Put(id, inner); err != nil {
		t.Fatal(err)
	}
	var mid ebpf.MapID
	if err := d.objs.MaglevTables.Lookup(id, &mid); err != nil {
		t.Fatal(err)
	}
	return mid
}

// TestDigest: the digest covers every entry, the backend addresses in
// them and the table's size.
func TestDigest(t *testing.T) {
	base := make([]wire.TableEntry, 5003)
	for i := range base {
		base[i] = wire.NewTableEntry(uint32(i%7), netip.MustParseAddr("10.0.3.2"))
	}
	sum := digest(base)
	if digest(slices.Clone(base)) != sum {
		t.Fatal("equal entries, different digests")
	}
	for _, tc := range []struct {
		name string
		edit func([]wire.TableEntry) []wire.TableEntry
	}{
		{"last slot's backend", func(e []wire.TableEntry) []wire.TableEntry { e[len(e)-1] ^= 1; return e }},
		{"a backend's address", func(e []wire.TableEntry) []wire.TableEntry { e[4097] ^= 1 << 40; return e }},
		{"one slot more", func(e []wire.TableEntry) []wire.TableEntry { return append(e, 0) }},
		{"two slots swapped", func(e []wire.TableEntry) []wire.TableEntry { e[1], e[2] = e[2], e[1]; return e }},
	} {
		if digest(tc.edit(slices.Clone(base))) == sum {
			t.Errorf("%s: same digest", tc.name)
		}
	}
}

// TestUpsertServiceConcurrent: UpsertService and DeleteService from many
// goroutines, on distinct services and on the same ones, leave every
// service with one caller's table and the same caller's entry, the VIP
// set and the owners matching.
func TestUpsertServiceConcurrent(t *testing.T) {
	requirePrivileges(t)
	d, err := New(Options{NodeAddr: fxNode, TableSize: fxTableSize})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const services = 12
	// Service i: variant 0 sends every slot to backend 2i over IPIP,
	// variant 1 to backend 2i+1 over GUE.
	for b := range uint32(2 * services) {
		if err := d.UpsertBackend(b, apOf(netip.AddrFrom4([4]byte{10, 0, 3, byte(10 + b)}))); err != nil {
			t.Fatal(err)
		}
	}
	keyOf := func(i int) ServiceKey {
		return ServiceKey{netip.AddrFrom4([4]byte{10, 99, 0, byte(1 + i/3)}), uint16(80 + i%3), ProtoTCP}
	}
	svcOf := func(i, variant int) Service {
		table := make([]uint32, fxTableSize)
		for s := range table {
			table[s] = uint32(2*i + variant)
		}
		return Service{ID: uint32(i), Key: keyOf(i), Encap: Encap(1 + variant), Table: table}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4*services)
	for i := range services {
		for variant := range 2 {
			wg.Go(func() {
				for round := range 6 {
					var err error
					if i%4 == 3 && variant == 1 && round%3 == 1 {
						err = d.DeleteService(uint32(i), keyOf(i))
					} else {
						err = d.UpsertService(svcOf(i, variant))
					}
					if err != nil {
						errs <- fmt.Errorf("service %d variant %d: %w", i, variant, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Every goroutine's last round upserts: every service is installed.
	svcs, err := servicesOf(d)
	if err != nil || len(svcs) != services {
		t.Fatalf("%d services (%v), want %d", len(svcs), err, services)
	}
	owners, _ := ownersOf(d)
	for _, s := range svcs {
		table, err := d.Table(s.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := svcOf(int(s.ID), int(s.Encap)-1)
		if s.Key != want.Key || !slices.Equal(table, want.Table) {
			t.Errorf("service %d: key %v, encap %d, table of backend %d; want key %v and backend %d", s.ID, s.Key, s.Encap, table[0], want.Key, want.Table[0])
		}
		if o, ok := owners[want.Table[0]]; !ok || o != s.ID {
			t.Errorf("backend %d counts for service %d (%v), want %d", want.Table[0], o, ok, s.ID)
		}
	}
	vips := map[netip.Addr]uint32{}
	var vip wire.Addr
	var n uint32
	it := d.objs.Vips.Iterate()
	for it.Next(&vip, &n) {
		vips[vip.IP()] = n
	}
	if len(vips) != services/3 {
		t.Errorf("VIP set %v, want %d VIPs with 3 services each", vips, services/3)
	}
	for v, n := range vips {
		if n != 3 {
			t.Errorf("VIP %v: %d services, want 3", v, n)
		}
	}
}

// BenchmarkDigest: the digest of a default-size table, computed for
// every table UpsertService installs.
func BenchmarkDigest(b *testing.B) {
	entries := make([]wire.TableEntry, 65537)
	for i := range entries {
		entries[i] = wire.NewTableEntry(uint32(i%100), wire.AddrFrom4(uint32(0x0a000302+i%100)))
	}
	b.SetBytes(int64(8 * len(entries)))
	for b.Loop() {
		digest(entries)
	}
}

// TestChainDigest: a chain's digest covers the hints and the generation
// as well as the backends.
func TestChainDigest(t *testing.T) {
	base := make([]wire.ChainEntry, 1009)
	for i := range base {
		base[i] = wire.ChainEntry{Bid: uint32(i % 5), Addr: wire.AddrOf(wire.AddrFrom4(0x0a000302)), Prev: wire.AddrOf(wire.AddrFrom4(0x0a000303)), Changed: 100}
	}
	sum := chainDigest(base)
	if chainDigest(slices.Clone(base)) != sum {
		t.Fatal("equal entries, different digests")
	}
	for _, tc := range []struct {
		name string
		edit func([]wire.ChainEntry)
	}{
		{"a previous owner", func(e []wire.ChainEntry) { e[17].Prev.Bytes[15] ^= 1 }},
		{"the owner before that", func(e []wire.ChainEntry) { e[500].Prev2.Bytes[15] = 7 }},
		{"when a slot changed", func(e []wire.ChainEntry) { e[3].Changed++ }},
		{"the generation", func(e []wire.ChainEntry) { e[len(e)-1].Changed++ }},
		{"a backend", func(e []wire.ChainEntry) { e[0].Bid++ }},
	} {
		e := slices.Clone(base)
		tc.edit(e)
		if chainDigest(e) == sum {
			t.Errorf("%s: same digest", tc.name)
		}
	}
	if chainDigest(base[:len(base)-1]) == sum {
		t.Error("one entry fewer: same digest")
	}
}
