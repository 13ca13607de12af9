// Package config is the agent's configuration model: the Config every
// source produces, its defaults and limits, and the checks a
// configuration must pass, with errors that name the file, the line, the
// field and the reason. A file is read in two steps: package schema
// decodes its YAML into typed structs, reporting what is wrong with its
// shape; Validate checks what the values mean and builds the Config. A
// source that builds its configuration in code (Kubernetes) passes it
// through the same Validate.
package config

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/xlbproject/xlb/internal/flowhash"
)

// MaxHistory is how many earlier backend sets a daisy-chained service
// may list; the agent keeps as many of those it saw itself.
const MaxHistory = 8

// Defaults.
const (
	DefaultSocket     = "/run/xlb/xlb.sock"
	DefaultTableSize  = 65537
	DefaultAttachMode = AttachAuto
	DefaultFlowHash   = FlowHashFmix64
	DefaultWeight     = 1
	// DefaultPingVIPs: a node answers pings to its VIPs, as a host
	// answers pings to its own addresses.
	DefaultPingVIPs = true
)

// Flow hashes of the data plane (Dataplane.FlowHash), named once in
// package flowhash. Every node of a cluster must compute the same one.
const (
	FlowHashFmix64  = flowhash.Fmix64Name
	FlowHashLookup3 = flowhash.Lookup3Name
)

// Limits. They must match the sizes of the data plane's BPF maps (bpf/):
// a configuration that passes Parse must fit into them.
const (
	// MaxServices is the number of services one agent can serve.
	MaxServices = 16384
	// DefaultMaxBackends is the default of Dataplane.MaxBackends: the
	// number of backend entries over all services, one entry per
	// (service, backend) pair, drained backends included.
	DefaultMaxBackends = 16384
	// MaxBackends bounds Dataplane.MaxBackends. Each entry costs a few
	// dozen bytes per CPU in the data plane's per-CPU counters.
	MaxBackends = 1 << 20
	// MinTableSize and MaxTableSize bound Dataplane.TableSize. Both are
	// prime. Below the minimum, weights cannot be honoured with any
	// precision; above the maximum, one table per service no longer fits
	// comfortably into kernel memory.
	MinTableSize = 251
	MaxTableSize = 1048573
	// MaxWeight is the largest backend weight.
	MaxWeight = 65535
	// MinConntrackSize and MaxConntrackSize bound
	// Dataplane.ConntrackSize. The table is allocated whole when the
	// data plane loads: about 80 bytes per flow.
	MinConntrackSize = 1024
	MaxConntrackSize = 1 << 24
	// MaxSourceRanges is how many source ranges one service may list
	// (XLB_SVC_MAX_RANGES: the data plane's binary search over them has
	// a fixed depth).
	MaxSourceRanges = 64
	// MaxDenyPrefixes is how many prefixes the node's deny list
	// (policy.deny) may hold: the data plane's deny table has room for
	// one node and one leaf cell per prefix (XLB_DENY_MAX_PREFIXES).
	MaxDenyPrefixes = 131072
)

// Config is a validated agent configuration. Every field holds its final
// value: defaults are applied by Parse.
type Config struct {
	Node      Node
	API       API
	Dataplane Dataplane
	// BGP is nil when the file has no bgp section: nothing is announced.
	BGP *BGP
	// L2 is the election among the nodes of layer-2 mode; set exactly
	// when Node.Announce is AnnounceL2.
	L2 *L2
	// Kubernetes is nil when the file has no kubernetes section: the
	// file is then the only source of services and peers.
	Kubernetes *Kubernetes
	// Policy says who may reach the node's VIPs.
	Policy Policy
	// NAT holds the node-wide settings of the services with forwarding
	// nat or dnat; every field has its default when the file has no nat
	// section.
	NAT      NATConfig
	Services []Service
	// Announcements is nil but from the Kubernetes source, whose
	// BGPAdvertisements may send a VIP to some peers only, or add
	// aggregates (see Announcements).
	Announcements *Announcements
}

