package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/action"
	helmkube "helm.sh/helm/v4/pkg/kube"
	ri "helm.sh/helm/v4/pkg/release"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/util/retry"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/k8s/api"
	"github.com/xlbproject/xlb/internal/k8s/source"
	"github.com/xlbproject/xlb/testbed/k8stest"
)

// fieldManager names the test's server-side applies.
const fieldManager = "xlb-deploy-test"

// Bounds of the waits for the control plane's controllers, generous for
// a loaded 2-core machine.
const (
	establishTimeout = 30 * time.Second
	podsTimeout      = 90 * time.Second
	pollInterval     = 200 * time.Millisecond
)

// kube is an admin connection to the control plane.
type kube struct {
	cfg    *rest.Config
	cs     kubernetes.Interface
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func connect(t *testing.T, cp *k8stest.ControlPlane) *kube {
	t.Helper()
	cfg := &rest.Config{
		Host:            cp.Server,
		BearerToken:     cp.Token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: cp.CAFile},
		QPS:             100,
		Burst:           200,
		// PodSecurity warnings for the negative checks are expected.
		WarningHandler: rest.NoWarnings{},
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &kube{cfg: cfg, cs: cs, dyn: dyn,
		mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cs.Discovery()))}
}

// as returns a client that impersonates a ServiceAccount.
func (k *kube) as(t *testing.T, namespace, name string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(k.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: saUser(namespace, name), Groups: saGroups(namespace)}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func saUser(namespace, name string) string { return "system:serviceaccount:" + namespace + ":" + name }

func saGroups(namespace string) []string {
	return []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
}

// resource maps an object to its resource client, as kubectl does; a kind
// the discovery cache does not know yet (a CRD just established) makes it
// look again once.
func (k *kube) resource(o object) (dynamic.ResourceInterface, error) {
	gvk := o.GroupVersionKind()
	m, err := k.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		k.mapper.Reset()
		m, err = k.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return nil, err
	}
	if m.Scope.Name() != meta.RESTScopeNameNamespace {
		if o.GetNamespace() != "" {
			return nil, fmt.Errorf("%s is cluster-scoped but names namespace %q", gvk.Kind, o.GetNamespace())
		}
		return k.dyn.Resource(m.Resource), nil
	}
	if o.GetNamespace() == "" {
		return nil, fmt.Errorf("%s is namespaced but names no namespace: it would land in the user's current namespace", gvk.Kind)
	}
	return k.dyn.Resource(m.Resource).Namespace(o.GetNamespace()), nil
}

// apply server-side applies every object in order, as
// `kubectl apply --server-side` would, and returns every failure.
func (k *kube) apply(ctx context.Context, objs []object) error {
	var errs []error
	for _, o := range objs {
		r, err := k.resource(o)
		if err == nil {
			_, err = r.Apply(ctx, o.GetName(), o.Unstructured, metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %s: %w", o.from, o.key(), err))
		}
	}
	return errors.Join(errs...)
}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// waitEstablished waits until every CRD among objs is Established.
func (k *kube) waitEstablished(ctx context.Context, objs []object) error {
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" {
			continue
		}
		var last string
		err := wait.PollUntilContextTimeout(ctx, pollInterval, establishTimeout, true, func(ctx context.Context) (bool, error) {
			u, err := k.dyn.Resource(crdResource).Get(ctx, o.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			last = fmt.Sprint(conds)
			for _, c := range conds {
				if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s not Established within %s (conditions %s): %w", o.GetName(), establishTimeout, last, err)
		}
	}
	k.mapper.Reset()
	return nil
}

// TestInstallOnAPIServer applies the install (`kubectl apply -f crds/
// -f .`) to a real kube-apiserver, with kube-controller-manager turning the
// workloads into Pods, and checks what an operator relies on: everything
// is accepted, the Pods are admitted, each ServiceAccount can do its job
// and no more, the examples are valid, invalid pools and peers are
// refused with a useful message, and Helm installs the chart as a second
// release and upgrades it.
func TestInstallOnAPIServer(t *testing.T) {
	files, err := installFiles()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := readObjects(files...)
	if err != nil {
		t.Fatal(err)
	}
	cp := k8stest.StartT(t, k8stest.Options{})
	k := connect(t, cp)
	ctx := t.Context()
	if err := k.apply(ctx, objs); err != nil {
		t.Fatalf("the API server refused the install:\n%v", err)
	}
	if err := k.waitEstablished(ctx, objs); err != nil {
		t.Fatal(err)
	}
	// A second apply changes nothing and must pass too: upgrades re-apply.
	if err := k.apply(ctx, objs); err != nil {
		t.Fatalf("re-applying the install: %v", err)
	}

	t.Run("PodsAdmitted", func(t *testing.T) { testPodsAdmitted(t, k, objs) })
	t.Run("ControllerRestricted", func(t *testing.T) { testControllerRestricted(t, k, objs) })
	t.Run("RBAC", func(t *testing.T) { testRBAC(t, k, "xlb-system", "xlb", "xlb-controller", "") })
	t.Run("StatusWrite", func(t *testing.T) { testStatusWrite(t, k) })
	t.Run("Examples", func(t *testing.T) { testExamples(t, k) })
	t.Run("PrinterColumns", func(t *testing.T) { testPrinterColumns(t, k) })
	t.Run("InvalidResources", func(t *testing.T) { testInvalidResources(t, k) })
	t.Run("HelmRelease", func(t *testing.T) { testHelmRelease(t, k) })
}

// The controllers turn the workloads into Pods, which pass admission
// (ServiceAccounts, priority classes, Pod Security): the agent on the
// labelled node only, the backend on every node, two controllers.
func testPodsAdmitted(t *testing.T, k *kube, objs []object) {
	ctx := t.Context()
	nodes := []struct {
		name   string
		labels map[string]string
	}{
		{"lb-1", map[string]string{"xlb.io/lb-node": "true"}},
		{"worker-1", nil},
	}
	for _, n := range nodes {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: n.labels}}
		if _, err := k.cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Admission taints a new Node not-ready until its kubelet
		// reports Ready and the node lifecycle controller lifts the
		// taint; with neither here, the test lifts it. Controllers
		// update the Node meanwhile, hence the retry on conflict.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			node, err := k.cs.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady })
			_, err = k.cs.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatalf("node %s: lift the not-ready taint: %v", n.name, err)
		}
	}
	want := map[string][]string{ // component → nodes ("" for unscheduled)
		"agent":      {"lb-1"},
		"backend":    {"lb-1", "worker-1"},
		"controller": {"", ""},
	}
	got := map[string][]string{}
	err := wait.PollUntilContextTimeout(ctx, pollInterval, podsTimeout, true, func(ctx context.Context) (bool, error) {
		pods, err := k.cs.CoreV1().Pods("xlb-system").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		got = map[string][]string{}
		for _, p := range pods.Items {
			c := p.Labels["app.kubernetes.io/component"]
			got[c] = append(got[c], podNode(p))
		}
		for c := range got {
			slices.Sort(got[c])
		}
		return fmt.Sprint(got) == fmt.Sprint(want), nil
	})
	if err != nil {
		t.Errorf("pods in xlb-system by component and node: %v, want %v (%v)", got, want, err)
		logEvents(t, k, "xlb-system")
		logDaemonSets(t, k, "xlb-system")
	}
	// Each pod runs as its component's ServiceAccount.
	pods, err := k.cs.CoreV1().Pods("xlb-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if want := "xlb-" + p.Labels["app.kubernetes.io/component"]; p.Spec.ServiceAccountName != want {
			t.Errorf("pod %s runs as %q, want %q", p.Name, p.Spec.ServiceAccountName, want)
		}
		// What TestPodSecurity checks in the manifests reaches the Pods.
		if sc := p.Spec.SecurityContext; sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("pod %s: securityContext %+v, want seccompProfile RuntimeDefault", p.Name, sc)
		}
	}
}

