// Package lease is layer-2 mode's election in a Kubernetes cluster, for
// the Services of AddressPools with announce: l2. Each agent renews a
// node Lease (xlb-l2-node-NAME, in its namespace) every Renew, with the
// VIPs it can serve in an annotation, and watches the others'. The owner
// of a VIP is chosen by rendezvous hashing (package l2/elect) among the
// live nodes that can serve it, and recorded as the holderIdentity of the
// VIP's own Lease (xlb-l2-vip-A-B-C-D). A node answers for its VIPs only
// for DeadAfter after its last successful renewal was sent, and the
// others take over only DeadAfter after they last saw its Lease change:
// without the API server, a node falls silent before anyone takes its
// VIPs. docs/decisions/0010-l2-kubernetes.md says why.
package lease

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/xlbproject/xlb/internal/l2/elect"
)

// Defaults: a stopped owner is replaced DefaultDeadAfter after its last
// renewal, plus a watch event's latency and at most one renewal period.
const (
	DefaultRenew     = 200 * time.Millisecond
	DefaultDeadAfter = 800 * time.Millisecond
)

// Names and labels of the Leases.
const (
	// LabelKind is on every Lease of the election: "node" or "vip".
	LabelKind = "xlb.io/l2"
	// AnnotationVIPs, on a node Lease, lists the VIPs the node can serve,
	// comma separated.
	AnnotationVIPs = "xlb.io/l2-vips"
	NodePrefix     = "xlb-l2-node-"
	VIPPrefix      = "xlb-l2-vip-"
)

// NodeLease is the name of node's Lease.
func NodeLease(node string) string { return NodePrefix + node }

// VIPLease is the name of the Lease that records vip's owner: an IPv4
// VIP's dotted quad with dashes, an IPv6 VIP's 32 hex digits (its text
// form may end in "::", which no object name may).
func VIPLease(vip netip.Addr) string {
	vip = vip.Unmap()
	if vip.Is6() {
		b := vip.As16()
		return VIPPrefix + hex.EncodeToString(b[:])
	}
	return VIPPrefix + strings.ReplaceAll(vip.String(), ".", "-")
}

// Config is what an Elector needs.
type Config struct {
	Client    kubernetes.Interface
	Namespace string
	Self      string // this node's name
	Renew     time.Duration
	DeadAfter time.Duration
}

// Elector renews this node's Lease and follows the others'. It calls back
// with the alive set at every renewal and whenever another node's Lease
// changes, so that the caller refreshes what it owns.
type Elector struct {
	cfg    Config
	log    *slog.Logger
	now    func() time.Time
	leases leaseClient

	mu       sync.Mutex
	members  *Members
	servable []netip.Addr
	lease    *coordinationv1.Lease // this node's, as last written; nil: read it first
	synced   bool                  // the others' Leases were listed
	elect.AliveSet
	renewErr  string
	left      bool
	recordErr string
	store     cache.Store // the Leases of the election, once synced
	// said is the list of VIPs this node's Lease last carried: "" when
	// it was never written, or told that the node serves none.
	said   string
	writes uint64 // API writes, for status and the decision's figures
}

// leaseClient is the part of the Leases client the elector uses.
type leaseClient interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error)
	Create(ctx context.Context, l *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error)
	Update(ctx context.Context, l *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// New prepares an elector; Run starts it.
func New(cfg Config, log *slog.Logger) (*Elector, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("layer-2 election by Leases: no Kubernetes client")
	case cfg.Self == "" || len(NodeLease(cfg.Self)) > 253:
		return nil, fmt.Errorf("layer-2 election by Leases: node name %q does not make a Lease name of at most 253 characters", cfg.Self)
	case cfg.Namespace == "":
		return nil, errors.New("layer-2 election by Leases: no namespace")
	}
	if cfg.Renew <= 0 {
		cfg.Renew = DefaultRenew
	}
	if cfg.DeadAfter <= cfg.Renew {
		cfg.DeadAfter = max(DefaultDeadAfter, 2*cfg.Renew)
	}
	if log == nil {
		log = slog.Default()
	}
	return &Elector{cfg: cfg, log: log, now: time.Now, leases: cfg.Client.CoordinationV1().Leases(cfg.Namespace),
		members: NewMembers(cfg.Self, cfg.DeadAfter)}, nil
}

// SetServable sets the VIPs of l2 pools this node can serve; the next
// renewal tells the others.
func (e *Elector) SetServable(vips []netip.Addr) {
	vips = slices.Clone(vips)
	slices.SortFunc(vips, func(a, b netip.Addr) int { return a.Compare(b) })
	vips = slices.Compact(vips)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.servable = vips
	e.members.SetServable(vips)
}