// NAT defaults and limits (the nat section).
const (
	// DefaultNATPorts lies below the ports Linux takes for its own
	// connections by default (net.ipv4.ip_local_port_range 32768-60999).
	DefaultNATPortMin = 20000
	DefaultNATPortMax = 32767
	// MinNATPort keeps the host's well-known services' ports out of the
	// range; MinNATPorts is the fewest ports a range may hold: each
	// backend address, port and protocol has that many sessions at most.
	MinNATPort  = 1024
	MinNATPorts = 1024
	// DefaultNATSessions, MinNATSessions and MaxNATSessions size the
	// session table, allocated whole when the data plane loads.
	DefaultNATSessions = 262144
	MinNATSessions     = 1024
	MaxNATSessions     = 1 << 24

	DefaultNATTCPSyn         = 5 * time.Second
	DefaultNATTCPEstablished = time.Hour
	DefaultNATTCPClosing     = 10 * time.Second
	DefaultNATUDP            = 60 * time.Second
	// DefaultNATTCPTimeWait is Linux's TIME_WAIT (TCP_TIMEWAIT_LEN).
	DefaultNATTCPTimeWait = 60 * time.Second
	// MinNATTimeout and MaxNATTimeout bound every timeout: below a
	// second a session would end between two packets of a live
	// connection; above a day an idle one holds its port for nothing.
	MinNATTimeout = time.Second
	MaxNATTimeout = 24 * time.Hour
)

// NATConfig is the node's settings for the services with forwarding nat or
// dnat: the source address and ports of full-NAT sessions, the size of
// the session table and how long an idle session lives.
type NATConfig struct {
	// Address is the source of full-NAT sessions towards the backends,
	// whose replies come back to it. Invalid (zero): the node address.
	Address netip.Addr
	// Ports are the source ports allocated on Address, per backend
	// address, port and protocol: MinNATPort..65535, at least
	// MinNATPorts of them, none of the host's ip_local_port_range.
	Ports PortRange
	// Sessions is how many sessions the node holds,
	// MinNATSessions..MaxNATSessions; fixed when the data plane loads.
	Sessions uint32
	Timeouts NATTimeouts
}

// NATTimeouts are how long an idle session lives, by state; each
// MinNATTimeout..MaxNATTimeout.
type NATTimeouts struct {
	TCPSyn         time.Duration // a TCP session the backend has not answered yet
	TCPEstablished time.Duration // an established TCP session
	TCPClosing     time.Duration // a TCP session after FIN or RST
	UDP            time.Duration // a UDP session
	// TCPTimeWait is how long a backend that closed a connection first
	// keeps it in TIME_WAIT: the node gives that port to a new session
	// to the backend only if it finds no other free one meanwhile.
	TCPTimeWait time.Duration
}

// DefaultNAT is the nat section's value when the file has none.
func DefaultNAT() NATConfig {
	return NATConfig{
		Ports:    PortRange{Min: DefaultNATPortMin, Max: DefaultNATPortMax},
		Sessions: DefaultNATSessions,
		Timeouts: NATTimeouts{TCPSyn: DefaultNATTCPSyn, TCPEstablished: DefaultNATTCPEstablished,
			TCPClosing: DefaultNATTCPClosing, UDP: DefaultNATUDP, TCPTimeWait: DefaultNATTCPTimeWait},
	}
}

// PortRange is an inclusive range of ports, written MIN-MAX. The zero
// value is no range.
type PortRange struct {
	Min, Max uint16
}

// String writes r as MIN-MAX.
func (r PortRange) String() string { return fmt.Sprintf("%d-%d", r.Min, r.Max) }

// Len is how many ports r holds.
func (r PortRange) Len() int {
	if r.Max < r.Min || r == (PortRange{}) {
		return 0
	}
	return int(r.Max) - int(r.Min) + 1
}

// Overlaps reports whether r and o share a port.
func (r PortRange) Overlaps(o PortRange) bool {
	return r.Len() > 0 && o.Len() > 0 && r.Min <= o.Max && o.Min <= r.Max
}

