package controller

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/k8s/api"
)

// Event reasons of the policy.
const (
	// EventInvalidDenyList (Warning, on a DenyList): the nodes leave
	// some or all of its prefixes out; the message says which and why.
	EventInvalidDenyList = "InvalidDenyList"
	// EventInvalidSourceRanges (Warning, on a Service): xlb cannot
	// enforce the Service's source ranges, and its nodes do not serve
	// it until they are corrected.
	EventInvalidSourceRanges = "InvalidSourceRanges"
)

// watchDenyLists queues the DenyLists' statuses when a list's spec
// changes, comes or goes: every list's, as whether one fits the nodes'
// limit depends on the older ones.
func (r *reconciler) watchDenyLists(lists cache.SharedIndexInformer) error {
	// Status writes (ours) change nothing the status says.
	changed := func(any) { r.queue.Add(item{kind: denyListsItem}) }
	_, err := lists.AddEventHandler(specHandler(changed, false))
	if err != nil {
		return fmt.Errorf("watch DenyLists: %w", err)
	}
	return nil
}

// syncDenyLists writes every DenyList's status: how many of its prefixes
// the nodes enforce, or what they leave out and why (with a Warning
// Event), as the agents' Kubernetes source does: entries that are no
// IPv4 or IPv6 CIDR in network form are left out, and a list that would take the
// lists, oldest first, over config.MaxDenyPrefixes is left out whole.
// The agents add their file's policy.deny, which the controller does not
// know: a node whose file holds many prefixes may leave out a list that
// fits here (its log says so).
func (r *reconciler) syncDenyLists(ctx context.Context) error {
	objs, err := r.denyLists.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list DenyLists: %w", err)
	}
	var lists []*unstructured.Unstructured
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok {
			lists = append(lists, u)
		}
	}
	slices.SortFunc(lists, func(a, b *unstructured.Unstructured) int {
		return cmp.Or(a.GetCreationTimestamp().Compare(b.GetCreationTimestamp().Time), cmp.Compare(a.GetName(), b.GetName()))
	})
	seen := map[netip.Prefix]bool{}
	var errs []error
	live := map[string]bool{}
	for _, u := range lists {
		name := u.GetName()
		live[name] = true
		var dl api.DenyList
		var want api.DenyListStatus
		if err := api.FromUnstructured(u, &dl); err != nil {
			want.Error = fmt.Sprintf("cannot be read: %v", err)
		} else {
			ok, bad := api.DenyPrefixes(dl.Spec)
			var fresh []netip.Prefix
			for _, p := range ok {
				if !seen[p] {
					fresh = append(fresh, p)
				}
			}
			var why []string
			if len(bad) > 0 {
				why = append(why, "left out: "+strings.Join(bad, "; "))
			}
			if len(seen)+len(fresh) > config.MaxDenyPrefixes {
				why = append(why, fmt.Sprintf("not enforced: its %d prefixes would take the nodes' deny list over %d, which older DenyLists fill with %d", len(fresh), config.MaxDenyPrefixes, len(seen)))
			} else {
				for _, p := range fresh {
					seen[p] = true
				}
				want.Prefixes = int64(len(ok))
			}
			want.Error = strings.Join(why, "; ")
		}
		if err := r.writeDenyListStatus(ctx, u, dl.Status, want); err != nil {
			errs = append(errs, err)
		}
	}
	for k := range r.warned {
		if name, ok := strings.CutPrefix(k, "denylist:"); ok && !live[name] {
			delete(r.warned, k)
		}
	}
	return errors.Join(errs...)
}

// writeDenyListStatus patches a DenyList's status to want unless it is
// so, and gives the list a Warning Event for a new error.
func (r *reconciler) writeDenyListStatus(ctx context.Context, u *unstructured.Unstructured, have, want api.DenyListStatus) error {
	name := u.GetName()
	if want.Error == "" {
		delete(r.warned, "denylist:"+name)
	} else if w := (warning{EventInvalidDenyList, want.Error}); r.warned["denylist:"+name] != w {
		r.warned["denylist:"+name] = w
		r.log.Warn("deny list not fully enforced", "denylist", name, "error", want.Error,
			"fix", "correct the DenyList as the error says (kubectl edit denylist "+name+")")
		r.recorder.Event(u, corev1.EventTypeWarning, EventInvalidDenyList, want.Error)
	}
	if reflect.DeepEqual(have, want) {
		return nil
	}
	return r.writeStatus(ctx, api.DenyListResource, "deny list", name, map[string]any{"prefixes": want.Prefixes}, want.Error)
}

// writeStatus writes status, with error errMsg ("" for none), into the
// status of resource res's object name (what: its kind, in words). The
// controller is the status's only writer: a merge patch of the whole
// status, "error": null removing an old error. An object deleted
// meanwhile needs none.
func (r *reconciler) writeStatus(ctx context.Context, res schema.GroupVersionResource, what, name string, status map[string]any, errMsg string) error {
	status["error"] = nil
	if errMsg != "" {
		status["error"] = errMsg
	}
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	_, err = r.opts.Dynamic.Resource(res).Patch(ctx, name, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: r.opts.FieldManager}, "status")
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s %s: write status: %w", what, name, err)
	}
	return nil
}

// noteSourceRanges records, once per distinct message, a Warning Event on
// a served Service whose source ranges xlb cannot enforce: its nodes
// leave it out (the agents' Kubernetes source), rather than let in the
// sources its ranges leave out.
func (r *reconciler) noteSourceRanges(svc *corev1.Service, key string) {
	why := api.SourceRanges(svc).Unservable(config.MaxSourceRanges)
	if why == "" {
		delete(r.rangesNoted, key)
		return
	}
	if r.rangesNoted[key] == why {
		return
	}
	r.rangesNoted[key] = why
	r.log.Warn("a Service's source ranges cannot be enforced; the xlb nodes do not serve it", "service", key, "error", why,
		"fix", "correct spec.loadBalancerSourceRanges (or the annotation "+api.AnnotationSourceRanges+"): IPv4 CIDRs such as 192.0.2.0/24")
	r.recorder.Event(svc, corev1.EventTypeWarning, EventInvalidSourceRanges,
		why+"; the xlb nodes do not serve the Service until this is corrected, as no source its ranges leave out may reach it")
}
