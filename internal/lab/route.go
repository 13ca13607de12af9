package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
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
	var addrs []netip.Addr
	for _, k := range nodes {
		if k < 1 || k > len(p.Nodes) {
			return fmt.Errorf("lab %q: no node %d (it has nodes 1 to %d)", prefix, k, len(p.Nodes))
		}
		a := p.Nodes[k-1].Addr
		if slices.Contains(addrs, a) {
			return fmt.Errorf("lab %q: node %d given twice", prefix, k)
		}
		addrs = append(addrs, a)
	}
	return setRoute(context.Background(), p, addrs)
}

func allNodes(p Plan) []netip.Addr {
	var addrs []netip.Addr
	for _, n := range p.Nodes {
		addrs = append(addrs, n.Addr)
	}
	return addrs
}

// setRoute points the VIP prefix at the given next hops; `ip route
// replace` swaps the route in one netlink message, so no packet sees the
// prefix unrouted while the set changes.
func setRoute(ctx context.Context, p Plan, nexthops []netip.Addr) error {
	dst := p.VIPPrefix.String()
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

// Nexthops returns the next hops of the router's route to the whole VIP
// prefix (the one Up and SetNodes install); none if there is no such
// route.
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
	out, err := ip(ctx, "-j", "-n", router, "route", "show", "root", vips.String())
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
