package e2e

import (
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

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
	k := kubeLab(t, k8stest.Options{}, "kg", lab.Spec{Clients: 1, Nodes: 1, Backends: 1, Pods: 1,
		Router: lab.RouterFRR, GracefulRestart: true}, 4*time.Minute, 40)
	ctx, p, prefix := k.ctx, k.p, k.p.Spec.Prefix
	k.createNodes(nodeAddr)
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