// Policy is the node-wide policy: it applies to every VIP the node
// serves.
type Policy struct {
	// Deny are the sources whose packets to any VIP the node drops
	// before anything else is looked up: IPv4 and IPv6 prefixes,
	// network addresses, as written (overlaps allowed), at most
	// MaxDenyPrefixes. Nil: none.
	Deny []netip.Prefix
}

// Node is the host the agent runs on.
type Node struct {
	// Interface is where the XDP program attaches (required).
	Interface string
	// Address is the outer source address and BGP next hop. Invalid (zero)
	// when the file leaves it out: the agent then takes the interface's
	// first IPv4 address.
	Address netip.Addr
	// Address6 is the outer source towards IPv6 backends and the BGP
	// next hop of IPv6 VIPs. Invalid (zero) when the file leaves it out:
	// the agent then takes the interface's first global IPv6 address,
	// if it has one.
	Address6 netip.Addr
	// Announce is AnnounceL2, or "" for AnnounceBGP (the default); with
	// AnnounceL2, Config.L2 is set and Config.BGP is nil.
	Announce Announce
}

// API is the local API.
type API struct {
	Socket  string // unix socket path, default DefaultSocket
	Metrics string // optional host:port for Prometheus, "" when unset
}

// Dataplane holds the load-time parameters of the XDP program
// (an extension of the contract; every field is optional).
type Dataplane struct {
	// PinPath is the bpffs directory holding this agent's pinned maps and
	// link. "" means the agent derives one from the network namespace and
	// the interface, so agents in different namespaces never collide.
	PinPath string
	// AttachMode is auto (native, falling back to generic), native or generic.
	AttachMode AttachMode
	// TableSize is the Maglev table size, a prime.
	TableSize uint32
	// MaxBackends is how many backend entries (over all services) the
	// data plane's maps hold, fixed when they are created.
	MaxBackends uint32
	// ConntrackSize is how many flows the stateful services' flow table
	// holds on this node; 0: the data plane's default (262144).
	ConntrackSize uint32
	// FlowHash is the flow hash, FlowHashFmix64 or FlowHashLookup3. It
	// decides each flow's table slot, so every node of a cluster needs
	// the same one.
	FlowHash string
	// PingVIPs: the XDP program answers ICMP echo requests to a VIP
	// itself; otherwise it drops them.
	PingVIPs bool
}

// Service is one load-balanced (VIP, port, protocol).
type Service struct {
	Name     string
	VIP      netip.Addr
	Port     uint16
	Protocol Protocol
	// SourceRanges are the only sources that reach the service; the
	// node drops packets from any other before any table lookup.
	// Prefixes of the VIP's family, network addresses, as written
	// (overlaps allowed), at most MaxSourceRanges. Nil: every source.
	SourceRanges []netip.Prefix
	Forwarding   Forwarding
	// TranslatePorts: the backends' hosts translate VIP:port to the
	// backend's address and port (xlb backend's Kubernetes mode), so a
	// backend's port may differ from Port. The data plane delivers
	// VIP:port unchanged either way.
	TranslatePorts bool
	Backends       []Backend
	// Flows is FlowsDaisyChain or FlowsStateful, or "" for
	// FlowsStateless (the default).
	Flows Flows
	// Affinity is AffinityClientIP, or "" for AffinityNone (the
	// default).
	Affinity Affinity
	// History lists earlier backend sets of a daisy-chained service,
	// oldest first, each with the time it stopped being current. Written
	// by whoever changes the backends, it lets every xlb instance, one
	// started after the change included, compute the same previous
	// owners. Empty: the agent records the changes it sees itself.
	History []Generation
	// Announce is AnnounceL2 for a VIP answered by ARP from the one node
	// elected for it by Kubernetes Leases (an AddressPool with announce:
	// l2), or "" for the node's mode (Node.Announce). Services that share
	// a VIP share it.
	Announce Announce
	// BGP holds the path attributes of the route announced for the VIP.
	// Services that share a VIP share one route, so each of them holds
	// the same attributes, whichever of them wrote them. The zero value
	// announces a plain route. Non-zero only when Config.BGP is set.
	BGP RouteAttributes
}