// podNode is the node a DaemonSet pod is bound to: the controller pins it
// through node affinity, as no scheduler runs here.
func podNode(p corev1.Pod) string {
	if p.Spec.NodeName != "" {
		return p.Spec.NodeName
	}
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, f := range term.MatchFields {
			if f.Key == "metadata.name" && len(f.Values) == 1 {
				return f.Values[0]
			}
		}
	}
	return ""
}

func logEvents(t *testing.T, k *kube, namespace string) {
	t.Helper()
	evs, err := k.cs.CoreV1().Events(namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Logf("events of %s: %v", namespace, err)
		return
	}
	for _, e := range evs.Items {
		t.Logf("event %s %s/%s: %s: %s", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
	}
}

// The controller's pod passes the "restricted" Pod Security Standard; the
// agent's does not (the negative control: the check can fail).
func testControllerRestricted(t *testing.T, k *kube, objs []object) {
	ctx := t.Context()
	const ns = "restricted-check"
	n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
	}}}
	if _, err := k.cs.CoreV1().Namespaces().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Pods run as the namespace's default ServiceAccount, once it exists.
	err := wait.PollUntilContextTimeout(ctx, pollInterval, establishTimeout, true, func(ctx context.Context) (bool, error) {
		_, err := k.cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("no default ServiceAccount in %s: %v", ns, err)
	}
	pods := k.dyn.Resource(corev1.SchemeGroupVersion.WithResource("pods")).Namespace(ns)
	for _, tc := range []struct {
		workload string
		allowed  bool
	}{
		{"Deployment xlb-system/xlb-controller", true},
		{"DaemonSet xlb-system/xlb-agent", false},
	} {
		i := slices.IndexFunc(objs, func(o object) bool { return o.key() == tc.workload })
		if i < 0 {
			t.Fatalf("no %s in the install", tc.workload)
		}
		spec, ok, err := unstructured.NestedMap(objs[i].Object, "spec", "template", "spec")
		if !ok || err != nil {
			t.Fatalf("%s has no pod template: %v", tc.workload, err)
		}
		delete(spec, "serviceAccountName")
		pod := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": "check", "namespace": ns},
			"spec":     spec,
		}}
		_, err = pods.Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case tc.allowed && err != nil:
			t.Errorf("%s's pod is refused under the restricted Pod Security Standard: %v", tc.workload, err)
		case !tc.allowed && (err == nil || !strings.Contains(err.Error(), "violates PodSecurity")):
			t.Errorf("%s's pod under the restricted Pod Security Standard: got %v, want a PodSecurity violation", tc.workload, err)
		}
	}
}

// access is one request a ServiceAccount may or may not make.
type access struct {
	sa                         string // component: controller, agent, backend
	verb, group, resource, sub string
	namespace, name            string
	allowed                    bool
}

