package source

import (
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/k8s/api"
	"github.com/xlbproject/xlb/internal/source"
)

// fakeCluster is a fake API server: client-go's fake clients, which
// also count the watches the informers open.
type fakeCluster struct {
	cs  *fake.Clientset
	dyn *dynamicfake.FakeDynamicClient

	mu       sync.Mutex
	watching map[string]int // by resource
}

func newFakeCluster(t *testing.T, serveCRD bool, objs []runtime.Object, peers ...runtime.Object) *fakeCluster {
	t.Helper()
	c := &fakeCluster{cs: fake.NewClientset(objs...), watching: map[string]int{}}
	if serveCRD {
		c.cs.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{
			GroupVersion: api.BGPPeerResource.GroupVersion().String(),
			APIResources: []metav1.APIResource{{Name: api.BGPPeerResource.Resource, Kind: "BGPPeer"}, {Name: api.DenyListResource.Resource, Kind: "DenyList"}},
		}}
	}
	c.dyn = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{api.BGPPeerResource: "BGPPeerList", api.DenyListResource: "DenyListList", api.AddressPoolResource: "AddressPoolList"}, peers...)
	count := func(a k8stesting.Action) (bool, watch.Interface, error) {
		c.mu.Lock()
		c.watching[a.GetResource().Resource]++
		c.mu.Unlock()
		return false, nil, nil // the default reactor opens the watch
	}
	c.cs.PrependWatchReactor("*", count)
	c.dyn.PrependWatchReactor("*", count)
	return c
}

// waitWatching waits until the informers watch every resource: the fake
// API server sends a watch nothing that happened before it opened.
func (c *fakeCluster) waitWatching(t *testing.T, resources ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.mu.Lock()
		missing := ""
		for _, r := range resources {
			if c.watching[r] == 0 {
				missing = r
			}
		}
		c.mu.Unlock()
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no watch on %s after 10s", missing)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func startSource(t *testing.T, c *fakeCluster, base *config.Config) (*Source, *config.Config) {
	t.Helper()
	return startSourceQuiet(t, c, base, 20*time.Millisecond, 100*time.Millisecond)
}

