// Package lb is the LB node's data plane: it loads the XDP program
// xlb_lb (bpf/xlb_lb.c), pins its maps and link under bpffs, adopts what
// an earlier agent pinned, and programs the maps. A Dataplane is composed
// of four parts, each owning its maps: the service index (svc_index and
// the VIP set in front of it), the backend registry (backend IDs, their
// addresses, the service each counts for, their counters and next hops),
// the table store (the Maglev and chain tables, swapped whole, with the
// records of what each holds) and the policy (the node's deny list and
// the services' source ranges, swapped whole too).
package lb

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// Limits of the LB program's maps (bpf/xlb_consts.h). The backend maps'
// size is a load-time parameter (Options.MaxBackends).
const (
	MaxServices        = 16384
	DefaultMaxBackends = 16384
)

// DefaultTableSize is the Maglev table size when Options give none.
const DefaultTableSize = 65537

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
	// mu guards svcs and backends, and every map write outside a table
	// fill and swap.
	mu       sync.Mutex
	svcs     services   // the service index and the VIP set
	backends registry   // the backend registry
	tables   tableStore // the Maglev and chain tables and their records
	policy   *policy    // the deny list and the services' source ranges
	nat      natState   // the NAT settings and the sessions' sweep

	objs     lbObjects
	shape    Shape
	pinPath  string
	link     link.Link
	iface    *net.Interface
	attachAs string           // requested attach mode
	migrate  bpfobj.Migration // how the pinned state was adopted
	layout   bpfobj.Layout    // of the loaded maps, recorded once attached
	lock     *os.File         // held while this process owns the pin path
	node4    bool             // the node has an IPv4 address (node_addr): IPv4 VIPs and backends are served
	node6    bool             // the node has an IPv6 address (node_addr6): IPv6 backends are reachable
}

// Shape is how the data plane was loaded and attached.
type Shape struct {
	TableSize     uint32        // Maglev table slots
	MaxBackends   uint32        // backend IDs the maps hold
	ConntrackSize uint32        // flows the conntrack table holds
	NATSessions   uint32        // NAT sessions the node holds
	FlowHash      wire.FlowHash // the flow hash the program computes
	PingVIPs      bool          // the program answers echo requests to VIPs
	// AttachMode is how XDP is attached: bpfobj.ModeNative or
	// ModeGeneric; "" until Attach.
	AttachMode string
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
// the running program (see bpfobj.PlanAdoption). Nothing forwards
// differently until Attach: program the maps in between, and the switch
// loses nothing.
func Load(opts Options) (*Dataplane, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if opts.PinPath == "" {
		return nil, errors.New("no pin path given")
	}
	iface, err := net.InterfaceByName(opts.Interface)
	if err != nil {
		return nil, fmt.Errorf("interface %q: %w", opts.Interface, err)
	}
	if err := bpfobj.EnsurePinFS(opts.PinPath); err != nil {
		return nil, err
	}
	lock, err := bpfobj.Lock(opts.PinPath)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.PinPath, 0o700); err != nil {
		lock.Close()
		return nil, fmt.Errorf("create pin directory: %w", err)
	}
	if opts.NodeAddr.IsValid() {
		if err := PrepareInterface(opts.Interface); err != nil {
			lock.Close()
			return nil, err
		}
	}
	if opts.NodeAddr6.IsValid() {
		if err := PrepareInterface6(opts.Interface); err != nil {
			lock.Close()
			return nil, err
		}
	}

	d, err := load(opts, true)
	if err != nil {
		lock.Close()
		return nil, err
	}
	d.lock, d.iface, d.attachAs = lock, iface, opts.AttachMode
	return d, nil
}

// New loads the LB program with fresh maps, neither pinned nor attached
// (opts.Interface, PinPath and AttachMode are not used), for tests and
// benchmarks that run it with BPF_PROG_TEST_RUN: programmed like an
// attached one, it forwards the same. Close releases it all.
func New(opts Options) (*Dataplane, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	opts.PinPath = ""
	return load(opts, false)
}

