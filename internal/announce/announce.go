// Package announce keeps this node's BGP announcements in step with what
// its data plane can serve: a VIP is announced (VIP/32 with next hop =
// the node's IPv4 address, VIP/128 with its IPv6 address) while at least one of its services is installed and has a
// healthy backend, and withdrawn otherwise. It runs the BGP speaker and,
// for the peers that ask for it, BFD: a peer whose BFD session goes down
// has its BGP session taken down at once, instead of after the hold time.
package announce

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/bfd"
	"github.com/xlbproject/xlb/internal/bgp"
	"github.com/xlbproject/xlb/internal/config"
)

// bfdResetHold is how long a BGP session stays down after BFD declared
// its peer down, before it may re-form.
const bfdResetHold = time.Second

// What the speaker refuses (announcing or withdrawing a route, letting a
// held-down session re-form) is asked again RetryFirst later, then twice
// as late each time, at most RetryMax apart, until the speaker agrees:
// a transient GoBGP error must not leave a VIP unannounced, or a session
// down, until the next change or restart.
const (
	RetryFirst = time.Second
	RetryMax   = 30 * time.Second
)

// speaker is what the announcer needs of *bgp.Speaker (the tests stand
// in for it).
type speaker interface {
	Start(context.Context) error
	Stop(context.Context) error
	StopGraceful(context.Context) error
	Announce(netip.Prefix, bgp.Attributes) error
	Withdraw(netip.Prefix) error
	WithdrawAll() error
	SetPeers([]bgp.Peer) error
	PeerDown(peer netip.Addr, reason string) error
	PeerUp(peer netip.Addr) error
	Peers() []bgp.PeerStatus
}

// Announcer owns the node's BGP speaker and BFD sessions.
type Announcer struct {
	log      *slog.Logger
	node     netip.Addr // IPv4; invalid if the node has none
	node6    netip.Addr // IPv6; invalid if the node has none
	asn      uint32
	routerID netip.Addr
	sp       speaker

	// retryFirst and retryMax are RetryFirst and RetryMax; tests shorten them.
	retryFirst, retryMax time.Duration

	mu sync.Mutex
	// bfd holds a Manager per family (bfd4, bfd6), nil until a peer of
	// that family asks for BFD.
	bfd   [2]*bfd.Manager
	bfdOf map[netip.Addr]bfd.Config // peers with BFD, by address
	want  map[netip.Prefix]bgp.Attributes
	why   map[netip.Prefix]string // why a configured VIP is not announced
	drain time.Duration
	// graceful: a peer has graceful restart (Restart keeps the routes).
	graceful bool
	// out is what the speaker accepted: want once every call succeeded.
	// failed holds, for each route where out and want differ, why the
	// speaker refused to make them agree.
	out    map[netip.Prefix]bgp.Attributes
	failed map[netip.Prefix]error
	// A failed route is retried after backoff, by the timer of
	// generation retryGen (a newer generation cancels an older timer).
	retry    *time.Timer
	retryGen uint64
	backoff  time.Duration
	// releases are the pending PeerUps of held-down peers.
	releases map[netip.Addr]*release
	closed   bool // since Shutdown: nothing is retried any more
}

// release is a pending PeerUp; a new one for the same peer replaces it.
type release struct{ timer *time.Timer }

// New prepares an announcer for cfg on a node whose addresses are node
// (IPv4) and node6 (IPv6), either invalid when the node has none of that
// family: the next hops of the routes of each family, and the sources of
// the sessions (BGP and BFD) to peers of each family.
func New(cfg *config.BGP, node, node6 netip.Addr, log *slog.Logger) (*Announcer, error) {
	if cfg == nil {
		return nil, errors.New("announce: no bgp configuration")
	}
	rid := cfg.RouterID
	if !rid.IsValid() {
		rid = node
	}
	listen := cfg.ListenPort
	if listen == 0 {
		listen = -1 // config: 0 means no listener; bgp.Options: -1 does
	}
	sp, err := bgp.New(bgp.Options{ASN: cfg.ASN, RouterID: rid, NextHop: node, NextHop6: node6, ListenPort: listen,
		Peers: peers(cfg), Logger: log})
	if err != nil {
		return nil, fmt.Errorf("bgp: %w", err)
	}
	a := newAnnouncer(cfg, node, rid, sp, log)
	a.node6 = node6
	return a, nil
}

