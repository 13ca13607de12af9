// Package source is the agent's Kubernetes source: it watches the Services
// of type LoadBalancer that xlb serves, their EndpointSlices, this node's
// Node object, the BGPPeers and the Secrets of their passwords (each by
// name), the DenyLists, the BGPAdvertisements with the AddressPools
// they select, and the AddressPools' announce (which of them announce by
// ARP), and turns them into whole agent configurations: the base
// configuration (the file, or defaults) with one service per Service port
// (its source ranges with it), the peers that select this node, the
// DenyLists' prefixes in its deny list, and the advertisements' route
// attributes, peers and aggregates (advertise.go). Every
// configuration passes the file's own checks; a burst of changes becomes
// one configuration.
package source

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/k8s/api"
	"github.com/xlbproject/xlb/internal/k8s/endpoints"
	"github.com/xlbproject/xlb/internal/source"
)

// Name is the source's name in source.Update and in logs.
const Name = "kubernetes"

// Options configure New.
type Options struct {
	// Base is the configuration the cluster's services and peers are
	// added to: the file's, or DaemonSetBase's. Base.Kubernetes must be
	// set, with NodeName and SecretNamespace filled in
	// (config.Kubernetes.WithDefaults).
	Base    *config.Config
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	Logger  *slog.Logger
	// Quiet and MaxDelay shape the debouncing (see DefaultQuiet and
	// DefaultMaxDelay, taken when zero).
	Quiet, MaxDelay time.Duration
	// Host reads the host's addresses for the checks of every
	// configuration (agent.LocalHost, say): a Service whose VIP is one of
	// them, or with a backend at the node address, is left out. Nil: no
	// host checks.
	Host func() (*config.Host, error)
}

// Source watches the cluster and delivers configurations (a
// source.Source).
type Source struct {
	client   kubernetes.Interface
	log      *slog.Logger
	deb      *debouncer
	updates  chan source.Update
	nodeName string
	host     func() (*config.Host, error)

	factories []factory
	svcs      cache.SharedIndexInformer
	slices    cache.SharedIndexInformer
	nodes     cache.SharedIndexInformer
	peers     cache.SharedIndexInformer
	denyLists cache.SharedIndexInformer
	adverts   cache.SharedIndexInformer
	pools     cache.SharedIndexInformer
	secrets   *secretWatch
	// refs are the Secrets ("namespace/name") the BGPPeers name: a
	// change of any other Secret is none of the source's business.
	refs atomic.Pointer[map[string]bool]
	// peerObjects are the BGPPeers behind the peers of the last valid
	// configuration (PeerObjects).
	peerObjects atomic.Pointer[[]PeerObject]

	mu      sync.Mutex // guards st and baseErr
	st      settings
	baseErr error // the base file no longer loads (SetBase)

	// Owned by the goroutine that builds (Start, then run).
	last     *config.Config // last sent; nil after an error
	lastErr  string
	problems map[string]problem
	// translated and checks keep what each build translated and checked
	// for the next: a change of one Service redoes that Service's part.
	translated translated
	checks     config.Validator
}

var _ source.Source = (*Source)(nil)

// factory is an informer factory: typed, or dynamic.
type factory interface {
	Start(stop <-chan struct{})
	Shutdown()
}

// byService indexes EndpointSlices by their Service, "namespace/name".
const byService = "service"

