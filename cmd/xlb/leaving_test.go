package main

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A Node leaves when it is being deleted, cordoned, or tainted for
// removal; any other Node, and other taints, do not; a Node whose fields
// have the wrong type is an error, never a guess.
func TestNodeLeaving(t *testing.T) {
	node := func(meta, spec map[string]any) *unstructured.Unstructured {
		m := map[string]any{"name": "lb1"}
		for k, v := range meta {
			m[k] = v
		}
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": m, "spec": spec}}
	}
	for _, c := range []struct {
		name    string
		n       *unstructured.Unstructured
		leaving bool
		why     string
		err     string
	}{
		{"plain", node(nil, map[string]any{}), false, "", ""},
		{"schedulable", node(nil, map[string]any{"unschedulable": false}), false, "", ""},
		{"cordoned", node(nil, map[string]any{"unschedulable": true}), true, "cordoned", ""},
		{"deleted", node(map[string]any{"deletionTimestamp": "2026-11-29T09:00:00Z"}, map[string]any{}), true, "being deleted", ""},
		{"autoscaler", node(nil, map[string]any{"taints": []any{map[string]any{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}}}), true, "ToBeDeletedByClusterAutoscaler", ""},
		{"unschedulable taint", node(nil, map[string]any{"taints": []any{map[string]any{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}}}), true, "node.kubernetes.io/unschedulable", ""},
		{"other taint", node(nil, map[string]any{"taints": []any{map[string]any{"key": "dedicated", "value": "lb", "effect": "NoSchedule"}}}), false, "", ""},
		{"unschedulable not a bool", node(nil, map[string]any{"unschedulable": "yes"}), false, "", "spec.unschedulable"},
		{"taints not a list", node(nil, map[string]any{"taints": "x"}), false, "", "spec.taints"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, why, err := leaving(c.n)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one naming %s", err, c.err)
				}
				return
			}
			if err != nil || got != c.leaving || !strings.Contains(why, c.why) {
				t.Fatalf("leaving %v (%q), %v; want %v (%q)", got, why, err, c.leaving, c.why)
			}
		})
	}
}
