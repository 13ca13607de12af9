package controller

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/xlbproject/xlb/internal/k8s/api"
	"github.com/xlbproject/xlb/testbed/testenv"
)

func advertObject(name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": api.Group + "/" + api.Version, "kind": "BGPAdvertisement",
		"metadata": map[string]any{"name": name}, "spec": spec,
	}}
}

// testAdverts: the BGPAdvertisement schema refuses malformed communities
// and lengths with messages naming the field; the controller counts what
// a valid one selects in its status, and reports in status.error and a
// Warning Event what the schema cannot see (a name that matches nothing,
// a selector that does not compile), until it is corrected.
func (e *apiEnv) testAdverts(t *testing.T) {
	adverts := e.dyn.Resource(api.BGPAdvertisementResource)
	for _, tc := range []struct {
		name string
		spec map[string]any
		want []string
	}{
		{"community-too-big", map[string]any{"communities": []any{"65536:1"}}, []string{"spec.communities[0]", "65536:1 is not a community: write ASN:VALUE"}},
		{"community-large", map[string]any{"communities": []any{"1:2:3"}}, []string{"spec.communities[0]", "1:2:3 is not a community"}},
		{"community-name", map[string]any{"communities": []any{"no-such-name"}}, []string{"spec.communities[0]", "no-such-name is not a community", "or one of no-export"}},
		{"large-short", map[string]any{"largeCommunities": []any{"1:2"}}, []string{"spec.largeCommunities[0]", "1:2 is not a large community: write GLOBAL:LOCAL1:LOCAL2"}},
		{"large-too-big", map[string]any{"largeCommunities": []any{"1:2:4294967296"}}, []string{"spec.largeCommunities[0]", "is not a large community"}},
		{"duplicate-community", map[string]any{"communities": []any{"1:1", "1:1"}}, []string{"spec.communities[1]: Duplicate value"}},
		{"localpref-negative", map[string]any{"localPref": int64(-1)}, []string{"spec.localPref", "greater than or equal to 0"}},
		{"aggregation-33", map[string]any{"aggregationLength": int64(33)}, []string{"spec.aggregationLength", "less than or equal to 32"}},
		{"aggregation-v6-129", map[string]any{"aggregationLengthV6": int64(129)}, []string{"spec.aggregationLengthV6", "less than or equal to 128"}},
		{"aggregate-only-alone", map[string]any{"aggregateOnly": true}, []string{"aggregateOnly needs aggregationLength or aggregationLengthV6"}},
	} {
		_, err := adverts.Create(t.Context(), advertObject("bad-"+tc.name, tc.spec), metav1.CreateOptions{})
		if err == nil {
			t.Errorf("BGPAdvertisement %s: accepted %v", tc.name, tc.spec)
			continue
		}
		if !apierrors.IsInvalid(err) {
			t.Errorf("BGPAdvertisement %s: %v, want Invalid", tc.name, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("BGPAdvertisement %s: %v; want it to say %q", tc.name, err, w)
			}
		}
	}

	// A pool and a peer to select.
	pool := poolObject("adv-pool", map[string]any{"addresses": []any{"10.250.0.0/30"}, "autoAssign": false})
	pool.SetLabels(map[string]string{"tier": "web"})
	if _, err := e.dyn.Resource(api.AddressPoolResource).Create(t.Context(), pool, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	peer := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": api.Group + "/" + api.Version, "kind": "BGPPeer",
		"metadata": map[string]any{"name": "adv-tor", "labels": map[string]any{"role": "tor"}},
		"spec":     map[string]any{"myASN": int64(65001), "peerASN": int64(65000), "peerAddress": "10.0.9.1"},
	}}
	if _, err := e.dyn.Resource(api.BGPPeerResource).Create(t.Context(), peer, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitStatus := func(name string, want api.BGPAdvertisementStatus) {
		t.Helper()
		testenv.Eventually(t, waitTime, "status of BGPAdvertisement "+name, func() (bool, string) {
			u, err := adverts.Get(t.Context(), name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			var a api.BGPAdvertisement
			if err := api.FromUnstructured(u, &a); err != nil {
				return false, err.Error()
			}
			return reflect.DeepEqual(a.Status, want), fmt.Sprintf("%+v", a.Status)
		})
	}
	good := advertObject("adv-good", map[string]any{
		"addressPoolSelectors": []any{map[string]any{"matchLabels": map[string]any{"tier": "web"}}},
		"peers":                []any{"adv-tor"}, "communities": []any{"65000:100", "no-export", "Blackhole"}, "largeCommunities": []any{"65000:1:2"},
		"localPref": int64(200), "aggregationLength": int64(24), "aggregationLengthV6": int64(64),
	})
	if _, err := adverts.Create(t.Context(), good, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitStatus("adv-good", api.BGPAdvertisementStatus{Pools: 1, Peers: 1})

	// Names that match nothing: the rest applies, and the status says so.
	typo := advertObject("adv-typo", map[string]any{"addressPools": []any{"adv-pool", "adv-pol"}, "peerSelectors": []any{map[string]any{"matchLabels": map[string]any{"role": "spine"}}}})
	if _, err := adverts.Create(t.Context(), typo, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const typoErr = "spec.addressPools names AddressPools that do not exist: adv-pol; spec.peers: selects no BGPPeer, so it announces nothing"
	waitStatus("adv-typo", api.BGPAdvertisementStatus{Pools: 1, Error: typoErr})
	e.waitEvent(t, "", "adv-typo", EventInvalidBGPAdvertisement, typoErr)
	// Corrected: the error goes.
	fix := []byte(`{"spec":{"addressPools":["adv-pool"],"peerSelectors":[{"matchLabels":{"role":"tor"}}]}}`)
	if _, err := adverts.Patch(t.Context(), "adv-typo", types.MergePatchType, fix, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitStatus("adv-typo", api.BGPAdvertisementStatus{Pools: 1, Peers: 1})

	// A selector the schema lets through but that does not compile: the
	// agents leave the advertisement out.
	bad := advertObject("adv-bad-selector", map[string]any{"peerSelectors": []any{map[string]any{"matchExpressions": []any{map[string]any{"key": "role", "operator": "In"}}}}})
	if _, err := adverts.Create(t.Context(), bad, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitEvent(t, "", "adv-bad-selector", EventInvalidBGPAdvertisement, "spec.peerSelectors[0]", "the agents leave it out")
	u, err := adverts.Get(t.Context(), "adv-bad-selector", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if msg, _, _ := unstructured.NestedString(u.Object, "status", "error"); !strings.Contains(msg, "the agents leave it out") {
		t.Errorf("status.error %q, want the reason the agents leave it out", msg)
	}
	// The peer's label goes: adv-good no longer selects... it names it,
	// so it still does; adv-typo (by label) selects none.
	relabel := []byte(`{"metadata":{"labels":{"role":"leaf"}}}`)
	if _, err := e.dyn.Resource(api.BGPPeerResource).Patch(t.Context(), "adv-tor", types.MergePatchType, relabel, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitStatus("adv-typo", api.BGPAdvertisementStatus{Pools: 1, Error: "spec.peers: selects no BGPPeer, so it announces nothing"})
	waitStatus("adv-good", api.BGPAdvertisementStatus{Pools: 1, Peers: 1})
}
