package lb

import (
	"net/netip"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// Encap is a service's forwarding mode in the data plane.
type Encap = wire.Encap

const (
	EncapIPIP = wire.EncapIPIP
	EncapGUE  = wire.EncapGUE
	// EncapGUEHint is GUE whose packets carry the daisy-chain hint of
	// their table slot (Service.Chain) as GUE private data.
	EncapGUEHint = wire.EncapGUEHint
	// EncapNAT is full NAT: the destination becomes the backend's
	// address and port, the source NATConfig.Address and a port the
	// node allocates, so that the backend needs nothing and its replies
	// come back to this node (nat.go).
	EncapNAT = wire.EncapNAT
	// EncapDNAT rewrites the destination only: the client's address is
	// kept, and the backend's replies must route through the node.
	EncapDNAT = wire.EncapDNAT
)

// Protocol numbers used in service keys.
const (
	ProtoTCP = wire.ProtoTCP
	ProtoUDP = wire.ProtoUDP
)

// ServiceKey is what the XDP program looks packets up by.
type ServiceKey struct {
	VIP   netip.Addr
	Port  uint16
	Proto uint8
}

// Service is one service as the data plane sees it: its key, encapsulation
// and Maglev table. Table holds backend IDs and must have exactly the
// data plane's table size entries.
type Service struct {
	ID    uint32
	Key   ServiceKey
	Encap Encap
	Table []uint32
	// Chain is the daisy-chain hint of each table slot: nil (no slot
	// has a previous owner) or exactly the table size entries. Only
	// EncapGUEHint services send hints; others ignore Chain and
	// Generation.
	Chain []ChainSlot
	// Generation is when the service's backend set last changed, in unix
	// seconds (0: never). Every hint carries it.
	Generation uint32
	// SourceRanges are the only sources that reach the service (IPv4
	// prefixes for an IPv4 VIP, IPv6 ones for an IPv6 VIP, at most wire.MaxRanges intervals once merged); none:
	// every source. They are in place before the service's index slot
	// says so (SetSourceRanges).
	SourceRanges []netip.Prefix
	// Stateful pins each flow to the backend its first packet got (a
	// TCP SYN re-picks from the table), for backends that cannot daisy
	// chain. Flows the conntrack table cannot hold, or that began on
	// another instance, follow the table.
	Stateful bool
	// ClientIP is client-IP affinity: the flow hash leaves out the
	// source port (HashedPort), so every connection of a client takes
	// the same table slot, on every instance.
	ClientIP bool
	// Origin identifies what the caller built Table from (OriginOf;
	// zero: unknown). UpsertService records it with the installed
	// table, and KeepService keeps that table for it.
	Origin Origin
	// HintsOrigin identifies, for an EncapGUEHint service, what the
	// caller built Chain and Generation from (its history), as Origin
	// does Table. Zero in KeepService: any.
	HintsOrigin Origin
}

// Origin identifies what a table was built from, in the caller's terms:
// equal origins must mean equal tables.
type Origin [16]byte

// OriginOf is the origin of a table built from what b describes: a
// 128-bit sum of b, never zero.
func OriginOf(b []byte) Origin {
	o := Origin(sum128("xlb table origin v1", len(b), b))
	if o == (Origin{}) {
		o[0] = 1
	}
	return o
}

// ChainSlot is a table slot's daisy-chain hint: the slot's previous
// owner (the zero Addr or 0.0.0.0: none) and when it last changed hands,
// in unix seconds (0: never).
type ChainSlot struct {
	Prev    netip.Addr // the owner before the current one; invalid: none
	Prev2   netip.Addr // the owner before Prev; invalid: none
	Changed uint32
}

// Counters is a packets/bytes pair summed over all CPUs.
type Counters = bpfobj.Counters

// Options configure Open.
type Options struct {
	Interface string     // XDP attach point
	NodeAddr  netip.Addr // outer source address of encapsulated packets
	// NodeAddr6 is the outer source towards IPv6 backends (node_addr6);
	// optional: without it UpsertService refuses IPv6 backends.
	NodeAddr6  netip.Addr
	PinPath    string // bpffs directory for this agent's maps and link
	AttachMode string // auto | native | generic
	TableSize  uint32 // Maglev table size (prime)
	// MaxBackends sizes the backend maps (0: DefaultMaxBackends).
	// Changing it for pinned state migrates the maps (see Load).
	MaxBackends uint32
	// ConntrackSize is how many flows of stateful services the LB
	// remembers (0: DefaultConntrackSize); beyond it the oldest are
	// forgotten. Changing it for pinned state migrates the maps.
	ConntrackSize uint32
	// FlowHash is the flow hash the program computes (the zero value is
	// the default, fmix64). Pinned state of a program that hashed
	// otherwise is refused (see bpfobj.PlanAdoption).
	FlowHash wire.FlowHash
	// PingVIPs answers ICMP echo requests to a VIP from the program
	// (ping_vips); false drops them.
	PingVIPs bool
	// NATSessions is how many sessions of NAT and DNAT services the node
	// holds (0: DefaultNATSessions), and an eighth of it (at least 1024,
	// at most NATSessions) how many not yet answered by their backend.
	// Changing it for pinned state migrates the maps, sessions included
	// (as many as fit).
	NATSessions uint32
}

// DefaultConntrackSize is the default Options.ConntrackSize
// (XLB_CONNTRACK_SIZE in bpf/xlb_consts.h).
const DefaultConntrackSize = 262144

// DefaultNATSessions is the default Options.NATSessions
// (XLB_NAT_SESSIONS in bpf/xlb_consts.h).
const DefaultNATSessions = 262144

// embryonicSessions is how many sessions not yet answered by their
// backend the node holds when it holds n sessions: an eighth, at least
// 1024 (n if smaller). A session leaves that table as soon as its
// backend answers, within a round trip to the backend, so a small table
// is enough to ride out a SYN flood (docs/decisions/0006-nat-sessions.md).
func embryonicSessions(n uint32) uint32 {
	return max(n/8, min(n, 1024))
}
