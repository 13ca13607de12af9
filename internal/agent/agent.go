package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/health"
	"github.com/xlbproject/xlb/internal/source"
	"github.com/xlbproject/xlb/internal/source/file"
)

// Options configure New.
type Options struct {
	// ConfigPath names the configuration file in status and logs.
	ConfigPath string
	// Config is the configuration loaded from ConfigPath at start; the
	// command loads it itself so that a bad file fails before anything is
	// touched.
	Config    *config.Config
	Dataplane Dataplane
	NodeAddr  netip.Addr // resolved node address (see NodeAddress)
	// NodeAddr6 is the resolved IPv6 node address (see NodeAddress6);
	// invalid when the node has none.
	NodeAddr6 netip.Addr
	PinPath   string
	Version   string
	Logger    *slog.Logger
	// Prober checks the backends' health; nil: health.New. The agent sets
	// its targets and runs it.
	Prober Prober
	// Routes announces the served VIPs over BGP; nil without a bgp
	// section. Run starts announcing; the caller starts and shuts it down.
	Routes Routes
	// L2 answers ARP for this node's share of the VIPs in layer-2 mode;
	// nil otherwise. Like Routes, it is given what the node can serve
	// once Run starts.
	L2 L2
	// Source delivers whole new configurations: the file's (package
	// source/file) or the cluster's (package k8s/source). Run applies
	// each, keeping the running one if it fails. Nil: Config only.
	Source source.Source
	// FileIsBase: the source adds services and peers to those of the
	// file (Kubernetes), so Check compares only the sections of a file
	// that a restart applies.
	FileIsBase bool
}

// Agent owns the running configuration: it applies it through a
// Reconciler, applies each new one its source delivers, and reports
// status.
type Agent struct {
	path    string
	node    api.Node // fixed at start; attach mode is read live
	version string
	dp      Dataplane
	rec     *Reconciler
	prober  Prober
	log     *slog.Logger

	// Replaced by tests.
	parse      func(name string, data []byte) (*config.Config, error) // for Check
	warm       func([]netip.Addr, *slog.Logger)
	pollEvery  time.Duration // how often a failed apply is due for a retry
	retryEvery time.Duration
	// expireEvery is how often the expired NAT sessions are reclaimed.
	expireEvery time.Duration

	applyMu sync.Mutex // serialises reloads, retries and health changes
	// states are the backends' health states as last logged, by target key.
	states map[string]health.State
	// probed is what the prober was last given, by service (targetChanges).
	// Guarded by applyMu.
	probed map[string]probed

	timings    *timings             // reconcile durations
	routes     Routes               // nil: nothing is announced
	l2         L2                   // nil: not in layer-2 mode
	updates    <-chan source.Update // nil: no source
	fileIsBase bool                 // Options.FileIsBase
	// routesLive is set when Run starts: only then is the data plane
	// attached and routes may be announced. Guarded by applyMu.
	routesLive bool
	runCtx     context.Context

	mu         sync.Mutex // guards the fields below
	cfg        *config.Config
	generation uint64
	lastReload time.Time
	// loadErr is why the last configuration could not be had (a file
	// that does not load, a source error): cfg is the one before it.
	// Nil once a configuration loads.
	loadErr error
	// applyErr is why cfg is not fully applied; nil when it is. A retry
	// applies cfg again while it is set.
	applyErr  error
	lastApply time.Time // of the last apply attempt
	reloads   map[string]uint64
	// bgpFailed: Routes did not take cfg.BGP; a retry hands it over
	// again, and only then is the apply done.
	bgpFailed bool
	// down are the target keys of the backends that the last apply took
	// out of the tables as unhealthy; svcDown the services left without a
	// healthy backend by it.
	down    map[string]bool
	svcDown map[string]bool
	// expireErr is why reclaiming expired NAT sessions failed last; ""
	// when it works.
	expireErr string
}

// New adopts the data plane's state and applies o.Config. A failure to
// apply the start configuration is returned: the operator is watching then.
func New(o Options) (*Agent, error) {
	a, err := newAgent(o)
	if err != nil {
		return nil, err
	}
	if err := a.start(); err != nil {
		return nil, err
	}
	return a, nil
}

