package endpoints

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/xlbproject/xlb/internal/config"
)

func ptr[T any](v T) *T { return &v }

var (
	condReady      = discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)}
	condNotReady   = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(false)}
	condDraining   = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}
	condTerminated = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(true)}
)

func TestStateOf(t *testing.T) {
	for _, tc := range []struct {
		c    discoveryv1.EndpointConditions
		want State
	}{
		{condReady, Ready},
		{discoveryv1.EndpointConditions{}, Ready}, // every condition unset
		{condNotReady, Gone},
		{condDraining, Draining},
		{condTerminated, Gone},
		// Terminating but still marked ready (an old controller): drains.
		{discoveryv1.EndpointConditions{Ready: ptr(true), Terminating: ptr(true)}, Draining},
		// Serving unset defers to ready.
		{discoveryv1.EndpointConditions{Ready: ptr(false), Terminating: ptr(true)}, Gone},
	} {
		if got := StateOf(tc.c); got != tc.want {
			t.Errorf("StateOf(%+v) = %d, want %d", tc.c, got, tc.want)
		}
	}
}

func slice(addrType discoveryv1.AddressType, port int32, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{AddressType: addrType, Endpoints: eps,
		Ports: []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(port), Protocol: ptr(corev1.ProtocolTCP)}}}
}

func ep(node string, c discoveryv1.EndpointConditions, addrs ...string) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: addrs, Conditions: c, NodeName: ptr(node)}
}

// TestSelect: each address once, in its best state and then at its
// lowest port, IPv4 only, sorted; the filter keeps a node's endpoints.
func TestSelect(t *testing.T) {
	port := corev1.ServicePort{Name: "http", Port: 80}
	eps := []*discoveryv1.EndpointSlice{
		slice(discoveryv1.AddressTypeIPv4, 8081, ep("a", condDraining, "10.244.1.2"), ep("a", condReady, "10.244.1.3"), ep("b", condNotReady, "10.244.2.9")),
		slice(discoveryv1.AddressTypeIPv4, 8082, ep("a", condReady, "10.244.1.2", "10.244.1.3"), ep("b", condDraining, "10.244.2.2", "0.0.0.0", "bad")),
		slice(discoveryv1.AddressTypeIPv6, 8080, ep("a", condReady, "fd00::1")),
		// A port of another name: the slice gives nothing for http.
		{AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{ep("a", condReady, "10.244.1.7")},
			Ports: []discoveryv1.EndpointPort{{Name: ptr("dns"), Port: ptr(int32(53)), Protocol: ptr(corev1.ProtocolUDP)}}},
	}
	show := func(es []Endpoint) []string {
		var out []string
		for _, e := range es {
			out = append(out, fmt.Sprintf("%s:%d/%d", e.Addr, e.Port, e.State))
		}
		return out
	}
	// 10.244.1.2 is draining at 8081 but ready at 8082: ready wins;
	// 10.244.1.3 is ready at both: the lower port.
	want := []string{"10.244.1.2:8082/2", "10.244.1.3:8081/2", "10.244.2.2:8082/1"}
	if got := show(Select(eps, port, nil)); !slices.Equal(got, want) {
		t.Errorf("Select = %v, want %v", got, want)
	}
	if got := show(Select(eps, port, OnNode("b"))); !slices.Equal(got, want[2:]) {
		t.Errorf("Select on node b = %v, want %v", got, want[2:])
	}
	// The order of the slices does not matter.
	slices.Reverse(eps)
	if got := show(Select(eps, port, nil)); !slices.Equal(got, want) {
		t.Errorf("Select, slices reversed = %v, want %v", got, want)
	}
}

// TestListed: Select's endpoints, at the same ports, and the Gone ones
// (not ready, or terminated); a Gone address listed at a lower port
// than where it is ready keeps the ready port, so the node translates
// to where the LB nodes send.
func TestListed(t *testing.T) {
	port := corev1.ServicePort{Name: "http", Port: 80}
	eps := []*discoveryv1.EndpointSlice{
		slice(discoveryv1.AddressTypeIPv4, 8081, ep("a", condNotReady, "10.244.1.2", "10.244.1.5"), ep("a", condTerminated, "10.244.1.6"), ep("b", condNotReady, "10.244.2.9")),
		slice(discoveryv1.AddressTypeIPv4, 8082, ep("a", condReady, "10.244.1.2"), ep("a", condNotReady, "10.244.1.5")),
	}
	var got []string
	for _, e := range Listed(eps, port, OnNode("a")) {
		got = append(got, fmt.Sprintf("%s:%d/%d", e.Addr, e.Port, e.State))
	}
	want := []string{"10.244.1.2:8082/2", "10.244.1.5:8081/0", "10.244.1.6:8081/0"}
	if !slices.Equal(got, want) {
		t.Errorf("Listed on node a = %v, want %v", got, want)
	}
	if sel := Select(eps, port, OnNode("a")); len(sel) != 1 || sel[0].Port != 8082 {
		t.Errorf("Select on node a = %v, want 10.244.1.2 at 8082 only", sel)
	}
}

func TestServiceIndex(t *testing.T) {
	sl := &discoveryv1.EndpointSlice{}
	sl.Namespace, sl.Labels = "shop", map[string]string{discoveryv1.LabelServiceName: "web"}
	if got, err := ServiceIndex(sl); err != nil || !slices.Equal(got, []string{"shop/web"}) {
		t.Errorf("ServiceIndex = %v, %v", got, err)
	}
	sl.Labels = nil
	if got, err := ServiceIndex(sl); err != nil || got != nil {
		t.Errorf("ServiceIndex without the label = %v, %v", got, err)
	}
	if got, err := ServiceIndex("not a slice"); err != nil || got != nil {
		t.Errorf("ServiceIndex of another object = %v, %v", got, err)
	}
}

func TestProtocol(t *testing.T) {
	for p, want := range map[corev1.Protocol]config.Protocol{"": config.TCP, corev1.ProtocolTCP: config.TCP, corev1.ProtocolUDP: config.UDP, corev1.ProtocolSCTP: ""} {
		got, ok := Protocol(p)
		if got != want || ok != (want != "") {
			t.Errorf("Protocol(%q) = %q, %v; want %q", p, got, ok, want)
		}
	}
}
