// Package bgp announces xlb's service addresses over BGP. A Speaker wraps
// an embedded GoBGP server: it announces each VIP with next hop = the
// node's own address of the VIP's family (IPv4 or IPv6 unicast, over
// sessions of either family) to any number of peers (the upstream router or a
// route reflector, iBGP or eBGP), withdraws it again, follows every
// session's state through GoBGP's event stream, and lets an external
// failure detector (xlb's BFD) force a session down and up. It takes no
// route from its peers, and closes the session of a peer that sends more
// prefixes than its limit.
//
// GoBGP's own BFD is never enabled: its UDP listener stays closed, so
// xlb's BFD can own port 3784.
package bgp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	gobgp "github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"
)

// ErrUnknownPeer is PeerDown's and PeerUp's error for an address that is
// not a configured peer (a reload may have removed it).
var ErrUnknownPeer = errors.New("not a configured peer")

// Route is one announced prefix as Announced reports it.
type Route struct {
	Prefix     netip.Prefix
	NextHop    netip.Addr
	Attributes Attributes
}

// Speaker is xlb's BGP announcer. All methods are safe for concurrent use.
type Speaker struct {
	log *slog.Logger

	// opMu serializes everything that changes GoBGP's configuration or
	// RIB, so that the desired state (routes, peers) and GoBGP's never
	// diverge by interleaving. GoBGP logs synchronously from its own
	// goroutines while such a call runs, so the log hook and the event
	// handler take only mu, never opMu.
	opMu sync.Mutex

	mu        sync.Mutex
	opts      Options // with defaults; Peers replaced by SetPeers
	srv       *server.BgpServer
	stopWatch context.CancelFunc
	probeCtx  context.Context // canceled by Stop
	stopProbe context.CancelFunc
	routes    map[netip.Prefix]parsedAttrs
	peers     map[netip.Addr]*peerRecord
	export    exportState    // the installed export policy (export.go)
	wg        sync.WaitGroup // OPEN probes, admin-state checks, connectors

	// relay is how connectors reach GoBGP (see connect.go); nil while
	// stopped, or when GoBGP could not listen for them and dials itself.
	relay     *relayConfig
	relayCtx  context.Context // canceled by Stop, after GoBGP stopped
	stopRelay context.CancelFunc
	standIns  uint32 // stand-in addresses handed out so far

	// countersRead is closed when the running read of GoBGP's counters
	// ends (nil while none runs); countersReadAt is when the last ended.
	countersRead   chan struct{}
	countersReadAt time.Time
}

// New validates the options and returns a stopped Speaker.
func New(opts Options) (*Speaker, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("bgp: %w", err)
	}
	s := &Speaker{
		log:    opts.Logger.With("component", "bgp"),
		opts:   opts,
		routes: make(map[netip.Prefix]parsedAttrs),
		peers:  make(map[netip.Addr]*peerRecord),
	}
	for _, p := range opts.Peers {
		s.peers[p.Address] = newPeerRecord(p, s.allocStandIn())
	}
	return s, nil
}

// Start starts the embedded GoBGP server, configures the peers and
// announces the routes Announce recorded so far. It returns once the
// sessions are configured, not established; Peers tells how they fare.
// A peer that GoBGP refuses is reported in its status and does not stop
// the others. An error about a recorded route leaves the speaker
// running; any other error leaves it stopped.
func (s *Speaker) Start(ctx context.Context) error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.mu.Lock()
	running := s.srv != nil
	opts := s.opts
	s.mu.Unlock()
	if running {
		return errors.New("bgp speaker already started")
	}

	srv, relay, err := s.startServer(ctx, opts)
	if err != nil {
		return err
	}
	watchCtx, stopWatch := context.WithCancel(context.Background())
	err = srv.WatchEvent(watchCtx, server.WatchEventMessageCallbacks{
		OnPeerUpdate: func(ev *apiutil.WatchEventMessage_PeerEvent, _ time.Time) { s.onPeerEvent(srv, ev) },
	}, server.WatchPeer())
	if err != nil {
		stopWatch()
		srv.Stop()
		return fmt.Errorf("watch bgp peer events: %w", err)
	}

	s.mu.Lock()
	s.srv = srv
	s.stopWatch = stopWatch
	s.probeCtx, s.stopProbe = context.WithCancel(context.Background())
	s.relay = relay
	s.relayCtx, s.stopRelay = context.WithCancel(context.Background())
	s.export = exportState{} // a new server has none
	routes := make(map[netip.Prefix]parsedAttrs, len(s.routes))
	for p, a := range s.routes {
		routes[p] = a
	}
	forced := make(map[netip.Addr]bool)
	for addr, r := range s.peers {
		r.resetSession()
		forced[addr] = r.forcedDown != ""
	}
	s.mu.Unlock()

	// The routes first: a session that negotiated graceful restart gets
	// its End-of-RIB after the initial UPDATEs, and a router that kept
	// the routes of the previous run (stale) drops those the End-of-RIB
	// finds missing.
	var errs []error
	// The export policy before the routes it restricts.
	if _, err := s.syncExport(ctx, srv); err != nil {
		errs = append(errs, err)
	}
	for prefix, attrs := range routes {
		if err := s.addPath(srv, prefix, attrs); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range opts.Peers {
		if err := s.addPeer(ctx, srv, p, forced[p.Address]); err != nil {
			s.log.Error("bgp peer not configured", "peer", p.Address, "err", err,
				"fix", "the peer gets no session, and nothing retries it: correct its settings as the error says (bgp.peers, or its BGPPeer), "+
					"as a changed peer is added again at once, or restart the agent; `xlb status` shows the error on the peer")
		}
	}
	s.log.Info("bgp speaker started", "asn", opts.ASN, "routerID", opts.RouterID, "nextHop", opts.NextHop,
		"nextHop6", opts.NextHop6, "peers", len(opts.Peers), "routes", len(routes), "listenPort", opts.ListenPort)
	return errors.Join(errs...)
}

