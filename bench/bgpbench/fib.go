package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/testbed/netns"
)

// fibPoll is how often the watch reads the route even without a
// notification: a safety net in case the kernel changes the route
// without telling (it should not), and the bound on how late such a
// change could be seen.
const fibPoll = 5 * time.Millisecond

// How a change was seen.
const (
	seenNotify = "notify" // a route notification arrived, the read that followed showed the change
	seenPoll   = "poll"   // a periodic read showed it first
)

// fibWatch follows the router namespace's kernel route to one VIP: the
// main-table route whose destination is VIP/32, the one a BGP router
// installs. It subscribes to route notifications inside the namespace
// and re-reads the route on each, so a change is seen as soon as the
// kernel reports it; it also re-reads every fibPoll.
type fibWatch struct {
	vip    netip.Addr
	h      *netlink.Handle
	events chan time.Time // when a route notification was received
	done   chan struct{}
}

// watchFIB starts watching the route to vip in namespace ns.
func watchFIB(ns string, vip netip.Addr) (*fibWatch, error) {
	w := &fibWatch{vip: vip, events: make(chan time.Time, 64), done: make(chan struct{})}
	updates := make(chan netlink.RouteUpdate, 64)
	// Both sockets are created on a thread inside the namespace and stay
	// bound to it, whichever thread reads them later.
	err := netns.Do(ns, func() error {
		h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return fmt.Errorf("netlink handle: %w", err)
		}
		w.h = h
		return netlink.RouteSubscribeWithOptions(updates, w.done, netlink.RouteSubscribeOptions{
			ErrorCallback: func(error) {}, // the poll covers a lost notification
		})
	})
	if err != nil {
		if w.h != nil {
			w.h.Close()
		}
		return nil, fmt.Errorf("watch routes in %s: %w", ns, err)
	}
	go func() {
		for u := range updates {
			// Stamped on receipt; only IPv4 notifications can concern
			// the VIP.
			if u.Family != unix.AF_INET && u.Family != 0 {
				continue
			}
			select {
			case w.events <- time.Now():
			default: // the reader is behind and will read the route anyway
			}
		}
	}()
	return w, nil
}

func (w *fibWatch) close() {
	close(w.done)
	w.h.Close()
}

// hops reads the route's next hops now, sorted; none without a route.
func (w *fibWatch) hops() ([]netip.Addr, error) {
	dst := &net.IPNet{IP: w.vip.AsSlice(), Mask: net.CIDRMask(32, 32)}
	routes, err := w.h.RouteListFiltered(netlink.FAMILY_V4,
		&netlink.Route{Table: unix.RT_TABLE_MAIN, Dst: dst}, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_DST)
	if err != nil {
		return nil, fmt.Errorf("route to %s: %w", w.vip, err)
	}
	return routeHops(routes), nil
}

// routeHops returns the next hops of the route with the lowest metric
// among routes (all to one destination), sorted: the one the kernel
// uses.
func routeHops(routes []netlink.Route) []netip.Addr {
	if len(routes) == 0 {
		return nil
	}
	best := slices.MinFunc(routes, func(a, b netlink.Route) int { return a.Priority - b.Priority })
	var out []netip.Addr
	for _, gw := range append([]net.IP{best.Gw}, gwsOf(best.MultiPath)...) {
		if a, ok := netip.AddrFromSlice(gw); ok {
			out = append(out, a.Unmap())
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

func gwsOf(hops []*netlink.NexthopInfo) []net.IP {
	out := make([]net.IP, 0, len(hops))
	for _, h := range hops {
		out = append(out, h.Gw)
	}
	return out
}

// errFIBTimeout is the error of a wait that saw no matching route.
var errFIBTimeout = errors.New("no matching route")

// wait returns when the route's next hops satisfy ok: the time the
// change was seen (the notification's receipt, or the end of the read
// that showed it), the next hops then, and how it was seen. A route
// that already satisfies ok returns at once with the time of that read.
func (w *fibWatch) wait(ctx context.Context, timeout time.Duration, ok func([]netip.Addr) bool) (time.Time, []netip.Addr, string, error) {
	// Notifications from before the call concern earlier changes.
	for drained := false; !drained; {
		select {
		case <-w.events:
		default:
			drained = true
		}
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(fibPoll)
	defer tick.Stop()
	var pending time.Time // a notification not yet followed by a read
	for {
		seen, how := pending, seenNotify
		pending = time.Time{}
		if seen.IsZero() {
			// One waiting now is as early as this read can be.
			select {
			case seen = <-w.events:
			default:
				how = seenPoll
			}
		}
		hops, err := w.hops()
		if err != nil {
			return time.Time{}, nil, "", err
		}
		if how == seenPoll {
			seen = time.Now()
		}
		if ok(hops) {
			return seen, hops, how, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, hops, "", ctx.Err()
		case <-deadline.C:
			return time.Time{}, hops, "", fmt.Errorf("%w to %s within %s: next hops %v", errFIBTimeout, w.vip, timeout, hops)
		case pending = <-w.events:
		case <-tick.C:
		}
	}
}

// has and lacks are conditions for wait.
func has(a netip.Addr) func([]netip.Addr) bool {
	return func(h []netip.Addr) bool { return slices.Contains(h, a) }
}

func lacks(a netip.Addr) func([]netip.Addr) bool {
	return func(h []netip.Addr) bool { return !slices.Contains(h, a) }
}

// exactly is the condition that the next hops are want, in any order.
func exactly(want []netip.Addr) func([]netip.Addr) bool {
	want = slices.Clone(want)
	slices.SortFunc(want, netip.Addr.Compare)
	return func(h []netip.Addr) bool { return slices.Equal(h, want) }
}
