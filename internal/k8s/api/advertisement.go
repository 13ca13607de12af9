package api

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/xlbproject/xlb/internal/config"
)

// AnnotationBGPCommunities adds BGP communities to the routes of a
// Service's addresses: a comma-separated list of standard communities
// (65000:100, or a well-known name such as no-export) and large ones
// (65000:1:2). They are added to those of the
// BGPAdvertisements that cover the Service's pool; a list with an entry
// that is neither leaves the Service's routes with the advertisements'
// communities alone, with a Warning.
const AnnotationBGPCommunities = "xlb.io/bgp-communities"

// BGPAdvertisementResource is the BGPAdvertisements' resource, for the
// dynamic client.
var BGPAdvertisementResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "bgpadvertisements"}

// BGPAdvertisement says how the addresses of some AddressPools are
// announced, and to which BGPPeers: communities, local preference and an
// aggregate route.
// ---
// Cluster-scoped, in MetalLB's spirit. Without any BGPAdvertisement
// every address goes to every peer as a plain /32 (/128); a pool that no
// BGPAdvertisement selects still does. Several BGPAdvertisements that
// select one pool make one route per address: the union of their
// communities, the highest local preference, to the union of their peers
// (docs/kubernetes.md, "BGP advertisements"). The schema rejects
// malformed communities and lengths; the controller reports the rest
// (selectors that match nothing) in status.error and with Events.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=xlb
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="app.kubernetes.io/name=xlb"
// +kubebuilder:printcolumn:name="Pools",type=string,JSONPath=".spec.addressPools"
// +kubebuilder:printcolumn:name="Peers",type=string,JSONPath=".spec.peers"
// +kubebuilder:printcolumn:name="Communities",type=string,JSONPath=".spec.communities"
// +kubebuilder:printcolumn:name="Local Pref",type=integer,JSONPath=".spec.localPref"
// +kubebuilder:printcolumn:name="Aggregation",type=integer,JSONPath=".spec.aggregationLength"
// +kubebuilder:printcolumn:name="Error",type=string,JSONPath=".status.error"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type BGPAdvertisement struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Which pools, which peers, and the routes' attributes.
	Spec BGPAdvertisementSpec `json:"spec"`
	// Written by the controller.
	// +optional
	Status BGPAdvertisementStatus `json:"status,omitempty"`
}

// BGPAdvertisementList is a list of BGPAdvertisements.
//
// +kubebuilder:object:root=true
type BGPAdvertisementList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BGPAdvertisement `json:"items"`
}

// BGPAdvertisementSpec: which pools, which peers, and the attributes.
//
// +kubebuilder:validation:XValidation:rule="!has(self.aggregateOnly) || !self.aggregateOnly || has(self.aggregationLength) || has(self.aggregationLengthV6)",message="aggregateOnly needs aggregationLength or aggregationLengthV6: without one there is no aggregate to announce instead"
type BGPAdvertisementSpec struct {
	// AddressPools by name. A pool is selected when it is named here or
	// matches one of addressPoolSelectors; with neither, every pool is.
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=253
	AddressPools []string `json:"addressPools,omitempty"`
	// AddressPools by label.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	AddressPoolSelectors []LabelSelector `json:"addressPoolSelectors,omitempty"`
	// BGPPeers by name that get the routes. A peer gets them when it is
	// named here or matches one of peerSelectors; with neither, every
	// peer does (those of the agents' files too).
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=253
	Peers []string `json:"peers,omitempty"`
	// BGPPeers by label.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	PeerSelectors []LabelSelector `json:"peerSelectors,omitempty"`
	// Standard communities (RFC 1997), "ASN:VALUE" with two numbers from
	// 0 to 65535, e.g. 65000:100, or a well-known name: no-export,
	// no-advertise, no-export-subconfed, no-peer, blackhole,
	// graceful-shutdown.
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=20
	// +kubebuilder:validation:items:XValidation:rule="(self.matches('^[0-9]{1,5}:[0-9]{1,5}$') && int(self.split(':')[0]) <= 65535 && int(self.split(':')[1]) <= 65535) || self.lowerAscii() in ['no-export', 'no-advertise', 'no-export-subconfed', 'no-peer', 'blackhole', 'graceful-shutdown']",messageExpression="self + ' is not a community: write ASN:VALUE, two numbers from 0 to 65535, e.g. 65000:100, or one of no-export, no-advertise, no-export-subconfed, no-peer, blackhole, graceful-shutdown'"
	Communities []string `json:"communities,omitempty"`
	// Large communities (RFC 8092), "GLOBAL:LOCAL1:LOCAL2" with three
	// numbers from 0 to 4294967295, e.g. 65000:1:2.
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=32
	// +kubebuilder:validation:items:XValidation:rule="self.matches('^[0-9]{1,10}:[0-9]{1,10}:[0-9]{1,10}$') && self.split(':').all(n, int(n) <= 4294967295)",messageExpression="self + ' is not a large community: write GLOBAL:LOCAL1:LOCAL2, three numbers from 0 to 4294967295, e.g. 65000:1:2'"
	LargeCommunities []string `json:"largeCommunities,omitempty"`
	// The LOCAL_PREF of the routes (0-4294967295). BGP carries it to
	// iBGP peers only: an eBGP peer never sees it.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4294967295
	// +kubebuilder:validation:Format=int64
	LocalPref *uint32 `json:"localPref,omitempty"`
	// Also announce, for each IPv4 address, the prefix of this length
	// that covers it (24: the address's /24), while the node serves at
	// least one address of the pool inside it. Unset: no aggregate.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=32
	AggregationLength *int32 `json:"aggregationLength,omitempty"`
	// The same for IPv6 addresses (0-128).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=128
	AggregationLengthV6 *int32 `json:"aggregationLengthV6,omitempty"`
	// Announce the aggregates instead of the addresses' own /32 (/128)
	// routes to this advertisement's peers; needs an aggregation length.
	// Another advertisement of the pool without it still sends them
	// the /32s.
	AggregateOnly bool `json:"aggregateOnly,omitempty"`
}

