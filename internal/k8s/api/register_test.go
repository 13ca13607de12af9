package api

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// The scheme knows every kind and its list, and the generated deep copy
// shares nothing with the original.
func TestSchemeAndDeepCopy(t *testing.T) {
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"AddressPool", "AddressPoolList", "BGPPeer", "BGPPeerList", "DenyList", "DenyListList"} {
		if !s.Recognizes(GroupVersion.WithKind(kind)) {
			t.Errorf("the scheme does not know %s", kind)
		}
	}
	peer := &BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "tor"}, Spec: BGPPeerSpec{
		HoldTime:      &metav1.Duration{Duration: 9 * time.Second},
		NodeSelectors: []LabelSelector{{MatchLabels: map[string]string{"rack": "r1"}}},
	}}
	cp, ok := peer.DeepCopyObject().(*BGPPeer)
	if !ok {
		t.Fatalf("DeepCopyObject returned %T", peer.DeepCopyObject())
	}
	cp.Spec.HoldTime.Duration = time.Second
	cp.Spec.NodeSelectors[0].MatchLabels["rack"] = "r2"
	if peer.Spec.HoldTime.Duration != 9*time.Second || peer.Spec.NodeSelectors[0].MatchLabels["rack"] != "r1" {
		t.Errorf("changing the copy changed the original: %+v", peer.Spec)
	}
}

// AsSelector means what metav1.LabelSelectorAsSelector means, errors
// included.
func TestLabelSelectorAsSelector(t *testing.T) {
	s := LabelSelector{
		MatchLabels:      map[string]string{"role": "lb"},
		MatchExpressions: []LabelSelectorRequirement{{Key: "rack", Operator: metav1.LabelSelectorOpIn, Values: []string{"r1", "r2"}}},
	}
	sel, err := s.AsSelector()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		labels labels.Set
		want   bool
	}{
		{labels.Set{"role": "lb", "rack": "r2"}, true},
		{labels.Set{"role": "lb", "rack": "r3"}, false},
		{labels.Set{"rack": "r1"}, false},
	} {
		if got := sel.Matches(tc.labels); got != tc.want {
			t.Errorf("%s matches %v: %v, want %v", sel, tc.labels, got, tc.want)
		}
	}
	bad := LabelSelector{MatchExpressions: []LabelSelectorRequirement{{Key: "rack", Operator: "Near"}}}
	if _, err := bad.AsSelector(); err == nil {
		t.Error("operator Near: no error")
	}
	if sel, err := (&LabelSelector{}).AsSelector(); err != nil || !sel.Empty() {
		t.Errorf("the empty selector: %v, %v; want one matching everything", sel, err)
	}
}