// testRBAC checks the grants of the release's ServiceAccounts (prefix
// "xlb" for deploy/) in namespace ns, with the leader Lease lease and the
// BGP password Secret secret the agent may read ("": none), by
// SubjectAccessReviews.
func testRBAC(t *testing.T, k *kube, ns, prefix, lease, secret string) {
	for _, a := range rbacTable(ns, lease, secret) {
		user := saUser(ns, prefix+"-"+a.sa)
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   user,
			Groups: saGroups(ns),
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: a.namespace, Verb: a.verb, Group: a.group,
				Resource: a.resource, Subresource: a.sub, Name: a.name,
			},
		}}
		res, err := k.cs.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status.Allowed != a.allowed {
			what := a.resource
			if a.sub != "" {
				what += "/" + a.sub
			}
			if a.group != "" {
				what += "." + a.group
			}
			where := "cluster-wide"
			if a.namespace != "" {
				where = "in " + a.namespace
			}
			t.Errorf("%s: %s %s %s %s: allowed=%v, want %v (%s)", user, a.verb, what, a.name, where, res.Status.Allowed, a.allowed, res.Status.Reason)
		}
	}
}

func rbacTable(ns, lease, secret string) []access {
	const xlb, disc, coord = "xlb.io", "discovery.k8s.io", "coordination.k8s.io"
	// The agent reads its password Secrets by name only (a list or
	// watch with the field selector metadata.name carries the name).
	named := secret != ""
	if !named {
		secret = "bgp"
	}
	return []access{
		// The controller: Services, their status and annotations,
		// Namespaces, pools and their status, Events, its Lease.
		{"controller", "list", "", "services", "", "", "", true},
		{"controller", "watch", "", "services", "", "", "", true},
		{"controller", "patch", "", "services", "status", "shop", "web", true},
		{"controller", "patch", "", "services", "", "shop", "web", true},
		{"controller", "update", "", "services", "", "shop", "web", false},
		{"controller", "watch", "", "namespaces", "", "", "", true},
		{"controller", "watch", "", "nodes", "", "", "", true},
		{"controller", "get", "", "nodes", "", "", "n", true},
		{"controller", "watch", disc, "endpointslices", "", "", "", true},
		{"controller", "update", disc, "endpointslices", "", "shop", "web", false},
		{"controller", "watch", xlb, "addresspools", "", "", "", true},
		{"controller", "patch", xlb, "addresspools", "status", "", "p", true},
		{"controller", "create", "", "events", "", "shop", "", true},
		{"controller", "create", coord, "leases", "", ns, "", true},
		{"controller", "get", coord, "leases", "", ns, lease, true},
		{"controller", "update", coord, "leases", "", ns, lease, true},
		{"controller", "update", coord, "leases", "", ns, "someone-else", false},
		{"controller", "create", coord, "leases", "", "shop", "", false},
		{"controller", "get", "", "secrets", "", ns, "bgp", false},
		{"controller", "list", "", "secrets", "", "", "", false},
		{"controller", "create", "", "services", "", "shop", "", false},
		{"controller", "delete", "", "services", "", "shop", "web", false},
		{"controller", "update", xlb, "addresspools", "", "", "p", false},
		{"controller", "watch", xlb, "denylists", "", "", "", true},
		{"controller", "patch", xlb, "denylists", "status", "", "d", true},
		{"controller", "update", xlb, "denylists", "", "", "d", false},
		{"controller", "list", xlb, "bgppeers", "", "", "", true},
		{"controller", "watch", xlb, "bgpadvertisements", "", "", "", true},
		{"controller", "patch", xlb, "bgpadvertisements", "status", "", "a", true},
		{"controller", "update", xlb, "bgpadvertisements", "", "", "a", false},
		{"controller", "list", "", "pods", "", "", "", false},
		{"controller", "update", "", "nodes", "", "", "n", false},
		// The agent: reads Services, slices, Nodes, peers, pools, and the
		// Secrets of its own namespace; writes its node's entries of the
		// BGPPeers' status and layer-2 mode's Leases, nothing else.
		{"agent", "watch", "", "services", "", "", "", true},
		{"agent", "watch", disc, "endpointslices", "", "", "", true},
		{"agent", "watch", "", "nodes", "", "", "", true},
		{"agent", "watch", xlb, "bgppeers", "", "", "", true},
		{"agent", "watch", xlb, "denylists", "", "", "", true},
		{"agent", "patch", xlb, "denylists", "status", "", "d", false},
		{"agent", "get", "", "secrets", "", ns, secret, named},
		{"agent", "list", "", "secrets", "", ns, secret, named},
		{"agent", "watch", "", "secrets", "", ns, secret, named},
		{"agent", "get", "", "secrets", "", ns, "another", false},
		{"agent", "watch", "", "secrets", "", ns, "another", false},
		{"agent", "list", "", "secrets", "", ns, "", false},
		{"agent", "watch", "", "secrets", "", ns, "", false},
		{"agent", "get", "", "secrets", "", "shop", secret, false},
		{"agent", "list", "", "secrets", "", "", "", false},
		{"agent", "update", "", "services", "status", "shop", "web", false},
		{"agent", "update", "", "services", "", "shop", "web", false},
		{"agent", "patch", "", "nodes", "", "", "n", false},
		{"agent", "update", xlb, "bgppeers", "", "", "p", false},
		{"agent", "patch", xlb, "bgppeers", "status", "", "p", true},
		{"agent", "patch", xlb, "bgppeers", "", "", "p", false},
		{"agent", "list", xlb, "addresspools", "", "", "", true},
		{"agent", "watch", xlb, "bgpadvertisements", "", "", "", true},
		{"agent", "patch", xlb, "bgpadvertisements", "status", "", "a", false},
		// Layer-2 mode: which pools announce by ARP, and the Leases of
		// its election in the agent's namespace alone.
		{"agent", "watch", xlb, "addresspools", "", "", "", true},
		{"agent", "patch", xlb, "addresspools", "status", "", "p", false},
		{"agent", "create", coord, "leases", "", ns, "", true},
		{"agent", "update", coord, "leases", "", ns, "xlb-l2-node-worker-1", true},
		{"agent", "delete", coord, "leases", "", ns, "xlb-l2-vip-10-99-0-1", true},
		{"agent", "watch", coord, "leases", "", ns, "", true},
		{"agent", "create", coord, "leases", "", "kube-node-lease", "", false},
		{"agent", "update", coord, "leases", "", "kube-node-lease", "worker-1", false},
		{"agent", "create", "", "events", "", "shop", "", false},
		// The backend: reads Services, slices and Nodes (daisy
		// chaining), nothing else.
		{"backend", "watch", "", "services", "", "", "", true},
		{"backend", "watch", disc, "endpointslices", "", "", "", true},
		{"backend", "get", "", "secrets", "", ns, "bgp", false},
		{"backend", "watch", "", "nodes", "", "", "", true},
		{"backend", "update", "", "nodes", "status", "", "worker-1", false},
		{"backend", "list", xlb, "bgppeers", "", "", "", false},
		{"backend", "list", xlb, "denylists", "", "", "", false},
		{"backend", "update", "", "services", "status", "shop", "web", false},
		{"backend", "create", "", "events", "", "shop", "", false},
	}
}