func newAnnouncer(cfg *config.BGP, node, routerID netip.Addr, sp speaker, log *slog.Logger) *Announcer {
	return &Announcer{log: log, node: node, asn: cfg.ASN, routerID: routerID, sp: sp,
		retryFirst: RetryFirst, retryMax: RetryMax,
		bfdOf: bfdPeers(cfg), want: map[netip.Prefix]bgp.Attributes{}, why: map[netip.Prefix]string{},
		drain: cfg.DrainTime, graceful: hasGracefulRestart(cfg), out: map[netip.Prefix]bgp.Attributes{}, failed: map[netip.Prefix]error{},
		releases: map[netip.Addr]*release{}}
}

func peers(cfg *config.BGP) []bgp.Peer {
	out := make([]bgp.Peer, 0, len(cfg.Peers))
	for _, p := range cfg.Peers {
		bp := bgp.Peer{Address: p.Address, ASN: p.ASN, Port: p.Port, Password: p.Password,
			HoldTime: p.HoldTime, Keepalive: p.Keepalive, Multihop: p.Multihop, Passive: p.Passive, MaxPrefixes: p.MaxPrefixes}
		if g := p.GracefulRestart; g != nil {
			bp.RestartTime = g.RestartTime
		}
		out = append(out, bp)
	}
	return out
}

func hasGracefulRestart(cfg *config.BGP) bool {
	for _, p := range cfg.Peers {
		if p.GracefulRestart != nil {
			return true
		}
	}
	return false
}

func bfdPeers(cfg *config.BGP) map[netip.Addr]bfd.Config {
	out := map[netip.Addr]bfd.Config{}
	for _, p := range cfg.Peers {
		if p.BFD != nil {
			out[p.Address] = bfd.Config{MinTx: p.BFD.MinTx, MinRx: p.BFD.MinRx, Multiplier: p.BFD.Multiplier}
		}
	}
	return out
}