// startServer starts an embedded GoBGP server for opts and, unless it
// cannot, the listener its connectors hand sessions to: GoBGP's own
// listener on NextHop where it has one (ListenPort > 0), else one on
// relayHost, on a free port (also beside NextHop6 on ListenPort when the
// node has no IPv4 address: the stand-ins are IPv4). relay is nil when
// GoBGP must dial itself.
func (s *Speaker) startServer(ctx context.Context, opts Options) (*server.BgpServer, *relayConfig, error) {
	key, err := newRelayKey()
	if err != nil {
		return nil, nil, err
	}
	hook := newLogHook(opts.Logger.Handler(), s.noteGoBGPLog)
	hook.realPeer = s.relayedPeer
	logger := slog.New(hook)
	start := func(port int, addrs []string) (*server.BgpServer, error) {
		srv := server.NewBgpServer(server.LoggerOption(logger, nil))
		go srv.Serve()
		global := &api.Global{Asn: opts.ASN, RouterId: opts.RouterID.String(), ListenPort: int32(port), ListenAddresses: addrs}
		if err := srv.StartBgp(ctx, &api.StartBgpRequest{Global: global}); err != nil {
			srv.Stop()
			return nil, fmt.Errorf("start bgp (AS %d, router ID %s, listen port %d): %w", opts.ASN, opts.RouterID, port, err)
		}
		// Before any peer exists, so that no route of theirs ever
		// enters the RIB.
		if err := importNothing(ctx, srv); err != nil {
			srv.Stop()
			return nil, err
		}
		return srv, nil
	}
	if opts.ListenPort > 0 {
		var addrs []string
		target := opts.NextHop
		if !target.IsValid() {
			target = netip.MustParseAddr(relayHost)
		}
		addrs = append(addrs, target.String())
		if opts.NextHop6.IsValid() {
			addrs = append(addrs, opts.NextHop6.String())
		}
		srv, err := start(opts.ListenPort, addrs)
		if err != nil {
			return nil, nil, err
		}
		return srv, &relayConfig{target: netip.AddrPortFrom(target, uint16(opts.ListenPort)), key: key}, nil
	}
	var lastErr error
	for range 3 {
		port, err := freeLoopbackPort()
		if err != nil {
			lastErr = err
			break
		}
		srv, err := start(port, []string{relayHost})
		if err == nil {
			return srv, &relayConfig{target: netip.AddrPortFrom(netip.MustParseAddr(relayHost), uint16(port)), key: key}, nil
		}
		lastErr = err
	}
	s.log.Warn("bgp: cannot listen on the loopback interface; GoBGP connects to the peers itself, 1.5-2 s later",
		"err", lastErr, "fix", "bring the loopback interface up (ip link set lo up)")
	srv, err := start(-1, nil)
	return srv, nil, err
}

// importPolicy names the global import policy importNothing installs.
const importPolicy = "xlb-import-own-routes-only"

