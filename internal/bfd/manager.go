package bfd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// Errors that callers may test for with errors.Is.
var (
	ErrClosed      = errors.New("bfd manager is closed")
	ErrUnknownPeer = errors.New("no BFD session for this peer")
)

const (
	// rxQueue is how many received packets wait for a busy session
	// before new ones are dropped; at any sane rate one is enough.
	rxQueue = 16
	// adminDownWait bounds how long Remove and Close wait for the peer
	// to acknowledge AdminDown (by reporting Down) before giving up:
	// a lost packet then costs the peer a detection time, not more.
	adminDownWait = time.Second
)

// Event reports a state change of a session caused by the protocol:
// the peer's packets or their absence. Remove and Close report nothing.
type Event struct {
	Peer     netip.Addr
	State    State // the new state
	Previous State
	// Diag is the local diagnostic: why the session left Up
	// (DiagDetectionTimeExpired, DiagNeighborDown), DiagNone on Up.
	Diag       Diag
	RemoteDiag Diag // the diagnostic the peer last sent
	Time       time.Time
}

// SessionStatus is a snapshot of one session, for status output.
type SessionStatus struct {
	Peer        netip.Addr
	Config      Config // with defaults applied
	State       State
	Diag        Diag
	RemoteState State
	RemoteDiag  Diag
	LocalDiscr  uint32
	RemoteDiscr uint32 // 0 while the peer is unknown
	// TxInterval is the negotiated interval between our packets
	// (before jitter), RxInterval the one between the peer's; 0 when
	// not known yet.
	TxInterval    time.Duration
	RxInterval    time.Duration
	DetectionTime time.Duration // 0 while the peer is unknown
	UpSince       time.Time     // zero unless Up
	LastChange    time.Time
	TxPackets     uint64
	RxPackets     uint64
	TxErrors      uint64
	Downs         uint64 // transitions from Up to any other state
}

// Manager runs BFD sessions (RFC 5880 asynchronous mode, RFC 5881 single
// hop) from one local address, IPv4 or IPv6, to peers of that family
// (a node with both runs a Manager per family). All methods are safe for
// concurrent use.
//
// Sockets: one shared socket receives for every session on local:3784
// (the port is fixed by RFC 5881 and can be bound once); each session
// sends from its own socket, bound to a source port of its own in
// 49152–65535, as RFC 5881 §4 recommends, so the peer and any firewall
// between can tell sessions apart and a session's port is freed with it.
// Received packets are checked for TTL 255 (GTSM, RFC 5082) through
// IP_RECVTTL, or hop limit 255 through IPV6_RECVHOPLIMIT; sent ones carry
// TTL (hop limit) 255 and TOS (traffic class) 0xc0.
//
// Not implemented: authentication (packets with the A bit are
// discarded), Demand mode (we never ask for it, and keep sending
// periodically when the peer asks), the Echo function (we advertise a
// Required Min Echo RX Interval of 0), multihop (RFC 5883) and sessions
// over IPv6 link-local addresses.
type Manager struct {
	local  netip.Addr
	log    *slog.Logger
	rx     *net.UDPConn
	netns  *netnsHandle
	events *eventQueue
	wg     sync.WaitGroup // readLoop

	mu      sync.Mutex
	closed  bool
	byPeer  map[netip.Addr]*runner
	byDiscr map[uint32]*runner

	drops dropCounters
}

// NewManager binds local:3784 in the calling thread's network namespace;
// every session's socket is opened in that namespace too. local must be
// an address assigned to this host (or net.ipv4.ip_nonlocal_bind, for
// IPv6 net.ipv6.ip_nonlocal_bind, must be set).
func NewManager(local netip.Addr, log *slog.Logger) (*Manager, error) {
	local = local.Unmap()
	switch {
	case !local.IsValid() || local.IsUnspecified() || local.IsMulticast():
		return nil, fmt.Errorf("bfd local address %v: want a unicast IPv4 or IPv6 address", local)
	case local.Zone() != "" || local.IsLinkLocalUnicast():
		return nil, fmt.Errorf("bfd local address %v: link-local; use the node's global (or unique local) address", local)
	}
	if log == nil {
		log = slog.Default()
	}
	log = log.With("bfd.local", local.String())
	ns, err := currentNetns()
	if err != nil {
		return nil, fmt.Errorf("bfd: %w", err)
	}
	rx, err := listenRx(local)
	if err != nil {
		ns.close()
		return nil, fmt.Errorf("bfd: %w (is another BFD daemon running?)", err)
	}
	m := &Manager{
		local:   local,
		log:     log,
		rx:      rx,
		netns:   ns,
		events:  newEventQueue(log),
		byPeer:  make(map[netip.Addr]*runner),
		byDiscr: make(map[uint32]*runner),
	}
	m.wg.Add(1)
	go m.readLoop()
	return m, nil
}

