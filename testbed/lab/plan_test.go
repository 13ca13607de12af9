package lab

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
)

func TestNewPlanAddresses(t *testing.T) {
	p, err := NewPlan(Spec{Prefix: "t1", Clients: 2, Nodes: 3, Backends: 4, Binary: "/usr/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		h                        Host
		name, ns, peer, gw, addr string
		mtu                      int
		subnet                   netip.Prefix
	}{
		{p.Clients[0], "client1", "t1-client1", "c1", "10.0.2.1", "10.0.2.2", 1500, clientSegment.Subnet},
		{p.Clients[1], "client2", "t1-client2", "c2", "10.0.2.1", "10.0.2.3", 1500, clientSegment.Subnet},
		{p.Nodes[0], "node1", "t1-node1", "n1", "10.0.1.1", "10.0.1.2", 1600, nodeSegment.Subnet},
		{p.Nodes[2], "node3", "t1-node3", "n3", "10.0.1.1", "10.0.1.4", 1600, nodeSegment.Subnet},
		{p.Backends[0], "be1", "t1-be1", "b1", "10.0.3.1", "10.0.3.2", 1600, backendSegment.Subnet},
		{p.Backends[3], "be4", "t1-be4", "b4", "10.0.3.1", "10.0.3.5", 1600, backendSegment.Subnet},
	}
	for _, tt := range tests {
		h := tt.h
		if h.Name != tt.name || h.Namespace != tt.ns || h.Peer != tt.peer || h.Gateway.String() != tt.gw ||
			h.Addr.String() != tt.addr || h.MTU != tt.mtu || h.PinDir != "/sys/fs/bpf/xlb-lab/t1/"+tt.ns || h.Interface != "eth0" {
			t.Errorf("host %s = %+v, want ns %s peer %s gw %s addr %s mtu %d", tt.name, h, tt.ns, tt.peer, tt.gw, tt.addr, tt.mtu)
		}
		if !tt.subnet.Contains(h.Addr) || !tt.subnet.Contains(h.Gateway) {
			t.Errorf("host %s: %s or gateway %s outside %s", h.Name, h.Addr, h.Gateway, tt.subnet)
		}
	}
	if got, want := p.Namespaces(), []string{"t1-router", "t1-client1", "t1-client2", "t1-node1", "t1-node2", "t1-node3", "t1-be1", "t1-be2", "t1-be3", "t1-be4"}; !slices.Equal(got, want) {
		t.Errorf("namespaces = %v, want %v", got, want)
	}
	if p.StateDir != "/run/xlb-lab/t1" || p.PinDir != "/sys/fs/bpf/xlb-lab/t1" || p.Router != "t1-router" {
		t.Errorf("dirs/router = %s %s %s", p.StateDir, p.PinDir, p.Router)
	}
	for _, v := range p.VIPs {
		if !p.VIPPrefix.Contains(v) {
			t.Errorf("VIP %s outside %s", v, p.VIPPrefix)
		}
	}
	if len(p.VIPs) != len(DefaultVIPs) {
		t.Errorf("VIPs = %v, want %v", p.VIPs, DefaultVIPs)
	}
}

func TestNewPlanPods(t *testing.T) {
	p, err := NewPlan(Spec{Prefix: "t1", Nodes: 1, Backends: 2, Pods: 3, Binary: "/usr/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, pod := range p.Pods {
		got = append(got, fmt.Sprintf("%s %s %s %s via %s, %s", pod.Name, pod.Namespace, pod.Addr, pod.Peer, p.Backends[pod.Node].Name, pod.Gateway))
		if !PodCIDR(pod.Node).Contains(pod.Addr) || p.VIPPrefix.Contains(pod.Addr) {
			t.Errorf("%s: %s outside its node's %s, or among the VIPs", pod.Name, pod.Addr, PodCIDR(pod.Node))
		}
	}
	want := []string{
		"be1-pod1 t1-be1-pod1 10.244.1.2 hp1 via be1, 169.254.1.1",
		"be1-pod2 t1-be1-pod2 10.244.1.3 hp2 via be1, 169.254.1.1",
		"be1-pod3 t1-be1-pod3 10.244.1.4 hp3 via be1, 169.254.1.1",
		"be2-pod1 t1-be2-pod1 10.244.2.2 hp1 via be2, 169.254.1.1",
		"be2-pod2 t1-be2-pod2 10.244.2.3 hp2 via be2, 169.254.1.1",
		"be2-pod3 t1-be2-pod3 10.244.2.4 hp3 via be2, 169.254.1.1",
	}
	if !slices.Equal(got, want) {
		t.Errorf("pods:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	ns := p.Namespaces()
	re := namespacePattern("t1")
	for _, pod := range p.Pods {
		if !slices.Contains(ns, pod.Namespace) || !re.MatchString(pod.Namespace) {
			t.Errorf("%s: not among the lab's namespaces, or not matched by its pattern", pod.Namespace)
		}
	}
	if _, err := NewPlan(Spec{Prefix: "t1", Pods: MaxPods + 1, Binary: "/usr/bin/true"}); err == nil {
		t.Errorf("%d pods per backend: no error", MaxPods+1)
	}
	if p, err := NewPlan(Spec{Prefix: "t1", Binary: "/usr/bin/true"}); err != nil || len(p.Pods) != 0 {
		t.Errorf("no pods asked: %v pods, %v", len(p.Pods), err)
	}
}

// No lab address may overlap another segment or the VIPs, and every name
// must fit an interface name (15 characters) where it becomes one.
func TestNewPlanLimits(t *testing.T) {
	p, err := NewPlan(Spec{Prefix: "t2", Clients: MaxHosts, Nodes: MaxHosts, Backends: MaxHosts, Binary: "/usr/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[netip.Addr]string{}
	for _, seg := range []Segment{p.ClientSegment, p.NodeSegment, p.BackendSegment} {
		seen[seg.Gateway()] = seg.Bridge
		if len(seg.Bridge) > 15 {
			t.Errorf("bridge %q longer than 15", seg.Bridge)
		}
		if seg.Subnet.Overlaps(p.VIPPrefix) {
			t.Errorf("segment %s overlaps VIPs %s", seg.Subnet, p.VIPPrefix)
		}
	}
	for _, h := range p.Hosts() {
		if other, dup := seen[h.Addr]; dup {
			t.Errorf("%s and %s share %s", h.Name, other, h.Addr)
		}
		seen[h.Addr] = h.Name
		if len(h.Peer) > 15 {
			t.Errorf("peer %q longer than 15", h.Peer)
		}
		if last := h.Addr.As4()[3]; last == 0 || last == 255 {
			t.Errorf("%s got network or broadcast address %s", h.Name, h.Addr)
		}
	}
}

func TestNewPlanDefaultsAndErrors(t *testing.T) {
	p, err := NewPlan(Spec{})
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	if p.Spec.Prefix != DefaultPrefix || len(p.Clients) != DefaultClients || len(p.Nodes) != DefaultNodes || len(p.Backends) != DefaultBackends || p.Spec.Binary != exe {
		t.Errorf("defaults: %+v", p.Spec)
	}
	for _, tt := range []struct {
		spec Spec
		want string
	}{
		{Spec{Prefix: "Bad"}, "lab prefix"},
		{Spec{Prefix: "-x"}, "lab prefix"},
		{Spec{Prefix: "a/b"}, "lab prefix"},
		{Spec{Prefix: strings.Repeat("a", 25)}, "lab prefix"},
		{Spec{Nodes: -1}, "nodes"},
		{Spec{Backends: MaxHosts + 1}, "backends"},
		{Spec{Clients: -3}, "clients"},
	} {
		if _, err := NewPlan(tt.spec); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewPlan(%+v) = %v, want error about %s", tt.spec, err, tt.want)
		}
	}
}

func TestNamespacePattern(t *testing.T) {
	re := namespacePattern("xlb")
	for _, tt := range []struct {
		name string
		ours bool
	}{
		{"xlb-router", true},
		{"xlb-client1", true},
		{"xlb-node12", true},
		{"xlb-be253", true},
		{"xlb-2-router", false}, // the lab with prefix "xlb-2"
		{"xlb-node1-router", false},
		{"xlbt-router", false},
		{"xlb-be0", false},
		{"xlb-be", false},
		{"xlb-router2", false},
		{"myxlb-router", false},
		{"xlb-nodeX", false},
		{"xlb-rr", true},
		{"xlb-rr1", false},
		{"xlb-2-rr", false},
		{"xlb-be1-pod2", true},
		{"xlb-be12-pod253", true},
		{"xlb-be1-pod0", false},
		{"xlb-node1-pod1", false},
		{"xlb-client1-pod1", false},
		{"xlb-be1-pod", false},
		{"xlb-2-be1-pod1", false},
	} {
		if got := re.MatchString(tt.name); got != tt.ours {
			t.Errorf("%q matched %v, want %v", tt.name, got, tt.ours)
		}
	}
}

func TestParseRoutes(t *testing.T) {
	for _, tt := range []struct {
		name, in string
		want     []Route
	}{
		{"empty", "", nil},
		{"none", "[]", nil},
		{"multipath",
			`[{"dst":"10.99.0.0/24","protocol":"static","flags":[],"nexthops":[{"gateway":"10.0.1.2","dev":"br-node","weight":1,"flags":[]},{"gateway":"10.0.1.3","dev":"br-node","weight":1,"flags":[]}]}]`,
			[]Route{{Dst: netip.MustParsePrefix("10.99.0.0/24"), Protocol: "static", Nexthops: []netip.Addr{netip.MustParseAddr("10.0.1.2"), netip.MustParseAddr("10.0.1.3")}}}},
		{"single path and host route",
			`[{"dst":"10.99.0.0/24","gateway":"10.0.1.3","dev":"br-node","flags":[]},{"dst":"10.99.0.1","protocol":"bgp","gateway":"10.0.1.2","dev":"br-node","flags":[]}]`,
			[]Route{
				{Dst: netip.MustParsePrefix("10.99.0.0/24"), Nexthops: []netip.Addr{netip.MustParseAddr("10.0.1.3")}},
				{Dst: netip.MustParsePrefix("10.99.0.1/32"), Protocol: "bgp", Nexthops: []netip.Addr{netip.MustParseAddr("10.0.1.2")}},
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseRoutes([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(got, tt.want, func(a, b Route) bool {
				return a.Dst == b.Dst && a.Protocol == b.Protocol && slices.Equal(a.Nexthops, b.Nexthops)
			}) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
	for _, bad := range []string{`{`, `[{"dst":"nonsense"}]`, `[{"dst":"10.99.0.0/24","gateway":"x"}]`} {
		if _, err := parseRoutes([]byte(bad)); err == nil {
			t.Errorf("parseRoutes(%s) accepted", bad)
		}
	}
}

func TestParseInterfaces(t *testing.T) {
	in := `[{"ifindex":1,"ifname":"lo","mtu":65536,"operstate":"UNKNOWN","addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8}]},
{"ifindex":2,"ifname":"br-node","mtu":1600,"operstate":"UP","addr_info":[{"family":"inet","local":"10.0.1.1","prefixlen":24},{"family":"inet6","local":"fe80::1","prefixlen":64}]},
{"ifindex":3,"ifname":"n1","mtu":1600,"operstate":"UP","master":"br-node","xdp":{"mode":1,"prog":{"id":7}},"addr_info":[]}]`
	got, err := parseInterfaces([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("got %d interfaces, want 2 (plain lo left out): %+v", len(got), got)
	}
	if got[0].Name != "br-node" || got[0].MTU != 1600 || len(got[0].Addrs) != 1 || got[0].Addrs[0] != netip.MustParsePrefix("10.0.1.1/24") || got[0].XDP {
		t.Errorf("bridge: %+v", got[0])
	}
	if got[1].Name != "n1" || got[1].Master != "br-node" || !got[1].XDP {
		t.Errorf("port: %+v", got[1])
	}
}

func TestProcStat(t *testing.T) {
	start, state, err := procStat(os.Getpid())
	if err != nil || start == 0 || state == 0 {
		t.Fatalf("procStat(self) = %d %c %v", start, state, err)
	}
	if !alive(os.Getpid(), start) {
		t.Error("this process is not alive")
	}
	if alive(os.Getpid(), start+1) {
		t.Error("alive ignores the start time")
	}
}

// A dual-stack plan: IPv6 subnets beside the IPv4 ones, every host's
// IPv6 address and gateway, the IPv6 VIPs; the IPv4 layout is that of
// the IPv4-only plan, and combinations without IPv6 support are refused.
func TestNewPlanIPv6(t *testing.T) {
	p4, err := NewPlan(Spec{Prefix: "t6", Nodes: 3, Binary: "/bin/true", Router: RouterFRR})
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPlan(Spec{Prefix: "t6", Nodes: 3, Binary: "/bin/true", Router: RouterFRR, IPv6: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		seg           Segment
		subnet, gw    string
		hosts         []Host
		first, second string
	}{
		{p.ClientSegment, "fd00:10:2::/64", "fd00:10:2::1", p.Clients, "fd00:10:2::2", ""},
		{p.NodeSegment, "fd00:10:1::/64", "fd00:10:1::1", p.Nodes, "fd00:10:1::2", "fd00:10:1::3"},
		{p.BackendSegment, "fd00:10:3::/64", "fd00:10:3::1", p.Backends, "fd00:10:3::2", "fd00:10:3::3"},
	} {
		if c.seg.Subnet6.String() != c.subnet || c.seg.Gateway6().String() != c.gw {
			t.Errorf("segment %s: IPv6 subnet %s gateway %s, want %s %s", c.seg.Name, c.seg.Subnet6, c.seg.Gateway6(), c.subnet, c.gw)
		}
		if h := c.hosts[0]; h.Addr6.String() != c.first || h.Gateway6.String() != c.gw {
			t.Errorf("%s: IPv6 %s via %s, want %s via %s", h.Name, h.Addr6, h.Gateway6, c.first, c.gw)
		}
		if c.second != "" && c.hosts[1].Addr6.String() != c.second {
			t.Errorf("%s: IPv6 %s, want %s", c.hosts[1].Name, c.hosts[1].Addr6, c.second)
		}
	}
	if p.VIPPrefix6.String() != "fd00:99::/64" || !slices.Equal(p.VIPs6, []netip.Addr{netip.MustParseAddr("fd00:99::1"), netip.MustParseAddr("fd00:99::2")}) {
		t.Errorf("IPv6 VIPs %v in %s", p.VIPs6, p.VIPPrefix6)
	}
	// The IPv4 layout does not change.
	for i, h := range p.Hosts() {
		h4 := p4.Hosts()[i]
		if h.Addr != h4.Addr || h.Gateway != h4.Gateway || h.Namespace != h4.Namespace {
			t.Errorf("%s: IPv4 %s via %s in %s, the IPv4-only plan has %s via %s in %s", h.Name, h.Addr, h.Gateway, h.Namespace, h4.Addr, h4.Gateway, h4.Namespace)
		}
		if h4.Addr6.IsValid() || h4.Gateway6.IsValid() {
			t.Errorf("%s has an IPv6 address in the IPv4-only plan: %s", h4.Name, h4.Addr6)
		}
	}
	if p4.VIPPrefix6.IsValid() || len(p4.VIPs6) > 0 || p4.NodeSegment.Subnet6.IsValid() {
		t.Errorf("the IPv4-only plan has IPv6 VIPs %v in %s, node subnet %s", p4.VIPs6, p4.VIPPrefix6, p4.NodeSegment.Subnet6)
	}
	// The routers' configurations take the plan's IPv6 parts.
	if conf := frrConfig(p); !strings.Contains(conf, "bgp listen range fd00:10:1::/64 peer-group XLB") || !strings.Contains(conf, "address-family ipv6 unicast") {
		t.Errorf("frr.conf of the dual-stack plan lacks its IPv6 parts:\n%s", conf)
	}
	// A recorded Spec gives the same plan back (Load).
	b, err := json.Marshal(p.Spec)
	if err != nil {
		t.Fatal(err)
	}
	var s Spec
	if err := json.Unmarshal(b, &s); err != nil || !s.IPv6 {
		t.Fatalf("Spec after JSON: %+v, %v", s, err)
	}

	for _, s := range []Spec{
		{Router: RouterFRR, Reflector: true},
	} {
		s.Prefix, s.Binary, s.IPv6 = "t6", "/bin/true", true
		if _, err := NewPlan(s); err == nil || !strings.Contains(err.Error(), "IPv6 with") {
			t.Errorf("NewPlan(%+v) = %v, want it refused", s, err)
		}
	}
}

// BGP over IPv6 (Spec.PeerIPv6): the nodes' one peer is the router's
// IPv6 address on the node segment, whatever the router; without IPv6
// or a BGP router it is refused, and the default still peers over IPv4.
func TestNewPlanPeerIPv6(t *testing.T) {
	for _, router := range []string{RouterEmbedded, RouterFRR, RouterBIRD} {
		p, err := NewPlan(Spec{Prefix: "t6", Binary: "/bin/true", Router: router, IPv6: true, PeerIPv6: true, BFD: true})
		if err != nil {
			t.Fatal(err)
		}
		if p.BGP == nil || p.BGP.PeerAddr != netip.MustParseAddr("fd00:10:1::1") || p.BGP.BFD == nil {
			t.Errorf("%s: BGP %+v, want the peer fd00:10:1::1 with BFD", router, p.BGP)
		}
		p, err = NewPlan(Spec{Prefix: "t6", Binary: "/bin/true", Router: router, IPv6: true})
		if err != nil {
			t.Fatal(err)
		}
		if p.BGP.PeerAddr != netip.MustParseAddr("10.0.1.1") {
			t.Errorf("%s without PeerIPv6: peer %s, want 10.0.1.1", router, p.BGP.PeerAddr)
		}
	}
	for _, c := range []struct {
		spec Spec
		want string
	}{
		{Spec{Router: RouterFRR, PeerIPv6: true}, "BGP over IPv6 needs a dual-stack lab"},
		{Spec{Router: RouterStatic, IPv6: true, PeerIPv6: true}, "BGP over IPv6 needs a BGP router"},
		{Spec{IPv6: true, PeerIPv6: true}, "BGP over IPv6 needs a BGP router"},
	} {
		s := c.spec
		s.Prefix, s.Binary = "t6", "/bin/true"
		if _, err := NewPlan(s); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewPlan(%+v) = %v, want an error that says %q", s, err, c.want)
		}
	}
}

// Dual-stack pods: pod j of backend k has fd00:244:k::(1+j) beside
// 10.244.k.(1+j), and the link-local gateway; IPv4-only pods have none.
func TestNewPlanPods6(t *testing.T) {
	p, err := NewPlan(Spec{Prefix: "t6", Backends: 2, Pods: 2, Binary: "/bin/true", IPv6: true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"be1-pod1": "fd00:244:1::2", "be1-pod2": "fd00:244:1::3", "be2-pod1": "fd00:244:2::2", "be2-pod2": "fd00:244:2::3"}
	for _, pod := range p.Pods {
		if pod.Addr6.String() != want[pod.Name] || pod.Gateway6 != PodGateway6 || !PodCIDR6(pod.Node).Contains(pod.Addr6) {
			t.Errorf("%s: IPv6 %s via %s, want %s via %s in %s", pod.Name, pod.Addr6, pod.Gateway6, want[pod.Name], PodGateway6, PodCIDR6(pod.Node))
		}
	}
	p4, err := NewPlan(Spec{Prefix: "t6", Backends: 2, Pods: 2, Binary: "/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	for _, pod := range p4.Pods {
		if pod.Addr6.IsValid() || pod.Gateway6.IsValid() {
			t.Errorf("%s has IPv6 %s via %s in an IPv4-only lab", pod.Name, pod.Addr6, pod.Gateway6)
		}
	}
}

// The layer-2 lab puts the clients on the nodes' segment, above the
// nodes, with ports named as clients' are; it refuses what cannot work.
func TestNewPlanL2(t *testing.T) {
	p, err := NewPlan(Spec{Prefix: "t2", Clients: 2, Nodes: 3, Backends: 2, Binary: "/usr/bin/true", L2: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"10.0.1.101", "10.0.1.102"} {
		c := p.Clients[i]
		if c.Addr.String() != want || c.Gateway != p.NodeSegment.Gateway() || c.Peer != fmt.Sprintf("c%d", i+1) {
			t.Errorf("client %d: %s via %s, port %s; want %s via %s, port c%d", i+1, c.Addr, c.Gateway, c.Peer, want, p.NodeSegment.Gateway(), i+1)
		}
		if !p.NodeSegment.Subnet.Contains(c.Addr) {
			t.Errorf("client %d at %s, off the nodes' segment %s", i+1, c.Addr, p.NodeSegment.Subnet)
		}
	}
	p6, err := NewPlan(Spec{Prefix: "t2", Clients: 2, Nodes: 3, Binary: "/usr/bin/true", L2: true, IPv6: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{p6.Clients[0].Addr6.String(), p6.Clients[1].Addr6.String(), p6.Nodes[2].Addr6.String()}; !slices.Equal(got, []string{"fd00:10:1::65", "fd00:10:1::66", "fd00:10:1::4"}) {
		t.Errorf("IPv6 addresses of client1, client2, node3: %v", got)
	}
	if p.ClientSegmentOf().Bridge != p.NodeSegment.Bridge {
		t.Errorf("the clients' segment is %s, want the nodes' %s", p.ClientSegmentOf().Bridge, p.NodeSegment.Bridge)
	}
	for _, c := range []struct {
		spec Spec
		want string
	}{
		{Spec{L2: true, Router: RouterFRR}, "the layer-2 lab needs --router static"},
		{Spec{L2: true, Nodes: 99}, "at most 98 nodes"},
	} {
		c.spec.Prefix, c.spec.Binary = "t2", "/usr/bin/true"
		if _, err := NewPlan(c.spec); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want an error with %q", c.spec, err, c.want)
		}
	}
}
