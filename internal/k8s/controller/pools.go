package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/xlbproject/xlb/internal/k8s/api"
)

// clampInt64 is n, or MaxInt64 for more: an IPv6 pool may hold more
// addresses than the status's integers count.
func clampInt64(n uint64) int64 {
	if n > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(n)
}

// syncPoolStatus writes one AddressPool's status: its size and usage, or
// why it is not used (with a Warning Event on the pool), and the Node
// addresses it leaves out (with a Warning Event too).
func (r *reconciler) syncPoolStatus(ctx context.Context, name string) error {
	obj, err := r.pools.Get(name)
	if apierrors.IsNotFound(err) {
		delete(r.warned, "pool:"+name)
		delete(r.warned, "pool-nodes:"+name)
		return nil
	}
	if err != nil {
		return err
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	var want api.AddressPoolStatus
	if perr, bad := r.poolErrors[name]; bad {
		want.Error = perr.Error()
		if w := (warning{EventInvalidPool, want.Error}); r.warned["pool:"+name] != w {
			r.warned["pool:"+name] = w
			r.recorder.Event(u, corev1.EventTypeWarning, EventInvalidPool, want.Error+"; Services get no address from it")
		}
	} else if used, size, ok := r.alloc.Usage(name); ok {
		want.Size, want.Assigned, want.Available = clampInt64(size), clampInt64(used), clampInt64(size-used)
		for _, p := range r.alloc.Pools() {
			if p.Name == name {
				want.Family = p.Family()
			}
		}
		delete(r.warned, "pool:"+name)
		want.NodeAddresses = r.poolNodeAddresses(name)
	}
	if len(want.NodeAddresses) == 0 {
		delete(r.warned, "pool-nodes:"+name)
	} else if w := (warning{EventNodeAddress, fmt.Sprint(want.NodeAddresses)}); r.warned["pool-nodes:"+name] != w {
		r.warned["pool-nodes:"+name] = w
		msg := fmt.Sprintf("Services do not get %s: a VIP equal to a node's address takes that node off the network; the pool hands out its other addresses. Remove these addresses from the pool",
			describeNodeAddresses(want.NodeAddresses))
		r.log.Warn("address pool holds node addresses; they are not handed out", "pool", name, "addresses", want.NodeAddresses,
			"fix", "remove the Nodes' InternalIPs and ExternalIPs from the pool's spec.addresses (kubectl edit addresspool "+name+")")
		r.recorder.Event(u, corev1.EventTypeWarning, EventNodeAddress, msg)
	}
	var have api.AddressPool
	if err := api.FromUnstructured(u, &have); err == nil && reflect.DeepEqual(have.Status, want) {
		return nil
	}
	// A merge patch of the whole status: "error": null removes an old
	// error. The controller is the status's only writer, so no
	// resourceVersion is needed.
	status := map[string]any{"size": want.Size, "assigned": want.Assigned, "available": want.Available, "error": nil, "nodeAddresses": nil, "family": nil}
	if want.Family != "" {
		status["family"] = want.Family
	}
	if want.Error != "" {
		status["error"] = want.Error
	}
	if len(want.NodeAddresses) > 0 {
		status["nodeAddresses"] = want.NodeAddresses
	}
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	_, err = r.opts.Dynamic.Resource(api.AddressPoolResource).Patch(ctx, name, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: r.opts.FieldManager}, "status")
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("address pool %s: write status: %w", name, err)
	}
	return nil
}
