package lb

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// The fingerprints follow the load-time sizes and nothing else.
func TestSpecLayout(t *testing.T) {
	spec := func(table, backends uint32) bpfobj.Layout {
		return specLayoutOf(t, table, backends, DefaultConntrackSize)
	}
	base := spec(fxTableSize, DefaultMaxBackends)
	if _, ok := base[".rodata"]; ok {
		t.Error("global-variable maps are fingerprinted; they belong to one program version")
	}
	for _, name := range []string{"svc_index", "vips", "backends", "maglev_tables", "svc_retired", "backend_stats", "reasons", "chain_tables", "conntrack"} {
		if _, ok := base[name]; !ok {
			t.Errorf("no fingerprint for %s", name)
		}
	}
	if !mapsEqual(base, spec(fxTableSize, DefaultMaxBackends)) {
		t.Error("the same spec fingerprints differently twice")
	}
	var changed []string
	for name, fp := range spec(fxTableSize, 2*DefaultMaxBackends) {
		if base[name] != fp {
			changed = append(changed, name)
		}
	}
	slices.Sort(changed)
	if !slices.Equal(changed, []string{"backend_stats", "backends"}) {
		t.Errorf("doubling maxBackends changes %v, want backend_stats and backends", changed)
	}
	changed = nil
	for name, fp := range specLayoutOf(t, fxTableSize, DefaultMaxBackends, 1024) {
		if base[name] != fp {
			changed = append(changed, name)
		}
	}
	if !slices.Equal(changed, []string{"conntrack"}) {
		t.Errorf("another conntrack size changes %v, want conntrack", changed)
	}
	big := spec(65537, DefaultMaxBackends)
	if big["maglev_tables"] == base["maglev_tables"] || big["chain_tables"] == base["chain_tables"] {
		t.Error("the inner table size is not part of maglev_tables' and chain_tables' fingerprints")
	}
}

func specLayoutOf(t *testing.T, table, backends, conntrack uint32) bpfobj.Layout {
	t.Helper()
	s, err := lbSpec(Options{NodeAddr: fxNode, TableSize: table, MaxBackends: backends, ConntrackSize: conntrack})
	if err != nil {
		t.Fatal(err)
	}
	return bpfobj.SpecLayout(s)
}

func mapsEqual(a, b bpfobj.Layout) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// The layout record's keys of its format and flow hash entries
// (bpfobj.LayoutKey): a record edited with them is the one an xlb of
// another version would have written.
var (
	formatKey   = bpfobj.LayoutKey("")
	flowHashKey = bpfobj.LayoutKey("/flow_hash")
)

func loadIn(t *testing.T, ns string, opts Options) (*Dataplane, error) {
	t.Helper()
	return callIn(ns, Load, opts)
}

