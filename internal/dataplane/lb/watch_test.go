package lb

import (
	"net/netip"
	"slices"
	"testing"
)

// TestTableWatch: a watch from outside sees a service's table ID change
// with every UpsertService and nothing else, and counts the slots of the
// table in place per backend address.
func TestTableWatch(t *testing.T) {
	requirePrivileges(t)
	f := newFixtureNS(t)
	pin := testPinPath(t)
	d, err := openIn(t, f.Name, Options{Interface: "veth0", NodeAddr: fxNode, PinPath: pin, TableSize: fxTableSize})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	w, err := WatchTables(pin)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	if id, err := w.TableID(5); err != nil || id != 0 {
		t.Fatalf("table of a service not installed: %d, %v; want 0", id, err)
	}
	other := netip.MustParseAddr("10.0.3.3")
	for i, a := range []netip.Addr{fxBackend, other} {
		if err := d.UpsertBackend(uint32(i), apOf(a)); err != nil {
			t.Fatal(err)
		}
	}
	install := func(firstSlots int) {
		t.Helper()
		table := make([]uint32, fxTableSize)
		for i := range table {
			if i >= firstSlots {
				table[i] = 1
			}
		}
		if err := d.UpsertService(Service{ID: 5, Key: ServiceKey{fxVIP, 80, ProtoTCP}, Encap: EncapIPIP, Table: table}); err != nil {
			t.Fatal(err)
		}
	}

	install(100)
	first, err := w.TableID(5)
	if err != nil || first == 0 {
		t.Fatalf("table ID after install: %d, %v", first, err)
	}
	if svcs, err := w.Services(); err != nil || !slices.Equal(svcs, []uint32{5}) {
		t.Errorf("services %v, %v; want [5]", svcs, err)
	}
	id, slots, err := w.Slots(5)
	if err != nil || id != first || slots[fxBackend] != 100 || slots[other] != fxTableSize-100 || len(slots) != 2 {
		t.Errorf("slots of table %d: %v, %v; want table %d with 100 for %s and %d for %s", id, slots, err, first, fxBackend, fxTableSize-100, other)
	}

	// A backend write alone is no table change.
	if err := d.UpsertBackend(2, apOf(netip.MustParseAddr("10.0.3.4"))); err != nil {
		t.Fatal(err)
	}
	if id, _ := w.TableID(5); id != first {
		t.Errorf("table ID changed from %d to %d without a table change", first, id)
	}

	install(fxTableSize) // every slot to backend 0
	second, err := w.TableID(5)
	if err != nil || second == 0 || second == first {
		t.Fatalf("table ID after the swap: %d, %v; want a new one (was %d)", second, err, first)
	}
	if _, slots, err := w.Slots(5); err != nil || slots[fxBackend] != fxTableSize || len(slots) != 1 {
		t.Errorf("slots after the swap: %v, %v; want all %d for %s", slots, err, fxTableSize, fxBackend)
	}
}
