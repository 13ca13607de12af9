// Package api holds xlb's Kubernetes API: the names (group, load-balancer
// class, annotations), the custom resources AddressPool, BGPPeer and
// DenyList as Go types, and how xlb reads the sources a Service or a
// DenyList names (ranges.go). The types are the source of truth: their
// doc comments and kubebuilder markers are what controller-gen turns
// into the CRDs of deploy/crds and the deep-copy code of
// zz_generated.deepcopy.go (`make generate`). The controller and the
// agent read the resources through the dynamic client and convert each
// object with FromUnstructured, so that one malformed object is reported
// on its own instead of failing a typed list (docs/kubernetes.md).
//
// +kubebuilder:object:generate=true
// +groupName=xlb.io
// +versionName=v1alpha1
package api

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group and Version of xlb's custom resources.
const (
	Group   = "xlb.io"
	Version = "v1alpha1"
)

// LoadBalancerClass is the spec.loadBalancerClass of the Services xlb
// serves.
const LoadBalancerClass = "xlb.io/lb"

// Annotations on a Service.
const (
	// AnnotationAddresses requests addresses for the Service: a comma-
	// separated list of IPv4 addresses (xlb uses the first). It takes
	// precedence over the deprecated spec.loadBalancerIP.
	AnnotationAddresses = "xlb.io/loadBalancerIPs"
	// AnnotationPool names the AddressPool to allocate from.
	AnnotationPool = "xlb.io/address-pool"
	// AnnotationForwarding is the forwarding mode of the Service's
	// ports: dsr-ipip (default) or dsr-gue, or nat or dnat, where the
	// load-balancer node rewrites packets to the pods itself (no
	// translation on the pods' nodes). A value that is none of these
	// leaves the Service's mode as it was, with a Warning Event.
	AnnotationForwarding = "xlb.io/forwarding"
	// AnnotationFlows is what keeps the Service's established
	// connections on their pod when the endpoints change: stateless
	// (default), daisy-chain (a pod without the connection hands its
	// packets on to the previous owner; implies dsr-gue) or stateful
	// (a flow table on each xlb node); see docs/connection-survival.md.
	AnnotationFlows = "xlb.io/flows"
	// AnnotationEndpointHistory holds, on a Service with
	// xlb.io/flows: daisy-chain, its ports' backend sets and the earlier
	// ones with the times they ended (internal/k8s/history). The leader
	// controller writes it; every agent reads it, so that all of them,
	// one started after a change included, compute the same hints.
	AnnotationEndpointHistory = "xlb.io/endpoint-history"
	// AnnotationAllocatedFrom records, on a Service with an address,
	// the pool it came from; the controller writes it.
	AnnotationAllocatedFrom = "xlb.io/allocated-from"
	// AnnotationSharingKey lets Services share one address: Services
	// of one namespace with the same value get the same address when
	// no port (number and protocol) of one is a port of another. A
	// Service whose ports clash gets no address, and an Event says why.
	AnnotationSharingKey = "xlb.io/sharing-key"
	// AnnotationSourceRanges is Kubernetes' legacy annotation for the
	// sources that may reach a Service of type LoadBalancer, comma
	// separated; spec.loadBalancerSourceRanges takes precedence.
	AnnotationSourceRanges = "service.beta.kubernetes.io/load-balancer-source-ranges"
)

// Resources of the custom resources, for the dynamic client.
var (
	AddressPoolResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "addresspools"}
	BGPPeerResource     = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "bgppeers"}
	DenyListResource    = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "denylists"}
)

