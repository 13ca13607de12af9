// Package api is the agent's local HTTP API, served on a unix socket and
// read by `xlb status`, and its Prometheus metrics. It knows nothing of the
// agent's internals: everything it serves comes from one StatusFunc.
package api

import (
	"net/netip"
	"time"
)

// StatusFunc returns the agent's current state. It is called once per
// request and once per metrics scrape.
type StatusFunc func() (*Status, error)

// Status is the body of GET /v1/status.
type Status struct {
	Version  string            `json:"version"`
	Node     Node              `json:"node"`
	Config   Config            `json:"config"`
	Services []Service         `json:"services"`
	Reasons  map[string]uint64 `json:"reasons"` // data-plane pass/drop reason → packets
	// Policy is the node-wide policy in force.
	Policy Policy `json:"policy"`
	// Conntrack is the flow table of the stateful services.
	Conntrack Conntrack `json:"conntrack"`
	// NAT is the node's NAT session table; nil while no service has
	// forwarding nat or dnat.
	NAT *NAT `json:"nat,omitempty"`
	// Reconciles are the durations of bringing the data plane in line
	// with the configuration and the backends' health, by trigger
	// (config, health, retry).
	Reconciles map[string]Reconcile `json:"reconciles,omitempty"`
	// BGP is nil when the configuration has no bgp section.
	BGP *BGP `json:"bgp,omitempty"`
	// L2 is layer-2 mode's election and ownership; absent in BGP mode.
	L2 *L2 `json:"l2,omitempty"`
}

// L2 is layer-2 mode as this node sees it: which nodes are alive, and
// which node answers ARP for each VIP.
type L2 struct {
	Node      string `json:"node"` // this node's name
	Interface string `json:"interface"`
	MAC       string `json:"mac"` // what this node answers with
	// HeartbeatMs and DeadAfterMs are l2.heartbeat and l2.deadAfter.
	HeartbeatMs float64 `json:"heartbeatMs"`
	DeadAfterMs float64 `json:"deadAfterMs"`
	// Alive are the nodes this node counts as alive, itself first.
	Alive []string `json:"alive"`
	// AliveSince is when the alive set last changed.
	AliveSince time.Time `json:"aliveSince"`
	Nodes      []L2Node  `json:"nodes"`
	VIPs       []L2VIP   `json:"vips"`
	// Dropped counts the datagrams refused on the heartbeat port, by
	// reason: malformed, unknown (a name not listed, or this node's),
	// spoofed (a listed name from another address or port).
	Dropped map[string]uint64 `json:"dropped,omitempty"`
	// Error is why this node's heartbeats or ARP entries fail, "" when
	// they work.
	Error string `json:"error,omitempty"`
}

// L2Node is another node of the election.
type L2Node struct {
	Name    string     `json:"name"`
	Address netip.Addr `json:"address"`
	Alive   bool       `json:"alive"`
	// LastHeardMs is the time since its last heartbeat (since this
	// agent started, when none came yet), in milliseconds.
	LastHeardMs float64 `json:"lastHeardMs"`
}

// L2VIP is one VIP of layer-2 mode.
type L2VIP struct {
	VIP netip.Addr `json:"vip"`
	// Owner is the alive node that answers for it, by this node's view.
	Owner string `json:"owner"`
	// Answering: this node answers ARP for it now (it owns it and serves
	// it).
	Answering bool `json:"answering"`
	// Since is when this node started answering for it.
	Since time.Time `json:"since,omitzero"`
	// Why says why this node does not serve the VIP, "" when it does.
	Why string `json:"why,omitempty"`
}

// BGP is the node's BGP speaker: its sessions and what it announces.
type BGP struct {
	ASN      uint32     `json:"asn"`
	RouterID netip.Addr `json:"routerID"`
	NextHop  netip.Addr `json:"nextHop"`
	// NextHop6 is the next hop of the IPv6 routes; absent without one.
	NextHop6 netip.Addr `json:"nextHop6,omitzero"`
	Peers    []Peer     `json:"peers"`
	Routes   []Route    `json:"routes"`
}

// Peer is one BGP session.
type Peer struct {
	Address netip.Addr `json:"address"`
	ASN     uint32     `json:"asn"`
	State   string     `json:"state"` // idle, connect, active, opensent, openconfirm, established
	Since   time.Time  `json:"since"`
	// The session's counters, as the BGP speaker last reported them, at
	// CountersAt. They are left out when it has not reported them since
	// the session last changed state: it answers between two UPDATEs
	// it processes, which a peer that floods it makes slow.
	// PrefixesReceived are those the peer sent that the speaker holds
	// (none is imported); MaxPrefixes bounds them.
	PrefixesSent     *int      `json:"prefixesSent,omitempty"`
	PrefixesReceived *int      `json:"prefixesReceived,omitempty"`
	MessagesSent     *uint64   `json:"messagesSent,omitempty"`
	MessagesReceived *uint64   `json:"messagesReceived,omitempty"`
	CountersAt       time.Time `json:"countersAt,omitzero"`
	MaxPrefixes      int       `json:"maxPrefixes"`
	// PrefixLimit is set while the session is held down because the
	// peer sent more than MaxPrefixes prefixes.
	PrefixLimit *PrefixLimit `json:"prefixLimit,omitempty"`
	LastError   string       `json:"lastError,omitempty"`
	Flaps       int          `json:"flaps"`
	// HeldDown says why xlb keeps the session down (BFD), "" if not.
	HeldDown string      `json:"heldDown,omitempty"`
	BFD      *BFDSession `json:"bfd,omitempty"`
	// GracefulRestart is set when this node advertises graceful restart
	// to the peer.
	GracefulRestart *GracefulRestart `json:"gracefulRestart,omitempty"`
}

