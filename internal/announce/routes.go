package announce

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
)

// reopenEvery bounds how often Routes tries again to start a speaker that
// failed to start (a listener port in use, say).
const reopenEvery = 5 * time.Second

// Plan decides, for each VIP of services, whether this node can serve it:
// some service of the VIP is installed in the data plane, has a backend
// with a weight above 0, and is not down (in down, by name). Services
// sharing a VIP share its route (the configuration makes their
// attributes agree).
func Plan(services []config.Service, down map[string]bool, installed func(config.Service) bool) []Route {
	byVIP := map[netip.Addr]*Route{}
	var order []netip.Addr
	for _, s := range services {
		r := byVIP[s.VIP]
		if r == nil {
			r = &Route{Prefix: netip.PrefixFrom(s.VIP, s.VIP.BitLen()), Attrs: s.BGP, Why: "no service of this VIP is programmed"}
			byVIP[s.VIP] = r
			order = append(order, s.VIP)
		}
		switch {
		case r.Serve || !installed(s):
		case down[s.Name]:
			r.Why = "every backend is down"
		case !slices.ContainsFunc(s.Backends, func(b config.Backend) bool { return b.Weight > 0 }):
			r.Why = "every backend is drained (weight 0)"
		default:
			r.Serve, r.Why = true, ""
		}
	}
	out := make([]Route, 0, len(order))
	for _, v := range order {
		out = append(out, *byVIP[v])
	}
	return out
}

// SyncFix is what to do about a failed Routes.Sync or Announcer.Sync.
var SyncFix = fmt.Sprintf("nothing to do if it clears: a route the speaker refused is tried again by itself, %s later, then at most every %s, "+
	"and at every change; `xlb status` shows the error on the route and the state of the peers meanwhile; "+
	"a speaker that failed to start is tried again at the next change; if it keeps failing, restart the agent", RetryFirst, RetryMax)

// Routes announces the VIPs as an Announcer does, for a bgp section that
// may come and go: with Kubernetes the peers are BGPPeer objects, so a
// node may start with none, get its first later, lose them all, or see
// its AS change; a reloaded file may add or remove its bgp section.
// Routes runs an announcer while there is a section and replaces it when
// what an announcer cannot change in place (AS, router ID, listener
// port) changes. The agent announces through it in every mode.
type Routes struct {
	log *slog.Logger
	// open creates an announcer; replaced by tests.
	open func(*config.BGP) (announcer, error)

	mu       sync.Mutex
	ctx      context.Context // from Start
	started  bool            // since Start
	stopped  bool            // since Shutdown: no announcer opens any more
	want     *config.BGP     // the section to run; nil: none
	cur      announcer       // nil without a section, or while it fails to start
	cfg      *config.BGP     // cur's section
	routes   []Route
	lastOpen time.Time // of the last failed attempt
	// deferred: cur waits for the first Sync to start (graceful restart).
	deferred bool
}

// announcer is what Routes needs of an Announcer.
type announcer interface {
	Start(context.Context) error
	Sync([]Route) error
	Reconfigure(context.Context, *config.BGP) error
	Shutdown(context.Context) error
	Restart(context.Context) error
	Status() *api.BGP
}

// NewRoutes prepares the announcements of a node whose addresses are
// node (IPv4) and node6 (IPv6; either may be invalid: none of that
// family), with the bgp section of the first configuration (nil: none
// yet). An announcer for that section is created at once, so that what
// keeps it from being created stops the agent's start.
func NewRoutes(cfg *config.BGP, node, node6 netip.Addr, log *slog.Logger) (*Routes, error) {
	r := &Routes{log: log, want: cfg}
	r.open = func(c *config.BGP) (announcer, error) { return New(c, node, node6, log) }
	if cfg != nil {
		a, err := r.open(cfg)
		if err != nil {
			return nil, err
		}
		r.cur, r.cfg = a, cfg
	}
	return r, nil
}

// Start starts the announcer, if there is one, and any created later;
// ctx bounds their background work.
func (r *Routes) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ctx, r.started = ctx, true
	if r.cur != nil {
		// With graceful restart a router may still hold the previous
		// run's routes, and drops those missing from the End-of-RIB that
		// follows a new session's first UPDATEs: the sessions wait for
		// the first routes, so that what is still served stays.
		if hasGracefulRestart(r.cfg) {
			r.deferred = true
			return nil
		}
		if err := r.cur.Start(ctx); err != nil {
			r.cur, r.cfg, r.lastOpen = nil, nil, time.Now()
			return err
		}
		return nil
	}
	return r.ensure()
}

