package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/testbed/netns"
)

// Route is one route of the router within the VIP prefix.
type Route struct {
	Dst      netip.Prefix `json:"dst"`
	Protocol string       `json:"protocol,omitempty"` // static for the lab's own route; bgp once BGP installs them
	Nexthops []netip.Addr `json:"nexthops"`
}

// SetNodes replaces the router's static route to the VIP prefix with a
// multipath route over exactly the given nodes (numbers 1..N, as in
// node1). No nodes removes the route: the VIPs become unreachable.
func SetNodes(prefix string, nodes []int) error {
	p, err := Load(prefix)
	if err != nil {
		return err
	}
	if p.Spec.Router != RouterStatic {
		return fmt.Errorf("lab %q: its %s router learns the VIPs' next hops from the nodes over BGP; SetNodes works with the static router only", prefix, p.Spec.Router)
	}
	var hosts []Host
	for _, k := range nodes {
		if k < 1 || k > len(p.Nodes) {
			return fmt.Errorf("lab %q: no node %d (it has nodes 1 to %d)", prefix, k, len(p.Nodes))
		}
		h := p.Nodes[k-1]
		if slices.ContainsFunc(hosts, func(o Host) bool { return o.Name == h.Name }) {
			return fmt.Errorf("lab %q: node %d given twice", prefix, k)
		}
		hosts = append(hosts, h)
	}
	return setRoutes(context.Background(), p, hosts)
}

// setStaticRoute routes the VIP prefix over all nodes, for the static
// router; the BGP routers install the routes they learn instead.
func setStaticRoute(ctx context.Context, p Plan) error {
	if p.Spec.Router != RouterStatic {
		return nil
	}
	return setRoutes(ctx, p, p.Nodes)
}

// setRoutes points the VIP prefix at the given nodes' addresses and, in
// a dual-stack lab, the IPv6 VIP prefix at their IPv6 addresses.
func setRoutes(ctx context.Context, p Plan, nodes []Host) error {
	var addrs, addrs6 []netip.Addr
	for _, n := range nodes {
		addrs = append(addrs, n.Addr)
		addrs6 = append(addrs6, n.Addr6)
	}
	if err := setRoute(ctx, p, p.VIPPrefix, addrs); err != nil {
		return err
	}
	if !p.VIPPrefix6.IsValid() {
		return nil
	}
	return setRoute(ctx, p, p.VIPPrefix6, addrs6)
}

// setRoute points dst at the given next hops; `ip route replace` swaps
// the route in one netlink message, so no packet sees the prefix
// unrouted while the set changes.
func setRoute(ctx context.Context, p Plan, prefix netip.Prefix, nexthops []netip.Addr) error {
	dst := prefix.String()
	if len(nexthops) == 0 {
		_, err := ip(ctx, "-n", p.Router, "route", "del", dst, "proto", "static")
		if err != nil && strings.Contains(err.Error(), "No such process") {
			return nil // already gone
		}
		return err
	}
	args := []string{"-n", p.Router, "route", "replace", dst, "proto", "static"}
	for _, a := range nexthops {
		args = append(args, "nexthop", "via", a.String())
	}
	_, err := ip(ctx, args...)
	return err
}

// Nexthops returns the next hops of the router's route to the whole
// (IPv4) VIP prefix (the one Up and SetNodes install); none if there is
// no such route.
func Nexthops(prefix string) ([]netip.Addr, error) {
	p, err := Load(prefix)
	if err != nil {
		return nil, err
	}
	routes, err := vipRoutes(context.Background(), p.Router, p.VIPPrefix)
	if err != nil {
		return nil, err
	}
	for _, r := range routes {
		if r.Dst == p.VIPPrefix {
			return r.Nexthops, nil
		}
	}
	return nil, nil
}

// vipRoutes lists the router's routes to destinations within vips.
func vipRoutes(ctx context.Context, router string, vips netip.Prefix) ([]Route, error) {
	family := "-4"
	if !vips.Addr().Is4() {
		family = "-6"
	}
	out, err := ip(ctx, "-j", family, "-n", router, "route", "show", "root", vips.String())
	if err != nil {
		return nil, err
	}
	return parseRoutes(out)
}

