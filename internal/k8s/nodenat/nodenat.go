// Package nodenat keeps a Kubernetes node's VIP:port → pod:targetPort
// translations in step with the cluster. It watches Services of type
// LoadBalancer that xlb serves and their EndpointSlices, derives the
// translations for the endpoints that run on this node, and hands the
// whole list to an apply function (backendhost.SetNAT in the backend
// DaemonSet) after every burst of changes.
package nodenat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/xlbproject/xlb/internal/backendhost"
	"github.com/xlbproject/xlb/internal/k8s/endpoints"
)

// Options configure a Watcher.
type Options struct {
	// Client reads Services and EndpointSlices in every namespace.
	Client kubernetes.Interface
	// Node is this node's name, as in an endpoint's nodeName.
	Node string
	// ServeClassless also serves Services of type LoadBalancer without
	// a spec.loadBalancerClass, like the controller's flag of that name.
	ServeClassless bool
	// LocalAddrs are the node's own addresses (of the interface the
	// tunnels arrive on). Endpoints with one of them (hostNetwork pods)
	// are not translated: a tunnel to the node's address is for the
	// node itself.
	LocalAddrs []netip.Addr
	// Apply makes the node's translations exactly entries (sorted). It
	// is called from one goroutine, after the caches have synced (with
	// the full list, possibly empty, so that a restart clears what the
	// cluster no longer asks for), then after every change that alters
	// the list. An error is retried with backoff.
	Apply func(entries []backendhost.NATEntry) error
	// Linger keeps a translation that the cluster no longer asks for
	// (its endpoint turned unready, terminates or was deleted) that
	// long: the pod may still hold connections, which daisy chaining
	// and the stateful mode keep sending to it after the load balancers
	// stopped choosing it for new ones, and its replies need the
	// translation back to VIP:port. The backend passes its
	// --chain-window. 0: translations go at once.
	Linger time.Duration
	// Initial are the translations in place when the watcher starts
	// (pinned by an earlier run): those the cluster no longer asks for
	// linger as if they had left at the start, so that a restart of the
	// backend does not cut the connections of pods that left just before.
	Initial []backendhost.NATEntry
	// Log receives what happened; nil: slog.Default().
	Log *slog.Logger
}

// Stats describe the watcher's progress, for health checks and metrics.
type Stats struct {
	// Synced: the caches are synced and the last apply succeeded.
	Synced bool
	// Entries is the number of translations last applied.
	Entries int
	// Applies and ApplyErrors count calls of Apply by result.
	Applies, ApplyErrors uint64
	// LastError is the error of the last apply if it failed, else "".
	LastError string
	// LastApply is when Apply last succeeded.
	LastApply time.Time
}

// Timing of the loop. A burst of events (a rollout moves many endpoints
// at once) is applied once: the apply waits until no event came for
// quiet, but never longer than maxDelay after the first.
const (
	defaultQuiet    = 10 * time.Millisecond
	defaultMaxDelay = 50 * time.Millisecond
	defaultRetryMin = 200 * time.Millisecond
	defaultRetryMax = 30 * time.Second
)

// serviceIndex indexes EndpointSlices by the Service they belong to.
const serviceIndex = "service"

// Watcher derives and applies the node's translations. Run it once.
type Watcher struct {
	opts Options
	log  *slog.Logger
	kick chan struct{}

	quiet, maxDelay, retryMin, retryMax time.Duration

	now   func() time.Time
	mu    sync.Mutex
	stats Stats
}

// New checks opts and returns a Watcher.
func New(opts Options) (*Watcher, error) {
	switch {
	case opts.Client == nil:
		return nil, errors.New("nodenat: no Kubernetes client")
	case opts.Node == "":
		return nil, errors.New("nodenat: no node name: pass --node-name or set NODE_NAME (the DaemonSet sets it from spec.nodeName)")
	case opts.Apply == nil:
		return nil, errors.New("nodenat: no apply function")
	case opts.Linger < 0:
		return nil, fmt.Errorf("nodenat: negative linger %s", opts.Linger)
	}
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	return &Watcher{
		opts: opts, log: log.With("node", opts.Node), kick: make(chan struct{}, 1),
		quiet: defaultQuiet, maxDelay: defaultMaxDelay, retryMin: defaultRetryMin, retryMax: defaultRetryMax,
		now: time.Now,
	}, nil
}