// Real requests under each identity, merge patches as the controller
// sends them: the controller writes an address into a Service's status
// and its allocated-from annotation; the agent and the backend may not;
// the agent reads its namespace's Secrets and no others.
func testStatusWrite(t *testing.T, k *kube) {
	ctx := t.Context()
	class := "xlb.io/lb"
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{
			Type:              corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass: &class,
			Ports:             []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}},
		},
	}
	if _, err := k.cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	status := []byte(`{"status":{"loadBalancer":{"ingress":[{"ip":"10.99.0.1"}]}}}`)
	annotation := []byte(`{"metadata":{"annotations":{"xlb.io/allocated-from":"default"}}}`)
	for _, sa := range []string{"agent", "backend"} {
		c := k.as(t, "xlb-system", "xlb-"+sa).CoreV1().Services("default")
		if _, err := c.Patch(ctx, "web", types.MergePatchType, status, metav1.PatchOptions{}, "status"); !apierrors.IsForbidden(err) {
			t.Errorf("xlb-%s writing a Service's status: got %v, want Forbidden", sa, err)
		}
		if _, err := c.Patch(ctx, "web", types.MergePatchType, annotation, metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("xlb-%s annotating a Service: got %v, want Forbidden", sa, err)
		}
	}
	c := k.as(t, "xlb-system", "xlb-controller").CoreV1().Services("default")
	got, err := c.Patch(ctx, "web", types.MergePatchType, status, metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatalf("xlb-controller writing a Service's status: %v", err)
	}
	if ing := got.Status.LoadBalancer.Ingress; len(ing) != 1 || ing[0].IP != "10.99.0.1" {
		t.Errorf("status after the controller's write: %+v", got.Status.LoadBalancer)
	}
	if _, err := c.Patch(ctx, "web", types.MergePatchType, annotation, metav1.PatchOptions{}); err != nil {
		t.Errorf("xlb-controller annotating a Service: %v", err)
	}

	// The install names no password Secret: the agent reads none.
	agent := k.as(t, "xlb-system", "xlb-agent")
	if _, err := agent.CoreV1().Secrets("xlb-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("xlb-agent listing the Secrets of xlb-system: got %v, want Forbidden", err)
	}
	if _, err := agent.CoreV1().Secrets("xlb-system").Get(ctx, "bgp-tor", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("xlb-agent reading Secret xlb-system/bgp-tor, which the install does not name: got %v, want Forbidden", err)
	}
	if _, err := agent.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("xlb-agent listing the Secrets of default: got %v, want Forbidden", err)
	}
	if _, err := k.as(t, "xlb-system", "xlb-controller").CoreV1().Secrets("xlb-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("xlb-controller listing Secrets: got %v, want Forbidden", err)
	}
}

// The examples of 50-example.yaml, commented in, are valid objects.
func testExamples(t *testing.T, k *kube) {
	data, err := os.ReadFile("50-example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeObjects("50-example.yaml (uncommented)", uncommentExamples(data))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, o := range objs {
		kinds[o.GetKind()] = true
	}
	if !kinds["AddressPool"] || !kinds["BGPPeer"] || !kinds["DenyList"] {
		t.Fatalf("50-example.yaml: want an AddressPool, a BGPPeer and a DenyList, got %v", kinds)
	}
	if err := k.apply(t.Context(), objs); err != nil {
		t.Errorf("the examples are refused:\n%v", err)
	}
}

