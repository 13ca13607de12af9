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

// ingressAddr is svc's address of one family (v6: IPv6) in its status:
// the first ingress IP of that family.
func ingressAddr(svc *corev1.Service, v6 bool) netip.Addr {
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(in.IP); err == nil && a.Zone() == "" && !a.Is4In6() && a.Is6() == v6 {
			return a
		}
	}
	return netip.Addr{}
}

// hasIngress reports whether svc's status lists addr as its only
// address of addr's family (none of family v6 for the zero addr), with
// no hostname or ports.
func hasIngress(svc *corev1.Service, v6 bool, addr netip.Addr) bool {
	n := 0
	for _, in := range svc.Status.LoadBalancer.Ingress {
		a, err := netip.ParseAddr(in.IP)
		if err != nil || a.Is6() != v6 {
			if in.Hostname != "" || len(in.Ports) != 0 {
				return false
			}
			continue
		}
		if a != addr || in.Hostname != "" || len(in.Ports) != 0 {
			return false
		}
		n++
	}
	return n == 1 || n == 0 && !addr.IsValid()
}

// families are the address families svc asks for, in its order
// (spec.ipFamilies, which the API server fills for every Service):
// false for IPv4, true for IPv6. required: spec.ipFamilyPolicy is
// RequireDualStack, so both must be had or neither is given.
func families(svc *corev1.Service) (fams []bool, required bool) {
	for _, f := range svc.Spec.IPFamilies {
		v6 := f == corev1.IPv6Protocol
		if (f == corev1.IPv4Protocol || v6) && !slices.Contains(fams, v6) {
			fams = append(fams, v6)
		}
	}
	if len(fams) == 0 {
		fams = []bool{false}
	}
	p := svc.Spec.IPFamilyPolicy
	return fams, p != nil && *p == corev1.IPFamilyPolicyRequireDualStack && len(fams) == 2
}

// familyKey is the key under which warnings about one family of the
// Service key are remembered: the key itself for IPv4.
func familyKey(key string, v6 bool) string {
	if v6 {
		return key + "#IPv6"
	}
	return key
}