// newAgent adopts the data plane's state; start applies the configuration.
func newAgent(o Options) (*Agent, error) {
	if o.Config == nil || o.Dataplane == nil {
		return nil, errors.New("agent: a configuration and a data plane are required")
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	rec, err := NewReconciler(o.Dataplane, log)
	if err != nil {
		return nil, err
	}
	rec.nodeAddr = o.NodeAddr
	prober := o.Prober
	if prober == nil {
		prober = health.New(log)
	}
	shape := o.Dataplane.Shape()
	a := &Agent{
		path: o.ConfigPath,
		node: api.Node{
			Interface: o.Config.Node.Interface,
			Address:   o.NodeAddr,
			Address6:  o.NodeAddr6,
			PinPath:   o.PinPath,
			FlowHash:  shape.FlowHash.String(),
			TableSize: shape.TableSize,
			PingVIPs:  shape.PingVIPs,
		},
		version:     o.Version,
		dp:          o.Dataplane,
		rec:         rec,
		prober:      prober,
		log:         log,
		parse:       ParseFile,
		warm:        warmNeighbours,
		pollEvery:   500 * time.Millisecond,
		retryEvery:  5 * time.Second,
		expireEvery: time.Second,
		cfg:         o.Config,
		generation:  1,
		lastReload:  time.Now(),
		reloads:     map[string]uint64{api.ResultOK: 0, api.ResultError: 0},
		timings:     newTimings(),
		routes:      o.Routes,
		l2:          o.L2,
		fileIsBase:  o.FileIsBase,
		runCtx:      context.Background(),
	}
	if o.Source != nil {
		a.updates = o.Source.Updates()
	}
	return a, nil
}

func (a *Agent) start() error {
	if err := a.apply(nil, a.cfg); err != nil {
		return fmt.Errorf("apply %s: %w", a.path, err)
	}
	// After a restart on an unchanged configuration, no table is built.
	built, kept := a.rec.TableCounts()
	a.log.Info("configuration applied", "path", a.path, "services", len(a.cfg.Services),
		"tables_built", built, "tables_kept", kept)
	return nil
}

// apply hands cfg's backends to the prober, programs cfg and warms the
// neighbours of backends that old (nil at start) did not have. Backends
// the prober knows keep their health; new ones count as healthy until
// probed. The caller holds applyMu.
func (a *Agent) apply(old, cfg *config.Config) error {
	add, remove, now := targetChanges(cfg, a.probed)
	a.prober.Change(add, remove)
	a.probed = now
	err := a.program(triggerConfig, cfg, a.prober.Unhealthy())
	a.warm(newBackendAddrs(old, cfg), a.log)
	return err
}

// Run probes the backends and follows their health, applies the
// configurations of Options.Source, and retries a failed apply, until
// ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	tick := time.NewTicker(a.pollEvery)
	defer tick.Stop()

	probing, stopProbing := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { a.prober.Run(probing) })
	wg.Go(func() { a.expireSessions(probing) })
	defer func() {
		stopProbing()
		wg.Wait()
	}()
	changes := a.prober.Changes()
	a.applyMu.Lock()
	a.routesLive, a.runCtx = true, ctx
	a.mu.Lock()
	cfg, svcDown := a.cfg, a.svcDown
	a.mu.Unlock()
	a.syncRoutes(cfg, svcDown)
	a.applyMu.Unlock()

	for {
		select {
		case <-ctx.Done():
			return nil
		case u := <-a.updates:
			a.Replace(u)
		case <-changes:
			a.syncHealth()
		case <-tick.C:
			a.retry()
			// Catches what Changes does not signal (a first probe
			// that finds a backend up), for the log.
			a.syncHealth()
		}
	}
}

// Replace applies a configuration from Options.Source. If the source
// could not build one (the file does not load, the cluster's
// configuration is invalid), the running configuration stays and the
// error is recorded for status.
func (a *Agent) Replace(u source.Update) error {
	a.applyMu.Lock()
	defer a.applyMu.Unlock()
	reason := cmp.Or(u.Trigger, u.Source)
	if u.Err != nil || u.Config == nil {
		err := u.Err
		if err == nil {
			err = errors.New("no configuration")
		}
		if u.Source == file.Name {
			a.loadFailed(err)
			a.log.Error("configuration reload failed; the previous configuration keeps running",
				"path", a.path, "trigger", reason, "error", err,
				"fix", "correct the file; it is read again when it changes or on SIGHUP")
			return err
		}
		a.loadFailed(fmt.Errorf("%s: %w", u.Source, err))
		a.log.Error("the configuration source failed; the previous configuration keeps running",
			"source", u.Source, "error", err,
			"fix", "correct what the error names (it is also shown by `xlb status`); the source's next valid configuration applies")
		return err
	}
	return a.replace(u.Config, reason)
}

