package nodenat

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/xlbproject/xlb/internal/k8s/api"
)

// TestChainSetsIPv6: the daisy-chaining sets hold both families: the
// Nodes' IPv6 addresses (global ones: an agent tunnels from its Node's
// IPv6 InternalIP) among the xlb nodes and previous owners, the IPv6
// endpoints of a served Service and the IPv6 endpoints its history names
// among the previous owners, each as a /128.
func TestChainSetsIPv6(t *testing.T) {
	class := api.LoadBalancerClass
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", Annotations: map[string]string{
			api.AnnotationEndpointHistory: `{"sets":{"80/TCP/IPv6":["[fd00:244::2]:8080"]},` +
				`"history":[{"until":"2030-01-01T00:00:00Z","sets":{"80/TCP":["10.244.9.9:8080"],"80/TCP/IPv6":["[fd00:244::9]:8080"]}}]}`}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class},
	}
	slice := func(family discoveryv1.AddressType, addrs ...string) *discoveryv1.EndpointSlice {
		sl := &discoveryv1.EndpointSlice{AddressType: family}
		for _, a := range addrs {
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}})
		}
		return sl
	}
	node := &corev1.Node{Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "10.0.1.10"},
		{Type: corev1.NodeInternalIP, Address: "fd00:1::10"},
		{Type: corev1.NodeInternalIP, Address: "fe80::10"}, // link-local: no tunnel's
		{Type: corev1.NodeHostName, Address: "node-a"},
	}}}
	in := input{services: []*corev1.Service{svc}, nodes: []*corev1.Node{node},
		slices: func(string, string) []*discoveryv1.EndpointSlice {
			return []*discoveryv1.EndpointSlice{slice(discoveryv1.AddressTypeIPv4, "10.244.1.2"), slice(discoveryv1.AddressTypeIPv6, "fd00:244::2", "fd00:244::3"),
				slice(discoveryv1.AddressTypeFQDN, "web.example.com")}
		}}
	from, to := chainSets(in, nil, nil)
	if got, want := fmt.Sprint(from), "[10.0.1.10/32 fd00:1::10/128]"; got != want {
		t.Errorf("from %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(to), "[10.0.1.10/32 10.244.1.2/32 10.244.9.9/32 fd00:1::10/128 fd00:244::2/128 fd00:244::3/128 fd00:244::9/128]"; got != want {
		t.Errorf("to %s,\nwant %s", got, want)
	}
}
