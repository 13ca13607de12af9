package agent

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/xlbproject/xlb/internal/announce"
	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
)

// Routes announces the VIPs this node can serve (an *announce.Announcer).
type Routes interface {
	Sync([]announce.Route) error
	Reconfigure(context.Context, *config.BGP) error
	Status() *api.BGP
}

var _ Routes = (*announce.Announcer)(nil)

// routesFor decides, for each VIP of cfg, whether this node can serve it:
// some service of the VIP is installed in the data plane, has a backend
// with a weight above 0, and is not down (svcDown, from servicesDown).
// Services sharing a VIP share its route (the configuration makes their
// attributes agree).
func routesFor(cfg *config.Config, svcDown map[string]bool, installed func(config.Service) bool) []announce.Route {
	byVIP := map[netip.Addr]*announce.Route{}
	var order []netip.Addr
	for _, s := range cfg.Services {
		r := byVIP[s.VIP]
		if r == nil {
			r = &announce.Route{Prefix: netip.PrefixFrom(s.VIP, 32), Attrs: s.BGP, Why: "no service of this VIP is programmed"}
			byVIP[s.VIP] = r
			order = append(order, s.VIP)
		}
		switch {
		case r.Serve || !installed(s):
		case svcDown[s.Name]:
			r.Why = "every backend is down"
		case !slices.ContainsFunc(s.Backends, func(b config.Backend) bool { return b.Weight > 0 }):
			r.Why = "every backend is drained (weight 0)"
		default:
			r.Serve, r.Why = true, ""
		}
	}
	out := make([]announce.Route, 0, len(order))
	for _, v := range order {
		out = append(out, *byVIP[v])
	}
	return out
}

// syncFix is the fix of a failed Routes.Sync.
var syncFix = fmt.Sprintf("nothing to do if it clears: a route the speaker refused is tried again by itself, %s later, then at most every %s, "+
	"and at every change; `xlb status` shows the error on the route and the state of the peers meanwhile; "+
	"a speaker that failed to start is tried again at the next change; if it keeps failing, restart the agent", announce.RetryFirst, announce.RetryMax)

// syncRoutes announces what cfg with svcDown lets this node serve. The caller
// holds applyMu. Routes stay unannounced until Run starts: the data plane
// is attached only then.
func (a *Agent) syncRoutes(cfg *config.Config, svcDown map[string]bool) {
	if a.routes == nil || !a.routesLive {
		return
	}
	routes := routesFor(cfg, svcDown, func(s config.Service) bool {
		key, err := serviceKey(s)
		if err != nil {
			return false
		}
		_, _, ok := a.rec.ids(key)
		return ok
	})
	if err := a.routes.Sync(routes); err != nil {
		a.log.Warn("BGP announcements failed", "error", err, "fix", syncFix)
	}
}
