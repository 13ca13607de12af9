package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/xlbproject/xlb/internal/dataplane/lb"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/internal/health"
)

// fakeDP is an in-memory data plane. It records every call and checks the
// ordering rules a real data plane relies on: a table names only written
// backends, a backend is deleted only when no table names it (installed
// or being swapped in), IDs stay in range, one ID holds one service, and
// one service's table is not written by two calls at once. Like the real
// one, UpsertService runs concurrently for different services: between
// its checks and the swap it leaves the lock (and calls swapHook).
type fakeDP struct {
	mu          sync.Mutex
	size        uint32
	maxServices uint32
	maxBackends uint32
	services    map[uint32]lb.Service
	backends    map[uint32]netip.AddrPort
	svcCounters map[uint32]lb.Counters
	beCounters  map[uint32]lb.Counters
	reasons     map[string]uint64

	owners map[uint32]uint32 // backend ID → service ID whose table named it last
	// deny is the deny list; rangeDrops what each service dropped for
	// its source ranges.
	deny       []netip.Prefix
	rangeDrops map[uint32]lb.Counters

	calls      []string         // "UpsertService 0", in order
	fail       map[string]error // method → error returned by every call until removed
	failKey    map[uint32]error // UpsertService of this service ID fails
	violations []string

	// inflight are the tables of the UpsertService calls under way, by
	// service ID; maxInflight is the most there were at once.
	inflight    map[uint32][]uint32
	maxInflight int
	// swapHook, if set, runs in UpsertService between its checks and the
	// swap, without the lock.
	swapHook func(id uint32)

	// nat is the last SetNAT's; natCounters and sessions are what the
	// NAT methods report; expires counts ExpireSessions calls.
	nat         lb.NATConfig
	natCounters lb.NATCounters
	sessions    map[lb.ServiceKey][]lb.Session
	expires     int
}

func newFake(size, maxServices, maxBackends uint32) *fakeDP {
	return &fakeDP{
		size: size, maxServices: maxServices, maxBackends: maxBackends,
		services:    make(map[uint32]lb.Service),
		backends:    make(map[uint32]netip.AddrPort),
		svcCounters: make(map[uint32]lb.Counters),
		beCounters:  make(map[uint32]lb.Counters),
		reasons:     map[string]uint64{"pass_not_vip": 7},
		owners:      make(map[uint32]uint32),
		rangeDrops:  make(map[uint32]lb.Counters),
		fail:        make(map[string]error),
		failKey:     make(map[uint32]error),
		inflight:    make(map[uint32][]uint32),
		sessions:    make(map[lb.ServiceKey][]lb.Session),
	}
}

var errInjected = errors.New("injected failure")

func (f *fakeDP) record(method string, id uint32) error {
	f.calls = append(f.calls, fmt.Sprintf("%s %d", method, id))
	return f.fail[method]
}

func (f *fakeDP) violate(format string, args ...any) {
	f.violations = append(f.violations, fmt.Sprintf(format, args...))
}

// UpsertBackend refuses, as the real one, another address or port for
// an ID that has one; the agent never moves an ID to another address.
func (f *fakeDP) UpsertBackend(id uint32, ap netip.AddrPort) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("UpsertBackend", id); err != nil {
		return err
	}
	if id >= f.maxBackends {
		f.violate("UpsertBackend: ID %d out of range", id)
	}
	if old, ok := f.backends[id]; ok && old != ap {
		if old.Addr() != ap.Addr() {
			f.violate("UpsertBackend %d: overwrites %s with %s", id, old, ap)
		}
		return fmt.Errorf("backend %d already has address %s: delete it before reusing the id", id, old)
	}
	f.backends[id] = ap
	return nil
}

func (f *fakeDP) DeleteBackend(id uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("DeleteBackend", id); err != nil {
		return err
	}
	if _, ok := f.backends[id]; !ok {
		f.violate("DeleteBackend %d: no such backend", id)
	}
	for _, s := range f.services {
		if slices.Contains(s.Table, id) {
			f.violate("DeleteBackend %d: still in the table of service %d", id, s.ID)
		}
	}
	for sid, table := range f.inflight {
		if slices.Contains(table, id) {
			f.violate("DeleteBackend %d: named by the table of service %d being swapped in", id, sid)
		}
	}
	delete(f.backends, id)
	delete(f.beCounters, id)
	delete(f.owners, id)
	return nil
}

