// Package router is the upstream router of xlb's lab and demo: a GoBGP
// speaker that accepts sessions from any xlb node in a neighbour range
// and installs every prefix it learns (IPv4 and IPv6 unicast) into its
// network namespace's kernel FIB as one multipath route over all the
// nodes that announce it, as a data-centre router with ECMP would. With Config.BFD it also runs
// BFD with every node and takes a node that stops answering out of the
// FIB within the detection time (bfd.go).
//
// It must run in a process of its own inside the router namespace (`xlb
// lab router`, started through `xlb netns-exec`): GoBGP opens sockets on
// goroutines of its own, which may run on any OS thread, so only a whole
// process in the namespace puts them all there; and GoBGP's multipath
// switch is global to a process (see rib.go).
package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"
	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/internal/bfd"
)

// DefaultHoldTime is the hold time the router offers when Config has
// none; a session uses the smaller of both sides' offers.
const DefaultHoldTime = 9 * time.Second

// peerGroup names the GoBGP peer group every dynamic neighbour joins.
const peerGroup = "xlb-nodes"

// Config says how the router speaks BGP.
type Config struct {
	ASN      uint32     // the router's AS number (required)
	RouterID netip.Addr // BGP identifier; default: Listen
	Listen   netip.Addr // address to accept sessions on (required, IPv4)
	// Listen6 is an IPv6 address to accept sessions on too (optional);
	// IPv6 neighbour ranges need it. Every session, of either family,
	// carries IPv4 and IPv6 unicast as far as the node agrees.
	Listen6 netip.Addr
	Port    int // TCP port; default 179
	// Neighbors are the prefixes nodes may connect from; any address in
	// them gets a session without configuration (GoBGP dynamic
	// neighbours). IPv6 prefixes need Listen6.
	Neighbors []netip.Prefix
	// PeerASN is the nodes' AS number: another ASN makes the sessions
	// eBGP; 0 means the router's own, iBGP.
	PeerASN  uint32
	HoldTime time.Duration // 0: DefaultHoldTime; else at least 3s
	// StatusSocket, if set, is the path of a unix socket serving the
	// status as JSON over HTTP (see ReadStatus).
	StatusSocket string
	// BFD, if set, runs a BFD session (internal/bfd, from Listen, or
	// Listen6 for an IPv6 peer) with every peer once its BGP session is
	// established; a session that
	// was Up and goes Down takes the peer out as PeerFailed does (see
	// bfd.go). Zero fields take the bfd package's defaults.
	BFD   *bfd.Config
	Hooks Hooks
	Log   *slog.Logger // nil: slog.Default()
}

// Hooks let a failure detector follow the BGP sessions. BGP alone
// notices a dead node only when the hold time runs out (seconds); a
// detector that watches each established peer can report the loss in
// milliseconds through Router.PeerFailed. Config.BFD is such a detector,
// built in; Hooks are for others (and are called after it).
//
// Both functions are called one at a time, in event order, on the
// router's event goroutine: they must return quickly.
type Hooks struct {
	// OnPeerEstablished is called when a session with peer reaches
	// Established.
	OnPeerEstablished func(peer netip.Addr)
	// OnPeerDown is called when a session with peer leaves Established
	// (GoBGP has then dropped its paths, and the FIB follows).
	OnPeerDown func(peer netip.Addr)
}

// Router is one running upstream router. Its methods are safe for
// concurrent use.
type Router struct {
	cfg     Config
	log     *slog.Logger
	started atomic.Bool

	kickc chan struct{} // one pending resync, however many events asked

	// syncMu serializes reconciliation (the sync goroutine, PeerFailed)
	// and shutdown.
	syncMu  sync.Mutex
	bgp     *server.BgpServer // nil before start and after stop
	fib     *fib
	pending atomic.Int64                // unix nanos of the oldest event not yet synced; 0 if none
	bfd     atomic.Pointer[bfdFollower] // nil without Config.BFD, before Run and after it

	mu        sync.Mutex
	peers     map[netip.Addr]*peerInfo
	failed    map[netip.Addr]bool // peers PeerFailed took out, until they establish again
	installed map[netip.Prefix][]netip.Addr
	fibErrs   map[netip.Prefix]string
}