// Stats returns a snapshot of the watcher's progress.
func (w *Watcher) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats
}

// Run watches the cluster and applies the node's translations until ctx
// ends; it returns nil then. It returns an error only if the caches
// cannot start.
func (w *Watcher) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// No resync: a watch delivers every change, and a periodic resync
	// would only repeat what the caches hold.
	svcInf := coreinformers.NewServiceInformer(w.opts.Client, metav1.NamespaceAll, 0, cache.Indexers{})
	sliceInf := discoveryinformers.NewFilteredEndpointSliceInformer(w.opts.Client, metav1.NamespaceAll, 0,
		cache.Indexers{serviceIndex: endpoints.ServiceIndex},
		func(o *metav1.ListOptions) { o.LabelSelector = discoveryv1.LabelServiceName })

	if _, err := svcInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.serviceChanged(nil, obj) },
		UpdateFunc: w.serviceChanged,
		DeleteFunc: func(obj any) { w.serviceChanged(obj, nil) },
	}); err != nil {
		return fmt.Errorf("watch Services: %w", err)
	}
	if _, err := sliceInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.sliceChanged(nil, obj) },
		UpdateFunc: w.sliceChanged,
		DeleteFunc: func(obj any) { w.sliceChanged(obj, nil) },
	}); err != nil {
		return fmt.Errorf("watch EndpointSlices: %w", err)
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // runs before wg.Wait: the informers stop first
	for _, inf := range []cache.SharedIndexInformer{svcInf, sliceInf} {
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	begin := time.Now()
	w.log.Info("waiting for the Services and EndpointSlices caches")
	if !cache.WaitForCacheSync(ctx.Done(), svcInf.HasSynced, sliceInf.HasSynced) {
		return nil // ctx ended
	}
	w.log.Info("caches synced", "took", time.Since(begin).Round(time.Millisecond))

	read := func() input {
		in := input{node: w.opts.Node, serveClassless: w.opts.ServeClassless, local: w.opts.LocalAddrs}
		for _, o := range svcInf.GetStore().List() {
			if svc, ok := o.(*corev1.Service); ok {
				in.services = append(in.services, svc)
			}
		}
		idx := sliceInf.GetIndexer()
		in.slices = func(ns, name string) []*discoveryv1.EndpointSlice {
			objs, _ := idx.ByIndex(serviceIndex, ns+"/"+name)
			out := make([]*discoveryv1.EndpointSlice, 0, len(objs))
			for _, o := range objs {
				if sl, ok := o.(*discoveryv1.EndpointSlice); ok {
					out = append(out, sl)
				}
			}
			return out
		}
		return in
	}
	w.loop(ctx, read)
	return nil
}

// serviceChanged and sliceChanged wake the loop when a change can alter
// the node's translations: every other Service and every slice without
// an endpoint on this node is left alone, so the churn of a large
// cluster costs the node nothing.
func (w *Watcher) serviceChanged(old, cur any) {
	for _, o := range []any{old, cur} {
		if _, ok := o.(cache.DeletedFinalStateUnknown); ok {
			w.wake()
			return
		}
		if svc, ok := o.(*corev1.Service); ok && served(svc, w.opts.ServeClassless) {
			w.wake()
			return
		}
	}
}

func (w *Watcher) sliceChanged(old, cur any) {
	for _, o := range []any{old, cur} {
		if _, ok := o.(cache.DeletedFinalStateUnknown); ok {
			w.wake()
			return
		}
		if sl, ok := o.(*discoveryv1.EndpointSlice); ok && onNode(sl, w.opts.Node) {
			w.wake()
			return
		}
	}
}

func (w *Watcher) wake() {
	select {
	case w.kick <- struct{}{}:
	default: // already pending
	}
}

// loop applies the translations once, then after every burst of changes,
// and retries a failed apply with backoff.
func (w *Watcher) loop(ctx context.Context, read func() input) {
	var (
		applied    []backendhost.NATEntry
		hasApplied bool
		failed     []backendhost.NATEntry // the list whose apply failed last
		hasFailed  bool
		backoff    = w.retryMin
		retry      *time.Timer
		retryC     <-chan time.Time
		logged     = map[string]bool{}
		linger     = newLingering(w.opts.Linger, w.opts.Initial)
		expiry     *time.Timer
		expiryC    <-chan time.Time
	)
	stopRetry := func() {
		if retry != nil {
			retry.Stop()
			retry, retryC = nil, nil
		}
	}
	defer stopRetry()
	defer func() {
		if expiry != nil {
			expiry.Stop()
		}
	}()
	apply := func(force bool) {
		current, probs := translate(read())
		w.logProblems(logged, probs)
		now := w.now()
		entries := linger.merge(current, now)
		if expiry != nil {
			expiry.Stop()
			expiry, expiryC = nil, nil
		}
		if next, ok := linger.next(); ok {
			expiry = time.NewTimer(max(next.Sub(now), 0))
			expiryC = expiry.C
		}
		if hasApplied && !hasFailed && slices.Equal(entries, applied) {
			return // a change elsewhere in a watched object
		}
		if hasFailed && !force && slices.Equal(entries, failed) {
			return // the same list fails until the backoff is over
		}
		begin := time.Now()
		err := w.opts.Apply(entries)
		took := time.Since(begin)
		w.mu.Lock()
		if err != nil {
			w.stats.ApplyErrors++
			w.stats.LastError = err.Error()
			w.stats.Synced = false
		} else {
			w.stats.Applies++
			w.stats.LastError = ""
			w.stats.Synced = true
			w.stats.Entries = len(entries)
			w.stats.LastApply = time.Now()
		}
		w.mu.Unlock()
		stopRetry()
		if err != nil {
			w.log.Error("could not apply the node's translations; the previous ones stay in place until a retry succeeds",
				"entries", len(entries), "err", err, "retry_in", backoff,
				"fix", fmt.Sprintf("if the error says the data plane holds at most so many, this node has more translations than the backend's maps hold: spread the pods over more nodes; "+
					"if the pinned state is missing, restart this backend pod; else check the backend's --interface and that its pod may load eBPF programs. "+
					"It is retried by itself, after %s doubling up to every %s, and at once when the translations change", w.retryMin, w.retryMax))
			failed, hasFailed = entries, true
			retry = time.NewTimer(backoff)
			retryC = retry.C
			backoff = min(2*backoff, w.retryMax)
			return
		}
		if hasFailed {
			w.log.Info("translations applied after earlier failures")
		}
		w.log.Debug("translations applied", "entries", len(entries), "took", took)
		applied, hasApplied = entries, true
		failed, hasFailed = nil, false
		backoff = w.retryMin
	}

	apply(true)
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
			if !w.settle(ctx) {
				return
			}
			apply(false)
		case <-retryC:
			retry, retryC = nil, nil
			apply(true)
		case <-expiryC:
			expiry, expiryC = nil, nil
			apply(false)
		}
	}
}

// settle waits until no event came for quiet, or maxDelay passed since
// the first: a burst becomes one apply, and no change waits long. It
// returns false if ctx ended.
func (w *Watcher) settle(ctx context.Context) bool {
	deadline := time.NewTimer(w.maxDelay)
	defer deadline.Stop()
	quiet := time.NewTimer(w.quiet)
	defer quiet.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return true
		case <-quiet.C:
			return true
		case <-w.kick:
			quiet.Reset(w.quiet)
		}
	}
}

// logProblems logs each problem once, when it appears, and forgets the
// ones that went away so that they are logged again if they return.
func (w *Watcher) logProblems(logged map[string]bool, probs []problem) {
	cur := map[string]bool{}
	for _, p := range probs {
		cur[p.msg] = true
		if !logged[p.msg] {
			w.log.Warn(p.msg, "fix", p.fix)
		}
	}
	for p := range logged {
		if !cur[p] {
			w.log.Info("resolved", "was", p)
		}
	}
	clear(logged)
	for p := range cur {
		logged[p] = true
	}
}
