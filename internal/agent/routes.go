package agent

import (
	"context"
	"net/netip"

	"github.com/xlbproject/xlb/internal/announce"
	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
)

// Routes announces the VIPs this node can serve (an *announce.Routes).
type Routes interface {
	Sync([]announce.Route) error
	Reconfigure(context.Context, *config.BGP) error
	Status() *api.BGP
}

// L2 is layer-2 mode's speaker (package l2): it answers ARP for the
// VIPs of routes that this node can serve and owns.
type L2 interface {
	Sync([]announce.Route) error
	Status() *api.L2
}

var (
	_ Routes = (*announce.Routes)(nil)
	_ Routes = (*announce.Announcer)(nil)
)

// syncRoutes announces what cfg with svcDown (from servicesDown) lets this
// node serve. The caller holds applyMu. Routes stay unannounced until Run
// starts: the data plane is attached only then.
func (a *Agent) syncRoutes(cfg *config.Config, svcDown map[string]bool) {
	if a.routes == nil && a.l2 == nil || !a.routesLive {
		return
	}
	routes := announce.Plan(cfg.Services, svcDown, func(s config.Service) bool {
		key, err := serviceKey(s)
		if err != nil {
			return false
		}
		_, _, ok := a.rec.ids(key)
		return ok
	})
	arp, bgp := splitRoutes(cfg, routes)
	if a.l2 != nil {
		if err := a.l2.Sync(arp); err != nil {
			a.log.Warn("layer-2 mode: the ARP answers could not be programmed", "error", err,
				"fix", "see the error; the agent tries again at every heartbeat")
		}
	}
	if a.routes == nil {
		return
	}
	bgp = announce.Shape(bgp, cfg.Announcements)
	if err := a.routes.Sync(bgp); err != nil {
		a.log.Warn("BGP announcements failed", "error", err, "fix", announce.SyncFix)
	}
}

// splitRoutes parts routes into the VIPs answered by ARP and the ones
// announced over BGP: every VIP with node.announce: l2, else the VIPs
// of the services with announce: l2 (from an AddressPool with announce:
// l2), so that a node serves BGP pools and l2 pools side by side.
func splitRoutes(cfg *config.Config, routes []announce.Route) (arp, bgp []announce.Route) {
	if cfg.Node.Announce == config.AnnounceL2 {
		return routes, nil
	}
	l2 := map[netip.Addr]bool{}
	for _, s := range cfg.Services {
		if s.Announce == config.AnnounceL2 {
			l2[s.VIP] = true
		}
	}
	if len(l2) == 0 {
		return nil, routes
	}
	for _, r := range routes {
		if l2[r.Prefix.Addr()] {
			arp = append(arp, r)
		} else {
			bgp = append(bgp, r)
		}
	}
	return arp, bgp
}