// loadFailed records a configuration that could not be had.
func (a *Agent) loadFailed(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.lastReload = time.Now()
	a.loadErr = err
	a.reloads[api.ResultError]++
}

// replace applies cfg, which replaces the running configuration. The
// caller holds applyMu.
func (a *Agent) replace(cfg *config.Config, reason string) error {
	start := time.Now()
	a.mu.Lock()
	old := a.cfg
	a.lastReload = start
	a.mu.Unlock()

	// Switching between BGP and layer-2 mode needs a restart: applied
	// here, the routes would go at once and ARP would start only then.
	if m, n := announceName(old), announceName(cfg); m != n {
		err := fmt.Errorf("node.announce changed from %s to %s, which the running agent cannot switch: it keeps the previous configuration", m, n)
		a.loadFailed(err)
		a.log.Error("configuration reload refused; the previous configuration keeps running", "path", a.path, "trigger", reason, "error", err,
			"fix", "restart the agent to apply the file in the new mode (forwarding continues across restarts), or set node.announce back to "+m)
		return err
	}

	a.warnRestartOnly(old, cfg)
	err := a.apply(old, cfg)
	if a.routes == nil && cfg.BGP != nil {
		a.log.Warn("a bgp section was added: nothing is announced until the agent restarts",
			"fix", "restart the agent (forwarding continues across restarts)")
	}
	a.mu.Lock()
	bgpFailed := a.bgpFailed
	a.mu.Unlock()
	bgpFailed = a.routes != nil && (bgpFailed || !reflect.DeepEqual(old.BGP, cfg.BGP))
	if bgpFailed {
		if rerr := a.routes.Reconfigure(a.runCtx, cfg.BGP); rerr != nil {
			a.log.Warn("the bgp section changed but could not be applied", "error", rerr,
				"fix", "correct the bgp section as the error says; the agent retries every "+a.retryEvery.String()+", or restart it to apply the section in full (forwarding continues across restarts)")
			err = errors.Join(err, fmt.Errorf("bgp: %w", rerr))
		} else if bgpFailed = false; cfg.BGP != nil {
			a.log.Info("BGP peers reconfigured", "peers", len(cfg.BGP.Peers))
		} else {
			a.log.Info("the bgp section is gone: nothing is announced")
		}
	}

	a.mu.Lock()
	a.cfg = cfg
	a.bgpFailed = bgpFailed
	a.generation++
	gen := a.generation
	a.loadErr = nil
	if err != nil {
		a.applyErr = fmt.Errorf("apply: %w", err)
		a.reloads[api.ResultError]++
	} else {
		a.applyErr = nil
		a.reloads[api.ResultOK]++
	}
	a.mu.Unlock()

	// Which services came and went: a service removed by a reload is
	// never removed silently.
	added, removed := serviceChanges(old, cfg)
	if err != nil {
		a.log.Error("configuration loaded but not fully applied; retrying", "path", a.path, "generation", gen,
			"services", len(cfg.Services), "added", added, "removed", removed,
			"error", err, "fix", "see the error; the agent retries every "+a.retryEvery.String())
		return err
	}
	a.log.Info("configuration reloaded", "path", a.path, "trigger", reason, "generation", gen, "services", len(cfg.Services),
		"added", added, "removed", removed, "took", time.Since(start).Round(time.Microsecond))
	return nil
}

// announceName is cfg's node.announce as the file writes it.
func announceName(cfg *config.Config) string {
	return string(cmp.Or(cfg.Node.Announce, config.AnnounceBGP))
}

// maxNamesLogged bounds the service names a reload's log line lists.
const maxNamesLogged = 20

