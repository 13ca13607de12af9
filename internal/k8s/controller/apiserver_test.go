package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/xlbproject/xlb/internal/k8s/api"
	"github.com/xlbproject/xlb/testbed/k8stest"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// apiEnv is a real control plane with xlb's CRDs.
type apiEnv struct {
	t      *testing.T
	client kubernetes.Interface
	dyn    dynamic.Interface
}

// instance is a controller running with leader election, as `xlb
// controller` does.
type instance struct {
	id      string
	cancel  context.CancelFunc
	done    chan error
	metrics *Metrics
}

const (
	leaseNamespace = "kube-system"
	leaseName      = "xlb-controller-test"
)

// TestAPIServer runs the controller against a real kube-apiserver (see
// testbed/k8stest): the CRDs and their validation, allocation under
// concurrent creates, requests, releases, a restart and two instances at
// once.
func TestAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Kubernetes control plane; skipped with -short")
	}
	cp := k8stest.StartT(t, k8stest.Options{})
	begin := time.Now()
	e := &apiEnv{t: t}
	var err error
	if e.client, e.dyn, err = cp.Clients(100, 200); err != nil {
		t.Fatal(err)
	}
	e.applyCRDs()
	for _, ns := range []string{"alloc", "burst", "req", "rel", "restart", "shop", "nodes", "share", "share2", "policy", "aff"} {
		e.createNamespace(ns)
	}
	t.Run("Validation", e.testValidation)

	a := e.startInstance("a")
	if !t.Run("Allocate", e.testAllocate) {
		return
	}
	t.Run("ConcurrentCreates", e.testConcurrentCreates)
	t.Run("Requests", e.testRequests)
	t.Run("Release", e.testRelease)
	t.Run("PoolGone", e.testPoolGone)
	t.Run("NodeAddresses", e.testNodeAddresses)
	t.Run("Sharing", e.testSharing)
	t.Run("TrafficPolicy", e.testTrafficPolicy)
	t.Run("AffinityTimeout", e.testAffinityTimeout)
	t.Run("DenyLists", e.testDenyLists)
	t.Run("BGPAdvertisements", e.testAdverts)
	t.Run("SourceRanges", e.testSourceRanges)
	var c *instance
	if !t.Run("Restart", func(t *testing.T) { c = e.testRestartAndTwoInstances(t, a) }) {
		return
	}
	if c != nil { // nil when -run left Restart out
		t.Run("Binary", func(t *testing.T) { e.testBinary(t, cp.Kubeconfig, c) })
	}
	t.Logf("the tests took %s once the control plane ran", time.Since(begin).Round(time.Millisecond))
}

// applyCRDs creates deploy/crds as kubectl apply would and waits until
// they are served.
func (e *apiEnv) applyCRDs() {
	files := []string{filepath.Join(crdDir, "xlb.io_addresspools.yaml"), filepath.Join(crdDir, "xlb.io_bgppeers.yaml"), filepath.Join(crdDir, "xlb.io_denylists.yaml"),
		filepath.Join(crdDir, "xlb.io_bgpadvertisements.yaml")}
	if err := k8stest.InstallCRDs(e.t.Context(), e.dyn, 30*time.Second, files...); err != nil {
		e.t.Fatal(err)
	}
}

