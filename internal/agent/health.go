package agent

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/health"
)

// Prober is what the agent needs from the health checker; *health.Prober
// implements it. Tests use a fake.
type Prober interface {
	// Change removes the targets keyed in remove, then adds or replaces
	// add's; a target given again unchanged keeps its state.
	Change(add []health.Target, remove []string)
	Run(ctx context.Context)
	Changes() <-chan struct{}
	Snapshot() map[string]health.Result
	// Unhealthy is Snapshot's results that are not healthy.
	Unhealthy() map[string]health.Result
}

var _ Prober = (*health.Prober)(nil)

// TargetKey identifies backend b of service s to the prober, e.g.
// "web/10.0.3.2:80". Every (service, backend) pair is probed on its own:
// two services of one host may check different ports or paths.
func TargetKey(s config.Service, b config.Backend) string {
	// One allocation: an agent builds this key for every backend of
	// every service on each apply.
	var k strings.Builder
	k.Grow(len(s.Name) + len("/255.255.255.255:65535"))
	k.WriteString(s.Name)
	k.WriteByte('/')
	var ap [len("255.255.255.255:65535")]byte
	k.Write(netip.AddrPortFrom(b.Address, b.Port).AppendTo(ap[:0]))
	return k.String()
}

// targetChanges is what the prober must be told to go from the targets
// of before (each service's, by name, as the last call returned them) to
// those of cfg: one probe target per (service, backend), drained backends
// included (their health is shown even though they get no flows). A
// service whose backends are as they were (the same addresses, ports,
// weights and checks, in the same order) keeps its targets and adds
// nothing, so that an apply builds keys, and the prober looks targets
// up, for the services that changed only. A changed service lists all
// its targets again in add (the prober keeps the state of those given
// unchanged); remove holds the keys that no longer exist.
func targetChanges(cfg *config.Config, before map[string]probed) (add []health.Target, remove []string, now map[string]probed) {
	now = make(map[string]probed, len(cfg.Services))
	for _, s := range cfg.Services {
		p, ok := before[s.Name]
		if ok && slices.Equal(p.backends, s.Backends) {
			now[s.Name] = p
			continue
		}
		q := probed{backends: slices.Clone(s.Backends), targets: make([]health.Target, 0, len(s.Backends))}
		for _, b := range s.Backends {
			q.targets = append(q.targets, health.Target{Key: TargetKey(s, b), Addr: b.Address, Check: checkOf(b.HealthCheck)})
		}
		now[s.Name] = q
		add = append(add, q.targets...)
		if ok {
			keep := make(map[string]bool, len(q.targets))
			for _, t := range q.targets {
				keep[t.Key] = true
			}
			for _, t := range p.targets {
				if !keep[t.Key] {
					remove = append(remove, t.Key)
				}
			}
		}
	}
	for name, p := range before {
		if _, ok := now[name]; !ok {
			for _, t := range p.targets {
				remove = append(remove, t.Key)
			}
		}
	}
	return add, remove, now
}

// probed is one service's targets, and the backends they were made from.
type probed struct {
	backends []config.Backend
	targets  []health.Target
}

func checkOf(hc config.HealthCheck) health.Check {
	t := hc.Type
	if t == "" {
		t = config.CheckNone // a Config built in code rather than parsed
	}
	return health.Check{
		Type: t, Port: hc.Port, Path: hc.Path, StatusMin: hc.StatusMin, StatusMax: hc.StatusMax,
		Interval: hc.Interval, Timeout: hc.Timeout, Rise: hc.Rise, Fall: hc.Fall,
	}
}

// downSet returns the keys of cfg's backends that snap reports
// unhealthy. A backend missing from snap has not been probed yet and,
// like Unknown, counts as healthy. It looks at snap's unhealthy results
// only, so Prober.Unhealthy serves as well as Snapshot: a change then
// costs no key for every backend when few are down.
func downSet(cfg *config.Config, snap map[string]health.Result) map[string]bool {
	down := make(map[string]bool)
	var byName map[string]*config.Service
	for k, r := range snap {
		if r.Healthy() {
			continue
		}
		if byName == nil {
			byName = servicesByName(cfg)
		}
		name, ap, ok := splitKey(k)
		if s := byName[name]; ok && s != nil && slices.ContainsFunc(s.Backends, func(b config.Backend) bool {
			return b.Address == ap.Addr() && b.Port == ap.Port()
		}) {
			down[k] = true
		}
	}
	return down
}