// serviceChanges names the services of cfg that old lacks and those of
// old that cfg lacks, at most maxNamesLogged of each (then how many more).
func serviceChanges(old, cfg *config.Config) (added, removed []string) {
	had := make(map[string]bool, len(old.Services))
	for _, s := range old.Services {
		had[s.Name] = true
	}
	has := make(map[string]bool, len(cfg.Services))
	for _, s := range cfg.Services {
		has[s.Name] = true
		if !had[s.Name] {
			added = append(added, s.Name)
		}
	}
	for _, s := range old.Services {
		if !has[s.Name] {
			removed = append(removed, s.Name)
		}
	}
	return capNames(added), capNames(removed)
}

func capNames(names []string) []string {
	if len(names) <= maxNamesLogged {
		return names
	}
	return append(names[:maxNamesLogged:maxNamesLogged], fmt.Sprintf("and %d more", len(names)-maxNamesLogged))
}

// retry applies the running configuration again if its last apply failed
// and retryEvery has passed.
func (a *Agent) retry() {
	a.mu.Lock()
	due := a.applyErr != nil && time.Since(a.lastApply) >= a.retryEvery
	cfg, bgpFailed := a.cfg, a.bgpFailed
	a.mu.Unlock()
	if !due {
		return
	}
	a.applyMu.Lock()
	defer a.applyMu.Unlock()
	err := a.program(triggerRetry, cfg, a.prober.Unhealthy())
	if bgpFailed {
		if rerr := a.routes.Reconfigure(a.runCtx, cfg.BGP); rerr != nil {
			err = errors.Join(err, fmt.Errorf("bgp: %w", rerr))
		} else {
			bgpFailed = false
		}
	}
	a.mu.Lock()
	if a.cfg == cfg {
		a.bgpFailed = bgpFailed
		if err == nil {
			a.applyErr = nil
		} else {
			a.applyErr = fmt.Errorf("apply: %w", err)
		}
	}
	a.mu.Unlock()
	if err != nil {
		a.log.Warn("applying the configuration failed again", "error", err,
			"fix", "see the error; the agent retries every "+a.retryEvery.String())
		return
	}
	a.log.Info("configuration applied after retry", "path", a.path)
}

// warnRestartOnly logs the settings that a reload cannot change: they
// shape the data plane's load and the agent's sockets.
func (a *Agent) warnRestartOnly(old, cfg *config.Config) {
	for _, c := range []struct {
		field   string
		changed bool
	}{
		{"node", old.Node != cfg.Node},
		{"api", old.API != cfg.API},
		{"dataplane", old.Dataplane != cfg.Dataplane},
		// The session table is allocated whole when the data plane
		// loads; the rest of the nat section applies at once.
		{"nat.sessions", old.NAT.Sessions != cfg.NAT.Sessions},
		// The election's socket and timers are set up at start.
		{"l2", !reflect.DeepEqual(old.L2, cfg.L2)},
	} {
		if c.changed {
			a.log.Warn("a setting changed that only takes effect when the agent restarts", "section", c.field,
				"fix", "restart the agent (forwarding continues across restarts)")
		}
	}
}

