package controller

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/xlbproject/xlb/internal/k8s/api"
)

// node is a Node with addresses, "TYPE=ADDRESS".
func node(name string, addrs ...corev1.NodeAddress) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Addresses: addrs}}
}

func internalIP(a string) corev1.NodeAddress {
	return corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a}
}

func externalIP(a string) corev1.NodeAddress {
	return corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: a}
}

// No Service gets a Node's InternalIP or ExternalIP: a pool that holds
// some leaves them out and says so; a Service holding one when it
// becomes a node's moves to another address, or gives it up if it asked
// for that one; and what the nodes give back is handed out again.
func TestNodeAddressesAreNotHandedOut(t *testing.T) {
	e := newFakeEnv(t, []runtime.Object{
		node("n1", internalIP("10.99.0.1"), externalIP("10.99.0.6"), corev1.NodeAddress{Type: corev1.NodeHostName, Address: "10.99.0.7"}),
	}, poolObject("p", map[string]any{"addresses": []any{"10.99.0.0/29"}}))
	e.start(Options{Metrics: newMetrics(t)})
	ctx := context.Background()

	e.create(lbService("a", "s0"))
	e.waitIngress("a", "s0", "10.99.0.0")
	e.create(lbService("a", "s1"))
	e.waitIngress("a", "s1", "10.99.0.2") // .1 is n1's
	e.waitPoolStatus("p", api.AddressPoolStatus{Family: "IPv4", Size: 6, Assigned: 2, Available: 4, NodeAddresses: []api.NodeAddress{
		{Address: "10.99.0.1", Node: "n1", Type: "InternalIP"}, {Address: "10.99.0.6", Node: "n1", Type: "ExternalIP"}}})
	e.waitEvent("p", EventNodeAddress, "Services do not get 10.99.0.1 (the InternalIP of Node n1), 10.99.0.6 (the ExternalIP of Node n1)")

	// Asked for by annotation or spec.loadBalancerIP: refused.
	e.create(lbService("a", "asks", annotate(api.AnnotationAddresses, "10.99.0.1")))
	e.waitEvent("a/asks", EventAllocationFailed, "requested address 10.99.0.1 is the InternalIP of Node n1", "takes that node off the network")
	e.create(lbService("a", "asks-spec", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "10.99.0.6" }))
	e.waitEvent("a/asks-spec", EventAllocationFailed, "requested address 10.99.0.6 is the ExternalIP of Node n1")

	// A Service requesting 10.99.0.4, and then a Node with that address
	// and one with s1's: s1 moves, "pinned" gives its address up.
	e.create(lbService("a", "pinned", annotate(api.AnnotationAddresses, "10.99.0.4")))
	e.waitIngress("a", "pinned", "10.99.0.4")
	if _, err := e.client.CoreV1().Nodes().Create(ctx, node("n2", internalIP("10.99.0.2")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.CoreV1().Nodes().Create(ctx, node("n3", externalIP("10.99.0.4")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitIngress("a", "s1", "10.99.0.3")
	e.waitEvent("a/s1", EventNodeAddress, "moved from 10.99.0.2, the InternalIP of Node n2, to 10.99.0.3")
	e.waitIngress("a", "pinned", "")
	e.waitEvent("a/pinned", EventNodeAddress, "gave up 10.99.0.4, the ExternalIP of Node n3")
	e.waitEvent("a/pinned", EventAllocationFailed, "requested address 10.99.0.4 is the ExternalIP of Node n3")
	e.waitPoolStatus("p", api.AddressPoolStatus{Family: "IPv4", Size: 4, Assigned: 2, Available: 2, NodeAddresses: []api.NodeAddress{
		{Address: "10.99.0.1", Node: "n1", Type: "InternalIP"}, {Address: "10.99.0.2", Node: "n2", Type: "InternalIP"},
		{Address: "10.99.0.4", Node: "n3", Type: "ExternalIP"}, {Address: "10.99.0.6", Node: "n1", Type: "ExternalIP"}}})

	// n3 goes and n1 changes its InternalIP: the Services waiting for
	// those addresses get them.
	if err := e.client.CoreV1().Nodes().Delete(ctx, "n3", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitIngress("a", "pinned", "10.99.0.4")
	n1, err := e.client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n1.Status.Addresses = []corev1.NodeAddress{internalIP("10.0.0.1"), externalIP("10.99.0.6")}
	if _, err := e.client.CoreV1().Nodes().UpdateStatus(ctx, n1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitIngress("a", "asks", "10.99.0.1")
	e.waitPoolStatus("p", api.AddressPoolStatus{Family: "IPv4", Size: 6, Assigned: 4, Available: 2, NodeAddresses: []api.NodeAddress{
		{Address: "10.99.0.2", Node: "n2", Type: "InternalIP"}, {Address: "10.99.0.6", Node: "n1", Type: "ExternalIP"}}})
	if got := ingressOf(e.svc("a", "asks-spec")); got != "" {
		t.Errorf("asks-spec got %q, still n1's ExternalIP", got)
	}
}

// At a restart, a Service whose status holds a Node's address is moved
// like any other.
func TestNodeAddressInStatusAtStart(t *testing.T) {
	e := newFakeEnv(t, []runtime.Object{
		node("n1", internalIP("10.99.0.0")),
		lbService("a", "s", withIngress("10.99.0.0")),
	}, poolObject("p", map[string]any{"addresses": []any{"10.99.0.0/30"}}))
	e.start(Options{})
	e.waitIngress("a", "s", "10.99.0.1")
	e.waitEvent("a/s", EventNodeAddress, "moved from 10.99.0.0, the InternalIP of Node n1, to 10.99.0.1")
}