// AddressPool is a set of IPv4 addresses that xlb hands to Services of
// type LoadBalancer.
// ---
// Cluster-scoped. The schema rejects what it can see on its own
// (malformed addresses, host bits, reversed ranges); the controller
// rejects the rest (pools sharing addresses) in status.error and with an
// InvalidPool Event, and leaves out the Nodes' own addresses
// (status.nodeAddresses, a NodeAddressConflict Event).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=xlb
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="app.kubernetes.io/name=xlb"
// +kubebuilder:printcolumn:name="Addresses",type=string,JSONPath=".spec.addresses"
// +kubebuilder:printcolumn:name="Family",type=string,JSONPath=".status.family"
// +kubebuilder:printcolumn:name="Announce",type=string,JSONPath=".spec.announce"
// +kubebuilder:printcolumn:name="Auto Assign",type=boolean,JSONPath=".spec.autoAssign"
// +kubebuilder:printcolumn:name="Priority",type=integer,JSONPath=".spec.serviceAllocation.priority"
// +kubebuilder:printcolumn:name="Assigned",type=integer,JSONPath=".status.assigned"
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=".status.available"
// +kubebuilder:printcolumn:name="Error",type=string,JSONPath=".status.error",priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type AddressPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Which addresses, and which Services may have them.
	Spec AddressPoolSpec `json:"spec"`
	// Written by the controller.
	// +optional
	Status AddressPoolStatus `json:"status,omitempty"`
}

// AddressPoolList is a list of AddressPools.
//
// +kubebuilder:object:root=true
type AddressPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AddressPool `json:"items"`
}

// AddressPoolStatus is what the controller reports about a pool, through
// the status subresource.
type AddressPoolStatus struct {
	// The address families the pool hands out: IPv4, IPv6, or "IPv4
	// and IPv6" (a dual-stack pool).
	// +optional
	Family string `json:"family,omitempty"`
	// Addresses the pool hands out, of both families (at most
	// 9223372036854775807: an IPv6 pool may hold more).
	// ---
	// Without the .0 and .255 ones when avoidBuggyIPs is set, and
	// without the Nodes' addresses.
	// +optional
	Size int64 `json:"size"`
	// Of those, the ones Services hold.
	// +optional
	Assigned int64 `json:"assigned"`
	// size minus assigned.
	// +optional
	Available int64 `json:"available"`
	// Why the controller does not use the pool; empty when it does.
	// ---
	// An invalid entry, an overlap with an older pool.
	Error string `json:"error,omitempty"`
	// The pool's addresses that are a Node's InternalIP or ExternalIP.
	// The pool does not hand them out (size leaves them out): a VIP
	// equal to a node's address takes that node off the network.
	// +listType=atomic
	NodeAddresses []NodeAddress `json:"nodeAddresses,omitempty"`
}

// NodeAddress is an address of a Node, as in the Node's
// status.addresses.
type NodeAddress struct {
	Address string `json:"address"`
	Node    string `json:"node"`
	// InternalIP or ExternalIP.
	Type string `json:"type"`
}

