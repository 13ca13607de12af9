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
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xlbproject/xlb/internal/chain"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/dataplane/lb"
	"github.com/xlbproject/xlb/internal/maglev"
)

// Dataplane is what the agent needs from the data plane; *lb.Dataplane
// implements it. Tests use a fake.
type Dataplane interface {
	// UpsertBackend writes backend id with its address and port; NAT
	// services rewrite to the port, DSR services ignore it.
	UpsertBackend(id uint32, ap netip.AddrPort) error
	DeleteBackend(id uint32) error
	UpsertService(s lb.Service) error
	// KeepService installs s with the tables it has, if their records
	// say they were built from s.Origin, without the agent building them
	// again; else it changes nothing and returns lb.ErrNotKept.
	KeepService(s lb.Service, names []uint32) error
	DeleteService(id uint32, key lb.ServiceKey) error
	// SetSourceRanges changes the source ranges of installed service id
	// alone (UpsertService and KeepService take them with the rest).
	SetSourceRanges(id uint32, key lb.ServiceKey, ranges []netip.Prefix) error
	// SetDenyList makes prefixes the node's deny list.
	SetDenyList(prefixes []netip.Prefix) error
	// Installed is what the data plane holds, for adoption: with which
	// service each backend counts for, services that share a backend
	// address keep their own IDs and counters across a restart.
	Installed() (lb.Installed, error)
	ServiceCounters(id uint32) (lb.Counters, error)
	BackendCounters(id uint32) (lb.Counters, error)
	ReasonCounters() (map[string]uint64, error)
	// ConntrackEntries counts the flows in the stateful services' table.
	ConntrackEntries() (int, error)
	// SourceRangeDrops counts what service id dropped for sources
	// outside its ranges.
	SourceRangeDrops(id uint32) (lb.Counters, error)
	Shape() lb.Shape
	// SetNAT gives the NAT services their node-wide settings; hot.
	SetNAT(c lb.NATConfig) error
	NATCounters() (lb.NATCounters, error)
	// Sessions lists up to max NAT sessions of one service.
	Sessions(vip netip.Addr, port uint16, proto uint8, max int) ([]lb.Session, error)
	// EndBackendSessions ends the NAT sessions of backend id at once.
	EndBackendSessions(id uint32) (int, error)
	// ExpireSessions reclaims the NAT sessions whose timeout passed.
	ExpireSessions() (int, error)
}

var _ Dataplane = (*lb.Dataplane)(nil)

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
	// workers is how many tables one Apply writes at a time.
	workers int

	mu         sync.Mutex
	services   map[lb.ServiceKey]*service
	serviceIDs *idSet
	backendIDs *idSet
	// orphans are backends in the data plane that no service owns: adopted
	// at start and not yet claimed, or released while a table that might
	// still name them was not yet rewritten. They are deleted once that is
	// known to be safe.
	orphans *orphanSet
	// namedBy is the adopted service each adopted backend counted for
	// (see service.named).
	namedBy map[uint32]*service
	// now is the clock that dates the backend-set changes the agent
	// records itself (service.history).
	now func() time.Time
	// tables keeps the Maglev tables of daisy-chained services' recent
	// backend sets, which their hints need again (see chainTablesBytes).
	tables *chain.Tables
	// built and kept count the services whose tables the Reconciler
	// built and upserted, and those whose tables it kept without
	// building them (KeepService), since it started.
	built, kept atomic.Uint64
	// deny is the deny list installed; denyKnown says it is (false until
	// the first apply: an agent restarted on pinned maps does not know
	// what an earlier one installed).
	deny      []netip.Prefix
	denyKnown bool
	// nodeAddr is the node's address: the NAT source when nat.address
	// is not set. nat is the NAT configuration installed, once
	// natKnown; natWarned the last failure to install it that was
	// logged rather than returned (no service needed it).
	nodeAddr  netip.Addr
	nat       lb.NATConfig
	natKnown  bool
	natWarned string
}

// TableCounts returns how many services' tables the Reconciler built and
// upserted, and how many it kept as they were without building them, since
// it started: after a restart on an unchanged configuration, none built.
func (r *Reconciler) TableCounts() (built, kept uint64) {
	return r.built.Load(), r.kept.Load()
}

// chainTablesBytes is how much memory the Maglev tables kept for
// daisy-chained services may take: 64 tables of the default size, enough
// for the whole history of a few services. A change to a service then
// builds one table, the new set's, instead of one per set in its history
// (docs/decisions/0002-tables.md).
const chainTablesBytes = 16 << 20

