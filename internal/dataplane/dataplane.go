package dataplane

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// Limits of the LB program's maps (bpf/xlb_consts.h). The backend maps'
// size is a load-time parameter (Options.MaxBackends).
const (
	MaxServices        = 16384
	DefaultMaxBackends = 16384
)

// linkPin is the file name of the pinned XDP link inside a pin directory.
const linkPin = "link"

// Dataplane is an attached, programmable LB data plane. Its methods are
// safe for concurrent use, and UpsertService and DeleteService of
// different services run in parallel: most of a table swap is the kernel
// filling the new table and waiting for an RCU grace period, which calls
// on other services can overlap. Calls on one service are serialised.
type Dataplane struct {
	// svcMu serialises the calls on one service ID; taken before mu.
	svcMu [MaxServices]sync.Mutex
	// mu guards the mirrors below and every map write outside a table
	// fill and swap.
	mu        sync.Mutex
	objs      lbObjects
	link      link.Link
	mode      string
	tableSize uint32
	maxBack   uint32
	ctSize    uint32
	flowHash  FlowHashKind
	pinPath   string
	iface     *net.Interface
	attachAs  string            // requested attach mode
	migrate   migration         // how the pinned state was adopted
	layout    layout            // of the loaded maps, recorded once attached
	lock      *os.File          // held while this process owns the pin path
	index     svcIndex          // mirror of the svc_index map
	vips      vipSet            // mirror of the vips and vip_filter maps
	addrs     map[uint32]uint32 // mirror of the backends map: id -> wire address
	owner     ownership         // mirror of the backends map: which service each backend counts for
	sums      *ebpf.Map         // table records (tablesum.go); nil: none kept
	chainSums *ebpf.Map         // chain table records (chain.go); nil: none kept
	// chains says of each service whether it has no chain table for sure
	// (chain.go); guarded by the service's lock in svcMu.
	chains [MaxServices]chainRecord
}

// Open loads the data plane (Load) and attaches it (Attach) at once.
func Open(opts Options) (*Dataplane, error) {
	d, err := Load(opts)
	if err != nil {
		return nil, err
	}
	if err := d.Attach(); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// Load loads the LB program and adopts the maps pinned under
// opts.PinPath when they exist and their layout is this program's. When
// it is not, Load creates fresh maps instead and leaves the old ones to
// the running program (see layout.go). Nothing forwards differently until
// Attach: program the maps in between, and the switch loses nothing.
func Load(opts Options) (*Dataplane, error) {
	if opts.TableSize == 0 {
		opts.TableSize = 65537
	}
	if !opts.NodeAddr.Is4() {
		return nil, fmt.Errorf("node address %v: an IPv4 address is required", opts.NodeAddr)
	}
	if opts.PinPath == "" {
		return nil, errors.New("no pin path given")
	}
	iface, err := net.InterfaceByName(opts.Interface)
	if err != nil {
		return nil, fmt.Errorf("interface %q: %w", opts.Interface, err)
	}
	if err := ensureBPFFS(opts.PinPath); err != nil {
		return nil, err
	}
	lock, err := lockPinPath(opts.PinPath)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.PinPath, 0o700); err != nil {
		lock.Close()
		return nil, fmt.Errorf("create pin directory: %w", err)
	}
	if err := PrepareInterface(opts.Interface); err != nil {
		lock.Close()
		return nil, err
	}

	d, err := load(opts, true)
	if err != nil {
		lock.Close()
		return nil, err
	}
	d.lock, d.iface, d.attachAs = lock, iface, opts.AttachMode
	return d, nil
}

