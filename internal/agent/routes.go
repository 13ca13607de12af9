package agent

import (
	"context"

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
	if a.l2 != nil {
		if err := a.l2.Sync(routes); err != nil {
			a.log.Warn("layer-2 mode: the ARP answers could not be programmed", "error", err,
				"fix", "see the error; the agent tries again at every heartbeat")
		}
	}
	if a.routes == nil {
		return
	}
	routes = announce.Shape(routes, cfg.Announcements)
	if err := a.routes.Sync(routes); err != nil {
		a.log.Warn("BGP announcements failed", "error", err, "fix", announce.SyncFix)
	}
}