// Add starts a session to peer, or changes the configuration of the
// running one (through a Poll sequence if it is Up). Zero fields of cfg
// take the defaults.
func (m *Manager) Add(peer netip.Addr, cfg Config) error {
	peer = peer.Unmap()
	if !peer.IsValid() || peer.Is4() != m.local.Is4() || peer.IsUnspecified() || peer.IsMulticast() || peer.IsLinkLocalUnicast() || peer == m.local {
		return fmt.Errorf("bfd peer %v: want a unicast %s address other than the local %v", peer, family(m.local), m.local)
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("bfd peer %v: %w", peer, err)
	}
	cfg = cfg.WithDefaults()

	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	if r := m.byPeer[peer]; r != nil {
		r.setConfig(cfg)
		return nil
	}
	var conn *net.UDPConn
	err := m.netns.do(func() (err error) {
		conn, err = dialTx(m.local, peer)
		return err
	})
	if err != nil {
		return fmt.Errorf("bfd peer %v: %w", peer, err)
	}
	discr := m.newDiscr()
	r := &runner{
		m:    m,
		log:  m.log.With("bfd.peer", peer.String()),
		conn: conn,
		rxc:  make(chan received, rxQueue),
		kick: make(chan struct{}, 1),
		stop: make(chan bool, 1),
		done: make(chan struct{}),
		s:    newSession(peer, cfg, discr, time.Now(), rand.Float64),
	}
	m.byPeer[peer] = r
	m.byDiscr[discr] = r
	go r.run()
	r.log.Info("BFD session added", "minTx", cfg.MinTx, "minRx", cfg.MinRx, "multiplier", cfg.Multiplier, "passive", cfg.Passive)
	return nil
}

// newDiscr picks a random unused non-zero discriminator, so that a
// restarted xlb does not reuse the one the peer still remembers.
func (m *Manager) newDiscr() uint32 {
	for {
		d := rand.Uint32()
		if d != 0 && m.byDiscr[d] == nil {
			return d
		}
	}
}

// Remove tells the peer AdminDown (§6.8.16), so it goes Down with
// diagnostic Neighbor Signaled Session Down instead of waiting for its
// detection time, and ends the session. It waits up to a second for the
// peer to acknowledge.
func (m *Manager) Remove(peer netip.Addr) error {
	peer = peer.Unmap()
	m.mu.Lock()
	r := m.byPeer[peer]
	// From now on Add starts a new session, but the peer's answer to
	// our AdminDown, addressed by discriminator, still reaches this one.
	delete(m.byPeer, peer)
	m.mu.Unlock()
	if r == nil {
		return fmt.Errorf("bfd peer %v: %w", peer, ErrUnknownPeer)
	}
	r.halt(true)
	m.mu.Lock()
	delete(m.byDiscr, r.s.localDiscr)
	m.mu.Unlock()
	r.log.Info("BFD session removed")
	return nil
}

// Events returns the channel of state changes. It is closed by Close.
// Events queue up (up to a limit, past which the oldest are dropped and
// logged) while nobody reads, so a slow reader never delays a session.
func (m *Manager) Events() <-chan Event { return m.events.out }

// Sessions returns a snapshot of every session, ordered by peer.
func (m *Manager) Sessions() []SessionStatus {
	m.mu.Lock()
	runners := make([]*runner, 0, len(m.byPeer))
	for _, r := range m.byPeer {
		runners = append(runners, r)
	}
	m.mu.Unlock()
	out := make([]SessionStatus, 0, len(runners))
	for _, r := range runners {
		out = append(out, r.status())
	}
	slices.SortFunc(out, func(a, b SessionStatus) int { return a.Peer.Compare(b.Peer) })
	return out
}