// Attach attaches the program to the interface, or atomically replaces
// the program of the pinned link, and pins the link. After a migration it
// then moves the pins to the new maps. Last, it records their layout.
func (d *Dataplane) Attach() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.iface == nil {
		return errors.New("attach: the data plane was not loaded with Load")
	}
	if d.link != nil {
		return nil
	}
	l, mode, err := AttachXDP(d.objs.XlbLbProg, d.iface, d.attachAs, filepath.Join(d.pinPath, linkPin))
	if err != nil {
		return err
	}
	d.link, d.mode = l, mode
	if d.migrate.migrate {
		for name, m := range d.objs.namedMaps() {
			if err := replacePin(m, filepath.Join(d.pinPath, name)); err != nil {
				return fmt.Errorf("move pins to the migrated maps: %w", err)
			}
		}
		d.migrate.migrate = false
	}
	if err := writeLayout(d.pinPath, d.layout, d.flowHash); err != nil {
		return err
	}
	return writeTableSize(d.pinPath, d.tableSize)
}

// Migrated says why Load created fresh maps instead of adopting the
// pinned ones, "" when it adopted them (or found none).
func (d *Dataplane) Migrated() string { return d.migrate.reason }

// New loads the LB program with fresh maps, neither pinned nor attached
// (opts.Interface, PinPath and AttachMode are not used), for tests and
// benchmarks that run it with BPF_PROG_TEST_RUN: programmed like an
// attached one, it forwards the same. Close releases it all.
func New(opts Options) (*Dataplane, error) {
	if opts.TableSize == 0 {
		opts.TableSize = 65537
	}
	if !opts.NodeAddr.Is4() {
		return nil, fmt.Errorf("node address %v: an IPv4 address is required", opts.NodeAddr)
	}
	return load(opts, false)
}

// Maps are the LB program's maps by name: another build of the program
// (a benchmark's, or a variant of it) loaded on them sees the services,
// tables and counters this data plane programs.
func (d *Dataplane) Maps() map[string]*ebpf.Map { return d.objs.namedMaps() }

// load loads the LB objects, with their maps pinned under opts.PinPath
// (adopting the ones already there) when pin is set.
func load(opts Options, pin bool) (*Dataplane, error) {
	if opts.MaxBackends == 0 {
		opts.MaxBackends = DefaultMaxBackends
	}
	if opts.ConntrackSize == 0 {
		opts.ConntrackSize = DefaultConntrackSize
	}
	spec, err := lbSpec(opts)
	if err != nil {
		return nil, err
	}
	d := &Dataplane{tableSize: opts.TableSize, maxBack: opts.MaxBackends, ctSize: opts.ConntrackSize, flowHash: opts.FlowHash,
		pinPath: opts.PinPath, layout: specLayout(spec)}
	var copts ebpf.CollectionOptions
	if pin {
		if err := checkPinnedTableSize(opts.PinPath, opts.TableSize); err != nil {
			return nil, err
		}
		d.migrate, err = planAdoption(opts.PinPath, d.layout, opts.FlowHash)
		if err != nil {
			return nil, err
		}
		if !d.migrate.migrate {
			// Fresh maps are pinned by Attach, after the swap.
			pinMaps(spec)
		}
		copts.Maps.PinPath = opts.PinPath
	}
	if err := spec.LoadAndAssign(&d.objs, &copts); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load LB program: %+v", ve)
		}
		if errors.Is(err, ebpf.ErrMapIncompatible) {
			return nil, fmt.Errorf("pinned maps under %s do not match this xlb's layout: %w (stop the old agent and run `xlb cleanup`; this drops established flows)", opts.PinPath, err)
		}
		return nil, fmt.Errorf("load LB program: %w", err)
	}
	if err := d.index.load(d.objs.SvcIndex); err != nil {
		d.objs.Close()
		return nil, err
	}
	// The VIP set is derived from the index. An agent that stopped
	// between writing the one and the other left them apart, and tables
	// that need no rewrite no longer bring them together.
	if err := d.resyncVIPs(); err != nil {
		d.objs.Close()
		return nil, err
	}
	sumsPath := ""
	if pin {
		sumsPath = opts.PinPath
	}
	if d.sums, err = openSums(sumsPath, sumSpec[tableSum](sumsPin)); err != nil {
		d.objs.Close()
		return nil, err
	}
	if d.chainSums, err = openSums(sumsPath, sumSpec[chainSum](chainSumsPin)); err != nil {
		d.closeMaps()
		return nil, err
	}
	d.addrs, d.owner = map[uint32]uint32{}, newOwnership()
	err = eachInArray(d.objs.Backends, func(id uint32, be *wire.Backend) {
		if be.Addr != 0 {
			d.addrs[id] = be.Addr
		}
		d.owner.set(id, be.Owner)
	})
	if err != nil {
		d.closeMaps()
		return nil, fmt.Errorf("read backends: %w", err)
	}
	// Next hops cached per backend in pinned state by an earlier program
	// must not count as fresh: start the generation somewhere new.
	if err := d.objs.NhGen.Set(rand.Uint32() | 1); err != nil {
		d.closeMaps()
		return nil, fmt.Errorf("initialise next-hop generation: %w", err)
	}
	return d, nil
}