// service is one service as installed in the data plane.
type service struct {
	id  uint32
	key lb.ServiceKey
	// installed: the data plane has a table for this service.
	installed bool
	// applied is the signature (see signature) of the installed table; ""
	// for an adopted service, whose table is unknown until written again
	// (which keeps it if it holds exactly the new table: UpsertService).
	applied string
	// input is what the installed table was built from, in the order the
	// configuration listed it, for a service without a history (nil
	// otherwise, and for an adopted service): a configuration that lists
	// the same again needs no signature (plan). Whatever sets applied
	// sets input with it: a non-nil input's signature is applied.
	input *tableInput
	// backends are written to the data plane and belong to this service:
	// one ID per (service, backend) pair, so counters are per pair.
	backends map[netip.AddrPort]uint32
	// named are the backend IDs that counted for an adopted service, if
	// the data plane knows: the first candidates when the service claims
	// adopted backends.
	named map[uint32]bool
	// members are the Maglev members of the installed table, and
	// membersSig their signature: a daisy-chained service whose
	// configuration brings no history records them in history when they
	// change.
	members    []maglev.Backend
	membersSig string
	// history are the earlier member sets of a daisy-chained service that
	// this agent saw, oldest first, at most config.MaxHistory.
	history []chain.Past
	// ranges are the installed source ranges, once rangesKnown (an
	// adopted service's are not known until written).
	ranges      []netip.Prefix
	rangesKnown bool
}

// adopted reports whether st is a service this Reconciler adopted from
// the data plane and has not written yet.
func (st *service) adopted() bool {
	return st.installed && st.applied == ""
}

// NewReconciler adopts what the data plane already holds, so that an agent
// restarted on pinned maps keeps the IDs, and thus the counters, of
// services and backends that are still configured.
func NewReconciler(dp Dataplane, log *slog.Logger) (*Reconciler, error) {
	return newReconciler(dp, log, config.MaxServices, dp.Shape().MaxBackends)
}

func newReconciler(dp Dataplane, log *slog.Logger, maxServices, maxBackends uint32) (*Reconciler, error) {
	r := &Reconciler{
		dp:         dp,
		log:        log,
		workers:    defaultWorkers(),
		services:   make(map[lb.ServiceKey]*service),
		serviceIDs: newIDSet(maxServices),
		backendIDs: newIDSet(maxBackends),
		orphans:    newOrphanSet(),
		namedBy:    make(map[uint32]*service),
		now:        time.Now,
	}
	if m := dp.Shape().TableSize; m > 0 {
		r.tables = chain.NewTables(chainTablesBytes / (4 * int(m)))
	}
	in, err := dp.Installed()
	if err != nil {
		return nil, fmt.Errorf("list what the data plane holds: %w", err)
	}
	svcs, bes := in.Services, in.Backends
	for _, s := range svcs {
		if !r.serviceIDs.take(s.ID) {
			// Still tracked (and so deleted or rewritten) but its ID is
			// never handed out again.
			log.Warn("adopted service has an ID beyond the limit", "id", s.ID, "limit", maxServices,
				"fix", "nothing to do: the service is rewritten or deleted as usual and its ID is not reused; the pinned state comes from an xlb with a larger limit")
		}
		r.services[s.Key] = &service{id: s.ID, key: s.Key, installed: true, backends: make(map[netip.AddrPort]uint32)}
	}
	r.nameOwners(in.Owners)
	for id, addr := range bes {
		if !r.backendIDs.take(id) {
			log.Warn("adopted backend has an ID beyond the limit", "id", id, "limit", maxBackends,
				"fix", "nothing to do: the backend is deleted once no table names it; if this repeats, set dataplane.maxBackends above the ID and restart the agent")
		}
		r.orphans.add(id, addr)
	}
	if len(svcs) > 0 || len(bes) > 0 {
		log.Info("adopted the pinned data plane state", "services", len(svcs), "backends", len(bes))
	}
	return r, nil
}

