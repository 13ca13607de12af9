package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	k8sapi "github.com/xlbproject/xlb/internal/k8s/api"
	"github.com/xlbproject/xlb/testbed/k8stest"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
)

// TestKubernetesGracefulRestart runs an agent of the cluster whose
// BGPPeer, FRR, has graceful restart. A SIGTERM, as a rolling update
// sends, is a restart: FRR keeps the route, stale, until the next agent.
// A SIGTERM after the Node was cordoned, as kubectl drain does before
// the node goes down, is a node leaving: the route is withdrawn first.
func TestKubernetesGracefulRestart(t *testing.T) {
	needRoot(t)
	if testing.Short() {
		t.Skip("starts a Kubernetes control plane and a lab; skipped with -short")
	}
	cp := k8stest.StartT(t, k8stest.Options{})
	prefix := labPrefix + "kg"
	useLab(t, prefix)
	ctx, cancel := context.WithTimeout(interrupted, 4*time.Minute)
	defer cancel()
	p, err := lab.Up(ctx, lab.Spec{Prefix: prefix, Clients: 1, Nodes: 1, Backends: 1, Pods: 1, Binary: xlbBinary,
		Router: lab.RouterFRR, GracefulRestart: true})
	if err != nil {
		t.Fatal(err)
	}
	k := newKubeEnv(t, ctx, cp, p)
	t.Cleanup(func() {
		if t.Failed() {
			k.logAgents(40)
		}
	})
	k.applyCRDs()
	for _, h := range append(slices.Clone(p.Nodes), p.Backends...) {
		k.must(k.cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: h.Name}}, metav1.CreateOptions{}))
		addrs := fmt.Sprintf(`{"status":{"addresses":[{"type":"InternalIP","address":%q}]}}`, h.Addr)
		k.must(k.cs.CoreV1().Nodes().Patch(ctx, h.Name, types.MergePatchType, []byte(addrs), metav1.PatchOptions{}, "status"))
	}
	k.createCustom(k8sapi.AddressPoolResource, "AddressPool", k8sPool, map[string]any{"addresses": []any{k8sPoolRange}})
	b := p.BGP
	k.createCustom(k8sapi.BGPPeerResource, "BGPPeer", "router", map[string]any{
		"myASN": int64(b.NodeASN), "peerASN": int64(b.PeerASN), "peerAddress": b.PeerAddr.String(),
		"holdTime": b.HoldTime.String(), "gracefulRestart": map[string]any{"restartTime": "120s"},
	})
	node := p.Nodes[0]
	k.startController()
	k.startAgent(node)
	k.startBackend(p.Backends[0])
	k.createPod(p.Pods[0], true)
	k.createService()
	vip := k.waitIngress("")
	if err := lab.WaitNextHops(ctx, p, vip, []netip.Addr{node.Addr}, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	wantFRRRoute(t, ctx, prefix, vip, "route announced", true, false)
	wantNegotiated(t, labrun.Socket(p, node))

	// A restart: the route stays, stale, and still routed.
	if err := lab.StopProcess(prefix, labrun.AgentName(node)); err != nil {
		t.Fatal(err)
	}
	wantFRRRoute(t, ctx, prefix, vip, "route kept, stale, after SIGTERM", true, true)
	if err := lab.WaitNextHops(ctx, p, vip, []netip.Addr{node.Addr}, time.Second); err != nil {
		t.Fatalf("after SIGTERM: %v", err)
	}
	k.startAgent(node)
	wantFRRRoute(t, ctx, prefix, vip, "route fresh again after the restart", true, false)

	// The node is drained: cordoned, then its pod stopped.
	k.must(k.cs.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}))
	if err := lab.StopProcess(prefix, labrun.AgentName(node)); err != nil {
		t.Fatal(err)
	}
	wantFRRRoute(t, ctx, prefix, vip, "route withdrawn after cordon and SIGTERM", false, false)
	if err := lab.WaitNextHops(ctx, p, vip, nil, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	log, err := os.ReadFile(lab.LogFile(prefix, labrun.AgentName(node)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "the node is leaving") || !strings.Contains(string(log), "cordoned") {
		t.Errorf("the agent's log does not say why it withdrew:\n%s", tailLines(string(log), 20))
	}
}
