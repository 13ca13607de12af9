// Package api holds xlb's Kubernetes API: the names (group, load-balancer
// class, annotations), the custom resources AddressPool, BGPPeer and
// DenyList, as plain Go types, and how xlb reads the sources a Service or
// a DenyList names (ranges.go). The controller and the agent read the
// resources through the dynamic client and convert them with
// FromUnstructured, so the types need no generated deep-copy code;
// deploy/crds holds their schemas.
package api

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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

// AddressPool is a cluster-scoped set of addresses the controller hands
// to Services of type LoadBalancer.
type AddressPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              AddressPoolSpec   `json:"spec"`
	Status            AddressPoolStatus `json:"status,omitempty"`
}

// AddressPoolStatus is what the controller reports about a pool, through
// the status subresource.
type AddressPoolStatus struct {
	// Size is the number of addresses the pool hands out (without the
	// .0 and .255 ones when avoidBuggyIPs is set).
	Size int64 `json:"size"`
	// Assigned is the number of its addresses Services hold.
	Assigned int64 `json:"assigned"`
	// Available is Size minus Assigned.
	Available int64 `json:"available"`
	// Error says why the controller does not use the pool (an invalid
	// entry, an overlap with an older pool); empty when it does.
	Error string `json:"error,omitempty"`
	// NodeAddresses are the pool's addresses that are also a Node's
	// InternalIP or ExternalIP: the pool does not hand them out (Size
	// leaves them out), as a VIP equal to a node's address takes that
	// node off the network.
	NodeAddresses []NodeAddress `json:"nodeAddresses,omitempty"`
}

// NodeAddress is an address of a Node, as in the Node's
// status.addresses.
type NodeAddress struct {
	Address string `json:"address"`
	Node    string `json:"node"`
	// Type is InternalIP or ExternalIP.
	Type string `json:"type"`
}

// AddressPoolSpec: which addresses, and who may have them.
type AddressPoolSpec struct {
	// Addresses are CIDRs ("10.99.0.0/28") or inclusive ranges
	// ("10.99.0.10-10.99.0.20"), IPv4.
	Addresses []string `json:"addresses"`
	// AutoAssign: whether Services that ask for no pool or address
	// get addresses from this pool. Default true.
	AutoAssign *bool `json:"autoAssign,omitempty"`
	// AvoidBuggyIPs leaves out the .0 and .255 addresses.
	AvoidBuggyIPs bool `json:"avoidBuggyIPs,omitempty"`
	// ServiceAllocation restricts the pool to some Services; nil: any.
	ServiceAllocation *ServiceAllocation `json:"serviceAllocation,omitempty"`
}

// ServiceAllocation says which Services may take addresses of a pool, and
// in which order pools are tried.
type ServiceAllocation struct {
	// Priority: pools with a lower number are tried first; 0 comes
	// after every positive number.
	Priority int `json:"priority,omitempty"`
	// Namespaces: only Services in these namespaces (empty: any).
	Namespaces []string `json:"namespaces,omitempty"`
	// NamespaceSelectors: only Services in namespaces with these
	// labels (any selector matching is enough; empty: any).
	NamespaceSelectors []metav1.LabelSelector `json:"namespaceSelectors,omitempty"`
	// ServiceSelectors: only Services with these labels (any selector
	// matching is enough; empty: any).
	ServiceSelectors []metav1.LabelSelector `json:"serviceSelectors,omitempty"`
}

// AutoAssigns reports whether the pool hands out addresses unasked.
func (s AddressPoolSpec) AutoAssigns() bool { return s.AutoAssign == nil || *s.AutoAssign }

// BGPPeer is a cluster-scoped BGP session that xlb agents open, in
// MetalLB's spirit: the peer, our AS, and which nodes peer.
type BGPPeer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              BGPPeerSpec `json:"spec"`
}

// BGPPeerSpec mirrors a peer of the agent's bgp section.
type BGPPeerSpec struct {
	// MyASN is the nodes' AS towards this peer.
	MyASN uint32 `json:"myASN"`
	// PeerASN and PeerAddress name the peer; PeerPort defaults to 179.
	PeerASN     uint32 `json:"peerASN"`
	PeerAddress string `json:"peerAddress"`
	PeerPort    uint16 `json:"peerPort,omitempty"`
	// HoldTime and KeepaliveTime, as durations ("9s"); default 90s and
	// a third of the hold time.
	HoldTime      *metav1.Duration `json:"holdTime,omitempty"`
	KeepaliveTime *metav1.Duration `json:"keepaliveTime,omitempty"`
	// EBGPMultiHop: the TTL of the session's packets for an eBGP peer
	// more than one hop away; 0: directly connected.
	EBGPMultiHop uint8 `json:"ebgpMultiHop,omitempty"`
	// Passive: wait for the peer to connect.
	Passive bool `json:"passive,omitempty"`
	// MaxPrefixes: the most prefixes the peer may send (xlb imports
	// none); with one more its session is closed and held down for a
	// while. 0: the agent's default (config.DefaultMaxPrefixes).
	MaxPrefixes uint32 `json:"maxPrefixes,omitempty"`
	// PasswordSecret holds the TCP MD5 password under the key
	// "password"; a Secret of type kubernetes.io/basic-auth in the
	// agent's namespace.
	PasswordSecret *SecretRef `json:"passwordSecret,omitempty"`
	// BFD enables BFD with the peer.
	BFD *BFD `json:"bfd,omitempty"`
	// NodeSelectors: the nodes that peer (any selector matching is
	// enough; empty: every node running an agent).
	NodeSelectors []metav1.LabelSelector `json:"nodeSelectors,omitempty"`
}

// SecretRef names a Secret.
type SecretRef struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
}

// BFD parameters, as in the agent's peer configuration.
type BFD struct {
	MinRx      *metav1.Duration `json:"minRx,omitempty"`
	MinTx      *metav1.Duration `json:"minTx,omitempty"`
	Multiplier uint8            `json:"multiplier,omitempty"`
}

// DenyList is a cluster-scoped list of sources that no VIP takes packets
// from: every xlb node drops them (the union of every DenyList and the
// file's policy.deny).
type DenyList struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              DenyListSpec   `json:"spec"`
	Status            DenyListStatus `json:"status,omitempty"`
}

// DenyListSpec: the sources.
type DenyListSpec struct {
	// Prefixes are IPv4 CIDRs in their network form ("192.0.2.0/24").
	Prefixes []string `json:"prefixes"`
}

// DenyListStatus is what the controller reports about a list, through
// the status subresource.
type DenyListStatus struct {
	// Prefixes is the number of the list's prefixes the nodes enforce.
	Prefixes int64 `json:"prefixes"`
	// Error says what the nodes leave out of the list and why; empty
	// when they enforce all of it.
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
