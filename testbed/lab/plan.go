// Package lab builds, inspects and removes an xlb test topology made of
// network namespaces on one machine: clients, an upstream router, xlb
// nodes and backends, joined by veth pairs and bridges in the router
// namespace. The address plan lives in one place, Plan, so that the demo,
// the end-to-end tests and the benchmarks take addresses from it instead
// of repeating literals. docs/lab.md has the drawing.
package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Defaults of a Spec.
const (
	DefaultPrefix   = "xlb"
	DefaultClients  = 1
	DefaultNodes    = 2
	DefaultBackends = 4
)

// MaxHosts is the largest number of hosts of one kind: host k gets the
// address .(1+k) of its /24 segment.
const MaxHosts = 253

// Ports the backends' embedded servers listen on (see Serve).
const (
	HTTPPort = 80
	UDPPort  = 9000
)

// Ports the pods' embedded servers listen on (Spec.Pods): the target
// ports of a Kubernetes Service, unlike the VIP's, so that a working path
// proves the node translated VIP:port to pod:targetPort.
const (
	PodHTTPPort = 8080
	PodUDPPort  = 5353
)

// MaxPods is the largest number of pods per backend host: pod j of
// backend k gets 10.244.k.(1+j).
const MaxPods = 253

// MaxEgressQueue bounds Spec.EgressQueue.
const MaxEgressQueue = 100000

// PodGateway is every pod's default gateway, as Calico-style CNIs with
// host routing do it: a link-local address that the node's end of the
// pod's veth answers by proxy ARP. No interface holds it.
var PodGateway = netip.MustParseAddr("169.254.1.1")

// HostInterface is the name of every host's own end of its veth pair.
const HostInterface = "eth0"

// DefaultVIPs are the service addresses the backends accept (local on
// their loopback, decapsulated by `xlb backend`). They lie in VIPPrefix.
var DefaultVIPs = []string{"10.99.0.1", "10.99.0.2"}

// Root directories; a lab's own directories are <root>/<prefix>.
const (
	stateRoot = "/run/xlb-lab"
	bpffsRoot = "/sys/fs/bpf"
	pinRoot   = bpffsRoot + "/xlb-lab"
)

// vipPrefix is where the VIPs live; the router routes it to the nodes.
var vipPrefix = netip.MustParsePrefix("10.99.0.0/24")

// DefaultVIPs6 are the IPv6 service addresses of a dual-stack lab
// (Spec.IPv6), in vipPrefix6, accepted by the backends like DefaultVIPs.
var DefaultVIPs6 = []string{"fd00:99::1", "fd00:99::2"}

// vipPrefix6 holds the IPv6 VIPs of a dual-stack lab.
var vipPrefix6 = netip.MustParsePrefix("fd00:99::/64")

// The segments' IPv6 subnets in a dual-stack lab: unique local
// addresses (RFC 4193), the third group naming the segment as the third
// byte of its IPv4 subnet does.
var (
	clientSubnet6  = netip.MustParsePrefix("fd00:10:2::/64")
	nodeSubnet6    = netip.MustParsePrefix("fd00:10:1::/64")
	backendSubnet6 = netip.MustParsePrefix("fd00:10:3::/64")
)

// The three segments. Node and backend segments carry a larger MTU, like a
// data-centre fabric, so that 1500-byte client packets still fit after
// 20-32 bytes of encapsulation.
var (
	clientSegment  = Segment{Name: "clients", Bridge: "br-client", PeerPrefix: "c", Subnet: netip.MustParsePrefix("10.0.2.0/24"), MTU: 1500}
	nodeSegment    = Segment{Name: "nodes", Bridge: "br-node", PeerPrefix: "n", Subnet: netip.MustParsePrefix("10.0.1.0/24"), MTU: 1600}
	backendSegment = Segment{Name: "backends", Bridge: "br-backend", PeerPrefix: "b", Subnet: netip.MustParsePrefix("10.0.3.0/24"), MTU: 1600}
)