// New prepares a source; Start starts it.
func New(o Options) (*Source, error) {
	if o.Base == nil || o.Base.Kubernetes == nil || o.Base.Kubernetes.NodeName == "" || o.Base.Kubernetes.SecretNamespace == "" {
		return nil, errors.New("kubernetes source: the base configuration needs a kubernetes section with nodeName and secretNamespace resolved")
	}
	if o.Client == nil || o.Dynamic == nil {
		return nil, errors.New("kubernetes source: a client and a dynamic client are required")
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	quiet, maxDelay := o.Quiet, o.MaxDelay
	if quiet <= 0 {
		quiet = DefaultQuiet
	}
	if maxDelay <= 0 {
		maxDelay = DefaultMaxDelay
	}
	k := o.Base.Kubernetes
	s := &Source{
		st:       settings{base: o.Base, serveClassless: k.ServeClassless, secretNamespace: k.SecretNamespace},
		client:   o.Client,
		log:      log.With("source", Name),
		deb:      newDebouncer(quiet, maxDelay),
		updates:  make(chan source.Update),
		nodeName: k.NodeName,
		host:     o.Host,
		problems: map[string]problem{},
	}
	empty := map[string]bool{}
	s.refs.Store(&empty)

	strip := informers.WithTransform(stripManagedFields)
	svcF := informers.NewSharedInformerFactoryWithOptions(o.Client, 0, strip)
	// Only the slices the EndpointSlice controller made for a Service.
	sliceF := informers.NewSharedInformerFactoryWithOptions(o.Client, 0, strip,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = discoveryv1.LabelServiceName }))
	// Only this node's Node object.
	nodeF := informers.NewSharedInformerFactoryWithOptions(o.Client, 0, strip,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", k.NodeName).String()
		}))
	dynF := dynamicinformer.NewDynamicSharedInformerFactory(o.Dynamic, 0)
	s.factories = []factory{svcF, sliceF, nodeF, dynF}

	s.svcs = svcF.Core().V1().Services().Informer()
	s.slices = sliceF.Discovery().V1().EndpointSlices().Informer()
	s.nodes = nodeF.Core().V1().Nodes().Informer()
	s.peers = dynF.ForResource(api.BGPPeerResource).Informer()
	s.denyLists = dynF.ForResource(api.DenyListResource).Informer()
	s.adverts = dynF.ForResource(api.BGPAdvertisementResource).Informer()
	s.pools = dynF.ForResource(api.AddressPoolResource).Informer()
	if err := s.slices.AddIndexers(cache.Indexers{byService: endpoints.ServiceIndex}); err != nil {
		return nil, fmt.Errorf("kubernetes source: %w", err)
	}
	s.secrets = newSecretWatch(o.Client, s.log, func(ns, name string) {
		if (*s.refs.Load())[ns+"/"+name] {
			s.deb.changed(time.Now())
		}
	})
	for _, h := range []struct {
		inf      cache.SharedIndexInformer
		relevant func(any) bool
	}{
		{s.svcs, isLoadBalancer},
		{s.slices, s.sliceOfLoadBalancer},
		{s.nodes, always},
		{s.peers, always},
		{s.denyLists, always},
		{s.adverts, always},
		{s.pools, always},
	} {
		if _, err := h.inf.AddEventHandler(s.handler(h.relevant)); err != nil {
			return nil, fmt.Errorf("kubernetes source: %w", err)
		}
	}
	return s, nil
}

// handler notes a change when an object that matters before or after it
// changes.
func (s *Source) handler(relevant func(any) bool) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if relevant(obj) {
				s.deb.changed(time.Now())
			}
		},
		UpdateFunc: func(old, obj any) {
			if (relevant(old) || relevant(obj)) && !sameNode(old, obj) {
				s.deb.changed(time.Now())
			}
		},
		DeleteFunc: func(obj any) {
			if relevant(unwrap(obj)) {
				s.deb.changed(time.Now())
			}
		},
	}
}

func always(any) bool { return true }

func isLoadBalancer(obj any) bool {
	svc, ok := obj.(*corev1.Service)
	return ok && svc.Spec.Type == corev1.ServiceTypeLoadBalancer
}

// sliceOfLoadBalancer reports whether an EndpointSlice belongs to a
// Service of type LoadBalancer (one that is gone counts: its slices go
// with it).
func (s *Source) sliceOfLoadBalancer(obj any) bool {
	sl, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return false
	}
	name := sl.Labels[discoveryv1.LabelServiceName]
	if name == "" {
		return false
	}
	svc, exists, err := s.svcs.GetStore().GetByKey(sl.Namespace + "/" + name)
	return err != nil || !exists || isLoadBalancer(svc)
}