// importNothing keeps every route a peer sends out of GoBGP's RIB: xlb
// forwards by its own tables and needs none, and a route in the RIB is
// passed on to the other peers, which would make a node between two eBGP
// routers a transit for them. GoBGP applies the global import policy to
// the speaker's own routes too, hence "accept local routes, reject the
// rest" rather than a bare reject. What a peer sends still stays in
// GoBGP's Adj-RIB-In of that peer, policy or not, for as long as the
// session lasts (there is no setting against it): Peer.MaxPrefixes is
// what bounds that.
func importNothing(ctx context.Context, srv *server.BgpServer) error {
	err := srv.AddPolicy(ctx, &api.AddPolicyRequest{Policy: &api.Policy{Name: importPolicy, Statements: []*api.Statement{{
		Name:       importPolicy + "-local",
		Conditions: &api.Conditions{RouteType: api.Conditions_ROUTE_TYPE_LOCAL},
		Actions:    &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_ACCEPT},
	}}}})
	if err == nil {
		err = srv.AddPolicyAssignment(ctx, &api.AddPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
			Name: "global", Direction: api.PolicyDirection_POLICY_DIRECTION_IMPORT,
			Policies: []*api.Policy{{Name: importPolicy}}, DefaultAction: api.RouteAction_ROUTE_ACTION_REJECT,
		}})
	}
	if err != nil {
		return fmt.Errorf("install the BGP import policy: %w", err)
	}
	return nil
}

// Stop withdraws every route, closes every session (with a Cease
// NOTIFICATION) and stops the server. Announced routes are forgotten.
// If ctx ends first, Stop returns its error and the server finishes
// stopping in the background.
func (s *Speaker) Stop(ctx context.Context) error {
	return s.stop(ctx, false)
}

// StopGraceful closes every session and stops the server without
// withdrawing anything: the sessions of peers that negotiated graceful
// restart end without a NOTIFICATION, so those peers keep the routes
// (stale) for the restart time, waiting for the node to come back; the
// others get a Cease and drop them at once, as with Stop.
func (s *Speaker) StopGraceful(ctx context.Context) error {
	return s.stop(ctx, true)
}

func (s *Speaker) stop(ctx context.Context, graceful bool) error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.mu.Lock()
	srv, stopWatch, stopProbe, stopRelay := s.srv, s.stopWatch, s.stopProbe, s.stopRelay
	s.srv, s.stopWatch, s.stopProbe, s.stopRelay, s.relay = nil, nil, nil, nil, nil
	clear(s.routes)
	for _, r := range s.peers {
		r.conn = nil // stopRelay ends them all
	}
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	// Withdraw first so that the peers get UPDATE withdrawals where the
	// session outlives them, not only the implicit withdrawal of a
	// closed session.
	if !graceful {
		if err := srv.DeletePath(apiutil.DeletePathRequest{DeleteAll: true}); err != nil {
			s.log.Warn("bgp withdraw all on stop", "err", err,
				"fix", "nothing to do: the sessions close next, and the peers drop the routes with them; if a router still has them, check that its session to this node closed")
		}
	}
	done := make(chan struct{})
	go func() {
		stopProbe()
		if graceful {
			// srv.Stop is StopBgp without AllowGracefulRestart (a Cease
			// to every peer); the embedded server has nothing else to
			// stop (no gRPC, no BFD of its own).
			if err := srv.StopBgp(context.Background(), &api.StopBgpRequest{AllowGracefulRestart: true}); err != nil {
				s.log.Warn("bgp graceful stop", "err", err,
					"fix", "nothing to do: the agent exits next, which closes every session; a router that keeps the routes drops them after the restart time if the agent does not come back")
			}
		} else {
			srv.Stop()
		}
		// After GoBGP, so that the relays still carry its Cease.
		stopRelay()
		stopWatch()
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("stop bgp speaker: %w", ctx.Err())
	}
	s.mu.Lock()
	for _, r := range s.peers {
		r.resetSession()
		r.gobgpAddr = netip.Addr{}
	}
	s.mu.Unlock()
	s.log.Info("bgp speaker stopped")
	return nil
}

// Announce announces prefix with next hop = the node address of its
// family (Options.NextHop or NextHop6) to every peer whose session
// carries that family. Calling it again with the same attributes does nothing; with
// other attributes it re-announces (an implicit withdrawal of the old
// ones). Before Start it only records the route, which Start announces.
func (s *Speaker) Announce(prefix netip.Prefix, attrs Attributes) error {
	if err := checkPrefix(prefix); err != nil {
		return err
	}
	s.mu.Lock()
	nh := s.opts.nextHopFor(prefix)
	s.mu.Unlock()
	if !nh.IsValid() {
		if prefix.Addr().Is4() {
			return fmt.Errorf("bgp: announce %s: the node has no IPv4 address to announce it with as next hop (set node.address)", prefix)
		}
		return fmt.Errorf("bgp: announce %s: the node has no IPv6 address to announce it with as next hop (set node.address6)", prefix)
	}
	parsed, err := attrs.parse()
	if err != nil {
		return fmt.Errorf("announce %s: %w", prefix, err)
	}
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.mu.Lock()
	old, had := s.routes[prefix]
	srv := s.srv
	if had && old.equal(parsed) {
		s.mu.Unlock()
		return nil
	}
	s.routes[prefix] = parsed
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	ctx := context.Background()
	// The export policy first, so that no peer outside parsed.peers
	// ever gets the route.
	restricted := parsed.only || had && old.only
	var refresh bool
	if restricted {
		refresh, err = s.syncExport(ctx, srv)
		refresh = refresh && had
	}
	if err == nil {
		err = s.addPath(srv, prefix, parsed)
	}
	if err == nil && refresh {
		err = refreshOut(ctx, srv)
	}
	if err != nil {
		s.mu.Lock()
		if had {
			s.routes[prefix] = old
		} else {
			delete(s.routes, prefix)
		}
		s.mu.Unlock()
		if restricted {
			_, _ = s.syncExport(ctx, srv) // back to what the routes were
		}
		return err
	}
	return nil
}