type peerInfo struct {
	asn   uint32
	state bgp.FSMState
	since time.Time
}

// New checks cfg and returns a router that Run starts.
func New(cfg Config) (*Router, error) {
	if cfg.ASN == 0 {
		return nil, errors.New("router: ASN is required (e.g. 65000)")
	}
	if !cfg.Listen.Is4() {
		return nil, fmt.Errorf("router: listen address %q: want an IPv4 address", cfg.Listen)
	}
	if !cfg.RouterID.IsValid() {
		cfg.RouterID = cfg.Listen
	}
	if !cfg.RouterID.Is4() {
		return nil, fmt.Errorf("router: router ID %q: want an IPv4 address", cfg.RouterID)
	}
	if cfg.Port == 0 {
		cfg.Port = 179
	}
	if cfg.Port < 1 || cfg.Port > 65535 {
		return nil, fmt.Errorf("router: port %d: want 1 to 65535", cfg.Port)
	}
	if len(cfg.Neighbors) == 0 {
		return nil, errors.New("router: no neighbour range: nodes could not connect (e.g. 10.0.1.0/24)")
	}
	if cfg.Listen6.IsValid() && (!cfg.Listen6.Is6() || cfg.Listen6.Is4In6() || cfg.Listen6.IsLinkLocalUnicast() || cfg.Listen6.IsUnspecified()) {
		return nil, fmt.Errorf("router: IPv6 listen address %q: want a global (or unique local) IPv6 address", cfg.Listen6)
	}
	for _, p := range cfg.Neighbors {
		switch {
		case !p.IsValid() || p.Addr().Is4In6():
			return nil, fmt.Errorf("router: neighbour range %q: want an IPv4 or IPv6 prefix", p)
		case p.Addr().Is6() && !cfg.Listen6.IsValid():
			return nil, fmt.Errorf("router: neighbour range %s is IPv6, but the router has no IPv6 listen address (Listen6, --listen6)", p)
		}
	}
	if cfg.PeerASN == 0 {
		cfg.PeerASN = cfg.ASN
	}
	if cfg.HoldTime == 0 {
		cfg.HoldTime = DefaultHoldTime
	}
	// RFC 4271: zero (no keepalives) or at least three seconds; the
	// router offers only whole seconds.
	if cfg.HoldTime < 3*time.Second || cfg.HoldTime%time.Second != 0 || cfg.HoldTime > 65535*time.Second {
		return nil, fmt.Errorf("router: hold time %v: want whole seconds from 3s to 65535s", cfg.HoldTime)
	}
	if cfg.BFD != nil {
		if err := cfg.BFD.Validate(); err != nil {
			return nil, fmt.Errorf("router: bfd: %w", err)
		}
		c := cfg.BFD.WithDefaults()
		cfg.BFD = &c
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Router{
		cfg:       cfg,
		log:       cfg.Log,
		kickc:     make(chan struct{}, 1),
		peers:     make(map[netip.Addr]*peerInfo),
		failed:    make(map[netip.Addr]bool),
		installed: make(map[netip.Prefix][]netip.Addr),
		fibErrs:   make(map[netip.Prefix]string),
	}, nil
}

// Run prepares the namespace (forwarding, L4 multipath hash), deletes
// the routes a crashed predecessor left (protocol Protocol), starts BGP
// and keeps the kernel routes equal to the learned multipath sets until
// ctx ends. It then closes the sessions and deletes its routes: a router
// that is gone forwards nothing. It can be called once.
func (r *Router) Run(ctx context.Context) (err error) {
	if r.started.Swap(true) {
		return errors.New("router: Run called twice")
	}
	if err := enableForwarding(); err != nil {
		return err
	}
	f, err := openFIB(unix.RT_TABLE_MAIN)
	if err != nil {
		return err
	}
	defer f.close()
	stale, err := f.flush()
	if err != nil {
		return fmt.Errorf("remove stale routes: %w", err)
	}
	for _, p := range stale {
		r.log.Info("fib: removed a stale route of an earlier router", "prefix", p)
	}

	// BFD before BGP: the first established session gets its BFD
	// session at once.
	if r.cfg.BFD != nil {
		b, berr := startBFD(r.cfg.Listen, r.cfg.Listen6, *r.cfg.BFD, r.log)
		if berr != nil {
			return berr
		}
		r.bfd.Store(b)
		followDone := make(chan struct{})
		go func() {
			defer close(followDone)
			b.follow(r)
		}()
		// Runs after the body has stopped BGP: the nodes hear AdminDown
		// only after BGP has said goodbye.
		defer func() {
			r.bfd.Store(nil)
			if cerr := b.close(); cerr != nil {
				r.log.Warn("BFD did not stop cleanly", "err", cerr,
					"fix", "nothing to do: the router has stopped; the peers see its BFD sessions time out")
			}
			<-followDone
		}()
	}

	var statusLn net.Listener
	if r.cfg.StatusSocket != "" {
		if statusLn, err = listenUnix(r.cfg.StatusSocket); err != nil {
			return err
		}
		srv := &http.Server{Handler: r.statusHandler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(statusLn) }()
		defer func() {
			srv.Close()
			removeSocket(r.cfg.StatusSocket)
		}()
	}

	s := server.NewBgpServer(server.LoggerOption(gobgpLogger(r.log), nil))
	go s.Serve()
	// From here on, any failure stops the server again.
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	watchCtx, cancelWatch := context.WithCancel(context.Background())
	defer cancelWatch()
	if err := r.startBGP(ctx, watchCtx, s); err != nil {
		return err
	}

	r.syncMu.Lock()
	r.bgp, r.fib = s, f
	r.syncMu.Unlock()
	syncDone := make(chan struct{})
	go r.syncLoop(watchCtx, syncDone)
	r.kick(time.Now())
	attrs := []any{"asn", r.cfg.ASN, "peerASN", r.cfg.PeerASN, "routerID", r.cfg.RouterID,
		"listen", netip.AddrPortFrom(r.cfg.Listen, uint16(r.cfg.Port)), "listen6", r.cfg.Listen6, "neighbors", r.cfg.Neighbors,
		"holdTime", r.cfg.HoldTime, "protocol", Protocol}
	if b := r.cfg.BFD; b != nil {
		attrs = append(attrs, "bfdMinRx", b.MinRx, "bfdMinTx", b.MinTx, "bfdMultiplier", b.Multiplier)
	}
	r.log.Info("router up", attrs...)

	<-ctx.Done()

	cancelWatch()
	<-syncDone
	r.syncMu.Lock()
	r.bgp, r.fib = nil, nil
	r.syncMu.Unlock()
	s.Stop()
	deleted, ferr := f.flush()
	for _, p := range deleted {
		r.log.Info("fib: deleted route on exit", "prefix", p)
	}
	r.mu.Lock()
	clear(r.installed)
	r.mu.Unlock()
	if ferr != nil {
		return fmt.Errorf("remove routes on exit: %w", ferr)
	}
	r.log.Info("router down")
	return nil
}

// startBGP starts the speaker, subscribes to its events, then opens the
// neighbour range: subscribing first means no session's paths can come
// before the router listens for them.
func (r *Router) startBGP(ctx, watchCtx context.Context, s *server.BgpServer) error {
	listen := []string{r.cfg.Listen.String()}
	if r.cfg.Listen6.IsValid() {
		listen = append(listen, r.cfg.Listen6.String())
	}
	if err := s.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn:              r.cfg.ASN,
		RouterId:         r.cfg.RouterID.String(),
		ListenPort:       int32(r.cfg.Port),
		ListenAddresses:  listen,
		UseMultiplePaths: true, // see rib.go
	}}); err != nil {
		return fmt.Errorf("start BGP on %s port %d: %w", r.cfg.Listen, r.cfg.Port, err)
	}
	err := s.WatchEvent(watchCtx, server.WatchEventMessageCallbacks{
		OnBestPath: func(_ []*apiutil.Path, t time.Time) { r.kick(t) },
		OnPeerUpdate: func(ev *apiutil.WatchEventMessage_PeerEvent, t time.Time) {
			if ev.Type == apiutil.PEER_EVENT_STATE {
				r.peerEvent(ev.Peer, t)
			}
		},
	}, server.WatchBestPath(false), server.WatchPeer())
	if err != nil {
		return fmt.Errorf("watch BGP events: %w", err)
	}
	hold := uint64(r.cfg.HoldTime / time.Second)
	if err := s.AddPeerGroup(ctx, &api.AddPeerGroupRequest{PeerGroup: &api.PeerGroup{
		Conf:   &api.PeerGroupConf{PeerGroupName: peerGroup, PeerAsn: r.cfg.PeerASN},
		Timers: &api.Timers{Config: &api.TimersConfig{HoldTime: hold, KeepaliveInterval: max(hold/3, 1)}},
		// Both families on every session: a node offers IPv6 unicast
		// when it has an IPv6 address, over an IPv4 session as well.
		AfiSafis: []*api.AfiSafi{
			{Config: &api.AfiSafiConfig{Family: &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}, Enabled: true}},
			{Config: &api.AfiSafiConfig{Family: &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}, Enabled: true}},
		},
	}}); err != nil {
		return fmt.Errorf("add BGP peer group: %w", err)
	}
	for _, p := range r.cfg.Neighbors {
		if err := s.AddDynamicNeighbor(ctx, &api.AddDynamicNeighborRequest{DynamicNeighbor: &api.DynamicNeighbor{
			Prefix: p.Masked().String(), PeerGroup: peerGroup,
		}}); err != nil {
			return fmt.Errorf("accept BGP neighbours from %s: %w", p, err)
		}
	}
	return nil
}

