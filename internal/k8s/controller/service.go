package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/xlbproject/xlb/internal/k8s/allocator"
	"github.com/xlbproject/xlb/internal/k8s/api"
)

// Event reasons on Services.
const (
	// EventAllocated (Normal): the Service got an address.
	EventAllocated = "IPAllocated"
	// EventReleased (Normal): the Service's address went back to its pool.
	EventReleased = "IPReleased"
	// EventAllocationFailed (Warning): the Service has no address, or
	// not the one it asks for; the message says why.
	EventAllocationFailed = "AllocationFailed"
	// EventOutsidePools (Warning): the Service keeps an address that no
	// pool contains any more.
	EventOutsidePools = "AddressOutsidePools"
	// EventConflict (Warning): the Service's status shows an address
	// another Service holds; it gets another.
	EventConflict = "AddressConflict"
	// EventInvalidPool (Warning, on an AddressPool): the pool is not
	// used.
	EventInvalidPool = "InvalidPool"
	// EventSharingConflict (Warning): the Service gave up a shared
	// address it may no longer share (a port it now has in common
	// with another Service on it, another sharing key).
	EventSharingConflict = "SharingConflict"
)

// served reports whether xlb gives svc an address.
func (r *reconciler) served(svc *corev1.Service) bool {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return false
	}
	if c := svc.Spec.LoadBalancerClass; c != nil {
		return *c == api.LoadBalancerClass
	}
	return r.opts.ServeClassless
}

// ingressAddr is the address in svc's status: the first ingress IP.
func ingressAddr(svc *corev1.Service) netip.Addr {
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(in.IP); err == nil {
			return a
		}
	}
	return netip.Addr{}
}

// hasIngress reports whether svc's status is exactly [{ip: addr}].
func hasIngress(svc *corev1.Service, addr netip.Addr) bool {
	in := svc.Status.LoadBalancer.Ingress
	return len(in) == 1 && in[0].IP == addr.String() && in[0].Hostname == "" && len(in[0].Ports) == 0
}

// request describes svc to the allocator. The requested address comes
// from the annotation, else from the deprecated spec.loadBalancerIP. On
// an error the request still names the Service, its sharing key and its
// ports: enough to record an address it holds.
func (r *reconciler) request(key string, svc *corev1.Service) (allocator.Request, error) {
	req := allocator.Request{
		Key:       key,
		Namespace: svc.Namespace,
		Labels:    svc.Labels,
		Pool:      strings.TrimSpace(svc.Annotations[api.AnnotationPool]),
		Sharing:   strings.TrimSpace(svc.Annotations[api.AnnotationSharingKey]),
		Ports:     ports(svc),
	}
	if ns, err := r.namespaces.Get(svc.Namespace); err == nil {
		req.NamespaceLabels = ns.Labels
	}
	if len(svc.Spec.IPFamilies) > 0 && !slices.Contains(svc.Spec.IPFamilies, corev1.IPv4Protocol) {
		return req, &allocator.Error{Reason: allocator.ReasonInvalidRequest,
			Msg: "the Service is IPv6-only (spec.ipFamilies), and xlb allocates IPv4 addresses only in this version"}
	}
	if v := strings.TrimSpace(svc.Annotations[api.AnnotationAddresses]); v != "" {
		first, _, _ := strings.Cut(v, ",")
		first = strings.TrimSpace(first)
		a, err := netip.ParseAddr(first)
		if err != nil {
			return req, &allocator.Error{Reason: allocator.ReasonInvalidRequest,
				Msg: fmt.Sprintf("annotation %s: %q is not an IP address; write e.g. 10.99.0.5", api.AnnotationAddresses, first)}
		}
		req.Address = a
		return req, nil
	}
	// The field is deprecated, and still honoured: Services written for
	// other load balancers use it.
	if v := strings.TrimSpace(svc.Spec.LoadBalancerIP); v != "" {
		a, err := netip.ParseAddr(v)
		if err != nil {
			return req, &allocator.Error{Reason: allocator.ReasonInvalidRequest,
				Msg: fmt.Sprintf("spec.loadBalancerIP %q is not an IP address", v)}
		}
		req.Address = a
	}
	return req, nil
}

// ports are svc's ports as the allocator compares them for sharing.
func ports(svc *corev1.Service) []allocator.Port {
	out := make([]allocator.Port, 0, len(svc.Spec.Ports))
	for _, p := range svc.Spec.Ports {
		proto := p.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		out = append(out, allocator.Port{Port: p.Port, Protocol: string(proto)})
	}
	return out
}

