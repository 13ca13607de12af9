// Package agent is xlb's reconciler: it turns a configuration (the desired
// state) into Maglev tables and programs the data plane with the smallest
// set of changes, keeping IDs and counters of everything that did not
// change, also across agent restarts. It owns the running configuration and
// reloads it on change.
package agent

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/dataplane"
	"github.com/xlbproject/xlb/internal/maglev"
)

// Dataplane is what the agent needs from the data plane; *dataplane.Dataplane
// implements it. Tests use a fake.
type Dataplane interface {
	UpsertBackend(id uint32, addr netip.Addr) error
	DeleteBackend(id uint32) error
	UpsertService(s dataplane.Service) error
	DeleteService(id uint32, key dataplane.ServiceKey) error
	Services() ([]dataplane.Service, error)
	Backends() (map[uint32]netip.Addr, error)
	ServiceCounters(id uint32) (dataplane.Counters, error)
	BackendCounters(id uint32) (dataplane.Counters, error)
	ReasonCounters() (map[string]uint64, error)
	AttachMode() string
	TableSize() uint32
}

// tableReader is implemented by data planes that can read a table back,
// as *dataplane.Dataplane does. Adoption then knows which backend IDs each
// service's table names, so services that share a backend address keep
// their own IDs and counters across a restart.
type tableReader interface {
	Table(id uint32) ([]uint32, error)
}

// The real data plane provides everything the agent uses.
var (
	_ Dataplane    = (*dataplane.Dataplane)(nil)
	_ tableReader  = (*dataplane.Dataplane)(nil)
	_ backendLimit = (*dataplane.Dataplane)(nil)
)

// noBackend fills the table of a service that has no backend with a weight
// above 0. It lies outside every backend ID, so the data plane's lookup of
// it misses and the packet is dropped (and counted) rather than sent to a
// drained backend.
const noBackend = math.MaxUint32

// Reconciler programs a data plane to match a configuration. It is safe
// for concurrent use; Apply calls are serialised.
type Reconciler struct {
	dp  Dataplane
	log *slog.Logger

	mu         sync.Mutex
	services   map[dataplane.ServiceKey]*service
	serviceIDs *idSet
	backendIDs *idSet
	// orphans are backends in the data plane that no service owns: adopted
	// at start and not yet claimed, or released while a table that might
	// still name them was not yet rewritten. They are deleted once that is
	// known to be safe.
	orphans map[uint32]netip.Addr
}

// service is one service as installed in the data plane.
type service struct {
	id  uint32
	key dataplane.ServiceKey
	// installed: the data plane has a table for this service.
	installed bool
	// applied is the signature (see signature) of the installed table; ""
	// for an adopted service, whose table is unknown until rewritten.
	applied string
	// backends are written to the data plane and belong to this service:
	// one ID per (service, backend) pair, so counters are per pair.
	backends map[netip.AddrPort]uint32
	// named are the backend IDs an adopted table names, if it could be
	// read: the first candidates when the service claims adopted backends.
	named map[uint32]bool
}

// NewReconciler adopts what the data plane already holds, so that an agent
// restarted on pinned maps keeps the IDs, and thus the counters, of
// services and backends that are still configured.
func NewReconciler(dp Dataplane, log *slog.Logger) (*Reconciler, error) {
	maxBackends := uint32(config.DefaultMaxBackends)
	if l, ok := dp.(backendLimit); ok {
		maxBackends = l.MaxBackends()
	}
	return newReconciler(dp, log, config.MaxServices, maxBackends)
}

// backendLimit is implemented by data planes whose backend maps are sized
// at load time, as *dataplane.Dataplane's are.
type backendLimit interface {
	MaxBackends() uint32
}