// Generation is a backend set that was the service's until Until.
type Generation struct {
	Until    time.Time
	Backends []Backend
}

// Backend is one real server of a service.
type Backend struct {
	Address netip.Addr
	Port    uint16 // the service port, unless the service translates ports
	Weight  uint32 // default DefaultWeight; 0 drains (no new flows)
	// HealthCheck is how this backend is probed: the service's
	// healthCheck with the backend's own merged over it, field by field.
	HealthCheck HealthCheck
}

// Health check defaults and limits.
const (
	DefaultCheckInterval = time.Second
	// DefaultCheckTimeout is the timeout's default, or the interval if
	// that is shorter.
	DefaultCheckTimeout = time.Second
	DefaultCheckPath    = "/"
	DefaultStatusMin    = 200
	DefaultStatusMax    = 399
	DefaultRise         = 2
	DefaultFall         = 2

	MinCheckInterval = 10 * time.Millisecond
	MaxCheckInterval = time.Hour
	MaxRiseFall      = 100
	// MaxCheckPath bounds the HTTP path: it goes into every request line.
	MaxCheckPath = 1024
)

// HealthCheck is one backend's resolved health check. Every field holds its
// final value; the fields a type does not use are zero (for CheckNone,
// every field but Type).
type HealthCheck struct {
	Type      CheckType
	Port      uint16 // default: the backend's port
	Path      string // http: the request path, default "/"
	StatusMin int    // http: the lowest status counted as healthy
	StatusMax int    // http: the highest status counted as healthy
	Interval  time.Duration
	Timeout   time.Duration // > 0 and <= Interval
	Rise      int           // consecutive successes that bring a down backend up
	Fall      int           // consecutive failures that take an up backend down
}

// Key identifies a service in the data plane.
type Key struct {
	VIP      netip.Addr
	Port     uint16
	Protocol Protocol
}

// Key returns the service's data-plane key.
func (s Service) Key() Key { return Key{VIP: s.VIP, Port: s.Port, Protocol: s.Protocol} }

// String formats the key as VIP:port/protocol, e.g. 10.99.0.1:80/tcp.
func (k Key) String() string { return fmt.Sprintf("%s:%d/%s", k.VIP, k.Port, k.Protocol) }

// BGP defaults and limits.
const (
	// DefaultBGPPort is the TCP port of BGP: a peer's default port, and
	// the default listener port when a peer is passive.
	DefaultBGPPort = 179
	// DefaultHoldTime is short for BGP (RFC 4271 suggests 90s): a node
	// that dies is routed around within seconds even without BFD.
	DefaultHoldTime = 9 * time.Second
	MinHoldTime     = 3 * time.Second     // RFC 4271: 0 or at least 3s
	MaxHoldTime     = 65535 * time.Second // a 16-bit count of seconds
	// DefaultDrainTime is how long the agent waits after withdrawing its
	// routes on SIGTERM, so that routers move traffic away before the
	// data plane stops answering.
	DefaultDrainTime = 5 * time.Second
	MaxDrainTime     = 10 * time.Minute
	// MaxPasswordLen is the kernel's limit for a TCP MD5 key
	// (TCP_MD5SIG_MAXKEYLEN).
	MaxPasswordLen = 80
	// DefaultMaxPrefixes is a peer's default prefix limit: far above what
	// a route reflector that reflects the other nodes' VIPs sends, far
	// below a full table. MaxMaxPrefixes is the highest a peer may have.
	// docs/bgp.md says what a prefix held costs.
	DefaultMaxPrefixes = 10000
	MaxMaxPrefixes     = 100000

	// The restart time is 12 bits of seconds in RFC 4724's capability.
	DefaultRestartTime   = 120 * time.Second
	MinRestartTime       = time.Second
	MaxRestartTime       = 4095 * time.Second
	DefaultBFDInterval   = 300 * time.Millisecond
	DefaultBFDMultiplier = 3
	MinBFDInterval       = 10 * time.Millisecond
	MaxBFDInterval       = 60 * time.Second

	// MaxCommunities and MaxLargeCommunities bound the attributes of one
	// route, so that its UPDATE message always fits the 4096 bytes BGP
	// allows (4 and 12 bytes per community).
	MaxCommunities      = 100
	MaxLargeCommunities = 100
)