// Spec says which lab to build.
type Spec struct {
	// Prefix names the lab; every namespace is <Prefix>-<role><k>, so two
	// labs with different prefixes never collide. Default DefaultPrefix.
	Prefix string `json:"prefix"`
	// Numbers of hosts of each kind; zero means the default.
	Clients  int `json:"clients"`
	Nodes    int `json:"nodes"`
	Backends int `json:"backends"`
	// Binary is the xlb executable that runs the lab's subcommands (the
	// backends' servers, `xlb backend`, and the netns-exec wrapper of
	// StartProcess). Default: the running executable.
	Binary string `json:"binary"`
	// SkipPass leaves out the XDP_PASS programs on the router-side veth
	// peers, and SkipDecap leaves out `xlb backend` on the backends. Both
	// are for tests of the plain topology only: without them a node's
	// XDP_TX frames are dropped and backends do not accept VIP traffic.
	SkipPass  bool `json:"skipPass,omitempty"`
	SkipDecap bool `json:"skipDecap,omitempty"`
	// Router is the kind of upstream router: RouterStatic (the zero
	// value's, for tests that move the route by hand with SetNodes)
	// routes the VIP prefix to every node with a static multipath
	// route; RouterEmbedded (`xlb lab router`, the default of `xlb lab
	// up`), RouterFRR and RouterBIRD learn each VIP/32 from the nodes
	// over BGP and install the ECMP route.
	Router string `json:"router,omitempty"`
	// Reflector puts a gobgpd route reflector on the node segment
	// (needs RouterFRR): the nodes peer with it over iBGP, and it hands
	// every path to the router with add-path.
	Reflector bool `json:"reflector,omitempty"`
	// BFD makes the router run BFD with every node it peers with, so a
	// dead node loses its routes in a third of a second instead of a
	// hold time. Not with RouterStatic or Reflector.
	BFD bool `json:"bfd,omitempty"`
	// GracefulRestart makes FRR help graceful restart (RFC 4724) and the
	// nodes' agents advertise it (gracefulRestart: {}). RouterFRR only.
	GracefulRestart bool `json:"gracefulRestart,omitempty"`
	// Pods, if not zero, makes the backends Kubernetes nodes with that
	// many pods each: pod j of backend k is the namespace
	// <Prefix>-be<k>-pod<j> with address 10.244.k.(1+j)/32, behind a veth
	// from its node; the node routes each pod's /32 to its veth and the
	// router routes the node's pod CIDR 10.244.k.0/24 to it, as a CNI
	// with host routing does. The servers run in the pods, on
	// PodHTTPPort and PodUDPPort, and the backends get no `xlb backend
	// --vip`: whoever uses the lab runs the node's translation (`xlb
	// backend --source kubernetes` or --nat).
	Pods int `json:"pods,omitempty"`
	// PlainBackends makes the backends (with Pods: the pods) run nothing
	// but nginx, as hosts that a NAT service (forwarding: nat or dnat)
	// reaches: no `xlb backend`, no VIP on their loopback, no UDP echo,
	// transmit checksum offload off (see plain.go). nginx answers as the
	// embedded server does, adds PeerHeader, and serves HealthPath as
	// SetHealthy says.
	PlainBackends bool `json:"plainBackends,omitempty"`
	// FullBackendChecksums turns off transmit checksum offload on the
	// backends (and pods) without making them plain: what a lab needs
	// whose backends serve DSR and NAT services alike, as the node's
	// program rewrites the NAT replies and sends them on. PlainBackends
	// implies it.
	FullBackendChecksums bool `json:"fullBackendChecksums,omitempty"`
	// RepliesVia names a node (node1, ...) through which the router
	// sends every backend's (or pod's) replies to the clients
	// (RouteReplies): what a forwarding: dnat service needs. "": none.
	RepliesVia string `json:"repliesVia,omitempty"`
	// IPv6 makes the lab dual stack: every segment gets an IPv6 subnet
	// beside its IPv4 one, every host an IPv6 address and default
	// route, the router IPv6 VIPs (VIPPrefix6) to route to the nodes,
	// and the backends accept the IPv6 VIPs too. The zero value is the
	// IPv4-only lab, which tests and benchmarks compare across
	// versions.
	IPv6 bool `json:"ipv6,omitempty"`
	// EgressQueue gives both ends of every host's veth pair a transmit
	// queue of this many packets (a pfifo qdisc; 0: none, the veth's
	// default), as a router's or a host's NIC has one. A veth whose
	// other end runs an XDP program (an xlb node's or backend's, the
	// router's XDP_PASS) hands it frames through a ring of 256 and, with
	// no queue, drops what does not fit: the frames of every port the
	// router forwards to one node share that ring. With a queue, the
	// kernel (6.16 and later) stops it while the ring is full instead.
	EgressQueue int `json:"egressQueue,omitempty"`
	// PeerIPv6 makes the nodes peer with the router over IPv6 (needs
	// IPv6 and a BGP router, not the reflector): BGP.PeerAddr is the
	// router's IPv6 address on the node segment, so each node's session
	// (and BFD) runs between the IPv6 addresses and carries both
	// families. The default peers over IPv4, carrying IPv6 the same way.
	PeerIPv6 bool `json:"peerIPv6,omitempty"`
	// L2 is the layer-2 lab (node.announce: l2): the clients share the
	// nodes' segment, at L2ClientBase and after (with IPv6, at the
	// same host numbers in the segment's IPv6 subnet), and reach the
	// VIP prefixes on the link, so that they ask for each VIP by ARP or
	// neighbour solicitation and send to whichever node answers. Needs
	// the static router (no BGP).
	L2 bool `json:"l2,omitempty"`
}

