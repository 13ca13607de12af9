package controller

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/k8s/api"
	"github.com/xlbproject/xlb/testbed/testenv"
)

func denyListObject(name string, created time.Time, prefixes []string) *unstructured.Unstructured {
	ps := make([]any, len(prefixes))
	for i, p := range prefixes {
		ps[i] = p
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": api.Group + "/" + api.Version, "kind": "DenyList",
		"metadata": map[string]any{"name": name, "creationTimestamp": created.UTC().Format(time.RFC3339)},
		"spec":     map[string]any{"prefixes": ps},
	}}
}

// Each DenyList's status says what the nodes enforce of it, as their
// Kubernetes source reads the lists: entries the schema would refuse
// (a list stored before it) left out, and the newest list that would
// take them over their limit left out whole, each with a Warning.
func TestDenyListStatus(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	big := func(n, base int) []string {
		out := make([]string, n)
		for i := range out {
			j := base + i
			out[i] = fmt.Sprintf("%d.%d.%d.0/24", 1+j>>16, byte(j>>8), byte(j))
		}
		return out
	}
	e := newFakeEnv(t, nil,
		denyListObject("good", t0, []string{"192.0.2.0/24", "198.51.100.0/24"}),
		denyListObject("mixed", t0.Add(time.Minute), []string{"203.0.113.0/24", "203.0.113.1/24", "2001:db8::/32"}),
		denyListObject("most", t0.Add(2*time.Minute), big(config.MaxDenyPrefixes-10, 0)),
		denyListObject("too-many", t0.Add(3*time.Minute), big(20, config.MaxDenyPrefixes)),
	)
	e.start(Options{})
	for name, want := range map[string]api.DenyListStatus{
		"good":  {Prefixes: 2},
		"mixed": {Prefixes: 2, Error: "left out: 203.0.113.1/24 has host bits set; write its network, 203.0.113.0/24"},
		"most":  {Prefixes: int64(config.MaxDenyPrefixes - 10)},
		"too-many": {Error: fmt.Sprintf("not enforced: its 20 prefixes would take the nodes' deny list over %d, which older DenyLists fill with %d",
			config.MaxDenyPrefixes, config.MaxDenyPrefixes-6)},
	} {
		testenv.Eventually(t, 10*time.Second, "status of DenyList "+name, func() (bool, string) {
			u, err := e.dyn.Resource(api.DenyListResource).Get(t.Context(), name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			var dl api.DenyList
			if err := api.FromUnstructured(u, &dl); err != nil {
				return false, err.Error()
			}
			return reflect.DeepEqual(dl.Status, want), fmt.Sprintf("%+v", dl.Status)
		})
	}
	e.waitEvent("mixed", EventInvalidDenyList, "203.0.113.1/24 has host bits set")
	e.waitEvent("too-many", EventInvalidDenyList, "not enforced")
	if evs := e.events.find("good", EventInvalidDenyList); len(evs) != 0 {
		t.Errorf("Events on a good list: %v", evs)
	}
}