// withDefaults fills in the sizes opts leave 0 and checks the rest.
func (opts Options) withDefaults() (Options, error) {
	if opts.TableSize == 0 {
		opts.TableSize = DefaultTableSize
	}
	if opts.MaxBackends == 0 {
		opts.MaxBackends = DefaultMaxBackends
	}
	if opts.ConntrackSize == 0 {
		opts.ConntrackSize = DefaultConntrackSize
	}
	if opts.NATSessions == 0 {
		opts.NATSessions = DefaultNATSessions
	}
	// An IPv6-only node (NodeAddr6 alone) serves IPv6 VIPs with IPv6
	// backends; UpsertService refuses what would need an IPv4 address.
	switch {
	case !opts.NodeAddr.IsValid() && !opts.NodeAddr6.IsValid():
		return opts, errors.New("no node address: give the node's IPv4 address, its IPv6 address, or both")
	case opts.NodeAddr.IsValid() && (!opts.NodeAddr.Is4() || opts.NodeAddr.IsUnspecified()):
		return opts, fmt.Errorf("node address %v: not a usable IPv4 address (an IPv6 one is the node's IPv6 address)", opts.NodeAddr)
	}
	if opts.NodeAddr6.IsValid() && (!opts.NodeAddr6.Is6() || usableAddr(opts.NodeAddr6) != nil) {
		return opts, fmt.Errorf("node IPv6 address %v: not a usable IPv6 address (global or unique local)", opts.NodeAddr6)
	}
	if !opts.FlowHash.Known() {
		return opts, fmt.Errorf("unknown %v", opts.FlowHash)
	}
	return opts, nil
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
	l, mode, err := bpfobj.AttachXDP(d.objs.XlbLbProg, d.iface, d.attachAs, filepath.Join(d.pinPath, linkPin))
	if err != nil {
		return err
	}
	d.link, d.shape.AttachMode = l, mode
	if c := d.nat.carry; c != nil {
		// The sessions the old program opened since Load.
		err := c.carry(d)
		d.nat.carried, d.nat.lost = c.carried, c.lost
		c.close()
		d.nat.carry = nil
		if err != nil {
			return err
		}
	}
	if d.migrate.Migrate {
		for name, m := range d.Maps() {
			if err := bpfobj.ReplacePin(m, filepath.Join(d.pinPath, name)); err != nil {
				return fmt.Errorf("move pins to the migrated maps: %w", err)
			}
		}
		d.migrate.Migrate = false
	}
	if err := bpfobj.WriteLayout(d.pinPath, d.layout, d.shape.FlowHash); err != nil {
		return err
	}
	return writeTableSize(d.pinPath, d.shape.TableSize)
}

// Migrated says why Load created fresh maps instead of adopting the
// pinned ones, "" when it adopted them (or found none).
func (d *Dataplane) Migrated() string { return d.migrate.Reason }

// Maps are the LB program's maps by name: another build of the program
// (a benchmark's, or a variant of it) loaded on them sees the services,
// tables and counters this data plane programs.
func (d *Dataplane) Maps() map[string]*ebpf.Map { return bpfobj.MapsOf(&d.objs.lbMaps) }

// Shape says how the data plane was loaded and attached.
func (d *Dataplane) Shape() Shape {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.shape
}

