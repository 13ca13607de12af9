package nodenat

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/xlbproject/xlb/internal/k8s/api"
	"github.com/xlbproject/xlb/testbed/k8stest"
)

// apiTimeout bounds each wait on the real control plane, whose
// EndpointSlice controller sits between a Pod change and the watcher:
// generous for a loaded 2-core machine.
const apiTimeout = 30 * time.Second

// latencyChanges is how many changes the latency measurement makes.
const latencyChanges = 30

// cluster drives a real API server the way kubectl and kubelets would.
type cluster struct {
	t  *testing.T
	cs kubernetes.Interface
}

func (c cluster) node(name string) {
	c.t.Helper()
	if _, err := c.cs.CoreV1().Nodes().Create(c.t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("create Node %s: %v", name, err)
	}
}

// pod creates a Pod of app=web on node and reports it running at ip, as
// a kubelet would, ready or not.
func (c cluster) pod(name, node, ip string, ready bool) {
	c.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
			Name: "web", Image: "registry.invalid/web",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "dns", ContainerPort: 5353, Protocol: corev1.ProtocolUDP}},
		}}},
	}
	p, err := c.cs.CoreV1().Pods("default").Create(c.t.Context(), p, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatalf("create Pod %s: %v", name, err)
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
	if _, err := c.cs.CoreV1().Pods("default").UpdateStatus(c.t.Context(), p, metav1.UpdateOptions{}); err != nil {
		c.t.Fatalf("Pod %s status: %v", name, err)
	}
	c.setReady(name, ready)
}