// edgeValues are the values of release "edge" at its install.
var edgeValues = map[string]any{
	"serveClassless":   true,
	"controller":       map[string]any{"replicas": 1, "leaseName": "edge-controller", "priorityClassName": "system-cluster-critical"},
	"agent":            map[string]any{"interface": "bond0"},
	"backend":          map[string]any{"nodeSelector": map[string]any{"kubernetes.io/os": "linux"}},
	"imagePullSecrets": []any{map[string]any{"name": "registry"}},
	"addressPools": []any{map[string]any{"name": "edge-pool", "spec": map[string]any{
		"addresses": []any{"10.98.0.0/28"},
	}}},
	"bgpPeers": []any{map[string]any{"name": "edge-tor", "spec": map[string]any{
		"myASN": 65001, "peerASN": 65000, "peerAddress": "10.0.9.1",
		"passwordSecret": map[string]any{"name": "edge-tor-password"},
	}}},
	"bgpAdvertisements": []any{map[string]any{"name": "edge-to-tor", "spec": map[string]any{
		"addressPools": []any{"edge-pool"}, "peers": []any{"edge-tor"}, "communities": []any{"65000:100"}, "localPref": 200, "aggregationLength": 24,
	}}},
}

// helmConfig is Helm's action configuration for the control plane, as
// `helm --kube-apiserver --kube-token --kube-ca-file -n ns` makes it,
// with release records in Secrets (Helm's default).
func (k *kube) helmConfig(t *testing.T, ns string) *action.Configuration {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	host, token, ca := k.cfg.Host, k.cfg.BearerToken, k.cfg.CAFile
	flags.APIServer, flags.BearerToken, flags.CAFile, flags.Namespace = &host, &token, &ca, &ns
	cfg := action.NewConfiguration()
	if err := cfg.Init(flags, ns, "secret"); err != nil {
		t.Fatalf("helm: %v", err)
	}
	return cfg
}

// What `kubectl get` shows for the examples' objects: the API server's
// table of each resource (what kubectl asks for), its columns (those
// with a priority only with -o wide) and the example's cells.
func testPrinterColumns(t *testing.T, k *kube) {
	// A pool's status, as the controller writes it.
	status := []byte(`{"status":{"size":16,"assigned":3,"available":13}}`)
	if _, err := k.dyn.Resource(api.AddressPoolResource).Patch(t.Context(), "default", types.MergePatchType, status, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		resource, name string
		want           map[string]string // column: cell
		wide           []string          // the columns -o wide adds
	}{
		{"addresspools", "default",
			map[string]string{"Addresses": `["10.99.0.0/28","10.99.1.10-10.99.1.20"]`, "Announce": "bgp", "Auto Assign": "true", "Assigned": "3", "Available": "13"},
			[]string{"Error"}},
		{"bgppeers", "tor",
			map[string]string{"Peer Address": "10.0.1.1", "Peer ASN": "65000", "My ASN": "65001"},
			[]string{"Passive", "Port", "Hold Time", "Multihop", "Password Secret"}},
		{"denylists", "attackers", map[string]string{"Prefixes": "<none>"}, nil},
		{"bgpadvertisements", "to-tor",
			map[string]string{"Pools": `["default"]`, "Peers": `["tor"]`, "Communities": `["65000:100"]`, "Local Pref": "200", "Aggregation": "24"}, nil},
	} {
		raw, err := k.cs.Discovery().RESTClient().Get().AbsPath("/apis", api.Group, api.Version, tc.resource, tc.name).
			SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(t.Context())
		if err != nil {
			t.Fatalf("%s %s as a table: %v", tc.resource, tc.name, err)
		}
		var table metav1.Table
		if err := json.Unmarshal(raw, &table); err != nil {
			t.Fatal(err)
		}
		if len(table.Rows) != 1 || len(table.Rows[0].Cells) != len(table.ColumnDefinitions) {
			t.Fatalf("%s: %d rows, want 1 with a cell per column: %s", tc.resource, len(table.Rows), raw)
		}
		var header, cells, wide []string
		for i, c := range table.ColumnDefinitions {
			cell := fmt.Sprint(table.Rows[0].Cells[i])
			if table.Rows[0].Cells[i] == nil {
				cell = "<none>" // as kubectl prints it
			}
			if b, err := json.Marshal(table.Rows[0].Cells[i]); err == nil && strings.HasPrefix(string(b), "[") {
				cell = string(b)
			}
			if c.Priority > 0 {
				wide = append(wide, c.Name)
			}
			header, cells = append(header, c.Name), append(cells, cell)
			if want, ok := tc.want[c.Name]; ok && cell != want {
				t.Errorf("kubectl get %s %s: column %s shows %s, want %s", tc.resource, tc.name, c.Name, cell, want)
			}
			delete(tc.want, c.Name)
		}
		for c := range tc.want {
			t.Errorf("kubectl get %s: no column %s (columns %v)", tc.resource, c, header)
		}
		if !slices.Equal(wide, tc.wide) {
			t.Errorf("kubectl get %s -o wide adds %v, want %v", tc.resource, wide, tc.wide)
		}
		t.Logf("kubectl get %s -o wide:\n%s\n%s", tc.resource, strings.Join(header, " | "), strings.Join(cells, " | "))
	}
}