func servicesByName(cfg *config.Config) map[string]*config.Service {
	m := make(map[string]*config.Service, len(cfg.Services))
	for i := range cfg.Services {
		m[cfg.Services[i].Name] = &cfg.Services[i]
	}
	return m
}

// splitKey splits a TargetKey into the service's name (which may hold a
// '/') and the backend's address and port.
func splitKey(k string) (name string, ap netip.AddrPort, ok bool) {
	i := strings.LastIndexByte(k, '/')
	if i < 0 {
		return "", netip.AddrPort{}, false
	}
	ap, err := netip.ParseAddrPort(k[i+1:])
	return k[:i], ap, err == nil
}

// downByService is down (keys, TargetKey) as the addresses and ports of
// the down backends of each service, by name: what withHealth and
// servicesDown look up, so that they touch the services with a down
// backend only.
func downByService(down map[string]bool) map[string]map[netip.AddrPort]bool {
	out := make(map[string]map[netip.AddrPort]bool)
	for k := range down {
		name, ap, ok := splitKey(k)
		if !ok {
			continue
		}
		if out[name] == nil {
			out[name] = make(map[netip.AddrPort]bool)
		}
		out[name][ap] = true
	}
	return out
}

// withHealth returns cfg with every backend in down given weight 0: it
// keeps its backend ID and counters in the data plane, as a drained
// backend does, but no table slot, so no new flow reaches it. cfg itself
// is not changed; a service without a down backend is shared.
func withHealth(cfg *config.Config, down map[string]bool) *config.Config {
	if len(down) == 0 {
		return cfg
	}
	bySvc := downByService(down)
	out := *cfg
	out.Services = slices.Clone(cfg.Services)
	for i := range out.Services {
		s := &out.Services[i]
		set := bySvc[s.Name]
		if set == nil {
			continue
		}
		copied := false
		for j, b := range s.Backends {
			if b.Weight == 0 || !set[netip.AddrPortFrom(b.Address, b.Port)] {
				continue
			}
			if !copied {
				s.Backends = slices.Clone(s.Backends)
				copied = true
			}
			s.Backends[j].Weight = 0
		}
	}
	return &out
}

// servicesDown returns the names of cfg's services whose every backend
// with a weight above 0 is down: their tables name no backend, and the
// data plane drops their packets (drop_no_backend).
func servicesDown(cfg *config.Config, down map[string]bool) map[string]bool {
	out := make(map[string]bool)
	if len(down) == 0 {
		return out
	}
	bySvc := downByService(down)
	for _, s := range cfg.Services {
		set := bySvc[s.Name]
		if set == nil {
			continue
		}
		active, up := false, false
		for _, b := range s.Backends {
			if b.Weight == 0 {
				continue
			}
			active = true
			if !set[netip.AddrPortFrom(b.Address, b.Port)] {
				up = true
				break
			}
		}
		if active && !up {
			out[s.Name] = true
		}
	}
	return out
}

// program applies cfg with the health that snap reports, and records what
// it applied. The caller holds applyMu.
func (a *Agent) program(trigger string, cfg *config.Config, snap map[string]health.Result) error {
	down := downSet(cfg, snap)
	start := time.Now()
	err := a.rec.Apply(withHealth(cfg, down))
	a.timings.observe(trigger, time.Since(start))
	svcDown := servicesDown(cfg, down)
	a.mu.Lock()
	a.lastApply = time.Now()
	wasDown := a.down
	a.down = down
	prevDown := a.svcDown
	a.svcDown = svcDown
	a.mu.Unlock()
	a.endSessions(cfg, wasDown, down)
	a.logServices(prevDown, svcDown)
	a.syncRoutes(cfg, svcDown)
	return err
}

