package router

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Protocol is the rtnetlink protocol number (rtm_protocol) of every route
// the router installs. The kernel keeps it with the route and filters
// dumps and deletes on it, so the router only ever lists, replaces or
// deletes its own routes, and a successor finds what a crashed
// predecessor left behind. 201 is in neither iproute2's list nor FRR's
// (/etc/iproute2/rt_protos and rt_protos.d: FRR uses 186 to 197), so
// routes of FRR, BIRD or `ip route add` in the same namespace are never
// touched. `ip route` prints it as "proto 201".
const Protocol = 201

// routeMetric is the rtm_priority of the router's routes: 20, as FRR's
// zebra installs BGP routes, so the routes look alike with either router.
// A route is keyed by (table, destination, metric): a foreign route to
// the same prefix with another metric coexists with ours.
const routeMetric = 20

// op is what a change does to one kernel route.
type op int

const (
	opAdd     op = iota + 1 // no route of ours yet: create it
	opReplace               // ours exists with other next hops: swap in one message
	opDelete                // ours exists, nothing wants it any more
)

func (o op) String() string {
	switch o {
	case opAdd:
		return "add"
	case opReplace:
		return "replace"
	case opDelete:
		return "delete"
	}
	return fmt.Sprintf("op(%d)", int(o))
}

// change turns one prefix's installed route into the wanted one.
type change struct {
	op       op
	prefix   netip.Prefix
	nexthops []netip.Addr // wanted; nil for opDelete
	old      []netip.Addr // installed before; nil for opAdd
}