// GracefulRestart is a session's graceful restart (RFC 4724): the
// restart time this node advertises, and whether the peer advertised
// it too, so that it keeps the node's routes while the agent restarts
// (known once the session is established and its counters were read;
// absent before).
type GracefulRestart struct {
	RestartTimeSeconds int   `json:"restartTimeSeconds"`
	Negotiated         *bool `json:"negotiated,omitempty"`
}

// PrefixLimit is a session closed because the peer sent more prefixes
// than its limit, and held down until RetryAt.
type PrefixLimit struct {
	Limit int       `json:"limit"`
	At    time.Time `json:"at"`
	// Times counts how often in a row; each hold is twice the last.
	Times   int       `json:"times"`
	RetryAt time.Time `json:"retryAt"`
}

// BFDSession is the BFD session guarding a BGP peer.
type BFDSession struct {
	State       string  `json:"state"`
	RemoteState string  `json:"remoteState"`
	Diag        string  `json:"diag"`
	DetectionMs float64 `json:"detectionMs"`
	Downs       uint64  `json:"downs"`
}

// Route is a VIP/32 this node announces, or would announce if it could
// serve it (Reason says why not).
type Route struct {
	Prefix    netip.Prefix `json:"prefix"`
	Announced bool         `json:"announced"`
	Reason    string       `json:"reason,omitempty"`
	// Peers are the only peers the route goes to (a BGPAdvertisement's);
	// none: every peer.
	Peers []netip.Addr `json:"peers,omitempty"`
}

// Reconcile is a histogram of reconcile durations.
type Reconcile struct {
	Count       uint64    `json:"count"`
	SumSeconds  float64   `json:"sumSeconds"`
	LastSeconds float64   `json:"lastSeconds"`
	Last        time.Time `json:"last"`
	// Buckets are cumulative: Count is the number of reconciles that
	// took at most Le seconds.
	Buckets []Bucket `json:"buckets"`
}

// Bucket is one upper bound of a histogram.
type Bucket struct {
	Le    float64 `json:"le"`
	Count uint64  `json:"count"`
}

// Node is the host and its data plane.
type Node struct {
	Interface string     `json:"interface"`
	Address   netip.Addr `json:"address"`
	// Address6 is the node's IPv6 address (node.address6, or the
	// interface's first global one): the outer source towards IPv6
	// backends. Absent when the node has none.
	Address6   netip.Addr `json:"address6,omitzero"`
	AttachMode string     `json:"attachMode"` // native | generic
	PinPath    string     `json:"pinPath"`
	// The data plane's flow hash and Maglev table size: every node of a
	// cluster must run with the same (a restart applies a change).
	FlowHash  string `json:"flowHash,omitempty"`
	TableSize uint32 `json:"tableSize,omitempty"`
	// PingVIPs: the data plane answers ICMP echo requests to VIPs
	// (dataplane.pingVIPs; tx_ping_reply counts them).
	PingVIPs bool `json:"pingVIPs"`
}

// Reload results.
const (
	ResultOK    = "ok"
	ResultError = "error"
)

// Config is the running configuration and the outcome of the last
// (re)load.
type Config struct {
	Path string `json:"path"`
	// Generation counts the configurations loaded since the agent started;
	// 1 is the one it started with.
	Generation uint64    `json:"generation"`
	LastReload time.Time `json:"lastReload"`
	Result     string    `json:"result"`          // ResultOK or ResultError
	Error      string    `json:"error,omitempty"` // LoadError and ApplyError, one per line
	// LoadError is why the last configuration could not be loaded (a
	// file that does not load, a source error): the one before it keeps
	// running. Empty once a configuration loads.
	LoadError string `json:"loadError,omitempty"`
	// ApplyError is why the running configuration is not fully applied
	// (the agent retries it); empty when it is.
	ApplyError string `json:"applyError,omitempty"`
	// Reloads counts reloads after the start by result.
	Reloads map[string]uint64 `json:"reloads"`
}