// sharedWith describes, for an Event, the Services other than key that
// hold addr; "" if none does.
func (r *reconciler) sharedWith(addr netip.Addr, key string) string {
	others := slices.DeleteFunc(r.alloc.Holders(addr), func(k string) bool { return k == key })
	if len(others) == 0 {
		return ""
	}
	h, _ := r.alloc.HoldingOf(others[0])
	return fmt.Sprintf("Service %s (sharing key %q)", strings.Join(others, ", "), h.Sharing)
}

// syncService brings one Service's address and status in line.
func (r *reconciler) syncService(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // not a key we made; nothing to retry
	}
	svc, err := r.services.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		if addr, ok := r.alloc.Release(key); ok {
			r.log.Info("address released", "service", key, "address", addr, "why", "the Service is gone")
			r.metrics.released()
			// The Event names the deleted Service (its namespace,
			// name and UID): `kubectl get events -n NS` lists it
			// after the Service is gone.
			ref := &corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: ns, Name: name, UID: r.uids[key]}
			r.recorder.Eventf(ref, corev1.EventTypeNormal, EventReleased, "released %s: the Service was deleted%s", addr, r.stillHeld(addr))
			r.poolChanged(addr)
			r.freed()
		}
		delete(r.pending, key)
		delete(r.warned, key)
		delete(r.warned, affinityKey(key))
		delete(r.warned, forwardingKey(key))
		delete(r.uids, key)
		delete(r.noted, key)
		delete(r.rangesNoted, key)
		return nil
	}
	if err != nil {
		return err
	}
	if !r.served(svc) {
		delete(r.pending, key)
		delete(r.warned, key)
		delete(r.warned, affinityKey(key))
		delete(r.warned, forwardingKey(key))
		delete(r.uids, key)
		delete(r.noted, key)
		delete(r.rangesNoted, key)
		return r.unserve(ctx, key, svc)
	}
	r.uids[key] = svc.UID
	r.notePolicy(svc, key)
	r.noteSourceRanges(svc, key)
	r.noteForwarding(svc, key)
	if err := r.serve(ctx, key, svc); err != nil {
		return err
	}
	r.noteAffinity(svc, key)
	return r.recordHistory(ctx, svc)
}