func newReconciler(dp Dataplane, log *slog.Logger, maxServices, maxBackends uint32) (*Reconciler, error) {
	r := &Reconciler{
		dp:         dp,
		log:        log,
		services:   make(map[dataplane.ServiceKey]*service),
		serviceIDs: newIDSet(maxServices),
		backendIDs: newIDSet(maxBackends),
		orphans:    make(map[uint32]netip.Addr),
	}
	svcs, err := dp.Services()
	if err != nil {
		return nil, fmt.Errorf("list the data plane's services: %w", err)
	}
	bes, err := dp.Backends()
	if err != nil {
		return nil, fmt.Errorf("list the data plane's backends: %w", err)
	}
	for _, s := range svcs {
		if !r.serviceIDs.take(s.ID) {
			// Still tracked (and so deleted or rewritten) but its ID is
			// never handed out again.
			log.Warn("adopted service has an ID beyond the limit", "id", s.ID, "limit", maxServices,
				"fix", "nothing to do: the service is rewritten or deleted as usual and its ID is not reused; the pinned state comes from an xlb with a larger limit")
		}
		st := &service{id: s.ID, key: s.Key, installed: true, backends: make(map[netip.AddrPort]uint32)}
		if tr, ok := dp.(tableReader); ok {
			st.named = namedIDs(tr, s.ID, log)
		}
		r.services[s.Key] = st
	}
	for id, addr := range bes {
		if !r.backendIDs.take(id) {
			log.Warn("adopted backend has an ID beyond the limit", "id", id, "limit", maxBackends,
				"fix", "nothing to do: the backend is deleted once no table names it; if this repeats, set dataplane.maxBackends above the ID and restart the agent")
		}
		r.orphans[id] = addr
	}
	if len(svcs) > 0 || len(bes) > 0 {
		log.Info("adopted the pinned data plane state", "services", len(svcs), "backends", len(bes))
	}
	return r, nil
}