// AddressPoolSpec: which addresses, and who may have them.
type AddressPoolSpec struct {
	// IPv4 or IPv6 CIDRs (10.99.0.0/28, 2001:db8:99::/120) or inclusive
	// ranges of one family (10.99.0.10-10.99.0.20). A pool with entries
	// of both families is dual-stack: it gives a dual-stack Service both
	// its addresses; status.family says which it is. No address may
	// appear twice, in this pool or in another one.
	// ---
	// The first rule is the pattern, as a rule for a message a user can
	// act on. The host-bits message names the entry's network: string()
	// of a computed value has no size bound, which the API server
	// refuses in a message, so the network is written from substrings
	// of self and a digit table, with map() binding the prefix length
	// p, the octet o it cuts and its masked value m.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=81
	// +kubebuilder:validation:items:XValidation:rule="self.matches('^(((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])[.]){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])/(3[0-2]|[12]?[0-9])|((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])[.]){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])-((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])[.]){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]))$') || (self.contains(':') && (self.contains('/') ? isCIDR(self) && cidr(self).ip().family() == 6 : self.split('-').size() == 2 && isIP(self.split('-')[0]) && isIP(self.split('-')[1]) && ip(self.split('-')[0]).family() == 6 && ip(self.split('-')[1]).family() == 6))",messageExpression="self + ' is neither a CIDR (10.99.0.0/28, 2001:db8:99::/120) nor a range of two addresses of one family (10.99.0.10-10.99.0.20)'"
	// +kubebuilder:validation:items:XValidation:rule="!self.contains('/') || !isCIDR(self) || cidr(self) == cidr(self).masked()",messageExpression="'the CIDR ' + self + ' has host bits set: write its network address' + (self.contains(':') ? '' : ', ' + [int(self.split('/')[1])].map(p, [int(self.split('/')[0].split('.')[p / 8])].map(o, [o - o % [256, 128, 64, 32, 16, 8, 4, 2][p % 8]].map(m, ['', self.substring(0, self.indexOf('.') + 1), self.substring(0, self.indexOf('.', self.indexOf('.') + 1) + 1), self.substring(0, self.lastIndexOf('.') + 1)][p / 8] + ['', '1', '2'][m / 100] + (m >= 10 ? '0123456789'.substring(m / 10 % 10, m / 10 % 10 + 1) : '') + '0123456789'.substring(m % 10, m % 10 + 1) + ['.0.0.0', '.0.0', '.0', ''][p / 8] + self.substring(self.indexOf('/')))[0])[0])[0])"
	// +kubebuilder:validation:items:XValidation:rule="!self.contains('-') || self.split('-').size() != 2 || !isIP(self.split('-')[0]) || !isIP(self.split('-')[1]) || ip(self.split('-')[0]).family() != 4 || ip(self.split('-')[1]).family() != 4 || int(self.split('-')[0].split('.')[0]) * 16777216 + int(self.split('-')[0].split('.')[1]) * 65536 + int(self.split('-')[0].split('.')[2]) * 256 + int(self.split('-')[0].split('.')[3]) <= int(self.split('-')[1].split('.')[0]) * 16777216 + int(self.split('-')[1].split('.')[1]) * 65536 + int(self.split('-')[1].split('.')[2]) * 256 + int(self.split('-')[1].split('.')[3])",messageExpression="'the range ' + self + ' starts after it ends: write the lower address first'"
	Addresses []string `json:"addresses"`
	// Whether Services that request neither an address nor a pool get
	// addresses from this pool. With false, only Services that name the
	// pool (annotation xlb.io/address-pool) or request one of its
	// addresses get them.
	// +kubebuilder:default=true
	AutoAssign *bool `json:"autoAssign,omitempty"`
	// Leave out the addresses ending in .0 and .255.
	AvoidBuggyIPs bool `json:"avoidBuggyIPs,omitempty"`
	// Which Services may take addresses of the pool, and in which order
	// pools are tried; unset: any Service.
	ServiceAllocation *ServiceAllocation `json:"serviceAllocation,omitempty"`
	// How the pool's addresses reach the xlb nodes: bgp (routes over BGP
	// from every node that serves the address) or l2 (ARP and neighbour
	// discovery answers from one node per address, elected with Leases in
	// the agents' namespace; for networks without a BGP router).
	// +kubebuilder:validation:Enum=bgp;l2
	// +kubebuilder:default=bgp
	// +optional
	Announce string `json:"announce,omitempty"`
}

// The values of AddressPoolSpec.Announce.
const (
	AnnounceBGP = "bgp"
	AnnounceL2  = "l2"
)

// ServiceAllocation says which Services may take addresses of a pool, and
// in which order pools are tried.
type ServiceAllocation struct {
	// Pools with a lower positive number are tried first; 0 (the
	// default) comes after every positive number; equal priorities go by
	// name.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	Priority int `json:"priority,omitempty"`
	// Only Services in these namespaces (empty: any).
	// +kubebuilder:validation:MaxItems=256
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespaces []string `json:"namespaces,omitempty"`
	// Only Services in namespaces whose labels match one of these
	// selectors (empty: any).
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	NamespaceSelectors []LabelSelector `json:"namespaceSelectors,omitempty"`
	// Only Services whose labels match one of these selectors (empty:
	// any).
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	ServiceSelectors []LabelSelector `json:"serviceSelectors,omitempty"`
}

