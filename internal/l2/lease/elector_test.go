package lease

import (
	"log/slog"
	"net/netip"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// A node with no VIP of an l2 pool writes nothing (a cluster without l2
// pools costs the API server nothing); with some it renews its Lease
// with them; when it loses them all it says so once, then stops.
func TestRenewOnlyWithVIPs(t *testing.T) {
	client := fake.NewClientset()
	e, err := New(Config{Client: client, Namespace: "xlb-system", Self: "node-a"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	e.renew(ctx)
	if e.Writes() != 0 || e.ValidFor() > 0 {
		t.Fatalf("without VIPs: %d writes, valid %v; want none", e.Writes(), e.ValidFor())
	}
	e.SetServable([]netip.Addr{ip("10.99.0.2"), ip("10.99.0.1")})
	e.renew(ctx)
	e.renew(ctx)
	l, err := client.CoordinationV1().Leases("xlb-system").Get(ctx, NodeLease("node-a"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Annotations[AnnotationVIPs]; got != "10.99.0.1,10.99.0.2" || *l.Spec.HolderIdentity != "node-a" || l.Labels[LabelKind] != "node" {
		t.Errorf("Lease: VIPs %q, holder %q, labels %v", got, *l.Spec.HolderIdentity, l.Labels)
	}
	if e.Writes() != 2 {
		t.Errorf("%d writes for two renewals, want 2", e.Writes())
	}
	e.SetServable(nil)
	e.renew(ctx)
	e.renew(ctx)
	if e.Writes() != 3 {
		t.Errorf("%d writes after the VIPs went, want 3: one to say so, then none", e.Writes())
	}
	l, err = client.CoordinationV1().Leases("xlb-system").Get(ctx, NodeLease("node-a"), metav1.GetOptions{})
	if err != nil || l.Annotations[AnnotationVIPs] != "" {
		t.Errorf("Lease after the VIPs went: %v, VIPs %q; want an empty list", err, l.Annotations[AnnotationVIPs])
	}
}