func (c cluster) setReady(name string, ready bool) {
	c.t.Helper()
	p, err := c.cs.CoreV1().Pods("default").Get(c.t.Context(), name, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
	if _, err := c.cs.CoreV1().Pods("default").UpdateStatus(c.t.Context(), p, metav1.UpdateOptions{}); err != nil {
		c.t.Fatalf("Pod %s ready=%v: %v", name, ready, err)
	}
}

// deletePod deletes a Pod at once (grace period 0), as a kubelet
// confirms a pod's end.
func (c cluster) deletePod(name string) {
	c.t.Helper()
	zero := int64(0)
	if err := c.cs.CoreV1().Pods("default").Delete(c.t.Context(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		c.t.Fatalf("delete Pod %s: %v", name, err)
	}
}

func (c cluster) updateService(name string, edit func(*corev1.Service), status bool) {
	c.t.Helper()
	svcs := c.cs.CoreV1().Services("default")
	svc, err := svcs.Get(c.t.Context(), name, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	edit(svc)
	if status {
		_, err = svcs.UpdateStatus(c.t.Context(), svc, metav1.UpdateOptions{})
	} else {
		_, err = svcs.Update(c.t.Context(), svc, metav1.UpdateOptions{})
	}
	if err != nil {
		c.t.Fatalf("update Service %s: %v", name, err)
	}
}

func setIngress(ip string) func(*corev1.Service) {
	return func(s *corev1.Service) {
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
	}
}

// waitEndpoint waits until the EndpointSlices of Service web list addr
// with conditions that satisfy ok.
func (c cluster) waitEndpoint(addr string, ok func(discoveryv1.EndpointConditions) bool) {
	c.t.Helper()
	deadline := time.Now().Add(apiTimeout)
	for {
		list, err := c.cs.DiscoveryV1().EndpointSlices("default").List(c.t.Context(), metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=web"})
		if err != nil {
			c.t.Fatal(err)
		}
		for _, sl := range list.Items {
			for _, ep := range sl.Endpoints {
				if slices.Contains(ep.Addresses, addr) && ok(ep.Conditions) {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("after %v the EndpointSlices of web do not list %s as wanted: %+v", apiTimeout, addr, list.Items)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRealAPIServer runs the watcher for node A against a real
// kube-apiserver, whose real EndpointSlice controller derives the slices
// from Pods on two nodes, and follows it through the changes a
// Deployment's life brings. It also measures the time from an API change
// to the apply.
func TestRealAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Kubernetes control plane")
	}
	cp := k8stest.StartT(t, k8stest.Options{})
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	// The test's own writes must not wait for client-go's default rate
	// limit (5 per second), or the latencies measure that.
	testCfg := *cfg
	testCfg.QPS, testCfg.Burst = 1000, 1000
	cs, err := kubernetes.NewForConfig(&testCfg)
	if err != nil {
		t.Fatal(err)
	}
	watchCS, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := cluster{t: t, cs: cs}

	c.node(nodeA)
	c.node(nodeB)
	class := api.LoadBalancerClass
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{
			Type:              corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass: &class,
			Selector:          map[string]string{"app": "web"},
			Ports:             []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
	if _, err := cs.CoreV1().Services("default").Create(t.Context(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A Service of another class on the same pods: never translated.
	other := svc.DeepCopy()
	other.Name = "other"
	other.Spec.LoadBalancerClass = ptr("example.com/lb")
	if _, err := cs.CoreV1().Services("default").Create(t.Context(), other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.updateService("other", setIngress("10.99.0.9"), true)

	c.pod("a1", nodeA, "10.244.1.2", true)
	c.pod("a2", nodeA, "10.244.1.3", true)
	c.pod("b1", nodeB, "10.244.2.2", true)
	t.Cleanup(func() {
		// Pods that never had a kubelet stay terminating: remove them
		// for good (the control plane goes anyway; this keeps its log
		// quiet).
		zero := int64(0)
		for _, p := range []string{"a1", "a2", "b1"} {
			_ = cs.CoreV1().Pods("default").Delete(t.Context(), p, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		}
	})

	rec := newRecorder()
	w, err := New(Options{Client: watchCS, Node: nodeA, Apply: rec.apply, Log: quietLog(t)})
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

	// No address yet: nothing to translate, though the pods are ready.
	c.waitEndpoint("10.244.1.3", endpointReady)
	rec.waitFor(t, []string{}, apiTimeout)

	steps := []struct {
		name   string
		change func()
		want   []string
	}{
		{"address assigned", func() { c.updateService("web", setIngress("10.99.0.1"), true) },
			[]string{"10.99.0.1:80/tcp=10.244.1.2:8080", "10.99.0.1:80/tcp=10.244.1.3:8080"}},
		// Translated as soon as the slice lists it, before it is ready:
		// the LB nodes, which follow the slices on their own, may start
		// sending the moment it is.
		{"a new pod, not ready yet", func() { c.pod("a3", nodeA, "10.244.1.4", false) },
			[]string{"10.99.0.1:80/tcp=10.244.1.2:8080", "10.99.0.1:80/tcp=10.244.1.3:8080", "10.99.0.1:80/tcp=10.244.1.4:8080"}},
		{"the new pod deleted", func() { c.deletePod("a3") },
			[]string{"10.99.0.1:80/tcp=10.244.1.2:8080", "10.99.0.1:80/tcp=10.244.1.3:8080"}},
	}
	for _, s := range steps {
		begin := time.Now()
		s.change()
		call := rec.waitFor(t, s.want, apiTimeout)
		t.Logf("%s: applied %d entries %v after the change", s.name, len(s.want), call.at.Sub(begin).Round(time.Millisecond))
	}

	// A pod that turns unready keeps its translation: the LB nodes stop
	// giving it new connections, and the ones it has (daisy chaining
	// sends them on) still need it.
	c.setReady("a1", false)
	c.waitEndpoint("10.244.1.2", endpointNotReady)
	time.Sleep(300 * time.Millisecond) // far beyond the debounce: an apply would have come
	if calls := rec.snapshot(); !slices.Contains(strs(calls[len(calls)-1].entries), "10.99.0.1:80/tcp=10.244.1.2:8080") {
		t.Errorf("unready pod a1 lost its translation: last applied %v", strs(calls[len(calls)-1].entries))
	}
	c.setReady("a1", true)
	c.waitEndpoint("10.244.1.2", endpointReady)

	// Terminating: without a kubelet the Pod stays terminating, ready,
	// and its endpoint serving: the translation stays for its flows.
	if err := cs.CoreV1().Pods("default").Delete(t.Context(), "a1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitEndpoint("10.244.1.2", func(cd discoveryv1.EndpointConditions) bool {
		return cd.Terminating != nil && *cd.Terminating && cd.Serving != nil && *cd.Serving
	})
	time.Sleep(300 * time.Millisecond) // far beyond the debounce: an apply would have come
	if calls := rec.snapshot(); !slices.Contains(strs(calls[len(calls)-1].entries), "10.99.0.1:80/tcp=10.244.1.2:8080") {
		t.Errorf("terminating pod a1 lost its translation: last applied %v", strs(calls[len(calls)-1].entries))
	}

	// A second port: entries for it, at its own target port, for the
	// draining pod too.
	begin := time.Now()
	c.updateService("web", func(s *corev1.Service) {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "dns", Port: 53, TargetPort: intstr.FromString("dns"), Protocol: corev1.ProtocolUDP})
	}, false)
	call := rec.waitFor(t, []string{
		"10.99.0.1:53/udp=10.244.1.2:5353", "10.99.0.1:53/udp=10.244.1.3:5353",
		"10.99.0.1:80/tcp=10.244.1.2:8080", "10.99.0.1:80/tcp=10.244.1.3:8080",
	}, apiTimeout)
	t.Logf("second port: applied after %v", call.at.Sub(begin).Round(time.Millisecond))

	// Latency, over pods that come and go (through the EndpointSlice
	// controller, the path of a rollout) and address changes (the
	// watcher alone).
	ready2 := []string{"10.99.0.1:53/udp=10.244.1.2:5353", "10.99.0.1:53/udp=10.244.1.3:5353", "10.99.0.1:80/tcp=10.244.1.2:8080", "10.99.0.1:80/tcp=10.244.1.3:8080"}
	with9 := []string{"10.99.0.1:53/udp=10.244.1.2:5353", "10.99.0.1:53/udp=10.244.1.3:5353", "10.99.0.1:53/udp=10.244.1.9:5353",
		"10.99.0.1:80/tcp=10.244.1.2:8080", "10.99.0.1:80/tcp=10.244.1.3:8080", "10.99.0.1:80/tcp=10.244.1.9:8080"}
	var podLat []time.Duration
	for i := range latencyChanges {
		name := fmt.Sprintf("l%d", i/2)
		begin := time.Now()
		want := ready2
		if i%2 == 0 {
			c.pod(name, nodeA, "10.244.1.9", false)
			want = with9
		} else {
			c.deletePod(name)
		}
		podLat = append(podLat, rec.waitFor(t, want, apiTimeout).at.Sub(begin))
	}
	logLatency(t, "Pod created (running, not ready) or deleted -> EndpointSlice controller -> apply", podLat)

	var svcLat []time.Duration
	for i := range latencyChanges {
		vip := fmt.Sprintf("10.99.1.%d", i+1)
		var want []string
		for _, s := range ready2 {
			want = append(want, strings.Replace(s, "10.99.0.1:", vip+":", 1))
		}
		begin := time.Now()
		c.updateService("web", setIngress(vip), true)
		svcLat = append(svcLat, rec.waitFor(t, want, apiTimeout).at.Sub(begin))
	}
	logLatency(t, "Service status.loadBalancer.ingress -> apply", svcLat)

	begin = time.Now()
	if err := cs.CoreV1().Services("default").Delete(t.Context(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	call = rec.waitFor(t, []string{}, apiTimeout)
	t.Logf("Service deleted: nothing left after %v", call.at.Sub(begin).Round(time.Millisecond))
	if st := w.Stats(); !st.Synced || st.Entries != 0 || st.ApplyErrors != 0 {
		t.Errorf("stats %+v", st)
	}
	// Every apply held only node A's pods and Service web's address.
	for _, call := range rec.snapshot() {
		for _, e := range strs(call.entries) {
			if strings.Contains(e, "10.244.2.") || strings.HasPrefix(e, "10.99.0.9:") {
				t.Errorf("applied %s: another node's pod or another class's Service", e)
			}
		}
	}
}

func endpointReady(cd discoveryv1.EndpointConditions) bool { return cd.Ready != nil && *cd.Ready }

func endpointNotReady(cd discoveryv1.EndpointConditions) bool { return !endpointReady(cd) }

// logLatency logs the median and the 99th percentile of d.
func logLatency(t *testing.T, what string, d []time.Duration) {
	t.Helper()
	s := slices.Clone(d)
	slices.Sort(s)
	pct := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[max(0, min(i, len(s)-1))].Round(100 * time.Microsecond)
	}
	t.Logf("latency %s over %d changes: p50 %v, p99 %v, max %v", what, len(s), pct(0.50), pct(0.99), s[len(s)-1].Round(100*time.Microsecond))
}
