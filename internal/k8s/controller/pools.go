package controller

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/xlbproject/xlb/internal/k8s/api"
)

// syncPoolStatus writes one AddressPool's status: its size and usage, or
// why it is not used (with a Warning Event on the pool).
func (r *reconciler) syncPoolStatus(ctx context.Context, name string) error {
	obj, err := r.pools.Get(name)
	if apierrors.IsNotFound(err) {
		delete(r.warned, "pool:"+name)
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
		want.Size, want.Assigned, want.Available = int64(size), int64(used), int64(size-used)
		delete(r.warned, "pool:"+name)
	}
	var have api.AddressPool
	if err := api.FromUnstructured(u, &have); err == nil && have.Status == want {
		return nil
	}
	// A merge patch of the whole status: "error": null removes an old
	// error. The controller is the status's only writer, so no
	// resourceVersion is needed.
	status := map[string]any{"size": want.Size, "assigned": want.Assigned, "available": want.Available, "error": nil}
	if want.Error != "" {
		status["error"] = want.Error
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