// Sync announces routes. Without a running announcer it remembers them
// for the next one, and tries again to start one that failed to.
func (r *Routes) Sync(routes []Route) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.routes = slices.Clone(routes)
	if !r.started || r.stopped {
		return nil
	}
	if r.deferred && r.cur != nil {
		r.deferred = false
		// Recorded first: the speaker announces them as it starts.
		syncErr := r.cur.Sync(routes)
		if err := r.cur.Start(r.ctx); err != nil {
			r.cur, r.cfg, r.lastOpen = nil, nil, time.Now()
			return err
		}
		return syncErr
	}
	if r.cur == nil {
		if time.Since(r.lastOpen) < reopenEvery {
			return nil
		}
		// A speaker that opens announces the routes itself.
		return r.ensure()
	}
	return r.cur.Sync(routes)
}

// Reconfigure follows a changed bgp section; nil stops announcing.
func (r *Routes) Reconfigure(ctx context.Context, cfg *config.BGP) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.want = cfg
	if r.cur != nil && cfg != nil && sameSpeaker(r.cfg, cfg) {
		if err := r.cur.Reconfigure(ctx, cfg); err != nil {
			return err
		}
		r.cfg = cfg
		return nil
	}
	if r.cur != nil {
		r.close()
	}
	r.deferred = false
	return r.ensure()
}

// ensure opens (and, once started, starts) an announcer for want when
// none runs. The caller holds mu.
func (r *Routes) ensure() error {
	if r.want == nil || r.cur != nil || r.stopped {
		return nil
	}
	a, err := r.open(r.want)
	if err != nil {
		r.lastOpen = time.Now()
		return err
	}
	if r.started {
		if err := a.Start(r.ctx); err != nil {
			r.lastOpen = time.Now()
			return err
		}
		if err := a.Sync(r.routes); err != nil {
			r.log.Warn("BGP announcements failed", "error", err,
				"fix", fmt.Sprintf("nothing to do if it clears: a route the speaker refused is tried again by itself, %s later, then at most every %s, "+
					"and at every change; `xlb status` shows the error on the route meanwhile; if it keeps failing, restart the agent, one node at a time",
					RetryFirst, RetryMax))
		}
	}
	r.cur, r.cfg = a, r.want
	r.log.Info("BGP speaker started for the bgp section", "asn", r.want.ASN, "peers", len(r.want.Peers))
	return nil
}

// sameSpeaker reports whether b can be applied to a's speaker in place.
func sameSpeaker(a, b *config.BGP) bool {
	return a.ASN == b.ASN && a.RouterID == b.RouterID && a.ListenPort == b.ListenPort
}

// close withdraws every route of the current announcer and stops it,
// without waiting the drain time: its peers are gone or change AS, so
// there is no one to drain towards. The caller holds mu.
func (r *Routes) close() {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.cur.Shutdown(done); err != nil {
		r.log.Warn("BGP speaker stopped with an error", "error", err,
			"fix", "nothing to do if `xlb status` shows the new speaker's peers coming up; if the new speaker cannot start (its port still taken), "+
				"it is tried again at the next route change, at most every "+reopenEvery.String()+"; if that keeps failing, restart the agent")
	}
	r.log.Info("BGP speaker stopped", "asn", r.cfg.ASN)
	r.cur, r.cfg = nil, nil
}

// Shutdown withdraws every route, waits the drain time and stops, as
// Announcer.Shutdown does. No announcer starts afterwards.
func (r *Routes) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	if r.cur == nil {
		return nil
	}
	err := r.cur.Shutdown(ctx)
	r.cur, r.cfg = nil, nil
	return err
}

// Restart stops for a restart of the agent, as Announcer.Restart does:
// with graceful restart the peers keep the routes; without, it is
// Shutdown. No announcer starts afterwards.
func (r *Routes) Restart(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	if r.cur == nil {
		return nil
	}
	var err error
	if r.deferred {
		// Never started: nothing to keep or withdraw.
		err = r.cur.Shutdown(ctx)
	} else {
		err = r.cur.Restart(ctx)
	}
	r.cur, r.cfg = nil, nil
	return err
}

// Graceful says whether a peer of the running speaker has graceful
// restart: only then does Restart differ from Shutdown.
func (r *Routes) Graceful() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur == nil || r.cfg == nil {
		return false
	}
	for _, p := range r.cfg.Peers {
		if p.GracefulRestart != nil {
			return true
		}
	}
	return false
}

// Status reports the running speaker; nil without one.
func (r *Routes) Status() *api.BGP {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur == nil {
		return nil
	}
	return r.cur.Status()
}