// Start starts the speaker and the BFD sessions. ctx bounds the
// announcer's background work; Shutdown ends it properly.
func (a *Announcer) Start(ctx context.Context) error {
	if err := a.sp.Start(ctx); err != nil {
		return fmt.Errorf("start BGP: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.syncBFD(ctx)
}

var familyNames = [2]string{"IPv4", "IPv6"}

// family is the index of addr's family in Announcer.bfd.
func family(addr netip.Addr) int {
	if addr.Is4() {
		return 0
	}
	return 1
}

// syncBFD makes the BFD sessions match bfdOf: each family's sessions
// run from the node's address of that family. The caller holds mu.
func (a *Announcer) syncBFD(ctx context.Context) error {
	var errs []error
	for fam, local := range []netip.Addr{a.node, a.node6} {
		m := a.bfd[fam]
		if m == nil {
			wanted := false
			for p := range a.bfdOf {
				wanted = wanted || family(p) == fam
			}
			if !wanted {
				continue
			}
			if !local.IsValid() {
				errs = append(errs, fmt.Errorf("BFD: a peer is %s, but the node has no %s address to run BFD from", familyNames[fam], familyNames[fam]))
				continue
			}
			var err error
			if m, err = bfd.NewManager(local, a.log); err != nil {
				errs = append(errs, fmt.Errorf("start BFD on %s: %w", local, err))
				continue
			}
			a.bfd[fam] = m
			go a.followBFD(ctx, m.Events())
		}
		for _, s := range m.Sessions() {
			if _, ok := a.bfdOf[s.Peer]; !ok {
				if err := m.Remove(s.Peer); err != nil && !errors.Is(err, bfd.ErrUnknownPeer) {
					errs = append(errs, err)
				}
				// BFD no longer guards the peer: it must not stay held down.
				a.release(s.Peer, a.retryFirst)
			}
		}
		for peer, c := range a.bfdOf {
			if family(peer) != fam {
				continue
			}
			if err := m.Add(peer, c); err != nil {
				errs = append(errs, fmt.Errorf("BFD with %s: %w", peer, err))
			}
		}
	}
	return errors.Join(errs...)
}

// followBFD takes a peer's BGP session down when its BFD session leaves
// Up, and lets it come back when BFD is Up again.
func (a *Announcer) followBFD(ctx context.Context, events <-chan bfd.Event) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			switch {
			case ev.State == bfd.StateUp:
				a.log.Info("BFD session up: BGP may run", "peer", ev.Peer)
				a.mu.Lock()
				a.release(ev.Peer, a.retryFirst)
				a.mu.Unlock()
			case ev.Previous == bfd.StateUp && ev.Diag == bfd.DiagNeighborDown && ev.RemoteDiag == bfd.DiagAdminDown:
				// The peer turned BFD off on purpose (RFC 5882 §3.2): not a
				// failure. If it is going away, BGP says so itself.
				a.log.Info("the peer took its BFD session down administratively; BGP is left alone", "peer", ev.Peer)
			case ev.Previous == bfd.StateUp:
				reason := fmt.Sprintf("BFD session down (%s)", ev.Diag)
				a.log.Warn("BFD declared the peer down: taking its BGP session down", "peer", ev.Peer, "diag", ev.Diag.String(),
					"fix", "check the link to the peer and that the peer runs BFD for this node")
				a.mu.Lock()
				// A release still pending (retried, or the hold of an
				// earlier reset) must not cut this hold short.
				a.cancelRelease(ev.Peer)
				if err := a.sp.PeerDown(ev.Peer, reason); err != nil {
					a.log.Warn("cannot take the BGP session down", "peer", ev.Peer, "error", err,
						"fix", "if the error says the peer is not configured, a reload removed it meanwhile: nothing to do; "+
							"else the session ends only when its hold time expires (holdTime), and the peer may send traffic here until then: check the link to the peer")
				}
				// A reset, not a lock-out: the peer may well have dropped
				// its BFD session with the BGP one (FRR does for dynamic
				// neighbours), so waiting for BFD to come back first could
				// wait forever. The session re-forms when the peer answers.
				a.releaseLater(ev.Peer, bfdResetHold, a.retryFirst)
				a.mu.Unlock()
			}
		}
	}
}

// release lets peer's BGP session re-form now. If the speaker refuses,
// it asks again backoff later, then twice as late each time, at most
// retryMax apart, until the speaker agrees or the peer goes down again.
// The speaker keeps the peer held down meanwhile (its status says so and
// why). The caller holds mu.
func (a *Announcer) release(peer netip.Addr, backoff time.Duration) {
	a.cancelRelease(peer)
	err := a.sp.PeerUp(peer)
	switch {
	case err == nil:
		if backoff > a.retryFirst {
			a.log.Info("BGP session released after all: it may re-form", "peer", peer)
		}
		return
	case errors.Is(err, bgp.ErrUnknownPeer):
		// A reload removed the peer meanwhile: nothing holds it any more.
		a.log.Debug("no BGP session to release: the peer is no longer configured", "peer", peer)
		return
	}
	a.log.Warn("the BGP session cannot be released: it stays down", "peer", peer, "error", err, "retryIn", backoff,
		"fix", fmt.Sprintf("nothing to do if it clears: the release is tried again in %s, then at most every %s, until GoBGP accepts "+
			"(`xlb status` shows the peer held down meanwhile); if this keeps failing, restart the agent", backoff, a.retryMax))
	a.releaseLater(peer, backoff, min(2*backoff, a.retryMax))
}