// Status reports the running configuration with the data plane's counters.
func (a *Agent) Status() (*api.Status, error) {
	a.mu.Lock()
	cfg := a.cfg
	st := &api.Status{
		Version: a.version,
		Node:    a.node,
		Config: api.Config{
			Path:       a.path,
			Generation: a.generation,
			LastReload: a.lastReload,
			Result:     api.ResultOK,
			Reloads:    map[string]uint64{api.ResultOK: a.reloads[api.ResultOK], api.ResultError: a.reloads[api.ResultError]},
		},
		Services:   make([]api.Service, 0, len(cfg.Services)),
		Reconciles: a.timings.snapshot(),
	}
	if a.routes != nil {
		st.BGP = a.routes.Status()
	}
	if a.l2 != nil {
		st.L2 = a.l2.Status()
	}
	// What runs is cfg: after a failed load the one before the failure,
	// after a failed apply the new one, in part.
	var errs []string
	if a.loadErr != nil {
		st.Config.LoadError = a.loadErr.Error()
		errs = append(errs, st.Config.LoadError)
	}
	if a.applyErr != nil {
		st.Config.ApplyError = a.applyErr.Error()
		errs = append(errs, st.Config.ApplyError)
	}
	if len(errs) > 0 {
		st.Config.Result, st.Config.Error = api.ResultError, strings.Join(errs, "\n")
	}
	svcDown := a.svcDown
	a.mu.Unlock()
	snap := a.prober.Snapshot()

	shape := a.dp.Shape()
	st.Node.AttachMode = shape.AttachMode
	st.Conntrack.Size = shape.ConntrackSize
	for _, s := range cfg.Services {
		out := api.Service{
			Name: s.Name, VIP: s.VIP, Port: s.Port,
			Protocol: string(s.Protocol), Forwarding: string(s.Forwarding), Flows: s.Flows.Name(),
			Affinity: s.Affinity.Name(),
			State:    api.StateUp,
			Backends: make([]api.Backend, 0, len(s.Backends)),
		}
		if svcDown[s.Name] {
			out.State = api.StateDown
		}
		var backendIDs map[netip.AddrPort]uint32
		if key, err := serviceKey(s); err == nil {
			var id uint32
			if id, backendIDs, out.Installed = a.rec.ids(key); out.Installed {
				c, err := a.dp.ServiceCounters(id)
				if err != nil {
					return nil, fmt.Errorf("service %q: read counters: %w", s.Name, err)
				}
				out.Counters = api.Counters(c)
				if c, err = a.dp.SourceRangeDrops(id); err != nil {
					return nil, fmt.Errorf("service %q: read source range drops: %w", s.Name, err)
				}
				out.SourceRangeDrops = api.Counters(c)
			}
		}
		for _, p := range s.SourceRanges {
			out.SourceRanges = append(out.SourceRanges, p.String())
		}
		for _, b := range s.Backends {
			ob := api.Backend{Address: b.Address, Port: b.Port, Weight: b.Weight, Health: healthOf(b, snap[TargetKey(s, b)])}
			if id, ok := backendIDs[netip.AddrPortFrom(b.Address, b.Port)]; ok {
				c, err := a.dp.BackendCounters(id)
				if err != nil {
					return nil, fmt.Errorf("service %q backend %s: read counters: %w", s.Name, b.Address, err)
				}
				ob.Counters = api.Counters(c)
			}
			out.Backends = append(out.Backends, ob)
		}
		st.Services = append(st.Services, out)
	}
	reasons, err := a.dp.ReasonCounters()
	if err != nil {
		return nil, fmt.Errorf("read reason counters: %w", err)
	}
	st.Reasons = reasons
	if st.Conntrack.Flows, err = a.dp.ConntrackEntries(); err != nil {
		return nil, err
	}
	st.Policy = api.Policy{DenyPrefixes: len(cfg.Policy.Deny), Denied: reasons["drop_denied"]}
	if UsesNAT(cfg) {
		if st.NAT, err = a.natStatus(cfg); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// newBackendAddrs lists the backend addresses of cfg that old lacks, each
// once, in cfg's order. Only services whose backends' addresses differ
// from those of old's service of the same name can bring one (the others'
// were all in old), so a change of one service among thousands costs a
// pass over old's addresses, not a set of them.
func newBackendAddrs(old, cfg *config.Config) []netip.Addr {
	var before map[string]*config.Service
	if old != nil {
		before = servicesByName(old)
	}
	var out []netip.Addr
	seen := make(map[netip.Addr]bool)
	for _, s := range cfg.Services {
		if o := before[s.Name]; o != nil && sameAddrs(o.Backends, s.Backends) {
			continue
		}
		for _, b := range s.Backends {
			if !seen[b.Address] {
				seen[b.Address] = true
				out = append(out, b.Address)
			}
		}
	}
	if old == nil || len(out) == 0 {
		return out
	}
	had := make(map[netip.Addr]bool)
	for _, s := range old.Services {
		for _, b := range s.Backends {
			if seen[b.Address] {
				had[b.Address] = true
			}
		}
	}
	return slices.DeleteFunc(out, func(a netip.Addr) bool { return had[a] })
}

// sameAddrs reports whether a and b list the same addresses in the same
// order.
func sameAddrs(a, b []config.Backend) bool {
	return slices.EqualFunc(a, b, func(x, y config.Backend) bool { return x.Address == y.Address })
}
