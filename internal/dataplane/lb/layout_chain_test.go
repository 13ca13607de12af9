package lb

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// preChainSpec is the LB spec as it was before daisy-chain hints and
// stateful services: no chain_tables nor conntrack, 16-byte svc_index
// slots ending in a 32-bit pad, two reasons fewer. Only its maps are
// used.
func preChainSpec(t *testing.T) *ebpf.CollectionSpec {
	t.Helper()
	spec, err := lbSpec(Options{NodeAddr: fxNode, TableSize: fxTableSize, MaxBackends: DefaultMaxBackends, ConntrackSize: DefaultConntrackSize})
	if err != nil {
		t.Fatal(err)
	}
	old := spec.Copy()
	old.Programs = nil
	delete(old.Maps, "chain_tables")
	delete(old.Maps, "conntrack")
	old.Maps["reasons"].MaxEntries = uint32(len(wire.ReasonNames) - 2)

	slot, ok := btf.Copy(old.Maps["svc_index"].Value).(*btf.Struct)
	if !ok || len(slot.Members) != 9 || slot.Members[5].Name != "flags" {
		t.Fatalf("svc_index value is not the expected struct svc_slot: %v", old.Maps["svc_index"].Value)
	}
	id := slot.Members[4]
	slot.Members = append(slot.Members[:5], btf.Member{Name: "pad", Type: id.Type, Offset: id.Offset + 32})
	slot.Size = 16
	old.Maps["svc_index"].Value = slot
	old.Maps["svc_index"].ValueSize = 16
	return old
}

// pinOldState pins the maps of old under pin, with their layout record,
// as an agent of that version would have left them, and returns them.
func pinOldState(t *testing.T, pin string, old *ebpf.CollectionSpec) map[string]*ebpf.Map {
	t.Helper()
	if err := os.MkdirAll(pin, 0o700); err != nil {
		t.Fatal(err)
	}
	maps := map[string]*ebpf.Map{}
	for name, ms := range old.Maps {
		if strings.HasPrefix(name, ".") {
			continue
		}
		ms.Pinning = ebpf.PinByName
		m, err := ebpf.NewMapWithOptions(ms, ebpf.MapOptions{PinPath: pin})
		if err != nil {
			t.Fatalf("pin old %s: %v", name, err)
		}
		t.Cleanup(func() { m.Close() })
		maps[name] = m
	}
	if err := bpfobj.WriteLayout(pin, bpfobj.SpecLayout(old), wire.FlowHashFmix64); err != nil {
		t.Fatal(err)
	}
	return maps
}

// TestLayoutMigratesPreChainState: an agent of this version on state
// pinned by one from before chains and conntrack migrates. Until the
// switch the old maps stay pinned and untouched; afterwards the new maps
// are pinned, and the next agent adopts them with hints, flags and all.
func TestLayoutMigratesPreChainState(t *testing.T) {
	requirePrivileges(t)
	f := newFixtureNS(t)
	pin := testPinPath(t)
	oldMaps := pinOldState(t, pin, preChainSpec(t))
	key := wire.SvcKey(fxVIP, 80, ProtoTCP)
	var oldSlot [16]byte // vip, port, proto, encap, id, pad
	binary.LittleEndian.PutUint32(oldSlot[0:], key.Vip)
	binary.LittleEndian.PutUint16(oldSlot[4:], key.Port)
	oldSlot[6], oldSlot[7] = key.Proto, uint8(EncapIPIP)
	binary.LittleEndian.PutUint32(oldSlot[8:], 1)
	home := svcHash(key.Vip, key.Port, key.Proto) & (SvcSlots - 1)
	if err := oldMaps["svc_index"].Put(home, oldSlot); err != nil {
		t.Fatal(err)
	}
	oldIndex := pinnedMapID(t, filepath.Join(pin, "svc_index"))

	opts := Options{Interface: "veth0", NodeAddr: fxNode, PinPath: pin, TableSize: fxTableSize}
	d, err := loadIn(t, f.Name, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { d.Close() }()
	if why := d.Migrated(); why != "map layouts changed: chain_tables, conntrack, reasons, svc_index" {
		t.Errorf("migration reason %q, want the two new maps, reasons and svc_index", why)
	}
	if svcs, err := servicesOf(d); err != nil || len(svcs) != 0 {
		t.Errorf("migrated maps hold services %v (%v), want fresh ones", svcs, err)
	}
	if err := d.UpsertBackend(0, apOf(fxBackend)); err != nil {
		t.Fatal(err)
	}
	chain := make([]ChainSlot, fxTableSize)
	chain[3] = ChainSlot{Prev: fxRedirBE, Prev2: fxNoRouteBE, Changed: 99}
	svc := Service{ID: 1, Key: ServiceKey{fxVIP, 80, ProtoTCP}, Encap: EncapGUEHint, Table: make([]uint32, fxTableSize),
		Chain: chain, Generation: 100}
	if err := d.UpsertService(svc); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"chain_tables", "conntrack"} {
		if _, err := os.Stat(filepath.Join(pin, name)); !os.IsNotExist(err) {
			t.Errorf("%s pinned before the switch (%v)", name, err)
		}
	}
	if got := pinnedMapID(t, filepath.Join(pin, "svc_index")); got != oldIndex {
		t.Errorf("svc_index pin moved before the switch")
	}
	var got [16]byte
	if err := oldMaps["svc_index"].Lookup(home, &got); err != nil || got != oldSlot {
		t.Errorf("old svc_index slot %d: %+v (%v), want it untouched: %+v", home, got, err, oldSlot)
	}

	if err := d.Attach(); err != nil {
		t.Fatal(err)
	}
	if pinnedMapID(t, filepath.Join(pin, "svc_index")) == oldIndex {
		t.Error("svc_index pin did not move to the new map")
	}
	for _, name := range []string{"chain_tables", "conntrack"} {
		if _, err := os.Stat(filepath.Join(pin, name)); err != nil {
			t.Errorf("%s not pinned after the switch: %v", name, err)
		}
	}
	d.Close()

	d, err = openIn(t, f.Name, opts)
	if err != nil {
		t.Fatal(err)
	}
	if why := d.Migrated(); why != "" {
		t.Errorf("migrated twice: %s", why)
	}
	svcs, err := servicesOf(d)
	if err != nil || len(svcs) != 1 || svcs[0].Encap != EncapGUEHint {
		t.Errorf("adopted services %+v (%v), want service 1, stateful, with hints", svcs, err)
	}
	gotChain, gen, err := d.Chain(1)
	if err != nil || gen != 100 || len(gotChain) != fxTableSize || gotChain[3] != chain[3] {
		t.Errorf("adopted chain: generation %d, %d slots (%v)", gen, len(gotChain), err)
	}
}

