package main

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// In Kubernetes every stop of the agent's pod is a SIGTERM, a rolling
// update's as much as a node's that goes away. With graceful restart the
// first should keep the routers' routes and the second must not: a node
// drained for maintenance would leave its routes in place for the whole
// restart time, pointing at a node that is gone. kubectl drain cordons
// the node first, and the cluster autoscaler taints a node it removes;
// those say the node leaves.

// leavingTimeout bounds the look at the Node on the way out: an API
// server that does not answer leaves graceful restart as configured.
const leavingTimeout = 2 * time.Second

var nodesResource = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}

// leavingTaints are the taints of a node on its way out of the cluster.
var leavingTaints = map[string]bool{
	"node.kubernetes.io/unschedulable": true,
	"ToBeDeletedByClusterAutoscaler":   true,
}

// nodeLeaving says whether Node name is leaving (cordoned, tainted for
// removal, or being deleted), and why.
func nodeLeaving(ctx context.Context, dyn dynamic.Interface, name string) (bool, string, error) {
	ctx, cancel := context.WithTimeout(ctx, leavingTimeout)
	defer cancel()
	n, err := dyn.Resource(nodesResource).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, "", fmt.Errorf("read Node %s: %w", name, err)
	}
	return leaving(n)
}

// leaving is nodeLeaving for Node n as read.
func leaving(n *unstructured.Unstructured) (bool, string, error) {
	if n.GetDeletionTimestamp() != nil {
		return true, "the Node is being deleted", nil
	}
	if u, _, err := unstructured.NestedBool(n.Object, "spec", "unschedulable"); err != nil {
		return false, "", fmt.Errorf("node %s: spec.unschedulable: %w", n.GetName(), err)
	} else if u {
		return true, "the Node is cordoned (spec.unschedulable)", nil
	}
	taints, _, err := unstructured.NestedSlice(n.Object, "spec", "taints")
	if err != nil {
		return false, "", fmt.Errorf("node %s: spec.taints: %w", n.GetName(), err)
	}
	for _, t := range taints {
		m, ok := t.(map[string]any)
		if !ok {
			continue
		}
		if k, _ := m["key"].(string); leavingTaints[k] {
			return true, "the Node has taint " + k, nil
		}
	}
	return false, "", nil
}