// releaseLater releases peer after d, with backoff for release's
// retries. It replaces a release already pending. The caller holds mu.
func (a *Announcer) releaseLater(peer netip.Addr, d, backoff time.Duration) {
	a.cancelRelease(peer)
	if a.closed {
		return
	}
	r := &release{}
	// The timer's function waits for mu, which the caller holds until
	// r is recorded.
	r.timer = time.AfterFunc(d, func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.releases[peer] != r {
			return // canceled, or replaced by a newer one
		}
		delete(a.releases, peer)
		a.release(peer, backoff)
	})
	a.releases[peer] = r
}

// cancelRelease drops peer's pending release. The caller holds mu.
func (a *Announcer) cancelRelease(peer netip.Addr) {
	if r := a.releases[peer]; r != nil {
		r.timer.Stop()
		delete(a.releases, peer)
	}
}

// Reconfigure applies a changed bgp section: peers are added, removed or
// updated without touching unchanged sessions. ASN and router ID changes
// need a restart, as the error says.
func (a *Announcer) Reconfigure(ctx context.Context, cfg *config.BGP) error {
	if cfg == nil {
		return errors.New("the bgp section was removed: restart the agent to stop announcing")
	}
	rid := cfg.RouterID
	if !rid.IsValid() {
		rid = a.node
	}
	if cfg.ASN != a.asn || rid != a.routerID {
		return fmt.Errorf("bgp.asn or bgp.routerID changed (%d %s → %d %s): restart the agent to apply it", a.asn, a.routerID, cfg.ASN, rid)
	}
	if err := a.sp.SetPeers(peers(cfg)); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.bfdOf = bfdPeers(cfg)
	a.drain = cfg.DrainTime
	a.graceful = hasGracefulRestart(cfg)
	return a.syncBFD(ctx)
}

// Route is one VIP this node may announce.
type Route struct {
	Prefix netip.Prefix
	Attrs  config.RouteAttributes
	// Serve is true when a service of the VIP is installed and has a
	// healthy backend; Why says otherwise why not.
	Serve bool
	Why   string
	// Peers, when not nil, are the only peers the route goes to
	// (Shape sets them).
	Peers []netip.Addr
}