// The chart, installed by Helm with other values as release "edge" in
// namespace "xlb-edge" next to the install of deploy/, is accepted: its
// names do not collide, and its RBAC follows the release's namespace.
// Then Helm upgrades it with changed values (see testHelmUpgrade).
func testHelmRelease(t *testing.T, k *kube) {
	ctx := t.Context()
	c, err := loadChart(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	const ns = "xlb-edge"
	// helm install edge deploy/helm/xlb -n xlb-edge --create-namespace:
	// the chart's crds/ first (deploy/crds, see TestChartCRDs, installed
	// already: Helm leaves existing CRDs alone), then the rest, by
	// server-side apply.
	inst := action.NewInstall(k.helmConfig(t, ns))
	inst.ReleaseName, inst.Namespace, inst.CreateNamespace = "edge", ns, true
	inst.WaitStrategy = helmkube.HookOnlyStrategy // no kubelet: Pods never run here
	inst.Timeout = establishTimeout
	r, err := inst.RunWithContext(ctx, c.Chart, values(edgeValues))
	if err != nil {
		t.Fatalf("helm install: %v", err)
	}
	objs, err := releaseObjects(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.present(ctx, objs); err != nil {
		t.Errorf("after helm install: %v", err)
	}
	for _, key := range []string{"AddressPool /edge-pool", "BGPPeer /edge-tor"} {
		if !slices.ContainsFunc(objs, func(o object) bool { return o.key() == key }) {
			t.Errorf("the release has no %s", key)
		}
	}
	testRBAC(t, k, ns, "edge-xlb", "edge-controller", "edge-tor-password")
	// The release's agent reads the Secrets of its own namespace only.
	sar := func(namespace string) bool {
		res, err := k.cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User: saUser(ns, "edge-xlb-agent"), Groups: saGroups(ns),
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: "get", Resource: "secrets", Name: "edge-tor-password"},
			}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return res.Status.Allowed
	}
	if sar("xlb-system") {
		t.Error("the edge release's agent may read the Secrets of xlb-system")
	}
	t.Run("AgentSecrets", func(t *testing.T) { testAgentSecrets(t, k, ns) })
	t.Run("Upgrade", func(t *testing.T) { testHelmUpgrade(t, k, c, ns, objs) })
}

// present checks that every object of objs exists on the API server.
func (k *kube) present(ctx context.Context, objs []object) error {
	var errs []error
	for _, o := range objs {
		r, err := k.resource(o)
		if err == nil {
			_, err = r.Get(ctx, o.GetName(), metav1.GetOptions{})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s (%s): %w", o.key(), o.from, err))
		}
	}
	return errors.Join(errs...)
}

// testHelmUpgrade upgrades release "edge" with changed values, as
// `helm upgrade edge deploy/helm/xlb -n xlb-edge --values ...`: the
// changes reach the API server (replicas, the leader Lease and the RBAC
// that names it, a pool's addresses, a new pool, a BGPPeer no longer
// rendered is deleted) and everything else is still there.
func testHelmUpgrade(t *testing.T, k *kube, c *helmChart, ns string, installed []object) {
	ctx := t.Context()
	changed := values(edgeValues)
	changed["controller"].(map[string]any)["replicas"] = 3
	changed["controller"].(map[string]any)["leaseName"] = "edge-leader"
	changed["agent"].(map[string]any)["bgpPasswordSecrets"] = []any{"edge-tor-password"}
	changed["addressPools"] = []any{
		map[string]any{"name": "edge-pool", "spec": map[string]any{"addresses": []any{"10.98.0.0/27"}}},
		map[string]any{"name": "edge-pool-2", "spec": map[string]any{"addresses": []any{"10.98.1.0/28"}, "autoAssign": false}},
	}
	changed["bgpPeers"] = []any{}

	up := action.NewUpgrade(k.helmConfig(t, ns))
	up.Namespace = ns
	up.WaitStrategy = helmkube.HookOnlyStrategy
	up.Timeout = establishTimeout
	r, err := up.RunWithContext(ctx, "edge", c.Chart, changed)
	if err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	acc, err := ri.NewAccessor(r)
	if err != nil {
		t.Fatal(err)
	}
	if acc.Version() != 2 || acc.Status() != "deployed" {
		t.Errorf("release after the upgrade: revision %d, status %q; want 2, deployed", acc.Version(), acc.Status())
	}
	objs, err := releaseObjects(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.present(ctx, objs); err != nil {
		t.Errorf("after helm upgrade: %v", err)
	}

	dep, err := k.cs.AppsV1().Deployments(ns).Get(ctx, "edge-xlb-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 3 {
		t.Errorf("controller replicas after the upgrade: %v, want 3", dep.Spec.Replicas)
	}
	if args := dep.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--lease-name=edge-leader") {
		t.Errorf("controller args after the upgrade: %v, want --lease-name=edge-leader", args)
	}
	// The Role follows the Lease: the new one is granted, the old one no
	// longer; the agent keeps its Secret, now listed by name.
	testRBAC(t, k, ns, "edge-xlb", "edge-leader", "edge-tor-password")
	res, err := k.cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: saUser(ns, "edge-xlb-controller"), Groups: saGroups(ns),
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Name: "edge-controller"},
		}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status.Allowed {
		t.Error("after the upgrade the controller may still update the old Lease edge-controller")
	}

	pool, err := k.dyn.Resource(api.AddressPoolResource).Get(ctx, "edge-pool", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := unstructured.NestedStringSlice(pool.Object, "spec", "addresses"); !slices.Equal(got, []string{"10.98.0.0/27"}) {
		t.Errorf("edge-pool addresses after the upgrade: %v, want [10.98.0.0/27]", got)
	}
	if _, err := k.dyn.Resource(api.AddressPoolResource).Get(ctx, "edge-pool-2", metav1.GetOptions{}); err != nil {
		t.Errorf("the pool the upgrade adds: %v", err)
	}
	if _, err := k.dyn.Resource(api.BGPPeerResource).Get(ctx, "edge-tor", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the BGPPeer the upgrade no longer renders: got %v, want NotFound", err)
	}
	// What the upgrade did not change is still there, unchanged in kind
	// and name.
	for _, o := range installed {
		if o.key() == "BGPPeer /edge-tor" {
			continue
		}
		if !slices.ContainsFunc(objs, func(n object) bool { return n.key() == o.key() }) {
			t.Errorf("%s of the install is not in the upgraded release", o.key())
		}
	}
}