// L2ClientBase is the first client's address in the layer-2 lab
// (Spec.L2), on the nodes' segment: nodes take the addresses below it.
var L2ClientBase = netip.MustParseAddr("10.0.1.101")

// maxL2Nodes is how many nodes fit below L2ClientBase.
const maxL2Nodes = 98

// The kinds of upstream router (Spec.Router).
const (
	RouterStatic   = "static"
	RouterEmbedded = "embedded"
	RouterFRR      = "frr"
	RouterBIRD     = "bird"
)

// Routers lists the kinds of upstream router, the default first.
var Routers = []string{RouterStatic, RouterEmbedded, RouterFRR, RouterBIRD}

// BGP numbers of the lab: the router's AS, and the one xlb nodes use
// towards it (eBGP). With a route reflector the nodes are in the
// router's AS (iBGP), as the reflector only reflects iBGP routes.
const (
	RouterASN = 65000
	NodeASN   = 65001
)

// BGP timers of the lab: keepalive 3 s, hold time 9 s; BFD every 100 ms,
// down after 3 missed packets.
const (
	HoldTime      = 9 * time.Second
	bfdInterval   = 100 * time.Millisecond
	bfdMultiplier = 3
)

// BGP tells an xlb node how to announce its VIPs in this lab: the
// agent's `bgp:` section is asn: NodeASN, peers: [{address: PeerAddr,
// asn: PeerASN}], holdTime: HoldTime.
type BGP struct {
	NodeASN uint32 `json:"nodeASN"`
	// PeerAddr and PeerASN are the node's one BGP neighbour: the
	// router, or the route reflector.
	PeerAddr netip.Addr `json:"peerAddr"`
	PeerASN  uint32     `json:"peerASN"`
	// RouterASN is the upstream router's AS (PeerASN too unless a
	// reflector sits in between; then both are the same AS anyway).
	RouterASN uint32        `json:"routerASN"`
	HoldTime  time.Duration `json:"holdTime"`
	// BFD, if set, is what the router runs towards every node.
	BFD *BFD `json:"bfd,omitempty"`
	// GracefulRestart: the router helps graceful restart, and the nodes
	// advertise it with the default restart time.
	GracefulRestart bool `json:"gracefulRestart,omitempty"`
}

// BFD holds the timers of a BFD session (RFC 5880): the router declares
// a node down after Multiplier intervals without a packet.
type BFD struct {
	MinRx      time.Duration `json:"minRx"`
	MinTx      time.Duration `json:"minTx"`
	Multiplier int           `json:"multiplier"`
}

// Segment is one L2 segment: a bridge in the router namespace with the
// router's address on it, and one veth port per host.
type Segment struct {
	Name       string       `json:"name"`
	Bridge     string       `json:"bridge"`     // bridge in the router namespace
	PeerPrefix string       `json:"peerPrefix"` // router-side veth of host k is PeerPrefix+k
	Subnet     netip.Prefix `json:"subnet"`
	MTU        int          `json:"mtu"`
	// Subnet6 is the segment's IPv6 subnet; invalid in an IPv4-only lab.
	Subnet6 netip.Prefix `json:"subnet6,omitzero"`
}

// Gateway is the router's address on the segment, every host's default
// route.
func (s Segment) Gateway() netip.Addr { return s.Subnet.Addr().Next() }