// parseRoutes decodes `ip -j route show`: a single-path route has its
// gateway at the top level, a multipath route a list of nexthops.
func parseRoutes(b []byte) ([]Route, error) {
	type hop struct {
		Gateway string `json:"gateway"`
	}
	var raw []struct {
		Dst      string `json:"dst"`
		Protocol string `json:"protocol"`
		hop
		Nexthops []hop `json:"nexthops"`
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil, nil
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("routes from ip: %w", err)
	}
	var routes []Route
	for _, r := range raw {
		dst, err := parseDst(r.Dst)
		if err != nil {
			return nil, err
		}
		route := Route{Dst: dst, Protocol: r.Protocol, Nexthops: []netip.Addr{}}
		hops := r.Nexthops
		if r.Gateway != "" {
			hops = append(hops, r.hop)
		}
		for _, h := range hops {
			a, err := netip.ParseAddr(h.Gateway)
			if err != nil {
				return nil, fmt.Errorf("route %s: next hop %q: %w", r.Dst, h.Gateway, err)
			}
			route.Nexthops = append(route.Nexthops, a)
		}
		routes = append(routes, route)
	}
	return routes, nil
}

// parseDst reads a route destination; ip prints host routes without /32.
func parseDst(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("route destination %q: not an address or prefix", s)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// RouteNextHops returns the next hops of the route the router's kernel
// uses for vip: the longest prefix in its main table that holds vip,
// the lowest metric among equals. They are sorted; none if no route
// holds vip. Whichever router installed the route (static, embedded,
// FRR's zebra), this is what forwarding follows.
func RouteNextHops(ctx context.Context, p Plan, vip netip.Addr) ([]netip.Addr, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var hops []netip.Addr
	err := netns.Do(p.Router, func() (err error) {
		hops, err = kernelNextHops(vip)
		return err
	})
	return hops, err
}

// WaitNextHops waits until RouteNextHops(vip) is exactly want (in any
// order; no want waits for no route), for at most timeout. The error
// says what the route was at the end.
func WaitNextHops(ctx context.Context, p Plan, vip netip.Addr, want []netip.Addr, timeout time.Duration) error {
	want = slices.Clone(want)
	slices.SortFunc(want, netip.Addr.Compare)
	// One thread in the namespace for the whole wait: polling then
	// costs one netlink dump, not a thread.
	r, err := netns.NewRunner(p.Router)
	if err != nil {
		return err
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var got []netip.Addr
	for {
		err := r.Do(func() (err error) {
			got, err = kernelNextHops(vip)
			return err
		})
		if err != nil {
			return err
		}
		if slices.Equal(got, want) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("lab %q: route to %s via %v after %s, want via %v: %w", p.Spec.Prefix, vip, got, timeout, want, ctx.Err())
		case <-tick.C:
		}
	}
}

// kernelNextHops looks vip up in the main table of the calling thread's
// namespace. It lists the table instead of asking the kernel for the
// route to vip, which would name one next hop of a multipath route.
func kernelNextHops(vip netip.Addr) ([]netip.Addr, error) {
	family := netlink.FAMILY_V4
	if !vip.Is4() {
		family = netlink.FAMILY_V6
	}
	routes, err := netlink.RouteListFiltered(family, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("list routes: %w", err)
	}
	var best *netlink.Route
	bestBits := -1
	for i, rt := range routes {
		bits := 0 // a nil Dst is the default route
		if rt.Dst != nil {
			ones, _ := rt.Dst.Mask.Size()
			p, ok := prefixOf(rt.Dst.IP, ones)
			if !ok || !p.Contains(vip) {
				continue
			}
			bits = ones
		}
		if bits > bestBits || (bits == bestBits && rt.Priority < best.Priority) {
			best, bestBits = &routes[i], bits
		}
	}
	if best == nil {
		return nil, nil
	}
	var hops []netip.Addr
	add := func(ip net.IP) {
		if a, ok := netip.AddrFromSlice(ip); ok {
			hops = append(hops, a.Unmap())
		}
	}
	add(best.Gw)
	for _, nh := range best.MultiPath {
		add(nh.Gw)
	}
	slices.SortFunc(hops, netip.Addr.Compare)
	return hops, nil
}

func prefixOf(ip net.IP, bits int) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.Prefix{}, false
	}
	p, err := a.Unmap().Prefix(bits)
	return p, err == nil
}