// LabelSelector is a label query, as in a Deployment's selector:
// matchLabels and matchExpressions are ANDed; an empty selector matches
// everything.
// ---
// metav1.LabelSelector's fields, meaning and JSON, in a type of its own
// so that its schema can list the operators (markers
// cannot be added to metav1's type, and a CEL rule over the unbounded
// matchExpressions costs more than the API server allows).
//
// +structType=atomic
type LabelSelector struct {
	// Labels the object must have, with these values.
	MatchLabels map[string]string `json:"matchLabels,omitempty"`
	// Requirements on the object's labels.
	// +listType=atomic
	MatchExpressions []LabelSelectorRequirement `json:"matchExpressions,omitempty"`
}

// LabelSelectorRequirement is one requirement on a label: a key, an
// operator and values.
// ---
// metav1.LabelSelectorRequirement's fields, in order: AsSelector
// converts one into the other.
type LabelSelectorRequirement struct {
	// The label key the requirement applies to.
	Key string `json:"key"`
	// In and NotIn need values; Exists and DoesNotExist take none.
	// +kubebuilder:validation:Enum=In;NotIn;Exists;DoesNotExist
	Operator metav1.LabelSelectorOperator `json:"operator"`
	// The values, for In and NotIn.
	// +listType=atomic
	Values []string `json:"values,omitempty"`
}

// AsSelector converts the selector as metav1.LabelSelectorAsSelector
// does, with its errors.
func (s *LabelSelector) AsSelector() (labels.Selector, error) {
	m := metav1.LabelSelector{MatchLabels: s.MatchLabels}
	for _, r := range s.MatchExpressions {
		m.MatchExpressions = append(m.MatchExpressions, metav1.LabelSelectorRequirement(r))
	}
	return metav1.LabelSelectorAsSelector(&m)
}

// AutoAssigns reports whether the pool hands out addresses unasked.
func (s AddressPoolSpec) AutoAssigns() bool { return s.AutoAssign == nil || *s.AutoAssign }

// BGPPeer is a BGP peer of the xlb agents: a session they open to
// announce the VIPs.
// ---
// Cluster-scoped, in MetalLB's spirit: the peer, our AS, and which nodes
// peer. The agent checks what the schema cannot (a keepalive below the
// hold time, BFD on a multihop session). Its status has one entry per
// node that peers, each written by that node's agent alone (server-side
// apply, field manager xlb-agent/NODE; internal/k8s/peerstatus).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=xlb
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="app.kubernetes.io/name=xlb"
// +kubebuilder:printcolumn:name="Peer Address",type=string,JSONPath=".spec.peerAddress"
// +kubebuilder:printcolumn:name="Peer ASN",type=integer,JSONPath=".spec.peerASN"
// +kubebuilder:printcolumn:name="My ASN",type=integer,JSONPath=".spec.myASN"
// +kubebuilder:printcolumn:name="Passive",type=boolean,JSONPath=".spec.passive",priority=1
// +kubebuilder:printcolumn:name="Port",type=integer,JSONPath=".spec.peerPort",priority=1
// +kubebuilder:printcolumn:name="Hold Time",type=string,JSONPath=".spec.holdTime",priority=1
// +kubebuilder:printcolumn:name="Multihop",type=integer,JSONPath=".spec.ebgpMultiHop",priority=1
// +kubebuilder:printcolumn:name="Password Secret",type=string,JSONPath=".spec.passwordSecret.name",priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type BGPPeer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              BGPPeerSpec `json:"spec"`
	// Written by the agents of the nodes that peer.
	// +optional
	Status BGPPeerStatus `json:"status,omitempty"`
}

// BGPPeerStatus is the sessions' state, node by node.
type BGPPeerStatus struct {
	// One entry per node whose agent has a session with the peer, as
	// `xlb status` on that node shows it. An agent removes its node's
	// entry when it stops peering (the node left spec.nodeSelectors,
	// the agent stopped); an agent that died leaves its entry until it
	// runs again.
	// ---
	// A list-map: each agent owns its own entry under its own field
	// manager, so that agents never overwrite each other's.
	// +listType=map
	// +listMapKey=node
	// +kubebuilder:validation:MaxItems=5000
	Nodes []BGPPeerNodeStatus `json:"nodes,omitempty"`
}