// BGPAdvertisementStatus is what the controller reports about an
// advertisement.
type BGPAdvertisementStatus struct {
	// Why the advertisement is not used, or what in it matches nothing;
	// empty when all of it applies.
	// +optional
	Error string `json:"error,omitempty"`
	// How many AddressPools it selects.
	// +optional
	Pools int64 `json:"pools"`
	// How many BGPPeers it selects.
	// +optional
	Peers int64 `json:"peers"`
}

// ParseCommunities parses a comma-separated list of standard (ASN:VALUE,
// two numbers 0-65535, or a well-known name such as no-export) and large
// (GLOBAL:LOCAL1:LOCAL2, three numbers 0-4294967295) communities, as
// AnnotationBGPCommunities holds them, into their normal forms (a
// well-known community by its name, the rest in decimal).
func ParseCommunities(v string) (std, large []string, err error) {
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		parts := strings.Split(f, ":")
		if len(parts) != 3 {
			c, why := config.NormalCommunity(f)
			if why != "" {
				return nil, nil, errors.New(why)
			}
			std = append(std, c)
			continue
		}
		nums := make([]string, len(parts))
		for i, p := range parts {
			n, err := strconv.ParseUint(p, 10, 32)
			if err != nil {
				return nil, nil, fmt.Errorf("large community %q: %q is not a number from 0 to 4294967295", f, p)
			}
			nums[i] = strconv.FormatUint(n, 10)
		}
		large = append(large, strings.Join(nums, ":"))
	}
	return std, large, nil
}

// CheckAdvertisement reports what keeps an advertisement from being used
// ("" when nothing does): what the schema checks, for an object written
// before it or past it, and the selectors, which it cannot check.
func CheckAdvertisement(s BGPAdvertisementSpec) string {
	for _, f := range []struct {
		path string
		sels []LabelSelector
	}{{"spec.addressPoolSelectors", s.AddressPoolSelectors}, {"spec.peerSelectors", s.PeerSelectors}} {
		for i := range f.sels {
			if _, err := f.sels[i].AsSelector(); err != nil {
				return fmt.Sprintf("%s[%d]: %v", f.path, i, err)
			}
		}
	}
	for i, c := range s.Communities {
		if std, _, err := ParseCommunities(c); err != nil || len(std) != 1 {
			return fmt.Sprintf("spec.communities[%d]: %q is not a community: write ASN:VALUE, two numbers from 0 to 65535", i, c)
		}
	}
	for i, c := range s.LargeCommunities {
		if _, large, err := ParseCommunities(c); err != nil || len(large) != 1 {
			return fmt.Sprintf("spec.largeCommunities[%d]: %q is not a large community: write GLOBAL:LOCAL1:LOCAL2, three numbers from 0 to 4294967295", i, c)
		}
	}
	if l := s.AggregationLength; l != nil && (*l < 0 || *l > 32) {
		return fmt.Sprintf("spec.aggregationLength %d is not from 0 to 32", *l)
	}
	if l := s.AggregationLengthV6; l != nil && (*l < 0 || *l > 128) {
		return fmt.Sprintf("spec.aggregationLengthV6 %d is not from 0 to 128", *l)
	}
	if s.AggregateOnly && s.AggregationLength == nil && s.AggregationLengthV6 == nil {
		return "spec.aggregateOnly needs aggregationLength or aggregationLengthV6"
	}
	return ""
}

// SelectsPool reports whether s covers the AddressPool name with labels
// set: named, or matched by a selector, or every pool when s names and
// selects none. Selectors that do not compile match nothing
// (CheckAdvertisement reports them).
func (s BGPAdvertisementSpec) SelectsPool(name string, set map[string]string) bool {
	return selectsNamed(s.AddressPools, s.AddressPoolSelectors, name, set)
}

// SelectsPeer is SelectsPool for BGPPeers.
func (s BGPAdvertisementSpec) SelectsPeer(name string, set map[string]string) bool {
	return selectsNamed(s.Peers, s.PeerSelectors, name, set)
}

func selectsNamed(names []string, sels []LabelSelector, name string, set map[string]string) bool {
	if len(names) == 0 && len(sels) == 0 {
		return true
	}
	if slices.Contains(names, name) {
		return true
	}
	for i := range sels {
		if sel, err := sels[i].AsSelector(); err == nil && sel.Matches(labels.Set(set)) {
			return true
		}
	}
	return false
}