// PeerFailed reports that peer is gone, faster than BGP's hold time
// could tell (a BFD session went down). The router takes every path
// announced by or pointing at peer out of the kernel before it returns,
// then resets the BGP session so GoBGP drops those paths too. The peer is
// left out of routes until it establishes a new session; its next
// announcements bring it back.
func (r *Router) PeerFailed(peer netip.Addr) error {
	peer = peer.Unmap()
	r.syncMu.Lock()
	s := r.bgp
	r.syncMu.Unlock()
	if s == nil {
		return errors.New("router: not running")
	}
	r.mu.Lock()
	r.failed[peer] = true
	r.mu.Unlock()
	r.log.Warn("peer failed: taking its paths out of the FIB and resetting its session", "peer", peer,
		"fix", "check the peer and the link to it; its paths return when its BGP session is established again")
	r.sync(time.Now())
	err := s.ResetPeer(context.Background(), &api.ResetPeerRequest{
		Address:       peer.String(),
		Communication: "xlb router: peer failure detected",
	})
	if err != nil {
		return fmt.Errorf("router: reset session with %s: %w", peer, err)
	}
	return nil
}

// peerEvent records a session state change and calls the hooks.
func (r *Router) peerEvent(p apiutil.Peer, t time.Time) {
	addr := p.State.NeighborAddress.Unmap()
	if !addr.IsValid() {
		addr = p.Conf.NeighborAddress.Unmap()
	}
	state := p.State.SessionState
	r.mu.Lock()
	pi := r.peers[addr]
	if pi == nil {
		pi = &peerInfo{state: bgp.BGP_FSM_IDLE}
		r.peers[addr] = pi
	}
	was := pi.state
	if state != was {
		pi.state, pi.since = state, t
	}
	if p.State.PeerASN != 0 {
		pi.asn = p.State.PeerASN
	}
	up := state == bgp.BGP_FSM_ESTABLISHED && was != bgp.BGP_FSM_ESTABLISHED
	down := state != bgp.BGP_FSM_ESTABLISHED && was == bgp.BGP_FSM_ESTABLISHED
	if up {
		delete(r.failed, addr) // a new session: its paths are news
	}
	asn := pi.asn
	r.mu.Unlock()

	switch {
	case up:
		r.log.Info("peer established", "peer", addr, "asn", asn)
		if b := r.bfd.Load(); b != nil {
			b.established(addr)
		}
		if h := r.cfg.Hooks.OnPeerEstablished; h != nil {
			h(addr)
		}
	case down:
		r.log.Info("peer down", "peer", addr, "state", stateName(state), "reason", p.State.DisconnectMessage)
		if h := r.cfg.Hooks.OnPeerDown; h != nil {
			h(addr)
		}
		// GoBGP dropped the peer's paths before it sent this event, and
		// that raised best-path events already; one more read is cheap
		// and does not rely on it.
		r.kick(t)
	default:
		r.log.Debug("peer state", "peer", addr, "state", stateName(state))
	}
}