// BGPPeerNodeStatus is one node's session with the peer.
type BGPPeerNodeStatus struct {
	// The Node's name.
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`
	// The session's state (RFC 4271): idle, connect, active, opensent,
	// openconfirm or established.
	// +kubebuilder:validation:MaxLength=32
	State string `json:"state"`
	// When the session entered this state.
	// +optional
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`
	// Why the session last failed or went down, in words; it stays
	// after the session recovers.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	LastError string `json:"lastError,omitempty"`
}

// BGPPeerList is a list of BGPPeers.
//
// +kubebuilder:object:root=true
type BGPPeerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BGPPeer `json:"items"`
}

// BGPPeerSpec mirrors a peer of the agent's bgp section.
type BGPPeerSpec struct {
	// The nodes' AS number towards this peer (1-4294967295).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4294967295
	// +kubebuilder:validation:Format=int64
	MyASN uint32 `json:"myASN"`
	// The peer's AS number (1-4294967295); equal to myASN for iBGP.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4294967295
	// +kubebuilder:validation:Format=int64
	PeerASN uint32 `json:"peerASN"`
	// The peer's IPv4 or IPv6 address.
	// ---
	// A pattern as a rule, for a message a user can act on.
	// +kubebuilder:validation:MaxLength=39
	// +kubebuilder:validation:XValidation:rule="self.matches('^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])[.]){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$') || (self.contains(':') && isIP(self) && ip(self).family() == 6)",messageExpression="self + ' is not an IPv4 or IPv6 address; write e.g. 10.0.1.1 or 2001:db8::1'"
	PeerAddress string `json:"peerAddress"`
	// The peer's TCP port; default 179.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	PeerPort uint16 `json:"peerPort,omitempty"`
	// The hold time, as a duration ("9s"); 0s (no keepalives) or at
	// least 3s; default 90s.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) == duration('0s') || duration(self) >= duration('3s')",message="must be 0s (no keepalives) or at least 3s (RFC 4271)"
	HoldTime *metav1.Duration `json:"holdTime,omitempty"`
	// The keepalive interval, as a duration; default a third of the hold
	// time.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	KeepaliveTime *metav1.Duration `json:"keepaliveTime,omitempty"`
	// The TTL of the session's packets for an eBGP peer more than one
	// hop away; 0: directly connected.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=255
	EBGPMultiHop uint8 `json:"ebgpMultiHop,omitempty"`
	// Wait for the peer to connect.
	Passive bool `json:"passive,omitempty"`
	// The most prefixes the peer may send (1-100000, default 10000). xlb
	// imports none, but holds what a peer sends while the session lasts;
	// with one more the session is closed and held down for 30s, twice
	// as long each time again (at most 10m).
	// ---
	// 0 (unset): the agent's default (config.DefaultMaxPrefixes).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	// +kubebuilder:validation:Format=int64
	MaxPrefixes uint32 `json:"maxPrefixes,omitempty"`
	// A Secret of type kubernetes.io/basic-auth whose key "password" is
	// the TCP MD5 password.
	PasswordSecret *SecretRef `json:"passwordSecret,omitempty"`
	// Enables BFD with the peer.
	BFD *BFD `json:"bfd,omitempty"`
	// Advertises graceful restart (RFC 4724): when the agent restarts or
	// dies, the peer keeps this node's routes for the restart time
	// instead of withdrawing them. {} takes the default restart time.
	GracefulRestart *GracefulRestart `json:"gracefulRestart,omitempty"`
	// The nodes that peer: any selector matching is enough (empty: every
	// node running an agent).
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	NodeSelectors []LabelSelector `json:"nodeSelectors,omitempty"`
}

// SecretRef names a Secret.
type SecretRef struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
	// Default: the agent's namespace.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace,omitempty"`
}

// BFD parameters, as in the agent's peer configuration.
type BFD struct {
	// The slowest rate at which this end wants BFD packets, as a
	// duration ("300ms").
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	MinRx *metav1.Duration `json:"minRx,omitempty"`
	// The fastest rate at which this end sends BFD packets, as a
	// duration.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	MinTx *metav1.Duration `json:"minTx,omitempty"`
	// Missed packets before the session is declared down.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=255
	Multiplier uint8 `json:"multiplier,omitempty"`
}