// Close sends AdminDown on every session (in parallel, waiting up to a
// second for acknowledgements), then closes every socket and the Events
// channel. Calling it again does nothing.
func (m *Manager) Close() error { return m.shutdown(true) }

// shutdown stops everything; graceful says whether the peers are told
// (tests simulate a crash without it).
func (m *Manager) shutdown(graceful bool) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	runners := make([]*runner, 0, len(m.byPeer))
	for _, r := range m.byPeer {
		runners = append(runners, r)
	}
	clear(m.byPeer)
	m.mu.Unlock()

	var wg sync.WaitGroup
	for _, r := range runners {
		wg.Go(func() { r.halt(graceful) })
	}
	wg.Wait()
	m.mu.Lock()
	clear(m.byDiscr)
	m.mu.Unlock()
	err := m.rx.Close()
	m.wg.Wait()
	m.events.close()
	return errors.Join(err, m.netns.close())
}

func (m *Manager) readLoop() {
	defer m.wg.Done()
	// A control packet is at most 255 bytes (its Length field is one
	// octet); anything beyond is ignored.
	buf := make([]byte, 512)
	oob := make([]byte, 64)
	for {
		n, oobn, _, from, err := m.rx.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			m.log.Warn("BFD receive failed", "err", err,
				"fix", "nothing if it does not repeat (the read is retried); if it does, sessions go down: check the host's memory and the interface")
			// Read errors on an unconnected UDP socket are transient
			// (e.g. ENOMEM); do not spin on them.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		m.handle(buf[:n], oob[:oobn], from.Addr().Unmap(), time.Now())
	}
}

// handle checks a received datagram and hands it to its session.
func (m *Manager) handle(b, oob []byte, from netip.Addr, now time.Time) {
	if ttl, ok := receivedTTL(oob); !ok || ttl != gtsmTTL {
		m.drop(dropTTL, from, fmt.Errorf("TTL %d, want %d (single hop only)", ttl, gtsmTTL))
		return
	}
	p, err := decode(b)
	if err != nil {
		m.drop(dropMalformed, from, err)
		return
	}
	m.mu.Lock()
	var r *runner
	if p.yourDiscr != 0 {
		r = m.byDiscr[p.yourDiscr]
	} else {
		// Single hop: a packet that does not know our discriminator
		// yet belongs to the session of its source (RFC 5881 §3).
		r = m.byPeer[from]
	}
	m.mu.Unlock()
	switch {
	case r == nil:
		m.drop(dropNoSession, from, fmt.Errorf("no session for your discriminator %d", p.yourDiscr))
		return
	case r.s.peer != from:
		m.drop(dropWrongSource, from, fmt.Errorf("discriminator %d belongs to peer %v", p.yourDiscr, r.s.peer))
		return
	}
	select {
	case r.rxc <- received{p: p, at: now}:
	default:
		m.drop(dropQueueFull, from, errors.New("session busy"))
	}
}

// Reasons for dropping a packet before it reaches a session.
const (
	dropTTL = iota
	dropMalformed
	dropNoSession
	dropWrongSource
	dropQueueFull
	numDrops
)

var dropNames = [numDrops]string{"bad TTL", "malformed", "no session", "wrong source", "queue full"}

// dropCounters counts dropped packets; the first drop of each kind is
// logged as a warning (usually a misconfigured peer), later ones at
// debug level, so a flood cannot flood the log.
type dropCounters struct {
	mu sync.Mutex
	n  [numDrops]uint64
}

func (m *Manager) drop(kind int, from netip.Addr, err error) {
	m.drops.mu.Lock()
	m.drops.n[kind]++
	first := m.drops.n[kind] == 1
	m.drops.mu.Unlock()
	level := slog.LevelDebug
	if first {
		level = slog.LevelWarn
	}
	m.log.Log(context.Background(), level, "BFD packet dropped", "reason", dropNames[kind], "from", from.String(), "err", err)
}

func (m *Manager) dropped(kind int) uint64 {
	m.drops.mu.Lock()
	defer m.drops.mu.Unlock()
	return m.drops.n[kind]
}

// family names addr's address family for messages.
func family(addr netip.Addr) string {
	if addr.Is4() {
		return "IPv4"
	}
	return "IPv6"
}
