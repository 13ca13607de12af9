package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/k8s/api"
	"github.com/xlbproject/xlb/internal/k8s/endpoints"
	"github.com/xlbproject/xlb/internal/k8s/history"
)

// The endpoint history of daisy-chained Services: the leader records each
// change of a Service's backend sets (as the agents compute them from its
// EndpointSlices) in the annotation xlb.io/endpoint-history, so that every
// agent, one started after the change included, computes the same
// daisy-chaining hints (internal/k8s/history, docs/connection-survival.md).

// sliceIndex indexes EndpointSlices by the Service they belong to.
const sliceIndex = "service"

// watchSlices queues the Service of a changed EndpointSlice when it is
// daisy-chained: its endpoint history may have to record the change.
func (r *reconciler) watchSlices(slices cache.SharedIndexInformer) error {
	if err := slices.AddIndexers(cache.Indexers{sliceIndex: endpoints.ServiceIndex}); err != nil {
		return fmt.Errorf("index EndpointSlices: %w", err)
	}
	r.slices = slices.GetIndexer()
	changed := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		keys, _ := endpoints.ServiceIndex(obj)
		for _, key := range keys {
			ns, name, err := cache.SplitMetaNamespaceKey(key)
			if err != nil {
				continue
			}
			if svc, err := r.services.Services(ns).Get(name); err == nil && daisyChained(svc) {
				r.queue.Add(item{kind: serviceItem, key: key})
			}
		}
	}
	if _, err := slices.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    changed,
		UpdateFunc: func(_, obj any) { changed(obj) },
		DeleteFunc: changed,
	}); err != nil {
		return fmt.Errorf("watch EndpointSlices: %w", err)
	}
	return nil
}

// daisyChained reports whether svc asks for daisy chaining. A value that
// is no flows mode is not: the agents leave such a Service out, and say
// why.
func daisyChained(svc *corev1.Service) bool {
	f, err := config.ParseFlows(strings.TrimSpace(svc.Annotations[api.AnnotationFlows]))
	return err == nil && f == config.FlowsDaisyChain
}

// endpointSets returns the backend sets of svc's TCP and UDP ports that
// have backends, as the agents compute them (endpoints.BackendsOf): the
// IPv4 endpoints under the port's history.PortKey, the IPv6 ones (those
// of the Service's IPv6 address) under its history.PortKey6.
func (r *reconciler) endpointSets(svc *corev1.Service) history.Sets {
	var eps []*discoveryv1.EndpointSlice
	if r.slices != nil {
		objs, _ := r.slices.ByIndex(sliceIndex, svc.Namespace+"/"+svc.Name)
		for _, o := range objs {
			if sl, ok := o.(*discoveryv1.EndpointSlice); ok {
				eps = append(eps, sl)
			}
		}
	}
	sets := history.Sets{}
	for _, port := range svc.Spec.Ports {
		proto, ok := endpoints.Protocol(port.Protocol)
		if !ok {
			continue
		}
		if port.Port < 1 || port.Port > 65535 {
			continue
		}
		if bs := endpoints.BackendsOf(eps, port, discoveryv1.AddressTypeIPv4); len(bs) > 0 {
			sets[history.PortKey(uint16(port.Port), proto)] = bs
		}
		if bs := endpoints.BackendsOf(eps, port, discoveryv1.AddressTypeIPv6); len(bs) > 0 {
			sets[history.PortKey6(uint16(port.Port), proto)] = bs
		}
	}
	return sets
}

// recordHistory writes the endpoint history of a served, daisy-chained
// Service with an address (of either family) when its backend sets
// changed. The patch
// carries the resourceVersion the history was read at: if the Service
// changed since (our own previous write not seen yet among them), the
// API server refuses it and the Service is looked at again, so that no
// change is lost.
func (r *reconciler) recordHistory(ctx context.Context, svc *corev1.Service) error {
	if !daisyChained(svc) || (!ingressAddr(svc, false).IsValid() && !ingressAddr(svc, true).IsValid()) {
		return nil
	}
	var h history.History
	if v, ok := svc.Annotations[api.AnnotationEndpointHistory]; ok {
		parsed, err := history.Parse(v)
		if err != nil {
			r.log.Warn("the endpoint history annotation is unreadable; starting it afresh", "service", svc.Namespace+"/"+svc.Name, "err", err,
				"fix", fmt.Sprintf("nothing to do: the controller owns %s and rewrites it; do not edit it by hand", api.AnnotationEndpointHistory))
		} else {
			h = parsed
		}
	}
	next, changed := history.Record(h, r.endpointSets(svc), r.now())
	if !changed {
		return nil
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{
			"resourceVersion": svc.ResourceVersion,
			"annotations":     map[string]string{api.AnnotationEndpointHistory: history.Format(next)},
		},
	})
	if err != nil {
		return err
	}
	if _, err := r.opts.Client.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: r.opts.FieldManager}); err != nil {
		return fmt.Errorf("service %s/%s: write annotation %s: %w", svc.Namespace, svc.Name, api.AnnotationEndpointHistory, err)
	}
	r.log.Debug("endpoint history recorded", "service", svc.Namespace+"/"+svc.Name, "past", len(next.Past))
	return nil
}
