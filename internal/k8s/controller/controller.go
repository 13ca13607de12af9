// Package controller is xlb's Kubernetes controller: it gives Services of
// type LoadBalancer with xlb's load-balancer class an address (VIP) from
// the AddressPools, writes it to the Service's status.loadBalancer.ingress,
// and takes it back when the Service goes or stops being served.
//
// One worker makes every allocation decision, so decisions never race
// within a process; writes carry the resourceVersion they were decided
// on, so a concurrent writer makes them fail with a conflict and the
// Service is looked at again. Only the leader (see RunElected) runs the
// controller. It keeps no state of its own: on start it rebuilds the
// allocator from the addresses in the Services' status before it handles
// anything, so a restart or a new leader moves no address.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/xlbproject/xlb/internal/k8s/api"
)

// DefaultFieldManager names the controller's writes in managedFields.
const DefaultFieldManager = "xlb-controller"

// Component is the source of the controller's Events.
const Component = "xlb-controller"

// Options configure a Controller.
type Options struct {
	// Client and Dynamic reach the API server; Dynamic reads the
	// AddressPools.
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	// ServeClassless makes the controller also serve Services of type
	// LoadBalancer without a spec.loadBalancerClass.
	ServeClassless bool
	// FieldManager names the controller's writes; empty:
	// DefaultFieldManager.
	FieldManager string
	// Recorder records Events on Services and AddressPools. Nil: Run
	// sends them to the API server, with Identity as the host.
	Recorder record.EventRecorder
	// Identity tells instances apart in Events; empty: none.
	Identity string
	// Metrics, if not nil, receive counts and pool usage.
	Metrics *Metrics
	// Log receives what the controller does. Nil: slog.Default().
	Log *slog.Logger
}

// Controller allocates addresses to Services. Run runs it.
type Controller struct {
	opts Options
	log  *slog.Logger
}

// New checks the options and returns a controller.
func New(opts Options) (*Controller, error) {
	if opts.Client == nil || opts.Dynamic == nil {
		return nil, errors.New("controller: a Kubernetes client and a dynamic client are needed")
	}
	if opts.FieldManager == "" {
		opts.FieldManager = DefaultFieldManager
	}
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	return &Controller{opts: opts, log: log}, nil
}

// syncTimeout bounds the wait for the informers' first lists.
const syncTimeout = 2 * time.Minute

