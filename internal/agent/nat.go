package agent

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/dataplane/lb"
)

// The NAT services' sessions live in the data plane's session table;
// the agent reclaims the expired ones, ends those of a backend that
// fails its health checks, and reports them.

// expireSessions reclaims expired NAT sessions every expireEvery until
// ctx ends (expireOnce).
func (a *Agent) expireSessions(ctx context.Context) {
	tick := time.NewTicker(a.expireEvery)
	defer tick.Stop()
	failing := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			failing = a.expireOnce(failing)
		}
	}
}

// expireOnce reclaims the expired NAT sessions while a service has
// forwarding nat or dnat; the packet path already treats an expired
// session as gone, and this frees its entry. failing is the error of
// the last call ("" if it worked), which expireOnce returns for this
// one: a failure is logged when it starts and when it ends, not every
// second.
func (a *Agent) expireOnce(failing string) string {
	a.mu.Lock()
	cfg := a.cfg
	a.mu.Unlock()
	if !UsesNAT(cfg) {
		return failing
	}
	n, err := a.dp.ExpireSessions()
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	a.mu.Lock()
	a.expireErr = msg
	a.mu.Unlock()
	switch {
	case err != nil && msg != failing:
		a.log.Warn("reclaiming expired NAT sessions failed", "error", err,
			"fix", "nothing breaks at once (the packet path ignores expired sessions), but their entries stay taken and the table fills: see the error; the agent tries again every "+a.expireEvery.String())
	case err == nil && failing != "":
		a.log.Info("reclaiming expired NAT sessions works again", "reclaimed", n)
	case n > 0:
		a.log.Debug("reclaimed expired NAT sessions", "reclaimed", n)
	}
	return msg
}

// endSessions ends at once the NAT sessions of the backends of NAT
// services that down holds and before did not: they failed their health
// checks, and their connections would otherwise hang until they time
// out. A backend that merely leaves the configuration (drained) keeps
// its sessions. Called after the tables without those backends went in,
// so that no new session reaches them.
func (a *Agent) endSessions(cfg *config.Config, before, down map[string]bool) {
	if len(down) == 0 || !UsesNAT(cfg) {
		return
	}
	for _, s := range cfg.Services {
		if !s.Forwarding.Translates() {
			continue
		}
		var ids map[netip.AddrPort]uint32
		for _, b := range s.Backends {
			k := TargetKey(s, b)
			if !down[k] || before[k] {
				continue
			}
			if ids == nil {
				key, err := serviceKey(s)
				if err != nil {
					break
				}
				if _, ids, _ = a.rec.ids(key); ids == nil {
					break // not installed: no session can name it
				}
			}
			ap := netip.AddrPortFrom(b.Address, b.Port)
			id, ok := ids[ap]
			if !ok {
				continue
			}
			n, err := a.dp.EndBackendSessions(id)
			if err != nil {
				a.log.Warn("could not end the NAT sessions of a backend that failed its health checks", "service", s.Name, "backend", ap, "error", err,
					"fix", "its clients' connections hang until their sessions time out (nat.timeouts); see the error")
				continue
			}
			a.log.Info("ended the NAT sessions of a backend that failed its health checks", "service", s.Name, "backend", ap, "sessions", n)
		}
	}
}

// natStatus reports the NAT session table.
func (a *Agent) natStatus(cfg *config.Config) (*api.NAT, error) {
	c, err := a.dp.NATCounters()
	if err != nil {
		return nil, fmt.Errorf("read NAT counters: %w", err)
	}
	nc := natConfigOf(cfg.NAT, a.node.Address)
	capacity := uint64(a.dp.Shape().NATSessions)
	if capacity == 0 {
		capacity = uint64(cfg.NAT.Sessions)
	}
	a.mu.Lock()
	expireErr := a.expireErr
	a.mu.Unlock()
	return &api.NAT{
		Address: nc.Address, Address6: a.node.Address6, Ports: cfg.NAT.Ports.String(),
		Sessions: c.Sessions, Embryonic: c.Embryonic, Capacity: capacity,
		Created: c.Created, AllocFailures: c.AllocFailures, Expired: c.Expired, NoReply: c.NoReply,
		ReverseMisses: c.ReverseMisses, FragmentsDropped: c.Fragments, ICMPTranslated: c.ICMPTranslated,
		ExpireError: expireErr,
	}, nil
}

// Sessions lists a sample of the sessions of each NAT service q names
// (GET /v1/sessions, `xlb status --sessions`).
func (a *Agent) Sessions(q api.SessionQuery) (*api.Sessions, error) {
	a.mu.Lock()
	cfg := a.cfg
	a.mu.Unlock()
	out := &api.Sessions{Services: []api.ServiceSessions{}}
	var others []string
	for _, s := range cfg.Services {
		if s.VIP != q.VIP || q.Port != 0 && s.Port != q.Port || q.Protocol != "" && string(s.Protocol) != q.Protocol {
			continue
		}
		if !s.Forwarding.Translates() {
			others = append(others, fmt.Sprintf("%s (%d/%s, %s)", s.Name, s.Port, s.Protocol, s.Forwarding))
			continue
		}
		key, err := serviceKey(s)
		if err != nil {
			return nil, fmt.Errorf("service %q: %w", s.Name, err)
		}
		// One more than asked: whether there are more.
		list, err := a.dp.Sessions(key.VIP, key.Port, key.Proto, q.Max+1)
		if err != nil {
			return nil, fmt.Errorf("service %q: list sessions: %w", s.Name, err)
		}
		ss := api.ServiceSessions{Name: s.Name, VIP: s.VIP, Port: s.Port, Protocol: string(s.Protocol), Forwarding: string(s.Forwarding),
			Sessions: make([]api.Session, 0, min(len(list), q.Max)), More: len(list) > q.Max}
		for _, x := range list[:min(len(list), q.Max)] {
			ss.Sessions = append(ss.Sessions, sessionOf(x))
		}
		out.Services = append(out.Services, ss)
	}
	if len(out.Services) == 0 {
		what := "no service"
		if len(others) > 0 {
			what = "only " + joinNames(others) + ", which forward with direct server return and hold no session"
		}
		return nil, fmt.Errorf("%w at %s: it has %s; `xlb status` lists the services", api.ErrNoNATService, q, what)
	}
	return out, nil
}

// sessionOf is one session as the API shows it.
func sessionOf(s lb.Session) api.Session {
	return api.Session{Client: s.Client, Backend: s.Backend, Source: s.Source, State: s.State, Replied: s.Replied, IdleSeconds: s.Idle.Seconds()}
}

// joinNames lists a few names, then how many more.
func joinNames(names []string) string {
	const shown = 3
	slices.SortFunc(names, cmp.Compare)
	if len(names) <= shown {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:shown], ", "), len(names)-shown)
}