func (f *fakeDP) UpsertService(s lb.Service) error {
	f.mu.Lock()
	if err := f.record("UpsertService", s.ID); err != nil {
		f.mu.Unlock()
		return err
	}
	if _, busy := f.inflight[s.ID]; busy {
		f.violate("UpsertService %d: another call for the same service is under way", s.ID)
	}
	f.inflight[s.ID] = slices.Clone(s.Table)
	f.maxInflight = max(f.maxInflight, len(f.inflight))
	hook := f.swapHook
	f.mu.Unlock()
	if hook != nil {
		hook(s.ID)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.inflight, s.ID)
	if err := f.failKey[s.ID]; err != nil {
		return err
	}
	if s.ID >= f.maxServices {
		f.violate("UpsertService: ID %d out of range", s.ID)
	}
	if uint32(len(s.Table)) != f.size {
		f.violate("UpsertService %d: table has %d entries, want %d", s.ID, len(s.Table), f.size)
	}
	for _, id := range s.Table {
		if _, ok := f.backends[id]; !ok && id != noBackend {
			f.violate("UpsertService %d: table names unwritten backend %d", s.ID, id)
			break
		}
	}
	for _, o := range f.services {
		if o.ID != s.ID && o.Key == s.Key {
			f.violate("UpsertService %d: key %v already held by service %d", s.ID, s.Key, o.ID)
		}
	}
	if o, ok := f.services[s.ID]; ok && o.Key != s.Key {
		f.violate("UpsertService %d: ID still held by key %v", s.ID, o.Key)
	}
	s.Table = slices.Clone(s.Table)
	f.services[s.ID] = s
	for _, b := range s.Table {
		if _, ok := f.backends[b]; ok {
			f.owners[b] = s.ID
		}
	}
	return nil
}

func (f *fakeDP) DeleteService(id uint32, key lb.ServiceKey) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("DeleteService", id); err != nil {
		return err
	}
	if s, ok := f.services[id]; !ok || s.Key != key {
		f.violate("DeleteService %d %v: no such service", id, key)
	}
	delete(f.services, id)
	delete(f.svcCounters, id)
	maps.DeleteFunc(f.owners, func(_, o uint32) bool { return o == id })
	return nil
}

// Installed lists the services (tables omitted, as the real one) and
// backends; which service each backend counts for only as an ownerFake.
func (f *fakeDP) Installed() (lb.Installed, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var in lb.Installed
	for _, s := range f.services {
		in.Services = append(in.Services, lb.Service{ID: s.ID, Key: s.Key, Encap: s.Encap})
	}
	in.Backends = make(map[uint32]netip.Addr, len(f.backends))
	for id, ap := range f.backends {
		in.Backends[id] = ap.Addr()
	}
	return in, f.fail["Installed"]
}

// SetSourceRanges changes an installed service's ranges.
func (f *fakeDP) SetSourceRanges(id uint32, key lb.ServiceKey, ranges []netip.Prefix) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("SetSourceRanges", id); err != nil {
		return err
	}
	s, ok := f.services[id]
	if !ok || s.Key != key {
		f.violate("SetSourceRanges %d %v: no such service", id, key)
		return nil
	}
	s.SourceRanges = slices.Clone(ranges)
	f.services[id] = s
	return nil
}

// SetDenyList records the deny list.
func (f *fakeDP) SetDenyList(prefixes []netip.Prefix) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("SetDenyList", uint32(len(prefixes))); err != nil {
		return err
	}
	f.deny = slices.Clone(prefixes)
	return nil
}

func (f *fakeDP) SourceRangeDrops(id uint32) (lb.Counters, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rangeDrops[id], f.fail["SourceRangeDrops"]
}

// KeepService keeps no table: the fake records none, so the agent builds
// and upserts every table, and no call to it changes anything.
func (f *fakeDP) KeepService(lb.Service, []uint32) error { return lb.ErrNotKept }

func (f *fakeDP) ServiceCounters(id uint32) (lb.Counters, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.svcCounters[id], f.fail["ServiceCounters"]
}

func (f *fakeDP) BackendCounters(id uint32) (lb.Counters, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.beCounters[id], f.fail["BackendCounters"]
}

func (f *fakeDP) ReasonCounters() (map[string]uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]uint64, len(f.reasons))
	for k, v := range f.reasons {
		out[k] = v
	}
	return out, f.fail["ReasonCounters"]
}

func (f *fakeDP) Shape() lb.Shape {
	return lb.Shape{TableSize: f.size, MaxBackends: f.maxBackends, FlowHash: wire.FlowHashFmix64, AttachMode: "generic", NATSessions: 4096}
}