// Withdraw stops announcing prefix: established peers get an UPDATE
// withdrawal. Withdrawing a prefix that is not announced does nothing.
func (s *Speaker) Withdraw(prefix netip.Prefix) error {
	if err := checkPrefix(prefix); err != nil {
		return err
	}
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.mu.Lock()
	old, had := s.routes[prefix]
	srv := s.srv
	delete(s.routes, prefix)
	s.mu.Unlock()
	if !had || srv == nil {
		return nil
	}
	path, err := s.apiPath(prefix, old)
	if err == nil {
		err = srv.DeletePath(apiutil.DeletePathRequest{Paths: []*apiutil.Path{path}})
	}
	if err != nil {
		s.mu.Lock()
		s.routes[prefix] = old
		s.mu.Unlock()
		return fmt.Errorf("withdraw %s: %w", prefix, err)
	}
	if old.only {
		// Its statement goes; a stale one would only match nothing.
		if _, err := s.syncExport(context.Background(), srv); err != nil {
			s.log.Debug("bgp: export policy not updated after a withdrawal", "err", err)
		}
	}
	s.log.Info("bgp route withdrawn", "prefix", prefix)
	return nil
}

// WithdrawAll withdraws every announced prefix, for a drain before
// shutdown: the sessions stay up, so the peers move traffic away before
// they would notice the node is gone.
func (s *Speaker) WithdrawAll() error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.mu.Lock()
	srv := s.srv
	n := len(s.routes)
	clear(s.routes)
	s.mu.Unlock()
	if srv == nil || n == 0 {
		return nil
	}
	if err := srv.DeletePath(apiutil.DeletePathRequest{DeleteAll: true}); err != nil {
		return fmt.Errorf("withdraw all routes: %w", err)
	}
	s.log.Info("bgp routes withdrawn", "count", n)
	return nil
}

// Announced lists the announced routes, sorted by prefix.
func (s *Speaker) Announced() []Route {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Route, 0, len(s.routes))
	for p, a := range s.routes {
		out = append(out, Route{Prefix: p, NextHop: s.opts.nextHopFor(p), Attributes: a.attributes()})
	}
	// IPv4 first (netip orders by family), then by address.
	slices.SortFunc(out, func(a, b Route) int { return a.Prefix.Addr().Compare(b.Prefix.Addr()) })
	return out
}

func checkPrefix(p netip.Prefix) error {
	switch {
	case !p.IsValid():
		return errors.New("bgp: invalid prefix")
	case p.Addr().Is4In6():
		return fmt.Errorf("bgp: prefix %s is IPv4-mapped; announce the IPv4 prefix", p)
	case p.Addr().Zone() != "":
		return fmt.Errorf("bgp: prefix %s has a zone", p)
	case p != p.Masked():
		return fmt.Errorf("bgp: prefix %s has host bits set (did you mean %s?)", p, p.Masked())
	}
	return nil
}

