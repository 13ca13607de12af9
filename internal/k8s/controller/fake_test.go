package controller

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/xlbproject/xlb/internal/k8s/api"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// event is one Event a recorder got.
type event struct {
	object, typ, reason, msg string
}

func (e event) String() string { return fmt.Sprintf("%s %s %s: %s", e.object, e.typ, e.reason, e.msg) }

// recorder is a record.EventRecorder that keeps every Event; unlike
// record.FakeRecorder it never blocks the worker.
type recorder struct {
	mu     sync.Mutex
	events []event
}

func (r *recorder) Event(obj runtime.Object, typ, reason, msg string) {
	name := "?"
	if ref, ok := obj.(*corev1.ObjectReference); ok {
		name = ref.Namespace + "/" + ref.Name
	} else if m, err := meta.Accessor(obj); err == nil {
		name = m.GetName()
		if m.GetNamespace() != "" {
			name = m.GetNamespace() + "/" + name
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event{name, typ, reason, msg})
}

func (r *recorder) Eventf(obj runtime.Object, typ, reason, format string, args ...any) {
	r.Event(obj, typ, reason, fmt.Sprintf(format, args...))
}

func (r *recorder) AnnotatedEventf(obj runtime.Object, _ map[string]string, typ, reason, format string, args ...any) {
	r.Eventf(obj, typ, reason, format, args...)
}

// find returns the Events of object with reason.
func (r *recorder) find(object, reason string) []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []event
	for _, e := range r.events {
		if e.object == object && e.reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// fakeEnv is a controller running against client-go's fake clients.
type fakeEnv struct {
	t       *testing.T
	client  *fake.Clientset
	dyn     *dynamicfake.FakeDynamicClient
	events  *recorder
	metrics *Metrics
	cancel  context.CancelFunc
	done    chan error
}

func poolObject(name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": api.Group + "/" + api.Version,
		"kind":       "AddressPool",
		"metadata":   map[string]any{"name": name},
		"spec":       spec,
	}}
	return u
}

func newFakeEnv(t *testing.T, objs []runtime.Object, pools ...*unstructured.Unstructured) *fakeEnv {
	t.Helper()
	dynObjs := make([]runtime.Object, len(pools))
	for i, p := range pools {
		dynObjs[i] = p
	}
	e := &fakeEnv{
		t:      t,
		client: fake.NewClientset(objs...),
		dyn: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
			map[schema.GroupVersionResource]string{api.AddressPoolResource: "AddressPoolList", api.DenyListResource: "DenyListList",
				api.BGPAdvertisementResource: "BGPAdvertisementList", api.BGPPeerResource: "BGPPeerList"}, dynObjs...),
		events: &recorder{},
	}
	return e
}

// start runs a controller; it stops when the test ends.
func (e *fakeEnv) start(opts Options) {
	e.t.Helper()
	opts.Client, opts.Dynamic, opts.Recorder = e.client, e.dyn, e.events
	if opts.Log == nil {
		opts.Log = slog.New(slog.NewTextHandler(e.t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	c, err := New(opts)
	if err != nil {
		e.t.Fatal(err)
	}
	e.metrics = opts.Metrics
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.done = make(chan error, 1)
	go func() { e.done <- c.Run(ctx) }()
	e.t.Cleanup(e.stop)
}

func (e *fakeEnv) stop() {
	if e.cancel == nil {
		return
	}
	e.cancel()
	select {
	case err := <-e.done:
		if err != nil {
			e.t.Errorf("controller: %v", err)
		}
	case <-time.After(10 * time.Second):
		e.t.Error("controller did not stop within 10 s")
	}
	e.cancel = nil
}

func (e *fakeEnv) svc(ns, name string) *corev1.Service {
	e.t.Helper()
	s, err := e.client.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// waitIngress waits until the Service's status is [{ip: want}] ("": empty).
func (e *fakeEnv) waitIngress(ns, name, want string) *corev1.Service {
	e.t.Helper()
	var s *corev1.Service
	testenv.Eventually(e.t, 10*time.Second, fmt.Sprintf("service %s/%s ingress %q", ns, name, want), func() (bool, string) {
		s = e.svc(ns, name)
		got := ingressOf(s)
		return got == want, fmt.Sprintf("ingress %q", got)
	})
	return s
}

// waitEvent waits for an Event of object with reason whose message has
// every part.
func (e *fakeEnv) waitEvent(object, reason string, parts ...string) event {
	e.t.Helper()
	var found event
	testenv.Eventually(e.t, 10*time.Second, fmt.Sprintf("%s event on %s with %q", reason, object, parts), func() (bool, string) {
		evs := e.events.find(object, reason)
	next:
		for _, ev := range evs {
			for _, p := range parts {
				if !strings.Contains(ev.msg, p) {
					continue next
				}
			}
			found = ev
			return true, ""
		}
		return false, fmt.Sprint(evs)
	})
	return found
}

func ingressOf(s *corev1.Service) string {
	var ips []string
	for _, in := range s.Status.LoadBalancer.Ingress {
		ips = append(ips, in.IP)
	}
	return strings.Join(ips, ",")
}

func (e *fakeEnv) create(s *corev1.Service) {
	e.t.Helper()
	if _, err := e.client.CoreV1().Services(s.Namespace).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *fakeEnv) update(s *corev1.Service) {
	e.t.Helper()
	if _, err := e.client.CoreV1().Services(s.Namespace).Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// lbService is a Service of type LoadBalancer with xlb's class; change
// modifies it.
func lbService(ns, name string, change ...func(*corev1.Service)) *corev1.Service {
	class := api.LoadBalancerClass
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.Now()},
		Spec: corev1.ServiceSpec{
			Type:              corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass: &class,
			Ports:             []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}},
		},
	}
	for _, c := range change {
		c(s)
	}
	return s
}

func annotate(k, v string) func(*corev1.Service) {
	return func(s *corev1.Service) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[k] = v
	}
}

func withIngress(ip string) func(*corev1.Service) {
	return func(s *corev1.Service) {
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
	}
}

func createdAt(sec int64) func(*corev1.Service) {
	return func(s *corev1.Service) { s.CreationTimestamp = metav1.Unix(sec, 0) }
}

func withClass(c string) func(*corev1.Service) {
	return func(s *corev1.Service) {
		if c == "" {
			s.Spec.LoadBalancerClass = nil
		} else {
			s.Spec.LoadBalancerClass = &c
		}
	}
}

// emptyNamespaces is a NamespaceLister without namespaces.
type emptyNamespaces struct{}

func (emptyNamespaces) List(labels.Selector) ([]*corev1.Namespace, error) { return nil, nil }
func (emptyNamespaces) Get(name string) (*corev1.Namespace, error) {
	return nil, apierrors.NewNotFound(corev1.Resource("namespaces"), name)
}

// value reads a counter's or gauge's value.
func value(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

// waitAnnotation waits until the Service's allocated-from annotation is
// want ("": absent).
func (e *fakeEnv) waitAnnotation(ns, name, want string) {
	e.t.Helper()
	testenv.Eventually(e.t, 10*time.Second, fmt.Sprintf("service %s/%s annotation %s=%q", ns, name, api.AnnotationAllocatedFrom, want), func() (bool, string) {
		v, ok := e.svc(ns, name).Annotations[api.AnnotationAllocatedFrom]
		return v == want && ok == (want != ""), v
	})
}