// Gateway6 is the router's IPv6 address on the segment; invalid without
// Subnet6.
func (s Segment) Gateway6() netip.Addr {
	if !s.Subnet6.IsValid() {
		return netip.Addr{}
	}
	return s.Subnet6.Masked().Addr().Next()
}

// Host is one client, xlb node or backend: a namespace with one interface.
type Host struct {
	Name      string     `json:"name"`      // client1, node1, be1: what a backend answers with
	Namespace string     `json:"namespace"` // <prefix>-<name>
	Interface string     `json:"interface"` // HostInterface
	Addr      netip.Addr `json:"addr"`
	Gateway   netip.Addr `json:"gateway"`
	Peer      string     `json:"peer"` // the veth's other end, in the router namespace
	MTU       int        `json:"mtu"`
	// PinDir is where BPF objects of this host go: <lab pin dir>/<Namespace>.
	PinDir string `json:"pinDir"`
	// Addr6 and Gateway6 are the host's IPv6 address and default
	// gateway in a dual-stack lab; invalid otherwise.
	Addr6    netip.Addr `json:"addr6,omitzero"`
	Gateway6 netip.Addr `json:"gateway6,omitzero"`
}

// Plan is the complete, deterministic layout of a lab.
type Plan struct {
	Spec     Spec   `json:"spec"`
	Router   string `json:"router"`   // the router's namespace
	StateDir string `json:"stateDir"` // pid files, logs, generated configs
	PinDir   string `json:"pinDir"`   // bpffs directory, removed by Down
	// VIPPrefix is routed by the router to the nodes; VIPs are the
	// addresses in it that backends accept.
	VIPPrefix netip.Prefix `json:"vipPrefix"`
	VIPs      []netip.Addr `json:"vips"`
	// VIPPrefix6 holds the IPv6 VIPs, routed like VIPPrefix; invalid in
	// an IPv4-only lab. The routers accept IPv6 unicast from the nodes
	// (over their IPv4 sessions, and over IPv6 ones from
	// NodeSegment.Subnet6) only when it is set.
	VIPPrefix6 netip.Prefix `json:"vipPrefix6,omitzero"`
	// VIPs6 are the IPv6 VIPs the backends accept, in VIPPrefix6; none
	// in an IPv4-only lab.
	VIPs6 []netip.Addr `json:"vips6,omitempty"`

	ClientSegment  Segment `json:"clientSegment"`
	NodeSegment    Segment `json:"nodeSegment"`
	BackendSegment Segment `json:"backendSegment"`

	// Hosts; element i is host i+1 (client1 is Clients[0]).
	Clients  []Host `json:"clients"`
	Nodes    []Host `json:"nodes"`
	Backends []Host `json:"backends"`

	// BGP is nil with the static router: nothing to announce to.
	BGP *BGP `json:"bgp,omitempty"`
	// Reflector is the route reflector's host on the node segment, nil
	// without one. It is not among Hosts: no traffic goes through it.
	Reflector *Host `json:"reflector,omitempty"`
	// Pods are the pods of every backend (Spec.Pods per backend, by
	// backend then pod number); none unless Spec.Pods is set. They are
	// not among Hosts: they sit behind their node, not on a segment.
	Pods []Pod `json:"pods,omitempty"`
}

// Pod is one pod of the Kubernetes lab (Spec.Pods). Its Host has the
// pod's address, PodGateway as gateway, and as Peer the node's end of
// the pod's veth (hp<j>, in the node's namespace).
type Pod struct {
	Host
	// Node is the index of the pod's node in Plan.Backends.
	Node int `json:"node"`
}

// PodCIDR is the pod range of backend k (0-based): 10.244.(k+1).0/24.
func PodCIDR(k int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(k + 1), 0}), 24)
}

// PodCIDR6 is the IPv6 pod range of backend k (0-based) in a dual-stack
// lab: fd00:244:(k+1)::/64, numbered like PodCIDR.
func PodCIDR6(k int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0, 0x02, 0x44, 0, byte(k + 1)}), 64)
}

// PodGateway6 is every pod's IPv6 default gateway in a dual-stack lab:
// a link-local address that the node's end of each pod's veth holds, as
// Calico-style CNIs give IPv6 pods a link-local gateway.
var PodGateway6 = netip.MustParseAddr("fe80::1")

