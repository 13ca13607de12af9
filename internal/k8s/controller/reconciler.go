package controller

import (
	"cmp"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/xlbproject/xlb/internal/k8s/allocator"
	"github.com/xlbproject/xlb/internal/k8s/api"
)

// reconciler is the state of one Run: everything here is touched by the
// worker goroutine only, except the queue.
type reconciler struct {
	opts     Options
	log      *slog.Logger
	metrics  *Metrics
	recorder record.EventRecorder
	queue    workqueue.TypedRateLimitingInterface[item]

	services   corelisters.ServiceLister
	namespaces corelisters.NamespaceLister
	pools      cache.GenericLister
	denyLists  cache.GenericLister
	// adverts and bgpPeers: the BGPAdvertisements, whose status is
	// written, and the BGPPeers they select.
	adverts, bgpPeers cache.GenericLister
	nodes             corelisters.NodeLister
	// nodeAddrs: the Nodes' addresses, which no Service gets; nil
	// until the first syncNodes.
	nodeAddrs map[netip.Addr][]api.NodeAddress
	// slices are the EndpointSlices by Service (sliceIndex), for the
	// endpoint history; nil until watchSlices.
	slices cache.Indexer
	now    func() time.Time

	alloc *allocator.Allocator
	// poolErrors: pools not in use, with the reason.
	poolErrors map[string]error
	// pending: served Services without an address, looked at again when
	// an address is freed or the pools change.
	pending map[string]bool
	// warned: the last Warning Event per Service (and per pool, keyed
	// "pool:NAME"), so that a Service looked at again does not get the
	// same Event again.
	warned map[string]warning
	// uids: the UID of each served Service, for the IPReleased Event
	// once it is deleted and only its key is left.
	uids map[string]types.UID
	// noted: the last ExternalTrafficPolicy Event per Service.
	noted map[string]string
	// rangesNoted: the last InvalidSourceRanges Event per Service.
	rangesNoted map[string]string
}

func newReconciler(c *Controller, rec record.EventRecorder, svcs corelisters.ServiceLister, nss corelisters.NamespaceLister, pools cache.GenericLister) *reconciler {
	return &reconciler{
		opts:        c.opts,
		log:         c.log,
		metrics:     c.opts.Metrics,
		recorder:    rec,
		queue:       newQueue(),
		services:    svcs,
		namespaces:  nss,
		pools:       pools,
		alloc:       allocator.New(),
		poolErrors:  map[string]error{},
		pending:     map[string]bool{},
		warned:      map[string]warning{},
		uids:        map[string]types.UID{},
		noted:       map[string]string{},
		rangesNoted: map[string]string{},
		now:         time.Now,
	}
}

// watch turns informer events into work items.
func (r *reconciler) watch(services, namespaces, pools cache.SharedIndexInformer) error {
	svc := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			r.queue.Add(item{kind: serviceItem, key: key})
		}
	}
	if _, err := services.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    svc,
		UpdateFunc: func(_, obj any) { svc(obj) },
		DeleteFunc: svc,
	}); err != nil {
		return fmt.Errorf("watch Services: %w", err)
	}
	// Status writes (ours) do not change what the pools hold.
	poolsChanged := func(any) { r.queue.Add(item{kind: poolsItem}) }
	if _, err := pools.AddEventHandler(specHandler(poolsChanged, false)); err != nil {
		return fmt.Errorf("watch AddressPools: %w", err)
	}
	// A namespace's labels decide pools with namespaceSelectors.
	if _, err := namespaces.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, obj any) {
			o, ok1 := old.(*corev1.Namespace)
			n, ok2 := obj.(*corev1.Namespace)
			if ok1 && ok2 && !maps.Equal(o.Labels, n.Labels) {
				r.queue.Add(item{kind: poolsItem})
			}
		},
	}); err != nil {
		return fmt.Errorf("watch Namespaces: %w", err)
	}
	return nil
}