// Apply makes the data plane match cfg, changing only what differs. It
// writes new backends before the tables that name them and deletes old
// backends only after no table names them any more; each table is replaced
// by one atomic UpsertService, several services' at a time (r.workers).
// A failing service does not stop the others; the errors are joined, and
// a later Apply retries what failed.
func (r *Reconciler) Apply(cfg *config.Config) error {
	r.mu.Lock()
	defer r.mu.Unlock()

	m := r.dp.Shape().TableSize
	var errs []error
	// The deny list first: it protects every service, the ones added
	// below included.
	if !r.denyKnown || !slices.Equal(r.deny, cfg.Policy.Deny) {
		if err := r.dp.SetDenyList(cfg.Policy.Deny); err != nil {
			errs = append(errs, fmt.Errorf("policy.deny: %w", err))
		} else {
			r.deny, r.denyKnown = slices.Clone(cfg.Policy.Deny), true
		}
	}
	// The NAT settings next: the NAT services added below use them.
	if err := r.setNAT(cfg); err != nil {
		errs = append(errs, err)
	}
	want := make(map[lb.ServiceKey]bool, len(cfg.Services))
	type desired struct {
		svc config.Service
		key lb.ServiceKey
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
	var gone []*service
	for _, st := range r.sortedServices() {
		if !want[st.key] {
			gone = append(gone, st)
		}
	}
	errs = append(errs, r.removeServices(gone)...)

	// Changed services are planned in configuration order (IDs, new
	// backends written) and their tables written in waves, several at a
	// time. A service that finds no free backend ID ends the wave: the
	// services before it free the IDs of their leaving backends once
	// their new tables are in place, as they would one by one.
	var wave []*change
	// Services whose table stays may still have new source ranges.
	var ranges []desired
	for _, d := range todo {
		c, err := r.plan(d.svc, d.key)
		if errors.Is(err, errNoBackendID) && len(wave) > 0 {
			errs = append(errs, r.install(wave, m)...)
			wave = nil
			c, err = r.plan(d.svc, d.key)
		}
		if errors.Is(err, errNoBackendID) && leaving(c.st, c.keep) {
			err = r.replaceInTwoSteps(c, m)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("service %q (%s): %w", d.svc.Name, d.svc.Key(), err))
			continue
		}
		if c != nil {
			wave = append(wave, c)
		} else {
			ranges = append(ranges, d)
		}
	}
	errs = append(errs, r.install(wave, m)...)
	for _, d := range ranges {
		if err := r.setRanges(r.services[d.key], d.svc.SourceRanges); err != nil {
			errs = append(errs, fmt.Errorf("service %q (%s): %w", d.svc.Name, d.svc.Key(), err))
		}
	}
	if err := r.deleteOrphans(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// setNAT installs cfg's NAT settings, unless they are installed
// already. A failure fails the apply only if a service needs them (one
// with forwarding nat or dnat); otherwise it is logged, once per
// failure, and retried by the next apply.
func (r *Reconciler) setNAT(cfg *config.Config) error {
	want := natConfigOf(cfg.NAT, r.nodeAddr)
	if r.natKnown && r.nat == want {
		return nil
	}
	err := r.dp.SetNAT(want)
	switch {
	case err == nil:
		r.nat, r.natKnown, r.natWarned = want, true, ""
		return nil
	case UsesNAT(cfg):
		return fmt.Errorf("nat: %w", err)
	case err.Error() != r.natWarned:
		r.natWarned = err.Error()
		r.log.Warn("the data plane did not take the nat settings; no service uses them yet", "error", err,
			"fix", "nothing to do until a service has forwarding nat or dnat; the agent tries again at every apply, and such a service's apply fails until the settings go in")
	}
	return nil
}

// natConfigOf is the data plane's form of the nat section; the node
// address is the source when nat.address is not set.
func natConfigOf(n config.NATConfig, nodeAddr netip.Addr) lb.NATConfig {
	addr := n.Address
	if !addr.IsValid() {
		addr = nodeAddr
	}
	t := n.Timeouts
	return lb.NATConfig{Address: addr, PortMin: n.Ports.Min, PortMax: n.Ports.Max,
		TCPSyn: t.TCPSyn, TCPEstablished: t.TCPEstablished, TCPClosing: t.TCPClosing, UDP: t.UDP, TCPTimeWait: t.TCPTimeWait}
}

// UsesNAT reports whether a service of cfg has forwarding nat or dnat.
func UsesNAT(cfg *config.Config) bool {
	return slices.ContainsFunc(cfg.Services, func(s config.Service) bool { return s.Forwarding.Translates() })
}

// setRanges makes ranges the source ranges of installed service st,
// unless they are so already.
func (r *Reconciler) setRanges(st *service, ranges []netip.Prefix) error {
	if st == nil || !st.installed || st.rangesKnown && slices.Equal(st.ranges, ranges) {
		return nil
	}
	if err := r.dp.SetSourceRanges(st.id, st.key, ranges); err != nil {
		return fmt.Errorf("source ranges: %w", err)
	}
	st.ranges, st.rangesKnown = slices.Clone(ranges), true
	return nil
}

// change is a service's new table, planned: its backends have IDs and
// are written to the data plane.
type change struct {
	st       *service
	name     string // the service's, for the log
	what     string // the service, for errors
	encap    lb.Encap
	stateful bool
	clientIP bool
	ranges   []netip.Prefix // source ranges
	// past is the history of a daisy-chained service: its
	// configuration's, or else what the agent saw (service.history).
	past     []chain.Past
	backends []config.Backend
	keep     map[netip.AddrPort]bool // the backends' keys
	sig      string
	input    *tableInput
	members  []maglev.Backend
	ids      []uint32
	err      error // of writing the table
}

// plan prepares the change of one service: nil when the installed table
// was built from the same forwarding mode and backends. With an error
// from members, the change is returned too.
func (r *Reconciler) plan(s config.Service, key lb.ServiceKey) (*change, error) {
	encap, err := encapOf(s.Forwarding, s.Flows)
	if err != nil {
		return nil, err
	}
	st := r.services[key]
	if st != nil && st.installed && st.input.same(encap, s) {
		// What the installed table was built from, in the same order:
		// the signature would be the same too.
		return nil, nil
	}
	keep := make(map[netip.AddrPort]bool, len(s.Backends))
	for _, b := range s.Backends {
		ap := netip.AddrPortFrom(b.Address, b.Port)
		if keep[ap] {
			return nil, fmt.Errorf("backend %s is listed twice", ap)
		}
		keep[ap] = true
	}
	sig := signature(encap, s.Flows, s.Affinity, s.Backends, s.History)
	if st != nil && st.installed && st.applied == sig {
		return nil, nil
	}
	if st == nil {
		id, ok := r.serviceIDs.alloc()
		if !ok {
			return nil, fmt.Errorf("no free service ID: all %d are in use; remove a service", r.serviceIDs.limit)
		}
		st = &service{id: id, key: key, backends: make(map[netip.AddrPort]uint32)}
		r.services[key] = st
	}
	c := &change{st: st, name: s.Name, what: fmt.Sprintf("service %q (%s)", s.Name, s.Key()), encap: encap,
		stateful: s.Flows == config.FlowsStateful, clientIP: s.Affinity == config.AffinityClientIP, ranges: s.SourceRanges, backends: s.Backends, keep: keep, sig: sig, input: inputOf(encap, s)}
	// Backends first: the new table may name only backends that exist.
	c.members, c.ids, err = r.members(st, s.Backends, translates(encap))
	if err == nil && encap == lb.EncapGUEHint {
		c.past = r.history(st, s, c.members)
	}
	return c, err
}

// history returns the earlier backend sets of daisy-chained service s,
// whose new members are members: those its configuration lists, with the
// changes this agent saw itself that the configuration does not show yet
// (mergeHistory), or else those this agent saw alone. The agent records
// every change of the installed members. Only a configuration's history
// is the same on every xlb instance, a late starter's included
// (docs/connection-survival.md).
func (r *Reconciler) history(st *service, s config.Service, members []maglev.Backend) []chain.Past {
	// A plan that is made again (a wave cut short) or retried after a
	// failed write records the same change once.
	recorded := len(st.history) > 0 && membersSignature(st.history[len(st.history)-1].Backends) == st.membersSig
	if sig := membersSignature(members); st.members != nil && sig != st.membersSig && !recorded {
		st.history = append(st.history, chain.Past{Until: r.now(), Backends: st.members})
		if n := len(st.history) - config.MaxHistory; n > 0 {
			st.history = slices.Delete(st.history, 0, n)
		}
	}
	if len(s.History) == 0 {
		return slices.Clone(st.history)
	}
	past := make([]chain.Past, 0, len(s.History))
	for _, g := range s.History {
		p := chain.Past{Until: g.Until}
		for _, b := range g.Backends {
			p.Backends = append(p.Backends, maglev.Backend{Key: netip.AddrPortFrom(b.Address, b.Port).String(), Weight: b.Weight})
		}
		past = append(past, p)
	}
	return mergeHistory(past, st.history, members)
}

// mergeHistory returns a source's history past (oldest first) of a
// service whose members are now current, with the changes recorded by
// this agent (oldest first) that the source does not show yet: a source
// may write its history after the new backends (the Kubernetes leader
// controller annotates a Service after its endpoints changed), and the
// connections on the slots that moved must not wait for it. A recorded
// change is shown when the source has the same transition (a set
// followed by the same next set), whatever its time; an unshown one
// counts only if it ended after the source's newest set. So once the
// source has caught up, every agent uses its times alone, and they all
// agree.
func mergeHistory(past, recorded []chain.Past, current []maglev.Backend) []chain.Past {
	if len(recorded) == 0 {
		return past
	}
	transitions := func(h []chain.Past) []string {
		out := make([]string, len(h))
		for i := range h {
			next := current
			if i+1 < len(h) {
				next = h[i+1].Backends
			}
			out[i] = membersSignature(h[i].Backends) + " -> " + membersSignature(next)
		}
		return out
	}
	shown := transitions(past)
	newest := past[len(past)-1].Until
	out := slices.Clone(past)
	for i, t := range transitions(recorded) {
		if recorded[i].Until.After(newest) && !slices.Contains(shown, t) {
			out = append(out, recorded[i])
		}
	}
	if n := len(out) - config.MaxHistory; n > 0 {
		out = slices.Delete(out, 0, n)
	}
	return out
}

// replaceInTwoSteps handles a service whose new backends need the IDs of
// its leaving ones (dataplane.maxBackends reached), which the installed
// table still names: it installs a table of the backends that have IDs,
// frees the leaving ones and plans the full change again. The staying
// backends' flows see two table changes instead of one.
func (r *Reconciler) replaceInTwoSteps(c *change, m uint32) error {
	st := c.st
	r.log.Warn("the data plane is full (dataplane.maxBackends): replacing backends in two steps",
		"service", c.name, "limit", r.backendIDs.limit,
		"fix", "raise dataplane.maxBackends and restart the agent (forwarding continues across restarts) to replace backends at once")
	first := *c
	first.members, first.ids, _ = r.members(st, slices.DeleteFunc(slices.Clone(c.backends), func(b config.Backend) bool {
		_, ok := st.backends[netip.AddrPortFrom(b.Address, b.Port)]
		return !ok
	}), translates(c.encap))
	if err := r.write(&first, m); err != nil {
		return err
	}
	// Whatever st adopted is overwritten; st.applied says from what.
	st.installed, st.applied, st.input, st.named = true, "partial", nil, nil
	st.ranges, st.rangesKnown = slices.Clone(c.ranges), true
	if err := r.releaseLeaving(st, c.keep); err != nil {
		return err
	}
	var err error
	c.members, c.ids, err = r.members(st, c.backends, translates(c.encap))
	return err
}

// install writes the tables of changes, up to r.workers at a time, then
// releases the backends that each service whose table went in has left.
// Changes touch distinct services, and every backend a new table names
// is written already, so the order in which the tables go in does not
// matter to packets.
func (r *Reconciler) install(changes []*change, m uint32) []error {
	r.parallel(len(changes), func(i int) {
		changes[i].err = r.write(changes[i], m)
	})
	var errs []error
	for _, c := range changes {
		if c.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.what, c.err))
			continue
		}
		c.st.installed, c.st.applied, c.st.input, c.st.named = true, c.sig, c.input, nil
		c.st.members, c.st.membersSig = c.members, membersSignature(c.members)
		c.st.ranges, c.st.rangesKnown = slices.Clone(c.ranges), true
		// Only now that the new table is in place may the old backends go.
		if err := r.releaseLeaving(c.st, c.keep); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.what, err))
		}
	}
	return errs
}