// serve makes sure svc has an address, written to its status.
func (r *reconciler) serve(ctx context.Context, key string, svc *corev1.Service) error {
	req, reqErr := r.request(key, svc)
	held, has := r.alloc.Lookup(key)
	if in := ingressAddr(svc); !has && in.IsValid() {
		// The status names an address the allocator does not know
		// for this Service (written by someone else): adopt it if
		// it is free or the Service may share it, else the Service
		// needs another one.
		if err := r.alloc.Assign(req, in); err != nil {
			r.warn(svc, key, EventConflict, fmt.Sprintf("the status shows %s, but %v; allocating another address", in, err),
				fmt.Sprintf("nothing to do if another address suits the Service; to give it %s, free it from the Service that holds it, then request it with the annotation %s", in, api.AnnotationAddresses))
		} else {
			held, has = in, true
			r.poolChanged(in)
		}
	}

	// An address that is a Node's own is never kept: announced as a
	// VIP it would take that node off the network. Plan does not plan
	// it; the Service moves to another address or, if it can have
	// none, gives it up. Nor is a shared address kept by a Service
	// that may no longer share it (its ports now clash, its sharing
	// key changed): it moves too, or gives it up, and the others keep
	// it.
	nodeWhy, onNode := "", false
	var shareErr error
	if has {
		nodeWhy, onNode = r.alloc.Reserved(held)
		shareErr = r.alloc.Sharable(req, held)
	}
	if !onNode {
		r.unwarn(key, EventNodeAddress)
	}
	if shareErr == nil {
		r.unwarn(key, EventSharingConflict)
	}
	err := reqErr
	var addr netip.Addr
	if err == nil {
		addr, err = r.alloc.Plan(req)
	}
	switch {
	case err != nil && (onNode || shareErr != nil):
		r.alloc.Release(key)
		r.poolChanged(held)
		r.freed()
		if onNode {
			tail := fmt.Sprintf("no other address is free for it: %v", err)
			if allocator.ReasonOf(err) == allocator.ReasonNodeAddress {
				tail = fmt.Sprintf("the Service requests this address (annotation %s or spec.loadBalancerIP), so it has none until it requests another or the Node no longer has it", api.AnnotationAddresses)
			}
			r.warn(svc, key, EventNodeAddress, fmt.Sprintf("gave up %s, %s: a VIP equal to a node's address takes that node off the network; %s", held, nodeWhy, tail),
				fmt.Sprintf("give the Service another address (the annotation %s, or a pool with a free address), or remove %s from the Node if it is not the node's address", api.AnnotationAddresses, held))
		} else {
			r.warn(svc, key, EventSharingConflict, fmt.Sprintf("gave up %s: %v; the Services sharing it keep it", held, shareErr),
				fmt.Sprintf("give the Service ports of its own (or the old ones back), or change its annotation %s for an address of its own", api.AnnotationSharingKey))
		}
		fallthrough
	case err != nil && !has:
		r.pending[key] = true
		r.fail(svc, key, err)
		// A status naming another Service's address must not stay.
		if len(svc.Status.LoadBalancer.Ingress) > 0 {
			_, err := r.writeIngress(ctx, svc, netip.Addr{})
			return err
		}
		return nil
	case err != nil:
		// The Service asks for something it cannot have: it keeps
		// what it has, and is told why.
		r.fail(svc, key, fmt.Errorf("keeping %s: %w", held, err))
		addr = held
	default:
		r.unwarn(key, EventAllocationFailed)
	}
	delete(r.pending, key)

	if !hasIngress(svc, addr) {
		// The status first: it is the record a restart rebuilds from.
		// Only then the allocator, so that a failed write leaves
		// nothing to undo.
		updated, err := r.writeIngress(ctx, svc, addr)
		if err != nil {
			return err
		}
		svc = updated
	}
	before, _ := r.alloc.HoldingOf(key)
	if err := r.alloc.Assign(req, addr); err != nil {
		if !has || held != addr {
			return fmt.Errorf("service %s: record %s: %w", key, addr, err) // cannot happen: Plan checked it
		}
		// The address is kept though the Service asks for something
		// else (the failure above): its old record stays.
	}
	if after, _ := r.alloc.HoldingOf(key); has && held == addr && !reflect.DeepEqual(before, after) {
		// Its ports or key changed: a Service refused for a port it
		// had may now share the address.
		r.freed()
	}
	if !has || held != addr {
		pool := r.alloc.PoolOf(addr)
		shared := ""
		if w := r.sharedWith(addr, key); w != "" {
			shared = ", shared with " + w
		}
		r.log.Info("address allocated", "service", key, "address", addr, "pool", pool, "previous", held, "sharing", req.Sharing)
		r.metrics.allocated()
		r.recorder.Eventf(svc, corev1.EventTypeNormal, EventAllocated, "allocated %s from address pool %q%s", addr, pool, shared)
		if onNode {
			r.warn(svc, key, EventNodeAddress, fmt.Sprintf("moved from %s, %s, to %s: a VIP equal to a node's address takes that node off the network", held, nodeWhy, addr),
				fmt.Sprintf("nothing to do for the Service; remove %s from the address pools so that no Service is given it", held))
		}
		if shareErr != nil {
			r.warn(svc, key, EventSharingConflict, fmt.Sprintf("moved from %s to %s: %v; the Services sharing %s keep it", held, addr, shareErr, held),
				fmt.Sprintf("nothing to do if the Service is to have an address of its own; to share %s again, give it the annotation %s of the Services there and ports of its own", held, api.AnnotationSharingKey))
		}
		if has {
			r.poolChanged(held)
			r.freed()
		}
		r.poolChanged(addr)
	}
	pool := r.alloc.PoolOf(addr)
	if pool == "" {
		r.warn(svc, key, EventOutsidePools, fmt.Sprintf("keeps %s, which no address pool contains any more; it stays the Service's address until the Service is deleted or stops being served; add it back to a pool, or request another address", addr),
			fmt.Sprintf("add %s back to an AddressPool, or move the Service to another address with the annotation %s or %s", addr, api.AnnotationPool, api.AnnotationAddresses))
		return nil
	}
	r.unwarn(key, EventOutsidePools)
	// The annotation last: after a crash between the two writes the
	// status has the address, and the next run writes the annotation.
	if svc.Annotations[api.AnnotationAllocatedFrom] != pool {
		return r.patchAnnotation(ctx, svc, &pool)
	}
	return nil
}

// stillHeld tells, for a release Event, that the address stays with
// the Services that share it; "" when it went back to its pool.
func (r *reconciler) stillHeld(addr netip.Addr) string {
	if w := r.sharedWith(addr, ""); w != "" {
		return "; the address stays with " + w
	}
	return ""
}

