// Package nodenat keeps a Kubernetes node's VIP:port → pod:targetPort
// translations and its daisy-chaining sets in step with the cluster. It
// watches Services of type LoadBalancer that xlb serves, their
// EndpointSlices and the Nodes, derives the translations for the
// endpoints that run on this node and the sets of xlb nodes and previous
// owners (peers.go), and hands them to an apply function
// (backendhost.SetNAT and decap.SetChain in the backend DaemonSet)
// after every burst of changes.
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
	// Apply makes the node's translations and chaining sets exactly
	// those of the State. It is called from one goroutine, after the
	// caches have synced (with the full state, possibly empty, so that
	// a restart clears what the cluster no longer asks for), then after
	// every change that alters it. An error is retried with backoff.
	Apply func(State) error
	// ChainFrom and ChainTo are added to the daisy-chaining sets the
	// cluster gives (xlb nodes outside the cluster, say).
	ChainFrom, ChainTo []netip.Prefix
	// Linger keeps a translation that the cluster no longer asks for
	// (its endpoint turned unready, terminates or was deleted) that
	// long: the pod may still hold connections, which daisy chaining
	// and the stateful mode keep sending to it after the load balancers
	// stopped choosing it for new ones, and its replies need the
	// translation back to VIP:port. An address that leaves the
	// previous owners (State.ChainTo) stays as long. The backend passes
	// its --chain-window. 0: translations go at once.
	Linger time.Duration
	// Initial are the translations in place when the watcher starts
	// (pinned by an earlier run): those the cluster no longer asks for
	// linger as if they had left at the start, so that a restart of the
	// backend does not cut the connections of pods that left just before.
	Initial []backendhost.NATEntry
	// Log receives what happened; nil: slog.Default().
	Log *slog.Logger
}

// State is what the node applies.
type State struct {
	// NAT are the node's translations, sorted.
	NAT []backendhost.NATEntry
	// ChainFrom are the xlb nodes and ChainTo the previous owners of
	// daisy chaining, sorted (peers.go says what the cluster gives).
	ChainFrom, ChainTo []netip.Prefix
}

func (s State) equal(o State) bool {
	return slices.Equal(s.NAT, o.NAT) && slices.Equal(s.ChainFrom, o.ChainFrom) && slices.Equal(s.ChainTo, o.ChainTo)
}

// Stats describe the watcher's progress, for health checks and metrics.
type Stats struct {
	// Synced: the caches are synced and the last apply succeeded.
	Synced bool
	// Entries is the number of translations last applied.
	Entries int
	// ChainFrom and ChainTo are the sizes of the chaining sets last
	// applied.
	ChainFrom, ChainTo int
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

	// servedSlice reports whether a slice belongs to a served Service
	// (set by Run, from the Services' cache).
	servedSlice func(*discoveryv1.EndpointSlice) bool

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
	nodeInf := coreinformers.NewNodeInformer(w.opts.Client, 0, cache.Indexers{})
	w.servedSlice = func(sl *discoveryv1.EndpointSlice) bool {
		o, ok, _ := svcInf.GetStore().GetByKey(sl.Namespace + "/" + sl.Labels[discoveryv1.LabelServiceName])
		svc, isSvc := o.(*corev1.Service)
		return ok && isSvc && served(svc, w.opts.ServeClassless)
	}

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
	if _, err := nodeInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.wake() },
		UpdateFunc: w.nodeChanged,
		DeleteFunc: func(any) { w.wake() },
	}); err != nil {
		return fmt.Errorf("watch Nodes: %w", err)
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // runs before wg.Wait: the informers stop first
	for _, inf := range []cache.SharedIndexInformer{svcInf, sliceInf, nodeInf} {
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	begin := time.Now()
	w.log.Info("waiting for the Services, EndpointSlices and Nodes caches")
	if !cache.WaitForCacheSync(ctx.Done(), svcInf.HasSynced, sliceInf.HasSynced, nodeInf.HasSynced) {
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
		for _, o := range nodeInf.GetStore().List() {
			if n, ok := o.(*corev1.Node); ok {
				in.nodes = append(in.nodes, n)
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

// serviceChanged, sliceChanged and nodeChanged wake the loop when a
// change can alter the node's translations or chaining sets: every other
// Service, every slice of a Service xlb does not serve and without an
// endpoint on this node, and every Node update that keeps its addresses
// are left alone, so the churn of a large cluster costs the node
// nothing.
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
		if sl, ok := o.(*discoveryv1.EndpointSlice); ok && (onNode(sl, w.opts.Node) || w.servedSlice != nil && w.servedSlice(sl)) {
			w.wake()
			return
		}
	}
}

func (w *Watcher) nodeChanged(old, cur any) {
	o, ok1 := old.(*corev1.Node)
	c, ok2 := cur.(*corev1.Node)
	if !ok1 || !ok2 || !slices.Equal(nodeAddrs([]*corev1.Node{o}), nodeAddrs([]*corev1.Node{c})) {
		w.wake()
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
		applied     State
		hasApplied  bool
		failed      State // the state whose apply failed last
		hasFailed   bool
		backoff     = w.retryMin
		retry       *time.Timer
		retryC      <-chan time.Time
		logged      = map[string]bool{}
		linger      = newLingering(w.opts.Linger, w.opts.Initial)
		ownerLinger = newPrefixLinger(w.opts.Linger)
		expiry      *time.Timer
		expiryC     <-chan time.Time
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
		in := read()
		current, probs := translate(in)
		w.logProblems(logged, probs)
		now := w.now()
		from, to := chainSets(in, w.opts.ChainFrom, w.opts.ChainTo)
		st := State{NAT: linger.merge(current, now), ChainFrom: from, ChainTo: ownerLinger.merge(to, now)}
		entries := st.NAT
		if expiry != nil {
			expiry.Stop()
			expiry, expiryC = nil, nil
		}
		next, ok := linger.next()
		if n, ok2 := ownerLinger.next(); ok2 && (!ok || n.Before(next)) {
			next, ok = n, true
		}
		if ok {
			expiry = time.NewTimer(max(next.Sub(now), 0))
			expiryC = expiry.C
		}
		if hasApplied && !hasFailed && st.equal(applied) {
			return // a change elsewhere in a watched object
		}
		if hasFailed && !force && st.equal(failed) {
			return // the same state fails until the backoff is over
		}
		begin := time.Now()
		err := w.opts.Apply(st)
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
			w.stats.ChainFrom, w.stats.ChainTo = len(st.ChainFrom), len(st.ChainTo)
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
			failed, hasFailed = st, true
			retry = time.NewTimer(backoff)
			retryC = retry.C
			backoff = min(2*backoff, w.retryMax)
			return
		}
		if hasFailed {
			w.log.Info("translations applied after earlier failures")
		}
		w.log.Debug("translations applied", "entries", len(entries), "chainFrom", len(st.ChainFrom), "chainTo", len(st.ChainTo), "took", took)
		applied, hasApplied = st, true
		failed, hasFailed = State{}, false
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
