package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/xlbproject/xlb/internal/k8s/api"
	"github.com/xlbproject/xlb/internal/k8s/history"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// webSlice is the EndpointSlice of Service a/name with ready endpoints at
// port 8080 (an address with a "-" prefix is not ready).
func webSlice(name string, addrs ...string) *discoveryv1.EndpointSlice {
	port, proto := int32(8080), corev1.ProtocolTCP
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "a", Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Port: &port, Protocol: &proto}},
	}
	for _, a := range addrs {
		ready := a[0] != '-'
		if !ready {
			a = a[1:]
		}
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
	}
	return sl
}

// The leader records the endpoint history of daisy-chained Services: the
// current sets first, then each change with the sets before it; other
// Services get no history.
func TestEndpointHistory(t *testing.T) {
	e := newFakeEnv(t, []runtime.Object{
		lbService("a", "web", createdAt(1), annotate(api.AnnotationFlows, "daisy-chain")),
		lbService("a", "plain", createdAt(2)),
		webSlice("web", "10.244.1.2", "10.244.1.3"),
		webSlice("plain", "10.244.1.2"),
	}, poolObject("p", map[string]any{"addresses": []any{"10.99.0.0/30"}}))
	e.start(Options{Metrics: newMetrics(t)})
	testenv.Eventually(t, 10*time.Second, "an address for a/web", func() (bool, string) {
		ing := ingressOf(e.svc("a", "web"))
		return ing != "", ing
	})

	read := func() (history.History, string) {
		v, ok := e.svc("a", "web").Annotations[api.AnnotationEndpointHistory]
		if !ok {
			return history.History{}, "no annotation"
		}
		h, err := history.Parse(v)
		if err != nil {
			t.Fatalf("the controller wrote %q: %v", v, err)
		}
		return h, v
	}
	testenv.Eventually(t, 10*time.Second, "the first record", func() (bool, string) {
		h, v := read()
		return len(h.Sets["80/TCP"]) == 2 && len(h.Past) == 0, v
	})

	// One endpoint turns unready: the set before becomes the past.
	before := time.Now().Add(-time.Second)
	if _, err := e.client.DiscoveryV1().EndpointSlices("a").Update(context.Background(), webSlice("web", "-10.244.1.2", "10.244.1.3"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the change recorded", func() (bool, string) {
		h, v := read()
		return len(h.Sets["80/TCP"]) == 1 && len(h.Past) == 1 && len(h.Past[0].Sets["80/TCP"]) == 2, v
	})
	h, _ := read()
	if u := h.Past[0].Until; u.Before(before.Truncate(time.Second)) || u.After(time.Now()) {
		t.Errorf("the change ended at %v, not now", u)
	}
	if got := fmt.Sprint(h.Sets["80/TCP"][0].Address, ":", h.Sets["80/TCP"][0].Port); got != "10.244.1.3:8080" {
		t.Errorf("current set %v", h.Sets)
	}
	if _, ok := e.svc("a", "plain").Annotations[api.AnnotationEndpointHistory]; ok {
		t.Error("a Service without daisy chaining got an endpoint history")
	}
}

// webSlice6 is webSlice's IPv6 EndpointSlice.
func webSlice6(name string, addrs ...string) *discoveryv1.EndpointSlice {
	sl := webSlice(name, addrs...)
	sl.Name = name + "-6"
	sl.AddressType = discoveryv1.AddressTypeIPv6
	return sl
}

// The endpoint history of a dual-stack daisy-chained Service holds its
// IPv6 endpoints under their own key beside the IPv4 ones, and an
// IPv6-only Service gets one too.
func TestEndpointHistoryIPv6(t *testing.T) {
	e := newFakeEnv(t, []runtime.Object{
		lbService("a", "dual", createdAt(1), annotate(api.AnnotationFlows, "daisy-chain"),
			withFamilies(corev1.IPFamilyPolicyRequireDualStack, corev1.IPv4Protocol, corev1.IPv6Protocol)),
		lbService("a", "six", createdAt(2), annotate(api.AnnotationFlows, "daisy-chain"),
			withFamilies(corev1.IPFamilyPolicySingleStack, corev1.IPv6Protocol)),
		webSlice("dual", "10.244.1.2"),
		webSlice6("dual", "fd00:244::2", "fd00:244::3"),
		webSlice6("six", "fd00:244::4"),
	}, poolObject("p", map[string]any{"addresses": []any{"10.99.0.0/30", "fd00:99::/126"}}))
	e.start(Options{Metrics: newMetrics(t)})

	read := func(name string) (history.History, string) {
		v, ok := e.svc("a", name).Annotations[api.AnnotationEndpointHistory]
		if !ok {
			return history.History{}, "no annotation; addresses " + ingressOf(e.svc("a", name))
		}
		h, err := history.Parse(v)
		if err != nil {
			t.Fatalf("the controller wrote %q: %v", v, err)
		}
		return h, v
	}
	testenv.Eventually(t, 10*time.Second, "the dual-stack Service's record", func() (bool, string) {
		h, v := read("dual")
		return len(h.Sets["80/TCP"]) == 1 && len(h.Sets["80/TCP/IPv6"]) == 2, v
	})
	testenv.Eventually(t, 10*time.Second, "the IPv6 Service's record", func() (bool, string) {
		h, v := read("six")
		return len(h.Sets["80/TCP/IPv6"]) == 1 && len(h.Sets) == 1, v
	})

	// An IPv6 endpoint turns unready: the IPv6 set before becomes the
	// past, the IPv4 one with it, unchanged.
	if _, err := e.client.DiscoveryV1().EndpointSlices("a").Update(context.Background(), webSlice6("dual", "-fd00:244::2", "fd00:244::3"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the change recorded", func() (bool, string) {
		h, v := read("dual")
		return len(h.Sets["80/TCP/IPv6"]) == 1 && len(h.Past) == 1 && len(h.Past[0].Sets["80/TCP/IPv6"]) == 2 &&
			len(h.Past[0].Sets["80/TCP"]) == 1, v
	})
	h, _ := read("dual")
	if gens := h.Generations(history.PortKey6(80, "tcp")); len(gens) != 1 || gens[0].Backends[0].Address.String() != "fd00:244::2" {
		t.Errorf("IPv6 generations %+v", gens)
	}
}
