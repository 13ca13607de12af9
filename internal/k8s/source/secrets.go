package source

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// secretWatch watches the Secrets of the namespaces that BGPPeers name,
// one namespace-scoped informer each: the agent never lists Secrets
// cluster-wide, so its role needs read access to those namespaces only.
type secretWatch struct {
	client kubernetes.Interface
	// changed is called when a Secret changes, and with name "" when a
	// namespace's cache has synced: absent Secrets are known absent from
	// then on.
	changed func(namespace, name string)

	mu   sync.Mutex
	byNS map[string]*nsSecrets
}

type nsSecrets struct {
	factory informers.SharedInformerFactory
	inf     cache.SharedIndexInformer
	stop    chan struct{}
}

func newSecretWatch(client kubernetes.Interface, changed func(namespace, name string)) *secretWatch {
	return &secretWatch{client: client, changed: changed, byNS: map[string]*nsSecrets{}}
}

// watch makes the watched namespaces exactly namespaces: it starts the
// missing informers and stops those no longer needed.
func (w *secretWatch) watch(namespaces map[string]bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ns, s := range w.byNS {
		if !namespaces[ns] {
			close(s.stop)
			s.factory.Shutdown()
			delete(w.byNS, ns)
		}
	}
	for _, ns := range slices.Sorted(maps.Keys(namespaces)) {
		if _, ok := w.byNS[ns]; ok {
			continue
		}
		f := informers.NewSharedInformerFactoryWithOptions(w.client, 0, informers.WithNamespace(ns), informers.WithTransform(stripManagedFields))
		inf := f.Core().V1().Secrets().Informer()
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { w.notify(obj) },
			UpdateFunc: func(_, obj any) { w.notify(obj) },
			DeleteFunc: func(obj any) { w.notify(obj) },
		})
		s := &nsSecrets{factory: f, inf: inf, stop: make(chan struct{})}
		f.Start(s.stop)
		go func() {
			if cache.WaitForCacheSync(s.stop, inf.HasSynced) {
				w.changed(ns, "")
			}
		}()
		w.byNS[ns] = s
	}
}

func (w *secretWatch) notify(obj any) {
	if sec, ok := unwrap(obj).(*corev1.Secret); ok {
		w.changed(sec.Namespace, sec.Name)
	}
}

// get returns a Secret; known is false while its namespace's cache has not
// synced (or is not watched), when absence means nothing yet.
func (w *secretWatch) get(namespace, name string) (*corev1.Secret, bool) {
	w.mu.Lock()
	s, ok := w.byNS[namespace]
	w.mu.Unlock()
	if !ok || !s.inf.HasSynced() {
		return nil, false
	}
	obj, exists, err := s.inf.GetIndexer().GetByKey(namespace + "/" + name)
	if err != nil || !exists {
		return nil, true
	}
	sec, ok := obj.(*corev1.Secret)
	return sec, ok
}

// waitSynced waits until every watched namespace's cache has synced, or
// ctx ends; it returns the namespaces not synced by then.
func (w *secretWatch) waitSynced(ctx context.Context) []string {
	w.mu.Lock()
	byNS := maps.Clone(w.byNS)
	w.mu.Unlock()
	var missing []string
	for _, ns := range slices.Sorted(maps.Keys(byNS)) {
		if !waitUntil(ctx, byNS[ns].inf.HasSynced) {
			missing = append(missing, ns)
		}
	}
	return missing
}

// waitUntil polls cond until it holds (true) or ctx ends (false).
func waitUntil(ctx context.Context, cond func() bool) bool {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return cond()
		case <-tick.C:
		}
	}
	return true
}

// stop stops every informer.
func (w *secretWatch) stop() {
	w.watch(nil)
}