// sameNode reports an update of a Node that left its labels alone, as
// kubelets' status updates do every few seconds: the source reads
// nothing else of it.
func sameNode(old, obj any) bool {
	a, ok1 := old.(*corev1.Node)
	b, ok2 := obj.(*corev1.Node)
	return ok1 && ok2 && maps.Equal(a.Labels, b.Labels)
}

// unwrap returns the object of a deletion whose final state the informer
// missed.
func unwrap(obj any) any {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}

// stripManagedFields keeps the caches small: the source never reads who
// wrote which field.
func stripManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// Start starts the watches and waits, at most timeout, until every cache
// holds the cluster's state; it returns the first configuration, built
// from that state. Later ones arrive on Updates until ctx ends.
func (s *Source) Start(ctx context.Context, timeout time.Duration) (*config.Config, error) {
	if err := s.checkAPI(ctx); err != nil {
		return nil, err
	}
	for _, f := range s.factories {
		f.Start(ctx.Done())
	}
	context.AfterFunc(ctx, func() {
		s.secrets.stop()
		for _, f := range s.factories {
			f.Shutdown()
		}
	})
	syncCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	named := []struct {
		what string
		inf  cache.SharedIndexInformer
	}{{"Services", s.svcs}, {"EndpointSlices", s.slices}, {"Node " + s.nodeName, s.nodes}, {"BGPPeers", s.peers}, {"DenyLists", s.denyLists},
		{"BGPAdvertisements", s.adverts}, {"AddressPools", s.pools}}
	var missing []string
	for _, n := range named {
		if !waitUntil(syncCtx, n.inf.HasSynced) {
			missing = append(missing, n.what)
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("kubernetes: %s not read from the API server within %s; check that it is reachable and that the agent's service account may list and watch them (see docs/kubernetes.md)",
			strings.Join(missing, ", "), timeout)
	}
	// The BGPPeers name the Secrets to watch: wait for those too, so that
	// no peer starts without its password. A Secret the agent may not
	// read only keeps its peers out, not the whole node.
	d, _ := translate(s.settings(), s.cluster())
	s.refs.Store(&d.secrets)
	s.secrets.watch(d.secrets)
	if missing := s.secrets.waitSynced(syncCtx); len(missing) > 0 {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		s.log.Warn("BGP password Secrets not read (refused, or not within the timeout); the BGPPeers whose passwords they hold are left out until they are",
			"secrets", missing, "timeout", timeout,
			"fix", "let the agent's service account get, list and watch each of them: name it in the resourceNames of the agent's Role in its namespace (deploy/10-rbac.yaml; Helm: agent.bgpPasswordSecrets)")
	}
	start := time.Now()
	cfg, err := s.build()
	if err != nil {
		return nil, fmt.Errorf("kubernetes: the first configuration: %w", err)
	}
	s.last = cfg
	s.log.Info("first configuration from the cluster", "services", len(cfg.Services), "peers", peerCount(cfg), "build", time.Since(start).Round(time.Microsecond))
	go s.run(ctx)
	return cfg, nil
}

// checkAPI fails early, and clearly, when the API server does not serve
// BGPPeers and DenyLists: the informers would otherwise retry until the
// timeout.
func (s *Source) checkAPI(ctx context.Context) error {
	gv := api.BGPPeerResource.GroupVersion().String()
	var list *metav1.APIResourceList
	var err error
	// A fresh API server may not serve a just-installed CRD yet, and a
	// discovery request can fail transiently: retry a few times.
	for attempt := range 5 {
		if list, err = s.client.Discovery().ServerResourcesForGroupVersion(gv); err == nil || !transient(err) || attempt == 4 {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 200 * time.Millisecond):
		}
	}
	var missing []string
	for _, want := range []string{api.BGPPeerResource.Resource, api.DenyListResource.Resource, api.BGPAdvertisementResource.Resource} {
		if err == nil && slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == want }) {
			continue
		}
		missing = append(missing, want)
	}
	if len(missing) == 0 {
		return nil
	}
	why := "not served"
	if err != nil {
		why = err.Error()
	}
	return fmt.Errorf("kubernetes: the API server does not serve %s (%s): %s; install xlb's CustomResourceDefinitions (deploy/crds)", strings.Join(missing, " and "), gv, why)
}