// established reports whether the BGP session with peer is
// established.
func (r *Router) established(peer netip.Addr) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	pi := r.peers[peer.Unmap()]
	return pi != nil && pi.state == bgp.BGP_FSM_ESTABLISHED
}

// kick asks for a resync; t is when the event happened, to report the
// delay from event to FIB.
func (r *Router) kick(t time.Time) {
	r.pending.CompareAndSwap(0, t.UnixNano())
	select {
	case r.kickc <- struct{}{}:
	default: // one is already pending: it will see this change too
	}
}

func (r *Router) syncLoop(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kickc:
			var since time.Time
			if n := r.pending.Swap(0); n != 0 {
				since = time.Unix(0, n)
			}
			r.sync(since)
		}
	}
}

// sync makes the kernel routes equal to the RIB's multipath sets. A
// change the kernel refuses is logged and kept in the status; the next
// event retries it.
func (r *Router) sync(since time.Time) {
	r.syncMu.Lock()
	defer r.syncMu.Unlock()
	if r.bgp == nil {
		return
	}
	r.mu.Lock()
	failed := maps.Clone(r.failed)
	installed := maps.Clone(r.installed)
	r.mu.Unlock()

	desired, err := ribRoutes(r.bgp, failed)
	if err != nil {
		r.log.Error("fib: cannot read the BGP table; routes unchanged", "err", err,
			"fix", "see the error; the next BGP event tries again, restart the router if none comes")
		return
	}
	for _, c := range plan(installed, desired) {
		err := r.fib.apply(c)
		r.mu.Lock()
		if err != nil {
			r.fibErrs[c.prefix] = err.Error()
		} else {
			delete(r.fibErrs, c.prefix)
			if c.op == opDelete {
				delete(r.installed, c.prefix)
			} else {
				r.installed[c.prefix] = c.nexthops
			}
		}
		r.mu.Unlock()
		attrs := []any{"op", c.op.String(), "prefix", c.prefix, "nexthops", joinAddrs(c.nexthops), "was", joinAddrs(c.old)}
		if !since.IsZero() {
			attrs = append(attrs, "sinceEvent", time.Since(since).Round(time.Microsecond))
		}
		if err != nil {
			r.log.Error("fib: change failed", append(attrs, "err", err,
				"fix", "see the error (also in the router's status); the next BGP event tries the change again")...)
			continue
		}
		r.log.Info("fib", attrs...)
	}
	// Errors of prefixes nobody wants any more are moot.
	r.mu.Lock()
	for p := range r.fibErrs {
		if _, ok := desired[p]; !ok {
			if _, ok := r.installed[p]; !ok {
				delete(r.fibErrs, p)
			}
		}
	}
	r.mu.Unlock()
}

func stateName(s bgp.FSMState) string {
	switch s {
	case bgp.BGP_FSM_IDLE:
		return "idle"
	case bgp.BGP_FSM_CONNECT:
		return "connect"
	case bgp.BGP_FSM_ACTIVE:
		return "active"
	case bgp.BGP_FSM_OPENSENT:
		return "opensent"
	case bgp.BGP_FSM_OPENCONFIRM:
		return "openconfirm"
	case bgp.BGP_FSM_ESTABLISHED:
		return "established"
	}
	return s.String()
}

// gobgpLogger passes GoBGP's own messages at warning and above (its
// info messages repeat the router's peer log) unless the router logs
// debug.
func gobgpLogger(l *slog.Logger) *slog.Logger {
	floor := slog.LevelWarn
	if l.Enabled(context.Background(), slog.LevelDebug) {
		floor = slog.LevelDebug
	}
	return slog.New(minLevel{l.Handler().WithAttrs([]slog.Attr{slog.String("component", "gobgp")}), floor})
}

type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(as), h.min}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h.Handler.WithGroup(name), h.min}
}