// rebuild fills the allocator from the caches before any work is done:
// the pools, and every served Service's address from its status, with
// its sharing key and ports. If two Services claim one address and may
// not share it, the older keeps it; the other gets a new one (or, with
// a sharing key, is refused) when its turn comes.
func (r *reconciler) rebuild() error {
	svcs, err := r.services.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list Services: %w", err)
	}
	slices.SortFunc(svcs, func(a, b *corev1.Service) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	n := 0
	for _, svc := range svcs {
		if !r.served(svc) {
			continue
		}
		key := svc.Namespace + "/" + svc.Name
		for _, v6 := range []bool{false, true} {
			addr := ingressAddr(svc, v6)
			if !addr.IsValid() {
				continue
			}
			r.uids[key] = svc.UID
			req, _ := r.request(key, svc, v6) // what it requests does not matter here, only who shares
			if err := r.alloc.Assign(req, addr); err != nil {
				r.log.Warn("two Services claim one address; the older keeps it", "service", key, "error", err,
					"fix", "nothing to do if this Service may change address: it gets another from its pools when its turn comes; "+
						"to avoid it, find out who wrote the address into this Service's status (a Service copied with its status, another load-balancer controller)")
				continue
			}
			n++
		}
	}
	if err := r.syncNodes(); err != nil {
		return err
	}
	if err := r.syncPools(); err != nil {
		return err
	}
	r.log.Info("allocator rebuilt from the Services' status", "addresses", n, "pools", len(r.alloc.Pools()))
	return nil
}

// syncPools reads every AddressPool, hands the valid ones to the
// allocator (oldest first, so that a new pool overlapping an old one is
// the one rejected) and looks at every Service and pool again.
func (r *reconciler) syncPools() error {
	objs, err := r.pools.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list AddressPools: %w", err)
	}
	type parsed struct {
		created metav1.Time
		pool    *allocator.Pool
	}
	var valid []parsed
	invalid := map[string]error{}
	for _, obj := range objs {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		var ap api.AddressPool
		if err := api.FromUnstructured(u, &ap); err != nil {
			invalid[u.GetName()] = err
			continue
		}
		p, err := allocator.ParsePool(ap.Name, ap.Spec)
		if err != nil {
			invalid[ap.Name] = err
			continue
		}
		valid = append(valid, parsed{ap.CreationTimestamp, p})
	}
	slices.SortFunc(valid, func(a, b parsed) int {
		if c := a.created.Compare(b.created.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.pool.Name, b.pool.Name)
	})
	pools := make([]*allocator.Pool, len(valid))
	for i, v := range valid {
		pools[i] = v.pool
	}
	r.poolErrors = r.alloc.SetPools(pools, invalid)
	r.metrics.setPools(r.alloc)
	for name, err := range r.poolErrors {
		r.log.Warn("address pool not used", "pool", name, "error", err,
			"fix", "correct the AddressPool as the error says (kubectl edit addresspool "+name+"), or remove the pool it overlaps; the controller takes it into use as soon as it changes")
	}
	return r.lookAgain()
}

// poolChanged queues the status of the pool containing addr, if any.
func (r *reconciler) poolChanged(addr netip.Addr) {
	if p := r.alloc.PoolOf(addr); p != "" {
		r.queue.Add(item{kind: poolStatusItem, key: p})
	}
	r.metrics.setPools(r.alloc)
}

// freed queues every Service waiting for an address.
func (r *reconciler) freed() {
	for key := range r.pending {
		r.queue.Add(item{kind: serviceItem, key: key})
	}
}

// specHandler calls changed when a custom resource comes or goes, or its
// spec changes (its generation), and also its labels when labels is set:
// not for writes of its status alone, which the controller and the
// agents make.
func specHandler(changed func(any), labels bool) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: changed,
		UpdateFunc: func(old, obj any) {
			o, ok1 := old.(*unstructured.Unstructured)
			n, ok2 := obj.(*unstructured.Unstructured)
			if ok1 && ok2 && o.GetGeneration() == n.GetGeneration() &&
				(!labels || reflect.DeepEqual(o.GetLabels(), n.GetLabels())) {
				return
			}
			changed(obj)
		},
		DeleteFunc: changed,
	}
}