// BGP is the speaker's configuration: what this node announces its VIPs
// to. Every field holds its final value.
type BGP struct {
	// ASN is the local autonomous system number: never 0 nor AS_TRANS
	// (23456).
	ASN uint32
	// RouterID is the BGP identifier. Default node.address; invalid (zero)
	// when neither is in the file: the agent then takes the node address
	// it resolves from the interface.
	RouterID netip.Addr
	// HoldTime and Keepalive are the section's timers, which every peer
	// inherits unless it sets its own: the speaker uses Peer.HoldTime and
	// Peer.Keepalive. HoldTime is 0 (no keepalives, and then Keepalive is
	// 0 too) or MinHoldTime..MaxHoldTime in whole seconds; Keepalive is
	// whole seconds below HoldTime.
	HoldTime  time.Duration
	Keepalive time.Duration
	// DrainTime is how long the agent waits between withdrawing every
	// route on SIGTERM and exiting, 0..MaxDrainTime.
	DrainTime time.Duration
	// ListenPort is the TCP port the speaker accepts sessions on, or 0 for
	// no listener (the speaker only connects out). Default: DefaultBGPPort
	// when a peer is passive, else 0. A passive peer implies ListenPort > 0.
	ListenPort int
	// Peers are the neighbours, at least one, with distinct addresses.
	Peers []Peer
}

// Peer is one BGP neighbour: an upstream router or a route reflector.
type Peer struct {
	Address netip.Addr // unicast IPv4 or IPv6, never a node address
	// ASN is the neighbour's; equal to BGP.ASN means iBGP.
	ASN  uint32
	Port uint16 // default DefaultBGPPort
	// Password is the TCP MD5 key (RFC 2385), "" for none; printable
	// ASCII, at most MaxPasswordLen bytes.
	Password string
	// HoldTime and Keepalive are this session's timers: the peer's own,
	// else the bgp section's, field by field; Keepalive defaults to a
	// third of HoldTime. Same ranges as BGP.HoldTime and BGP.Keepalive.
	HoldTime  time.Duration
	Keepalive time.Duration
	// Multihop is the TTL of an eBGP session to a neighbour that is not
	// directly connected, 1..255; 0 means directly connected. Always 0
	// for iBGP peers.
	Multihop uint8
	// Passive waits for the neighbour to connect.
	Passive bool
	// MaxPrefixes is the most prefixes the neighbour may send; with one
	// more the session is closed and held down for a while.
	// 1..MaxMaxPrefixes, default DefaultMaxPrefixes.
	MaxPrefixes uint32
	// BFD is nil when the peer has no bfd field; else the session is
	// watched by BFD (RFC 5881, single hop) and goes down with it.
	// Never set together with Multihop.
	BFD *BFD
	// GracefulRestart is nil when the peer has no gracefulRestart field;
	// else the session advertises RFC 4724's capability, and the router
	// keeps this node's routes for RestartTime when the agent stops
	// without withdrawing them (a restart, a crash).
	GracefulRestart *GracefulRestart
}

// GracefulRestart holds a peer's graceful restart settings.
type GracefulRestart struct {
	// RestartTime is how long the router keeps the routes of a session
	// that went down without a NOTIFICATION, waiting for it to come back:
	// whole seconds, MinRestartTime..MaxRestartTime, default
	// DefaultRestartTime.
	RestartTime time.Duration
}

// BFD holds the timers of a peer's BFD session.
type BFD struct {
	MinRx      time.Duration // MinBFDInterval..MaxBFDInterval, default DefaultBFDInterval
	MinTx      time.Duration // MinBFDInterval..MaxBFDInterval, default DefaultBFDInterval
	Multiplier uint8         // 1..255, default DefaultBFDMultiplier
}