// write builds the tables of change c and installs them with the
// service's entry, or installs the entry with the tables the service has
// if those were built from the same (KeepService). It touches nothing of
// the Reconciler's own state but its counters, so several run at once.
func (r *Reconciler) write(c *change, m uint32) error {
	// The tables of daisy-chained services are kept: the next change
	// needs this one for its hints.
	hints := c.encap == lb.EncapGUEHint
	var tables *chain.Tables
	if hints {
		tables = r.tables
	}
	svc := lb.Service{ID: c.st.id, Key: c.st.key, Encap: c.encap, Stateful: c.stateful, ClientIP: c.clientIP, SourceRanges: c.ranges,
		Origin: tableOrigin(c.members, c.ids, m)}
	if hints {
		svc.HintsOrigin = hintsOrigin(c.past)
	}
	// The installed tables, if they were built from the same: after a
	// restart, most are. If the data plane cannot keep them, for
	// whatever reason, they are built and upserted.
	var names []uint32
	for i, b := range c.members {
		if b.Weight > 0 {
			names = append(names, c.ids[i])
		}
	}
	keep := svc
	if hints && c.st.adopted() && len(c.past) == 0 {
		// The agent that installed the hints may have built them from
		// changes it saw itself, which this one no longer knows:
		// keeping them, for the table they were built for, is better
		// than writing none.
		keep.HintsOrigin = lb.Origin{}
	}
	if r.dp.KeepService(keep, names) == nil {
		r.kept.Add(1)
		return nil
	}
	var err error
	if svc.Table, err = buildTable(tables, c.members, c.ids, m); err != nil {
		return err
	}
	if hints {
		if svc.Chain, svc.Generation, err = chainSlots(tables, c.members, c.past, m); err != nil {
			return err
		}
		if n := dropOtherFamily(svc.Chain, svc.Table, c.members, c.ids); n > 0 {
			r.log.Warn("daisy chaining: some slots' previous owners are of the other address family than the slot's backend, which cannot chain to them; connections they still hold break when their packets reach the new backend",
				"service", c.name, "slots", n,
				"fix", "move a daisy-chained service between IPv4 and IPv6 backends once its connections have ended (or the chain window has passed), or keep both families in its backend set meanwhile")
		}
	}
	if err := r.dp.UpsertService(svc); err != nil {
		return fmt.Errorf("install table (service ID %d): %w", c.st.id, err)
	}
	r.built.Add(1)
	return nil
}

