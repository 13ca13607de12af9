package lb

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// TestLayoutMigratesIPv4OnlyState: state pinned by an xlb whose keys and
// values held IPv4 addresses only (testdata/lb-ipv4only.o, the LB object
// of commit 88f639a) has other layouts of the maps that hold addresses.
// The agent migrates: the old maps serve, untouched, until the switch,
// the new maps then forward, and the next agent adopts them.
func TestLayoutMigratesIPv4OnlyState(t *testing.T) {
	requirePrivileges(t)
	f := newFixtureNS(t)
	pin := testPinPath(t)
	old, err := ebpf.LoadCollectionSpec("testdata/lb-ipv4only.o")
	if err != nil {
		t.Fatal(err)
	}
	old.Programs = nil
	old.Maps["maglev_tables"].InnerMap.MaxEntries = fxTableSize
	old.Maps["chain_tables"].InnerMap.MaxEntries = fxTableSize + 1
	oldMaps := pinOldState(t, pin, old)
	// What that agent left: a service, its VIP and its backend, in the
	// IPv4-only layouts (svc_slot 16 bytes, a __be32 VIP, backend 8).
	key := wire.SvcKey(fxVIP, 80, ProtoTCP)
	var slot [16]byte
	binary.LittleEndian.PutUint32(slot[0:], key.Vip)
	binary.LittleEndian.PutUint16(slot[4:], key.Port)
	slot[6], slot[7] = key.Proto, uint8(EncapIPIP)
	binary.LittleEndian.PutUint32(slot[8:], 1)
	home := svcHash(key.Vip, key.Port, key.Proto) & (SvcSlots - 1)
	if err := oldMaps["svc_index"].Put(home, slot); err != nil {
		t.Fatal(err)
	}
	if err := oldMaps["vips"].Put(key.Vip, uint32(1)); err != nil {
		t.Fatal(err)
	}
	if err := oldMaps["backends"].Put(uint32(0), [2]uint32{wire.Addr4(fxBackend), 2}); err != nil {
		t.Fatal(err)
	}
	oldIndex := pinnedMapID(t, filepath.Join(pin, "svc_index"))

	opts := Options{Interface: "veth0", NodeAddr: fxNode, PinPath: pin, TableSize: fxTableSize}
	d, err := loadIn(t, f.Name, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { d.Close() }()
	// The five maps that hold addresses, among those later layouts
	// changed or added (the policy's maps, the reasons it counts).
	why := d.Migrated()
	for _, m := range []string{"backends", "chain_tables", "conntrack", "svc_index", "vips"} {
		if !strings.HasPrefix(why, "map layouts changed: ") || !slices.Contains(strings.Split(strings.TrimPrefix(why, "map layouts changed: "), ", "), m) {
			t.Errorf("migration reason %q, want it to name %s with the other maps that hold addresses", why, m)
		}
	}
	if err := d.UpsertBackend(0, apOf(fxBackend)); err != nil {
		t.Fatal(err)
	}
	if err := d.UpsertService(Service{ID: 1, Key: ServiceKey{fxVIP, 80, ProtoTCP}, Encap: EncapIPIP, Table: make([]uint32, fxTableSize)}); err != nil {
		t.Fatal(err)
	}
	// Until the switch the old maps stay pinned and as they were.
	if got := pinnedMapID(t, filepath.Join(pin, "svc_index")); got != oldIndex {
		t.Error("svc_index pin moved before the switch")
	}
	var got [16]byte
	if err := oldMaps["svc_index"].Lookup(home, &got); err != nil || got != slot {
		t.Errorf("old svc_index slot %d: % x (%v), want it untouched: % x", home, got, err, slot)
	}
	if err := d.Attach(); err != nil {
		t.Fatal(err)
	}
	if pinnedMapID(t, filepath.Join(pin, "svc_index")) == oldIndex {
		t.Error("svc_index pin did not move to the new map")
	}
	in := tcpTo(fxVIP, 80).Frame(f.MAC)
	if v, out := f.Run(t, d.objs.XlbLbProg, in); v != xdpTX {
		t.Errorf("a packet to the migrated service: verdict %s, want TX", verdictNames[v])
	} else {
		checkOuter(t, out, 4, fxBackend, len(in)-14, true)
	}
	d.Close()

	if d, err = openIn(t, f.Name, opts); err != nil {
		t.Fatal(err)
	}
	if why := d.Migrated(); why != "" {
		t.Errorf("migrated twice: %s", why)
	}
	if bes, err := backendsOf(d); err != nil || bes[0] != fxBackend {
		t.Errorf("adopted backends %v (%v)", bes, err)
	}
	if _, err := os.Stat(filepath.Join(pin, "conntrack")); err != nil {
		t.Errorf("conntrack not pinned after the switch: %v", err)
	}
}