// transient reports an error worth a retry: anything but the API server
// saying the group does not exist or the agent may not ask.
func transient(err error) bool {
	return !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) && !apierrors.IsUnauthorized(err)
}

// Updates delivers each configuration after the first, or the error that
// keeps the source from building one (the agent keeps the running
// configuration then). Unchanged configurations are not sent.
func (s *Source) Updates() <-chan source.Update { return s.updates }

// SetBase replaces the base configuration, after its file changed; a
// non-nil err (the file no longer loads) is sent on Updates instead,
// until a base comes again. base.Kubernetes must be resolved as for New.
// The kubernetes section cannot change while the source runs: a changed
// one is logged and the running one kept.
func (s *Source) SetBase(base *config.Config, err error) {
	s.mu.Lock()
	if err != nil {
		s.baseErr = err
	} else {
		b := *base
		if k := s.st.base.Kubernetes; b.Kubernetes == nil || *b.Kubernetes != *k {
			s.log.Warn("the kubernetes section changed; it takes effect when the agent restarts", "running", *k,
				"fix", "restart the agent (forwarding continues across restarts)")
			b.Kubernetes = k
		}
		s.st.base, s.baseErr = &b, nil
	}
	s.mu.Unlock()
	s.deb.changed(time.Now())
}

func (s *Source) settings() settings {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

func (s *Source) run(ctx context.Context) {
	for {
		b, ok := s.deb.wait(ctx)
		if !ok {
			return
		}
		start := time.Now()
		cfg, err := s.build()
		u := source.Update{Config: cfg, Err: err, Source: Name}
		switch {
		case err != nil && err.Error() == s.lastErr:
			continue
		case err != nil:
			s.last, s.lastErr = nil, err.Error()
		case reflect.DeepEqual(cfg, s.last):
			continue
		default:
			s.last, s.lastErr = cfg, ""
		}
		built := time.Since(start)
		select {
		case s.updates <- u:
		case <-ctx.Done():
			return
		}
		// From the first change the informers delivered to the agent
		// taking the configuration: the source's share of the way from
		// an API change to the data plane.
		latency := time.Since(b.first)
		if err != nil {
			s.log.Error("no valid configuration; the agent keeps the running one", "error", err, "events", b.count, "latency", latency,
				"fix", "if the error is about the configuration file, correct it (it is read again when it changes or on SIGHUP); "+
					"else correct what it names in the cluster's Services or BGPPeers; the configuration is built again at every change")
			continue
		}
		s.log.Info("configuration from the cluster", "services", len(cfg.Services), "peers", peerCount(cfg),
			"events", b.count, "latency", latency.Round(time.Microsecond), "build", built.Round(time.Microsecond))
	}
}

// build translates the caches' contents into a validated configuration
// and reports the problems that changed.
func (s *Source) build() (*config.Config, error) {
	s.mu.Lock()
	st, baseErr := s.st, s.baseErr
	s.mu.Unlock()
	if baseErr != nil {
		return nil, baseErr
	}
	var host *config.Host
	if s.host != nil {
		h, err := s.host()
		if err != nil {
			return nil, err
		}
		host = h
	}
	d, probs := s.translated.translate(st, s.cluster())
	s.refs.Store(&d.secrets)
	s.secrets.watch(d.secrets)
	cfg, more, err := validate(&s.checks, d, st.base, host)
	s.report(append(probs, more...))
	if err == nil && d.ann != nil {
		// After the checks, which know nothing of them (see
		// config.Announcements).
		c := *cfg
		c.Announcements = d.ann
		cfg = &c
	}
	if err == nil {
		objs := s.peerObjectsOf(d, st.base, cfg)
		s.peerObjects.Store(&objs)
	}
	return cfg, err
}

// PeerObject is a BGPPeer whose peer this node runs.
type PeerObject struct {
	Name    string
	UID     types.UID
	Address netip.Addr
}

// PeerObjects returns the BGPPeers behind the peers of the last valid
// configuration the source built: those that select this node and that
// the checks let in.
func (s *Source) PeerObjects() []PeerObject {
	if p := s.peerObjects.Load(); p != nil {
		return slices.Clone(*p)
	}
	return nil
}

// peerObjectsOf finds the BGPPeers behind cfg's peers: d names the one
// behind each peer it added after the base's, and the checks may have
// left some out of cfg.
func (s *Source) peerObjectsOf(d desired, base, cfg *config.Config) []PeerObject {
	if cfg.BGP == nil || d.cfg.BGP == nil {
		return nil
	}
	n := basePeers(base)
	kept := map[netip.Addr]bool{}
	for _, p := range cfg.BGP.Peers[min(n, len(cfg.BGP.Peers)):] {
		kept[p.Address] = true
	}
	var out []PeerObject
	for i, from := range d.peerFrom {
		name, ok := strings.CutPrefix(from, "BGPPeer ")
		if !ok || n+i >= len(d.cfg.BGP.Peers) {
			continue
		}
		addr := d.cfg.BGP.Peers[n+i].Address
		if !kept[addr] {
			continue
		}
		o := PeerObject{Name: name, Address: addr}
		if obj, ok, _ := s.peers.GetStore().GetByKey(name); ok {
			if u, ok := obj.(*unstructured.Unstructured); ok {
				o.UID = u.GetUID()
			}
		}
		out = append(out, o)
	}
	return out
}

// cluster reads the caches.
func (s *Source) cluster() cluster {
	var c cluster
	for _, obj := range s.svcs.GetStore().List() {
		if svc, ok := obj.(*corev1.Service); ok {
			c.services = append(c.services, svc)
		}
	}
	c.slices = func(ns, name string) []*discoveryv1.EndpointSlice {
		objs, _ := s.slices.GetIndexer().ByIndex(byService, ns+"/"+name)
		out := make([]*discoveryv1.EndpointSlice, 0, len(objs))
		for _, obj := range objs {
			if sl, ok := obj.(*discoveryv1.EndpointSlice); ok {
				out = append(out, sl)
			}
		}
		return out
	}
	if obj, ok, _ := s.nodes.GetStore().GetByKey(s.nodeName); ok {
		c.node, _ = obj.(*corev1.Node)
	}
	for _, obj := range s.peers.GetStore().List() {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			c.peers = append(c.peers, u)
		}
	}
	for _, obj := range s.denyLists.GetStore().List() {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			c.denyLists = append(c.denyLists, u)
		}
	}
	for _, obj := range s.adverts.GetStore().List() {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			c.adverts = append(c.adverts, u)
		}
	}
	for _, obj := range s.pools.GetStore().List() {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			c.pools = append(c.pools, u)
			if a, _, _ := unstructured.NestedString(u.Object, "spec", "announce"); a == api.AnnounceL2 {
				if c.l2Pools == nil {
					c.l2Pools = map[string]bool{}
				}
				c.l2Pools[u.GetName()] = true
			}
		}
	}
	c.secret = s.secrets.get
	return c
}

// report logs the problems that appeared and those that went away.
func (s *Source) report(probs []problem) {
	now := make(map[string]problem, len(probs))
	for _, p := range probs {
		now[p.String()] = p
	}
	for k, p := range now {
		if _, ok := s.problems[k]; !ok {
			s.log.Warn("left out of the configuration", "object", p.object, "reason", p.msg, "fix", p.fix)
		}
	}
	for k, p := range s.problems {
		if _, ok := now[k]; !ok {
			s.log.Info("resolved", "object", p.object, "was", p.msg)
		}
	}
	s.problems = now
}

func peerCount(cfg *config.Config) int {
	if cfg.BGP == nil {
		return 0
	}
	return len(cfg.BGP.Peers)
}

// Client is the source's Kubernetes client, for what else the agent
// does in the cluster (layer-2 mode's Leases).
func (s *Source) Client() kubernetes.Interface { return s.client }