// Service is one configured service and its counters.
type Service struct {
	Name       string     `json:"name"`
	VIP        netip.Addr `json:"vip"`
	Port       uint16     `json:"port"`
	Protocol   string     `json:"protocol"`
	Forwarding string     `json:"forwarding"`
	// Flows is the service's flows mode: stateless, daisy-chain or
	// stateful (docs/connection-survival.md).
	Flows string `json:"flows"`
	// Affinity is none, or client-ip: every connection of a client goes
	// to one backend.
	Affinity string `json:"affinity"`
	// Installed is false while the data plane does not serve the service
	// yet (its last apply failed; see Config.Error).
	Installed bool `json:"installed"`
	// State is StateDown when every backend with a weight above 0 failed
	// its health checks: the service's table then names no backend and
	// the node drops its packets. Otherwise StateUp.
	State    string   `json:"state"`
	Counters Counters `json:"counters"`
	// SourceRanges are the only sources that reach the service (CIDRs);
	// none: every source.
	SourceRanges []string `json:"sourceRanges,omitempty"`
	// SourceRangeDrops counts what the node dropped for this service
	// from sources outside SourceRanges (the reason drop_source_range,
	// per service).
	SourceRangeDrops Counters  `json:"sourceRangeDrops"`
	Backends         []Backend `json:"backends"`
}

// Conntrack is the LB node's flow table of the services with flows:
// stateful. Being an LRU, a full table evicts its oldest flows, whose next
// packets take the service's table again.
type Conntrack struct {
	// Flows it holds: recent flows, not open connections (an entry stays
	// until the full table evicts it).
	Flows int `json:"flows"`
	// Size is how many it holds at most (dataplane.conntrackSize).
	Size uint32 `json:"size"`
}

// Policy is the node-wide policy: the deny list.
type Policy struct {
	// DenyPrefixes is how many prefixes the deny list holds.
	DenyPrefixes int `json:"denyPrefixes"`
	// Denied counts the packets to a VIP the node dropped because the
	// deny list holds their source (the reason drop_denied).
	Denied uint64 `json:"denied"`
}

// NAT is the node's NAT session table, for the services with
// forwarding nat or dnat: its settings and counters.
type NAT struct {
	// Address and Ports are where full-NAT sessions come from
	// (nat.address, or the node address, and nat.ports); Address6 is
	// the source of IPv6 services' full NAT (node.address6, the same
	// ports), invalid when the node has no IPv6 address.
	Address  netip.Addr `json:"address"`
	Address6 netip.Addr `json:"address6,omitzero"`
	Ports    string     `json:"ports"`
	// Sessions are in use now, Embryonic of them not established yet
	// (no reply from the backend, or no client packet since); Capacity
	// is how many the table holds.
	Sessions  uint64 `json:"sessions"`
	Embryonic uint64 `json:"embryonic"`
	Capacity  uint64 `json:"capacity"`
	// Counters since the data plane was loaded.
	Created uint64 `json:"created"`
	// AllocFailures: new connections without a session (no free port
	// or no room); their packets were dropped.
	AllocFailures uint64 `json:"allocationFailures"`
	// Expired sessions ended by their timeout; NoReply of them never
	// saw a reply from the backend (with dnat: the backend's route to
	// the client does not go through the node).
	Expired uint64 `json:"expired"`
	NoReply uint64 `json:"noReply"`
	// ReverseMisses are packets from a backend address and port with no
	// session, passed to the kernel.
	ReverseMisses uint64 `json:"reverseMisses"`
	// FragmentsDropped are IP fragments to NAT services, dropped.
	FragmentsDropped uint64 `json:"fragmentsDropped"`
	// ICMPTranslated are ICMP errors translated for a session.
	ICMPTranslated uint64 `json:"icmpTranslated"`
	// ExpireError says why reclaiming expired sessions failed last; ""
	// when it works.
	ExpireError string `json:"expireError,omitempty"`
}

// Service and backend states.
const (
	StateUp   = "up"
	StateDown = "down"
	// StateUnknown: not probed yet. It counts as up.
	StateUnknown = "unknown"
)

// Backend is one backend of a service and the traffic sent to it by this
// service.
type Backend struct {
	Address  netip.Addr `json:"address"`
	Port     uint16     `json:"port"`
	Weight   uint32     `json:"weight"`
	Health   Health     `json:"health"`
	Counters Counters   `json:"counters"`
}

// Health is the health check result of one backend of one service. A
// backend that is down gets no new flows, as if its weight were 0.
type Health struct {
	Check string `json:"check"` // none | tcp | http; none is never probed and always up
	State string `json:"state"` // StateUnknown, StateUp or StateDown
	// Since is when State last changed (zero before the first change).
	Since time.Time `json:"since,omitzero"`
	// LastCheck is when the last probe finished (zero before the first).
	LastCheck time.Time `json:"lastCheck,omitzero"`
	// LastError says why the last probe failed; "" if it succeeded.
	LastError string `json:"lastError,omitempty"`
	// LatencyMs is how long the last probe took, in milliseconds.
	LatencyMs float64 `json:"latencyMs"`
}

// Counters count packets and bytes.
type Counters struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}