// TestLayoutMigratesUnmappableTables: state pinned by an xlb whose table
// templates were not BPF_F_MMAPABLE (before 2026-11-27) cannot take this
// version's tables, so the agent migrates, and the new maps take a
// daisy-chained service's two tables and forward with them.
func TestLayoutMigratesUnmappableTables(t *testing.T) {
	requirePrivileges(t)
	f := newFixtureNS(t)
	pin := testPinPath(t)
	spec, err := lbSpec(Options{NodeAddr: fxNode, TableSize: fxTableSize, MaxBackends: DefaultMaxBackends, ConntrackSize: DefaultConntrackSize})
	if err != nil {
		t.Fatal(err)
	}
	old := spec.Copy()
	old.Programs = nil
	for _, name := range []string{"maglev_tables", "chain_tables"} {
		if old.Maps[name].InnerMap.Flags == 0 {
			t.Fatalf("%s's inner map is not mappable: the test has nothing to migrate from", name)
		}
		old.Maps[name].InnerMap.Flags = 0
	}
	pinOldState(t, pin, old)

	opts := Options{Interface: "veth0", NodeAddr: fxNode, PinPath: pin, TableSize: fxTableSize}
	d, err := loadIn(t, f.Name, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { d.Close() }()
	if why := d.Migrated(); why != "map layouts changed: chain_tables, maglev_tables" {
		t.Errorf("migration reason %q, want the two outer maps of tables", why)
	}
	if err := d.UpsertBackend(0, apOf(fxBackend)); err != nil {
		t.Fatal(err)
	}
	chain := make([]ChainSlot, fxTableSize)
	chain[3] = ChainSlot{Prev: fxRedirBE, Changed: 99}
	svc := Service{ID: 1, Key: ServiceKey{fxVIP, 80, ProtoTCP}, Encap: EncapGUEHint, Table: make([]uint32, fxTableSize),
		Chain: chain, Generation: 100}
	if err := d.UpsertService(svc); err != nil {
		t.Fatal(err)
	}
	if err := d.Attach(); err != nil {
		t.Fatal(err)
	}
	if v, _ := f.Run(t, d.objs.XlbLbProg, tcpTo(fxVIP, 80).Frame(f.MAC)); v != xdpTX {
		t.Errorf("a packet to the migrated service: verdict %s, want TX", verdictNames[v])
	}
	d.Close()

	if d, err = openIn(t, f.Name, opts); err != nil {
		t.Fatal(err)
	}
	if why := d.Migrated(); why != "" {
		t.Errorf("migrated twice: %s", why)
	}
	got, gen, err := d.Chain(1)
	if err != nil || gen != 100 || len(got) != fxTableSize {
		t.Fatalf("adopted chain: generation %d, %d slots (%v)", gen, len(got), err)
	}
	if got[3] != chain[3] {
		t.Errorf("adopted chain: slot 3 %+v, want %+v", got[3], chain[3])
	}
}