// Run renews this node's Lease and follows the others' until ctx ends,
// calling update with the alive set after each renewal and when another
// node's Lease changes. Nothing is owned before the others' Leases were
// listed. Call Leave before ctx ends to hand the VIPs over at once.
func (e *Elector) Run(ctx context.Context, update func(alive []string)) {
	changes := make(chan struct{}, 1)
	notify := func() {
		select {
		case changes <- struct{}{}:
		default:
		}
	}
	// Node and VIP Leases: the VIP Leases' cache tells which records
	// need writing, without a read per VIP.
	f := informers.NewSharedInformerFactoryWithOptions(e.cfg.Client, 0, informers.WithNamespace(e.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = LabelKind }))
	inf := f.Coordination().V1().Leases().Informer()
	isNode := func(l *coordinationv1.Lease) bool {
		return l.Labels[LabelKind] == "node" && l.Spec.HolderIdentity != nil
	}
	observe := func(obj any) {
		if l, ok := obj.(*coordinationv1.Lease); ok && isNode(l) {
			e.mu.Lock()
			e.members.Observe(*l.Spec.HolderIdentity, l.ResourceVersion, parseVIPs(l.Annotations[AnnotationVIPs]), e.now())
			changed := e.evaluateLocked()
			e.mu.Unlock()
			if changed {
				notify()
			}
		}
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if l, ok := obj.(*coordinationv1.Lease); ok && isNode(l) {
				e.mu.Lock()
				e.members.Gone(*l.Spec.HolderIdentity)
				changed := e.evaluateLocked()
				e.mu.Unlock()
				if changed {
					notify()
				}
			}
		},
	})
	if err != nil {
		e.log.Error("layer-2 election: cannot watch the node Leases", "error", err, "fix", "restart the agent")
		return
	}
	f.Start(ctx.Done())
	defer f.Shutdown()
	// The handler's own sync: the informer's comes before the handler
	// has seen the list, and a view without the others would take every
	// VIP.
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced, reg.HasSynced) {
		return
	}
	e.mu.Lock()
	e.synced = true
	e.store = inf.GetStore()
	e.mu.Unlock()

	records := make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Go(func() { e.record(ctx, records) })
	defer wg.Wait()

	tick := time.NewTicker(e.cfg.Renew)
	defer tick.Stop()
	last := e.now()
	step := func() {
		if now := e.now(); now.Sub(last) >= e.cfg.DeadAfter {
			e.resumed(now.Sub(last))
		}
		last = e.now()
		e.renew(ctx)
		e.evaluate()
		update(e.Alive())
		select {
		case records <- struct{}{}:
		default:
		}
	}
	step()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			step()
		case <-changes:
			update(e.Alive())
			select {
			case records <- struct{}{}:
			default:
			}
		}
	}
}

// resumed restarts the view of the others after this node was stopped
// for gap: its own renewals lapsed meanwhile (it owns nothing until the
// next one), and the others' Leases must be seen renewing again before
// their VIPs are taken.
func (e *Elector) resumed(gap time.Duration) {
	e.mu.Lock()
	e.members.Restart(e.now())
	e.mu.Unlock()
	e.log.Warn("layer-2 mode: this agent was stopped or starved longer than the dead time; it waits a dead time for the other nodes' Leases before taking any VIP over",
		"gap", gap.Round(time.Millisecond), "fix", "nothing if the agent was stopped on purpose (SIGSTOP); otherwise give it CPU time: a starved agent's node stops answering ARP")
}

