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

var (
	_ Routes = (*announce.Routes)(nil)
	_ Routes = (*announce.Announcer)(nil)
)

// syncRoutes announces what cfg with svcDown (from servicesDown) lets this
// node serve. The caller holds applyMu. Routes stay unannounced until Run
// starts: the data plane is attached only then.
func (a *Agent) syncRoutes(cfg *config.Config, svcDown map[string]bool) {
	if a.routes == nil || !a.routesLive {
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
	routes = announce.Shape(routes, cfg.Announcements)
	if err := a.routes.Sync(routes); err != nil {
		a.log.Warn("BGP announcements failed", "error", err, "fix", announce.SyncFix)
	}
}
