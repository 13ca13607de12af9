package api

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the group and version of xlb's custom resources.
var GroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// AddToScheme registers AddressPool, BGPPeer, DenyList and their lists
// (with their generated deep-copy code) in a scheme, so that a
// scheme-based client, codec or event recorder knows them.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&AddressPool{}, &AddressPoolList{},
		&BGPPeer{}, &BGPPeerList{},
		&DenyList{}, &DenyListList{},
		&BGPAdvertisement{}, &BGPAdvertisementList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
