package source

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// secretWatch watches the Secrets that BGPPeers name, each with an
// informer of its own whose list and watch carry the field selector
// metadata.name=NAME. RBAC authorizes such a list or watch by the name
// (resourceNames), so the agent's Role names the password Secrets and
// grants no other: the agent never lists a namespace's Secrets.
type secretWatch struct {
	client kubernetes.Interface
	log    *slog.Logger
	// changed is called when a watched Secret changes, and once its
	// first list is in: absent is known absent from then on.
	changed func(namespace, name string)

	mu    sync.Mutex
	byKey map[string]*oneSecret // "namespace/name"
}

type oneSecret struct {
	factory   informers.SharedInformerFactory
	inf       cache.SharedIndexInformer
	stop      chan struct{}
	namespace string
	name      string

	mu sync.Mutex
	// refused: the API server refused to list or watch the Secret
	// (RBAC), so waiting for it is pointless.
	refused bool
	lastErr string
}

func newSecretWatch(client kubernetes.Interface, log *slog.Logger, changed func(namespace, name string)) *secretWatch {
	return &secretWatch{client: client, log: log, changed: changed, byKey: map[string]*oneSecret{}}
}

// watch makes the watched Secrets exactly keys ("namespace/name"): it
// starts the missing informers and stops those no longer needed.
func (w *secretWatch) watch(keys map[string]bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for key, s := range w.byKey {
		if !keys[key] {
			close(s.stop)
			s.factory.Shutdown()
			delete(w.byKey, key)
		}
	}
	for _, key := range slices.Sorted(maps.Keys(keys)) {
		if _, ok := w.byKey[key]; ok {
			continue
		}
		ns, name, ok := strings.Cut(key, "/")
		if !ok || ns == "" || name == "" {
			continue
		}
		w.byKey[key] = w.start(ns, name)
	}
}

// start runs the informer of one Secret.
func (w *secretWatch) start(ns, name string) *oneSecret {
	f := informers.NewSharedInformerFactoryWithOptions(w.client, 0, informers.WithNamespace(ns),
		informers.WithTransform(stripManagedFields),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}))
	s := &oneSecret{factory: f, inf: f.Core().V1().Secrets().Informer(), stop: make(chan struct{}), namespace: ns, name: name}
	_ = s.inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		s.failed(w.log, err)
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	// The API server filters by name; a fake one may not: only this
	// Secret is the watch's business.
	_, _ = s.inf.AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: func(obj any) bool {
			sec, ok := unwrap(obj).(*corev1.Secret)
			return ok && sec.Namespace == ns && sec.Name == name
		},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { w.changed(ns, name) },
			UpdateFunc: func(_, _ any) { w.changed(ns, name) },
			DeleteFunc: func(any) { w.changed(ns, name) },
		},
	})
	f.Start(s.stop)
	go func() {
		if cache.WaitForCacheSync(s.stop, s.inf.HasSynced) {
			s.mu.Lock()
			s.refused, s.lastErr = false, ""
			s.mu.Unlock()
			w.changed(ns, name)
		}
	}()
	return s
}

// failed notes a list or watch error, and logs it once while it lasts.
func (s *oneSecret) failed(log *slog.Logger, err error) {
	refused := apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err)
	s.mu.Lock()
	repeat := s.lastErr == err.Error()
	s.refused, s.lastErr = refused, err.Error()
	s.mu.Unlock()
	if repeat || !refused {
		return // the informer logs other errors itself, and retries
	}
	log.Warn("the agent may not read a BGP password Secret; the BGPPeers that name it are left out until it can",
		"secret", s.namespace+"/"+s.name, "error", err,
		"fix", "add "+s.name+" to the resourceNames of the agent's Role in namespace "+s.namespace+
			" (deploy/10-rbac.yaml; Helm: agent.bgpPasswordSecrets, or a BGPPeer in the bgpPeers value); the agent retries by itself")
}

// settled: listed, or refused (no use waiting).
func (s *oneSecret) settled() bool {
	if s.inf.HasSynced() {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused
}

// get returns a Secret; known is false while it has not been listed (or
// is not watched), when absence means nothing yet.
func (w *secretWatch) get(namespace, name string) (*corev1.Secret, bool) {
	w.mu.Lock()
	s, ok := w.byKey[namespace+"/"+name]
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

// waitSynced waits until every watched Secret has been listed or
// refused, or ctx ends; it returns those still missing ("namespace/name").
func (w *secretWatch) waitSynced(ctx context.Context) []string {
	w.mu.Lock()
	byKey := maps.Clone(w.byKey)
	w.mu.Unlock()
	var missing []string
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		if s := byKey[key]; !waitUntil(ctx, s.settled) || !s.inf.HasSynced() {
			missing = append(missing, key)
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