// Run watches Services, Namespaces, Nodes, AddressPools and DenyLists
// (whose statuses it writes) and allocates until
// ctx ends. Every Run starts from scratch: it lists everything, rebuilds
// the allocator from the Services' status and only then handles work, so
// that a new leader continues where the last one stopped. It returns nil
// when ctx ends and an error when it cannot start (the AddressPool CRD is
// missing, the caches do not fill).
func (c *Controller) Run(ctx context.Context) error {
	// Without the CRDs the informers would retry their lists forever and
	// the controller would wait in silence: say what to do instead.
	for _, res := range []struct {
		what string
		gvr  schema.GroupVersionResource
	}{{"AddressPools", api.AddressPoolResource}, {"DenyLists", api.DenyListResource},
		{"BGPAdvertisements", api.BGPAdvertisementResource}, {"BGPPeers", api.BGPPeerResource}} {
		if _, err := c.opts.Dynamic.Resource(res.gvr).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("list %s: %w (is the CRD installed? kubectl apply -f deploy/crds)", res.what, err)
			}
			return fmt.Errorf("list %s: %w", res.what, err)
		}
	}

	recorder := c.opts.Recorder
	if recorder == nil {
		b := record.NewBroadcaster(record.WithContext(ctx))
		b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.opts.Client.CoreV1().Events("")})
		defer b.Shutdown()
		recorder = b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: Component, Host: c.opts.Identity})
	}

	factory := informers.NewSharedInformerFactory(c.opts.Client, 0)
	services := factory.Core().V1().Services()
	namespaces := factory.Core().V1().Namespaces()
	slices := factory.Discovery().V1().EndpointSlices()
	dynFactory := dynamicinformer.NewDynamicSharedInformerFactory(c.opts.Dynamic, 0)
	pools := dynFactory.ForResource(api.AddressPoolResource)
	denyLists := dynFactory.ForResource(api.DenyListResource)
	adverts := dynFactory.ForResource(api.BGPAdvertisementResource)
	bgpPeers := dynFactory.ForResource(api.BGPPeerResource)
	// Of a Node, the controller needs its addresses only.
	nodeFactory := informers.NewSharedInformerFactoryWithOptions(c.opts.Client, 0, informers.WithTransform(nodeAddressesOnly))
	nodes := nodeFactory.Core().V1().Nodes()

	r := newReconciler(c, recorder, services.Lister(), namespaces.Lister(), pools.Lister())
	r.nodes = nodes.Lister()
	r.denyLists = denyLists.Lister()
	r.adverts, r.bgpPeers = adverts.Lister(), bgpPeers.Lister()
	defer r.queue.ShutDown()
	if err := r.watch(services.Informer(), namespaces.Informer(), pools.Informer()); err != nil {
		return err
	}
	if err := r.watchSlices(slices.Informer()); err != nil {
		return err
	}
	if err := r.watchNodes(nodes.Informer()); err != nil {
		return err
	}
	if err := r.watchDenyLists(denyLists.Informer()); err != nil {
		return err
	}
	if err := r.watchAdverts(adverts.Informer(), bgpPeers.Informer(), pools.Informer()); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	dynFactory.Start(ctx.Done())
	nodeFactory.Start(ctx.Done())
	defer nodeFactory.Shutdown()
	defer dynFactory.Shutdown()
	defer factory.Shutdown()

	syncCtx, cancel := context.WithTimeout(ctx, syncTimeout)
	synced := cache.WaitForCacheSync(syncCtx.Done(), services.Informer().HasSynced,
		namespaces.Informer().HasSynced, pools.Informer().HasSynced, slices.Informer().HasSynced,
		nodes.Informer().HasSynced, denyLists.Informer().HasSynced, adverts.Informer().HasSynced, bgpPeers.Informer().HasSynced)
	cancel()
	if !synced {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("the caches of Services, Namespaces, AddressPools, EndpointSlices, Nodes, DenyLists, BGPAdvertisements and BGPPeers did not fill within %s; "+
			"check that the controller's ClusterRole lets it list and watch them (deploy/10-rbac.yaml)", syncTimeout)
	}
	if err := r.rebuild(); err != nil {
		return err
	}
	context.AfterFunc(ctx, r.queue.ShutDown)
	for r.processNext(ctx) {
	}
	return nil
}

// item is a unit of work: one Service, the pool set, one pool's status,
// the nodes' addresses, or the DenyLists' statuses.
type item struct {
	kind itemKind
	key  string // a Service's "namespace/name", or a pool's name
}

type itemKind uint8

const (
	serviceItem itemKind = iota
	poolsItem
	poolStatusItem
	nodesItem
	denyListsItem
	advertsItem
)

// The rate limiter retries a failed item after 5 ms, doubling up to 30 s.
func newQueue() workqueue.TypedRateLimitingInterface[item] {
	return workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[item](5*time.Millisecond, 30*time.Second),
		workqueue.TypedRateLimitingQueueConfig[item]{Name: "xlb-controller"})
}

// processNext handles one item; false when the queue is shut down.
func (r *reconciler) processNext(ctx context.Context) bool {
	it, quit := r.queue.Get()
	if quit {
		return false
	}
	defer r.queue.Done(it)
	// A shut-down queue still hands out what it holds: once ctx has
	// ended (leadership with it), nothing more is decided.
	if ctx.Err() != nil {
		return false
	}
	var err error
	switch it.kind {
	case serviceItem:
		err = r.syncService(ctx, it.key)
	case poolsItem:
		err = r.syncPools()
	case poolStatusItem:
		err = r.syncPoolStatus(ctx, it.key)
	case nodesItem:
		err = r.syncNodes()
	case denyListsItem:
		err = r.syncDenyLists(ctx)
	case advertsItem:
		err = r.syncAdverts(ctx)
	}
	if err == nil {
		r.queue.Forget(it)
		return true
	}
	if ctx.Err() != nil {
		return true
	}
	if apierrors.IsConflict(err) {
		r.metrics.conflict()
		r.log.Debug("write conflict; retrying", "item", it.key, "error", err)
	} else {
		r.log.Warn("sync failed; retrying", "item", it.key, "error", err,
			"fix", "check that the API server is reachable and, if it refused a write, that the controller's ClusterRole still allows patching services, "+
				"services/status and addresspools/status (deploy/10-rbac.yaml); the item is retried by itself, after 5 ms doubling up to every 30 s")
	}
	r.queue.AddRateLimited(it)
	return true
}