// RouteAttributes are the optional path attributes of a VIP's route. The
// zero value is a plain route.
type RouteAttributes struct {
	// Communities are RFC 1997 communities, sorted by value and distinct:
	// "ASN:VALUE" in decimal (e.g. "65000:100"), or the lower-case name of
	// a well-known one (no-export, no-advertise, no-export-subconfed,
	// no-peer, blackhole, graceful-shutdown), also when written as numbers.
	Communities []string
	// LargeCommunities are RFC 8092 large communities
	// "GLOBAL:LOCAL1:LOCAL2" in decimal, sorted by value and distinct.
	LargeCommunities []string
	// LocalPreference is sent to iBGP peers only (eBGP drops it); nil
	// when unset.
	LocalPreference *uint32
	// MED is the MULTI_EXIT_DISC; nil when unset.
	MED *uint32
}

// IsZero reports whether a sets no attribute.
func (a RouteAttributes) IsZero() bool {
	return len(a.Communities) == 0 && len(a.LargeCommunities) == 0 && a.LocalPreference == nil && a.MED == nil
}

// Equal reports whether a and b announce the same attributes.
func (a RouteAttributes) Equal(b RouteAttributes) bool {
	return slices.Equal(a.Communities, b.Communities) && slices.Equal(a.LargeCommunities, b.LargeCommunities) &&
		equalPtr(a.LocalPreference, b.LocalPreference) && equalPtr(a.MED, b.MED)
}

func equalPtr(a, b *uint32) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

func (a RouteAttributes) clone() RouteAttributes {
	c := RouteAttributes{Communities: slices.Clone(a.Communities), LargeCommunities: slices.Clone(a.LargeCommunities)}
	if a.LocalPreference != nil {
		v := *a.LocalPreference
		c.LocalPreference = &v
	}
	if a.MED != nil {
		v := *a.MED
		c.MED = &v
	}
	return c
}

// Layer-2 mode defaults and limits (the l2 section). The defaults replace
// a hung or stopped owner within half a second: four heartbeats missed.
const (
	DefaultL2Port      = 7947
	DefaultL2Heartbeat = 100 * time.Millisecond
	// DefaultL2DeadAfter is the default with the default heartbeat; with
	// another heartbeat it is L2DeadAfterBeats of them.
	DefaultL2DeadAfter = 400 * time.Millisecond
	L2DeadAfterBeats   = 4
	MinL2Heartbeat     = 10 * time.Millisecond
	MaxL2Heartbeat     = 10 * time.Second
	// A node is declared dead after at least two heartbeats missed: one
	// lost datagram never moves a VIP.
	MinL2DeadAfterBeats = 2
	MaxL2DeadAfter      = time.Minute
	// MaxL2Nodes bounds l2.nodes: each node sends a heartbeat to every
	// other one.
	MaxL2Nodes = 64
	// MaxL2NodeName is a DNS label's length: a name travels in every
	// heartbeat.
	MaxL2NodeName = 63
)

// L2 is the election of layer-2 mode: the nodes that share the VIPs,
// this node among them, and how fast a silent one is replaced.
type L2 struct {
	// NodeName is this node's name in Nodes: as written, else the node
	// whose address is the node address.
	NodeName string
	// Port is the UDP port heartbeats go to and come from on every node.
	Port uint16
	// Heartbeat is how often the node tells every other node it lives.
	Heartbeat time.Duration
	// DeadAfter is how long a node may stay silent before the others
	// take its VIPs over; at least MinL2DeadAfterBeats heartbeats.
	DeadAfter time.Duration
	// Nodes are every node that may answer for the VIPs, 1..MaxL2Nodes,
	// distinct names and addresses, in the order written.
	Nodes []L2Node
}

// L2Node is one node of layer-2 mode.
type L2Node struct {
	// Name is a DNS label, unique in the list: every node computes the
	// owner of a VIP from the names, so they must be the same on all.
	Name string
	// Address is the node's IPv4 address, its node.address: heartbeats
	// are sent to it and from it.
	Address netip.Addr
}