// startSourceQuiet starts a source with the given quiet time and maximum
// delay.
func startSourceQuiet(t *testing.T, c *fakeCluster, base *config.Config, quiet, maxDelay time.Duration) (*Source, *config.Config) {
	t.Helper()
	src, err := New(Options{Base: base, Client: c.cs, Dynamic: c.dyn, Logger: quietLog(), Quiet: quiet, MaxDelay: maxDelay})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := src.Start(t.Context(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return src, cfg
}

// next waits for the source's next update.
func next(t *testing.T, src *Source) source.Update {
	t.Helper()
	select {
	case u := <-src.Updates():
		return u
	case <-time.After(10 * time.Second):
		t.Fatal("no update within 10s")
		return source.Update{}
	}
}

// none checks that no update comes for a while.
func none(t *testing.T, src *Source, why string) {
	t.Helper()
	select {
	case u := <-src.Updates():
		t.Errorf("%s: unexpected update %+v (err %v)", why, summaryOf(u.Config), u.Err)
	case <-time.After(300 * time.Millisecond):
	}
}

func summaryOf(cfg *config.Config) []string {
	if cfg == nil {
		return nil
	}
	return summary(cfg)
}

func backendsOf(cfg *config.Config, name string) []string {
	for _, s := range cfg.Services {
		if s.Name == name {
			var out []string
			for _, b := range s.Backends {
				out = append(out, b.Address.String())
			}
			return out
		}
	}
	return nil
}

// TestSourceFollowsTheCluster runs the source against client-go's fake
// API server: the first configuration, then one update per change.
func TestSourceFollowsTheCluster(t *testing.T) {
	web := []discoveryv1.EndpointPort{slicePortOf("", 8080, corev1.ProtocolTCP)}
	c := newFakeCluster(t, true, []runtime.Object{
		node("node-1", map[string]string{"rack": "r1"}),
		service("default", "web"),
		endpointSlice("default", "web", "web-1", web, endpoint(condReady, "10.244.1.2")),
		secret("xlb-system", "bgp", map[string]string{"password": "one"}),
	}, bgpPeer("router", map[string]any{"myASN": int64(65001), "peerASN": int64(65000), "peerAddress": "10.0.0.1",
		"passwordSecret": map[string]any{"name": "bgp"}, "nodeSelectors": []any{map[string]any{"matchLabels": map[string]any{"rack": "r1"}}}}))
	src, cfg := startSource(t, c, parseBase(t, ""))
	if got := backendsOf(cfg, "default/web:80/tcp"); len(got) != 1 || cfg.BGP == nil || cfg.BGP.Peers[0].Password != "one" {
		t.Fatalf("first configuration: backends %v, bgp %+v", got, cfg.BGP)
	}
	c.waitWatching(t, "services", "endpointslices", "nodes", "bgppeers", "denylists", "secrets")
	ctx := t.Context()
	cs := c.cs

	sl := endpointSlice("default", "web", "web-1", web, endpoint(condReady, "10.244.1.2", "10.244.1.3", "10.244.1.4"))
	if _, err := cs.DiscoveryV1().EndpointSlices("default").Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := backendsOf(next(t, src).Config, "default/web:80/tcp"); len(got) != 3 {
		t.Errorf("after two endpoints were added: backends %v", got)
	}

	if _, err := cs.CoreV1().Secrets("xlb-system").Update(ctx, secret("xlb-system", "bgp", map[string]string{"password": "two"}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if u := next(t, src); u.Config == nil || u.Config.BGP == nil || u.Config.BGP.Peers[0].Password != "two" {
		t.Errorf("after the Secret changed: %+v", u)
	}
	// Another Secret is none of the source's business.
	if _, err := cs.CoreV1().Secrets("xlb-system").Create(ctx, secret("xlb-system", "other", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Nor is a Service of another type.
	other := service("default", "internal", withType(corev1.ServiceTypeClusterIP))
	if _, err := cs.CoreV1().Services("default").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	none(t, src, "an unrelated Secret and a ClusterIP Service")

	if _, err := cs.CoreV1().Nodes().Update(ctx, node("node-1", map[string]string{"rack": "r2"}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if u := next(t, src); u.Config == nil || u.Config.BGP != nil {
		t.Errorf("after the node left the peer's rack: %+v", u.Config)
	}

	// A burst of changes is one update. The source above waits 20 ms
	// for quiet, which a loaded machine's API calls can exceed between
	// two creates; this one waits a second.
	burst, _ := startSourceQuiet(t, c, parseBase(t, ""), time.Second, 30*time.Second)
	for i := range 10 {
		ep := endpoint(condReady, "10.244.2.1")
		ep.Addresses = []string{netip.AddrFrom4([4]byte{10, 244, 2, byte(i + 1)}).String()}
		sl := endpointSlice("default", "web", "web-burst-"+string(rune('a'+i)), web, ep)
		if _, err := cs.DiscoveryV1().EndpointSlices("default").Create(ctx, sl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if got := backendsOf(next(t, burst).Config, "default/web:80/tcp"); len(got) != 13 {
		t.Errorf("10 slices created at once: the first update has %d backends, want all 13 in one", len(got))
	}
	none(t, burst, "after the burst's update")
	for got := []string(nil); len(got) != 13; {
		got = backendsOf(next(t, src).Config, "default/web:80/tcp")
	}

	if err := cs.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if u := next(t, src); u.Config == nil || len(u.Config.Services) != 0 {
		t.Errorf("after the Service was deleted: %v", summaryOf(u.Config))
	}

	// The base file: an error is passed on, and a new base applies.
	src.SetBase(nil, errors.New("agent.yaml:3: broken"))
	if u := next(t, src); u.Err == nil || !strings.Contains(u.Err.Error(), "broken") || u.Source != Name {
		t.Errorf("after a broken base: %+v", u)
	}
	withFileService := parseBase(t, "services:\n  - {name: static, vip: 10.99.0.9, port: 80, backends: [{address: 10.0.3.2}]}\n")
	src.SetBase(withFileService, nil)
	if u := next(t, src); u.Err != nil || len(backendsOf(u.Config, "static")) != 1 {
		t.Errorf("after a new base: %+v", u)
	}
	changed := parseBase(t, "")
	changed.Kubernetes.NodeName = "node-2"
	src.SetBase(changed, nil)
	if u := next(t, src); u.Config == nil || u.Config.Kubernetes.NodeName != "node-1" || len(u.Config.Services) != 0 {
		t.Errorf("a base with another nodeName: %+v; want the running kubernetes section and the new base's services", u.Config)
	}
}

func TestSourceStartErrors(t *testing.T) {
	base := parseBase(t, "")
	c := newFakeCluster(t, false, nil)
	src, err := New(Options{Base: base, Client: c.cs, Dynamic: c.dyn, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Start(t.Context(), time.Second); err == nil || !strings.Contains(err.Error(), "install xlb's CustomResourceDefinitions") {
		t.Errorf("without the CRD: %v", err)
	}

	noNode := *base
	noNode.Kubernetes = &config.Kubernetes{SecretNamespace: "x"}
	for _, o := range []Options{
		{Base: nil, Client: c.cs, Dynamic: c.dyn},
		{Base: parseBase(t, "")},
		{Base: &noNode, Client: c.cs, Dynamic: c.dyn},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

// A BGPPeer whose Secret lies in a namespace the agent may not read does
// not hold up the start: that peer is left out, the others run.
func TestSourceStartsWithoutUnreadableSecrets(t *testing.T) {
	c := newFakeCluster(t, true, []runtime.Object{node("node-1", nil)},
		bgpPeer("a", map[string]any{"myASN": int64(65001), "peerASN": int64(65000), "peerAddress": "10.0.0.1"}),
		bgpPeer("b", map[string]any{"myASN": int64(65001), "peerASN": int64(65000), "peerAddress": "10.0.0.2",
			"passwordSecret": map[string]any{"name": "x", "namespace": "forbidden"}}))
	c.cs.PrependReactor("list", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() == "forbidden" {
			return true, nil, errors.New("secrets is forbidden")
		}
		return false, nil, nil
	})
	src, err := New(Options{Base: parseBase(t, ""), Client: c.cs, Dynamic: c.dyn, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cfg, err := src.Start(t.Context(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.BGP == nil || len(cfg.BGP.Peers) != 1 || cfg.BGP.Peers[0].Address != netip.MustParseAddr("10.0.0.1") {
		t.Errorf("bgp %+v, want peer a only", cfg.BGP)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Start took %v", took)
	}
}

// The agent reads each password Secret by name: every list and watch of
// Secrets names one Secret a BGPPeer names (field selector
// metadata.name), which RBAC can limit to those names; none lists a
// namespace's Secrets.
func TestSecretsReadByName(t *testing.T) {
	c := newFakeCluster(t, true, []runtime.Object{node("node-1", nil),
		secret("xlb-system", "bgp-a", map[string]string{"password": "one"}),
		secret("other", "bgp-b", map[string]string{"password": "two"}),
		secret("xlb-system", "unrelated", map[string]string{"password": "three"})},
		bgpPeer("a", map[string]any{"myASN": int64(65001), "peerASN": int64(65000), "peerAddress": "10.0.0.1",
			"passwordSecret": map[string]any{"name": "bgp-a"}}),
		bgpPeer("b", map[string]any{"myASN": int64(65001), "peerASN": int64(65000), "peerAddress": "10.0.0.2",
			"passwordSecret": map[string]any{"name": "bgp-b", "namespace": "other"}}))
	var mu sync.Mutex
	seen := map[string]bool{}
	record := func(a k8stesting.Action) (bool, runtime.Object, error) {
		var sel string
		switch a := a.(type) {
		case k8stesting.ListAction:
			sel = a.GetListRestrictions().Fields.String()
		case k8stesting.WatchAction:
			sel = a.GetWatchRestrictions().Fields.String()
		}
		mu.Lock()
		seen[a.GetVerb()+" "+a.GetNamespace()+" "+sel] = true
		mu.Unlock()
		return false, nil, nil
	}
	c.cs.PrependReactor("list", "secrets", record)
	c.cs.PrependWatchReactor("secrets", func(a k8stesting.Action) (bool, watch.Interface, error) {
		_, _, err := record(a)
		return false, nil, err
	})
	_, cfg := startSource(t, c, parseBase(t, ""))
	if cfg.BGP == nil || len(cfg.BGP.Peers) != 2 || cfg.BGP.Peers[0].Password != "one" || cfg.BGP.Peers[1].Password != "two" {
		t.Fatalf("bgp %+v, want both peers with their passwords", cfg.BGP)
	}
	c.waitWatching(t, "secrets")
	want := map[string]bool{
		"list xlb-system metadata.name=bgp-a": true, "watch xlb-system metadata.name=bgp-a": true,
		"list other metadata.name=bgp-b": true, "watch other metadata.name=bgp-b": true,
	}
	mu.Lock()
	defer mu.Unlock()
	if !reflect.DeepEqual(seen, want) {
		t.Errorf("requests for Secrets (verb, namespace, field selector):\n%v\nwant\n%v", slices.Sorted(maps.Keys(seen)), slices.Sorted(maps.Keys(want)))
	}
}
