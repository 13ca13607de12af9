package lb

import (
	"context"
	"log/slog"
	"time"

	"github.com/vishvananda/netlink"
)

// NextHopRefresh is how often the next-hop cache is invalidated when
// nothing else does it, so that a change the watcher missed costs at most
// this long.
const NextHopRefresh = time.Second

// fixNoWatch is what to do when a netlink subscription fails.
const fixNoWatch = "restart the agent to watch again (forwarding continues across restarts); if this repeats, check its limit of open files"

// WatchNextHops keeps the program's next-hop cache coherent with the
// kernel: it invalidates the cache on every neighbour, route or link
// change in this network namespace, and every NextHopRefresh regardless.
// It returns when ctx ends.
func (d *Dataplane) WatchNextHops(ctx context.Context, log *slog.Logger) {
	done := make(chan struct{})
	defer close(done)
	neigh := make(chan netlink.NeighUpdate, 64)
	route := make(chan netlink.RouteUpdate, 64)
	link := make(chan netlink.LinkUpdate, 64)
	if err := netlink.NeighSubscribe(neigh, done); err != nil {
		log.Warn("cannot watch neighbour changes; next hops refresh once a second only", "err", err, "fix", fixNoWatch)
	}
	if err := netlink.RouteSubscribe(route, done); err != nil {
		log.Warn("cannot watch route changes; next hops refresh once a second only", "err", err, "fix", fixNoWatch)
	}
	if err := netlink.LinkSubscribe(link, done); err != nil {
		log.Warn("cannot watch link changes; next hops refresh once a second only", "err", err, "fix", fixNoWatch)
	}
	tick := time.NewTicker(NextHopRefresh)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-neigh:
			if !ok {
				neigh = nil // subscription ended: the ticker still refreshes
			}
		case _, ok := <-route:
			if !ok {
				route = nil
			}
		case _, ok := <-link:
			if !ok {
				link = nil
			}
		case <-tick.C:
		}
		d.mu.Lock()
		err := d.backends.invalidateNextHops()
		d.mu.Unlock()
		if err != nil {
			log.Error("next-hop cache invalidation failed; packets may use a stale next hop", "err", err,
				"fix", "restart the agent if this repeats (forwarding continues across restarts); cached next hops still expire by themselves within about a second")
		}
	}
}
