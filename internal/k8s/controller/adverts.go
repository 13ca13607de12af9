package controller

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/xlbproject/xlb/internal/k8s/api"
)

// EventInvalidBGPAdvertisement (Warning, on a BGPAdvertisement): the
// agents leave it out, or part of what it names matches nothing; the
// message says what.
const EventInvalidBGPAdvertisement = "InvalidBGPAdvertisement"

// EventInvalidBGPCommunities (Warning, on a Service): its
// xlb.io/bgp-communities annotation is not a list of communities; the
// nodes announce its routes with the BGPAdvertisements' communities
// alone until it is corrected.
const EventInvalidBGPCommunities = "InvalidBGPCommunities"

// noteCommunities records, once per distinct message, a Warning Event on
// a served Service whose communities annotation the agents cannot read
// (internal/k8s/source reads it with the same api.ParseCommunities).
func (r *reconciler) noteCommunities(svc *corev1.Service, key string) {
	wkey := "communities:" + key
	v, ok := svc.Annotations[api.AnnotationBGPCommunities]
	if !ok {
		delete(r.warned, wkey)
		return
	}
	if _, _, err := api.ParseCommunities(v); err != nil {
		r.warn(svc, wkey, EventInvalidBGPCommunities,
			fmt.Sprintf("annotation %s: %v; the xlb nodes announce the Service's routes with the BGPAdvertisements' communities alone until it is corrected", api.AnnotationBGPCommunities, err),
			fmt.Sprintf("correct the annotation %s: a comma-separated list of communities such as 65000:100 or no-export and large communities such as 65000:1:2", api.AnnotationBGPCommunities))
		return
	}
	delete(r.warned, wkey)
}

// watchAdverts queues the BGPAdvertisements' statuses when one of them,
// a BGPPeer or an AddressPool comes, goes or changes its spec or labels:
// what an advertisement selects depends on all three.
func (r *reconciler) watchAdverts(infs ...cache.SharedIndexInformer) error {
	changed := func(any) { r.queue.Add(item{kind: advertsItem}) }
	for _, inf := range infs {
		// Status writes (ours, the agents') change nothing here.
		_, err := inf.AddEventHandler(specHandler(changed, true))
		if err != nil {
			return fmt.Errorf("watch BGPAdvertisements: %w", err)
		}
	}
	return nil
}

// syncAdverts writes every BGPAdvertisement's status: how many pools and
// peers it selects, and what the agents leave out of it and why (with a
// Warning Event), as their Kubernetes source does: an advertisement that
// does not pass api.CheckAdvertisement is left out whole; names of
// pools or peers that do not exist, and selections that match nothing,
// are reported but the rest applies.
func (r *reconciler) syncAdverts(ctx context.Context) error {
	list := func(l cache.GenericLister) ([]*unstructured.Unstructured, error) {
		objs, err := l.List(labels.Everything())
		var out []*unstructured.Unstructured
		for _, o := range objs {
			if u, ok := o.(*unstructured.Unstructured); ok {
				out = append(out, u)
			}
		}
		return out, err
	}
	adverts, err := list(r.adverts)
	if err != nil {
		return fmt.Errorf("list BGPAdvertisements: %w", err)
	}
	pools, err := list(r.pools)
	if err != nil {
		return fmt.Errorf("list AddressPools: %w", err)
	}
	peers, err := list(r.bgpPeers)
	if err != nil {
		return fmt.Errorf("list BGPPeers: %w", err)
	}
	var errs []error
	live := map[string]bool{}
	for _, u := range adverts {
		live[u.GetName()] = true
		var a api.BGPAdvertisement
		var want api.BGPAdvertisementStatus
		if err := api.FromUnstructured(u, &a); err != nil {
			want.Error = fmt.Sprintf("cannot be read: %v; the agents leave it out", err)
		} else if why := api.CheckAdvertisement(a.Spec); why != "" {
			want.Error = why + "; the agents leave it out"
		} else {
			want = advertStatus(a.Spec, pools, peers)
		}
		if err := r.writeAdvertStatus(ctx, u, a.Status, want); err != nil {
			errs = append(errs, err)
		}
	}
	for k := range r.warned {
		if name, ok := strings.CutPrefix(k, "bgpadvertisement:"); ok && !live[name] {
			delete(r.warned, k)
		}
	}
	return errors.Join(errs...)
}

// advertStatus counts what a valid advertisement selects and says what
// of it matches nothing.
func advertStatus(s api.BGPAdvertisementSpec, pools, peers []*unstructured.Unstructured) api.BGPAdvertisementStatus {
	var st api.BGPAdvertisementStatus
	var why []string
	count := func(objs []*unstructured.Unstructured, names []string, selects func(string, map[string]string) bool, what, field string) int64 {
		var n int64
		exist := map[string]bool{}
		for _, u := range objs {
			exist[u.GetName()] = true
			if selects(u.GetName(), u.GetLabels()) {
				n++
			}
		}
		var missing []string
		for _, name := range names {
			if !exist[name] {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			why = append(why, fmt.Sprintf("%s names %s that do not exist: %s", field, what, strings.Join(missing, ", ")))
		}
		if n == 0 {
			why = append(why, fmt.Sprintf("%s: selects no %s, so it announces nothing", field, strings.TrimSuffix(what, "s")))
		}
		return n
	}
	st.Pools = count(pools, s.AddressPools, s.SelectsPool, "AddressPools", "spec.addressPools")
	st.Peers = count(peers, s.Peers, s.SelectsPeer, "BGPPeers", "spec.peers")
	slices.Sort(why)
	why = slices.Compact(why)
	st.Error = strings.Join(why, "; ")
	return st
}

// writeAdvertStatus patches an advertisement's status to want unless it
// is so, and gives it a Warning Event for a new error.
func (r *reconciler) writeAdvertStatus(ctx context.Context, u *unstructured.Unstructured, have, want api.BGPAdvertisementStatus) error {
	name := u.GetName()
	key := "bgpadvertisement:" + name
	if want.Error == "" {
		delete(r.warned, key)
	} else if w := (warning{EventInvalidBGPAdvertisement, want.Error}); r.warned[key] != w {
		r.warned[key] = w
		r.log.Warn("BGP advertisement not fully applied", "bgpadvertisement", name, "error", want.Error,
			"fix", "correct the BGPAdvertisement as the error says (kubectl edit bgpadvertisement "+name+"), or create what it names")
		r.recorder.Event(u, corev1.EventTypeWarning, EventInvalidBGPAdvertisement, want.Error)
	}
	if reflect.DeepEqual(have, want) {
		return nil
	}
	return r.writeStatus(ctx, api.BGPAdvertisementResource, "BGP advertisement", name,
		map[string]any{"pools": want.Pools, "peers": want.Peers}, want.Error)
}