// renew writes this node's Lease: its renewTime and the VIPs it can
// serve. A request that takes longer than a renewal period is given up:
// its answer would come too late to count.
func (e *Elector) renew(ctx context.Context) {
	e.mu.Lock()
	if e.left {
		e.mu.Unlock()
		return
	}
	cur := e.lease
	vips := formatVIPs(e.servable)
	// A node with no VIP of an l2 pool to serve takes no part: no
	// writes at all in a cluster without l2 pools. It says so once, so
	// that the others stop counting on it at once.
	if vips == "" && e.said == "" {
		e.mu.Unlock()
		return
	}
	e.mu.Unlock()
	sent := e.now()
	rctx, cancel := context.WithTimeout(ctx, e.cfg.Renew)
	defer cancel()
	name := NodeLease(e.cfg.Self)
	var err error
	writes := uint64(0)
	create := false
	if cur == nil {
		cur, err = e.leases.Get(rctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			cur, err, create = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.cfg.Namespace}}, nil, true
		}
	}
	var out *coordinationv1.Lease
	if err == nil {
		l := cur.DeepCopy()
		e.fill(l, vips, sent)
		writes++
		if create {
			out, err = e.leases.Create(rctx, l, metav1.CreateOptions{})
		} else {
			out, err = e.leases.Update(rctx, l, metav1.UpdateOptions{})
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.writes += writes
	prev := e.renewErr
	if err != nil {
		e.lease = nil // read it again: a conflict means it changed under us
		e.renewErr = err.Error()
		if prev == "" {
			e.log.Warn("layer-2 mode: this node's Lease cannot be renewed; its VIPs stop being answered a dead time after the last renewal, and the other nodes take them over",
				"lease", e.cfg.Namespace+"/"+name, "error", err,
				"fix", "check that the API server is reachable and that the agent may update Leases in its namespace (deploy/10-rbac.yaml)")
		}
		return
	}
	e.lease, e.renewErr, e.said = out, "", vips
	if prev != "" {
		e.log.Info("layer-2 mode: this node's Lease is renewed again", "lease", e.cfg.Namespace+"/"+name)
	}
	e.members.Renewed(sent)
}

// fill makes l this node's Lease, renewed at now.
func (e *Elector) fill(l *coordinationv1.Lease, vips string, now time.Time) {
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Labels[LabelKind] = "node"
	l.Annotations[AnnotationVIPs] = vips
	t := metav1.NewMicroTime(now)
	secs := int32(math.Ceil(e.cfg.DeadAfter.Seconds()))
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != e.cfg.Self {
		l.Spec.HolderIdentity = &e.cfg.Self
		l.Spec.AcquireTime = &t
	}
	l.Spec.LeaseDurationSeconds = &secs
	l.Spec.RenewTime = &t
}

// record keeps the VIP Leases naming this node for the VIPs it owns, at
// every signal on wake; a failed write is tried again at the next one.
// The records are what operators read (kubectl get leases): who answers
// each VIP, and since when. The election itself runs on the node Leases.
func (e *Elector) record(ctx context.Context, wake <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake:
		}
		e.mu.Lock()
		now := e.now()
		alive := e.members.Alive(now)
		var gained, orphaned []netip.Addr
		for _, v := range e.servable {
			if e.members.Owner(v, alive) == e.cfg.Self && e.holder(v) != e.cfg.Self {
				gained = append(gained, v)
			}
		}
		// The records of VIPs no node can serve any more go.
		for _, obj := range e.store.List() {
			l, ok := obj.(*coordinationv1.Lease)
			if !ok || l.Labels[LabelKind] != "vip" || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != e.cfg.Self {
				continue
			}
			if v, err := netip.ParseAddr(l.Annotations[AnnotationVIPs]); err == nil && e.members.Owner(v, alive) == "" {
				orphaned = append(orphaned, v)
			}
		}
		e.mu.Unlock()
		var errs []error
		for _, v := range gained {
			if err := e.recordVIP(ctx, v, now); err != nil {
				errs = append(errs, err)
			}
		}
		for _, v := range orphaned {
			if err := e.dropVIP(ctx, v); err != nil {
				errs = append(errs, err)
			}
		}
		e.mu.Lock()
		prev := e.recordErr
		e.recordErr = ""
		if err := errors.Join(errs...); err != nil {
			e.recordErr = err.Error()
			if prev == "" {
				e.log.Warn("layer-2 mode: the Leases that record who answers each VIP cannot be written; the election goes on without them",
					"error", err, "fix", "check that the agent may create and update Leases in its namespace (deploy/10-rbac.yaml)")
			}
		}
		e.mu.Unlock()
	}
}

// holder is the node vip's Lease names, as cached; the caller holds mu.
func (e *Elector) holder(vip netip.Addr) string {
	obj, ok, _ := e.store.GetByKey(e.cfg.Namespace + "/" + VIPLease(vip))
	if l, isLease := obj.(*coordinationv1.Lease); ok && isLease && l.Spec.HolderIdentity != nil {
		return *l.Spec.HolderIdentity
	}
	return ""
}

