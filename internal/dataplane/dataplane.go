package dataplane

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Limits compiled into the LB program (bpf/xlb_consts.h).
const (
	MaxServices = 1024
	MaxBackends = 16384
)

// linkPin is the file name of the pinned XDP link inside a pin directory.
const linkPin = "link"

// Dataplane is an attached, programmable LB data plane. Its methods are
// safe for concurrent use.
type Dataplane struct {
	mu        sync.Mutex
	objs      lbObjects
	link      link.Link
	mode      string
	tableSize uint32
	pinPath   string
}

// Open loads the LB program, adopts the maps pinned under opts.PinPath
// when they exist (so forwarding never stops across agent restarts),
// attaches XDP to opts.Interface, or atomically replaces the program of
// an adopted link, and pins the link.
func Open(opts Options) (*Dataplane, error) {
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
	if err := os.MkdirAll(opts.PinPath, 0o700); err != nil {
		return nil, fmt.Errorf("create pin directory: %w", err)
	}
	if err := prepareInterface(opts.Interface); err != nil {
		return nil, err
	}

	d, err := load(opts, true)
	if err != nil {
		return nil, err
	}
	d.link, d.mode, err = attach(d.objs.XlbLbProg, iface, opts.AttachMode, filepath.Join(opts.PinPath, linkPin))
	if err != nil {
		d.objs.Close()
		return nil, err
	}
	return d, nil
}

