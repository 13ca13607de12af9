package nodenat

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/xlbproject/xlb/internal/k8s/api"
	"github.com/xlbproject/xlb/testbed/k8stest"
)

// TestRealAPIServerChainSets runs the watcher against a real API server
// and follows the daisy-chaining sets the cluster gives: the xlb nodes
// are the Nodes' InternalIP and ExternalIP addresses (IPv6 too), the previous owners
// the endpoints of the served Services (on every node), their endpoint
// history and the Nodes, each with what the flags add. A Node's new
// address replaces the old one; an endpoint that leaves stays a previous
// owner for the linger time, then goes; a Service xlb does not serve adds
// nothing.
func TestRealAPIServerChainSets(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Kubernetes control plane")
	}
	cp := k8stest.StartT(t, k8stest.Options{})
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := cluster{t: t, cs: cs}
	c.node(nodeA)
	c.node(nodeB)
	c.node("node-c") // no addresses reported (yet)
	c.nodeAddrs(nodeA, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.0.1.10"})
	c.nodeAddrs(nodeB, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.0.1.11"},
		corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "192.0.2.11"},
		corev1.NodeAddress{Type: corev1.NodeHostName, Address: "node-b"},
		corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "fd00::11"})

	class := api.LoadBalancerClass
	for _, s := range []struct {
		name, app string
		class     *string
	}{{"web", "web", &class}, {"other", "other", ptr("example.com/lb")}} {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: "default"},
			Spec: corev1.ServiceSpec{
				Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: s.class, Selector: map[string]string{"app": s.app},
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
			},
		}
		if _, err := cs.CoreV1().Services("default").Create(t.Context(), svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c.pod("a1", nodeA, "10.244.1.2", true)
	c.pod("b1", nodeB, "10.244.2.2", false) // not ready: a previous owner all the same
	c.podOf("o1", "other", nodeB, "10.244.3.2")
	t.Cleanup(func() {
		zero := int64(0)
		for _, p := range []string{"a1", "b1", "o1"} {
			_ = cs.CoreV1().Pods("default").Delete(context.Background(), p, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		}
	})

	const linger = 3 * time.Second
	rec := newRecorder()
	w, err := New(Options{Client: cs, Node: nodeA, Apply: rec.apply, Log: quietLog(t), Linger: linger,
		ChainFrom: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")},
		ChainTo:   []netip.Prefix{netip.MustParsePrefix("198.51.100.7/32")}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10s")
		}
	}()

	from := func(extra ...string) []string { return append([]string{"10.0.1.10/32", "203.0.113.0/24"}, extra...) }
	to := func(extra ...string) []string { return append([]string{"10.0.1.10/32", "198.51.100.7/32"}, extra...) }
	rec.waitForSets(t, from("10.0.1.11/32", "192.0.2.11/32", "fd00::11/128"), to("10.0.1.11/32", "192.0.2.11/32", "fd00::11/128", "10.244.1.2/32", "10.244.2.2/32"))

	// The Node's address changes: the old ones are no xlb node any more
	// (they linger as previous owners).
	c.nodeAddrs(nodeB, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.0.1.12"})
	rec.waitForSets(t, from("10.0.1.12/32"), to("10.0.1.11/32", "10.0.1.12/32", "192.0.2.11/32", "fd00::11/128", "10.244.1.2/32", "10.244.2.2/32"))
	rec.waitForSets(t, from("10.0.1.12/32"), to("10.0.1.12/32", "10.244.1.2/32", "10.244.2.2/32"))

	// The leader controller's endpoint history names an earlier pod.
	c.updateService("web", func(s *corev1.Service) {
		s.Annotations = map[string]string{api.AnnotationEndpointHistory: `{"sets":{"80/TCP":["10.244.1.2:8080","10.244.2.2:8080"]},` +
			`"history":[{"until":"2030-01-01T00:00:00Z","sets":{"80/TCP":["10.244.9.9:8080"],"80/TCP/IPv6":["[fd00:244::9]:8080"]}}]}`}
	}, false)
	rec.waitForSets(t, nil, to("10.0.1.12/32", "10.244.9.9/32", "fd00:244::9/128", "10.244.1.2/32", "10.244.2.2/32"))

	// A pod that leaves stays a previous owner for the linger time.
	left := time.Now()
	c.deletePod("b1")
	rec.waitForSets(t, nil, to("10.0.1.12/32", "10.244.9.9/32", "fd00:244::9/128", "10.244.1.2/32"))
	if gone := time.Since(left); gone < linger {
		t.Errorf("pod b1's address left the previous owners %v after the pod, before the linger time %v", gone, linger)
	}
	for _, call := range rec.snapshot() {
		for _, p := range call.state.ChainTo {
			if p.Addr() == netip.MustParseAddr("10.244.3.2") {
				t.Fatalf("applied %v as a previous owner: the pod of a Service xlb does not serve", p)
			}
		}
	}
}

// nodeAddrs sets a Node's status.addresses, as a kubelet reports them.
func (c cluster) nodeAddrs(name string, addrs ...corev1.NodeAddress) {
	c.t.Helper()
	// A patch: the controllers update a new Node too.
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"addresses": addrs}})
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.cs.CoreV1().Nodes().Patch(c.t.Context(), name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		c.t.Fatalf("Node %s addresses: %v", name, err)
	}
}

// podOf creates a ready Pod of app on node at ip.
func (c cluster) podOf(name, app, node, ip string) {
	c.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": app}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: app, Image: "registry.invalid/" + app}}},
	}
	p, err := c.cs.CoreV1().Pods("default").Create(c.t.Context(), p, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatalf("create Pod %s: %v", name, err)
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}}
	if _, err := c.cs.CoreV1().Pods("default").UpdateStatus(c.t.Context(), p, metav1.UpdateOptions{}); err != nil {
		c.t.Fatalf("Pod %s status: %v", name, err)
	}
}

// waitForSets waits until the last successful apply holds exactly the
// chaining sets from and to (nil: any), given as prefixes in any order.
func (r *recorder) waitForSets(t *testing.T, from, to []string) {
	t.Helper()
	norm := func(ps []string) []string {
		out := slices.Clone(ps)
		slices.SortFunc(out, func(a, b string) int {
			return comparePrefixes(netip.MustParsePrefix(a), netip.MustParsePrefix(b))
		})
		return slices.Compact(out)
	}
	str := func(ps []netip.Prefix) []string {
		out := []string{}
		for _, p := range ps {
			out = append(out, p.String())
		}
		return out
	}
	from, to = norm(from), norm(to)
	deadline := time.After(apiTimeout)
	for {
		calls := r.snapshot()
		var last applyCall
		for i := len(calls) - 1; i >= 0; i-- {
			if calls[i].err == nil {
				last = calls[i]
				break
			}
		}
		gotFrom, gotTo := str(last.state.ChainFrom), str(last.state.ChainTo)
		if (from == nil || slices.Equal(gotFrom, from)) && (to == nil || slices.Equal(gotTo, to)) {
			return
		}
		select {
		case <-r.wake:
		case <-deadline:
			t.Fatalf("after %v: last applied sets\n from %s\n to   %s\nwant\n from %s\n to   %s",
				apiTimeout, strings.Join(gotFrom, " "), strings.Join(gotTo, " "), fmt.Sprint(from), fmt.Sprint(to))
		}
	}
}
