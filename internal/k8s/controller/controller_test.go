package controller

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/xlbproject/xlb/internal/k8s/allocator"
	"github.com/xlbproject/xlb/internal/k8s/api"
	"github.com/xlbproject/xlb/testbed/testenv"
)

func newMetrics(t *testing.T) *Metrics {
	t.Helper()
	m, err := NewMetrics(prometheus.NewPedanticRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestServedServicesGetAddresses(t *testing.T) {
	e := newFakeEnv(t, []runtime.Object{
		lbService("a", "first", createdAt(1)),
		lbService("a", "other-class", withClass("example.com/lb")),
		lbService("a", "classless", withClass("")),
		lbService("a", "cluster-ip", withClass(""), func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP }),
	}, poolObject("p", map[string]any{"addresses": []any{"10.99.0.0/30"}}))
	e.start(Options{Metrics: newMetrics(t)})

	e.waitIngress("a", "first", "10.99.0.0")
	e.waitAnnotation("a", "first", "p")
	e.waitEvent("a/first", EventAllocated, "10.99.0.0", `"p"`)
	e.create(lbService("a", "second"))
	e.waitIngress("a", "second", "10.99.0.1")

	e.waitPoolStatus("p", api.AddressPoolStatus{Family: "IPv4", Size: 4, Assigned: 2, Available: 2})
	for _, name := range []string{"other-class", "classless", "cluster-ip"} {
		if s := e.svc("a", name); ingressOf(s) != "" || s.Annotations[api.AnnotationAllocatedFrom] != "" {
			t.Errorf("service %s is not xlb's but got %q", name, ingressOf(s))
		}
	}
	if got := value(e.metrics.allocations); got != 2 {
		t.Errorf("allocations metric %v, want 2", got)
	}
	if got := value(e.metrics.poolUsed.WithLabelValues("p")); got != 2 {
		t.Errorf("pool usage metric %v, want 2", got)
	}
}

func TestServeClassless(t *testing.T) {
	e := newFakeEnv(t, []runtime.Object{
		lbService("a", "classless", withClass("")),
		lbService("a", "other-class", withClass("example.com/lb")),
	}, poolObject("p", map[string]any{"addresses": []any{"10.99.0.0/30"}}))
	e.start(Options{ServeClassless: true})
	e.waitIngress("a", "classless", "10.99.0.0")
	e.create(lbService("a", "xlb"))
	e.waitIngress("a", "xlb", "10.99.0.1")
	if got := ingressOf(e.svc("a", "other-class")); got != "" {
		t.Errorf("another class's Service got %q", got)
	}
}

// On start the allocator is rebuilt from the Services' status before
// anything is allocated: nobody's address changes, the older of two
// Services claiming one address keeps it, a Service whose annotation is
// missing (a crash between the two writes) gets it.
func TestRestartRebuildsFromStatus(t *testing.T) {
	e := newFakeEnv(t, []runtime.Object{
		// Created in this order; "new" has no address yet and must
		// not get any of the others'.
		lbService("a", "holds-1", createdAt(1), withIngress("10.99.0.1"), annotate(api.AnnotationAllocatedFrom, "p")),
		lbService("a", "holds-3-no-annotation", createdAt(2), withIngress("10.99.0.3")),
		lbService("a", "outside", createdAt(3), withIngress("192.0.2.7"), annotate(api.AnnotationAllocatedFrom, "gone")),
		lbService("b", "dup-older", createdAt(4), withIngress("10.99.0.2")),
		lbService("b", "dup-younger", createdAt(5), withIngress("10.99.0.2")),
		lbService("c", "new", createdAt(6)),
	}, poolObject("p", map[string]any{"addresses": []any{"10.99.0.0/29"}}))
	e.start(Options{})

	// The two without an address get the two free ones, in either
	// order.
	testenv.Eventually(t, 10*time.Second, "addresses for c/new and b/dup-younger", func() (bool, string) {
		got := ingressOf(e.svc("c", "new")) + " " + ingressOf(e.svc("b", "dup-younger"))
		return got == "10.99.0.0 10.99.0.4" || got == "10.99.0.4 10.99.0.0", got
	})
	e.waitEvent("b/dup-younger", EventConflict, "10.99.0.2", "taken by Service b/dup-older")
	for _, s := range []struct{ ns, name, ip string }{
		{"a", "holds-1", "10.99.0.1"}, {"a", "holds-3-no-annotation", "10.99.0.3"},
		{"a", "outside", "192.0.2.7"}, {"b", "dup-older", "10.99.0.2"},
	} {
		if got := ingressOf(e.svc(s.ns, s.name)); got != s.ip {
			t.Errorf("%s/%s: ingress %q after the restart, want %s", s.ns, s.name, got, s.ip)
		}
	}
	e.waitAnnotation("a", "holds-3-no-annotation", "p")
	e.waitEvent("a/outside", EventOutsidePools, "keeps 192.0.2.7")
	if evs := e.events.find("a/holds-1", EventAllocated); len(evs) != 0 {
		t.Errorf("a Service keeping its address got %v", evs)
	}
}

func TestRequests(t *testing.T) {
	pools := []*unstructured.Unstructured{
		poolObject("auto", map[string]any{"addresses": []any{"10.99.0.0/30"}}),
		poolObject("manual", map[string]any{"addresses": []any{"10.99.1.10-10.99.1.12"}, "autoAssign": false}),
		poolObject("team", map[string]any{"addresses": []any{"10.99.2.0/30"}, "autoAssign": false,
			"serviceAllocation": map[string]any{"namespaceSelectors": []any{map[string]any{"matchLabels": map[string]any{"team": "x"}}}}}),
	}
	e := newFakeEnv(t, []runtime.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tx", Labels: map[string]string{"team": "x"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a"}},
	}, pools...)
	e.start(Options{Metrics: newMetrics(t)})

	e.create(lbService("a", "by-annotation", annotate(api.AnnotationAddresses, "10.99.1.11, 10.99.1.12")))
	e.waitIngress("a", "by-annotation", "10.99.1.11")
	e.create(lbService("a", "by-spec", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "10.99.0.3" }))
	e.waitIngress("a", "by-spec", "10.99.0.3")
	e.create(lbService("a", "annotation-wins", annotate(api.AnnotationAddresses, "10.99.1.12"),
		func(s *corev1.Service) { s.Spec.LoadBalancerIP = "10.99.0.2" }))
	e.waitIngress("a", "annotation-wins", "10.99.1.12")
	e.create(lbService("a", "by-pool", annotate(api.AnnotationPool, "manual")))
	e.waitIngress("a", "by-pool", "10.99.1.10")
	e.create(lbService("tx", "team-pool", annotate(api.AnnotationPool, "team")))
	e.waitIngress("tx", "team-pool", "10.99.2.0")

	failures := []struct {
		name   string
		change func(*corev1.Service)
		reason allocator.Reason
		parts  []string
	}{
		{"taken", annotate(api.AnnotationAddresses, "10.99.1.11"), allocator.ReasonAddressTaken, []string{"10.99.1.11 is taken by Service a/by-annotation"}},
		{"outside", annotate(api.AnnotationAddresses, "192.0.2.1"), allocator.ReasonOutsidePools, []string{"192.0.2.1 is outside every address pool"}},
		{"garbage", annotate(api.AnnotationAddresses, "ten"), allocator.ReasonInvalidRequest, []string{`annotation xlb.io/loadBalancerIPs: "ten" is not an IP address`}},
		{"exhausted", annotate(api.AnnotationPool, "manual"), allocator.ReasonPoolExhausted, []string{`address pool "manual" is exhausted`}},
		{"unknown-pool", annotate(api.AnnotationPool, "nope"), allocator.ReasonUnknownPool, []string{`"nope" does not exist`}},
		{"wrong-namespace", annotate(api.AnnotationPool, "team"), allocator.ReasonNotEligible, []string{`namespace "a" match none`}},
		{"ipv6-only", func(s *corev1.Service) { s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol} }, allocator.ReasonNoEligiblePool, []string{"no auto-assign address pool has IPv6 addresses"}},
	}
	for _, f := range failures {
		e.create(lbService("a", f.name, f.change))
		e.waitEvent("a/"+f.name, EventAllocationFailed, f.parts...)
		if got := ingressOf(e.svc("a", f.name)); got != "" {
			t.Errorf("%s: got %q, want no address", f.name, got)
		}
	}
	for _, f := range failures {
		if got := value(e.metrics.failures.WithLabelValues(string(f.reason))); got < 1 {
			t.Errorf("failures{reason=%s} = %v, want ≥ 1", f.reason, got)
		}
	}

	// Asking a Service with an address for a taken one keeps its
	// address; asking for a free one moves it and frees the old one.
	s := e.svc("a", "by-spec")
	s.Annotations = map[string]string{api.AnnotationAddresses: "10.99.1.11"}
	e.update(s)
	e.waitEvent("a/by-spec", EventAllocationFailed, "keeping 10.99.0.3", "taken by Service a/by-annotation")
	s = e.svc("a", "by-spec")
	if ingressOf(s) != "10.99.0.3" {
		t.Fatalf("by-spec: %q, want to keep 10.99.0.3", ingressOf(s))
	}
	s.Annotations = map[string]string{api.AnnotationAddresses: "10.99.0.1"}
	e.update(s)
	e.waitIngress("a", "by-spec", "10.99.0.1")

	// Namespace labels decide: label namespace "a" for the team pool.
	ns, err := e.client.CoreV1().Namespaces().Get(context.Background(), "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels = map[string]string{"team": "x"}
	if _, err := e.client.CoreV1().Namespaces().Update(context.Background(), ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitIngress("a", "wrong-namespace", "10.99.2.1")
}

// A deleted Service's address, and that of a Service that changed type
// or class, goes back to the pool and to a Service waiting for one.
func TestRelease(t *testing.T) {
	e := newFakeEnv(t, nil, poolObject("p", map[string]any{"addresses": []any{"10.99.0.0/31"}}))
	e.start(Options{Metrics: newMetrics(t)})
	e.create(lbService("a", "s0"))
	e.waitIngress("a", "s0", "10.99.0.0")
	e.create(lbService("a", "s1"))
	e.waitIngress("a", "s1", "10.99.0.1")
	e.create(lbService("a", "waiting"))
	e.waitEvent("a/waiting", EventAllocationFailed, "exhausted")

	if err := e.client.CoreV1().Services("a").Delete(context.Background(), "s0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitIngress("a", "waiting", "10.99.0.0")
	e.waitEvent("a/s0", EventReleased, "released 10.99.0.0: the Service was deleted")

	// The fake API server does not clear the status on a type change
	// (the real one does): the controller does.
	s := e.svc("a", "s1")
	s.Spec.Type = corev1.ServiceTypeClusterIP
	s.Spec.LoadBalancerClass = nil
	e.update(s)
	e.waitIngress("a", "s1", "")
	e.waitAnnotation("a", "s1", "")
	e.waitEvent("a/s1", EventReleased, "released 10.99.0.1")
	e.create(lbService("a", "next"))
	e.waitIngress("a", "next", "10.99.0.1")

	// A class change (through the type, as the API server demands):
	// the other class's status is not touched.
	s = e.svc("a", "next")
	s.Spec.LoadBalancerClass = ptr("example.com/lb")
	s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.1"}}
	e.update(s)
	testenv.Eventually(t, 10*time.Second, "release after the class change", func() (bool, string) {
		used := value(e.metrics.poolUsed.WithLabelValues("p"))
		return used == 1, fmt.Sprint(used)
	})
	if got := ingressOf(e.svc("a", "next")); got != "203.0.113.1" {
		t.Errorf("another implementation's status became %q", got)
	}
	if got := value(e.metrics.releases); got != 3 {
		t.Errorf("releases metric %v, want 3", got)
	}
}

func ptr[T any](v T) *T { return &v }

// A write refused with a conflict is retried, and the address is
// recorded once the write succeeds; nobody else gets it meanwhile.
func TestConflictIsRetried(t *testing.T) {
	e := newFakeEnv(t, []runtime.Object{lbService("a", "s")},
		poolObject("p", map[string]any{"addresses": []any{"10.99.0.0/30"}}))
	var refused atomic.Int32
	e.client.PrependReactor("patch", "services", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() == "status" && refused.Add(1) <= 3 {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "services"}, "s", fmt.Errorf("the object has been modified"))
		}
		return false, nil, nil
	})
	m := newMetrics(t)
	e.start(Options{Metrics: m})
	e.waitIngress("a", "s", "10.99.0.0")
	if got := value(m.conflicts); got != 3 {
		t.Errorf("conflicts metric %v, want 3", got)
	}
	testenv.Eventually(t, 10*time.Second, "allocations metric", func() (bool, string) {
		got := value(m.allocations)
		return got == 1, fmt.Sprint(got)
	})
	e.create(lbService("a", "t"))
	e.waitIngress("a", "t", "10.99.0.1")
}