// Apply makes the data plane match cfg, changing only what differs. It
// writes new backends before the tables that name them and deletes old
// backends only after no table names them any more; each table is replaced
// by one atomic UpsertService. A failing service does not stop the others;
// the errors are joined, and a later Apply retries what failed.
func (r *Reconciler) Apply(cfg *config.Config) error {
	r.mu.Lock()
	defer r.mu.Unlock()

	m := r.dp.TableSize()
	var errs []error
	want := make(map[dataplane.ServiceKey]bool, len(cfg.Services))
	type desired struct {
		svc config.Service
		key dataplane.ServiceKey
	}
	var todo []desired
	for _, s := range cfg.Services {
		key, err := serviceKey(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("service %q: %w", s.Name, err))
			continue
		}
		if want[key] {
			errs = append(errs, fmt.Errorf("service %q: %s is already used by another service", s.Name, s.Key()))
			continue
		}
		want[key] = true
		todo = append(todo, desired{s, key})
	}

	// Removed services first: it frees their IDs for the services added
	// in the same round.
	for _, st := range r.sortedServices() {
		if want[st.key] {
			continue
		}
		if err := r.removeService(st); err != nil {
			errs = append(errs, fmt.Errorf("remove service %s: %w", formatKey(st.key), err))
		}
	}
	for _, d := range todo {
		if err := r.applyService(d.svc, d.key, m); err != nil {
			errs = append(errs, fmt.Errorf("service %q (%s): %w", d.svc.Name, d.svc.Key(), err))
		}
	}
	if err := r.deleteOrphans(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// applyService installs or updates one service. It does nothing when the
// installed table was built from the same forwarding mode and backends.
func (r *Reconciler) applyService(s config.Service, key dataplane.ServiceKey, m uint32) error {
	encap, err := encapOf(s.Forwarding)
	if err != nil {
		return err
	}
	keep := make(map[netip.AddrPort]bool, len(s.Backends))
	for _, b := range s.Backends {
		ap := netip.AddrPortFrom(b.Address, b.Port)
		if keep[ap] {
			return fmt.Errorf("backend %s is listed twice", ap)
		}
		keep[ap] = true
	}
	sig := signature(encap, s.Backends)
	st := r.services[key]
	if st != nil && st.installed && st.applied == sig {
		return nil
	}
	if st == nil {
		id, ok := r.serviceIDs.alloc()
		if !ok {
			return fmt.Errorf("no free service ID: all %d are in use; remove a service", r.serviceIDs.limit)
		}
		st = &service{id: id, key: key, backends: make(map[netip.AddrPort]uint32)}
		r.services[key] = st
	}

	// Backends first: the new table may name only backends that exist.
	members, ids, err := r.members(st, s.Backends)
	if errors.Is(err, errNoBackendID) && leaving(st, keep) {
		// At dataplane.maxBackends the new backends need the IDs of
		// the leaving ones, which the installed table still names.
		// Install a table of the backends that have IDs first, free
		// the leaving ones, and try again. The staying backends' flows
		// see two table changes instead of one.
		members, ids, _ = r.members(st, slices.DeleteFunc(slices.Clone(s.Backends), func(b config.Backend) bool {
			_, ok := st.backends[netip.AddrPortFrom(b.Address, b.Port)]
			return !ok
		}))
		r.log.Warn("the data plane is full (dataplane.maxBackends): replacing backends in two steps",
			"service", s.Name, "limit", r.backendIDs.limit,
			"fix", "raise dataplane.maxBackends and restart the agent (forwarding continues across restarts) to replace backends at once")
		if err := r.install(st, key, encap, members, ids, m); err != nil {
			return err
		}
		if err := r.releaseLeaving(st, keep); err != nil {
			return err
		}
		members, ids, err = r.members(st, s.Backends)
	}
	if err != nil {
		return err
	}
	if err := r.install(st, key, encap, members, ids, m); err != nil {
		return err
	}
	st.applied = sig
	// Only now that the new table is in place may the old backends go.
	return r.releaseLeaving(st, keep)
}

// members returns the Maglev members of service st for backends and their
// data-plane IDs, giving new backends an ID.
func (r *Reconciler) members(st *service, backends []config.Backend) ([]maglev.Backend, []uint32, error) {
	members := make([]maglev.Backend, 0, len(backends))
	ids := make([]uint32, 0, len(backends))
	for _, b := range backends {
		ap := netip.AddrPortFrom(b.Address, b.Port)
		id, err := r.backendID(st, ap)
		if err != nil {
			return nil, nil, fmt.Errorf("backend %s: %w", ap, err)
		}
		// Weight 0 still gets an ID and stays in the backend map (flows
		// already counted there keep their counters) but no table slots.
		members = append(members, maglev.Backend{Key: ap.String(), Weight: b.Weight})
		ids = append(ids, id)
	}
	return members, ids, nil
}

// install writes service st's entry and a table built from members.
func (r *Reconciler) install(st *service, key dataplane.ServiceKey, encap dataplane.Encap, members []maglev.Backend, ids []uint32, m uint32) error {
	table, err := buildTable(members, ids, m)
	if err != nil {
		return err
	}
	if err := r.dp.UpsertService(dataplane.Service{ID: st.id, Key: key, Encap: encap, Table: table}); err != nil {
		return fmt.Errorf("install table (service ID %d): %w", st.id, err)
	}
	// Whatever st adopted is overwritten; st.applied says from what.
	st.installed, st.applied, st.named = true, "partial", nil
	return nil
}

// leaving reports whether service st has backends that keep lacks.
func leaving(st *service, keep map[netip.AddrPort]bool) bool {
	for ap := range st.backends {
		if !keep[ap] {
			return true
		}
	}
	return false
}

// releaseLeaving releases the backends of st that keep lacks; the
// installed table must not name them any more.
func (r *Reconciler) releaseLeaving(st *service, keep map[netip.AddrPort]bool) error {
	var errs []error
	for _, ap := range sortedAddrPorts(st.backends) {
		if keep[ap] {
			continue
		}
		id := st.backends[ap]
		delete(st.backends, ap)
		if err := r.release(id, ap.Addr()); err != nil {
			errs = append(errs, fmt.Errorf("backend %s: %w", ap, err))
		}
	}
	return errors.Join(errs...)
}

// removeService deletes a service from the data plane, then its backends.
func (r *Reconciler) removeService(st *service) error {
	if st.installed {
		if err := r.dp.DeleteService(st.id, st.key); err != nil {
			return fmt.Errorf("delete service ID %d: %w", st.id, err)
		}
		st.installed = false
	}
	var errs []error
	for _, ap := range sortedAddrPorts(st.backends) {
		id := st.backends[ap]
		delete(st.backends, ap)
		if err := r.release(id, ap.Addr()); err != nil {
			errs = append(errs, fmt.Errorf("backend %s: %w", ap, err))
		}
	}
	r.serviceIDs.free(st.id)
	delete(r.services, st.key)
	return errors.Join(errs...)
}

// namedIDs reads the backend IDs that service id's table names; nil if the
// table cannot be read (adoption then goes by address alone).
func namedIDs(tr tableReader, id uint32, log *slog.Logger) map[uint32]bool {
	table, err := tr.Table(id)
	if err != nil {
		log.Debug("cannot read an adopted table; matching its backends by address", "service", id, "error", err)
		return nil
	}
	named := make(map[uint32]bool)
	for _, b := range table {
		if b != noBackend {
			named[b] = true
		}
	}
	return named
}

// errNoBackendID: every backend ID of the data plane is in use.
var errNoBackendID = errors.New("no free backend ID")

// backendID returns the ID of backend ap of service st, writing a new
// backend to the data plane if st has none for ap yet. An adopted backend
// with the same address is reused, which keeps its counters.
func (r *Reconciler) backendID(st *service, ap netip.AddrPort) (uint32, error) {
	if id, ok := st.backends[ap]; ok {
		return id, nil
	}
	if id, ok := r.claimOrphan(st, ap.Addr()); ok {
		st.backends[ap] = id
		return id, nil
	}
	id, ok := r.backendIDs.alloc()
	if !ok {
		return 0, fmt.Errorf("%w: all %d are in use (dataplane.maxBackends); remove backends or services, or raise the limit", errNoBackendID, r.backendIDs.limit)
	}
	if err := r.dp.UpsertBackend(id, ap.Addr()); err != nil {
		r.backendIDs.free(id)
		return 0, fmt.Errorf("write backend ID %d: %w", id, err)
	}
	st.backends[ap] = id
	return id, nil
}

// claimOrphan takes an orphan with address addr for service st: first one
// that st's adopted table names, then one that no other adopted table
// names, then any; the lowest ID within each rank. The data plane stores
// no owner per backend, so without readable tables an ID shared by
// address may move to another service of that address (its counters with
// it); forwarding is unaffected because the address is equal.
func (r *Reconciler) claimOrphan(st *service, addr netip.Addr) (uint32, bool) {
	rank := func(id uint32) int {
		if st.named[id] {
			return 0
		}
		for _, o := range r.services {
			if o != st && o.named[id] {
				return 2
			}
		}
		return 1
	}
	best, bestRank, found := uint32(0), 0, false
	for id, a := range r.orphans {
		if a != addr {
			continue
		}
		if rk := rank(id); !found || rk < bestRank || (rk == bestRank && id < best) {
			best, bestRank, found = id, rk, true
		}
	}
	if found {
		delete(r.orphans, best)
	}
	return best, found
}

// release deletes a backend no longer owned by any service, or defers that
// while an adopted table, whose content is unknown, might still name it.
func (r *Reconciler) release(id uint32, addr netip.Addr) error {
	if r.adoptedPending() {
		r.orphans[id] = addr
		return nil
	}
	if err := r.dp.DeleteBackend(id); err != nil {
		r.orphans[id] = addr // retried by the next Apply
		return fmt.Errorf("delete backend ID %d: %w", id, err)
	}
	r.backendIDs.free(id)
	return nil
}

// deleteOrphans deletes unowned backends once every adopted table has been
// rewritten or deleted, i.e. once no table can name them.
func (r *Reconciler) deleteOrphans() error {
	if len(r.orphans) == 0 || r.adoptedPending() {
		return nil
	}
	var errs []error
	for _, id := range slices.Sorted(maps.Keys(r.orphans)) {
		if err := r.dp.DeleteBackend(id); err != nil {
			errs = append(errs, fmt.Errorf("delete unused backend ID %d (%s): %w", id, r.orphans[id], err))
			continue
		}
		delete(r.orphans, id)
		r.backendIDs.free(id)
	}
	return errors.Join(errs...)
}

// adoptedPending reports whether an adopted table is still installed as it
// was found.
func (r *Reconciler) adoptedPending() bool {
	for _, st := range r.services {
		if st.installed && st.applied == "" {
			return true
		}
	}
	return false
}

// ids returns the data-plane IDs of the installed service with key k and of
// its backends (a copy).
func (r *Reconciler) ids(k dataplane.ServiceKey) (uint32, map[netip.AddrPort]uint32, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.services[k]
	if st == nil || !st.installed {
		return 0, nil, false
	}
	return st.id, maps.Clone(st.backends), true
}

func (r *Reconciler) sortedServices() []*service {
	out := slices.Collect(maps.Values(r.services))
	slices.SortFunc(out, func(a, b *service) int { return cmp.Compare(a.id, b.id) })
	return out
}

// buildTable maps the Maglev table over members to backend IDs.
func buildTable(members []maglev.Backend, ids []uint32, m uint32) ([]uint32, error) {
	table := make([]uint32, m)
	active := slices.ContainsFunc(members, func(b maglev.Backend) bool { return b.Weight > 0 })
	if !active {
		for i := range table {
			table[i] = noBackend
		}
		return table, nil
	}
	slots, err := maglev.Build(members, m)
	if err != nil {
		return nil, fmt.Errorf("build Maglev table: %w", err)
	}
	for i, idx := range slots {
		table[i] = ids[idx]
	}
	return table, nil
}

// signature identifies everything a service's table and entry are built
// from, so equal signatures mean an identical installed service. It is
// never "".
func signature(encap dataplane.Encap, backends []config.Backend) string {
	parts := make([]string, 0, len(backends))
	for _, b := range backends {
		parts = append(parts, netip.AddrPortFrom(b.Address, b.Port).String()+"/"+strconv.FormatUint(uint64(b.Weight), 10))
	}
	slices.Sort(parts)
	return "encap=" + strconv.Itoa(int(encap)) + " " + strings.Join(parts, ",")
}

func serviceKey(s config.Service) (dataplane.ServiceKey, error) {
	var proto uint8
	switch s.Protocol {
	case config.TCP:
		proto = dataplane.ProtoTCP
	case config.UDP:
		proto = dataplane.ProtoUDP
	default:
		return dataplane.ServiceKey{}, fmt.Errorf("unknown protocol %q (want tcp or udp)", s.Protocol)
	}
	return dataplane.ServiceKey{VIP: s.VIP, Port: s.Port, Proto: proto}, nil
}

func encapOf(f config.Forwarding) (dataplane.Encap, error) {
	switch f {
	case config.DSRIPIP:
		return dataplane.EncapIPIP, nil
	case config.DSRGUE:
		return dataplane.EncapGUE, nil
	}
	return 0, fmt.Errorf("unknown forwarding %q (want %s or %s)", f, config.DSRIPIP, config.DSRGUE)
}

// formatKey prints a data-plane key like config.Key does: VIP:port/proto.
func formatKey(k dataplane.ServiceKey) string {
	proto := strconv.Itoa(int(k.Proto))
	switch k.Proto {
	case dataplane.ProtoTCP:
		proto = string(config.TCP)
	case dataplane.ProtoUDP:
		proto = string(config.UDP)
	}
	return netip.AddrPortFrom(k.VIP, k.Port).String() + "/" + proto
}

func sortedAddrPorts(m map[netip.AddrPort]uint32) []netip.AddrPort {
	return slices.SortedFunc(maps.Keys(m), func(a, b netip.AddrPort) int { return a.Compare(b) })
}