// request describes svc's request for its address of one family (v6:
// IPv6) to the allocator. The requested address is the annotation's of
// that family (it lists one address per family, comma separated), else
// the deprecated spec.loadBalancerIP if it is of that family. On an
// error the request still names the Service, its sharing key and its
// ports: enough to record an address it holds.
func (r *reconciler) request(key string, svc *corev1.Service, v6 bool) (allocator.Request, error) {
	req := allocator.Request{
		Key:       key,
		IPv6:      v6,
		Namespace: svc.Namespace,
		Labels:    svc.Labels,
		Pool:      strings.TrimSpace(svc.Annotations[api.AnnotationPool]),
		Sharing:   strings.TrimSpace(svc.Annotations[api.AnnotationSharingKey]),
		Ports:     ports(svc),
	}
	if ns, err := r.namespaces.Get(svc.Namespace); err == nil {
		req.NamespaceLabels = ns.Labels
	}
	if v := strings.TrimSpace(svc.Annotations[api.AnnotationAddresses]); v != "" {
		for _, e := range strings.Split(v, ",") {
			e = strings.TrimSpace(e)
			a, err := netip.ParseAddr(e)
			if err != nil {
				return req, &allocator.Error{Reason: allocator.ReasonInvalidRequest,
					Msg: fmt.Sprintf("annotation %s: %q is not an IP address; write e.g. 10.99.0.5, or one address of each family for a dual-stack Service: 10.99.0.5,2001:db8:99::5", api.AnnotationAddresses, e)}
			}
			if a.Is6() == v6 && !a.Is4In6() && !req.Address.IsValid() {
				req.Address = a
			}
		}
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
		if a.Is6() == v6 {
			req.Address = a
		}
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
	h, _ := r.alloc.HoldingOf(others[0], addr.Is6())
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
		for _, v6 := range []bool{false, true} {
			if addr, ok := r.alloc.Release(key, v6); ok {
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
		}
		delete(r.pending, key)
		delete(r.warned, key)
		delete(r.warned, familyKey(key, true))
		delete(r.warned, affinityKey(key))
		delete(r.warned, forwardingKey(key))
		delete(r.warned, "communities:"+key)
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
		delete(r.warned, familyKey(key, true))
		delete(r.warned, affinityKey(key))
		delete(r.warned, forwardingKey(key))
		delete(r.warned, "communities:"+key)
		delete(r.uids, key)
		delete(r.noted, key)
		delete(r.rangesNoted, key)
		return r.unserve(ctx, key, svc)
	}
	r.uids[key] = svc.UID
	r.notePolicy(svc, key)
	r.noteSourceRanges(svc, key)
	r.noteForwarding(svc, key)
	r.noteCommunities(svc, key)
	if err := r.serve(ctx, key, svc); err != nil {
		return err
	}
	r.noteAffinity(svc, key)
	return r.recordHistory(ctx, svc)
}

// serve makes sure svc has an address of each family it asks for
// (spec.ipFamilies), written to its status, and none of another. With
// spec.ipFamilyPolicy RequireDualStack it gets a new address only if it
// can have both: never one family silently.
func (r *reconciler) serve(ctx context.Context, key string, svc *corev1.Service) error {
	fams, required := families(svc)
	for _, v6 := range []bool{false, true} {
		if slices.Contains(fams, v6) {
			continue
		}
		updated, err := r.dropFamily(ctx, key, svc, v6)
		if err != nil {
			return err
		}
		svc = updated
	}
	if required {
		for _, v6 := range fams {
			if _, has := r.alloc.Lookup(key, v6); has {
				continue
			}
			req, err := r.request(key, svc, v6)
			if err == nil {
				_, err = r.alloc.Plan(req)
			}
			if err != nil {
				r.pending[key] = true
				r.fail(svc, familyKey(key, v6), fmt.Errorf("spec.ipFamilyPolicy is RequireDualStack, and the Service can have no %s address: %w; it gets no new address of either family until it can have both: "+
					"add %s addresses to an AddressPool that serves it, or set spec.ipFamilyPolicy to PreferDualStack (or SingleStack)", family(v6), err, family(v6)))
				return nil
			}
		}
	}
	pending := false
	for i, v6 := range fams {
		updated, wait, err := r.serveFamily(ctx, key, svc, v6, i == 0)
		if err != nil {
			return err
		}
		svc, pending = updated, pending || wait
	}
	if pending {
		r.pending[key] = true
	} else {
		delete(r.pending, key)
	}
	return nil
}

// family names the IPv6 family (v6) or the IPv4 one.
func family(v6 bool) string {
	if v6 {
		return "IPv6"
	}
	return "IPv4"
}

// dropFamily releases svc's address of a family it no longer asks for
// (its spec.ipFamilies changed) and takes it out of its status.
func (r *reconciler) dropFamily(ctx context.Context, key string, svc *corev1.Service, v6 bool) (*corev1.Service, error) {
	held, has := r.alloc.Lookup(key, v6)
	if in := ingressAddr(svc, v6); in.IsValid() && (!has || in == held) {
		updated, err := r.writeIngress(ctx, svc, v6, netip.Addr{})
		if err != nil {
			return nil, err
		}
		svc = updated
	}
	delete(r.warned, familyKey(key, v6))
	if has {
		r.alloc.Release(key, v6)
		r.log.Info("address released", "service", key, "address", held, "why", "the Service no longer asks for an "+family(v6)+" address")
		r.metrics.released()
		r.recorder.Eventf(svc, corev1.EventTypeNormal, EventReleased, "released %s: spec.ipFamilies no longer lists %s%s", held, family(v6), r.stillHeld(held))
		r.poolChanged(held)
		r.freed()
	}
	return svc, nil
}

// serveFamily makes sure svc has an address of one family (v6: IPv6),
// written to its status beside that of the other family. It returns the
// Service as last written, and whether it waits for an address. primary:
// the family svc lists first, whose pool the annotation
// api.AnnotationAllocatedFrom names.
func (r *reconciler) serveFamily(ctx context.Context, key string, svc *corev1.Service, v6, primary bool) (*corev1.Service, bool, error) {
	wkey := familyKey(key, v6)
	req, reqErr := r.request(key, svc, v6)
	held, has := r.alloc.Lookup(key, v6)
	if in := ingressAddr(svc, v6); !has && in.IsValid() {
		// The status names an address the allocator does not know
		// for this Service (written by someone else): adopt it if
		// it is free or the Service may share it, else the Service
		// needs another one.
		if err := r.alloc.Assign(req, in); err != nil {
			r.warn(svc, wkey, EventConflict, fmt.Sprintf("the status shows %s, but %v; allocating another address", in, err),
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
		r.unwarn(wkey, EventNodeAddress)
	}
	if shareErr == nil {
		r.unwarn(wkey, EventSharingConflict)
	}
	err := reqErr
	var addr netip.Addr
	if err == nil {
		addr, err = r.alloc.Plan(req)
	}
	switch {
	case err != nil && (onNode || shareErr != nil):
		r.alloc.Release(key, v6)
		r.poolChanged(held)
		r.freed()
		if onNode {
			tail := fmt.Sprintf("no other address is free for it: %v", err)
			if allocator.ReasonOf(err) == allocator.ReasonNodeAddress {
				tail = fmt.Sprintf("the Service requests this address (annotation %s or spec.loadBalancerIP), so it has none until it requests another or the Node no longer has it", api.AnnotationAddresses)
			}
			r.warn(svc, wkey, EventNodeAddress, fmt.Sprintf("gave up %s, %s: a VIP equal to a node's address takes that node off the network; %s", held, nodeWhy, tail),
				fmt.Sprintf("give the Service another address (the annotation %s, or a pool with a free address), or remove %s from the Node if it is not the node's address", api.AnnotationAddresses, held))
		} else {
			r.warn(svc, wkey, EventSharingConflict, fmt.Sprintf("gave up %s: %v; the Services sharing it keep it", held, shareErr),
				fmt.Sprintf("give the Service ports of its own (or the old ones back), or change its annotation %s for an address of its own", api.AnnotationSharingKey))
		}
		fallthrough
	case err != nil && !has:
		r.fail(svc, wkey, err)
		// A status naming another Service's address must not stay.
		if ingressAddr(svc, v6).IsValid() {
			updated, err := r.writeIngress(ctx, svc, v6, netip.Addr{})
			return updated, true, err
		}
		return svc, true, nil
	case err != nil:
		// The Service asks for something it cannot have: it keeps
		// what it has, and is told why.
		r.fail(svc, wkey, fmt.Errorf("keeping %s: %w", held, err))
		addr = held
	default:
		r.unwarn(wkey, EventAllocationFailed)
	}

	if !hasIngress(svc, v6, addr) {
		// The status first: it is the record a restart rebuilds from.
		// Only then the allocator, so that a failed write leaves
		// nothing to undo.
		updated, err := r.writeIngress(ctx, svc, v6, addr)
		if err != nil {
			return nil, false, err
		}
		svc = updated
	}
	before, _ := r.alloc.HoldingOf(key, v6)
	if err := r.alloc.Assign(req, addr); err != nil {
		if !has || held != addr {
			return nil, false, fmt.Errorf("service %s: record %s: %w", key, addr, err) // cannot happen: Plan checked it
		}
		// The address is kept though the Service asks for something
		// else (the failure above): its old record stays.
	}
	if after, _ := r.alloc.HoldingOf(key, v6); has && held == addr && !reflect.DeepEqual(before, after) {
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
			r.warn(svc, wkey, EventNodeAddress, fmt.Sprintf("moved from %s, %s, to %s: a VIP equal to a node's address takes that node off the network", held, nodeWhy, addr),
				fmt.Sprintf("nothing to do for the Service; remove %s from the address pools so that no Service is given it", held))
		}
		if shareErr != nil {
			r.warn(svc, wkey, EventSharingConflict, fmt.Sprintf("moved from %s to %s: %v; the Services sharing %s keep it", held, addr, shareErr, held),
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
		r.warn(svc, wkey, EventOutsidePools, fmt.Sprintf("keeps %s, which no address pool contains any more; it stays the Service's address until the Service is deleted or stops being served; add it back to a pool, or request another address", addr),
			fmt.Sprintf("add %s back to an AddressPool, or move the Service to another address with the annotation %s or %s", addr, api.AnnotationPool, api.AnnotationAddresses))
		return svc, false, nil
	}
	r.unwarn(wkey, EventOutsidePools)
	// The annotation last: after a crash between the two writes the
	// status has the address, and the next run writes the annotation.
	if primary && svc.Annotations[api.AnnotationAllocatedFrom] != pool {
		return svc, false, r.patchAnnotation(ctx, svc, &pool)
	}
	return svc, false, nil
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
	// The status is cleared only where no other implementation can have
	// written it: no class or xlb's, and every address xlb's. (The API
	// server clears it itself when the type changes.)
	class := svc.Spec.LoadBalancerClass
	classFree := class == nil || *class == api.LoadBalancerClass
	_, ours := svc.Annotations[api.AnnotationAllocatedFrom]
	mine := len(svc.Status.LoadBalancer.Ingress) > 0
	for _, in := range svc.Status.LoadBalancer.Ingress {
		a, err := netip.ParseAddr(in.IP)
		held, has := r.alloc.Lookup(key, err == nil && a.Is6())
		if err != nil || !((has && a == held) || (!has && ours && r.alloc.PoolOf(a) != "")) {
			mine = false
		}
	}
	if classFree && mine && len(svc.Status.LoadBalancer.Ingress) <= 2 {
		updated, err := r.writeIngress(ctx, svc, false, netip.Addr{})
		if err == nil {
			updated, err = r.writeIngress(ctx, updated, true, netip.Addr{})
		}
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
	for _, v6 := range []bool{false, true} {
		held, has := r.alloc.Release(key, v6)
		if !has {
			continue
		}
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
	r.log.Info("allocation failed", "service", svc.Namespace+"/"+svc.Name, "reason", reason, "error", msg)
	r.recorder.Event(svc, corev1.EventTypeWarning, EventAllocationFailed, msg)
}

// warn records a Warning Event, once per distinct message; fix, for
// the log, says what to do about it.
func (r *reconciler) warn(svc *corev1.Service, key, reason, msg, fix string) {
	if r.warned[key] == (warning{reason, msg}) {
		return
	}
	r.warned[key] = warning{reason, msg}
	r.log.Warn(msg, "service", svc.Namespace+"/"+svc.Name, "reason", reason, "fix", fix)
	r.recorder.Event(svc, corev1.EventTypeWarning, reason, msg)
}

// unwarn forgets a Warning whose cause is gone, so that it is reported
// again if it comes back.
func (r *reconciler) unwarn(key, reason string) {
	if r.warned[key].reason == reason {
		delete(r.warned, key)
	}
}

// writeIngress makes addr svc's address of one family (v6: IPv6) in
// status.loadBalancer.ingress, or removes that family's for the zero
// addr, keeping the other family's address: the list holds at most one
// of each, in the order of spec.ipFamilies. It writes through the status
// subresource. The patch carries the resourceVersion the decision was
// made on: if the Service changed since, the API server refuses it with
// a conflict and the Service is looked at again.
func (r *reconciler) writeIngress(ctx context.Context, svc *corev1.Service, v6 bool, addr netip.Addr) (*corev1.Service, error) {
	byFam := [2]netip.Addr{ingressAddr(svc, false), ingressAddr(svc, true)}
	byFam[famIndex(v6)] = addr
	fams, _ := families(svc)
	if len(fams) == 1 {
		fams = append(fams, !fams[0])
	}
	var ingress []map[string]string
	for _, f := range fams {
		if a := byFam[famIndex(f)]; a.IsValid() {
			ingress = append(ingress, map[string]string{"ip": a.String()})
		}
	}
	if sameIngress(svc.Status.LoadBalancer.Ingress, ingress) {
		return svc, nil
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

// sameIngress reports whether the status in lists exactly the IPs of
// want, in order, and nothing else.
func sameIngress(in []corev1.LoadBalancerIngress, want []map[string]string) bool {
	if len(in) != len(want) {
		return false
	}
	for i := range in {
		if in[i].IP != want[i]["ip"] || in[i].Hostname != "" || len(in[i].Ports) != 0 {
			return false
		}
	}
	return true
}

func famIndex(v6 bool) int {
	if v6 {
		return 1
	}
	return 0
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
