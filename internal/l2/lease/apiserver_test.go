package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/xlbproject/xlb/testbed/k8stest"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// cuttable is a Leases client whose requests fail while cut: a node cut
// off from the API server.
type cuttable struct {
	leaseClient
	cut atomic.Bool
}

var errCut = errors.New("test: the API server is unreachable")

func (c *cuttable) Get(ctx context.Context, name string, o metav1.GetOptions) (*coordinationv1.Lease, error) {
	if c.cut.Load() {
		return nil, errCut
	}
	return c.leaseClient.Get(ctx, name, o)
}

func (c *cuttable) Create(ctx context.Context, l *coordinationv1.Lease, o metav1.CreateOptions) (*coordinationv1.Lease, error) {
	if c.cut.Load() {
		return nil, errCut
	}
	return c.leaseClient.Create(ctx, l, o)
}

func (c *cuttable) Update(ctx context.Context, l *coordinationv1.Lease, o metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	if c.cut.Load() {
		return nil, errCut
	}
	return c.leaseClient.Update(ctx, l, o)
}

// node is one elector under test.
type node struct {
	name   string
	e      *Elector
	cut    *cuttable
	cancel context.CancelFunc
	done   chan struct{}
}

func startNode(t *testing.T, client kubernetes.Interface, name string, vips []netip.Addr) *node {
	t.Helper()
	e, err := New(Config{Client: client, Namespace: "default", Self: name}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	c := &cuttable{leaseClient: e.leases}
	e.leases = c
	e.SetServable(vips)
	ctx, cancel := context.WithCancel(context.Background())
	n := &node{name: name, e: e, cut: c, cancel: cancel, done: make(chan struct{})}
	go func() { e.Run(ctx, func([]string) {}); close(n.done) }()
	t.Cleanup(n.stop)
	return n
}

// stop ends the elector without leaving: its Lease stops changing, as a
// stopped agent's does.
func (n *node) stop() {
	n.cancel()
	<-n.done
}

// answering reports whether n answers for vip: it owns it in its own view
// and its claim holds.
func (n *node) answering(vip netip.Addr) bool {
	return n.e.ValidFor() > 0 && n.e.Owner(vip, n.e.Alive()) == n.name
}

// owners lists, for each VIP, the nodes that answer for it.
func owners(nodes []*node, vips []netip.Addr) map[netip.Addr][]string {
	out := map[netip.Addr][]string{}
	for _, v := range vips {
		out[v] = nil
		for _, n := range nodes {
			if n.answering(v) {
				out[v] = append(out[v], n.name)
			}
		}
	}
	return out
}

// settled: every VIP answered by exactly one of nodes, none by another,
// and its VIP Lease naming that node.
func settled(ctx context.Context, client kubernetes.Interface, nodes []*node, vips []netip.Addr) (bool, string) {
	var bad []string
	for v, os := range owners(nodes, vips) {
		if len(os) != 1 {
			bad = append(bad, fmt.Sprintf("%s answered by %v", v, os))
			continue
		}
		l, err := client.CoordinationV1().Leases("default").Get(ctx, VIPLease(v), metav1.GetOptions{})
		switch {
		case err != nil:
			bad = append(bad, fmt.Sprintf("%s: %v", v, err))
		case l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != os[0]:
			holder := "none"
			if l.Spec.HolderIdentity != nil {
				holder = *l.Spec.HolderIdentity
			}
			bad = append(bad, fmt.Sprintf("%s: Lease holder %s, owner %s", v, holder, os[0]))
		}
	}
	return len(bad) == 0, strings.Join(bad, "; ")
}

// TestAPIServer runs three electors against a real kube-apiserver
// (testbed/k8stest): each VIP is answered by exactly one node and
// recorded in its VIP Lease; a stopped node's VIPs move to the others; a
// node cut off from the API server stops answering no later than the
// others take its VIPs over (never both); a node that leaves hands its
// VIPs over at once. It logs the failover times and the API writes per
// second.
func TestAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Kubernetes control plane; skipped with -short")
	}
	cp := k8stest.StartT(t, k8stest.Options{})
	client, _, err := cp.Clients(200, 400)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	var vips []netip.Addr
	for i := 1; i <= 30; i++ {
		vips = append(vips, netip.AddrFrom4([4]byte{10, 99, 0, byte(i)}))
	}
	// IPv6 VIPs too, one whose text form ends in "::".
	vips = append(vips, netip.MustParseAddr("fd00:99::"), netip.MustParseAddr("fd00:99::1"))
	a := startNode(t, client, "node-a", vips)
	b := startNode(t, client, "node-b", vips)
	c := startNode(t, client, "node-c", vips)
	all := []*node{a, b, c}
	testenv.Eventually(t, 30*time.Second, "three nodes share the VIPs", func() (bool, string) { return settled(ctx, client, all, vips) })
	share := map[string]int{}
	for v, os := range owners(all, vips) {
		share[os[0]]++
		_ = v
	}
	t.Logf("%d VIPs over three nodes: %v", len(vips), share)
	for _, n := range all {
		if share[n.name] == 0 {
			t.Errorf("%s answers for none of %d VIPs", n.name, len(vips))
		}
	}

	// Writes per second once settled: the renewals alone, whatever M.
	w0, t0 := a.e.Writes()+b.e.Writes()+c.e.Writes(), time.Now()
	time.Sleep(3 * time.Second)
	w1, t1 := a.e.Writes()+b.e.Writes()+c.e.Writes(), time.Now()
	t.Logf("API writes: %.1f a second for 3 nodes and %d VIPs (renewal every %s: %.0f expected)", float64(w1-w0)/t1.Sub(t0).Seconds(), len(vips), DefaultRenew, 3/DefaultRenew.Seconds())

	// c stops (SIGSTOP, a crash): a and b take its VIPs over.
	var ofC []netip.Addr
	for v, os := range owners(all, vips) {
		if os[0] == "node-c" {
			ofC = append(ofC, v)
		}
	}
	stopped := time.Now()
	c.stop()
	ab := []*node{a, b}
	testenv.Eventually(t, 30*time.Second, "a and b take c's VIPs over", func() (bool, string) {
		for _, v := range ofC {
			if len(owners(ab, []netip.Addr{v})[v]) != 1 {
				return false, v.String() + " unanswered"
			}
		}
		return true, ""
	})
	t.Logf("c stopped: its %d VIPs answered by a or b %s later", len(ofC), time.Since(stopped).Round(time.Millisecond))
	testenv.Eventually(t, 30*time.Second, "a and b share the VIPs, recorded", func() (bool, string) { return settled(ctx, client, ab, vips) })

	// b is cut off from the API server: it stops answering a dead time
	// after its last renewal, and a takes over no earlier. Read a first:
	// if a answers and then b still does, both answered at once.
	var ofB []netip.Addr
	for v, os := range owners(ab, vips) {
		if os[0] == "node-b" {
			ofB = append(ofB, v)
		}
	}
	cut := time.Now()
	b.cut.cut.Store(true)
	var bSilent, aTook time.Duration
	for time.Since(cut) < 30*time.Second && (bSilent == 0 || aTook == 0) {
		aAll, bAny := true, false
		for _, v := range ofB {
			aHas := a.answering(v)
			bHas := b.answering(v)
			if aHas && bHas {
				t.Fatalf("%s after the cut: a answers %s while b still does", time.Since(cut), v)
			}
			aAll = aAll && aHas
			bAny = bAny || bHas
		}
		if !bAny && bSilent == 0 {
			bSilent = time.Since(cut)
		}
		if aAll && aTook == 0 {
			aTook = time.Since(cut)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if bSilent == 0 || aTook == 0 {
		t.Fatalf("30s after b was cut off: b silent after %v, a took over after %v (0: not yet)", bSilent, aTook)
	}
	t.Logf("b cut off from the API server: silent after %s, its %d VIPs answered by a after %s", bSilent.Round(time.Millisecond), len(ofB), aTook.Round(time.Millisecond))
	b.cut.cut.Store(false)
	testenv.Eventually(t, 30*time.Second, "b back: a and b share the VIPs again", func() (bool, string) { return settled(ctx, client, ab, vips) })

	// b leaves (SIGTERM): its Lease is deleted and a takes over at once.
	left := time.Now()
	b.e.Leave()
	testenv.Eventually(t, 30*time.Second, "a answers every VIP after b left", func() (bool, string) { return settled(ctx, client, []*node{a}, vips) })
	t.Logf("b left: a answers for every VIP %s later", time.Since(left).Round(time.Millisecond))
	if _, err := client.CoordinationV1().Leases("default").Get(ctx, NodeLease("node-b"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("b's node Lease after it left: %v, want it deleted", err)
	}
}
