package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/xlbproject/xlb/internal/api"
	k8sapi "github.com/xlbproject/xlb/internal/k8s/api"
	"github.com/xlbproject/xlb/testbed/k8stest"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// TestKubernetesBGPAdvertisementsWithFRR runs the real agent in
// Kubernetes mode against FRR over iBGP: a BGPAdvertisement of the
// Service's pool gives its route the advertisement's communities
// (standard and large) with the Service's own (annotation), the
// advertisement's local preference, and the pool's covering /24 as an
// aggregate; aggregateOnly withdraws the /32 and keeps the /24; bad
// input (an annotation, an advertisement with a broken selector) takes
// no route away; a Service that can no longer be served takes the
// aggregate with it.
func TestKubernetesBGPAdvertisementsWithFRR(t *testing.T) {
	k := kubeLab(t, k8stest.Options{}, "ka", lab.Spec{Clients: 1, Nodes: 1, Backends: 1, Pods: 1, Router: lab.RouterFRR}, 4*time.Minute, 60)
	ctx, p, prefix := k.ctx, k.p, k.p.Spec.Prefix
	node := p.Nodes[0]
	vtysh := func(args ...string) []byte {
		t.Helper()
		return frrVtysh(t, ctx, prefix, args...)
	}
	// The lab's FRR takes the nodes over eBGP, which carries no local
	// preference: this node becomes an iBGP neighbour of its own.
	vtysh("-c", "configure terminal", "-c", fmt.Sprintf("router bgp %d", lab.RouterASN),
		"-c", fmt.Sprintf("neighbor %s remote-as internal", node.Addr),
		"-c", "address-family ipv4 unicast", "-c", fmt.Sprintf("neighbor %s activate", node.Addr))
	paths := func(pfx netip.Prefix) []frrPath {
		t.Helper()
		return frrPaths(t, ctx, prefix, pfx)
	}
	want := func(what string, pfx netip.Prefix, path *frrPath) {
		t.Helper()
		testenv.Eventually(t, 30*time.Second, what, func() (bool, string) {
			got := paths(pfx)
			if path == nil {
				return len(got) == 0, fmt.Sprintf("%s: %v", pfx, got)
			}
			return len(got) == 1 && got[0].String() == path.String(), fmt.Sprintf("%s: %v, want %v", pfx, got, *path)
		})
	}
	route := func(comm, large string, lp uint32) *frrPath {
		r := &frrPath{LocPrf: &lp}
		r.Community = &struct {
			String string `json:"string"`
		}{comm}
		r.LargeCommunity = &struct {
			String string `json:"string"`
		}{large}
		return r
	}

	k.createNodes(nil)
	k.createCustom(k8sapi.AddressPoolResource, "AddressPool", k8sPool, map[string]any{"addresses": []any{k8sPoolRange}})
	peer := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": k8sapi.Group + "/" + k8sapi.Version, "kind": "BGPPeer",
		"metadata": map[string]any{"name": "frr", "labels": map[string]any{"role": "tor"}},
		"spec": map[string]any{"myASN": int64(lab.RouterASN), "peerASN": int64(lab.RouterASN), "peerAddress": p.BGP.PeerAddr.String(),
			"holdTime": p.BGP.HoldTime.String()},
	}}
	k.must(k.dyn.Resource(k8sapi.BGPPeerResource).Create(ctx, peer, metav1.CreateOptions{}))
	k.createCustom(k8sapi.BGPAdvertisementResource, "BGPAdvertisement", "to-frr", map[string]any{
		"addressPools": []any{k8sPool}, "peerSelectors": []any{map[string]any{"matchLabels": map[string]any{"role": "tor"}}},
		"communities": []any{"65000:100"}, "largeCommunities": []any{"65000:1:2"}, "localPref": int64(250), "aggregationLength": int64(24),
	})

	k.startController()
	// The agent's file has no bgp section: the BGPPeer's myASN is the
	// node's AS.
	cfgPath := labrun.ConfigPath(p, node)
	cfg := fmt.Sprintf("node: {interface: %s, address: %s}\napi: {socket: %s}\ndataplane: {pinPath: %s}\nkubernetes: {kubeconfig: %s, nodeName: %s}\n",
		node.Interface, node.Addr, labrun.Socket(p, node), node.PinDir, k.kubeconfig(node.Namespace), node.Name)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := lab.StartProcess(prefix, node.Namespace, labrun.AgentName(node), xlbBinary, "agent", "--config", cfgPath); err != nil {
		t.Fatal(err)
	}
	k.createPod(p.Pods[0], true)
	k.createService()
	k.must(k.cs.CoreV1().Services(k8sNamespace).Patch(ctx, k8sService, types.MergePatchType,
		[]byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"65000:7, 1:2:3, no-export"}}}`, k8sapi.AnnotationBGPCommunities)), metav1.PatchOptions{}))
	vip := k.waitIngress("")
	host := netip.PrefixFrom(vip, 32)
	agg, _ := vip.Prefix(24)
	t.Logf("the Service got %s; its aggregate is %s", vip, agg)

	// The /32 with the advertisement's and the Service's communities,
	// the /24 with the advertisement's alone; both with its local
	// preference, which FRR receives over iBGP.
	want("the VIP's route with its attributes", host, route("65000:7 65000:100 no-export", "1:2:3 65000:1:2", 250))
	want("the aggregate with the advertisement's attributes", agg, route("65000:100", "65000:1:2", 250))
	u, err := k.dyn.Resource(k8sapi.BGPAdvertisementResource).Get(ctx, "to-frr", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st, _, _ := unstructured.NestedMap(u.Object, "status"); fmt.Sprint(st) != "map[peers:1 pools:1]" {
		t.Errorf("the advertisement's status: %v, want 1 pool and 1 peer without an error", st)
	}

	// Bad input takes no route away: an annotation that is no list of
	// communities leaves the advertisement's; an advertisement whose
	// selector does not compile is left out.
	k.must(k.cs.CoreV1().Services(k8sNamespace).Patch(ctx, k8sService, types.MergePatchType,
		[]byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"65000:100000"}}}`, k8sapi.AnnotationBGPCommunities)), metav1.PatchOptions{}))
	k.createCustom(k8sapi.BGPAdvertisementResource, "BGPAdvertisement", "broken", map[string]any{
		"peerSelectors": []any{map[string]any{"matchExpressions": []any{map[string]any{"key": "role", "operator": "In"}}}},
		"communities":   []any{"65000:666"},
	})
	want("the VIP's route with the advertisement's communities only", host, route("65000:100", "65000:1:2", 250))
	want("the aggregate unchanged", agg, route("65000:100", "65000:1:2", 250))
	k.waitFor("the broken advertisement's status", 20*time.Second, func() string {
		u, err := k.dyn.Resource(k8sapi.BGPAdvertisementResource).Get(ctx, "broken", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if msg, _, _ := unstructured.NestedString(u.Object, "status", "error"); !strings.Contains(msg, "the agents leave it out") {
			return fmt.Sprintf("status.error %q", msg)
		}
		return ""
	})

	// aggregateOnly: the aggregate instead of the /32.
	k.must(k.dyn.Resource(k8sapi.BGPAdvertisementResource).Patch(ctx, "to-frr", types.MergePatchType,
		[]byte(`{"spec":{"aggregateOnly":true}}`), metav1.PatchOptions{}))
	want("the VIP's own route withdrawn (aggregateOnly)", host, nil)
	want("the aggregate kept (aggregateOnly)", agg, route("65000:100", "65000:1:2", 250))
	st, err := api.GetStatus(labrun.Socket(p, node))
	if err != nil {
		t.Fatal(err)
	}
	if st.BGP == nil || !slices.ContainsFunc(st.BGP.Routes, func(r api.Route) bool {
		return r.Prefix == host && !r.Announced && strings.Contains(r.Reason, "no BGPAdvertisement sends it")
	}) {
		t.Errorf("status of the VIP's route: %+v, want it unannounced with the reason", st.BGP)
	}

	// The pod turns unready: nothing of the pool is served, and the
	// aggregate goes with the last VIP.
	k.setReady(p.Pods[0], false)
	want("the aggregate withdrawn with the last served VIP", agg, nil)
	k.setReady(p.Pods[0], true)
	want("the aggregate back", agg, route("65000:100", "65000:1:2", 250))
}