// apiPath builds GoBGP's form of a route: IPv4 unicast with a NEXT_HOP
// attribute, or IPv6 unicast with the prefix and next hop in an
// MP_REACH_NLRI attribute (RFC 4760). GoBGP keeps the next hop of a
// local route on every session, eBGP or iBGP, as it is set.
func (s *Speaker) apiPath(prefix netip.Prefix, a parsedAttrs) (*apiutil.Path, error) {
	nlri, err := gobgp.NewIPAddrPrefix(prefix)
	if err != nil {
		return nil, fmt.Errorf("prefix %s: %w", prefix, err)
	}
	nextHop := s.opts.nextHopFor(prefix)
	family := gobgp.RF_IPv4_UC
	var nh gobgp.PathAttributeInterface
	if prefix.Addr().Is4() {
		nh, err = gobgp.NewPathAttributeNextHop(nextHop)
	} else {
		family = gobgp.RF_IPv6_UC
		nh, err = gobgp.NewPathAttributeMpReachNLRI(family, []gobgp.PathNLRI{{NLRI: nlri}}, nextHop)
	}
	if err != nil {
		return nil, fmt.Errorf("next hop %s: %w", nextHop, err)
	}
	attrs := []gobgp.PathAttributeInterface{
		gobgp.NewPathAttributeOrigin(gobgp.BGP_ORIGIN_ATTR_TYPE_IGP),
		nh,
	}
	if len(a.communities) > 0 {
		attrs = append(attrs, gobgp.NewPathAttributeCommunities(a.communities))
	}
	if len(a.large) > 0 {
		l := make([]*gobgp.LargeCommunity, len(a.large))
		for i, c := range a.large {
			l[i] = gobgp.NewLargeCommunity(c.Global, c.Local1, c.Local2)
		}
		attrs = append(attrs, gobgp.NewPathAttributeLargeCommunities(l))
	}
	if a.med != nil {
		attrs = append(attrs, gobgp.NewPathAttributeMultiExitDisc(*a.med))
	}
	if a.localPref != nil {
		attrs = append(attrs, gobgp.NewPathAttributeLocalPref(*a.localPref))
	}
	return &apiutil.Path{Family: family, Nlri: nlri, Attrs: attrs}, nil
}

func (s *Speaker) addPath(srv *server.BgpServer, prefix netip.Prefix, a parsedAttrs) error {
	path, err := s.apiPath(prefix, a)
	if err == nil {
		_, err = srv.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{path}})
	}
	if err != nil {
		return fmt.Errorf("announce %s: %w", prefix, err)
	}
	s.log.Info("bgp route announced", "prefix", prefix, "nextHop", s.opts.nextHopFor(prefix))
	return nil
}

// apiPeer is GoBGP's form of a peer. With relay, the peer is relayed
// (see connect.go): GoBGP knows it as standIn, passive, reached through
// its relay listener with the relay's key; the connector applies p's
// address, port, key and TTL to the real connection.
func (s *Speaker) apiPeer(p Peer, adminDown bool, relay *relayConfig, standIn netip.Addr) *api.Peer {
	ap := &api.Peer{
		Conf: &api.PeerConf{
			NeighborAddress: p.Address.String(),
			PeerAsn:         p.ASN,
			LocalAsn:        s.opts.ASN,
			AuthPassword:    p.Password,
			AdminDown:       adminDown,
		},
		Timers: &api.Timers{Config: &api.TimersConfig{
			ConnectRetry:      uint64(connectRetry / time.Second),
			HoldTime:          uint64(p.HoldTime / time.Second),
			KeepaliveInterval: uint64(p.Keepalive / time.Second),
		}},
		Transport: &api.Transport{
			LocalAddress: s.opts.localAddr(p.Address).String(),
			RemotePort:   uint32(p.Port),
			PassiveMode:  p.Passive,
		},
		EbgpMultihop: &api.EbgpMultihop{Enabled: p.Multihop > 0, MultihopTtl: uint32(p.Multihop)},
		AfiSafis:     s.afiSafis(p),
	}
	if p.RestartTime > 0 {
		ap.GracefulRestart = &api.GracefulRestart{Enabled: true, RestartTime: uint32(p.RestartTime / time.Second)}
	}
	if relay != nil {
		ap.Conf.NeighborAddress = standIn.String()
		ap.Conf.AuthPassword = relay.key
		ap.Transport.LocalAddress = relay.target.Addr().String()
		ap.Transport.RemotePort = 0
		ap.Transport.PassiveMode = true
	}
	return ap
}

var (
	ipv4Unicast = &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
	ipv6Unicast = &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}
)

// afiSafis are the address families of a session: unicast of each family
// the node has an address of, whatever the session's own family, so that
// one session per router carries both (the peer may accept only some;
// BGP then sends only those). They are named explicitly, also for IPv4
// alone, for their prefix limits (GoBGP counts each family on its own).
func (s *Speaker) afiSafis(p Peer) []*api.AfiSafi {
	var out []*api.AfiSafi
	add := func(f *api.Family) {
		a := &api.AfiSafi{
			Config:       &api.AfiSafiConfig{Family: f, Enabled: true},
			PrefixLimits: &api.PrefixLimit{Family: f, MaxPrefixes: p.MaxPrefixes},
		}
		// GoBGP lists a family in the capability only when asked to.
		if p.RestartTime > 0 {
			a.MpGracefulRestart = &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}}
		}
		out = append(out, a)
	}
	if s.opts.NextHop.IsValid() {
		add(ipv4Unicast)
	}
	if s.opts.NextHop6.IsValid() {
		add(ipv6Unicast)
	}
	return out
}

