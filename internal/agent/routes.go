package agent

import (
	"context"
	"net/netip"

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
// some service of the VIP is installed in the data plane and has a
// backend with a weight above 0 that is not down. Services sharing a VIP
// share its route (the configuration makes their attributes agree).
func routesFor(cfg *config.Config, down map[string]bool, installed func(config.Service) bool) []announce.Route {
	byVIP := map[netip.Addr]*announce.Route{}
	var order []netip.Addr
	for _, s := range cfg.Services {
		r := byVIP[s.VIP]
		if r == nil {
			r = &announce.Route{Prefix: netip.PrefixFrom(s.VIP, 32), Attrs: s.BGP, Why: "no service of this VIP is programmed"}
			byVIP[s.VIP] = r
			order = append(order, s.VIP)
		}
		if r.Serve {
			continue
		}
		if !installed(s) {
			continue
		}
		active := false
		for _, b := range s.Backends {
			if b.Weight == 0 {
				continue
			}
			active = true
			if !down[TargetKey(s, b)] {
				r.Serve, r.Why = true, ""
				break
			}
		}
		if !r.Serve {
			if active {
				r.Why = "every backend is down"
			} else {
				r.Why = "every backend is drained (weight 0)"
			}
		}
	}
	out := make([]announce.Route, 0, len(order))
	for _, v := range order {
		out = append(out, *byVIP[v])
	}
	return out
}

// syncRoutes announces what cfg with down lets this node serve. The caller
// holds applyMu. Routes stay unannounced until Run starts: the data plane
// is attached only then.
func (a *Agent) syncRoutes(cfg *config.Config, down map[string]bool) {
	if a.routes == nil || !a.routesLive {
		return
	}
	routes := routesFor(cfg, down, func(s config.Service) bool {
		key, err := serviceKey(s)
		if err != nil {
			return false
		}
		_, _, ok := a.rec.ids(key)
		return ok
	})
	if err := a.routes.Sync(routes); err != nil {
		a.log.Warn("BGP announcements failed", "error", err, "fix", "see the peers in `xlb status`; they are retried on the next change")
	}
}