// lbSpec returns the LB collection spec with its load-time parameters set
// from opts (its sizes given, not 0).
func lbSpec(opts Options) (*ebpf.CollectionSpec, error) {
	spec, err := loadLb()
	if err != nil {
		return nil, fmt.Errorf("parse embedded LB object: %w", err)
	}
	if opts.FlowHash != FlowHashFmix64 && opts.FlowHash != FlowHashLookup3 {
		return nil, fmt.Errorf("unknown %v", opts.FlowHash)
	}
	spec.Maps["maglev_tables"].InnerMap.MaxEntries = opts.TableSize
	// One entry per slot, and the generation after them.
	spec.Maps["chain_tables"].InnerMap.MaxEntries = opts.TableSize + 1
	spec.Maps["backends"].MaxEntries = opts.MaxBackends
	spec.Maps["backend_stats"].MaxEntries = opts.MaxBackends
	spec.Maps["conntrack"].MaxEntries = opts.ConntrackSize
	for name, v := range map[string]uint32{"node_addr": wire.Addr4(opts.NodeAddr), "table_size": opts.TableSize, "flow_hash": uint32(opts.FlowHash)} {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("set %s: %w", name, err)
		}
	}
	return spec, nil
}

// checkPinnedTableSize refuses to adopt tables of another size: the
// program's range reduction and the inner maps must agree.
func checkPinnedTableSize(pinPath string, want uint32) error {
	size, ok, err := pinnedTableSize(pinPath)
	if err != nil {
		return err
	}
	if ok {
		if size != want {
			return fmt.Errorf("pinned state under %s has Maglev tables of size %d but the config asks for %d: keep tableSize %d, or stop the agent and run `xlb cleanup` (drops established flows)", pinPath, size, want, size)
		}
		return nil
	}
	// No record (pinned by an older xlb): look at a table itself, which
	// needs CAP_SYS_ADMIN; without it, nothing can be checked.
	outer, err := ebpf.LoadPinnedMap(filepath.Join(pinPath, "maglev_tables"), nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("inspect pinned tables: %w", err)
	}
	defer outer.Close()
	var id ebpf.MapID
	it := outer.Iterate()
	var k uint32
	for it.Next(&k, &id) {
		inner, err := ebpf.NewMapFromID(id)
		if err != nil {
			continue
		}
		size := inner.MaxEntries()
		inner.Close()
		if size != want {
			return fmt.Errorf("pinned state under %s has Maglev tables of size %d but the config asks for %d: keep tableSize %d, or stop the agent and run `xlb cleanup` (drops established flows)", pinPath, size, want, size)
		}
		return nil
	}
	return nil
}

// Close releases this process's handles; the pinned maps and link stay,
// and forwarding continues.
func (d *Dataplane) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	if d.link != nil {
		errs = append(errs, d.link.Close())
		d.link = nil
	}
	errs = append(errs, d.closeMaps())
	if d.lock != nil {
		errs = append(errs, d.lock.Close())
		d.lock = nil
	}
	return errors.Join(errs...)
}