// testAgentSecrets runs the agent's Kubernetes source as the edge
// release's agent (impersonated), whose Role names one password Secret:
// it reads that Secret, by name, and no other; the BGPPeer naming it
// gets its password, at the start and when it changes; a BGPPeer naming
// another Secret is left out.
func testAgentSecrets(t *testing.T, k *kube, ns string) {
	ctx := t.Context()
	secret := func(name, password string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Type: corev1.SecretTypeBasicAuth,
			StringData: map[string]string{"password": password}}
	}
	for _, s := range []*corev1.Secret{secret("edge-tor-password", "s3cret"), secret("not-granted", "other")} {
		if _, err := k.cs.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ungranted := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "xlb.io/v1alpha1", "kind": "BGPPeer", "metadata": map[string]any{"name": "edge-ungranted"},
		"spec": map[string]any{"myASN": int64(65001), "peerASN": int64(65000), "peerAddress": "10.0.9.3",
			"passwordSecret": map[string]any{"name": "not-granted", "namespace": ns}},
	}}
	if _, err := k.dyn.Resource(api.BGPPeerResource).Create(ctx, ungranted, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The agent's node, as its kubelet registers it.
	if _, err := k.cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-lb"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	addrs := []byte(`{"status":{"addresses":[{"type":"InternalIP","address":"10.0.9.2"}]}}`)
	if _, err := k.cs.CoreV1().Nodes().Patch(ctx, "edge-lb", types.MergePatchType, addrs, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}

	cfg := rest.CopyConfig(k.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: saUser(ns, "edge-xlb-agent"), Groups: saGroups(ns)}
	agent, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	agentDyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// By hand: the named Secret by name (get, list and watch with
	// metadata.name), nothing else.
	byName := metav1.ListOptions{FieldSelector: "metadata.name=edge-tor-password"}
	if _, err := agent.CoreV1().Secrets(ns).Get(ctx, "edge-tor-password", metav1.GetOptions{}); err != nil {
		t.Errorf("the agent reading its password Secret: %v", err)
	}
	if _, err := agent.CoreV1().Secrets(ns).List(ctx, byName); err != nil {
		t.Errorf("the agent listing its password Secret by name: %v", err)
	}
	if w, err := agent.CoreV1().Secrets(ns).Watch(ctx, byName); err != nil {
		t.Errorf("the agent watching its password Secret by name: %v", err)
	} else {
		w.Stop()
	}
	if _, err := agent.CoreV1().Secrets(ns).Get(ctx, "not-granted", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the agent reading a Secret its Role does not name: got %v, want Forbidden", err)
	}
	if _, err := agent.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the agent listing every Secret of %s: got %v, want Forbidden", ns, err)
	}

	// The agent's own way: its Kubernetes source, as the DaemonSet runs it.
	base, err := source.DaemonSetBase(ctx, agent, config.Kubernetes{NodeName: "edge-lb", SecretNamespace: ns}, "eth0", config.NATConfig{})
	if err != nil {
		t.Fatal(err)
	}
	src, err := source.New(source.Options{Base: base, Client: agent, Dynamic: agentDyn, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	srcCtx, stop := context.WithCancel(ctx)
	defer stop()
	first, err := src.Start(srcCtx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	passwords := func(c *config.Config) map[string]string {
		out := map[string]string{}
		if c != nil && c.BGP != nil {
			for _, p := range c.BGP.Peers {
				out[p.Address.String()] = p.Password
			}
		}
		return out
	}
	if got := passwords(first); len(got) != 1 || got["10.0.9.1"] != "s3cret" {
		t.Fatalf("peers of the first configuration (address: password) %v, want 10.0.9.1 with its password only", got)
	}
	// A changed password reaches the agent through its watch.
	changed := secret("edge-tor-password", "changed")
	if _, err := k.cs.CoreV1().Secrets(ns).Update(ctx, changed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(30 * time.Second)
	for {
		select {
		case u := <-src.Updates():
			if got := passwords(u.Config); got["10.0.9.1"] == "changed" {
				return
			}
		case <-deadline:
			t.Fatal("no configuration with the changed password within 30 s")
		}
	}
}

// Invalid pools and peers are refused by the API server with the field
// and a message that says what to write instead.
func testInvalidResources(t *testing.T, k *kube) {
	for _, tc := range []struct {
		name, manifest string
		want           []string
		wrong          []string // what the message must not suggest
	}{
		{"pool host bits", `
apiVersion: xlb.io/v1alpha1
kind: AddressPool
metadata: {name: bad-host-bits}
spec: {addresses: [10.99.9.5/28]}`,
			[]string{"spec.addresses[0]", "10.99.9.5/28 has host bits set", "write its network address, 10.99.9.0/28"},
			[]string{"10.99.0.0/28"}},
		{"pool reversed range", `
apiVersion: xlb.io/v1alpha1
kind: AddressPool
metadata: {name: bad-range}
spec: {addresses: [10.99.0.20-10.99.0.10]}`,
			[]string{"spec.addresses[0]", "starts after it ends"}, nil},
		{"pool not an address", `
apiVersion: xlb.io/v1alpha1
kind: AddressPool
metadata: {name: bad-address}
spec: {addresses: [10.99.0.300/24]}`,
			[]string{"spec.addresses[0]", "10.99.0.300/24 is neither a CIDR"}, nil},
		{"pool without addresses", `
apiVersion: xlb.io/v1alpha1
kind: AddressPool
metadata: {name: no-addresses}
spec: {autoAssign: false}`,
			[]string{"spec.addresses", "Required value"}, nil},
		{"peer address", `
apiVersion: xlb.io/v1alpha1
kind: BGPPeer
metadata: {name: bad-address}
spec: {myASN: 65001, peerASN: 65000, peerAddress: 10.0.1}`,
			[]string{"spec.peerAddress", "10.0.1 is not an IPv4 or IPv6 address"}, nil},
		{"peer ASN 0", `
apiVersion: xlb.io/v1alpha1
kind: BGPPeer
metadata: {name: bad-asn}
spec: {myASN: 65001, peerASN: 0, peerAddress: 10.0.1.1}`,
			[]string{"spec.peerASN", "greater than or equal to 1"}, nil},
		{"peer hold time", `
apiVersion: xlb.io/v1alpha1
kind: BGPPeer
metadata: {name: bad-hold}
spec: {myASN: 65001, peerASN: 65000, peerAddress: 10.0.1.1, holdTime: 1s}`,
			[]string{"spec.holdTime", "at least 3s"}, nil},
		{"deny list host bits", `
apiVersion: xlb.io/v1alpha1
kind: DenyList
metadata: {name: bad-host-bits}
spec: {prefixes: [192.0.2.0/24, 198.51.100.7/24]}`,
			[]string{"spec.prefixes[1]", "198.51.100.7/24 has host bits set", "write its network address, 198.51.100.0/24"}, nil},
		{"deny list IPv6 host bits", `
apiVersion: xlb.io/v1alpha1
kind: DenyList
metadata: {name: bad-host-bits6}
spec: {prefixes: ["2001:db8::/32", "2001:db8:bad::1/48"]}`,
			[]string{"spec.prefixes[1]", "2001:db8:bad::1/48 has host bits set", "write its network address"}, nil},
		{"deny list not a CIDR", `
apiVersion: xlb.io/v1alpha1
kind: DenyList
metadata: {name: bad-cidr}
spec: {prefixes: [192.0.2.1]}`,
			[]string{"spec.prefixes[0]", "192.0.2.1 is not a CIDR"}, nil},
		{"deny list without prefixes", `
apiVersion: xlb.io/v1alpha1
kind: DenyList
metadata: {name: no-prefixes}
spec: {}`,
			[]string{"spec.prefixes", "Required value"}, nil},
		{"pool selector operator", `
apiVersion: xlb.io/v1alpha1
kind: AddressPool
metadata: {name: bad-operator}
spec:
  addresses: [10.99.8.0/28]
  serviceAllocation:
    serviceSelectors: [{matchExpressions: [{key: tier, operator: Within, values: [web]}]}]`,
			[]string{"spec.serviceAllocation.serviceSelectors[0].matchExpressions[0].operator", `Unsupported value: "Within"`, `"In", "NotIn", "Exists", "DoesNotExist"`}, nil},
		{"peer node selector operator", `
apiVersion: xlb.io/v1alpha1
kind: BGPPeer
metadata: {name: bad-operator}
spec:
  myASN: 65001
  peerASN: 65000
  peerAddress: 10.0.1.1
  nodeSelectors: [{matchLabels: {rack: r1}}, {matchExpressions: [{key: rack, operator: Exists}, {key: zone, operator: Equals}]}]`,
			[]string{"spec.nodeSelectors[1].matchExpressions[1].operator", `Unsupported value: "Equals"`, `"In", "NotIn", "Exists", "DoesNotExist"`}, nil},
		{"peer without my ASN", `
apiVersion: xlb.io/v1alpha1
kind: BGPPeer
metadata: {name: no-asn}
spec: {peerASN: 65000, peerAddress: 10.0.1.1}`,
			[]string{"spec.myASN", "Required value"}, nil},
	} {
		objs, err := decodeObjects(tc.name, []byte(tc.manifest))
		if err != nil || len(objs) != 1 {
			t.Fatalf("%s: %v", tc.name, err)
		}
		r, err := k.resource(objs[0])
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		_, err = r.Create(t.Context(), objs[0].Unstructured, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Errorf("%s: got %v, want the object refused as Invalid", tc.name, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: the error %q does not say %q", tc.name, err, w)
			}
		}
		for _, w := range tc.wrong {
			if strings.Contains(err.Error(), w) {
				t.Errorf("%s: the error %q suggests %q, which is wrong", tc.name, err, w)
			}
		}
	}
}

func logDaemonSets(t *testing.T, k *kube, namespace string) {
	t.Helper()
	dss, err := k.cs.AppsV1().DaemonSets(namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Logf("daemonsets of %s: %v", namespace, err)
		return
	}
	for _, d := range dss.Items {
		t.Logf("daemonset %s: status %+v", d.Name, d.Status)
	}
	nodes, err := k.cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Logf("nodes: %v", err)
		return
	}
	for _, n := range nodes.Items {
		t.Logf("node %s: labels %v, taints %v", n.Name, n.Labels, n.Spec.Taints)
	}
}