// addPeer configures p in GoBGP: relayed, with a connector of its own,
// unless p is passive or the speaker has no relay.
func (s *Speaker) addPeer(ctx context.Context, srv *server.BgpServer, p Peer, adminDown bool) error {
	s.mu.Lock()
	r := s.peers[p.Address]
	if r == nil || s.srv != srv {
		s.mu.Unlock()
		return fmt.Errorf("add peer %s: speaker stopped or peer removed", p.Address)
	}
	var relay *relayConfig
	r.gobgpAddr = p.Address
	if s.relay != nil && !p.Passive {
		relay = s.relay
		r.gobgpAddr = r.standIn
		s.newConnector(r, p)
	}
	s.mu.Unlock()
	err := srv.AddPeer(ctx, &api.AddPeerRequest{Peer: s.apiPeer(p, adminDown, relay, r.standIn)})
	if err != nil {
		err = fmt.Errorf("add peer %s: %w", p.Address, err)
		s.mu.Lock()
		r.setError(err.Error())
		r.gobgpAddr = netip.Addr{}
		s.stopConnector(r)
		s.mu.Unlock()
	}
	return err
}

// deletePeer removes the peer of record r from GoBGP (which closes its
// session with a Cease) and ends its connector.
func (s *Speaker) deletePeer(ctx context.Context, srv *server.BgpServer, r *peerRecord) error {
	s.mu.Lock()
	addr, real := r.gobgpAddr, r.cfg.Address
	s.mu.Unlock()
	if !addr.IsValid() {
		return nil // GoBGP refused it when it was added
	}
	err := srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: addr.String()})
	s.mu.Lock()
	s.stopConnector(r)
	r.gobgpAddr = netip.Addr{}
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("delete peer %s: %w", real, err)
	}
	return nil
}

// gobgpAddrOf is the address GoBGP knows peer addr by (its stand-in if
// it is relayed); invalid if GoBGP does not know it. Called with mu held.
func (s *Speaker) gobgpAddrOf(addr netip.Addr) netip.Addr {
	if r := s.peers[addr]; r != nil {
		return r.gobgpAddr
	}
	return netip.Addr{}
}