// load loads the LB objects, with their maps pinned under opts.PinPath
// (adopting the ones already there) when pin is set.
func load(opts Options, pin bool) (*Dataplane, error) {
	spec, err := lbSpec(opts.NodeAddr, opts.TableSize)
	if err != nil {
		return nil, err
	}
	d := &Dataplane{tableSize: opts.TableSize, pinPath: opts.PinPath}
	var copts ebpf.CollectionOptions
	if pin {
		if err := checkPinnedTableSize(opts.PinPath, opts.TableSize); err != nil {
			return nil, err
		}
		pinMaps(spec)
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
	return d, nil
}

// lbSpec returns the LB collection spec with its load-time parameters set.
func lbSpec(node netip.Addr, tableSize uint32) (*ebpf.CollectionSpec, error) {
	spec, err := loadLb()
	if err != nil {
		return nil, fmt.Errorf("parse embedded LB object: %w", err)
	}
	spec.Maps["maglev_tables"].InnerMap.MaxEntries = tableSize
	if err := spec.Variables["node_addr"].Set(wire32(node)); err != nil {
		return nil, err
	}
	if err := spec.Variables["table_size"].Set(tableSize); err != nil {
		return nil, err
	}
	return spec, nil
}

// checkPinnedTableSize refuses to adopt tables of another size: the
// program's modulus and the inner maps must agree.
func checkPinnedTableSize(pinPath string, want uint32) error {
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

// wire32 is the uint32 whose little-endian bytes are the address in
// network order: how the program sees a __be32 loaded on this machine.
func wire32(a netip.Addr) uint32 {
	b := a.As4()
	return binary.LittleEndian.Uint32(b[:])
}

func addrFromWire(v uint32) netip.Addr {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

func port16(p uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], p)
	return binary.LittleEndian.Uint16(b[:])
}

func portFromWire(v uint16) uint16 {
	var b [2]byte
	binary.LittleEndian.PutUint16(b[:], v)
	return binary.BigEndian.Uint16(b[:])
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
	errs = append(errs, d.objs.Close())
	return errors.Join(errs...)
}

// AttachMode reports how XDP is attached: "native" or "generic".
func (d *Dataplane) AttachMode() string { return d.mode }

// TableSize is the Maglev table size the program was loaded with.
func (d *Dataplane) TableSize() uint32 { return d.tableSize }

// PinPath is the bpffs directory holding this data plane's state.
func (d *Dataplane) PinPath() string { return d.pinPath }

// UpsertBackend writes backend id's address.
func (d *Dataplane) UpsertBackend(id uint32, addr netip.Addr) error {
	if id >= MaxBackends || !addr.Is4() {
		return fmt.Errorf("backend %d %v: id out of range or not IPv4", id, addr)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.objs.Backends.Put(id, lbBackend{Addr: wire32(addr)}); err != nil {
		return fmt.Errorf("write backend %d: %w", id, err)
	}
	return d.invalidateNextHops()
}

// DeleteBackend clears backend id and its counters. Tables must no longer
// reference it.
func (d *Dataplane) DeleteBackend(id uint32) error {
	if id >= MaxBackends {
		return fmt.Errorf("backend %d: id out of range", id)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.objs.Backends.Put(id, lbBackend{}); err != nil {
		return fmt.Errorf("clear backend %d: %w", id, err)
	}
	if err := d.invalidateNextHops(); err != nil {
		return err
	}
	return zeroPerCPU(d.objs.BackendStats, id)
}

// UpsertService installs or replaces a service. A new table is written
// into a fresh inner map and swapped in with one update of the outer
// map, so a packet sees either the old or the new table, never a mix.
func (d *Dataplane) UpsertService(s Service) error {
	if s.ID >= MaxServices {
		return fmt.Errorf("service %d: id out of range", s.ID)
	}
	if uint32(len(s.Table)) != d.tableSize {
		return fmt.Errorf("service %d: table has %d slots, want %d", s.ID, len(s.Table), d.tableSize)
	}
	if s.Encap != EncapIPIP && s.Encap != EncapGUE {
		return fmt.Errorf("service %d: unknown encapsulation %d", s.ID, s.Encap)
	}
	key, err := svcKey(s.Key)
	if err != nil {
		return fmt.Errorf("service %d: %w", s.ID, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()

	inner, err := ebpf.NewMap(&ebpf.MapSpec{
		Name:       "xlb_maglev",
		Type:       ebpf.Array,
		KeySize:    4,
		ValueSize:  4,
		MaxEntries: d.tableSize,
	})
	if err != nil {
		return fmt.Errorf("service %d: create table: %w", s.ID, err)
	}
	defer inner.Close()
	keys := make([]uint32, len(s.Table))
	for i := range keys {
		keys[i] = uint32(i)
	}
	if _, err := inner.BatchUpdate(keys, s.Table, nil); err != nil {
		return fmt.Errorf("service %d: fill table: %w", s.ID, err)
	}
	if err := d.objs.MaglevTables.Put(s.ID, inner); err != nil {
		return fmt.Errorf("service %d: swap table: %w", s.ID, err)
	}
	if err := d.objs.Services.Put(key, lbSvcVal{Id: s.ID, Encap: uint8(s.Encap)}); err != nil {
		return fmt.Errorf("service %d: write service: %w", s.ID, err)
	}
	return d.syncVIPs()
}

// DeleteService removes a service: first its key, so no packet finds it,
// then its table and counters.
func (d *Dataplane) DeleteService(id uint32, key ServiceKey) error {
	k, err := svcKey(key)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.objs.Services.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete service %d: %w", id, err)
	}
	if err := d.objs.MaglevTables.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete table of service %d: %w", id, err)
	}
	if err := zeroPerCPU(d.objs.SvcStats, id); err != nil {
		return err
	}
	return d.syncVIPs()
}

// syncVIPs rebuilds the VIP set (used to drop fragments to VIPs) from the
// services map. Called with d.mu held.
func (d *Dataplane) syncVIPs() error {
	want := map[uint32]uint32{}
	var k lbSvcKey
	var v lbSvcVal
	it := d.objs.Services.Iterate()
	for it.Next(&k, &v) {
		want[k.Vip]++
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("list services: %w", err)
	}
	var stale []uint32
	var vip, n uint32
	vit := d.objs.Vips.Iterate()
	for vit.Next(&vip, &n) {
		if _, ok := want[vip]; !ok {
			stale = append(stale, vip)
		}
	}
	for vip, n := range want {
		if err := d.objs.Vips.Put(vip, n); err != nil {
			return fmt.Errorf("write VIP set: %w", err)
		}
	}
	for _, vip := range stale {
		if err := d.objs.Vips.Delete(vip); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("write VIP set: %w", err)
		}
	}
	return nil
}

func svcKey(k ServiceKey) (lbSvcKey, error) {
	if !k.VIP.Is4() {
		return lbSvcKey{}, fmt.Errorf("VIP %v is not IPv4", k.VIP)
	}
	if k.Proto != ProtoTCP && k.Proto != ProtoUDP {
		return lbSvcKey{}, fmt.Errorf("protocol %d is not TCP or UDP", k.Proto)
	}
	return lbSvcKey{Vip: wire32(k.VIP), Port: port16(k.Port), Proto: k.Proto}, nil
}

// Services lists installed services (without tables), for adoption.
func (d *Dataplane) Services() ([]Service, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []Service
	var k lbSvcKey
	var v lbSvcVal
	it := d.objs.Services.Iterate()
	for it.Next(&k, &v) {
		out = append(out, Service{
			ID:    v.Id,
			Key:   ServiceKey{VIP: addrFromWire(k.Vip), Port: portFromWire(k.Port), Proto: k.Proto},
			Encap: Encap(v.Encap),
		})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list services: %w", err)
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
	inner, err := ebpf.NewMapFromID(innerID)
	if err != nil {
		return nil, fmt.Errorf("table of service %d: %w", id, err)
	}
	defer inner.Close()
	keys := make([]uint32, d.tableSize)
	vals := make([]uint32, d.tableSize)
	var cursor ebpf.MapBatchCursor
	n, err := inner.BatchLookup(&cursor, keys, vals, nil)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil, fmt.Errorf("read table of service %d: %w", id, err)
	}
	table := make([]uint32, d.tableSize)
	for i := 0; i < n; i++ {
		table[keys[i]] = vals[i]
	}
	return table, nil
}

// Backends lists installed backends by id, for adoption.
func (d *Dataplane) Backends() (map[uint32]netip.Addr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[uint32]netip.Addr{}
	var k uint32
	var v lbBackend
	it := d.objs.Backends.Iterate()
	for it.Next(&k, &v) {
		if v.Addr != 0 {
			out[k] = addrFromWire(v.Addr)
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list backends: %w", err)
	}
	return out, nil
}

// ServiceCounters sums service id's per-CPU counters.
func (d *Dataplane) ServiceCounters(id uint32) (Counters, error) {
	return sumPerCPU(d.objs.SvcStats, id)
}

// BackendCounters sums backend id's per-CPU counters.
func (d *Dataplane) BackendCounters(id uint32) (Counters, error) {
	return sumPerCPU(d.objs.BackendStats, id)
}

// ReasonCounters returns the pass/drop counters by reason name.
func (d *Dataplane) ReasonCounters() (map[string]uint64, error) {
	out := make(map[string]uint64, len(ReasonNames))
	for i, name := range ReasonNames {
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
	var per []lbXlbCounter
	if err := m.Lookup(id, &per); err != nil {
		return Counters{}, fmt.Errorf("read counters %d: %w", id, err)
	}
	var c Counters
	for _, p := range per {
		c.Packets += p.Packets
		c.Bytes += p.Bytes
	}
	return c, nil
}

func zeroPerCPU(m *ebpf.Map, id uint32) error {
	n, err := ebpf.PossibleCPU()
	if err != nil {
		return err
	}
	if err := m.Put(id, make([]lbXlbCounter, n)); err != nil {
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
	return nil
}

// unpinned are maps that belong to one program version: its load-time
// parameters and its next-hop cache, which starts empty.
var unpinned = map[string]bool{"nh_cache": true, "nh_gen": true}

// pinMaps marks the collection's state maps for pinning by name.
func pinMaps(spec *ebpf.CollectionSpec) {
	for name, m := range spec.Maps {
		if !strings.HasPrefix(name, ".") && !unpinned[name] {
			m.Pinning = ebpf.PinByName
		}
	}
}