// Sync announces the routes that can be served and withdraws every other.
// It returns what the speaker refused; that is retried by itself (see
// RetryFirst) and at every Sync, until the speaker agrees or the route
// is no longer in question, and Status shows the error on the route
// meanwhile.
func (a *Announcer) Sync(routes []Route) error {
	want := map[netip.Prefix]bgp.Attributes{}
	why := map[netip.Prefix]string{}
	for _, r := range routes {
		if r.Serve {
			want[r.Prefix] = attributes(r.Attrs)
			want[r.Prefix] = withPeers(want[r.Prefix], r.Peers)
		} else {
			why[r.Prefix] = r.Why
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.want, a.why = want, why
	return a.reconcile()
}

// reconcile makes the speaker's routes (out) match want, and arms the
// retry timer if the speaker refuses some of it. The caller holds mu.
func (a *Announcer) reconcile() error {
	failed := map[netip.Prefix]error{}
	for p := range a.out {
		if _, ok := a.want[p]; ok {
			continue
		}
		if err := a.sp.Withdraw(p); err != nil {
			failed[p] = fmt.Errorf("withdraw %s: %w", p, err)
			continue
		}
		delete(a.out, p)
		a.log.Info("route withdrawn", "prefix", p, "reason", a.why[p])
	}
	for p, attrs := range a.want {
		old, had := a.out[p]
		if had && attrsEqual(old, attrs) {
			continue
		}
		if err := a.sp.Announce(p, attrs); err != nil {
			failed[p] = fmt.Errorf("announce %s: %w", p, err)
			continue
		}
		a.out[p] = attrs
		if !had {
			nh := a.node
			if !p.Addr().Is4() {
				nh = a.node6
			}
			a.log.Info("route announced", "prefix", p, "nextHop", nh)
		}
	}
	a.failed = failed
	a.retryGen++ // cancels a pending retry: this pass did its work
	if a.retry != nil {
		a.retry.Stop()
		a.retry = nil
	}
	if len(failed) == 0 {
		a.backoff = 0
		return nil
	}
	if !a.closed {
		a.backoff = min(max(2*a.backoff, a.retryFirst), a.retryMax)
		gen := a.retryGen
		a.retry = time.AfterFunc(a.backoff, func() { a.retryRoutes(gen) })
	}
	errs := make([]error, 0, len(failed))
	for _, p := range slices.SortedFunc(maps.Keys(failed), comparePrefix) {
		errs = append(errs, failed[p])
	}
	return errors.Join(errs...)
}

// retryRoutes is the retry timer of generation gen: it runs reconcile
// again, unless a Sync or Shutdown came first.
func (a *Announcer) retryRoutes(gen uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed || gen != a.retryGen {
		return
	}
	if err := a.reconcile(); err != nil {
		a.log.Warn("BGP announcements still failing", "error", err, "retryIn", a.backoff,
			"fix", fmt.Sprintf("nothing to do if it clears: the failed routes are tried again in %s, then at most every %s, and at every change "+
				"(`xlb status` shows the error on each route meanwhile); if this keeps failing, check the peers there, or restart the agent", a.backoff, a.retryMax))
		return
	}
	a.log.Info("BGP announcements retried: every route is as wanted")
}

func comparePrefix(x, y netip.Prefix) int {
	if c := x.Addr().Compare(y.Addr()); c != 0 {
		return c
	}
	return x.Bits() - y.Bits()
}

func attributes(r config.RouteAttributes) bgp.Attributes {
	return bgp.Attributes{Communities: slices.Clone(r.Communities), LargeCommunities: slices.Clone(r.LargeCommunities),
		LocalPref: r.LocalPreference, MED: r.MED}
}

func attrsEqual(a, b bgp.Attributes) bool {
	eq := func(x, y *uint32) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	return slices.Equal(a.Communities, b.Communities) && slices.Equal(a.LargeCommunities, b.LargeCommunities) &&
		eq(a.LocalPref, b.LocalPref) && eq(a.MED, b.MED) &&
		(a.Peers == nil) == (b.Peers == nil) && slices.Equal(a.Peers, b.Peers)
}

// Shutdown withdraws every route, waits the drain time so the routers
// move the traffic to other nodes (the data plane keeps forwarding what
// still arrives), then closes the sessions and BFD.
func (a *Announcer) Shutdown(ctx context.Context) error {
	drain, n := a.halt()
	err := a.sp.WithdrawAll()
	if n > 0 && drain > 0 {
		a.log.Info("routes withdrawn; draining before exit", "routes", n, "drainTime", drain)
		select {
		case <-time.After(drain):
		case <-ctx.Done():
		}
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = errors.Join(err, a.sp.Stop(stopCtx))
	return errors.Join(err, a.closeBFD())
}

// Restart stops for a restart of the agent. Without a peer that has
// graceful restart it is Shutdown. With one, nothing is withdrawn and
// nothing drains: the sessions end without a NOTIFICATION, so the peers
// with graceful restart keep the routes (stale) for their restart time
// while the pinned data plane keeps forwarding, and the next agent's
// sessions make them fresh; the other peers drop them at once (a Cease).
func (a *Announcer) Restart(ctx context.Context) error {
	a.mu.Lock()
	graceful := a.graceful
	a.mu.Unlock()
	if !graceful {
		return a.Shutdown(ctx)
	}
	_, n := a.halt()
	a.log.Info("stopping for a restart: the peers with graceful restart keep this node's routes for their restart time; "+
		"send SIGUSR1 instead of SIGTERM to withdraw them and drain", "routes", n)
	stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return errors.Join(a.sp.StopGraceful(stopCtx), a.closeBFD())
}

// halt ends the announcer's background work and forgets its routes; it
// returns the drain time and how many routes were announced.
func (a *Announcer) halt() (drain time.Duration, n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	drain, n = a.drain, len(a.out)
	a.closed = true
	a.retryGen++
	if a.retry != nil {
		a.retry.Stop()
		a.retry = nil
	}
	for peer := range a.releases {
		a.cancelRelease(peer)
	}
	a.want = map[netip.Prefix]bgp.Attributes{}
	a.out = map[netip.Prefix]bgp.Attributes{} // WithdrawAll forgets them, even when it fails
	a.failed = map[netip.Prefix]error{}
	return drain, n
}

// closeBFD ends the BFD sessions.
func (a *Announcer) closeBFD() error {
	var err error
	a.mu.Lock()
	ms := a.bfd
	a.bfd = [2]*bfd.Manager{}
	a.mu.Unlock()
	for _, m := range ms {
		if m != nil {
			err = errors.Join(err, m.Close())
		}
	}
	return err
}

// Status reports peers (with their BFD sessions) and routes.
func (a *Announcer) Status() *api.BGP {
	st := &api.BGP{ASN: a.asn, RouterID: a.routerID, NextHop: a.node, NextHop6: a.node6}
	a.mu.Lock()
	sessions := map[netip.Addr]bfd.SessionStatus{}
	for _, m := range a.bfd {
		if m == nil {
			continue
		}
		for _, s := range m.Sessions() {
			sessions[s.Peer] = s
		}
	}
	want, out := maps.Clone(a.want), maps.Clone(a.out)
	why, failed := maps.Clone(a.why), maps.Clone(a.failed)
	retryMax := a.retryMax
	a.mu.Unlock()
	for _, p := range a.sp.Peers() {
		ps := api.Peer{Address: p.Address, ASN: p.ASN, State: p.State, Since: p.Since, MaxPrefixes: p.MaxPrefixes,
			LastError: p.LastError, Flaps: p.Flaps, HeldDown: p.ForcedDown}
		if c := p.Counters; c != nil {
			ps.PrefixesSent, ps.PrefixesReceived = &c.PrefixesSent, &c.PrefixesReceived
			ps.MessagesSent, ps.MessagesReceived = &c.MessagesSent, &c.MessagesReceived
			ps.CountersAt = c.At
		}
		if h := p.PrefixLimit; h != nil {
			ps.PrefixLimit = &api.PrefixLimit{Limit: h.Limit, At: h.At, Times: h.Times, RetryAt: h.RetryAt}
		}
		if p.RestartTime > 0 {
			ps.GracefulRestart = &api.GracefulRestart{RestartTimeSeconds: int(p.RestartTime / time.Second)}
			if c := p.Counters; c != nil && p.State == bgp.StateEstablished {
				n := c.PeerRestarts
				ps.GracefulRestart.Negotiated = &n
			}
		}
		if s, ok := sessions[p.Address]; ok {
			ps.BFD = &api.BFDSession{State: strings.ToLower(s.State.String()), RemoteState: strings.ToLower(s.RemoteState.String()), Diag: s.Diag.String(),
				DetectionMs: float64(s.DetectionTime) / float64(time.Millisecond), Downs: s.Downs}
		}
		st.Peers = append(st.Peers, ps)
	}
	// Announced is what the speaker has; Reason says why not, or why it
	// differs from what is wanted.
	prefixes := map[netip.Prefix]bool{}
	for _, m := range []map[netip.Prefix]bgp.Attributes{want, out} {
		for p := range m {
			prefixes[p] = true
		}
	}
	for p := range why {
		prefixes[p] = true
	}
	for p := range prefixes {
		sent, has := out[p]
		r := api.Route{Prefix: p, Announced: has, Peers: slices.Clone(sent.Peers)}
		if _, wanted := want[p]; !wanted {
			r.Reason = why[p]
		}
		if err := failed[p]; err != nil {
			note := fmt.Sprintf("%v (tried again at most every %s)", err, retryMax)
			if r.Reason != "" {
				note = r.Reason + "; " + note
			}
			r.Reason = note
		}
		st.Routes = append(st.Routes, r)
	}
	slices.SortFunc(st.Routes, func(x, y api.Route) int { return comparePrefix(x.Prefix, y.Prefix) })
	return st
}