// normalize returns the next hops sorted and without duplicates or
// invalid addresses, so that two sets compare equal whatever order the
// paths arrived in (two peers may also announce the same next hop).
func normalize(hops []netip.Addr) []netip.Addr {
	out := make([]netip.Addr, 0, len(hops))
	for _, h := range hops {
		if h.IsValid() && !h.IsUnspecified() {
			out = append(out, h.Unmap())
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return slices.Compact(out)
}

// plan returns the changes that turn the installed routes into the
// desired ones, ordered by prefix. Both maps hold normalized next-hop
// sets; a prefix with no next hops counts as absent.
func plan(installed, desired map[netip.Prefix][]netip.Addr) []change {
	var changes []change
	for p, want := range desired {
		if len(want) == 0 {
			continue
		}
		have := installed[p]
		switch {
		case len(have) == 0:
			changes = append(changes, change{op: opAdd, prefix: p, nexthops: want})
		case !slices.Equal(have, want):
			changes = append(changes, change{op: opReplace, prefix: p, nexthops: want, old: have})
		}
	}
	for p, have := range installed {
		if len(have) > 0 && len(desired[p]) == 0 {
			changes = append(changes, change{op: opDelete, prefix: p, old: have})
		}
	}
	slices.SortFunc(changes, func(a, b change) int {
		return cmp.Or(a.prefix.Addr().Compare(b.prefix.Addr()), cmp.Compare(a.prefix.Bits(), b.prefix.Bits()))
	})
	return changes
}

// routeFor is the kernel route for prefix over nexthops in table: one
// gateway for a single next hop, else one RTA_MULTIPATH route with a
// next hop each, which the kernel hashes flows over (L4 hash with
// fib_multipath_hash_policy=1). The device is left to the kernel, which
// finds it from the gateway; a gateway that is not directly reachable is
// refused (ENETUNREACH), as BGP next hops are expected to be on a
// connected segment here.
func routeFor(prefix netip.Prefix, nexthops []netip.Addr, table int) *netlink.Route {
	r := &netlink.Route{
		Dst:      prefixToIPNet(prefix),
		Protocol: Protocol,
		Priority: routeMetric,
		Table:    table,
		Family:   family(prefix.Addr()),
		Type:     unix.RTN_UNICAST,
		Scope:    netlink.SCOPE_UNIVERSE,
	}
	if len(nexthops) == 1 {
		r.Gw = net.IP(nexthops[0].AsSlice())
		return r
	}
	for _, h := range nexthops {
		r.MultiPath = append(r.MultiPath, &netlink.NexthopInfo{Gw: net.IP(h.AsSlice())})
	}
	return r
}

func family(a netip.Addr) int {
	if a.Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}

func prefixToIPNet(p netip.Prefix) *net.IPNet {
	p = p.Masked()
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// fib changes the kernel routing table of the namespace it was opened in.
type fib struct {
	h     *netlink.Handle
	table int
}

// openFIB opens a netlink socket in the calling thread's namespace; the
// socket stays in that namespace whichever thread uses it later.
func openFIB(table int) (*fib, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("open netlink: %w", err)
	}
	return &fib{h: h, table: table}, nil
}

func (f *fib) close() { f.h.Close() }

// apply makes one change in the kernel. An add refuses to overwrite a
// route that is not ours (same prefix and metric, another protocol): the
// kernel answers EEXIST and the route stays theirs.
func (f *fib) apply(c change) error {
	var err error
	switch c.op {
	case opAdd:
		err = f.h.RouteAdd(routeFor(c.prefix, c.nexthops, f.table))
		if errors.Is(err, unix.EEXIST) {
			err = fmt.Errorf("%w (a route to %s with metric %d that the router did not install is in the way)", err, c.prefix, routeMetric)
		}
	case opReplace:
		err = f.h.RouteReplace(routeFor(c.prefix, c.nexthops, f.table))
	case opDelete:
		// The protocol in a delete request must match the route's, so
		// this never removes a foreign route to the same prefix.
		err = f.h.RouteDel(&netlink.Route{
			Dst:      prefixToIPNet(c.prefix),
			Protocol: Protocol,
			Priority: routeMetric,
			Table:    f.table,
			Family:   family(c.prefix.Addr()),
		})
		if errors.Is(err, unix.ESRCH) {
			err = nil // already gone: that is what we wanted
		}
	default:
		err = fmt.Errorf("unknown operation %v", c.op)
	}
	if err != nil {
		return fmt.Errorf("%s route %s via %s: %w", c.op, c.prefix, joinAddrs(c.nexthops), err)
	}
	return nil
}

// flush deletes every route of Protocol in the table, of both families:
// a crashed predecessor's routes at start, its own at exit. It returns
// the routes it deleted.
func (f *fib) flush() ([]netip.Prefix, error) {
	filter := &netlink.Route{Protocol: Protocol, Table: f.table}
	var routes []netlink.Route
	var err error
	// A dump that races a change is reported as interrupted; a few
	// retries get a consistent one.
	for range 5 {
		routes, err = f.h.RouteListFiltered(netlink.FAMILY_ALL, filter, netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("list routes of protocol %d: %w", Protocol, err)
	}
	var deleted []netip.Prefix
	var errs []error
	for _, r := range routes {
		if err := f.h.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("delete route %s: %w", r.Dst, err))
			continue
		}
		if p, ok := ipNetToPrefix(r.Dst, r.Family); ok {
			deleted = append(deleted, p)
		}
	}
	return deleted, errors.Join(errs...)
}

func ipNetToPrefix(n *net.IPNet, fam int) (netip.Prefix, bool) {
	if n == nil {
		// netlink leaves Dst nil for a default route.
		if fam == netlink.FAMILY_V6 {
			return netip.PrefixFrom(netip.IPv6Unspecified(), 0), true
		}
		return netip.PrefixFrom(netip.IPv4Unspecified(), 0), true
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones), true
}

// enableForwarding makes the namespace a router of both families that
// spreads flows over all next hops of a multipath route by their L4 hash
// (policy 1: the 5-tuple), not just by addresses, so that many clients'
// connections to one VIP spread over the xlb nodes even from a single
// client address. /proc/sys/net is the calling process's namespace.
func enableForwarding() error {
	for _, s := range []struct{ key, value string }{
		{"ipv4/ip_forward", "1"},
		{"ipv4/fib_multipath_hash_policy", "1"},
		{"ipv6/conf/all/forwarding", "1"},
		{"ipv6/fib_multipath_hash_policy", "1"},
	} {
		err := os.WriteFile("/proc/sys/net/"+s.key, []byte(s.value), 0o644)
		if errors.Is(err, os.ErrNotExist) && strings.HasPrefix(s.key, "ipv6/") {
			continue // a kernel without IPv6 routes IPv4 alone
		}
		if err != nil {
			return fmt.Errorf("sysctl net/%s=%s: %w", s.key, s.value, err)
		}
	}
	return nil
}

func joinAddrs(as []netip.Addr) string {
	if len(as) == 0 {
		return "-"
	}
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}