// recordVIP writes this node into vip's Lease.
func (e *Elector) recordVIP(ctx context.Context, vip netip.Addr, now time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	name := VIPLease(vip)
	t := metav1.NewMicroTime(now)
	secs := int32(math.Ceil(e.cfg.DeadAfter.Seconds()))
	l, err := e.leases.Get(ctx, name, metav1.GetOptions{})
	create := apierrors.IsNotFound(err)
	if create {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.cfg.Namespace,
			Labels: map[string]string{LabelKind: "vip"}, Annotations: map[string]string{AnnotationVIPs: vip.String()}}}
	} else if err != nil {
		return fmt.Errorf("VIP %s: read Lease %s: %w", vip, name, err)
	}
	if !create && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == e.cfg.Self {
		return nil
	}
	if !create {
		n := int32(1)
		if l.Spec.LeaseTransitions != nil {
			n = *l.Spec.LeaseTransitions + 1
		}
		l.Spec.LeaseTransitions = &n
	}
	l.Spec.HolderIdentity = &e.cfg.Self
	l.Spec.AcquireTime, l.Spec.RenewTime, l.Spec.LeaseDurationSeconds = &t, &t, &secs
	if create {
		_, err = e.leases.Create(ctx, l, metav1.CreateOptions{})
	} else {
		_, err = e.leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	e.mu.Lock()
	e.writes++
	e.mu.Unlock()
	if err != nil {
		return fmt.Errorf("VIP %s: write Lease %s: %w", vip, name, err)
	}
	return nil
}

// dropVIP deletes vip's Lease if it still names this node.
func (e *Elector) dropVIP(ctx context.Context, vip netip.Addr) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	name := VIPLease(vip)
	l, err := e.leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("VIP %s: read Lease %s: %w", vip, name, err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != e.cfg.Self {
		return nil
	}
	rv := l.ResourceVersion
	err = e.leases.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("VIP %s: delete Lease %s: %w", vip, name, err)
	}
	return nil
}

// Leave stops renewing and deletes this node's Lease: the others take its
// VIPs over as soon as they see it go, instead of a dead time later.
func (e *Elector) Leave() {
	e.mu.Lock()
	e.left = true
	e.members.renewed = time.Time{}
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	name := NodeLease(e.cfg.Self)
	if err := e.leases.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		e.log.Warn("layer-2 mode: could not delete this node's Lease on the way out; the other nodes take its VIPs over a dead time after its last renewal",
			"lease", e.cfg.Namespace+"/"+name, "error", err, "fix", "nothing: the Lease lapses by itself")
	}
}

// evaluate recomputes the alive set; true when it changed.
func (e *Elector) evaluate() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.evaluateLocked()
}

func (e *Elector) evaluateLocked() bool {
	now := e.now()
	return e.Set(e.log, e.members.Alive(now), now)
}

// Alive is the alive set as of now: this node first while its renewals
// hold, then the others by name.
func (e *Elector) Alive() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.synced {
		return nil
	}
	return e.members.Alive(e.now())
}

// Owner is the node among alive that answers for vip: the highest
// rendezvous score among the alive nodes that can serve it.
func (e *Elector) Owner(vip netip.Addr, alive []string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.members.Owner(vip, alive)
}

// ValidFor is how long from now this node may answer for what it owns.
func (e *Elector) ValidFor() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.synced || e.left {
		return 0
	}
	return e.members.ValidFor(e.now())
}

// Writes counts the API writes (Lease creates and updates) so far.
func (e *Elector) Writes() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.writes
}

// View reports the election as this node sees it.
func (e *Elector) View() elect.View {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	v := elect.View{Self: e.cfg.Self, Alive: e.members.Alive(now), Changed: e.Changed, SendErr: e.renewErr}
	if e.recordErr != "" {
		if v.SendErr != "" {
			v.SendErr += "; "
		}
		v.SendErr += "VIP Leases: " + e.recordErr
	}
	for _, name := range e.members.Others() {
		v.Peers = append(v.Peers, elect.Peer{Name: name, Alive: e.members.IsAlive(name, now), LastHeard: now.Sub(e.members.LastSeen(name))})
	}
	return v
}

func formatVIPs(vips []netip.Addr) string {
	s := make([]string, len(vips))
	for i, v := range vips {
		s[i] = v.String()
	}
	return strings.Join(s, ",")
}

// parseVIPs reads AnnotationVIPs; what does not parse is left out (a
// node that cannot be understood serves nothing here).
func parseVIPs(s string) []netip.Addr {
	var out []netip.Addr
	for f := range strings.SplitSeq(s, ",") {
		if a, err := netip.ParseAddr(strings.TrimSpace(f)); err == nil {
			out = append(out, a)
		}
	}
	return out
}