// parallel calls fn(0) … fn(n-1) on up to r.workers goroutines and
// returns when all have returned.
func (r *Reconciler) parallel(n int, fn func(i int)) {
	workers := min(r.workers, n)
	if workers <= 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				fn(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// defaultWorkers is how many tables an Apply writes at a time. Building
// a table is CPU work, and most of a swap is waiting for an RCU grace
// period, which other swaps can use: four per CPU keep the CPUs busy. On
// 2 CPUs, 1000 tables of 65537 slots (100 backends each) took 6.1-6.2 s
// four at a time and 5.3-5.5 s eight at a time (bench/ctlbench, its
// reconcile part; when a table was filled by a batch update, 29 s one at
// a time, 17 s two and 13 s four). At most eight: more would take most
// CPUs of a large node for a reload, for little gain.
func defaultWorkers() int {
	return min(4*runtime.GOMAXPROCS(0), 8)
}

// members returns the Maglev members of service st for backends and their
// data-plane IDs, giving new backends an ID. nat: the service rewrites
// to each backend's port (see backendID).
func (r *Reconciler) members(st *service, backends []config.Backend, nat bool) ([]maglev.Backend, []uint32, error) {
	members := make([]maglev.Backend, 0, len(backends))
	ids := make([]uint32, 0, len(backends))
	for _, b := range backends {
		ap := netip.AddrPortFrom(b.Address, b.Port)
		id, err := r.backendID(st, ap, nat)
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

// removeServices deletes services from the data plane, several at a time,
// then the backends of each one that is gone.
func (r *Reconciler) removeServices(gone []*service) []error {
	failed := make([]error, len(gone))
	r.parallel(len(gone), func(i int) {
		if st := gone[i]; st.installed {
			if err := r.dp.DeleteService(st.id, st.key); err != nil {
				failed[i] = fmt.Errorf("delete service ID %d: %w", st.id, err)
			}
		}
	})
	var errs []error
	for i, st := range gone {
		if failed[i] != nil {
			errs = append(errs, fmt.Errorf("remove service %s: %w", formatKey(st.key), failed[i]))
			continue
		}
		st.installed, st.named = false, nil
		for _, ap := range sortedAddrPorts(st.backends) {
			id := st.backends[ap]
			delete(st.backends, ap)
			if err := r.release(id, ap.Addr()); err != nil {
				errs = append(errs, fmt.Errorf("remove service %s: backend %s: %w", formatKey(st.key), ap, err))
			}
		}
		r.serviceIDs.free(st.id)
		delete(r.services, st.key)
	}
	return errs
}

// nameOwners marks, for each adopted service, the backends that counted
// for it (owners: backend ID -> service ID). Without that knowledge (state
// pinned by an xlb that did not record it) adoption goes by address
// alone.
func (r *Reconciler) nameOwners(owners map[uint32]uint32) {
	byID := make(map[uint32]*service, len(r.services))
	for _, st := range r.services {
		byID[st.id] = st
	}
	for b, o := range owners {
		st := byID[o]
		if st == nil {
			continue
		}
		if st.named == nil {
			st.named = make(map[uint32]bool)
		}
		st.named[b] = true
		r.namedBy[b] = st
	}
}

// errNoBackendID: every backend ID of the data plane is in use.
var errNoBackendID = errors.New("no free backend ID")

// backendID returns the ID of backend ap of service st, writing a new
// backend to the data plane if st has none for ap yet. An adopted backend
// with the same address is reused, which keeps its counters (and a NAT
// service's sessions, which name it). The data plane reports adopted
// backends by address: for a service that rewrites to the backend's
// port (nat), the adopted one is written again with ap, which the data
// plane refuses if it holds another port; then it stays an orphan and
// the backend gets a new ID.
func (r *Reconciler) backendID(st *service, ap netip.AddrPort, nat bool) (uint32, error) {
	if id, ok := st.backends[ap]; ok {
		return id, nil
	}
	if id, ok := r.claimOrphan(st, ap.Addr()); ok {
		if !nat || r.dp.UpsertBackend(id, ap) == nil {
			st.backends[ap] = id
			return id, nil
		}
		r.orphans.add(id, ap.Addr())
	}
	id, ok := r.backendIDs.alloc()
	if !ok {
		return 0, fmt.Errorf("%w: all %d are in use (dataplane.maxBackends); remove backends or services, or raise the limit", errNoBackendID, r.backendIDs.limit)
	}
	if err := r.dp.UpsertBackend(id, ap); err != nil {
		r.backendIDs.free(id)
		return 0, fmt.Errorf("write backend ID %d: %w", id, err)
	}
	st.backends[ap] = id
	return id, nil
}

// claimOrphan takes an orphan with address addr for service st: first one
// that counted for st, then one that counted for no other adopted
// service, then any; the lowest ID within each rank. Where the data plane
// does not say which service a backend counts for (Installed.Owners), an
// ID shared by address may move to another service of that address (its
// counters with it); forwarding is unaffected because the address is
// equal.
func (r *Reconciler) claimOrphan(st *service, addr netip.Addr) (uint32, bool) {
	rank := func(id uint32) int {
		if st.named[id] {
			return 0
		}
		// A service's named is cleared once its table is written or it
		// is removed: then it no longer competes.
		if o := r.namedBy[id]; o != nil && o != st && o.named[id] {
			return 2
		}
		return 1
	}
	best, bestRank, found := uint32(0), 0, false
	for _, id := range r.orphans.withAddr(addr) {
		if rk := rank(id); !found || rk < bestRank {
			best, bestRank, found = id, rk, true
		}
	}
	if found {
		r.orphans.remove(best)
	}
	return best, found
}

// release deletes a backend no longer owned by any service, or defers that
// while an adopted table, whose content is unknown, might still name it.
func (r *Reconciler) release(id uint32, addr netip.Addr) error {
	if r.adoptedPending() {
		r.orphans.add(id, addr)
		return nil
	}
	if err := r.dp.DeleteBackend(id); err != nil {
		r.orphans.add(id, addr) // retried by the next Apply
		return fmt.Errorf("delete backend ID %d: %w", id, err)
	}
	r.backendIDs.free(id)
	return nil
}

// deleteOrphans deletes unowned backends once every adopted table has been
// rewritten or deleted, i.e. once no table can name them.
func (r *Reconciler) deleteOrphans() error {
	if r.orphans.len() == 0 || r.adoptedPending() {
		return nil
	}
	var errs []error
	for _, id := range r.orphans.ids() {
		if err := r.dp.DeleteBackend(id); err != nil {
			errs = append(errs, fmt.Errorf("delete unused backend ID %d (%s): %w", id, r.orphans.addr[id], err))
			continue
		}
		r.orphans.remove(id)
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
func (r *Reconciler) ids(k lb.ServiceKey) (uint32, map[netip.AddrPort]uint32, bool) {
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

// buildTable maps the Maglev table over members to backend IDs, taking
// the table from tables when it keeps it (nil: none kept).
func buildTable(tables *chain.Tables, members []maglev.Backend, ids []uint32, m uint32) ([]uint32, error) {
	table := make([]uint32, m)
	active := slices.ContainsFunc(members, func(b maglev.Backend) bool { return b.Weight > 0 })
	if !active {
		for i := range table {
			table[i] = noBackend
		}
		return table, nil
	}
	slots, err := tables.Build(members, m)
	if err != nil {
		return nil, fmt.Errorf("build Maglev table: %w", err)
	}
	for i, idx := range slots {
		table[i] = ids[idx]
	}
	return table, nil
}

// tableOrigin identifies everything buildTable builds a table of m slots
// from: the members, in order, with their weights and backend IDs. The
// Maglev table of a member set never changes (maglev.TestGolden), so
// equal origins mean equal tables; a change to what buildTable does must
// change the label.
func tableOrigin(members []maglev.Backend, ids []uint32, m uint32) lb.Origin {
	b := fmt.Appendf(nil, "maglev m=%d", m)
	for i, mb := range members {
		b = fmt.Appendf(b, "\x00%s w=%d id=%d", mb.Key, mb.Weight, ids[i])
	}
	return lb.OriginOf(b)
}

// hintsOrigin identifies what chainSlots builds a daisy-chained service's
// hints from besides its table: its history, each earlier set and when it
// ended. The hints of a history never change (their format is the
// backends' contract, docs/connection-survival.md); a change to what
// chainSlots does must change the label.
func hintsOrigin(past []chain.Past) lb.Origin {
	b := []byte("hints v1")
	for _, p := range past {
		b = fmt.Appendf(b, "\x00until=%d", p.Until.UnixNano())
		for _, mb := range p.Backends {
			b = fmt.Appendf(b, " %s w=%d", mb.Key, mb.Weight)
		}
	}
	return lb.OriginOf(b)
}

// chainSlots computes the daisy-chaining hints of the table of members,
// and its generation, from the service's past, with the tables kept in
// tables (nil: none).
func chainSlots(tables *chain.Tables, members []maglev.Backend, past []chain.Past, m uint32) ([]lb.ChainSlot, uint32, error) {
	hints, err := tables.Slots(members, past, m)
	if err != nil {
		return nil, 0, fmt.Errorf("daisy-chaining hints: %w", err)
	}
	addrs := make([]netip.Addr, len(hints.Keys))
	for i, k := range hints.Keys {
		if addrs[i], err = keyAddr(k); err != nil {
			return nil, 0, err
		}
	}
	secs := make([]uint32, len(hints.Ends))
	for i, t := range hints.Ends {
		secs[i] = unixSeconds(t)
	}
	out := make([]lb.ChainSlot, m)
	for i, p := range hints.Prev {
		if p[0] != 0 {
			out[i] = lb.ChainSlot{Prev: addrs[p[0]], Prev2: addrs[p[1]], Changed: secs[hints.Changed[i]]}
		}
	}
	return out, unixSeconds(hints.Generation), nil
}

// dropOtherFamily leaves out of chain every previous owner of the other
// address family than its slot's backend (table names the slot's backend
// by ID, ids[i] being members[i]'s), and returns how many slots lost
// one. A hint travels in its backend's family and names owners of that
// family only: a backend chains by rewriting the outer header, so it
// could not reach the other (docs/decisions/0008-ipv6-data-plane.md).
func dropOtherFamily(chain []lb.ChainSlot, table []uint32, members []maglev.Backend, ids []uint32) int {
	if len(chain) != len(table) {
		return 0
	}
	is6 := make(map[uint32]bool, len(ids))
	for i, id := range ids {
		if a, err := keyAddr(members[i].Key); err == nil {
			is6[id] = a.Is6()
		}
	}
	n := 0
	for i := range chain {
		be6, ok := is6[table[i]]
		if !ok {
			continue
		}
		c := &chain[i]
		lost := false
		if c.Prev2.IsValid() && c.Prev2.Is6() != be6 {
			c.Prev2, lost = netip.Addr{}, true
		}
		if c.Prev.IsValid() && c.Prev.Is6() != be6 {
			c.Prev, c.Prev2, lost = c.Prev2, netip.Addr{}, true
		}
		if lost {
			n++
		}
	}
	return n
}

// keyAddr is the address of a backend's Maglev key (address:port); the
// invalid address for "".
func keyAddr(key string) (netip.Addr, error) {
	if key == "" {
		return netip.Addr{}, nil
	}
	ap, err := netip.ParseAddrPort(key)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("daisy-chaining hints: backend key %q: %w", key, err)
	}
	return ap.Addr(), nil
}

// unixSeconds is t as the data plane's 32-bit seconds; 0 for the zero
// time (config.Parse keeps history times within range).
func unixSeconds(t time.Time) uint32 {
	if t.IsZero() || t.Unix() <= 0 || t.Unix() > math.MaxUint32 {
		return 0
	}
	return uint32(t.Unix())
}

// membersSignature identifies a member set, in any order.
func membersSignature(members []maglev.Backend) string {
	parts := make([]string, 0, len(members))
	for _, b := range members {
		parts = append(parts, b.Key+"/"+strconv.FormatUint(uint64(b.Weight), 10))
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// signature identifies everything a service's table and entry are built
// from, so equal signatures mean an identical installed service. It is
// never "".
func signature(encap lb.Encap, flows config.Flows, affinity config.Affinity, backends []config.Backend, history []config.Generation) string {
	var b strings.Builder
	fmt.Fprintf(&b, "encap=%d flows=%s affinity=%s %s", encap, flows, affinity, backendsSignature(backends))
	for _, g := range history {
		fmt.Fprintf(&b, " until=%d %s", g.Until.Unix(), backendsSignature(g.Backends))
	}
	return b.String()
}

// tableInput is what a service's table is built from, as signature sees
// it, in the configuration's order, for a service without a history.
type tableInput struct {
	encap    lb.Encap
	flows    config.Flows
	affinity config.Affinity
	backends []weighted
}

type weighted struct {
	addr   netip.AddrPort
	weight uint32
}

// inputOf is s's tableInput, or nil when s has a history.
func inputOf(encap lb.Encap, s config.Service) *tableInput {
	if len(s.History) > 0 {
		return nil
	}
	in := &tableInput{encap: encap, flows: s.Flows, affinity: s.Affinity, backends: make([]weighted, len(s.Backends))}
	for i, b := range s.Backends {
		in.backends[i] = weighted{netip.AddrPortFrom(b.Address, b.Port), b.Weight}
	}
	return in
}

// same reports whether s, with encapsulation encap, lists exactly what
// in was made of, in the same order. Then its signature is in's too;
// otherwise it may still be (another order). A nil in is never the same.
func (in *tableInput) same(encap lb.Encap, s config.Service) bool {
	if in == nil || in.encap != encap || in.flows != s.Flows || in.affinity != s.Affinity || len(s.History) > 0 || len(in.backends) != len(s.Backends) {
		return false
	}
	for i, b := range s.Backends {
		if in.backends[i] != (weighted{netip.AddrPortFrom(b.Address, b.Port), b.Weight}) {
			return false
		}
	}
	return true
}

func backendsSignature(backends []config.Backend) string {
	parts := make([]string, 0, len(backends))
	for _, b := range backends {
		parts = append(parts, netip.AddrPortFrom(b.Address, b.Port).String()+"/"+strconv.FormatUint(uint64(b.Weight), 10))
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

func serviceKey(s config.Service) (lb.ServiceKey, error) {
	var proto uint8
	switch s.Protocol {
	case config.TCP:
		proto = lb.ProtoTCP
	case config.UDP:
		proto = lb.ProtoUDP
	default:
		return lb.ServiceKey{}, fmt.Errorf("unknown protocol %q (want tcp or udp)", s.Protocol)
	}
	return lb.ServiceKey{VIP: s.VIP, Port: s.Port, Proto: proto}, nil
}

func encapOf(f config.Forwarding, flows config.Flows) (lb.Encap, error) {
	switch {
	case f.Translates() && flows != "" && flows != config.FlowsStateless:
		return 0, fmt.Errorf("forwarding %s holds a session per connection: it takes no flows mode, not %q", f, flows)
	case f == config.NAT:
		return lb.EncapNAT, nil
	case f == config.DNAT:
		return lb.EncapDNAT, nil
	case flows == config.FlowsDaisyChain && f == config.DSRGUE:
		return lb.EncapGUEHint, nil
	case flows == config.FlowsDaisyChain:
		return 0, fmt.Errorf("daisy chaining needs forwarding %s, not %q", config.DSRGUE, f)
	case f == config.DSRIPIP:
		return lb.EncapIPIP, nil
	case f == config.DSRGUE:
		return lb.EncapGUE, nil
	}
	return 0, fmt.Errorf("unknown forwarding %q (want %s, %s, %s or %s)", f, config.DSRIPIP, config.DSRGUE, config.NAT, config.DNAT)
}

// translates reports whether encap rewrites packets to the backend's
// address and port on the node (nat, dnat).
func translates(encap lb.Encap) bool { return encap == lb.EncapNAT || encap == lb.EncapDNAT }

// formatKey prints a data-plane key like config.Key does: VIP:port/proto.
func formatKey(k lb.ServiceKey) string {
	proto := strconv.Itoa(int(k.Proto))
	switch k.Proto {
	case lb.ProtoTCP:
		proto = string(config.TCP)
	case lb.ProtoUDP:
		proto = string(config.UDP)
	}
	return netip.AddrPortFrom(k.VIP, k.Port).String() + "/" + proto
}

func sortedAddrPorts(m map[netip.AddrPort]uint32) []netip.AddrPort {
	return slices.SortedFunc(maps.Keys(m), func(a, b netip.AddrPort) int { return a.Compare(b) })
}
