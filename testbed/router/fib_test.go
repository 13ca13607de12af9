package router

import (
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/vishvananda/netlink"
)

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func TestNormalize(t *testing.T) {
	tests := []struct {
		name string
		in   []netip.Addr
		want []netip.Addr
	}{
		{"empty", nil, []netip.Addr{}},
		{"sorted", addrs("10.0.0.3", "10.0.0.1", "10.0.0.2"), addrs("10.0.0.1", "10.0.0.2", "10.0.0.3")},
		{"duplicates", addrs("10.0.0.2", "10.0.0.1", "10.0.0.2"), addrs("10.0.0.1", "10.0.0.2")},
		{"v4-mapped equals v4", addrs("::ffff:10.0.0.1", "10.0.0.1"), addrs("10.0.0.1")},
		{"invalid and unspecified dropped", append(addrs("0.0.0.0", "10.0.0.1"), netip.Addr{}), addrs("10.0.0.1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := normalize(tt.in); !slices.Equal(got, tt.want) {
				t.Errorf("normalize(%v) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestPlan(t *testing.T) {
	a, b, c := netip.MustParseAddr("10.0.1.2"), netip.MustParseAddr("10.0.1.3"), netip.MustParseAddr("10.0.1.4")
	vip1, vip2 := pfx("10.99.0.1/32"), pfx("10.99.0.2/32")
	type routes = map[netip.Prefix][]netip.Addr
	tests := []struct {
		name               string
		installed, desired routes
		want               []change
	}{
		{"nothing", nil, nil, nil},
		{"first path adds", routes{}, routes{vip1: {a}},
			[]change{{op: opAdd, prefix: vip1, nexthops: []netip.Addr{a}}}},
		{"second path replaces", routes{vip1: {a}}, routes{vip1: {a, b}},
			[]change{{op: opReplace, prefix: vip1, nexthops: []netip.Addr{a, b}, old: []netip.Addr{a}}}},
		{"withdraw of one of three replaces", routes{vip1: {a, b, c}}, routes{vip1: {a, c}},
			[]change{{op: opReplace, prefix: vip1, nexthops: []netip.Addr{a, c}, old: []netip.Addr{a, b, c}}}},
		{"same hops, different next hop replaces", routes{vip1: {a}}, routes{vip1: {b}},
			[]change{{op: opReplace, prefix: vip1, nexthops: []netip.Addr{b}, old: []netip.Addr{a}}}},
		{"last path gone deletes", routes{vip1: {a}}, routes{},
			[]change{{op: opDelete, prefix: vip1, old: []netip.Addr{a}}}},
		{"empty set counts as gone", routes{vip1: {a, b}}, routes{vip1: {}},
			[]change{{op: opDelete, prefix: vip1, old: []netip.Addr{a, b}}}},
		{"unchanged is no change", routes{vip1: {a, b}, vip2: {c}}, routes{vip1: {a, b}, vip2: {c}}, nil},
		{"several prefixes, ordered", routes{vip2: {a}, pfx("10.99.0.0/24"): {a}}, routes{vip1: {a}, pfx("10.99.0.0/24"): {b}},
			[]change{
				{op: opReplace, prefix: pfx("10.99.0.0/24"), nexthops: []netip.Addr{b}, old: []netip.Addr{a}},
				{op: opAdd, prefix: vip1, nexthops: []netip.Addr{a}},
				{op: opDelete, prefix: vip2, old: []netip.Addr{a}},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := plan(tt.installed, tt.desired)
			if !slices.EqualFunc(got, tt.want, func(x, y change) bool {
				return x.op == y.op && x.prefix == y.prefix && slices.Equal(x.nexthops, y.nexthops) && slices.Equal(x.old, y.old)
			}) {
				t.Errorf("plan() =\n  %+v\nwant\n  %+v", got, tt.want)
			}
		})
	}
}

func TestRouteFor(t *testing.T) {
	tests := []struct {
		name      string
		prefix    netip.Prefix
		nexthops  []netip.Addr
		wantDst   string
		wantGw    string   // single next hop
		wantMulti []string // RTA_MULTIPATH next hops
	}{
		{"one next hop is a plain route", pfx("10.99.0.1/32"), addrs("10.0.1.2"), "10.99.0.1/32", "10.0.1.2", nil},
		{"two next hops are multipath", pfx("10.99.0.1/32"), addrs("10.0.1.2", "10.0.1.3"), "10.99.0.1/32", "", []string{"10.0.1.2", "10.0.1.3"}},
		{"three", pfx("10.99.0.0/24"), addrs("10.0.1.2", "10.0.1.3", "10.0.1.4"), "10.99.0.0/24", "", []string{"10.0.1.2", "10.0.1.3", "10.0.1.4"}},
		{"unmasked prefix is masked", pfx("10.99.0.7/24"), addrs("10.0.1.2"), "10.99.0.0/24", "10.0.1.2", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := routeFor(tt.prefix, tt.nexthops, 254)
			if r.Dst.String() != tt.wantDst {
				t.Errorf("Dst = %v, want %s", r.Dst, tt.wantDst)
			}
			if r.Protocol != Protocol || r.Table != 254 || r.Priority != routeMetric || r.Family != netlink.FAMILY_V4 {
				t.Errorf("protocol %d table %d metric %d family %d, want %d 254 %d %d", r.Protocol, r.Table, r.Priority, r.Family, Protocol, routeMetric, netlink.FAMILY_V4)
			}
			gw := ""
			if r.Gw != nil {
				gw = r.Gw.String()
			}
			if gw != tt.wantGw {
				t.Errorf("Gw = %q, want %q", gw, tt.wantGw)
			}
			var multi []string
			for _, nh := range r.MultiPath {
				multi = append(multi, nh.Gw.String())
				if nh.LinkIndex != 0 {
					t.Errorf("next hop %v has a device; the kernel should find it", nh.Gw)
				}
			}
			if !slices.Equal(multi, tt.wantMulti) {
				t.Errorf("MultiPath = %v, want %v", multi, tt.wantMulti)
			}
		})
	}
}

func TestSelectNexthops(t *testing.T) {
	n1, n2, n3 := netip.MustParseAddr("10.0.1.2"), netip.MustParseAddr("10.0.1.3"), netip.MustParseAddr("10.0.1.4")
	rr := netip.MustParseAddr("10.0.1.9") // a route reflector: paths from it point at nodes
	tests := []struct {
		name   string
		paths  []candidate
		failed map[netip.Addr]bool
		want   []netip.Addr
	}{
		{"no paths", nil, nil, []netip.Addr{}},
		{"all multipath", []candidate{{true, n2, n2}, {true, n1, n1}, {true, n3, n3}}, nil, []netip.Addr{n1, n2, n3}},
		{"worse path left out", []candidate{{true, n1, n1}, {false, n2, n2}}, nil, []netip.Addr{n1}},
		{"same next hop from two peers once", []candidate{{true, n1, n3}, {true, n2, n3}}, nil, []netip.Addr{n3}},
		{"failed peer's path out", []candidate{{true, n1, n1}, {true, n2, n2}}, map[netip.Addr]bool{n2: true}, []netip.Addr{n1}},
		{"path via failed next hop out", []candidate{{true, rr, n1}, {true, rr, n2}}, map[netip.Addr]bool{n1: true}, []netip.Addr{n2}},
		{"all failed", []candidate{{true, n1, n1}}, map[netip.Addr]bool{n1: true}, []netip.Addr{}},
		{"no next hop", []candidate{{true, n1, netip.Addr{}}}, nil, []netip.Addr{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := selectNexthops(tt.paths, tt.failed); !slices.Equal(got, tt.want) {
				t.Errorf("selectNexthops() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestNexthopOf(t *testing.T) {
	nh, err := bgp.NewPathAttributeNextHop(netip.MustParseAddr("10.0.1.2"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		attrs []bgp.PathAttributeInterface
		want  netip.Addr
	}{
		{"NEXT_HOP", []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(0), nh}, netip.MustParseAddr("10.0.1.2")},
		{"MP_REACH_NLRI", []bgp.PathAttributeInterface{&bgp.PathAttributeMpReachNLRI{Nexthop: netip.MustParseAddr("10.0.1.3")}}, netip.MustParseAddr("10.0.1.3")},
		{"none", []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(0)}, netip.Addr{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nexthopOf(tt.attrs); got != tt.want {
				t.Errorf("nexthopOf() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestIPNetToPrefix(t *testing.T) {
	_, n, _ := net.ParseCIDR("10.99.0.0/24")
	if p, ok := ipNetToPrefix(n, netlink.FAMILY_V4); !ok || p != pfx("10.99.0.0/24") {
		t.Errorf("ipNetToPrefix(%v) = %v, %v", n, p, ok)
	}
	if p, ok := ipNetToPrefix(nil, netlink.FAMILY_V4); !ok || p != pfx("0.0.0.0/0") {
		t.Errorf("ipNetToPrefix(nil) = %v, %v; want the default route", p, ok)
	}
}