// closeMaps releases the handles of the program and its maps.
func (d *Dataplane) closeMaps() error {
	err := d.objs.Close()
	for _, m := range []**ebpf.Map{&d.sums, &d.chainSums} {
		if *m != nil {
			err = errors.Join(err, (*m).Close())
			*m = nil
		}
	}
	return err
}

// AttachMode reports how XDP is attached: "native" or "generic".
func (d *Dataplane) AttachMode() string { return d.mode }

// MaxBackends is the number of backend IDs the maps hold.
func (d *Dataplane) MaxBackends() uint32 { return d.maxBack }

// ConntrackSize is the number of flows the conntrack table holds.
func (d *Dataplane) ConntrackSize() uint32 { return d.ctSize }

// TableSize is the Maglev table size the program was loaded with.
func (d *Dataplane) TableSize() uint32 { return d.tableSize }

// FlowHash is the flow hash the program was loaded with.
func (d *Dataplane) FlowHash() FlowHashKind { return d.flowHash }

// PinPath is the bpffs directory holding this data plane's state.
func (d *Dataplane) PinPath() string { return d.pinPath }

// UpsertBackend registers backend id with its address. Tables carry the
// address of each backend they name (copied when the table is written),
// so an id keeps its address until DeleteBackend frees it.
func (d *Dataplane) UpsertBackend(id uint32, addr netip.Addr) error {
	if id >= d.maxBack || !addr.Is4() || addr.IsUnspecified() {
		return fmt.Errorf("backend %d %v: id out of range or not a usable IPv4 address", id, addr)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	w := wire.Addr4(addr)
	if old, ok := d.addrs[id]; ok {
		if old == w {
			return nil
		}
		return fmt.Errorf("backend %d already has address %v: delete it before reusing the id", id, wire.AddrFrom4(old))
	}
	if err := d.objs.Backends.Put(id, wire.Backend{Addr: w, Owner: d.owner.get(id)}); err != nil {
		return fmt.Errorf("write backend %d: %w", id, err)
	}
	d.addrs[id] = w
	return d.invalidateNextHops()
}

// DeleteBackend clears backend id and its counters. Tables must no longer
// reference it.
func (d *Dataplane) DeleteBackend(id uint32) error {
	if id >= d.maxBack {
		return fmt.Errorf("backend %d: id out of range", id)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.retire(id); err != nil {
		return err
	}
	if err := d.objs.Backends.Put(id, wire.Backend{}); err != nil {
		return fmt.Errorf("clear backend %d: %w", id, err)
	}
	delete(d.addrs, id)
	d.owner.set(id, 0)
	if err := d.invalidateNextHops(); err != nil {
		return err
	}
	return zeroPerCPU[wire.BackendState](d.objs.BackendStats, id)
}

// UpsertService installs or replaces a service. A new table is written
// into a fresh inner map and swapped in with one update of the outer
// map, so a packet sees either the old or the new table, never a mix. A
// new service becomes visible in the service index only once its table
// is in place. When the installed table already holds exactly these
// entries (backend IDs and the addresses they carry), as a table recorded
// by an earlier agent on the same pinned maps may (see tablesum.go), it
// is kept: no new table, no swap. The table's backends must exist
// (UpsertBackend) before the call and stay until it returns.
//
// An EncapGUEHint service's packets take their backend and hint
// (Chain, Generation) from its chain table, swapped in the same way and
// kept when unchanged (chain.go); a service of another encapsulation has
// none. A stateful service cannot have hints.
func (d *Dataplane) UpsertService(s Service) error {
	key, err := checkService(s)
	if err != nil {
		return err
	}
	if uint32(len(s.Table)) != d.tableSize {
		return fmt.Errorf("service %d: table has %d slots, want %d", s.ID, len(s.Table), d.tableSize)
	}
	hints := s.Encap == EncapGUEHint
	if hints {
		if err := d.checkChain(s.Chain); err != nil {
			return fmt.Errorf("service %d: %w", s.ID, err)
		}
	}
	d.svcMu[s.ID].Lock()
	defer d.svcMu[s.ID].Unlock()

	named := d.named(s.Table)
	// The address of each backend the table names, by id.
	var addrs []uint32
	if len(named) > 0 {
		addrs = make([]uint32, slices.Max(named)+1)
	}
	d.mu.Lock()
	err = d.claim(s.ID, named)
	for _, b := range named {
		addrs[b] = d.addrs[b]
	}
	d.mu.Unlock()
	if err != nil {
		return fmt.Errorf("service %d: %w", s.ID, err)
	}
	// Without d.mu from here to the swap: filling and swapping take
	// milliseconds each, which other services' calls can use.
	entries := make([]wire.TableEntry, len(s.Table))
	for i, id := range s.Table {
		// An unknown id gets address 0: the program drops its packets.
		var addr uint32
		if int(id) < len(addrs) {
			addr = addrs[id]
		}
		entries[i] = wire.NewTableEntry(id, addr)
	}
	sum := digest(entries)
	var tableErr error
	var table sync.WaitGroup
	if !d.keepTable(s.ID, sum, s.Origin) {
		table.Go(func() { tableErr = d.swapTable(s.ID, entries, sum, s.Origin) })
	}
	if hints {
		// What the program reads for this service: backends and hints
		// in one swap (chain.go). While the index says the service has
		// hints, its packets read no Maglev table, and the index changes
		// below, after both swaps: so the two may run side by side. Each
		// waits out an RCU grace period; together they wait about one.
		if err := d.installChain(s.ID, entries, s.Chain, s.Generation, s.Origin, s.HintsOrigin); err != nil {
			table.Wait()
			return fmt.Errorf("service %d: %w", s.ID, err)
		}
	}
	table.Wait()
	if tableErr != nil {
		return fmt.Errorf("service %d: %w", s.ID, tableErr)
	}
	return d.entry(s, key)
}

// checkService checks what UpsertService and KeepService take alike and
// returns the service's index slot key.
func checkService(s Service) (wire.SvcSlot, error) {
	if s.ID >= MaxServices {
		return wire.SvcSlot{}, fmt.Errorf("service %d: id out of range", s.ID)
	}
	if s.Encap != EncapIPIP && s.Encap != EncapGUE && s.Encap != EncapGUEHint {
		return wire.SvcSlot{}, fmt.Errorf("service %d: unknown encapsulation %d", s.ID, s.Encap)
	}
	if s.Encap == EncapGUEHint && s.Stateful {
		return wire.SvcSlot{}, fmt.Errorf("service %d: a stateful service has no daisy-chaining hints; use EncapGUE", s.ID)
	}
	key, err := slotKey(s.Key)
	if err != nil {
		return wire.SvcSlot{}, fmt.Errorf("service %d: %w", s.ID, err)
	}
	return key, nil
}

// entry writes service s's index slot, key plus its ID, encapsulation and
// flags, once its table is in place, and drops the hints of a service
// that has none. Called with service s.ID's lock held, without d.mu: a
// chain's deletion waits for an RCU grace period.
func (d *Dataplane) entry(s Service, key wire.SvcSlot) error {
	key.Id, key.Encap = s.ID, uint8(s.Encap)
	if s.Stateful {
		key.Flags |= wire.SvcStateful
	}
	d.mu.Lock()
	err := d.indexService(key)
	d.mu.Unlock()
	if err != nil {
		return fmt.Errorf("service %d: %w", s.ID, err)
	}
	if s.Encap != EncapGUEHint {
		// Once the index says so, no packet of the service reads its
		// hints any more.
		if err := d.dropChain(s.ID); err != nil {
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
// included, and change whenever how it is built does. For 1000 services
// of 100 backends and 65537 slots, an agent restarted on the pinned maps
// took 1.7 s and 3 s of CPU to build every table again and compare it;
// with this (and the backend registry read in batches), 0.3 s and 0.4 s
// of CPU (bench/ctlbench, its reconcile part): no table's half megabyte
// is touched.
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
	if !d.builtFrom(s.ID, s.Origin) || s.Encap == EncapGUEHint && !d.chainBuiltFrom(s.ID, s.Origin, s.HintsOrigin) {
		return ErrNotKept
	}
	d.mu.Lock()
	for _, b := range names {
		if _, ok := d.addrs[b]; !ok || d.owner.get(b) != s.ID+1 {
			d.mu.Unlock()
			return ErrNotKept
		}
	}
	d.mu.Unlock()
	return d.entry(s, key)
}

// indexService installs key in the service index, or updates it there,
// and the VIP set with it. Called with d.mu held.
func (d *Dataplane) indexService(key wire.SvcSlot) error {
	at, _ := d.index.find(key)
	if at >= 0 && d.index.slots[at] == key {
		return nil // installed exactly (same ID and encap): nor has the VIP set changed
	}
	if d.vips.dirty {
		// An earlier write failed: the maps may lack VIPs the index
		// has. A VIP in the set before its service is in the index
		// costs nothing; the reverse would pass the VIP's fragments.
		if err := d.resyncVIPs(); err != nil {
			return err
		}
	}
	if at < 0 {
		if err := d.vips.add(d.vipMaps(), key.Vip); err != nil {
			return err
		}
	}
	if err := d.index.upsert(d.objs.SvcIndex, key); err != nil {
		if at < 0 {
			_ = d.vips.remove(d.vipMaps(), key.Vip)
		}
		return err
	}
	return nil
}

// named lists the backend ids that table names, each once, leaving out
// those beyond the backend maps (no backend can have them).
func (d *Dataplane) named(table []uint32) []uint32 {
	seen := make([]uint64, (d.maxBack+63)/64)
	var out []uint32
	for _, id := range table {
		if id >= d.maxBack {
			continue
		}
		if w, bit := id/64, uint64(1)<<(id%64); seen[w]&bit == 0 {
			seen[w] |= bit
			out = append(out, id)
		}
	}
	return out
}

// swapTable fills a new inner map with entries and makes it service id's
// table, then records what it holds. Called with service id's lock held,
// without d.mu.
func (d *Dataplane) swapTable(id uint32, entries []wire.TableEntry, sum [digestSize]byte, origin Origin) error {
	inner, err := NewFilledTable(entries)
	if err != nil {
		return err
	}
	defer inner.Close()
	// Returns once no program can still be reading the old table.
	if err := d.objs.MaglevTables.Put(id, inner); err != nil {
		return fmt.Errorf("swap table: %w", err)
	}
	d.record(id, inner, sum, origin)
	return nil
}

// DeleteService removes a service: first from the index, so no packet
// finds it, then its table and counters.
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
	at, _ := d.index.find(k)
	err = d.index.remove(d.objs.SvcIndex, k)
	if err == nil && at >= 0 {
		// Out of the index first: no packet finds the service while
		// its VIP is already unknown.
		err = d.vips.remove(d.vipMaps(), k.Vip)
	}
	d.mu.Unlock()
	if err != nil {
		return fmt.Errorf("delete service %d: %w", id, err)
	}
	// Without d.mu: like a swap, the delete waits for an RCU grace period.
	if err := d.objs.MaglevTables.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete table of service %d: %w", id, err)
	}
	d.forget(id)
	if id < MaxServices {
		if err := d.dropChain(id); err != nil {
			return fmt.Errorf("delete service %d: %w", id, err)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	// Its backends no longer count towards it (nor towards a later
	// service that gets its id).
	for _, b := range d.owner.backends(id + 1) {
		if err := d.setOwner(b, 0); err != nil {
			return err
		}
		if err := zeroPerCPU[wire.BackendState](d.objs.BackendStats, b); err != nil {
			return err
		}
	}
	if err := d.objs.SvcRetired.Put(id, wire.Counter{}); err != nil {
		return fmt.Errorf("reset counters of service %d: %w", id, err)
	}
	if d.vips.dirty {
		return d.resyncVIPs()
	}
	return nil
}

func slotKey(k ServiceKey) (wire.SvcSlot, error) {
	if !k.VIP.Is4() || k.VIP.IsUnspecified() {
		return wire.SvcSlot{}, fmt.Errorf("VIP %v is not a usable IPv4 address", k.VIP)
	}
	if k.Proto != ProtoTCP && k.Proto != ProtoUDP {
		return wire.SvcSlot{}, fmt.Errorf("protocol %d is not TCP or UDP", k.Proto)
	}
	return wire.SvcSlot{Vip: wire.Addr4(k.VIP), Port: wire.Port(k.Port), Proto: k.Proto}, nil
}

// Services lists installed services (without tables or hints), for
// adoption.
func (d *Dataplane) Services() ([]Service, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []Service
	for _, s := range d.index.services() {
		out = append(out, Service{
			ID:       s.Id,
			Key:      ServiceKey{VIP: wire.AddrFrom4(s.Vip), Port: wire.PortFrom(s.Port), Proto: s.Proto},
			Encap:    Encap(s.Encap),
			Stateful: s.Flags&wire.SvcStateful != 0,
		})
	}
	return out, nil
}

// Table reads service id's current Maglev table.
func (d *Dataplane) Table(id uint32) ([]uint32, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var innerID ebpf.MapID
	if err := d.objs.MaglevTables.Lookup(id, &innerID); err != nil {
		return nil, fmt.Errorf("table of service %d: %w", id, err)
	}
	table, err := d.readInner(innerID)
	if err != nil {
		return nil, fmt.Errorf("read table of service %d: %w", id, err)
	}
	return table, nil
}

// Backends lists installed backends by id, for adoption.
func (d *Dataplane) Backends() (map[uint32]netip.Addr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	// d.addrs mirrors the map: read from it when the data plane was
	// opened, and changed only with it since (the pin path's lock keeps
	// other agents out).
	out := make(map[uint32]netip.Addr, len(d.addrs))
	for id, a := range d.addrs {
		out[id] = wire.AddrFrom4(a)
	}
	return out, nil
}

// BackendOwners maps each backend that counts for a service to that
// service's ID: the service whose table named it last. Adoption uses it
// to give every service back its own backend IDs without reading the
// tables, which would cost as much as writing them.
func (d *Dataplane) BackendOwners() (map[uint32]uint32, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[uint32]uint32, len(d.owner.of))
	for b, o := range d.owner.of {
		out[b] = o - 1
	}
	return out, nil
}

// ServiceCounters is what service id has forwarded: the sum of its
// backends' counters and of those its departed backends had counted.
func (d *Dataplane) ServiceCounters(id uint32) (Counters, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var c wire.Counter
	if err := d.objs.SvcRetired.Lookup(id, &c); err != nil {
		return Counters{}, fmt.Errorf("read counters of service %d: %w", id, err)
	}
	total := Counters{Packets: c.Packets, Bytes: c.Bytes}
	for _, b := range d.owner.backends(id + 1) {
		bc, err := d.BackendCounters(b)
		if err != nil {
			return Counters{}, err
		}
		total.Packets += bc.Packets
		total.Bytes += bc.Bytes
	}
	return total, nil
}

// claim records service id as the owner of the backends named, those its
// table names. A backend that moves from another service takes its
// history along into that service's retired counters first. Called with
// d.mu held.
func (d *Dataplane) claim(id uint32, named []uint32) error {
	for _, b := range named {
		if _, ok := d.addrs[b]; !ok || d.owner.get(b) == id+1 {
			continue
		}
		if d.owner.get(b) != 0 {
			if err := d.retire(b); err != nil {
				return err
			}
			if err := zeroPerCPU[wire.BackendState](d.objs.BackendStats, b); err != nil {
				return err
			}
		}
		if err := d.setOwner(b, id+1); err != nil {
			return err
		}
	}
	return nil
}

// retire adds backend b's counters to its owner's retired counters.
// Called with d.mu held.
func (d *Dataplane) retire(b uint32) error {
	o := d.owner.get(b)
	if o == 0 {
		return nil
	}
	bc, err := d.BackendCounters(b)
	if err != nil {
		return err
	}
	var c wire.Counter
	if err := d.objs.SvcRetired.Lookup(o-1, &c); err != nil {
		return fmt.Errorf("read counters of service %d: %w", o-1, err)
	}
	c.Packets += bc.Packets
	c.Bytes += bc.Bytes
	if err := d.objs.SvcRetired.Put(o-1, c); err != nil {
		return fmt.Errorf("write counters of service %d: %w", o-1, err)
	}
	return nil
}

func (d *Dataplane) setOwner(b, owner uint32) error {
	if err := d.objs.Backends.Put(b, wire.Backend{Addr: d.addrs[b], Owner: owner}); err != nil {
		return fmt.Errorf("write backend %d: %w", b, err)
	}
	d.owner.set(b, owner)
	return nil
}

// BackendCounters sums backend id's per-CPU counters.
func (d *Dataplane) BackendCounters(id uint32) (Counters, error) {
	return sumPerCPUOf(d.objs.BackendStats, id, func(s wire.BackendState) wire.Counter { return s.Stats })
}

// ReasonCounters returns the pass/drop counters by reason name.
func (d *Dataplane) ReasonCounters() (map[string]uint64, error) {
	out := make(map[string]uint64, len(wire.ReasonNames))
	for i, name := range wire.ReasonNames {
		var per []uint64
		if err := d.objs.Reasons.Lookup(uint32(i), &per); err != nil {
			return nil, fmt.Errorf("read reason %s: %w", name, err)
		}
		var sum uint64
		for _, n := range per {
			sum += n
		}
		out[name] = sum
	}
	return out, nil
}

func sumPerCPU(m *ebpf.Map, id uint32) (Counters, error) {
	return sumPerCPUOf(m, id, func(c wire.Counter) wire.Counter { return c })
}

// sumPerCPUOf sums the counters that get picks out of per-CPU values T.
func sumPerCPUOf[T any](m *ebpf.Map, id uint32, get func(T) wire.Counter) (Counters, error) {
	var per []T
	if err := m.Lookup(id, &per); err != nil {
		return Counters{}, fmt.Errorf("read counters %d: %w", id, err)
	}
	var c Counters
	for _, p := range per {
		x := get(p)
		c.Packets += x.Packets
		c.Bytes += x.Bytes
	}
	return c, nil
}

// zeroPerCPU resets entry id of a per-CPU map whose values are T on
// every CPU.
func zeroPerCPU[T any](m *ebpf.Map, id uint32) error {
	n, err := ebpf.PossibleCPU()
	if err != nil {
		return err
	}
	if err := m.Put(id, make([]T, n)); err != nil {
		return fmt.Errorf("reset counters %d: %w", id, err)
	}
	return nil
}

// Cleanup detaches and removes everything pinned under pinPath. Stop the
// agent first: while it runs it holds the link open.
func Cleanup(pinPath string) error {
	if pinPath == "" || pinPath == "/" || pinPath == BPFFSRoot {
		return fmt.Errorf("refusing to remove %q", pinPath)
	}
	if err := checkBPFFS(pinPath); err != nil {
		return err
	}
	if err := os.RemoveAll(pinPath); err != nil {
		return fmt.Errorf("remove %s: %w", pinPath, err)
	}
	// No agent runs on this state any more (Cleanup needs it stopped).
	return RemoveLock(pinPath)
}

// pinMaps marks the collection's state maps for pinning by name; the
// global-variable maps (.rodata, .bss) belong to one program version.
func pinMaps(spec *ebpf.CollectionSpec) {
	for name, m := range spec.Maps {
		if !strings.HasPrefix(name, ".") {
			m.Pinning = ebpf.PinByName
		}
	}
}
