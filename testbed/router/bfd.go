package router

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/xlbproject/xlb/internal/bfd"
)

// bfdFollower runs a BFD session (internal/bfd) with every node that has
// established a BGP session, and turns a session that was Up and goes
// Down into Router.PeerFailed: the node's paths leave the FIB within the
// BFD detection time instead of the BGP hold time.
//
// A session stays when its BGP session goes down, for as long as the
// router runs. An xlb node whose BFD saw a failure keeps its BGP session
// down until BFD is Up again (docs/bgp.md, "Forcing a session down");
// removing our session would tell it AdminDown, or stop answering it, and
// keep it out of the routes for good. A session with a node that left
// costs one packet a second, and there are at most as many as the
// neighbour ranges hold.
type bfdFollower struct {
	m4, m6 *bfd.Manager // for IPv4 and IPv6 peers; m6 nil without Listen6
	cfg    bfd.Config
	log    *slog.Logger
}

// startBFD binds BFD on local, and on local6 if valid, in the process's
// network namespace.
func startBFD(local, local6 netip.Addr, cfg bfd.Config, log *slog.Logger) (*bfdFollower, error) {
	m4, err := bfd.NewManager(local, log.With("component", "bfd"))
	if err != nil {
		return nil, fmt.Errorf("start BFD on %s: %w", local, err)
	}
	b := &bfdFollower{m4: m4, cfg: cfg, log: log}
	if local6.IsValid() {
		if b.m6, err = bfd.NewManager(local6, log.With("component", "bfd")); err != nil {
			m4.Close()
			return nil, fmt.Errorf("start BFD on %s: %w", local6, err)
		}
	}
	return b, nil
}

// managers are the running managers.
func (b *bfdFollower) managers() []*bfd.Manager {
	if b.m6 == nil {
		return []*bfd.Manager{b.m4}
	}
	return []*bfd.Manager{b.m4, b.m6}
}

// established starts the session with peer, or keeps the one it has.
// It returns quickly (it opens one socket): it runs on the router's
// event goroutine.
func (b *bfdFollower) established(peer netip.Addr) {
	m := b.m4
	if peer.Is6() {
		m = b.m6
	}
	if m == nil {
		b.log.Error("BFD: no session for an IPv6 peer, as the router has no IPv6 address to run it from; this peer's failures are found by the hold time only",
			"peer", peer, "fix", "give the router an IPv6 listen address (--listen6)")
		return
	}
	if err := m.Add(peer, b.cfg); err != nil {
		b.log.Error("BFD: cannot start a session; this peer's failures are found by the hold time only",
			"peer", peer, "err", err,
			"fix", "see the error; the session is tried again when the peer's BGP session is established again")
	}
}

// follow reads the BFD events until the managers are closed and reports
// each failure to r.
func (b *bfdFollower) follow(r *Router) {
	var wg sync.WaitGroup
	for _, m := range b.managers() {
		wg.Go(func() { b.followEvents(r, m.Events()) })
	}
	wg.Wait()
}

// followEvents is follow for one manager's events.
func (b *bfdFollower) followEvents(r *Router, events <-chan bfd.Event) {
	// The manager logs every state change itself.
	for ev := range events {
		if !failure(ev) {
			if ev.Previous == bfd.StateUp {
				b.log.Info("BFD: the peer stopped its session (AdminDown); its BGP session decides", "peer", ev.Peer)
			}
			continue
		}
		if !r.established(ev.Peer) {
			b.log.Info("BFD session down; its BGP session is already down", "peer", ev.Peer,
				"diag", ev.Diag.String())
			continue
		}
		b.log.Warn("BFD session down: the peer is gone", "peer", ev.Peer, "diag", ev.Diag.String(),
			"remoteDiag", ev.RemoteDiag.String(),
			"fix", "check the peer and the link to it; its routes return when its BGP session is established again")
		if err := r.PeerFailed(ev.Peer); err != nil {
			b.log.Warn("BFD: peer failure not fully handled", "peer", ev.Peer, "err", err,
				"fix", "see the error; the peer's routes leave the FIB at the latest when its BGP hold time expires")
			continue
		}
		b.log.Info("BFD: peer out of the FIB", "peer", ev.Peer, "sinceDown", time.Since(ev.Time).Round(time.Microsecond))
	}
}

// failure reports whether ev means the peer is gone: a session that was
// Up went Down, other than by the peer saying AdminDown. AdminDown is a
// peer stopping BFD on purpose (RFC 5882 §3.2: no reason to declare the
// path dead); a node that stops announcing says so through BGP.
func failure(ev bfd.Event) bool {
	if ev.Previous != bfd.StateUp || ev.State != bfd.StateDown {
		return false
	}
	return !(ev.Diag == bfd.DiagNeighborDown && ev.RemoteDiag == bfd.DiagAdminDown)
}

// sessions returns the status of every session by peer.
func (b *bfdFollower) sessions() map[netip.Addr]*BFDStatus {
	out := make(map[netip.Addr]*BFDStatus)
	for _, s := range slices.Concat(b.m4.Sessions(), b.sessions6()) {
		out[s.Peer] = &BFDStatus{
			State:       s.State.String(),
			RemoteState: s.RemoteState.String(),
			Diag:        s.Diag.String(),
			DetectionMs: float64(s.DetectionTime) / float64(time.Millisecond),
			Downs:       s.Downs,
		}
	}
	return out
}

func (b *bfdFollower) sessions6() []bfd.SessionStatus {
	if b.m6 == nil {
		return nil
	}
	return b.m6.Sessions()
}

// close tells every peer AdminDown and stops; follow then returns.
func (b *bfdFollower) close() error {
	var errs []error
	for _, m := range b.managers() {
		if err := m.Close(); err != nil && !errors.Is(err, bfd.ErrClosed) {
			errs = append(errs, fmt.Errorf("stop BFD: %w", err))
		}
	}
	return errors.Join(errs...)
}