// SetNAT records the NAT settings.
func (f *fakeDP) SetNAT(c lb.NATConfig) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("SetNAT", uint32(c.PortMin)); err != nil {
		return err
	}
	f.nat = c
	return nil
}

func (f *fakeDP) NATCounters() (lb.NATCounters, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.natCounters, f.fail["NATCounters"]
}

// Sessions lists up to max of the sessions set for the service.
func (f *fakeDP) Sessions(vip netip.Addr, port uint16, proto uint8, max int) ([]lb.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail["Sessions"]; err != nil {
		return nil, err
	}
	list := f.sessions[lb.ServiceKey{VIP: vip, Port: port, Proto: proto}]
	return slices.Clone(list[:min(len(list), max)]), nil
}

// EndBackendSessions records the call and ends the backend's sessions.
func (f *fakeDP) EndBackendSessions(id uint32) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("EndBackendSessions", id); err != nil {
		return 0, err
	}
	if _, ok := f.backends[id]; !ok {
		f.violate("EndBackendSessions %d: no such backend", id)
	}
	n := 0
	for k, list := range f.sessions {
		before := len(list)
		f.sessions[k] = slices.DeleteFunc(list, func(s lb.Session) bool { return s.BackendID == id })
		n += before - len(f.sessions[k])
	}
	return n, nil
}

// ExpireSessions counts its calls apart from the others: it runs every
// expireEvery and changes no configuration.
func (f *fakeDP) ExpireSessions() (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expires++
	return 0, f.fail["ExpireSessions"]
}

// mutations returns the calls since mark that change the data plane.
func (f *fakeDP) mutations(mark int) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls[mark:])
}

func (f *fakeDP) mark() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// serviceByKey returns the installed service with key k.
func (f *fakeDP) serviceByKey(k lb.ServiceKey) (lb.Service, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.services {
		if s.Key == k {
			return s, true
		}
	}
	return lb.Service{}, false
}

// ownerFake is a fakeDP that says which service each backend counts for,
// as the real data plane does (lb.Installed.Owners).
type ownerFake struct{ *fakeDP }

func (f ownerFake) Installed() (lb.Installed, error) {
	in, err := f.fakeDP.Installed()
	f.mu.Lock()
	defer f.mu.Unlock()
	in.Owners = maps.Clone(f.owners)
	return in, err
}

// fakeProber stands in for the health checker: tests set results by
// hand. Like the real one, Change forgets the results of targets that it
// removes or replaces, and new targets have none (unknown) until a
// result is set.
type fakeProber struct {
	mu      sync.Mutex
	targets map[string]health.Target
	results map[string]health.Result
	changes chan struct{}
	running chan struct{} // closed when Run starts
	stopped chan struct{} // closed when Run returns
}

func newFakeProber() *fakeProber {
	return &fakeProber{
		results: make(map[string]health.Result),
		targets: make(map[string]health.Target),
		changes: make(chan struct{}, 1),
		running: make(chan struct{}),
		stopped: make(chan struct{}),
	}
}

func (p *fakeProber) Change(add []health.Target, remove []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, key := range remove {
		delete(p.targets, key)
		delete(p.results, key)
	}
	for _, t := range add {
		if old, ok := p.targets[t.Key]; !ok || old != t {
			delete(p.results, t.Key)
		}
		p.targets[t.Key] = t
	}
}

func (p *fakeProber) Run(ctx context.Context) {
	close(p.running)
	<-ctx.Done()
	close(p.stopped)
}

func (p *fakeProber) Changes() <-chan struct{} { return p.changes }

func (p *fakeProber) Snapshot() map[string]health.Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.results)
}

func (p *fakeProber) Unhealthy() map[string]health.Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := maps.Clone(p.results)
	maps.DeleteFunc(out, func(_ string, r health.Result) bool { return r.Healthy() })
	return out
}

// set gives target key a state, as a probe would, and signals a change
// when its Healthy() value flips.
func (p *fakeProber) set(key string, state health.State, lastErr string) {
	p.mu.Lock()
	old, ok := p.results[key]
	now := time.Now()
	r := health.Result{State: state, Since: old.Since, LastCheck: now, LastError: lastErr, LastLatency: 1500 * time.Microsecond}
	if !ok || old.State != state {
		r.Since = now
	}
	p.results[key] = r
	p.mu.Unlock()
	if old.Healthy() != r.Healthy() {
		select {
		case p.changes <- struct{}{}:
		default:
		}
	}
}

// keys lists the targets' keys, sorted.
func (p *fakeProber) keys() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.targets))
}
