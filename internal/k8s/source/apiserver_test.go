package source

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/xlbproject/xlb/internal/announce"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/k8s/api"
	"github.com/xlbproject/xlb/testbed/k8stest"
)

// apiTimeout bounds each wait on the real control plane, whose
// EndpointSlice controller sits between a Pod change and the source:
// generous for a loaded 2-core machine.
const apiTimeout = 30 * time.Second

// latencyChanges is how many changes of each kind the latency
// measurement makes.
const latencyChanges = 50

const (
	testNS   = "shop"
	finalize = "xlb.io/test-keep"
)

// realCluster drives a real API server the way kubectl, the xlb
// controller and kubelets would.
type realCluster struct {
	t   *testing.T
	cs  kubernetes.Interface
	dyn dynamic.Interface
}

// TestAPIServer runs the source against a real kube-apiserver and
// kube-controller-manager (testbed/k8stest), whose EndpointSlice
// controller derives the slices from Pods whose status the test sets as
// kubelets would; the test writes the Service's address as the xlb
// controller would. It follows a Service through its pods' life, a
// BGPPeer through its node's labels, and measures the time from an API
// change to the update.
func TestAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Kubernetes control plane; skipped with -short")
	}
	cp := k8stest.StartT(t, k8stest.Options{})
	c := &realCluster{t: t}
	var err error
	if c.cs, c.dyn, err = cp.Clients(100, 200); err != nil {
		t.Fatal(err)
	}
	c.installCRDs()
	c.namespace(testNS)
	c.namespace("xlb-system")
	c.node("lb-1", map[string]string{"xlb.io/lb-node": "true"}, "10.0.0.10")
	c.node("node-a", nil, "10.0.1.1")
	c.node("node-b", nil, "10.0.1.2")
	c.create(c.cs.CoreV1().Secrets("xlb-system").Create(t.Context(), secret("xlb-system", "router-password", map[string]string{"password": "s3cret"}), metav1.CreateOptions{}))
	peer := bgpPeer("router", map[string]any{"myASN": int64(65001), "peerASN": int64(65000), "peerAddress": "10.0.0.1",
		"passwordSecret": map[string]any{"name": "router-password"},
		"nodeSelectors":  []any{map[string]any{"matchLabels": map[string]any{"xlb.io/lb-node": "true"}}}})
	c.create(c.dyn.Resource(api.BGPPeerResource).Create(t.Context(), peer, metav1.CreateOptions{}))

	// The DaemonSet's base: every default, the node's InternalIP.
	base, err := DaemonSetBase(t.Context(), c.cs, config.Kubernetes{NodeName: "lb-1", SecretNamespace: "xlb-system"}, "eth0", config.NATConfig{})
	if err != nil {
		t.Fatal(err)
	}
	src, err := New(Options{Base: base, Client: c.cs, Dynamic: c.dyn, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	first, err := src.Start(t.Context(), apiTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first configuration after %v", time.Since(start).Round(time.Millisecond))
	if first.Node.Address.String() != "10.0.0.10" || first.BGP == nil || len(first.BGP.Peers) != 1 || first.BGP.ASN != 65001 || first.BGP.Peers[0].Password != "s3cret" {
		t.Fatalf("first configuration: node %+v, bgp %+v; want node address 10.0.0.10 and the BGPPeer with its password", first.Node, first.BGP)
	}
	// The BGPPeer behind the peer, for the status writer.
	if objs := src.PeerObjects(); len(objs) != 1 || objs[0].Name != "router" || objs[0].Address.String() != "10.0.0.1" || objs[0].UID == "" {
		t.Fatalf("PeerObjects %+v; want the BGPPeer router, its UID and address 10.0.0.1", objs)
	}
	w := &updates{t: t, src: src, cfg: first}

	const web = testNS + "/web:80/tcp"
	c.service("web")
	for i, n := range []string{"node-a", "node-b", "node-a"} {
		c.pod(fmt.Sprintf("web-%d", i), n, fmt.Sprintf("10.244.%d.%d", i%2, 10+i), nil)
	}
	// No address yet (the controller has not written one): not served.
	c.poll("the EndpointSlice lists 3 pods", func() error {
		list, err := c.cs.DiscoveryV1().EndpointSlices(testNS).List(t.Context(), metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=web"})
		if err == nil && (len(list.Items) != 1 || len(list.Items[0].Endpoints) != 3) {
			err = fmt.Errorf("%d slices", len(list.Items))
		}
		return err
	})
	w.drain(200 * time.Millisecond)
	if len(w.cfg.Services) != 0 {
		t.Errorf("a Service without an address is served: %v", summary(w.cfg))
	}
	c.setIngress("web", "10.99.0.1")
	w.until("Service with 3 ready pods", backends(web, "10.244.0.10:8080/1", "10.244.0.12:8080/1", "10.244.1.11:8080/1"))

	c.setReady("web-1", false)
	w.until("one pod unready", backends(web, "10.244.0.10:8080/1", "10.244.0.12:8080/1"))

	c.deletePod("web-2", 0)
	w.until("one pod deleted", backends(web, "10.244.0.10:8080/1"))

	c.setReady("web-1", true)
	c.pod("web-3", "node-b", "10.244.1.13", []string{finalize})
	w.until("two more ready", backends(web, "10.244.0.10:8080/1", "10.244.1.11:8080/1", "10.244.1.13:8080/1"))
	// A graceful delete: with no kubelet to finish it, the Pod stays
	// terminating (the finalizer makes sure).
	c.deletePod("web-3", 30)
	w.until("one pod terminating: drained", backends(web, "10.244.0.10:8080/1", "10.244.1.11:8080/1", "10.244.1.13:8080/0"))

	t.Run("Latency", func(t *testing.T) { measureLatency(t, c, w) })
	t.Run("SessionAffinity", func(t *testing.T) { sessionAffinity(t, c, w) })

	t.Run("SharedAddress", func(t *testing.T) { sharedAddress(t, c, w) })

	t.Run("Policy", func(t *testing.T) { policy(t, c, w) })

	c.label("lb-1", map[string]string{"xlb.io/lb-node": "false"})
	w.until("the node no longer selected by the BGPPeer", func(cfg *config.Config) string {
		if cfg.BGP != nil {
			return fmt.Sprintf("bgp %+v", cfg.BGP)
		}
		return ""
	})
	if objs := src.PeerObjects(); len(objs) != 0 {
		t.Fatalf("PeerObjects %+v after the node left the BGPPeer's selector; want none", objs)
	}
	if err := c.cs.CoreV1().Services(testNS).Delete(t.Context(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.until("Service deleted", func(cfg *config.Config) string {
		if len(cfg.Services) > 0 {
			return fmt.Sprint(summary(cfg))
		}
		return ""
	})
}

// sessionAffinity sets the Service's spec.sessionAffinity to ClientIP and
// back, as kubectl would: the source gives its port client-IP affinity,
// and takes it away again. The API server fills in the timeout
// (sessionAffinityConfig.clientIP.timeoutSeconds) that xlb cannot honour.
func sessionAffinity(t *testing.T, c *realCluster, w *updates) {
	const web = testNS + "/web:80/tcp"
	affinity := func(want config.Affinity) func(*config.Config) string {
		return func(cfg *config.Config) string {
			for _, s := range cfg.Services {
				if s.Name == web && s.Affinity == want && len(s.Backends) > 0 {
					return ""
				}
			}
			return fmt.Sprint(summary(cfg))
		}
	}
	if err := affinity("")(w.cfg); err != "" {
		t.Fatalf("before: %s, want %s without affinity", err, web)
	}
	patch(c, c.cs.CoreV1().Services(testNS).Patch, "web", map[string]any{"spec": map[string]any{"sessionAffinity": "ClientIP"}})
	w.until("sessionAffinity ClientIP", affinity(config.AffinityClientIP))
	svc, err := c.cs.CoreV1().Services(testNS).Get(t.Context(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg := svc.Spec.SessionAffinityConfig; cfg == nil || cfg.ClientIP == nil || cfg.ClientIP.TimeoutSeconds == nil {
		t.Errorf("the API server wrote no default timeout: %+v", cfg)
	} else {
		t.Logf("the API server's default timeoutSeconds: %d", *cfg.ClientIP.TimeoutSeconds)
	}
	patch(c, c.cs.CoreV1().Services(testNS).Patch, "web", map[string]any{"spec": map[string]any{"sessionAffinity": "None", "sessionAffinityConfig": nil}})
	w.until("sessionAffinity None", affinity(""))
}

// policy: web's spec.loadBalancerSourceRanges, then the legacy
// annotation in their place, become its service's source ranges; ranges
// that admit no IPv4 client take it out; the DenyLists' prefixes become
// the node's deny list as they come, change and go.
func policy(t *testing.T, c *realCluster, w *updates) {
	const web = testNS + "/web:80/tcp"
	ranges := func(want ...string) func(*config.Config) string {
		return func(cfg *config.Config) string {
			for _, s := range cfg.Services {
				if s.Name != web {
					continue
				}
				var got []string
				for _, p := range s.SourceRanges {
					got = append(got, p.String())
				}
				if !slices.Equal(got, want) {
					return fmt.Sprintf("ranges %v", got)
				}
				return ""
			}
			return web + " not served"
		}
	}
	patch(c, c.cs.CoreV1().Services(testNS).Patch, "web", map[string]any{"spec": map[string]any{"loadBalancerSourceRanges": []any{"10.0.0.0/8", "2001:db8::/32"}}})
	w.until("spec.loadBalancerSourceRanges", ranges("10.0.0.0/8"))
	patch(c, c.cs.CoreV1().Services(testNS).Patch, "web", map[string]any{
		"spec":     map[string]any{"loadBalancerSourceRanges": nil},
		"metadata": map[string]any{"annotations": map[string]any{api.AnnotationSourceRanges: "192.0.2.0/24, 198.51.100.0/24"}}})
	w.until("the legacy annotation", ranges("192.0.2.0/24", "198.51.100.0/24"))
	patch(c, c.cs.CoreV1().Services(testNS).Patch, "web", map[string]any{
		"spec":     map[string]any{"loadBalancerSourceRanges": []any{"2001:db8::/32"}},
		"metadata": map[string]any{"annotations": map[string]any{api.AnnotationSourceRanges: nil}}})
	w.until("IPv6 ranges only: not served", func(cfg *config.Config) string {
		if why := ranges()(cfg); why != web+" not served" {
			return why
		}
		return ""
	})
	patch(c, c.cs.CoreV1().Services(testNS).Patch, "web", map[string]any{"spec": map[string]any{"loadBalancerSourceRanges": nil}})
	w.until("no ranges: every source", ranges())

	lists := c.dyn.Resource(api.DenyListResource)
	deny := func(want ...string) func(*config.Config) string {
		return func(cfg *config.Config) string {
			var got []string
			for _, p := range cfg.Policy.Deny {
				got = append(got, p.String())
			}
			if !slices.Equal(got, want) {
				return fmt.Sprintf("deny %v", got)
			}
			return ""
		}
	}
	list := func(name string, prefixes ...any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": api.Group + "/" + api.Version, "kind": "DenyList",
			"metadata": map[string]any{"name": name}, "spec": map[string]any{"prefixes": prefixes}}}
	}
	c.create(lists.Create(t.Context(), list("attackers", "192.0.2.0/24", "198.51.100.7/32"), metav1.CreateOptions{}))
	w.until("a DenyList", deny("192.0.2.0/24", "198.51.100.7/32"))
	// Created a second later, so that it sorts after the first.
	time.Sleep(time.Second)
	c.create(lists.Create(t.Context(), list("more", "203.0.113.0/24", "192.0.2.0/24"), metav1.CreateOptions{}))
	w.until("two DenyLists", deny("192.0.2.0/24", "198.51.100.7/32", "203.0.113.0/24"))
	patch(c, lists.Patch, "attackers", map[string]any{"spec": map[string]any{"prefixes": []any{"198.51.100.0/24"}}})
	w.until("a DenyList changed", deny("198.51.100.0/24", "203.0.113.0/24", "192.0.2.0/24"))
	for _, name := range []string{"attackers", "more"} {
		if err := lists.Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	w.until("the DenyLists deleted", deny())
}

// sharedAddress: a second Service of web's pods, with
// externalTrafficPolicy Local, shares web's address as the controller
// gives it to Services with one sharing key. Both become services of the
// one VIP, each with its port and every node's endpoints (Local leaves
// none out: this node, lb-1, has none), and the VIP is one route.
func sharedAddress(t *testing.T, c *realCluster, w *updates) {
	const vip = "10.99.0.9"
	admin := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "admin", Namespace: testNS, Annotations: map[string]string{api.AnnotationSharingKey: "web"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: ptr(api.LoadBalancerClass), Selector: map[string]string{"app": "web"},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports:                 []corev1.ServicePort{{Name: "admin", Port: 8443, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}},
	}
	c.create(c.cs.CoreV1().Services(testNS).Create(t.Context(), admin, metav1.CreateOptions{}))
	patch(c, c.cs.CoreV1().Services(testNS).Patch, "web", map[string]any{"metadata": map[string]any{"annotations": map[string]any{api.AnnotationSharingKey: "web"}}})
	c.setIngress("web", vip)
	c.setIngress("admin", vip)
	// web-0 on node-a and web-1 on node-b ready, web-3 on node-b
	// terminating.
	pods := []string{"10.244.0.10:8080/1", "10.244.1.11:8080/1", "10.244.1.13:8080/0"}
	w.until("two Services on one address", func(cfg *config.Config) string {
		for _, name := range []string{testNS + "/web:80/tcp", testNS + "/admin:8443/tcp"} {
			if why := backends(name, pods...)(cfg); why != "" {
				return why
			}
		}
		for _, s := range cfg.Services {
			if s.VIP.String() != vip {
				return fmt.Sprintf("%s at %s", s.Name, s.VIP)
			}
		}
		return ""
	})
	routes := announce.Plan(w.cfg.Services, nil, func(config.Service) bool { return true })
	if len(routes) != 1 || routes[0].Prefix.String() != vip+"/32" || !routes[0].Serve {
		t.Errorf("routes %+v, want %s/32 once, served", routes, vip)
	}
	if err := c.cs.CoreV1().Services(testNS).Delete(t.Context(), "admin", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.until("the sharer gone, web stays", func(cfg *config.Config) string {
		if len(cfg.Services) != 1 {
			return fmt.Sprint(summary(cfg))
		}
		return backends(testNS+"/web:80/tcp", pods...)(cfg)
	})
}

// measureLatency times changes from the API write to the update that
// shows them: Pods turning ready and unready (through the EndpointSlice
// controller), and the Service's address (read directly).
func measureLatency(t *testing.T, c *realCluster, w *updates) {
	const web = testNS + "/web:80/tcp"
	var podLat, svcLat []time.Duration
	for i := range latencyChanges {
		ready := i%2 == 1
		want := backends(web, "10.244.0.10:8080/1", "10.244.1.13:8080/0")
		if ready {
			want = backends(web, "10.244.0.10:8080/1", "10.244.1.11:8080/1", "10.244.1.13:8080/0")
		}
		begin := time.Now()
		c.setReady("web-1", ready)
		w.until(fmt.Sprintf("web-1 ready=%v (change %d)", ready, i), want)
		podLat = append(podLat, time.Since(begin))
	}
	for i := range latencyChanges {
		vip := fmt.Sprintf("10.99.0.%d", 2+i%2)
		begin := time.Now()
		c.setIngress("web", vip)
		w.until(fmt.Sprintf("address %s (change %d)", vip, i), func(cfg *config.Config) string {
			for _, s := range cfg.Services {
				if s.Name == web && s.VIP.String() == vip {
					return ""
				}
			}
			return fmt.Sprint(summary(cfg))
		})
		svcLat = append(svcLat, time.Since(begin))
	}
	logLatency(t, "Pod Ready condition -> EndpointSlice controller -> update", podLat)
	logLatency(t, "Service status.loadBalancer.ingress -> update", svcLat)
}

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

// updates follows the source's updates.
type updates struct {
	t   *testing.T
	src *Source
	cfg *config.Config // the latest
}

// until waits for a configuration that check accepts (""), the latest
// one included; check says what is wrong otherwise. An update with an
// error fails the test.
func (w *updates) until(what string, check func(*config.Config) string) {
	w.t.Helper()
	deadline := time.After(apiTimeout)
	why := check(w.cfg)
	for why != "" {
		select {
		case u := <-w.src.Updates():
			if u.Err != nil {
				w.t.Fatalf("%s: the source failed: %v", what, u.Err)
			}
			w.cfg = u.Config
			why = check(w.cfg)
		case <-deadline:
			w.t.Fatalf("%s: not within %v; the last configuration: %s", what, apiTimeout, why)
		}
	}
}

// drain takes the updates that come within d.
func (w *updates) drain(d time.Duration) {
	w.t.Helper()
	end := time.After(d)
	for {
		select {
		case u := <-w.src.Updates():
			if u.Err != nil {
				w.t.Fatalf("the source failed: %v", u.Err)
			}
			w.cfg = u.Config
		case <-end:
			return
		}
	}
}

// backends accepts a configuration whose service name has exactly these
// backends, as "address:port/weight".
func backends(name string, want ...string) func(*config.Config) string {
	return func(cfg *config.Config) string {
		for _, s := range cfg.Services {
			if s.Name != name {
				continue
			}
			var got []string
			for _, b := range s.Backends {
				got = append(got, fmt.Sprintf("%s:%d/%d", b.Address, b.Port, b.Weight))
			}
			if slices.Equal(got, want) {
				return ""
			}
			return name + ": " + strings.Join(got, ",")
		}
		return name + " is not served: " + fmt.Sprint(summary(cfg))
	}
}

func (c *realCluster) create(_ any, err error) {
	c.t.Helper()
	if err != nil {
		c.t.Fatal(err)
	}
}

// installCRDs creates deploy/crds' BGPPeer and DenyList definitions as
// kubectl apply would, and waits until both are served.
func (c *realCluster) installCRDs() {
	dir := filepath.Join("..", "..", "..", "deploy", "crds")
	if err := k8stest.InstallCRDs(c.t.Context(), c.dyn, 30*time.Second, filepath.Join(dir, "xlb.io_bgppeers.yaml"), filepath.Join(dir, "xlb.io_denylists.yaml"), filepath.Join(dir, "xlb.io_addresspools.yaml")); err != nil {
		c.t.Fatal(err)
	}
}

// namespace creates a namespace and waits for its default ServiceAccount,
// without which no Pod is admitted.
func (c *realCluster) namespace(name string) {
	c.create(c.cs.CoreV1().Namespaces().Create(c.t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}))
	c.poll("ServiceAccount "+name+"/default", func() error {
		_, err := c.cs.CoreV1().ServiceAccounts(name).Get(c.t.Context(), "default", metav1.GetOptions{})
		return err
	})
}

func (c *realCluster) poll(what string, try func() error) {
	c.t.Helper()
	deadline := time.Now().Add(apiTimeout)
	for {
		err := try()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: not within %v: %v", what, apiTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// node creates a Node with an InternalIP, as a kubelet registers it.
func (c *realCluster) node(name string, labels map[string]string, ip string) {
	c.create(c.cs.CoreV1().Nodes().Create(c.t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}))
	// Patched, not updated: the controllers touch a new Node at once.
	patch(c, c.cs.CoreV1().Nodes().Patch, name, map[string]any{"status": map[string]any{"addresses": []any{
		map[string]any{"type": "InternalIP", "address": ip}, map[string]any{"type": "Hostname", "address": name}}}}, "status")
}

func (c *realCluster) label(name string, labels map[string]string) {
	patch(c, c.cs.CoreV1().Nodes().Patch, name, map[string]any{"metadata": map[string]any{"labels": labels}})
}

// patch applies a JSON merge patch to the object name (of the resource
// and subresource that do takes).
func patch[T any](c *realCluster, do func(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (T, error), name string, p map[string]any, sub ...string) {
	c.t.Helper()
	data, err := json.Marshal(p)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := do(c.t.Context(), name, types.MergePatchType, data, metav1.PatchOptions{}, sub...); err != nil {
		c.t.Fatalf("patch %s with %s: %v", name, data, err)
	}
}

// service creates a Service of xlb's class for the pods app=NAME: port
// 80 to their port 8080.
func (c *realCluster) service(name string) {
	class := api.LoadBalancerClass
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class, Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}},
	}
	c.create(c.cs.CoreV1().Services(testNS).Create(c.t.Context(), svc, metav1.CreateOptions{}))
}

// setIngress writes the Service's address, as the xlb controller does.
func (c *realCluster) setIngress(name, ip string) {
	patch(c, c.cs.CoreV1().Services(testNS).Patch, name, map[string]any{"status": map[string]any{"loadBalancer": map[string]any{
		"ingress": []any{map[string]any{"ip": ip}}}}}, "status")
}

// pod creates a Pod of app=web on node and reports it running and ready
// at ip, as a kubelet would. Finalizers keep it from going away (the
// control plane goes with the test).
func (c *realCluster) pod(name, node, ip string, finalizers []string) {
	c.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, Labels: map[string]string{"app": "web"}, Finalizers: finalizers},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
			Name: "web", Image: "registry.invalid/web", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		}}},
	}
	c.create(c.cs.CoreV1().Pods(testNS).Create(c.t.Context(), p, metav1.CreateOptions{}))
	patch(c, c.cs.CoreV1().Pods(testNS).Patch, name, map[string]any{"status": map[string]any{
		"phase": "Running", "podIP": ip, "podIPs": []any{map[string]any{"ip": ip}}}}, "status")
	c.setReady(name, true)
}

func (c *realCluster) setReady(name string, ready bool) {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	patch(c, c.cs.CoreV1().Pods(testNS).Patch, name, map[string]any{"status": map[string]any{"conditions": []any{
		map[string]any{"type": "Ready", "status": string(status), "lastTransitionTime": metav1.Now().UTC().Format(time.RFC3339)}}}}, "status")
}

// deletePod deletes a Pod: at once with grace 0, else it turns
// terminating and, without a kubelet, stays so.
func (c *realCluster) deletePod(name string, grace int64) {
	c.t.Helper()
	if err := c.cs.CoreV1().Pods(testNS).Delete(c.t.Context(), name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		c.t.Fatal(err)
	}
}
