package config

import (
	"fmt"
	"strings"
)

// The names a configuration gives its modes are defined here once, each
// set with a Parse function: the file, the Kubernetes annotations, the
// lab and the command line all read them through it, and a name it does
// not know is an error wherever it is written.

// NameError is the error for a name that is not one of a set.
type NameError struct {
	// What the name should have been, with its article: "a protocol".
	What string
	Name string
	// Valid lists the names of the set, in the documentation's order.
	Valid []string
	// use is how the error says what to write instead.
	use string
}

func (e *NameError) Error() string {
	return fmt.Sprintf("%q is not %s; use %s", e.Name, e.What, e.use)
}

// List is the valid names as a phrase: "tcp or udp".
func (e *NameError) List() string { return orList(e.Valid) }

// names is one set of names.
type names[T ~string] struct {
	what  string
	valid []T
	// use says what to write instead; "" for List.
	use string
}

func (n names[T]) parse(s string) (T, error) {
	for _, v := range n.valid {
		if string(v) == s {
			return v, nil
		}
	}
	valid := make([]string, len(n.valid))
	for i, v := range n.valid {
		valid[i] = string(v)
	}
	use := n.use
	if use == "" {
		use = orList(valid)
	}
	return "", &NameError{What: n.what, Name: s, Valid: valid, use: use}
}

// orList joins names as "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Protocol is the L4 protocol of a service.
type Protocol string

const (
	TCP Protocol = "tcp"
	UDP Protocol = "udp"
)

var protocols = names[Protocol]{what: "a protocol", valid: []Protocol{TCP, UDP}, use: "tcp or udp (lower case)"}

// ParseProtocol reads a protocol's name: tcp or udp.
func ParseProtocol(s string) (Protocol, error) { return protocols.parse(s) }

// Forwarding is how packets reach a backend.
type Forwarding string

const (
	DSRIPIP Forwarding = "dsr-ipip"
	DSRGUE  Forwarding = "dsr-gue"
	// NAT: the node rewrites the destination to the backend's address
	// and port and the source to its own address (nat.address) and a
	// port it allocates, so the backend needs nothing and replies to the
	// node, which translates them back from its session table.
	NAT Forwarding = "nat"
	// DNAT: the destination alone is rewritten; the backend sees the
	// client's address, and its route to the clients must go through
	// the node.
	DNAT Forwarding = "dnat"
)

var forwardings = names[Forwarding]{what: "a forwarding mode", valid: []Forwarding{DSRIPIP, DSRGUE, NAT, DNAT}}

// ParseForwarding reads a forwarding mode's name: dsr-ipip, dsr-gue,
// nat or dnat.
func ParseForwarding(s string) (Forwarding, error) { return forwardings.parse(s) }

// Translates reports whether the node itself rewrites packets to the
// backend's address and port (nat, dnat), holding a session per
// connection, instead of tunnelling them unchanged (DSR).
func (f Forwarding) Translates() bool { return f == NAT || f == DNAT }

// Flows is what keeps a service's established connections on their
// backend when the backend set changes (docs/connection-survival.md).
type Flows string

const (
	// FlowsStateless: the Maglev table alone. A connection whose table
	// slot moves to another backend breaks. Service.Flows holds it as "".
	FlowsStateless Flows = "stateless"
	// FlowsDaisyChain: stateless, and every packet carries its slot's
	// previous owner; a backend without the connection hands the packet
	// on to it (Beamer). Needs dsr-gue and xlb backend on the backends.
	FlowsDaisyChain Flows = "daisy-chain"
	// FlowsStateful: a per-flow table on each xlb node keeps a flow on
	// the backend its first packet went to, for backends without xlb's
	// backend program. A flow that reaches another node, or whose entry
	// is evicted, is hashed again.
	FlowsStateful Flows = "stateful"
)

var flowsModes = names[Flows]{what: "a flows mode", valid: []Flows{FlowsStateless, FlowsDaisyChain, FlowsStateful}}

// ParseFlows reads a flows mode's name: stateless, daisy-chain or
// stateful.
func ParseFlows(s string) (Flows, error) { return flowsModes.parse(s) }

// Name is the mode as the documentation and status name it: stateless
// for the zero value.
func (f Flows) Name() string {
	if f == "" {
		return string(FlowsStateless)
	}
	return string(f)
}

// Affinity is what keeps a client's connections together on one backend.
type Affinity string

const (
	// AffinityNone: each connection is hashed with its source port, so
	// a client's connections spread over the backends. Service.Affinity
	// holds it as "".
	AffinityNone Affinity = "none"
	// AffinityClientIP: the flow hash leaves out the source port, so
	// every connection of a client (TCP or UDP) reaches the same backend
	// on every node, for as long as the backend set stays the same.
	AffinityClientIP Affinity = "client-ip"
)

var affinities = names[Affinity]{what: "an affinity", valid: []Affinity{AffinityNone, AffinityClientIP},
	use: "none (connections spread) or client-ip (a client's connections go to one backend), lower case"}

// ParseAffinity reads an affinity's name: none or client-ip.
func ParseAffinity(s string) (Affinity, error) { return affinities.parse(s) }

// Name is the affinity as the documentation and status name it: none
// for the zero value.
func (a Affinity) Name() string {
	if a == "" {
		return string(AffinityNone)
	}
	return string(a)
}

// CheckType is the kind of a health check.
type CheckType string

const (
	CheckNone CheckType = "none" // not probed: always healthy
	CheckTCP  CheckType = "tcp"  // a TCP connect
	CheckHTTP CheckType = "http" // an HTTP GET with an expected status
)

var checkTypes = names[CheckType]{what: "a check type", valid: []CheckType{CheckTCP, CheckHTTP, CheckNone},
	use: "tcp (connect), http (GET with an expected status) or none (not probed), lower case"}

// ParseCheckType reads a health check type's name: tcp, http or none.
func ParseCheckType(s string) (CheckType, error) { return checkTypes.parse(s) }

// AttachMode is how the XDP program attaches (Dataplane.AttachMode).
type AttachMode string

const (
	AttachAuto    AttachMode = "auto" // native, falling back to generic
	AttachNative  AttachMode = "native"
	AttachGeneric AttachMode = "generic"
)

var attachModes = names[AttachMode]{what: "an attach mode", valid: []AttachMode{AttachAuto, AttachNative, AttachGeneric},
	use: "auto (native, falling back to generic), native or generic"}

// ParseAttachMode reads an attach mode's name: auto, native or generic.
func ParseAttachMode(s string) (AttachMode, error) { return attachModes.parse(s) }

// Announce is how the node makes its VIPs reachable (Node.Announce).
type Announce string

const (
	// AnnounceBGP: routes to the VIPs, next hop the node, over BGP.
	AnnounceBGP Announce = "bgp"
	// AnnounceL2: ARP answers for each VIP from the one node the l2
	// section's nodes elect for it.
	AnnounceL2 Announce = "l2"
)

var announceModes = names[Announce]{what: "an announce mode", valid: []Announce{AnnounceBGP, AnnounceL2},
	use: "bgp (routes over BGP, the bgp section) or l2 (ARP from one elected node per VIP, the l2 section), lower case"}

// ParseAnnounce reads an announce mode's name: bgp or l2.
func ParseAnnounce(s string) (Announce, error) { return announceModes.parse(s) }