// relayedPeer names the peer GoBGP knows by the stand-in address addr.
func (s *Speaker) relayedPeer(addr netip.Addr) (netip.Addr, bool) {
	if !standInPrefix.Contains(addr) {
		return netip.Addr{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.peers {
		if r.standIn == addr {
			return r.cfg.Address, true
		}
	}
	return netip.Addr{}, false
}

// peerByGoBGP finds the record of the peer GoBGP knows as addr. Called
// with mu held.
func (s *Speaker) peerByGoBGP(addr netip.Addr) *peerRecord {
	if r := s.peers[addr]; r != nil && r.gobgpAddr == addr {
		return r
	}
	for _, r := range s.peers {
		if r.gobgpAddr == addr {
			return r
		}
	}
	return nil
}

// SetPeers replaces the peer list: new peers are added, missing ones
// removed (their sessions closed), changed ones re-created; unchanged
// peers and their sessions are not touched. An invalid list changes
// nothing. A peer GoBGP refuses is reported in the returned error and in
// its status; the other changes still apply.
func (s *Speaker) SetPeers(peers []Peer) error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.mu.Lock()
	opts := s.opts
	srv := s.srv
	s.mu.Unlock()

	next := make([]Peer, len(peers))
	for i, p := range peers {
		next[i] = p.withDefaults()
	}
	if err := validatePeers(next, opts.ASN, opts.NextHop, opts.NextHop6, opts.ListenPort); err != nil {
		return fmt.Errorf("bgp: %w", err)
	}
	old := make(map[netip.Addr]Peer, len(opts.Peers))
	for _, p := range opts.Peers {
		old[p.Address] = p
	}
	var removed []netip.Addr
	var added, changed []Peer
	for _, p := range next {
		o, ok := old[p.Address]
		switch {
		case !ok:
			added = append(added, p)
		case o != p:
			changed = append(changed, p)
		}
		delete(old, p.Address)
	}
	for addr := range old {
		removed = append(removed, addr)
	}

	s.mu.Lock()
	s.opts.Peers = next
	forced := make(map[netip.Addr]bool)
	gone := make([]*peerRecord, 0, len(removed))
	for _, addr := range removed {
		gone = append(gone, s.peers[addr])
		delete(s.peers, addr)
	}
	for _, p := range added {
		s.peers[p.Address] = newPeerRecord(p, s.allocStandIn())
	}
	for _, r := range gone {
		r.endPrefixHold()
	}
	for _, p := range changed {
		r := s.peers[p.Address]
		r.cfg = p
		r.rejection, r.probeWanted = "", false
		forced[p.Address] = r.forcedDown != ""
		// Re-created below, enabled: a changed peer (a raised
		// maxPrefixes, say) gets a session at once.
		r.endPrefixHold()
		r.pfxTimes = 0
	}
	s.mu.Unlock()

	if srv == nil {
		return nil
	}
	ctx := context.Background()
	var errs []error
	// The restricted routes' peers by their new addresses in GoBGP,
	// before the new peers' sessions can come up.
	refresh, err := s.syncExport(ctx, srv)
	if err != nil {
		errs = append(errs, err)
	}
	defer func() {
		if refresh {
			if err := refreshOut(ctx, srv); err != nil {
				s.log.Warn("bgp: sessions not refreshed after the peers changed", "err", err,
					"fix", "nothing to do if `xlb status` shows the routes announced; else restart the agent")
			}
		}
	}()
	for _, r := range gone {
		if err := s.deletePeer(ctx, srv, r); err != nil {
			errs = append(errs, err)
		}
		s.log.Info("bgp peer removed", "peer", r.cfg.Address)
	}
	for _, p := range changed {
		// GoBGP resets a session on any change that matters here
		// (ASN, password, timers, transport); re-creating the peer is
		// the same reset with fewer corner cases.
		s.mu.Lock()
		r := s.peers[p.Address]
		s.mu.Unlock()
		if err := s.deletePeer(ctx, srv, r); err != nil {
			errs = append(errs, err)
		}
		if err := s.addPeer(ctx, srv, p, forced[p.Address]); err != nil {
			errs = append(errs, err)
		}
		s.log.Info("bgp peer reconfigured", "peer", p.Address, "asn", p.ASN)
	}
	for _, p := range added {
		if err := s.addPeer(ctx, srv, p, false); err != nil {
			errs = append(errs, err)
		}
		s.log.Info("bgp peer added", "peer", p.Address, "asn", p.ASN)
	}
	return errors.Join(errs...)
}

// adminCommunicationMax is GoBGP's limit for the shutdown communication
// (RFC 8203) that PeerDown sends along with its Cease NOTIFICATION.
const adminCommunicationMax = 128

// PeerDown closes the session to addr at once (a Cease / administrative
// shutdown NOTIFICATION carrying reason) and keeps it down until PeerUp.
// It is the hook for a failure detector such as BFD; reason shows in
// the peer's status. Withdrawn routes are the peer's business: it drops
// everything it learned over the session.
func (s *Speaker) PeerDown(addr netip.Addr, reason string) error {
	if reason == "" {
		reason = "forced down"
	}
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.mu.Lock()
	r := s.peers[addr]
	srv := s.srv
	var gaddr netip.Addr
	if r != nil {
		r.forcedDown = reason
		r.setError("forced down: " + reason)
		gaddr = r.gobgpAddr
	}
	s.mu.Unlock()
	if r == nil {
		return fmt.Errorf("bgp: peer down: %s is %w", addr, ErrUnknownPeer)
	}
	s.log.Info("bgp peer forced down", "peer", addr, "reason", reason)
	if srv == nil || !gaddr.IsValid() {
		return nil
	}
	comm := truncateUTF8(reason, adminCommunicationMax)
	if err := srv.DisablePeer(context.Background(), &api.DisablePeerRequest{Address: gaddr.String(), Communication: comm}); err != nil {
		return fmt.Errorf("bgp: peer down %s: %w", addr, err)
	}
	s.checkAdminState(srv, addr)
	return nil
}

// PeerUp lets a session that PeerDown closed connect again. If GoBGP
// refuses, the peer stays held down (and says why in its status), so
// that calling PeerUp again asks GoBGP again.
func (s *Speaker) PeerUp(addr netip.Addr) error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.mu.Lock()
	r := s.peers[addr]
	srv := s.srv
	var held string
	var gaddr netip.Addr
	var pfx *PrefixLimitHold
	if r != nil {
		held = r.forcedDown
		r.forcedDown = ""
		gaddr = r.gobgpAddr
		pfx = r.pfx
	}
	s.mu.Unlock()
	if r == nil {
		return fmt.Errorf("bgp: peer up: %s is %w", addr, ErrUnknownPeer)
	}
	if held == "" {
		return nil
	}
	if pfx != nil {
		// The end of the prefix-limit hold enables the peer.
		s.log.Info("bgp peer released; it stays down for its prefix limit", "peer", addr, "until", pfx.RetryAt.Format(time.TimeOnly))
		return nil
	}
	if srv == nil || !gaddr.IsValid() {
		s.log.Info("bgp peer released", "peer", addr)
		return nil
	}
	// forcedDown is cleared before asking, as the event handler and the
	// admin-state check must see the new wish while GoBGP acts on it.
	if err := srv.EnablePeer(context.Background(), &api.EnablePeerRequest{Address: gaddr.String()}); err != nil {
		// opMu is held: no PeerDown, PeerUp or SetPeers ran meanwhile,
		// so r is still the peer's record and its mark still ours.
		s.mu.Lock()
		r.forcedDown = held
		r.setError(fmt.Sprintf("forced down: %s (GoBGP refused to release it: %v)", held, err))
		s.mu.Unlock()
		return fmt.Errorf("bgp: peer up %s: %w", addr, err)
	}
	s.log.Info("bgp peer released", "peer", addr)
	s.checkAdminState(srv, addr)
	return nil
}

