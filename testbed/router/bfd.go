package router

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
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
	m   *bfd.Manager
	cfg bfd.Config
	log *slog.Logger
}

// startBFD binds BFD on local in the process's network namespace.
func startBFD(local netip.Addr, cfg bfd.Config, log *slog.Logger) (*bfdFollower, error) {
	m, err := bfd.NewManager(local, log.With("component", "bfd"))
	if err != nil {
		return nil, fmt.Errorf("start BFD on %s: %w", local, err)
	}
	return &bfdFollower{m: m, cfg: cfg, log: log}, nil
}

// established starts the session with peer, or keeps the one it has.
// It returns quickly (it opens one socket): it runs on the router's
// event goroutine.
func (b *bfdFollower) established(peer netip.Addr) {
	if err := b.m.Add(peer, b.cfg); err != nil {
		b.log.Error("BFD: cannot start a session; this peer's failures are found by the hold time only",
			"peer", peer, "err", err,
			"fix", "see the error; the session is tried again when the peer's BGP session is established again")
	}
}

// follow reads the BFD events until the manager is closed and reports
// each failure to r.
func (b *bfdFollower) follow(r *Router) {
	// The manager logs every state change itself.
	for ev := range b.m.Events() {
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
	for _, s := range b.m.Sessions() {
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

// close tells every peer AdminDown and stops; follow then returns.
func (b *bfdFollower) close() error {
	if err := b.m.Close(); err != nil && !errors.Is(err, bfd.ErrClosed) {
		return fmt.Errorf("stop BFD: %w", err)
	}
	return nil
}