// GracefulRestart parameters, as in the agent's peer configuration.
type GracefulRestart struct {
	// How long the peer keeps the routes of a session that ended without
	// a NOTIFICATION, as whole seconds from 1s to 4095s ("120s", the
	// default).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('4095s')",message="must be from 1s to 4095s (RFC 4724 carries it in 12 bits of seconds)"
	RestartTime *metav1.Duration `json:"restartTime,omitempty"`
}

// DenyList is a list of sources whose packets to any VIP every xlb node
// drops.
// ---
// Cluster-scoped. Every xlb agent drops packets to any of its node's
// VIPs from the union of every DenyList's prefixes and its file's
// policy.deny, before anything else is looked up (docs/kubernetes.md,
// "Deny lists"). The schema rejects what it can see on its own
// (malformed CIDRs, host bits); the controller reports the rest (a
// list that would take the nodes over their limit) in status.error and
// with an InvalidDenyList Event.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=xlb
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="app.kubernetes.io/name=xlb"
// +kubebuilder:printcolumn:name="Prefixes",type=integer,JSONPath=".status.prefixes"
// +kubebuilder:printcolumn:name="Error",type=string,JSONPath=".status.error"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type DenyList struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// The sources.
	Spec DenyListSpec `json:"spec"`
	// Written by the controller.
	// +optional
	Status DenyListStatus `json:"status,omitempty"`
}

// DenyListList is a list of DenyLists.
//
// +kubebuilder:object:root=true
type DenyListList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DenyList `json:"items"`
}

// DenyListSpec: the sources.
type DenyListSpec struct {
	// IPv4 or IPv6 CIDRs in their network form (192.0.2.0/24,
	// 198.51.100.7/32, 2001:db8:bad::/48). Overlaps are fine. At most
	// 50000 in one list, which keeps the object within what the API
	// server stores; split a longer list over several DenyLists. All
	// DenyLists and the agents' policy.deny together hold at most 131072
	// prefixes.
	// ---
	// The host-bits message is built as AddressPoolSpec.Addresses' is.
	// +kubebuilder:validation:MaxItems=50000
	// +listType=atomic
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",messageExpression="self + ' is not a CIDR: write a network and its prefix length, e.g. 192.0.2.0/24'"
	// +kubebuilder:validation:items:XValidation:rule="!isCIDR(self) || cidr(self) == cidr(self).masked()",messageExpression="'the CIDR ' + self + ' has host bits set: write its network address' + (self.contains(':') ? '' : ', ' + [int(self.split('/')[1])].map(p, [int(self.split('/')[0].split('.')[p / 8])].map(o, [o - o % [256, 128, 64, 32, 16, 8, 4, 2][p % 8]].map(m, ['', self.substring(0, self.indexOf('.') + 1), self.substring(0, self.indexOf('.', self.indexOf('.') + 1) + 1), self.substring(0, self.lastIndexOf('.') + 1)][p / 8] + ['', '1', '2'][m / 100] + (m >= 10 ? '0123456789'.substring(m / 10 % 10, m / 10 % 10 + 1) : '') + '0123456789'.substring(m % 10, m % 10 + 1) + ['.0.0.0', '.0.0', '.0', ''][p / 8] + self.substring(self.indexOf('/')))[0])[0])[0])"
	Prefixes []string `json:"prefixes"`
}

// DenyListStatus is what the controller reports about a list, through
// the status subresource.
type DenyListStatus struct {
	// The list's prefixes the nodes enforce.
	// +optional
	Prefixes int64 `json:"prefixes"`
	// What the nodes leave out of the list, and why; empty when they
	// enforce all of it.
	Error string `json:"error,omitempty"`
}

// FromUnstructured converts a custom resource read through the dynamic
// client into out (*AddressPool, *BGPPeer or *DenyList).
func FromUnstructured(u *unstructured.Unstructured, out any) error {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), out); err != nil {
		return fmt.Errorf("%s %q: %w", u.GetKind(), u.GetName(), err)
	}
	return nil
}