// syncHealth logs the backends whose health changed and, if the set of
// unhealthy backends differs from the applied one, applies the running
// configuration again. The reconciler rewrites only the tables of the
// services concerned.
func (a *Agent) syncHealth() {
	a.applyMu.Lock()
	defer a.applyMu.Unlock()
	a.mu.Lock()
	cfg, applied := a.cfg, a.down
	a.mu.Unlock()

	snap := a.prober.Snapshot()
	a.logBackends(cfg, snap)
	if maps.Equal(downSet(cfg, snap), applied) {
		return
	}
	err := a.program(triggerHealth, cfg, snap)
	a.mu.Lock()
	switch {
	case err != nil:
		a.applyErr = fmt.Errorf("apply: %w", err)
	case a.applyErr != nil && !a.bgpFailed:
		// The whole configuration went in: the earlier failure is over
		// (unless the bgp section is still to be handed over).
		a.applyErr = nil
	}
	a.mu.Unlock()
	if err != nil {
		a.log.Warn("applying a health change failed; retrying", "error", err,
			"fix", "see the error; the agent retries every "+a.retryEvery.String())
	}
}

// logBackends logs every backend whose state differs from the one logged
// before, and remembers the new states.
func (a *Agent) logBackends(cfg *config.Config, snap map[string]health.Result) {
	states := make(map[string]health.State, len(snap))
	for _, s := range cfg.Services {
		for _, b := range s.Backends {
			k := TargetKey(s, b)
			r, ok := snap[k]
			if !ok {
				continue
			}
			states[k] = r.State
			prev, seen := a.states[k]
			if !seen {
				prev = health.Unknown
			}
			if r.State == prev {
				continue
			}
			be := netip.AddrPortFrom(b.Address, b.Port).String()
			attrs := []any{"service", s.Name, "backend", be, "from", string(prev), "to", string(r.State), "check", string(b.HealthCheck.Type)}
			switch {
			case r.State == health.Down:
				a.log.Warn("backend failed its health checks: it gets no new flows, and its open connections break", append(attrs,
					"error", r.LastError,
					"fix", fmt.Sprintf("check the server at %s (%s); it gets new flows again after %d successful checks in a row",
						be, describeCheck(b), b.HealthCheck.Rise))...)
			case r.State == health.Up && prev == health.Down:
				a.log.Info("backend passes its health checks again: it gets new flows", attrs...)
			default:
				a.log.Debug("backend health", attrs...)
			}
		}
	}
	a.states = states
}

// logServices logs the services that went down or came back.
func (a *Agent) logServices(prev, cur map[string]bool) {
	for name := range cur {
		if !prev[name] {
			a.log.Error("service has no healthy backend: the node drops its packets (drop_no_backend)", "service", name,
				"fix", "bring a backend back (see the errors in `xlb status`) or add one to the configuration")
		}
	}
	for name := range prev {
		if !cur[name] {
			a.log.Info("service has a healthy backend again", "service", name)
		}
	}
}

// describeCheck says what the check of b probes, for a log message.
func describeCheck(b config.Backend) string {
	hc := b.HealthCheck
	switch hc.Type {
	case config.CheckHTTP:
		return fmt.Sprintf("GET http://%s%s must answer %d-%d within %s", netip.AddrPortFrom(b.Address, hc.Port), hc.Path, hc.StatusMin, hc.StatusMax, hc.Timeout)
	case config.CheckTCP:
		return fmt.Sprintf("a TCP connect to %s must succeed within %s", netip.AddrPortFrom(b.Address, hc.Port), hc.Timeout)
	}
	return "no check"
}

// healthOf reports r, the prober's result for backend b, for the API. A
// backend the prober does not know yet is unknown.
func healthOf(b config.Backend, r health.Result) api.Health {
	h := api.Health{
		Check:     string(checkOf(b.HealthCheck).Type),
		State:     api.StateUnknown,
		Since:     r.Since,
		LastCheck: r.LastCheck,
		LastError: r.LastError,
		LatencyMs: float64(r.LastLatency.Microseconds()) / 1000,
	}
	switch r.State {
	case health.Up:
		h.State = api.StateUp
	case health.Down:
		h.State = api.StateDown
	}
	return h
}