// Admin-state checks: every adminCheckEvery, at most adminChecks times,
// until GoBGP agreed adminAgreed times in a row.
const (
	adminCheckEvery = 50 * time.Millisecond
	adminChecks     = 40
	adminAgreed     = 3
)

// checkAdminState makes sure GoBGP ends up with the admin state that
// PeerDown or PeerUp asked for. GoBGP queues one admin request per peer
// and drops, with only a log line, one that arrives while the previous is
// still queued; BFD that goes down and up again within a millisecond
// (a peer that restarts its BFD session at once) sends exactly that
// pair. When the peer is idle already GoBGP reports no event for the
// dropped request, so the check in the state handler never runs: poll
// GoBGP's view for a short while instead, and ask again where it
// disagrees. One check per peer at a time; Stop waits for it.
func (s *Speaker) checkAdminState(srv *server.BgpServer, addr netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.peers[addr]
	if s.srv != srv || r == nil || r.checking {
		return
	}
	r.checking = true
	ctx := s.probeCtx
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			r.checking = false
			s.mu.Unlock()
		}()
		agreed := 0
		for range adminChecks {
			select {
			case <-ctx.Done():
				return
			case <-time.After(adminCheckEvery):
			}
			s.mu.Lock()
			want := r.wantsDown()
			gaddr := r.gobgpAddr
			current := s.srv == srv && s.peers[addr] == r && gaddr.IsValid()
			s.mu.Unlock()
			if !current {
				return
			}
			down, ok := gobgpAdminDown(ctx, srv, gaddr)
			if !ok || down == want {
				if agreed++; agreed >= adminAgreed {
					return
				}
				continue
			}
			agreed = 0
			s.log.Debug("bgp peer admin state lost by GoBGP; asking again", "peer", addr, "wantDown", want)
			// Stop holds opMu while it waits for this goroutine:
			// give up when it cancels ctx rather than block.
			for !s.opMu.TryLock() {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Millisecond):
				}
			}
			s.fixAdminStateLocked(srv, addr)
			s.opMu.Unlock()
		}
	}()
}

// gobgpAdminDown reads whether GoBGP holds the peer it knows as addr
// down (administratively, or for its prefix limit); ok is false if it
// cannot tell.
func gobgpAdminDown(ctx context.Context, srv *server.BgpServer, addr netip.Addr) (down, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	err := srv.ListPeer(ctx, &api.ListPeerRequest{Address: addr.String()}, func(p *api.Peer) {
		if p.State != nil {
			down, ok = gobgpAdminStateDown(p.State.AdminState), true
		}
	})
	return down, ok && err == nil
}

// fixAdminState re-sends PeerDown's or PeerUp's request when GoBGP's
// admin state disagrees with ours: GoBGP drops an admin request that
// arrives while the previous one is still queued.
func (s *Speaker) fixAdminState(srv *server.BgpServer, addr netip.Addr) {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.fixAdminStateLocked(srv, addr)
}

// fixAdminStateLocked is fixAdminState with opMu held.
func (s *Speaker) fixAdminStateLocked(srv *server.BgpServer, addr netip.Addr) {
	s.mu.Lock()
	r := s.peers[addr]
	current := s.srv == srv && r != nil && r.gobgpAddr.IsValid()
	var down string
	var gaddr netip.Addr
	if current {
		down, gaddr = r.forcedDown, r.gobgpAddr
		if down == "" && r.pfx != nil {
			down = fmt.Sprintf("more than %d prefixes received", r.pfx.Limit)
		}
	}
	s.mu.Unlock()
	if !current {
		return
	}
	ctx := context.Background()
	var err error
	if down != "" {
		err = srv.DisablePeer(ctx, &api.DisablePeerRequest{Address: gaddr.String(), Communication: truncateUTF8(down, adminCommunicationMax)})
	} else {
		err = srv.EnablePeer(ctx, &api.EnablePeerRequest{Address: gaddr.String()})
	}
	if err != nil {
		s.log.Warn("bgp peer admin state", "peer", addr, "err", err,
			"fix", "the speaker asks GoBGP again at the peer's next state change; if `xlb status` shows the session held down though BFD is up, or up though BFD is down, restart the agent")
	}
}

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !isRuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