// unserve takes back the address of a Service xlb no longer serves
// (deleted, type or class changed) and removes what xlb wrote to it.
func (r *reconciler) unserve(ctx context.Context, key string, svc *corev1.Service) error {
	held, has := r.alloc.Lookup(key)
	// The status is cleared only where no other implementation can have
	// written it: no class or xlb's, and the address xlb's. (The API
	// server clears it itself when the type changes.)
	class := svc.Spec.LoadBalancerClass
	classFree := class == nil || *class == api.LoadBalancerClass
	_, ours := svc.Annotations[api.AnnotationAllocatedFrom]
	in := ingressAddr(svc)
	if classFree && len(svc.Status.LoadBalancer.Ingress) == 1 && in.IsValid() &&
		((has && in == held) || (!has && ours && r.alloc.PoolOf(in) != "")) {
		updated, err := r.writeIngress(ctx, svc, netip.Addr{})
		if err != nil {
			return err
		}
		svc = updated
	}
	if ours {
		if err := r.patchAnnotation(ctx, svc, nil); err != nil {
			return err
		}
	}
	if has {
		r.alloc.Release(key)
		r.log.Info("address released", "service", key, "address", held, "why", "the Service is no longer served")
		r.metrics.released()
		r.recorder.Eventf(svc, corev1.EventTypeNormal, EventReleased,
			"released %s: the Service is no longer of type LoadBalancer with loadBalancerClass %s%s", held, api.LoadBalancerClass, r.stillHeld(held))
		r.poolChanged(held)
		r.freed()
	}
	return nil
}

// warning is the last Warning Event given to a Service.
type warning struct{ reason, msg string }

// fail reports an allocation failure, once per distinct message.
func (r *reconciler) fail(svc *corev1.Service, key string, err error) {
	msg := err.Error()
	if r.warned[key] == (warning{EventAllocationFailed, msg}) {
		return
	}
	r.warned[key] = warning{EventAllocationFailed, msg}
	reason := allocator.ReasonOf(err)
	r.metrics.failed(reason)
	r.log.Info("allocation failed", "service", key, "reason", reason, "error", msg)
	r.recorder.Event(svc, corev1.EventTypeWarning, EventAllocationFailed, msg)
}

// warn records a Warning Event, once per distinct message; fix, for
// the log, says what to do about it.
func (r *reconciler) warn(svc *corev1.Service, key, reason, msg, fix string) {
	if r.warned[key] == (warning{reason, msg}) {
		return
	}
	r.warned[key] = warning{reason, msg}
	r.log.Warn(msg, "service", key, "reason", reason, "fix", fix)
	r.recorder.Event(svc, corev1.EventTypeWarning, reason, msg)
}

// unwarn forgets a Warning whose cause is gone, so that it is reported
// again if it comes back.
func (r *reconciler) unwarn(key, reason string) {
	if r.warned[key].reason == reason {
		delete(r.warned, key)
	}
}

// writeIngress sets status.loadBalancer.ingress to [{ip: addr}], or
// clears it for the zero addr, through the status subresource. The patch
// carries the resourceVersion the decision was made on: if the Service
// changed since, the API server refuses it with a conflict and the
// Service is looked at again.
func (r *reconciler) writeIngress(ctx context.Context, svc *corev1.Service, addr netip.Addr) (*corev1.Service, error) {
	var ingress []map[string]string
	if addr.IsValid() {
		ingress = []map[string]string{{"ip": addr.String()}}
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": svc.ResourceVersion},
		"status":   map[string]any{"loadBalancer": map[string]any{"ingress": ingress}},
	})
	if err != nil {
		return nil, err
	}
	updated, err := r.opts.Client.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: r.opts.FieldManager}, "status")
	if err != nil {
		return nil, fmt.Errorf("service %s/%s: write status.loadBalancer.ingress: %w", svc.Namespace, svc.Name, err)
	}
	return updated, nil
}

// patchAnnotation sets the allocated-from annotation to *pool, or removes
// it for nil, if the Service is still at svc's resourceVersion.
func (r *reconciler) patchAnnotation(ctx context.Context, svc *corev1.Service, pool *string) error {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{
			"resourceVersion": svc.ResourceVersion,
			"annotations":     map[string]*string{api.AnnotationAllocatedFrom: pool},
		},
	})
	if err != nil {
		return err
	}
	_, err = r.opts.Client.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: r.opts.FieldManager})
	if err != nil {
		return fmt.Errorf("service %s/%s: write annotation %s: %w", svc.Namespace, svc.Name, api.AnnotationAllocatedFrom, err)
	}
	return nil
}