func (e *apiEnv) createNamespace(name string) {
	e.t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := e.client.CoreV1().Namespaces().Create(e.t.Context(), ns, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// startInstance runs a controller with leader election; identity "x"
// writes as field manager "xlb-x".
func (e *apiEnv) startInstance(id string) *instance {
	t := e.t
	metrics, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(t.Output(), nil)).With("instance", id)
	c, err := New(Options{Client: e.client, Dynamic: e.dyn, Identity: id, FieldManager: "xlb-" + id, Metrics: metrics, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{id: id, cancel: cancel, done: make(chan error, 1), metrics: metrics}
	go func() {
		in.done <- RunElected(ctx, Election{Client: e.client, Namespace: leaseNamespace, Name: leaseName, Identity: id,
			LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond,
			Metrics: metrics, Log: log}, c.Run)
	}()
	t.Cleanup(func() { in.stop(t) })
	return in
}

// stop ends the instance and waits until it has given up the Lease.
func (in *instance) stop(t *testing.T) {
	if in.cancel == nil {
		return
	}
	in.cancel()
	in.cancel = nil
	select {
	case err := <-in.done:
		if err != nil {
			t.Errorf("instance %s: %v", in.id, err)
		}
	case <-time.After(20 * time.Second):
		t.Errorf("instance %s did not stop within 20 s", in.id)
	}
}

const waitTime = 20 * time.Second

func (e *apiEnv) createPool(t *testing.T, name string, spec map[string]any) {
	t.Helper()
	if _, err := e.dyn.Resource(api.AddressPoolResource).Create(t.Context(), poolObject(name, spec), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (e *apiEnv) createService(t *testing.T, s *corev1.Service) {
	t.Helper()
	s.CreationTimestamp = metav1.Time{}
	if _, err := e.client.CoreV1().Services(s.Namespace).Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (e *apiEnv) get(t *testing.T, ns, name string) *corev1.Service {
	t.Helper()
	s, err := e.client.CoreV1().Services(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// waitIngress waits for the Service's status to be want ("": empty, "*":
// any address) and returns it.
func (e *apiEnv) waitIngress(t *testing.T, ns, name, want string) string {
	t.Helper()
	var got string
	testenv.Eventually(t, waitTime, fmt.Sprintf("service %s/%s ingress %q", ns, name, want), func() (bool, string) {
		got = ingressOf(e.get(t, ns, name))
		return got == want || (want == "*" && got != ""), got
	})
	return got
}

// modify applies change to the Service, retrying on conflicts (the
// controller writes the same objects).
func (e *apiEnv) modify(t *testing.T, ns, name string, change func(*corev1.Service)) {
	t.Helper()
	for range 20 {
		s := e.get(t, ns, name)
		change(s)
		_, err := e.client.CoreV1().Services(ns).Update(t.Context(), s, metav1.UpdateOptions{})
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
	t.Fatalf("service %s/%s: 20 conflicts in a row", ns, name)
}

func (e *apiEnv) delete(t *testing.T, ns, name string) {
	t.Helper()
	if err := e.client.CoreV1().Services(ns).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitEvent waits for an Event on the Service (or, with ns "", on the
// cluster-scoped pool, whose Events go to "default") with reason and a
// message containing every part, and returns the message.
func (e *apiEnv) waitEvent(t *testing.T, ns, name, reason string, parts ...string) string {
	t.Helper()
	evNS := ns
	if evNS == "" {
		evNS = metav1.NamespaceDefault
	}
	var msg string
	testenv.Eventually(t, waitTime, fmt.Sprintf("%s Event on %s/%s with %q", reason, ns, name, parts), func() (bool, string) {
		list, err := e.client.CoreV1().Events(evNS).List(t.Context(), metav1.ListOptions{
			FieldSelector: "involvedObject.name=" + name + ",reason=" + reason})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
	next:
		for _, ev := range list.Items {
			seen = append(seen, ev.Message)
			for _, p := range parts {
				if !strings.Contains(ev.Message, p) {
					continue next
				}
			}
			msg = ev.Message
			return true, ""
		}
		return false, fmt.Sprint(seen)
	})
	return msg
}

func (e *apiEnv) waitPoolStatus(t *testing.T, name string, want api.AddressPoolStatus) {
	t.Helper()
	testenv.Eventually(t, waitTime, "status of pool "+name, func() (bool, string) {
		u, err := e.dyn.Resource(api.AddressPoolResource).Get(t.Context(), name, metav1.GetOptions{})
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

// The CRDs' validation: what a user applying a bad resource sees.
func (e *apiEnv) testValidation(t *testing.T) {
	pools := e.dyn.Resource(api.AddressPoolResource)
	for _, tt := range []struct {
		name string
		spec map[string]any
		want []string
	}{
		{"no-spec", nil, []string{"spec: Required value"}},
		{"no-addresses", map[string]any{}, []string{"spec.addresses: Required value"}},
		{"empty-addresses", map[string]any{"addresses": []any{}}, []string{"spec.addresses", "at least 1 items"}},
		{"bad-prefix", map[string]any{"addresses": []any{"10.0.0.0/33"}}, []string{`spec.addresses[0]: Invalid value: "10.0.0.0/33": 10.0.0.0/33 is neither a CIDR (10.99.0.0/28, 2001:db8:99::/120) nor a range of two addresses of one family (10.99.0.10-10.99.0.20)`}},
		{"single-address", map[string]any{"addresses": []any{"10.0.0.1"}}, []string{`spec.addresses[0]: Invalid value: "10.0.0.1": 10.0.0.1 is neither`}},
		{"ipv6-bad-prefix", map[string]any{"addresses": []any{"fd00::/129"}}, []string{`spec.addresses[0]: Invalid value: "fd00::/129": fd00::/129 is neither`}},
		{"mixed-range", map[string]any{"addresses": []any{"10.0.0.1-fd00::1"}}, []string{`10.0.0.1-fd00::1 is neither a CIDR`, "of one family"}},
		{"ipv6-host-bits", map[string]any{"addresses": []any{"fd00::5/120"}}, []string{"the CIDR fd00::5/120 has host bits set: write its network address"}},
		{"too-long", map[string]any{"addresses": []any{"10.0.0.1-10.0.0.2-10.0.0.3-10.0.0.4-10.0.0.5-10.0.0.6-10.0.0.7-10.0.0.8-10.0.0.9-10.0.0.10"}}, []string{"spec.addresses[0]: Too long"}},
		{"host-bits", map[string]any{"addresses": []any{"10.0.0.5/28"}}, []string{"the CIDR 10.0.0.5/28 has host bits set: write its network address, 10.0.0.0/28"}},
		// The network named is this entry's, not a fixed example's.
		{"host-bits-elsewhere", map[string]any{"addresses": []any{"10.99.9.5/28"}}, []string{"the CIDR 10.99.9.5/28 has host bits set: write its network address, 10.99.9.0/28"}},
		{"reversed-range", map[string]any{"addresses": []any{"10.0.0.20-10.0.0.10"}}, []string{"the range 10.0.0.20-10.0.0.10 starts after it ends"}},
		{"duplicate", map[string]any{"addresses": []any{"10.0.0.0/30", "10.0.0.0/30"}}, []string{"spec.addresses[1]: Duplicate value"}},
		{"negative-priority", map[string]any{"addresses": []any{"10.0.0.0/30"}, "serviceAllocation": map[string]any{"priority": -1}},
			[]string{"spec.serviceAllocation.priority", "greater than or equal to 0"}},
		{"bad-namespace", map[string]any{"addresses": []any{"10.0.0.0/30"}, "serviceAllocation": map[string]any{"namespaces": []any{"Not_A_Namespace"}}},
			[]string{"spec.serviceAllocation.namespaces[0]"}},
		{"bad-operator", map[string]any{"addresses": []any{"10.0.0.0/30"}, "serviceAllocation": map[string]any{
			"serviceSelectors": []any{map[string]any{"matchExpressions": []any{map[string]any{"key": "a", "operator": "Near"}}}}}},
			[]string{"operator", `Unsupported value: "Near"`}},
	} {
		u := poolObject("bad-"+tt.name, tt.spec)
		if tt.spec == nil {
			delete(u.Object, "spec")
		}
		_, err := pools.Create(t.Context(), u, metav1.CreateOptions{})
		if err == nil {
			t.Errorf("pool %s: accepted %v", tt.name, tt.spec)
			continue
		}
		if !apierrors.IsInvalid(err) {
			t.Errorf("pool %s: %v, want Invalid", tt.name, err)
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("pool %s: error %q lacks %q", tt.name, err, w)
			}
		}
		t.Logf("pool %s: %v", tt.name, err)
	}

	// The host-bits message names the entry's own network, which the
	// CRD computes in CEL: the same network as Go's, at every length.
	for bits := range 32 {
		entry := fmt.Sprintf("10.250.201.77/%d", bits)
		want := netip.MustParsePrefix(entry).Masked().String()
		_, err := pools.Create(t.Context(), poolObject(fmt.Sprintf("bad-host-bits-%d", bits), map[string]any{"addresses": []any{entry}}), metav1.CreateOptions{})
		if w := "has host bits set: write its network address, " + want; err == nil || !strings.HasSuffix(err.Error(), w) {
			t.Errorf("pool with %s: error %v, want it to end in %q", entry, err, w)
		}
	}

	// A valid pool keeps every field, with autoAssign defaulted.
	ok := poolObject("ok", map[string]any{"addresses": []any{"10.0.0.0/30", "10.0.0.8-10.0.0.9"}, "avoidBuggyIPs": true,
		"serviceAllocation": map[string]any{"priority": 2, "namespaces": []any{"shop"},
			"namespaceSelectors": []any{map[string]any{"matchLabels": map[string]any{"team": "a"}}},
			"serviceSelectors":   []any{map[string]any{"matchExpressions": []any{map[string]any{"key": "tier", "operator": "In", "values": []any{"web"}}}}}}})
	created, err := pools.Create(t.Context(), ok, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var p api.AddressPool
	if err := api.FromUnstructured(created, &p); err != nil {
		t.Fatal(err)
	}
	if !p.Spec.AutoAssigns() || p.Spec.AutoAssign == nil || len(p.Spec.ServiceAllocation.ServiceSelectors[0].MatchExpressions[0].Values) != 1 ||
		p.Spec.ServiceAllocation.Priority != 2 || !p.Spec.AvoidBuggyIPs {
		t.Errorf("pool read back as %+v", p.Spec)
	}
	if err := pools.Delete(t.Context(), "ok", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	peers := e.dyn.Resource(api.BGPPeerResource)
	peer := func(name string, spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": api.Group + "/" + api.Version, "kind": "BGPPeer",
			"metadata": map[string]any{"name": name}, "spec": spec}}
	}
	base := func(extra map[string]any) map[string]any {
		s := map[string]any{"myASN": 65001, "peerASN": 65000, "peerAddress": "10.0.1.1"}
		for k, v := range extra {
			s[k] = v
		}
		return s
	}
	for _, tt := range []struct {
		name string
		spec map[string]any
		want string
	}{
		{"no-asn", map[string]any{"peerASN": 65000, "peerAddress": "10.0.1.1"}, "spec.myASN: Required value"},
		{"asn-zero", base(map[string]any{"myASN": 0}), "spec.myASN: Invalid value: 0"},
		{"asn-too-big", base(map[string]any{"peerASN": int64(4294967296)}), "spec.peerASN: Invalid value: 4294967296"},
		{"bad-address", base(map[string]any{"peerAddress": "10.0.1"}), `spec.peerAddress: Invalid value: "10.0.1": 10.0.1 is not an IPv4 or IPv6 address`},
		{"ipv4-mapped-address", base(map[string]any{"peerAddress": "::ffff:10.0.1.1"}), "is not an IPv4 or IPv6 address"},
		{"bad-port", base(map[string]any{"peerPort": 70000}), "spec.peerPort"},
		{"bad-duration", base(map[string]any{"holdTime": "9 seconds"}), `spec.holdTime: Invalid value: "9 seconds"`},
		{"short-hold-time", base(map[string]any{"holdTime": "2s"}), "must be 0s (no keepalives) or at least 3s"},
		{"bad-multihop", base(map[string]any{"ebgpMultiHop": 256}), "spec.ebgpMultiHop"},
		{"bad-bfd", base(map[string]any{"bfd": map[string]any{"multiplier": 0}}), "spec.bfd.multiplier"},
		{"restart-time-zero", base(map[string]any{"gracefulRestart": map[string]any{"restartTime": "0s"}}), "must be from 1s to 4095s"},
		{"restart-time-too-long", base(map[string]any{"gracefulRestart": map[string]any{"restartTime": "4096s"}}), "must be from 1s to 4095s"},
		{"no-prefix-limit", base(map[string]any{"maxPrefixes": 0}), "spec.maxPrefixes: Invalid value: 0"},
		{"prefix-limit-too-high", base(map[string]any{"maxPrefixes": 100001}), "spec.maxPrefixes: Invalid value: 100001"},
		{"secret-without-name", base(map[string]any{"passwordSecret": map[string]any{"namespace": "x"}}), "spec.passwordSecret.name: Required value"},
	} {
		_, err := peers.Create(t.Context(), peer("bad-"+tt.name, tt.spec), metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("peer %s: error %v, want %q", tt.name, err, tt.want)
		}
	}
	// Every field of BGPPeerSpec survives the API server: nothing is
	// pruned.
	full := base(map[string]any{"peerPort": 1179, "holdTime": "9s", "keepaliveTime": "3s", "ebgpMultiHop": 2, "passive": true, "maxPrefixes": 500,
		"passwordSecret":  map[string]any{"name": "bgp", "namespace": "xlb-system"},
		"bfd":             map[string]any{"minRx": "300ms", "minTx": "300ms", "multiplier": 3},
		"gracefulRestart": map[string]any{"restartTime": "2m0s"},
		"nodeSelectors":   []any{map[string]any{"matchLabels": map[string]any{"xlb.io/lb": "true"}}}})
	var want api.BGPPeer
	if err := api.FromUnstructured(peer("full", full), &want); err != nil {
		t.Fatal(err)
	}
	if _, err := peers.Create(t.Context(), peer("ipv6", base(map[string]any{"peerAddress": "2001:db8::1"})), metav1.CreateOptions{}); err != nil {
		t.Errorf("an IPv6 peer address: %v", err)
	}
	created, err = peers.Create(t.Context(), peer("full", full), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got api.BGPPeer
	if err := api.FromUnstructured(created, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Spec, want.Spec) {
		t.Errorf("BGPPeer read back as %+v, want %+v", got.Spec, want.Spec)
	}
}

func (e *apiEnv) testAllocate(t *testing.T) {
	e.createPool(t, "alloc", map[string]any{"addresses": []any{"10.100.1.0/29"}, "serviceAllocation": map[string]any{"namespaces": []any{"alloc"}}})
	e.createService(t, lbService("alloc", "web"))
	e.waitIngress(t, "alloc", "web", "10.100.1.0")
	e.waitEvent(t, "alloc", "web", EventAllocated, "allocated 10.100.1.0 from address pool \"alloc\"")
	testenv.Eventually(t, waitTime, "annotation", func() (bool, string) {
		v := e.get(t, "alloc", "web").Annotations[api.AnnotationAllocatedFrom]
		return v == "alloc", v
	})
	e.waitPoolStatus(t, "alloc", api.AddressPoolStatus{Family: "IPv4", Size: 8, Assigned: 1, Available: 7})
	e.checkPrinterColumns(t, "alloc", map[string]any{"Addresses": `["10.100.1.0/29"]`, "Family": "IPv4", "Announce": "bgp", "Auto Assign": true,
		"Assigned": int64(1), "Available": int64(7), "Error": nil})

	// Another class's Service, and one without class, are left alone.
	e.createService(t, lbService("alloc", "other", withClass("example.com/lb")))
	e.createService(t, lbService("alloc", "classless", withClass("")))
	e.createService(t, lbService("alloc", "web2"))
	e.waitIngress(t, "alloc", "web2", "10.100.1.1")
	for _, name := range []string{"other", "classless"} {
		if s := e.get(t, "alloc", name); ingressOf(s) != "" || len(s.Annotations) > 0 {
			t.Errorf("%s: ingress %q annotations %v, want none", name, ingressOf(s), s.Annotations)
		}
	}
}

// Twenty Services created at once against a pool of eight: eight get
// distinct addresses, twelve an Event saying the pool is exhausted; as
// Services go, the waiting ones get their addresses.
func (e *apiEnv) testConcurrentCreates(t *testing.T) {
	const n, size = 20, 8
	e.createPool(t, "burst", map[string]any{"addresses": []any{"10.100.2.0/29"}, "serviceAllocation": map[string]any{"namespaces": []any{"burst"}}})
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			_, err := e.client.CoreV1().Services("burst").Create(t.Context(), lbService("burst", fmt.Sprintf("s%02d", i)), metav1.CreateOptions{})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	holders := func() (map[string]string, []string) {
		list, err := e.client.CoreV1().Services("burst").List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		byAddr := map[string]string{}
		var without []string
		for _, s := range list.Items {
			ip := ingressOf(&s)
			if ip == "" {
				without = append(without, s.Name)
				continue
			}
			if other, dup := byAddr[ip]; dup {
				t.Fatalf("%s is the address of both %s and %s", ip, other, s.Name)
			}
			if !netip.MustParsePrefix("10.100.2.0/29").Contains(netip.MustParseAddr(ip)) {
				t.Fatalf("%s got %s, outside its pool", s.Name, ip)
			}
			byAddr[ip] = s.Name
		}
		return byAddr, without
	}
	var without []string
	testenv.Eventually(t, waitTime, "8 addresses given", func() (bool, string) {
		var byAddr map[string]string
		byAddr, without = holders()
		return len(byAddr) == size, fmt.Sprint(byAddr)
	})
	if len(without) != n-size {
		t.Fatalf("%d Services without an address, want %d", len(without), n-size)
	}
	for _, name := range without {
		e.waitEvent(t, "burst", name, EventAllocationFailed, `address pool this Service may use is exhausted: "burst" (8 addresses)`)
	}
	e.waitPoolStatus(t, "burst", api.AddressPoolStatus{Family: "IPv4", Size: 8, Assigned: 8, Available: 0})

	// Three go; three of the waiting get their addresses.
	byAddr, _ := holders()
	var freed []string
	for _, ip := range []string{"10.100.2.1", "10.100.2.4", "10.100.2.6"} {
		e.delete(t, "burst", byAddr[ip])
		freed = append(freed, ip)
	}
	testenv.Eventually(t, waitTime, "the freed addresses given again", func() (bool, string) {
		byAddr, without := holders()
		return len(byAddr) == size && len(without) == n-size-3, fmt.Sprint(byAddr)
	})
	byAddr, _ = holders()
	for _, ip := range freed {
		if !slices.Contains(without, byAddr[ip]) {
			t.Errorf("%s went to %s, which was not waiting", ip, byAddr[ip])
		}
	}
}

// Requested addresses: by annotation, by spec.loadBalancerIP, from a
// named pool; taken, outside every pool.
func (e *apiEnv) testRequests(t *testing.T) {
	ns := map[string]any{"namespaces": []any{"req"}}
	e.createPool(t, "req-auto", map[string]any{"addresses": []any{"10.100.3.0/30"}, "serviceAllocation": ns})
	e.createPool(t, "req-manual", map[string]any{"addresses": []any{"10.100.3.8-10.100.3.11"}, "autoAssign": false, "serviceAllocation": ns})

	e.createService(t, lbService("req", "by-annotation", annotate(api.AnnotationAddresses, "10.100.3.9")))
	e.createService(t, lbService("req", "by-spec", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "10.100.3.2" }))
	e.createService(t, lbService("req", "by-pool", annotate(api.AnnotationPool, "req-manual")))
	e.waitIngress(t, "req", "by-annotation", "10.100.3.9")
	e.waitIngress(t, "req", "by-spec", "10.100.3.2")
	e.waitIngress(t, "req", "by-pool", "10.100.3.8")

	e.createService(t, lbService("req", "taken", annotate(api.AnnotationAddresses, "10.100.3.9")))
	msg := e.waitEvent(t, "req", "taken", EventAllocationFailed, "requested address 10.100.3.9 is taken by Service req/by-annotation")
	t.Logf("taken: %s", msg)
	e.createService(t, lbService("req", "taken-spec", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "10.100.3.2" }))
	e.waitEvent(t, "req", "taken-spec", EventAllocationFailed, "10.100.3.2 is taken by Service req/by-spec")
	e.createService(t, lbService("req", "outside", annotate(api.AnnotationAddresses, "192.0.2.1")))
	msg = e.waitEvent(t, "req", "outside", EventAllocationFailed, "requested address 192.0.2.1 is outside every address pool")
	t.Logf("outside: %s", msg)
	e.createService(t, lbService("shop", "no-pool"))
	msg = e.waitEvent(t, "shop", "no-pool", EventAllocationFailed, "no auto-assign address pool serves this Service")
	t.Logf("no eligible pool: %s", msg)
	for _, name := range []string{"taken", "taken-spec", "outside"} {
		if got := ingressOf(e.get(t, "req", name)); got != "" {
			t.Errorf("%s got %q, want nothing", name, got)
		}
	}

	// The holder lets go of its address: the Service waiting for it
	// gets it.
	e.modify(t, "req", "by-annotation", func(s *corev1.Service) { s.Annotations[api.AnnotationAddresses] = "10.100.3.10" })
	e.waitIngress(t, "req", "by-annotation", "10.100.3.10")
	e.waitIngress(t, "req", "taken", "10.100.3.9")
}

// Deleting a Service, changing its type or its class gives its address
// back, and it is given again.
func (e *apiEnv) testRelease(t *testing.T) {
	e.createPool(t, "rel", map[string]any{"addresses": []any{"10.100.4.0/31"}, "serviceAllocation": map[string]any{"namespaces": []any{"rel"}}})
	e.createService(t, lbService("rel", "s0"))
	e.waitIngress(t, "rel", "s0", "10.100.4.0")
	e.createService(t, lbService("rel", "s1"))
	e.waitIngress(t, "rel", "s1", "10.100.4.1")
	e.createService(t, lbService("rel", "waiting"))
	e.waitEvent(t, "rel", "waiting", EventAllocationFailed, "exhausted")

	s0 := e.get(t, "rel", "s0")
	e.delete(t, "rel", "s0")
	e.waitIngress(t, "rel", "waiting", "10.100.4.0")
	// The deleted Service's Event stays in its namespace, naming it by
	// UID too (a Service of the same name later is another object).
	e.waitEvent(t, "rel", "s0", EventReleased, "released 10.100.4.0: the Service was deleted")
	evs, err := e.client.CoreV1().Events("rel").List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(s0.UID) + ",reason=" + EventReleased})
	if err != nil || len(evs.Items) != 1 || evs.Items[0].InvolvedObject.Kind != "Service" {
		t.Errorf("IPReleased Events of the deleted Service by its UID: %v, %v", evs, err)
	}

	// Type: the API server clears the status and the class; the
	// controller removes its annotation and frees the address.
	e.modify(t, "rel", "s1", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP })
	e.waitEvent(t, "rel", "s1", EventReleased, "released 10.100.4.1")
	testenv.Eventually(t, waitTime, "annotation removed", func() (bool, string) {
		v, ok := e.get(t, "rel", "s1").Annotations[api.AnnotationAllocatedFrom]
		return !ok, v
	})
	e.createService(t, lbService("rel", "s2"))
	e.waitIngress(t, "rel", "s2", "10.100.4.1")

	// Class: it may change only with the type, so through ClusterIP to
	// a LoadBalancer of another class.
	e.modify(t, "rel", "s2", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP })
	e.modify(t, "rel", "s2", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.LoadBalancerClass = ptr("example.com/lb")
	})
	e.createService(t, lbService("rel", "s3"))
	e.waitIngress(t, "rel", "s3", "10.100.4.1")
	if got := ingressOf(e.get(t, "rel", "s2")); got != "" {
		t.Errorf("s2, now of another class, has %q", got)
	}
}

// A pool's deletion leaves its Services their addresses, with a Warning;
// an overlapping pool is refused in its status.
func (e *apiEnv) testPoolGone(t *testing.T) {
	e.createPool(t, "overlap", map[string]any{"addresses": []any{"10.100.1.4-10.100.1.20"}})
	e.waitPoolStatus(t, "overlap", api.AddressPoolStatus{Error: `address pool "overlap": 10.100.1.4-10.100.1.20 overlaps 10.100.1.0/29 of address pool "alloc"; pools must not share addresses: change or remove one of them`})
	e.waitEvent(t, "", "overlap", EventInvalidPool, "overlaps 10.100.1.0/29")
	if err := e.dyn.Resource(api.AddressPoolResource).Delete(t.Context(), "overlap", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.dyn.Resource(api.AddressPoolResource).Delete(t.Context(), "alloc", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitEvent(t, "alloc", "web", EventOutsidePools, "keeps 10.100.1.0, which no address pool contains any more")
	if got := ingressOf(e.get(t, "alloc", "web")); got != "10.100.1.0" {
		t.Errorf("web: %q after its pool went, want to keep 10.100.1.0", got)
	}
	// Back, under another name: the held addresses are not handed out.
	e.createPool(t, "alloc-again", map[string]any{"addresses": []any{"10.100.1.0/29"}, "serviceAllocation": map[string]any{"namespaces": []any{"alloc"}}})
	e.createService(t, lbService("alloc", "web3"))
	e.waitIngress(t, "alloc", "web3", "10.100.1.2")
}

// A pool overlapping Nodes' addresses: they are left out, in the status
// and with an Event; a Service holding one when its Node registers moves,
// one that requested it gives it up; both come back when the Node goes.
func (e *apiEnv) testNodeAddresses(t *testing.T) {
	nodes := e.client.CoreV1().Nodes()
	setAddresses := func(name string, addrs ...corev1.NodeAddress) {
		t.Helper()
		patch, err := json.Marshal(map[string]any{"status": map[string]any{"addresses": addrs}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nodes.Patch(t.Context(), name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			t.Fatal(err)
		}
	}
	// A kubelet registers its Node, then reports its addresses.
	register := func(name string, addrs ...corev1.NodeAddress) {
		t.Helper()
		if _, err := nodes.Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		setAddresses(name, addrs...)
	}
	register("node-a", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.100.6.1"},
		corev1.NodeAddress{Type: corev1.NodeHostName, Address: "node-a"})
	e.createPool(t, "nodes", map[string]any{"addresses": []any{"10.100.6.0/29"}, "serviceAllocation": map[string]any{"namespaces": []any{"nodes"}}})
	e.waitPoolStatus(t, "nodes", api.AddressPoolStatus{Family: "IPv4", Size: 7, Available: 7, NodeAddresses: []api.NodeAddress{
		{Address: "10.100.6.1", Node: "node-a", Type: "InternalIP"}}})
	msg := e.waitEvent(t, "", "nodes", EventNodeAddress, "Services do not get 10.100.6.1 (the InternalIP of Node node-a)")
	t.Logf("pool: %s", msg)

	e.createService(t, lbService("nodes", "s0"))
	e.waitIngress(t, "nodes", "s0", "10.100.6.0")
	e.createService(t, lbService("nodes", "s1"))
	e.waitIngress(t, "nodes", "s1", "10.100.6.2")
	e.createService(t, lbService("nodes", "asks", annotate(api.AnnotationAddresses, "10.100.6.1")))
	msg = e.waitEvent(t, "nodes", "asks", EventAllocationFailed, "requested address 10.100.6.1 is the InternalIP of Node node-a")
	t.Logf("asks: %s", msg)
	e.createService(t, lbService("nodes", "pinned", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "10.100.6.5" }))
	e.waitIngress(t, "nodes", "pinned", "10.100.6.5")

	// Nodes register with s1's and pinned's addresses.
	register("node-b", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.100.6.2"})
	register("node-c", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "192.168.0.3"},
		corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "10.100.6.5"})
	e.waitIngress(t, "nodes", "s1", "10.100.6.3")
	msg = e.waitEvent(t, "nodes", "s1", EventNodeAddress, "moved from 10.100.6.2, the InternalIP of Node node-b, to 10.100.6.3")
	t.Logf("s1: %s", msg)
	e.waitIngress(t, "nodes", "pinned", "")
	msg = e.waitEvent(t, "nodes", "pinned", EventNodeAddress, "gave up 10.100.6.5, the ExternalIP of Node node-c")
	t.Logf("pinned: %s", msg)
	e.waitPoolStatus(t, "nodes", api.AddressPoolStatus{Family: "IPv4", Size: 5, Assigned: 2, Available: 3, NodeAddresses: []api.NodeAddress{
		{Address: "10.100.6.1", Node: "node-a", Type: "InternalIP"}, {Address: "10.100.6.2", Node: "node-b", Type: "InternalIP"},
		{Address: "10.100.6.5", Node: "node-c", Type: "ExternalIP"}}})

	// node-c goes, node-a changes its address: the waiting Services get
	// what they asked for, and the pool is whole but for node-b's.
	if err := nodes.Delete(t.Context(), "node-c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitIngress(t, "nodes", "pinned", "10.100.6.5")
	setAddresses("node-a", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "192.168.0.1"})
	e.waitIngress(t, "nodes", "asks", "10.100.6.1")
	e.waitPoolStatus(t, "nodes", api.AddressPoolStatus{Family: "IPv4", Size: 7, Assigned: 4, Available: 3, NodeAddresses: []api.NodeAddress{
		{Address: "10.100.6.2", Node: "node-b", Type: "InternalIP"}}})
	for _, n := range []string{"node-a", "node-b"} {
		if err := nodes.Delete(t.Context(), n, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.waitPoolStatus(t, "nodes", api.AddressPoolStatus{Family: "IPv4", Size: 8, Assigned: 4, Available: 4})
}

// testAffinityTimeout: a Service with sessionAffinity ClientIP gets a
// Warning Event that says its timeout is not honoured, with the timeout
// the API server filled in, and another when the timeout changes; a
// Service without affinity gets none.
func (e *apiEnv) testAffinityTimeout(t *testing.T) {
	e.createPool(t, "aff", map[string]any{"addresses": []any{"10.100.11.0/30"}, "serviceAllocation": map[string]any{"namespaces": []any{"aff"}}})
	e.createService(t, lbService("aff", "sticky", func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP }))
	e.createService(t, lbService("aff", "plain"))
	e.waitIngress(t, "aff", "sticky", "*")
	e.waitEvent(t, "aff", "sticky", EventAffinityTimeout, "sessionAffinity ClientIP is served without its timeout (sessionAffinityConfig.clientIP.timeoutSeconds: 10800s)")
	e.modify(t, "aff", "sticky", func(s *corev1.Service) {
		s.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds = ptr(int32(60))
	})
	e.waitEvent(t, "aff", "sticky", EventAffinityTimeout, "timeoutSeconds: 60s", "keeps no state per client")
	e.waitIngress(t, "aff", "plain", "*")
	e.waitEvent(t, "aff", "plain", EventAllocated)
	list, err := e.client.CoreV1().Events("aff").List(t.Context(), metav1.ListOptions{FieldSelector: "reason=" + EventAffinityTimeout})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range list.Items {
		if ev.InvolvedObject.Name != "sticky" || ev.Type != corev1.EventTypeWarning {
			t.Errorf("%s Event of type %s on %s, want Warnings on sticky only", EventAffinityTimeout, ev.Type, ev.InvolvedObject.Name)
		}
	}
}

// addresses returns every Service's ingress by "namespace/name". Only
// Services of one namespace with the same sharing key have the same
// address.
func (e *apiEnv) addresses(t *testing.T) map[string]string {
	t.Helper()
	list, err := e.client.CoreV1().Services("").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	seen := map[string]*corev1.Service{}
	for _, s := range list.Items {
		ip := ingressOf(&s)
		if ip == "" {
			continue
		}
		key := s.Namespace + "/" + s.Name
		if other, dup := seen[ip]; dup {
			k := s.Annotations[api.AnnotationSharingKey]
			if k == "" || other.Namespace != s.Namespace || other.Annotations[api.AnnotationSharingKey] != k {
				t.Fatalf("%s is the address of both %s/%s and %s, which may not share it", ip, other.Namespace, other.Name, key)
			}
		}
		seen[ip] = &s
		out[key] = ip
	}
	return out
}

// shared is a Service with a sharing key and ports ("53/UDP").
func shared(key string, ports ...string) func(*corev1.Service) {
	return func(s *corev1.Service) {
		annotate(api.AnnotationSharingKey, key)(s)
		s.Spec.Ports = nil
		for _, p := range ports {
			var n int32
			var proto string
			if _, err := fmt.Sscanf(p, "%d/%s", &n, &proto); err != nil {
				panic(p)
			}
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: strings.ToLower(p[strings.Index(p, "/")+1:]) + fmt.Sprint(n), Port: n, Protocol: corev1.Protocol(proto)})
		}
	}
}

// Services with one sharing key share an address while their ports
// differ; one whose ports clash is refused with an Event and gets the
// address once the clash is gone; a Service that comes to clash gives
// the address up; the address is free only once the last one leaves.
func (e *apiEnv) testSharing(t *testing.T) {
	e.createPool(t, "share", map[string]any{"addresses": []any{"10.100.7.0/30"}, "serviceAllocation": map[string]any{"namespaces": []any{"share", "share2"}}})
	e.createService(t, lbService("share", "dns-udp", shared("dns", "53/UDP")))
	e.waitIngress(t, "share", "dns-udp", "10.100.7.0")
	e.createService(t, lbService("share", "dns-tcp", shared("dns", "53/TCP")))
	e.waitIngress(t, "share", "dns-tcp", "10.100.7.0")
	msg := e.waitEvent(t, "share", "dns-tcp", EventAllocated, `allocated 10.100.7.0 from address pool "share", shared with Service share/dns-udp (sharing key "dns")`)
	t.Logf("dns-tcp: %s", msg)
	// A requested address, by annotation and by spec.loadBalancerIP,
	// with the key.
	e.createService(t, lbService("share", "admin", shared("dns", "8080/TCP"), annotate(api.AnnotationAddresses, "10.100.7.0")))
	e.createService(t, lbService("share", "web", shared("dns", "80/TCP", "443/TCP"), func(s *corev1.Service) { s.Spec.LoadBalancerIP = "10.100.7.0" }))
	e.waitIngress(t, "share", "admin", "10.100.7.0")
	e.waitIngress(t, "share", "web", "10.100.7.0")
	e.waitPoolStatus(t, "share", api.AddressPoolStatus{Family: "IPv4", Size: 4, Assigned: 1, Available: 3})

	// A port in common: refused, with an Event, and no address of its
	// own either.
	e.createService(t, lbService("share", "dns-dup", shared("dns", "53/UDP", "5353/UDP")))
	msg = e.waitEvent(t, "share", "dns-dup", EventAllocationFailed, `the Services with sharing key "dns" in namespace share hold 10.100.7.0`,
		"shared with Service share/dns-udp", "has port 53/UDP too")
	t.Logf("dns-dup: %s", msg)
	// Another key, none, another namespace: addresses of their own.
	e.createService(t, lbService("share", "other-key", shared("other", "53/TCP")))
	e.createService(t, lbService("share2", "same-key", shared("dns", "53/TCP")))
	e.waitIngress(t, "share", "other-key", "10.100.7.1")
	e.waitIngress(t, "share2", "same-key", "10.100.7.2")
	if got := ingressOf(e.get(t, "share", "dns-dup")); got != "" {
		t.Errorf("dns-dup got %q, want nothing", got)
	}

	// admin takes a port of web's: it gives the address up, web keeps it;
	// its port back, it has it again.
	e.modify(t, "share", "admin", func(s *corev1.Service) { s.Spec.Ports[0].Port = 443 })
	e.waitIngress(t, "share", "admin", "")
	msg = e.waitEvent(t, "share", "admin", EventSharingConflict, "gave up 10.100.7.0", "shared with Service share/web", "has port 443/TCP too")
	t.Logf("admin: %s", msg)
	e.modify(t, "share", "admin", func(s *corev1.Service) { s.Spec.Ports[0].Port = 8080 })
	e.waitIngress(t, "share", "admin", "10.100.7.0")

	// dns-udp goes: the address stays with the others, and dns-dup,
	// refused for its port, gets it.
	e.delete(t, "share", "dns-udp")
	e.waitEvent(t, "share", "dns-udp", EventReleased, "released 10.100.7.0: the Service was deleted; the address stays with Service share/admin, share/dns-tcp")
	e.waitIngress(t, "share", "dns-dup", "10.100.7.0")
	// One by one the rest go; until the last, a new Service gets
	// another address, and then this one.
	for _, name := range []string{"dns-dup", "admin", "dns-tcp"} {
		e.delete(t, "share", name)
	}
	e.createService(t, lbService("share", "newcomer"))
	e.waitIngress(t, "share", "newcomer", "10.100.7.3")
	e.waitPoolStatus(t, "share", api.AddressPoolStatus{Family: "IPv4", Size: 4, Assigned: 4, Available: 0})
	e.delete(t, "share", "web")
	e.waitEvent(t, "share", "web", EventReleased, "released 10.100.7.0: the Service was deleted")
	e.waitPoolStatus(t, "share", api.AddressPoolStatus{Family: "IPv4", Size: 4, Assigned: 3, Available: 1})
	e.createService(t, lbService("share", "last", shared("dns", "53/UDP")))
	e.waitIngress(t, "share", "last", "10.100.7.0")

	// For the restart: a shared pair stays.
	e.delete(t, "share", "newcomer")
	e.createService(t, lbService("share", "keep-tcp", shared("dns", "53/TCP")))
	e.waitIngress(t, "share", "keep-tcp", "10.100.7.0")
}

// externalTrafficPolicy Local is accepted and said to change nothing,
// with the healthCheckNodePort that Kubernetes allocated for it; Cluster
// gets no such Event.
func (e *apiEnv) testTrafficPolicy(t *testing.T) {
	e.createService(t, lbService("policy", "cluster", func(s *corev1.Service) {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	}))
	e.createService(t, lbService("policy", "local", func(s *corev1.Service) {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}))
	hc := e.get(t, "policy", "local").Spec.HealthCheckNodePort
	if hc == 0 {
		t.Fatal("the API server allocated no healthCheckNodePort for the Local Service")
	}
	msg := e.waitEvent(t, "policy", "local", EventTrafficPolicy, "externalTrafficPolicy Local changes nothing with xlb",
		"with the client's address", fmt.Sprintf("The healthCheckNodePort %d is not used", hc))
	t.Logf("local: %s", msg)
	// Both were looked at (no pool serves the namespace).
	e.waitEvent(t, "policy", "cluster", EventAllocationFailed, "no auto-assign address pool")
	evs, err := e.client.CoreV1().Events("policy").List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=cluster,reason=" + EventTrafficPolicy})
	if err != nil || len(evs.Items) != 0 {
		t.Errorf("Events %s on the Cluster Service: %v, %v; want none", EventTrafficPolicy, evs, err)
	}
}

// A DenyList's status says how many of its prefixes the nodes enforce;
// the schema refuses what it can see on its own.
func (e *apiEnv) testDenyLists(t *testing.T) {
	lists := e.dyn.Resource(api.DenyListResource)
	create := func(name string, prefixes ...any) error {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": api.Group + "/" + api.Version, "kind": "DenyList",
			"metadata": map[string]any{"name": name}, "spec": map[string]any{"prefixes": prefixes},
		}}
		_, err := lists.Create(t.Context(), u, metav1.CreateOptions{})
		return err
	}
	for _, tc := range []struct {
		entry string
		want  string
	}{
		{"10.0.0.1/8", "the CIDR 10.0.0.1/8 has host bits set: write its network address, 10.0.0.0/8"},
		{"2001:db8::1/32", "the CIDR 2001:db8::1/32 has host bits set: write its network address"},
		{"attackers", "attackers is not a CIDR"},
		{"10.0.0.0/33", "10.0.0.0/33 is not a CIDR"},
	} {
		err := create("bad", "192.0.2.0/24", tc.entry)
		if err == nil || !strings.Contains(err.Error(), "spec.prefixes[1]") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("DenyList with %q: %v; want it refused at spec.prefixes[1] with %q", tc.entry, err, tc.want)
		}
	}
	if err := create("attackers", "192.0.2.0/24", "198.51.100.0/24", "192.0.2.128/25"); err != nil {
		t.Fatal(err)
	}
	waitStatus := func(name string, want api.DenyListStatus) {
		t.Helper()
		testenv.Eventually(t, waitTime, "status of DenyList "+name, func() (bool, string) {
			u, err := lists.Get(t.Context(), name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			var dl api.DenyList
			if err := api.FromUnstructured(u, &dl); err != nil {
				return false, err.Error()
			}
			return reflect.DeepEqual(dl.Status, want), fmt.Sprintf("%+v", dl.Status)
		})
	}
	waitStatus("attackers", api.DenyListStatus{Prefixes: 3})
	patch := []byte(`{"spec":{"prefixes":["203.0.113.0/24"]}}`)
	if _, err := lists.Patch(t.Context(), "attackers", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitStatus("attackers", api.DenyListStatus{Prefixes: 1})
}

// A Service whose source ranges xlb cannot enforce gets a Warning Event
// saying why its nodes leave it out.
func (e *apiEnv) testSourceRanges(t *testing.T) {
	e.createService(t, lbService("policy", "v6-only", func(s *corev1.Service) {
		s.Spec.LoadBalancerSourceRanges = []string{"2001:db8::/32"}
	}))
	e.createService(t, lbService("policy", "ranged", func(s *corev1.Service) {
		s.Spec.LoadBalancerSourceRanges = []string{"10.0.0.0/8"}
	}))
	e.waitEvent(t, "policy", "v6-only", EventInvalidSourceRanges, "spec.loadBalancerSourceRanges holds IPv6 ranges only",
		"the xlb nodes do not serve the Service until this is corrected")
	e.waitEvent(t, "policy", "ranged", EventAllocationFailed)
	evs, err := e.client.CoreV1().Events("policy").List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=ranged,reason=" + EventInvalidSourceRanges})
	if err != nil || len(evs.Items) != 0 {
		t.Errorf("Events %s on a Service with good ranges: %v, %v; want none", EventInvalidSourceRanges, evs, err)
	}
}

// writers returns the field managers that wrote any Service's status.
func (e *apiEnv) writers(t *testing.T) []string {
	t.Helper()
	list, err := e.client.CoreV1().Services("").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range list.Items {
		for _, mf := range s.ManagedFields {
			if strings.HasPrefix(mf.Manager, "xlb-") && !slices.Contains(out, mf.Manager) {
				out = append(out, mf.Manager)
			}
		}
	}
	slices.Sort(out)
	return out
}

func (e *apiEnv) leaseHolder(t *testing.T) string {
	t.Helper()
	l, err := e.client.CoordinationV1().Leases(leaseNamespace).Get(t.Context(), leaseName, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	return holder(l)
}

func holder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// A new instance after a stop moves no address; with two instances only
// the leader writes; when it stops the other takes over, again moving
// nothing.
func (e *apiEnv) testRestartAndTwoInstances(t *testing.T, a *instance) *instance {
	before := e.addresses(t)
	if len(before) < 15 {
		t.Fatalf("only %d Services with addresses before the restart", len(before))
	}
	a.stop(t)
	if h := e.leaseHolder(t); h != "" {
		t.Errorf("the Lease names %q after a stopped, want nobody (released)", h)
	}
	// Created while no controller runs: a Service of its own, and one
	// that shares the address of testSharing's pair (the new controller
	// must know them as sharers, with their ports).
	e.createPool(t, "restart", map[string]any{"addresses": []any{"10.100.5.0/29"}, "serviceAllocation": map[string]any{"namespaces": []any{"restart"}}})
	e.createService(t, lbService("restart", "while-down"))
	sharing := before["share/keep-tcp"] != ""
	if sharing {
		e.createService(t, lbService("share", "keep-web", shared("dns", "80/TCP")))
		e.createService(t, lbService("share", "keep-clash", shared("dns", "53/UDP")))
	}

	b := e.startInstance("b")
	e.waitIngress(t, "restart", "while-down", "10.100.5.0")
	newServices := 1.0
	if sharing {
		e.waitIngress(t, "share", "keep-web", "10.100.7.0")
		e.waitEvent(t, "share", "keep-clash", EventAllocationFailed, "shared with Service share/last", "has port 53/UDP too")
		newServices = 2
	}
	after := e.addresses(t)
	for key, ip := range before {
		if after[key] != ip {
			t.Errorf("%s: %s before the restart, %q after", key, ip, after[key])
		}
	}
	testenv.Eventually(t, waitTime, "b's allocations", func() (bool, string) {
		got := value(b.metrics.allocations)
		return got == newServices, fmt.Sprintf("%v (want %v: only the new Services)", got, newServices)
	})

	// A second instance: it waits; b keeps writing.
	c := e.startInstance("c")
	time.Sleep(time.Second) // c's campaign is under way
	e.createService(t, lbService("restart", "two-running"))
	e.waitIngress(t, "restart", "two-running", "10.100.5.1")
	if h := e.leaseHolder(t); h != "b" {
		t.Errorf("lease holder %q, want b", h)
	}
	if w := e.writers(t); slices.Contains(w, "xlb-c") {
		t.Errorf("the standby instance wrote: field managers %v", w)
	}
	if got := value(c.metrics.leader); got != 0 {
		t.Errorf("c's leader gauge %v, want 0", got)
	}

	// b stops: c takes over, moves nothing, serves new Services.
	before = e.addresses(t)
	b.stop(t)
	testenv.Eventually(t, waitTime, "c leads", func() (bool, string) {
		h := e.leaseHolder(t)
		return h == "c", h
	})
	e.createService(t, lbService("restart", "after-handover"))
	e.waitIngress(t, "restart", "after-handover", "10.100.5.2")
	after = e.addresses(t)
	for key, ip := range before {
		if after[key] != ip {
			t.Errorf("%s: %s before the handover, %q after", key, ip, after[key])
		}
	}
	if w := e.writers(t); !slices.Contains(w, "xlb-c") || !slices.Contains(w, "xlb-b") {
		t.Errorf("field managers %v, want xlb-b and xlb-c among them", w)
	}
	return c
}

// `xlb controller` itself: it waits while c leads, takes over when c
// stops, serves /healthz and /metrics, and on SIGTERM exits 0 and
// releases the Lease.
func (e *apiEnv) testBinary(t *testing.T, kubeconfig string, c *instance) {
	bin, remove, err := testenv.BuildXLB()
	if err != nil {
		t.Fatal(err)
	}
	defer remove()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "controller", "--kubeconfig", kubeconfig, "--namespace", leaseNamespace, "--lease-name", leaseName,
		"--identity", "bin", "--metrics-addr", addr, "--lease-duration", "2s", "--renew-deadline", "1500ms", "--retry-period", "200ms",
		"--log-format", "json")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("xlb controller output:\n%s", out.String())
		}
	}()
	get := func(path string) (string, error) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return string(body), err
	}
	testenv.Eventually(t, waitTime, "standby /healthz", func() (bool, string) {
		body, err := get("/healthz")
		return body == "ok: standby\n", fmt.Sprint(body, err)
	})
	c.stop(t)
	testenv.Eventually(t, waitTime, "the binary leads", func() (bool, string) {
		h := e.leaseHolder(t)
		return h == "bin", h
	})
	e.createService(t, lbService("restart", "by-binary"))
	e.waitIngress(t, "restart", "by-binary", "10.100.5.3")
	body, err := get("/healthz")
	if body != "ok: leading\n" {
		t.Errorf("/healthz: %q %v, want ok: leading", body, err)
	}
	testenv.Eventually(t, waitTime, "metrics", func() (bool, string) {
		body, err := get("/metrics")
		ok := strings.Contains(body, "xlb_controller_leader 1") && strings.Contains(body, "xlb_controller_allocations_total 1") &&
			strings.Contains(body, `xlb_controller_pool_addresses{pool="restart"} 8`) && strings.Contains(body, `xlb_controller_pool_addresses_assigned{pool="restart"} 4`)
		return ok, fmt.Sprint(body, err)
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("xlb controller exited with %v after SIGTERM, want 0", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("xlb controller still runs 20 s after SIGTERM")
	}
	if h := e.leaseHolder(t); h != "" {
		t.Errorf("lease holder %q after the binary stopped, want nobody (released)", h)
	}
}

// checkPrinterColumns reads the pool as kubectl get does (a Table) and
// checks the named cells.
func (e *apiEnv) checkPrinterColumns(t *testing.T, pool string, want map[string]any) {
	t.Helper()
	raw, err := e.client.Discovery().RESTClient().Get().
		AbsPath("/apis", api.Group, api.Version, api.AddressPoolResource.Resource, pool).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	if len(table.Rows) != 1 {
		t.Fatalf("%d rows, want 1", len(table.Rows))
	}
	cells := map[string]any{}
	for i, c := range table.ColumnDefinitions {
		cells[c.Name] = table.Rows[0].Cells[i]
	}
	for name, w := range want {
		got, ok := cells[name]
		if !ok {
			t.Errorf("no column %q in %v", name, cells)
			continue
		}
		if fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("column %q = %v (%T), want %v", name, got, got, w)
		}
	}
}
