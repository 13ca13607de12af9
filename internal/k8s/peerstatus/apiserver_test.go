package peerstatus

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/xlbproject/xlb/internal/k8s/api"
	"github.com/xlbproject/xlb/testbed/k8stest"
	"github.com/xlbproject/xlb/testbed/testenv"
)

const apiTimeout = 30 * time.Second

// fakeNode stands in for one node's source and speaker.
type fakeNode struct {
	mu       sync.Mutex
	peers    []Peer
	sessions map[netip.Addr]Session
}

func (n *fakeNode) set(peers []Peer, sessions map[netip.Addr]Session) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.peers, n.sessions = peers, sessions
}

func (n *fakeNode) Peers() []Peer {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.peers)
}

func (n *fakeNode) Sessions() map[netip.Addr]Session {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.sessions
}

// TestAPIServer runs two nodes' writers against a real kube-apiserver
// (testbed/k8stest) with the CRD of deploy/crds: both entries stay side
// by side, a state change is written, a node that stops peering removes
// its entry and leaves the other's, and a writer that stops removes its
// own; a writer started later takes over the entry a dead one left.
func TestAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Kubernetes control plane; skipped with -short")
	}
	cp := k8stest.StartT(t, k8stest.Options{})
	_, dyn, err := cp.Clients(100, 200)
	if err != nil {
		t.Fatal(err)
	}
	crd := filepath.Join("..", "..", "..", "deploy", "crds", "xlb.io_bgppeers.yaml")
	if err := k8stest.InstallCRDs(t.Context(), dyn, apiTimeout, crd); err != nil {
		t.Fatal(err)
	}
	peer := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": api.Group + "/" + api.Version, "kind": "BGPPeer",
		"metadata": map[string]any{"name": "router"},
		"spec":     map[string]any{"myASN": int64(65001), "peerASN": int64(65000), "peerAddress": "10.0.0.1"},
	}}
	created, err := dyn.Resource(api.BGPPeerResource).Create(t.Context(), peer, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	router := Peer{Name: "router", UID: created.GetUID(), Address: netip.MustParseAddr("10.0.0.1")}
	up := time.Date(2026, 11, 29, 7, 0, 0, 0, time.UTC)

	a, b := &fakeNode{}, &fakeNode{}
	a.set([]Peer{router}, map[netip.Addr]Session{router.Address: {State: "established", Since: up}})
	b.set([]Peer{router}, map[netip.Addr]Session{router.Address: {State: "active", Since: up, LastError: "connection refused"}})
	stopA := run(t, dyn, "node-a", a)
	stopB := run(t, dyn, "node-b", b)

	wantNodes(t, dyn, "both nodes' entries",
		"node-a established 2026-11-29T07:00:00Z ", "node-b active 2026-11-29T07:00:00Z connection refused")
	managers := map[string]bool{}
	got, err := dyn.Resource(api.BGPPeerResource).Get(t.Context(), "router", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range got.GetManagedFields() {
		managers[m.Manager] = true
	}
	if !managers["xlb-agent/node-a"] || !managers["xlb-agent/node-b"] {
		t.Fatalf("field managers %v; want xlb-agent/node-a and xlb-agent/node-b", managers)
	}

	// A session that goes down: the change is written.
	down := up.Add(time.Minute)
	a.set([]Peer{router}, map[netip.Addr]Session{router.Address: {State: "idle", Since: down, LastError: "hold timer expired"}})
	wantNodes(t, dyn, "node-a's session down",
		"node-a idle 2026-11-29T07:01:00Z hold timer expired", "node-b active 2026-11-29T07:00:00Z connection refused")

	// node-b no longer peers (its node left the selector): its entry
	// goes, node-a's stays.
	b.set(nil, nil)
	wantNodes(t, dyn, "node-b's entry removed", "node-a idle 2026-11-29T07:01:00Z hold timer expired")
	stopB()

	// A clean stop removes the writer's entry.
	stopA()
	wantNodes(t, dyn, "no entries after node-a's writer stopped")

	// An agent that died leaves its entry: the next agent on that node,
	// which no longer peers, removes it.
	stale := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": api.Group + "/" + api.Version, "kind": "BGPPeer", "metadata": map[string]any{"name": "router"},
		"status": map[string]any{"nodes": []any{map[string]any{"node": "node-a", "state": "established"}}},
	}}
	if _, err := dyn.Resource(api.BGPPeerResource).ApplyStatus(t.Context(), "router", stale, metav1.ApplyOptions{FieldManager: FieldManager("node-a"), Force: true}); err != nil {
		t.Fatal(err)
	}
	wantNodes(t, dyn, "the dead agent's entry", "node-a established  ")
	a.set(nil, nil)
	run(t, dyn, "node-a", a)
	wantNodes(t, dyn, "the dead agent's entry removed by the next")
}

// run starts node's writer with a short interval; the function returned
// stops it and waits for it to end (its entries removed).
func run(t *testing.T, dyn dynamic.Interface, node string, n *fakeNode) func() {
	t.Helper()
	w, err := New(Options{Dynamic: dyn, Node: node, Peers: n.Peers, Sessions: n.Sessions, Interval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil)).With("node", node)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	t.Cleanup(stop)
	return stop
}

// wantNodes waits until the BGPPeer's status.nodes are want, each
// "node state lastTransitionTime lastError", by node.
func wantNodes(t *testing.T, dyn dynamic.Interface, what string, want ...string) {
	t.Helper()
	testenv.Eventually(t, apiTimeout, what, func() (bool, string) {
		u, err := dyn.Resource(api.BGPPeerResource).Get(context.Background(), "router", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		var p api.BGPPeer
		if err := api.FromUnstructured(u, &p); err != nil {
			return false, err.Error()
		}
		var got []string
		for _, n := range p.Status.Nodes {
			at := ""
			if n.LastTransitionTime != nil {
				at = n.LastTransitionTime.UTC().Format(time.RFC3339)
			}
			got = append(got, fmt.Sprintf("%s %s %s %s", n.Node, n.State, at, n.LastError))
		}
		// In the order the agents first wrote them.
		slices.Sort(got)
		return slices.Equal(got, want), strings.Join(got, " | ")
	})
}