// editRecord changes the pinned layout record under pin in place: each
// entry of put is written (its value the given bytes, the rest zero), and
// each key of del deleted.
func editRecord(t *testing.T, pin string, put map[[16]byte][]byte, del ...[16]byte) {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(pin, bpfobj.LayoutPin), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for k, b := range put {
		var v [sha256.Size]byte
		copy(v[:], b)
		if err := m.Put(k, v); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range del {
		if err := m.Delete(k); err != nil {
			t.Fatal(err)
		}
	}
}

func pinnedMapID(t *testing.T, path string) ebpf.MapID {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	return mapID(t, m)
}

// mapID is the kernel's ID of map m.
func mapID(t *testing.T, m *ebpf.Map) ebpf.MapID {
	t.Helper()
	info, err := m.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, _ := info.ID()
	return id
}

// progMaps lists the IDs of the maps the program attached to veth0 uses.
func progMaps(t *testing.T, f *fixtureNS) []ebpf.MapID {
	t.Helper()
	p, err := ebpf.NewProgramFromID(ebpf.ProgramID(xdpProgID(t, f.Name, "veth0")))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	info, err := p.Info()
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := info.MapIDs()
	return ids
}

// A change of map layout (here: the backend maps' size) migrates: fresh
// maps are programmed while the old program keeps its maps, the program
// switch takes the new ones, and only then the pins and the record move.
func TestLayoutMigration(t *testing.T) {
	requirePrivileges(t)
	f := newFixtureNS(t)
	pin := testPinPath(t)
	opts := Options{Interface: "veth0", NodeAddr: fxNode, PinPath: pin, TableSize: fxTableSize}

	d, err := openIn(t, f.Name, opts)
	if err != nil {
		t.Fatal(err)
	}
	if d.Migrated() != "" {
		t.Errorf("fresh state reported as migrated: %s", d.Migrated())
	}
	if err := d.UpsertBackend(0, apOf(fxBackend)); err != nil {
		t.Fatal(err)
	}
	if err := d.UpsertService(Service{ID: 1, Key: ServiceKey{fxVIP, 80, ProtoTCP}, Encap: EncapIPIP, Table: make([]uint32, fxTableSize)}); err != nil {
		t.Fatal(err)
	}
	d.Close()

	// Same layout: adopted.
	d, err = openIn(t, f.Name, opts)
	if err != nil {
		t.Fatal(err)
	}
	if d.Migrated() != "" {
		t.Errorf("same layout migrated: %s", d.Migrated())
	}
	d.Close()
	oldBackends := pinnedMapID(t, filepath.Join(pin, "backends"))
	oldStats := pinnedMapID(t, filepath.Join(pin, "backend_stats"))
	oldProgMaps := progMaps(t, f)
	if !slices.Contains(oldProgMaps, oldStats) {
		t.Fatalf("the attached program does not use the pinned backend_stats")
	}

	opts.MaxBackends = 2 * DefaultMaxBackends
	d, err = loadIn(t, f.Name, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { d.Close() }()
	if why := d.Migrated(); !strings.Contains(why, "backend_stats") || !strings.Contains(why, "backends") || strings.Contains(why, "svc_index") {
		t.Errorf("migration reason %q, want the two backend maps and nothing else", why)
	}
	if svcs, err := servicesOf(d); err != nil || len(svcs) != 0 {
		t.Errorf("migrated maps hold services %v (%v), want fresh ones", svcs, err)
	}
	if err := d.UpsertBackend(DefaultMaxBackends+5, apOf(fxBackend)); err != nil {
		t.Fatalf("a backend ID beyond the old size: %v", err)
	}
	// Until Attach, the old program and its maps serve, pinned as before.
	if got := pinnedMapID(t, filepath.Join(pin, "backends")); got != oldBackends {
		t.Errorf("backends pin moved before the switch: %d, was %d", got, oldBackends)
	}
	if got := progMaps(t, f); !slices.Equal(got, oldProgMaps) {
		t.Errorf("attached program's maps changed before the switch")
	}
	if err := d.Attach(); err != nil {
		t.Fatal(err)
	}
	newBackends := pinnedMapID(t, filepath.Join(pin, "backends"))
	if newBackends == oldBackends {
		t.Error("backends pin did not move to the new map")
	}
	// (The program reads backend_stats; backends is the agent's record.)
	if stats := pinnedMapID(t, filepath.Join(pin, "backend_stats")); !slices.Contains(progMaps(t, f), stats) {
		t.Errorf("the attached program does not use the new backend_stats map %d", stats)
	}
	d.Close()

	// The record was rewritten: the next agent of this version adopts.
	d, err = openIn(t, f.Name, opts)
	if err != nil {
		t.Fatal(err)
	}
	if d.Migrated() != "" {
		t.Errorf("migrated twice: %s", d.Migrated())
	}
	if bes, err := backendsOf(d); err != nil || bes[DefaultMaxBackends+5] != fxBackend {
		t.Errorf("backends after adoption %v (%v)", bes, err)
	}
}

// A record this version cannot read refuses the state, touching nothing.
func TestLayoutRefusesNewerFormat(t *testing.T) {
	requirePrivileges(t)
	f := newFixtureNS(t)
	pin := testPinPath(t)
	opts := Options{Interface: "veth0", NodeAddr: fxNode, PinPath: pin, TableSize: fxTableSize}
	d, err := openIn(t, f.Name, opts)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	editRecord(t, pin, map[[16]byte][]byte{formatKey: {bpfobj.LayoutFormat + 1}})
	before := pinnedMapID(t, filepath.Join(pin, "svc_index"))
	prog := xdpProgID(t, f.Name, "veth0")

	_, err = openIn(t, f.Name, opts)
	if err == nil || !strings.Contains(err.Error(), "newer xlb") || !strings.Contains(err.Error(), "xlb cleanup") {
		t.Fatalf("Open over a newer layout record: %v, want a refusal that says what to do", err)
	}
	if pinnedMapID(t, filepath.Join(pin, "svc_index")) != before || xdpProgID(t, f.Name, "veth0") != prog {
		t.Error("a refused Open changed the pinned state")
	}
	// The refusal released the pin path for the next try.
	_, err = openIn(t, f.Name, opts)
	if err == nil || strings.Contains(err.Error(), "another xlb agent") {
		t.Errorf("second try: %v, want the same refusal, not a held lock", err)
	}
}

// State from before layout records, or with a record that disagrees about
// one map, is migrated as a whole.
func TestLayoutMissingOrChangedRecord(t *testing.T) {
	requirePrivileges(t)
	f := newFixtureNS(t)
	pin := testPinPath(t)
	opts := Options{Interface: "veth0", NodeAddr: fxNode, PinPath: pin, TableSize: fxTableSize}
	d, err := openIn(t, f.Name, opts)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()

	editRecord(t, pin, map[[16]byte][]byte{bpfobj.LayoutKey("reasons"): nil})
	d, err = openIn(t, f.Name, opts)
	if err != nil {
		t.Fatal(err)
	}
	if why := d.Migrated(); why != "map layouts changed: reasons" {
		t.Errorf("reason %q, want only reasons", why)
	}
	d.Close()

	if err := os.Remove(filepath.Join(pin, bpfobj.LayoutPin)); err != nil {
		t.Fatal(err)
	}
	d, err = openIn(t, f.Name, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if why := d.Migrated(); !strings.Contains(why, "no layout record") {
		t.Errorf("reason %q, want the missing record", why)
	}
}

// TestLayoutRefusesAnotherFlowHash: a node that changed its flow hash
// would send its established connections to other backends, so pinned
// state of a program that hashed otherwise is refused, touching nothing,
// with the setting that keeps it. A record of format 1, written by an xlb
// from before dataplane.flowHash, stands for lookup3: the upgrade from it
// is refused under the default and adopts under lookup3.
func TestLayoutRefusesAnotherFlowHash(t *testing.T) {
	requirePrivileges(t)
	f := newFixtureNS(t)
	pin := testPinPath(t)
	opts := Options{Interface: "veth0", NodeAddr: fxNode, PinPath: pin, TableSize: fxTableSize}
	d, err := openIn(t, f.Name, opts)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	before := pinnedMapID(t, filepath.Join(pin, "svc_index"))
	prog := xdpProgID(t, f.Name, "veth0")
	untouched := func(when string) {
		t.Helper()
		if pinnedMapID(t, filepath.Join(pin, "svc_index")) != before || xdpProgID(t, f.Name, "veth0") != prog {
			t.Errorf("%s: a refused Open changed the pinned state", when)
		}
	}

	opts.FlowHash = wire.FlowHashLookup3
	_, err = openIn(t, f.Name, opts)
	if err == nil || !strings.Contains(err.Error(), "hashes flows with fmix64") || !strings.Contains(err.Error(), "dataplane.flowHash: fmix64") {
		t.Fatalf("Open with lookup3 over a fmix64 program: %v, want a refusal naming the setting that keeps it", err)
	}
	untouched("lookup3 over fmix64")

	// A hash this version does not know: a newer xlb's.
	editRecord(t, pin, map[[16]byte][]byte{flowHashKey: {7}})
	_, err = openIn(t, f.Name, opts)
	if err == nil || !strings.Contains(err.Error(), "does not know (7)") || !strings.Contains(err.Error(), "newer xlb") {
		t.Fatalf("Open over an unknown flow hash: %v, want a refusal that names a newer xlb", err)
	}
	untouched("unknown flow hash")

	// The record as the xlb before flow hashes wrote it.
	editRecord(t, pin, map[[16]byte][]byte{formatKey: {1}}, flowHashKey)
	opts.FlowHash = wire.FlowHashFmix64
	_, err = openIn(t, f.Name, opts)
	if err == nil || !strings.Contains(err.Error(), "before dataplane.flowHash") || !strings.Contains(err.Error(), "dataplane.flowHash: lookup3") {
		t.Fatalf("Open with fmix64 over a format 1 record: %v, want a refusal naming lookup3", err)
	}
	untouched("fmix64 over format 1")

	opts.FlowHash = wire.FlowHashLookup3
	d, err = openIn(t, f.Name, opts)
	if err != nil {
		t.Fatalf("Open with lookup3 over a format 1 record: %v", err)
	}
	if why := d.Migrated(); why != "" {
		t.Errorf("same maps, format 1 record: migrated (%s), want adopted", why)
	}
	d.Close()
	rec, err := bpfobj.ReadLayout(pin)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Format != bpfobj.LayoutFormat || rec.FlowHash != wire.FlowHashLookup3 {
		t.Errorf("record after adoption: format %d, flow hash %v; want format %d, lookup3", rec.Format, rec.FlowHash, bpfobj.LayoutFormat)
	}
}