// ClientSegmentOf is the segment the clients are on: the nodes' in the
// layer-2 lab (Spec.L2).
func (p Plan) ClientSegmentOf() Segment {
	if p.Spec.L2 {
		return p.NodeSegment
	}
	return p.ClientSegment
}

// Hosts returns every host of the plan: clients, nodes, backends.
func (p Plan) Hosts() []Host {
	all := make([]Host, 0, len(p.Clients)+len(p.Nodes)+len(p.Backends))
	all = append(all, p.Clients...)
	all = append(all, p.Nodes...)
	return append(all, p.Backends...)
}

// Namespaces returns every namespace of the plan: the router, the route
// reflector if any, then the hosts.
func (p Plan) Namespaces() []string {
	names := []string{p.Router}
	if p.Reflector != nil {
		names = append(names, p.Reflector.Namespace)
	}
	for _, h := range p.Hosts() {
		names = append(names, h.Namespace)
	}
	for _, pod := range p.Pods {
		names = append(names, pod.Namespace)
	}
	return names
}

var prefixRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,23}$`)

func checkPrefix(prefix string) error {
	if !prefixRE.MatchString(prefix) {
		return fmt.Errorf("lab prefix %q: want 1-24 characters of a-z, 0-9 and '-', starting with a letter or digit", prefix)
	}
	return nil
}

// StateDir is the directory of a lab's pid files, logs and generated
// configs.
func StateDir(prefix string) string { return filepath.Join(stateRoot, prefix) }

// PinDir is the bpffs directory of a lab's pinned BPF objects; agents pin
// under PinDir(prefix)/<namespace>.
func PinDir(prefix string) string { return filepath.Join(pinRoot, prefix) }

// NewPlan validates s, fills in its defaults and lays out the lab.
func NewPlan(s Spec) (Plan, error) {
	if s.Prefix == "" {
		s.Prefix = DefaultPrefix
	}
	if err := checkPrefix(s.Prefix); err != nil {
		return Plan{}, err
	}
	for _, c := range []struct {
		field string
		n     *int
		def   int
	}{{"clients", &s.Clients, DefaultClients}, {"nodes", &s.Nodes, DefaultNodes}, {"backends", &s.Backends, DefaultBackends}} {
		if *c.n == 0 {
			*c.n = c.def
		}
		if *c.n < 1 || *c.n > MaxHosts {
			return Plan{}, fmt.Errorf("lab %q: %d %s: want 1 to %d", s.Prefix, *c.n, c.field, MaxHosts)
		}
	}
	if s.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return Plan{}, fmt.Errorf("find the xlb executable: %w", err)
		}
		s.Binary = exe
	}
	bin, err := filepath.Abs(s.Binary)
	if err != nil {
		return Plan{}, fmt.Errorf("xlb executable %q: %w", s.Binary, err)
	}
	s.Binary = bin
	if err := checkRouter(&s); err != nil {
		return Plan{}, err
	}
	if s.Pods < 0 || s.Pods > MaxPods {
		return Plan{}, fmt.Errorf("lab %q: %d pods per backend: want 0 to %d", s.Prefix, s.Pods, MaxPods)
	}
	if s.EgressQueue < 0 || s.EgressQueue > MaxEgressQueue {
		return Plan{}, fmt.Errorf("lab %q: an egress queue of %d packets: want 0 (none) to %d", s.Prefix, s.EgressQueue, MaxEgressQueue)
	}
	if s.RepliesVia != "" {
		if k, err := strconv.Atoi(strings.TrimPrefix(s.RepliesVia, "node")); !strings.HasPrefix(s.RepliesVia, "node") || err != nil || k < 1 || k > s.Nodes {
			return Plan{}, fmt.Errorf("lab %q: replies via %q: want a node of the lab, node1 to node%d", s.Prefix, s.RepliesVia, s.Nodes)
		}
	}

	p := Plan{
		Spec:           s,
		Router:         s.Prefix + "-router",
		StateDir:       StateDir(s.Prefix),
		PinDir:         PinDir(s.Prefix),
		VIPPrefix:      vipPrefix,
		ClientSegment:  clientSegment,
		NodeSegment:    nodeSegment,
		BackendSegment: backendSegment,
	}
	for _, v := range DefaultVIPs {
		a, err := netip.ParseAddr(v)
		if err != nil || !vipPrefix.Contains(a) {
			return Plan{}, fmt.Errorf("VIP %q: not an address in %s", v, vipPrefix)
		}
		p.VIPs = append(p.VIPs, a)
	}
	if s.IPv6 {
		p.VIPPrefix6 = vipPrefix6
		p.ClientSegment.Subnet6 = clientSubnet6
		p.NodeSegment.Subnet6 = nodeSubnet6
		p.BackendSegment.Subnet6 = backendSubnet6
		for _, v := range DefaultVIPs6 {
			a, err := netip.ParseAddr(v)
			if err != nil || !vipPrefix6.Contains(a) {
				return Plan{}, fmt.Errorf("VIP %q: not an address in %s", v, vipPrefix6)
			}
			p.VIPs6 = append(p.VIPs6, a)
		}
	}
	p.Clients = hosts(p, p.ClientSegment, "client", s.Clients)
	if s.L2 {
		// On the nodes' bridge, named as clients' ports are.
		seg := p.NodeSegment
		seg.PeerPrefix = p.ClientSegment.PeerPrefix
		p.Clients = hostsFrom(p, seg, "client", s.Clients, L2ClientBase)
	}
	p.Nodes = hosts(p, p.NodeSegment, "node", s.Nodes)
	p.Backends = hosts(p, p.BackendSegment, "be", s.Backends)
	if s.Reflector {
		p.Reflector = reflectorHost(p)
	}
	p.BGP = bgpPlan(p)
	p.Pods = pods(p)
	return p, nil
}

// checkRouter fills in the default router and refuses combinations that
// cannot work.
func checkRouter(s *Spec) error {
	if s.Router == "" {
		s.Router = RouterStatic
	}
	if !slices.Contains(Routers, s.Router) {
		return fmt.Errorf("lab %q: router %q: want one of %s", s.Prefix, s.Router, strings.Join(Routers, ", "))
	}
	switch {
	case s.BFD && s.Router == RouterStatic:
		return fmt.Errorf("lab %q: BFD needs a BGP router (--router %s, %s or %s); the static router has no sessions to watch", s.Prefix, RouterEmbedded, RouterFRR, RouterBIRD)
	case s.Reflector && s.Router != RouterFRR:
		return fmt.Errorf("lab %q: a route reflector needs --router %s: the router must take all paths from it with add-path", s.Prefix, RouterFRR)
	case s.Reflector && s.BFD:
		return fmt.Errorf("lab %q: BFD with a route reflector: the nodes' sessions end at gobgpd, which has no BFD; leave out one of them", s.Prefix)
	case s.GracefulRestart && s.Router != RouterFRR:
		return fmt.Errorf("lab %q: graceful restart needs --router %s", s.Prefix, RouterFRR)
	case s.PeerIPv6 && !s.IPv6:
		return fmt.Errorf("lab %q: BGP over IPv6 needs a dual-stack lab (--ipv6): the nodes have no IPv6 address to peer from", s.Prefix)
	case s.PeerIPv6 && s.Router == RouterStatic:
		return fmt.Errorf("lab %q: BGP over IPv6 needs a BGP router (--router %s, %s or %s); the static router has no sessions", s.Prefix, RouterEmbedded, RouterFRR, RouterBIRD)
	case s.L2 && s.Router != RouterStatic:
		return fmt.Errorf("lab %q: the layer-2 lab needs --router %s: its clients find the VIPs by ARP, and nothing is announced over BGP", s.Prefix, RouterStatic)
	case s.L2 && (s.Nodes > maxL2Nodes || s.Clients > MaxHosts-maxL2Nodes-2):
		return fmt.Errorf("lab %q: the layer-2 lab holds at most %d nodes and %d clients on one segment", s.Prefix, maxL2Nodes, MaxHosts-maxL2Nodes-2)
	case s.IPv6 && s.Reflector:
		return fmt.Errorf("lab %q: IPv6 with a route reflector: the lab's gobgpd reflects IPv4 unicast only; leave out one of them", s.Prefix)
	case s.Reflector && s.Nodes > MaxHosts-1:
		return fmt.Errorf("lab %q: %d nodes: with a route reflector at most %d (it takes the segment's last address)", s.Prefix, s.Nodes, MaxHosts-1)
	}
	return nil
}

// bgpPlan says how the nodes reach the router over BGP; nil for the
// static router.
func bgpPlan(p Plan) *BGP {
	s := p.Spec
	if s.Router == RouterStatic {
		return nil
	}
	b := &BGP{NodeASN: NodeASN, PeerAddr: p.NodeSegment.Gateway(), PeerASN: RouterASN, RouterASN: RouterASN, HoldTime: HoldTime}
	if p.Reflector != nil {
		b.NodeASN, b.PeerAddr = RouterASN, p.Reflector.Addr
	}
	if s.PeerIPv6 {
		b.PeerAddr = p.NodeSegment.Gateway6()
	}
	if s.BFD {
		b.BFD = &BFD{MinRx: bfdInterval, MinTx: bfdInterval, Multiplier: bfdMultiplier}
	}
	b.GracefulRestart = s.GracefulRestart
	return b
}

func hosts(p Plan, seg Segment, role string, n int) []Host {
	return hostsFrom(p, seg, role, n, seg.Gateway().Next())
}

// hostsFrom lays out n hosts on seg, the first at first (and, on a dual
// stack segment, at the same host number of its IPv6 subnet).
func hostsFrom(p Plan, seg Segment, role string, n int, first netip.Addr) []Host {
	hs := make([]Host, n)
	addr, addr6 := first.Prev(), seg.Gateway6()
	if addr6.IsValid() {
		b := addr6.As16()
		b[15] += first.As4()[3] - seg.Gateway().As4()[3] - 1
		addr6 = netip.AddrFrom16(b)
	}
	for i := range hs {
		addr = addr.Next()
		if addr6.IsValid() {
			addr6 = addr6.Next()
		}
		k := strconv.Itoa(i + 1)
		ns := p.Spec.Prefix + "-" + role + k
		hs[i] = Host{
			Name:      role + k,
			Namespace: ns,
			Interface: HostInterface,
			Addr:      addr,
			Gateway:   seg.Gateway(),
			Peer:      seg.PeerPrefix + k,
			MTU:       seg.MTU,
			PinDir:    filepath.Join(p.PinDir, ns),
			Addr6:     addr6,
			Gateway6:  seg.Gateway6(),
		}
	}
	return hs
}

// pods lays out Spec.Pods pods behind every backend.
func pods(p Plan) []Pod {
	var ps []Pod
	for k, node := range p.Backends {
		addr, addr6 := PodCIDR(k).Addr().Next(), PodCIDR6(k).Addr().Next()
		for j := 1; j <= p.Spec.Pods; j++ {
			addr, addr6 = addr.Next(), addr6.Next()
			name := fmt.Sprintf("%s-pod%d", node.Name, j)
			ns := p.Spec.Prefix + "-" + name
			var a6, gw6 netip.Addr
			if p.Spec.IPv6 {
				a6, gw6 = addr6, PodGateway6
			}
			ps = append(ps, Pod{Node: k, Host: Host{
				Addr6:     a6,
				Gateway6:  gw6,
				Name:      name,
				Namespace: ns,
				Interface: HostInterface,
				Addr:      addr,
				Gateway:   PodGateway,
				Peer:      fmt.Sprintf("hp%d", j),
				MTU:       clientSegment.MTU,
				PinDir:    filepath.Join(p.PinDir, ns),
			}})
		}
	}
	return ps
}

// specFile records the Spec of a lab that is up, for Load.
func specFile(prefix string) string { return filepath.Join(StateDir(prefix), "lab.json") }

// ErrNotUp means a lab has no recorded state: it was never brought up,
// or it was brought down.
var ErrNotUp = errors.New("lab is not up")

// Load returns the plan of a lab that is up, from the Spec recorded by Up.
func Load(prefix string) (Plan, error) {
	if err := checkPrefix(prefix); err != nil {
		return Plan{}, err
	}
	b, err := os.ReadFile(specFile(prefix))
	if errors.Is(err, os.ErrNotExist) {
		return Plan{}, fmt.Errorf("lab %q: %w (start it with `xlb lab up --prefix %s`)", prefix, ErrNotUp, prefix)
	}
	if err != nil {
		return Plan{}, fmt.Errorf("lab %q: %w", prefix, err)
	}
	var s Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return Plan{}, fmt.Errorf("lab %q: %s: %w", prefix, specFile(prefix), err)
	}
	if s.Prefix != prefix {
		return Plan{}, fmt.Errorf("lab %q: %s names prefix %q", prefix, specFile(prefix), s.Prefix)
	}
	return NewPlan(s)
}