// Pool changes: a Service whose address no pool contains any more keeps
// it, with a Warning; a pending Service gets an address from a new pool;
// an overlapping pool is rejected with a status error and an Event.
func TestPoolChanges(t *testing.T) {
	e := newFakeEnv(t, []runtime.Object{lbService("a", "s", createdAt(1))},
		poolObject("old", map[string]any{"addresses": []any{"10.99.0.0/32"}}))
	e.start(Options{})
	e.waitIngress("a", "s", "10.99.0.0")
	e.create(lbService("a", "waiting", createdAt(2)))
	e.waitEvent("a/waiting", EventAllocationFailed, "exhausted")

	pools := e.dyn.Resource(api.AddressPoolResource)
	ctx := context.Background()
	overlapping := poolObject("aaa-overlap", map[string]any{"addresses": []any{"10.99.0.0/30"}})
	overlapping.SetCreationTimestamp(metav1.Now())
	overlapping.SetGeneration(1)
	if _, err := pools.Create(ctx, overlapping, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitEvent("aaa-overlap", EventInvalidPool, `"aaa-overlap"`, `10.99.0.0/30 overlaps 10.99.0.0/32 of address pool "old"`)
	e.waitPoolStatus("aaa-overlap", api.AddressPoolStatus{Error: `address pool "aaa-overlap": 10.99.0.0/30 overlaps 10.99.0.0/32 of address pool "old"; pools must not share addresses: change or remove one of them`})

	if err := pools.Delete(ctx, "old", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Now aaa-overlap is valid; the Service keeps its address, which
	// aaa-overlap contains, and the waiting one gets the next.
	e.waitIngress("a", "waiting", "10.99.0.1")
	e.waitPoolStatus("aaa-overlap", api.AddressPoolStatus{Family: "IPv4", Size: 4, Assigned: 2, Available: 2})
	e.waitAnnotation("a", "s", "aaa-overlap")

	if err := pools.Delete(ctx, "aaa-overlap", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitEvent("a/s", EventOutsidePools, "keeps 10.99.0.0")
	e.waitEvent("a/waiting", EventOutsidePools, "keeps 10.99.0.1")
	if got := ingressOf(e.svc("a", "s")); got != "10.99.0.0" {
		t.Errorf("ingress %q after the pool went, want to keep 10.99.0.0", got)
	}
	// A pool coming back does not hand out the held addresses.
	if _, err := pools.Create(ctx, poolObject("new", map[string]any{"addresses": []any{"10.99.0.0/30"}}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.create(lbService("a", "third"))
	e.waitIngress("a", "third", "10.99.0.2")
}

func (e *fakeEnv) waitPoolStatus(name string, want api.AddressPoolStatus) {
	e.t.Helper()
	testenv.Eventually(e.t, 10*time.Second, "status of pool "+name, func() (bool, string) {
		u, err := e.dyn.Resource(api.AddressPoolResource).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		var p api.AddressPool
		if err := api.FromUnstructured(u, &p); err != nil {
			return false, err.Error()
		}
		return reflect.DeepEqual(p.Status, want), fmt.Sprintf("%+v", p.Status)
	})
}

func TestRequestParsing(t *testing.T) {
	tests := []struct {
		name    string
		svc     *corev1.Service
		addr    string
		pool    string
		wantErr string
		v6      bool
	}{
		{name: "nothing", svc: lbService("a", "s")},
		{name: "annotation", svc: lbService("a", "s", annotate(api.AnnotationAddresses, " 10.0.0.1 ")), addr: "10.0.0.1"},
		{name: "first of a list", svc: lbService("a", "s", annotate(api.AnnotationAddresses, "10.0.0.1,10.0.0.2")), addr: "10.0.0.1"},
		{name: "spec field", svc: lbService("a", "s", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "10.0.0.3" }), addr: "10.0.0.3"},
		{name: "pool", svc: lbService("a", "s", annotate(api.AnnotationPool, "gold")), pool: "gold"},
		{name: "bad annotation", svc: lbService("a", "s", annotate(api.AnnotationAddresses, "10.0.0.300")), wantErr: `"10.0.0.300" is not an IP address`},
		{name: "bad spec field", svc: lbService("a", "s", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "x" }), wantErr: `spec.loadBalancerIP "x"`},
		{name: "dual stack is fine", svc: lbService("a", "s", func(s *corev1.Service) {
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
		})},
		{name: "the IPv6 address of a list", svc: lbService("a", "s", annotate(api.AnnotationAddresses, "10.0.0.1, 2001:db8::5")), v6: true, addr: "2001:db8::5"},
		{name: "the IPv4 address of a list with IPv6 first", svc: lbService("a", "s", annotate(api.AnnotationAddresses, "2001:db8::5,10.0.0.1")), addr: "10.0.0.1"},
		{name: "no IPv6 address in the list", svc: lbService("a", "s", annotate(api.AnnotationAddresses, "10.0.0.1")), v6: true},
		{name: "an IPv4 spec field is no IPv6 request", svc: lbService("a", "s", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "10.0.0.3" }), v6: true},
	}
	e := newFakeEnv(t, nil)
	r := newReconciler(&Controller{opts: Options{}}, e.events, nil, nil, nil)
	r.namespaces = emptyNamespaces{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := r.request("a/s", tt.svc, tt.v6)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				if allocator.ReasonOf(err) != allocator.ReasonInvalidRequest {
					t.Errorf("reason %q, want InvalidRequest", allocator.ReasonOf(err))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var want netip.Addr
			if tt.addr != "" {
				want = netip.MustParseAddr(tt.addr)
			}
			if req.Address != want || req.Pool != tt.pool || req.Key != "a/s" || req.Namespace != "a" || req.IPv6 != tt.v6 {
				t.Errorf("request %+v, want address %v pool %q", req, want, tt.pool)
			}
		})
	}
}

// Without the CRD, Run says what to do instead of waiting in silence.
func TestRunWithoutCRD(t *testing.T) {
	e := newFakeEnv(t, nil)
	e.dyn.PrependReactor("list", "addresspools", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: api.Group, Resource: "addresspools"}, "")
	})
	c, err := New(Options{Client: e.client, Dynamic: e.dyn, Recorder: e.events})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), "kubectl apply -f deploy/crds") {
		t.Errorf("Run = %v, want a hint to install the CRDs", err)
	}
	if _, err := New(Options{Client: e.client}); err == nil {
		t.Error("New accepted options without a dynamic client")
	}
}