// load loads the LB objects, with their maps pinned under opts.PinPath
// (adopting the ones already there) when pin is set, and reads back what
// they hold. opts has its defaults.
func load(opts Options, pin bool) (*Dataplane, error) {
	spec, err := lbSpec(opts)
	if err != nil {
		return nil, err
	}
	d := &Dataplane{
		shape: Shape{TableSize: opts.TableSize, MaxBackends: opts.MaxBackends, ConntrackSize: opts.ConntrackSize,
			NATSessions: opts.NATSessions, FlowHash: opts.FlowHash, PingVIPs: opts.PingVIPs},
		pinPath: opts.PinPath,
		layout:  bpfobj.SpecLayout(spec),
		node4:   opts.NodeAddr.IsValid(),
		node6:   opts.NodeAddr6.IsValid(),
	}
	var copts ebpf.CollectionOptions
	if pin {
		if err := checkPinnedTableSize(opts.PinPath, opts.TableSize); err != nil {
			return nil, err
		}
		d.migrate, err = bpfobj.PlanAdoption(opts.PinPath, d.layout, opts.FlowHash)
		if err != nil {
			return nil, err
		}
		if !d.migrate.Migrate {
			// Fresh maps are pinned by Attach, after the swap.
			bpfobj.PinMaps(spec)
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
	o := &d.objs
	d.svcs = newServices(o.SvcIndex, o.Vips, o.VipFilter)
	d.backends = newRegistry(o.Backends, o.BackendStats, o.SvcRetired, o.NhGen, opts.MaxBackends)
	d.policy = newPolicy(o.Deny4, o.Deny6, o.SvcRanges4, o.SvcRanges6, o.SvcSrcDrops,
		spec.Maps["deny4"].InnerMap.MaxEntries, spec.Maps["deny6"].InnerMap.MaxEntries)
	if err := d.svcs.load(); err != nil {
		d.objs.Close()
		return nil, err
	}
	sumsPath := ""
	if pin {
		sumsPath = opts.PinPath
	}
	if d.tables, err = openTables(o.MaglevTables, o.ChainTables, opts.TableSize, sumsPath); err != nil {
		d.objs.Close()
		return nil, err
	}
	if err := d.backends.load(); err != nil {
		d.closeMaps()
		return nil, err
	}
	if pin && d.migrate.Migrate {
		if d.nat.carry, err = openCarry(opts.PinPath, spec); err == nil {
			err = d.nat.carry.carry(d)
		}
		if err != nil {
			d.closeMaps()
			return nil, err
		}
		d.nat.carried, d.nat.lost = d.nat.carry.carried, d.nat.carry.lost
		d.migrate.Reason += d.nat.carry.summary()
	}
	if err := d.initNAT(); err != nil {
		d.closeMaps()
		return nil, err
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
	if !opts.FlowHash.Known() {
		return nil, fmt.Errorf("unknown %v", opts.FlowHash)
	}
	spec.Maps["maglev_tables"].InnerMap.MaxEntries = opts.TableSize
	// One entry per slot, and the generation after them.
	spec.Maps["chain_tables"].InnerMap.MaxEntries = opts.TableSize + 1
	spec.Maps["backends"].MaxEntries = opts.MaxBackends
	spec.Maps["backend_stats"].MaxEntries = opts.MaxBackends
	spec.Maps["conntrack"].MaxEntries = opts.ConntrackSize
	sessions := opts.NATSessions
	if sessions == 0 {
		sessions = DefaultNATSessions
	}
	for name, n := range map[string]uint32{"nat_fwd": sessions, "nat_rev": sessions,
		"nat_fwd_syn": embryonicSessions(sessions), "nat_rev_syn": embryonicSessions(sessions)} {
		spec.Maps[name].MaxEntries = n
	}
	ping := uint32(0)
	if opts.PingVIPs {
		ping = 1
	}
	for name, v := range map[string]any{"node_addr": wire.Addr4(opts.NodeAddr), "node_addr6": wire.AddrOf(opts.NodeAddr6),
		"table_size": opts.TableSize, "flow_hash": uint32(opts.FlowHash), "ping_vips": ping} {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("set %s: %w", name, err)
		}
	}
	return spec, nil
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
	if d.nat.carry != nil {
		d.nat.carry.close()
		d.nat.carry = nil
	}
	return errors.Join(d.objs.Close(), d.tables.close())
}
