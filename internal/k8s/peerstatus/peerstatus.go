// Package peerstatus writes the state of this node's BGP sessions into
// the status of the BGPPeers they come from: one entry per node in
// status.nodes, applied server-side under a field manager of the node's
// own (FieldManager), so that the agents of many nodes share the list
// without overwriting each other. Data flows one way: the writer reads
// the speaker's sessions and the source's BGPPeers and writes the API
// server; nothing reads the status back. It writes only what changed,
// at most once per interval, far from the packet path; a failed write
// is logged and tried again, never fatal.
package peerstatus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	xlbapi "github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/k8s/api"
)

// DefaultInterval is how often the writer looks at the sessions, and so
// the most often it writes a BGPPeer's status.
const DefaultInterval = 2 * time.Second

// removeTimeout bounds the removal of this node's entries when the
// writer stops.
const removeTimeout = 5 * time.Second

// maxRetry bounds the wait before a failed write is tried again.
const maxRetry = time.Minute

// maxError is the longest lastError the schema takes.
const maxError = 1024

// FieldManager names the writes of node's agent.
func FieldManager(node string) string { return "xlb-agent/" + node }

// Peer is a BGPPeer this node peers with, as the source took it in.
type Peer struct {
	Name    string
	UID     types.UID
	Address netip.Addr
}

// Session is a session's state, as `xlb status` reports it.
type Session struct {
	State     string
	Since     time.Time
	LastError string
}

// Sessions turns the speaker's status (nil: no speaker) into sessions by
// peer address.
func Sessions(st *xlbapi.BGP) map[netip.Addr]Session {
	if st == nil {
		return nil
	}
	out := make(map[netip.Addr]Session, len(st.Peers))
	for _, p := range st.Peers {
		out[p.Address] = Session{State: p.State, Since: p.Since, LastError: p.LastError}
	}
	return out
}

// Options configure New.
type Options struct {
	Dynamic dynamic.Interface
	// Node is this node's name: the key of its entries.
	Node string
	// Peers returns the BGPPeers this node peers with.
	Peers func() []Peer
	// Sessions returns this node's sessions by peer address.
	Sessions func() map[netip.Addr]Session
	// Interval: DefaultInterval when zero.
	Interval time.Duration
	Logger   *slog.Logger
}

// Writer keeps this node's entries in the BGPPeers' status.
type Writer struct {
	o   Options
	log *slog.Logger
	// written is what the API server holds, by BGPPeer name, as far as
	// the writer knows; an entry of unknown content (adopted) is nil.
	written map[string]*written
	failed  map[string]*failure
}

type written struct {
	uid   types.UID
	entry *api.BGPPeerNodeStatus
}

// failure is a BGPPeer whose last write failed: tried again at next,
// each time twice as late, and logged again only when the error changes.
type failure struct {
	msg  string
	wait time.Duration
	next time.Time
}

// New prepares a writer; Run runs it.
func New(o Options) (*Writer, error) {
	if o.Dynamic == nil || o.Node == "" || o.Peers == nil || o.Sessions == nil {
		return nil, errors.New("BGPPeer status writer: a dynamic client, the node's name, Peers and Sessions are required")
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Writer{o: o, log: log.With("writer", "bgppeer-status"), written: map[string]*written{}, failed: map[string]*failure{}}, nil
}

// Run writes the sessions' states until ctx ends, then removes this
// node's entries.
func (w *Writer) Run(ctx context.Context) {
	w.adopt(ctx)
	t := time.NewTicker(w.o.Interval)
	defer t.Stop()
	for {
		w.sync(ctx, w.want())
		select {
		case <-ctx.Done():
			rm, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
			defer cancel()
			w.failed = map[string]*failure{}
			w.sync(rm, nil)
			return
		case <-t.C:
		}
	}
}

// adopt takes in the entries a previous run of this node's agent left
// (it died, or the node stopped peering while it was down), so that the
// first sync rewrites or removes them.
func (w *Writer) adopt(ctx context.Context) {
	list, err := w.o.Dynamic.Resource(api.BGPPeerResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		w.log.Warn("BGPPeers not listed: entries this node's agent left in their status before it started stay until it peers with them again", "error", err,
			"fix", "let the agent's service account list BGPPeers (deploy/10-rbac.yaml); remove a stale entry by hand with kubectl edit bgppeer NAME --subresource=status")
		return
	}
	for i := range list.Items {
		u := &list.Items[i]
		nodes, _, _ := unstructured.NestedSlice(u.Object, "status", "nodes")
		for _, n := range nodes {
			if m, ok := n.(map[string]any); ok && m["node"] == w.o.Node {
				w.written[u.GetName()] = &written{uid: u.GetUID()}
			}
		}
	}
}

// want is the entry this node's status should be in each BGPPeer it
// peers with and has a session for.
func (w *Writer) want() map[string]*written {
	sessions := w.o.Sessions()
	out := map[string]*written{}
	for _, p := range w.o.Peers() {
		s, ok := sessions[p.Address]
		if !ok {
			continue // the speaker does not run it (yet)
		}
		e := &api.BGPPeerNodeStatus{Node: w.o.Node, State: s.State, LastError: truncate(s.LastError, maxError)}
		if !s.Since.IsZero() {
			t := metav1.NewTime(s.Since.Truncate(time.Second))
			e.LastTransitionTime = &t
		}
		out[p.Name] = &written{uid: p.UID, entry: e}
	}
	return out
}

// sync applies the entries of want that differ from what is written,
// and removes the written ones want has not.
func (w *Writer) sync(ctx context.Context, want map[string]*written) {
	now := time.Now()
	for name, x := range want {
		if old := w.written[name]; old != nil && old.uid == x.uid && equal(old.entry, x.entry) {
			continue
		}
		if f := w.failed[name]; f != nil && now.Before(f.next) {
			continue
		}
		w.apply(ctx, name, x)
	}
	for name := range w.written {
		if _, ok := want[name]; ok {
			continue
		}
		if f := w.failed[name]; f != nil && now.Before(f.next) {
			continue
		}
		w.apply(ctx, name, nil)
	}
}

// apply writes x's entry into BGPPeer name's status, or removes this
// node's entry when x is nil: applied without it, the field manager
// gives it up and the API server drops it.
func (w *Writer) apply(ctx context.Context, name string, x *written) {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": api.Group + "/" + api.Version,
		"kind":       "BGPPeer",
		"metadata":   map[string]any{"name": name},
	}}
	if x != nil {
		e, err := toMap(x.entry)
		if err != nil {
			w.fail(name, err) // cannot happen: the type converts
			return
		}
		obj.Object["status"] = map[string]any{"nodes": []any{e}}
	}
	_, err := w.o.Dynamic.Resource(api.BGPPeerResource).ApplyStatus(ctx, name, obj,
		metav1.ApplyOptions{FieldManager: FieldManager(w.o.Node), Force: true})
	switch {
	case err != nil && ctx.Err() != nil:
		return // stopping: Run removes the entries next
	case apierrors.IsNotFound(err):
		// Deleted: its status went with it; the source drops it soon.
		delete(w.written, name)
	case err != nil:
		w.fail(name, err)
		return
	case x == nil:
		delete(w.written, name)
	default:
		w.written[name] = x
	}
	if f := w.failed[name]; f != nil {
		delete(w.failed, name)
		w.log.Info("BGPPeer status written again", "bgppeer", name)
	}
}

func (w *Writer) fail(name string, err error) {
	f := w.failed[name]
	if f == nil {
		f = &failure{wait: w.o.Interval}
		w.failed[name] = f
	} else {
		f.wait = min(2*f.wait, maxRetry)
	}
	f.next = time.Now().Add(f.wait)
	if msg := err.Error(); msg != f.msg {
		f.msg = msg
		w.log.Warn("BGPPeer status not written: the API shows this node's session state late or not at all (xlb status on the node has it)",
			"bgppeer", name, "node", w.o.Node, "error", err,
			"fix", "let the agent's service account patch bgppeers/status (deploy/10-rbac.yaml, the Helm chart's ClusterRole) and install this version's CRDs (deploy/crds); the writer tries again by itself, at most a minute apart")
	}
}

func equal(a, b *api.BGPPeerNodeStatus) bool {
	if a == nil || b == nil {
		return a == b
	}
	ta, tb := a.LastTransitionTime, b.LastTransitionTime
	sameTime := (ta == nil) == (tb == nil) && (ta == nil || ta.Equal(tb))
	return a.Node == b.Node && a.State == b.State && a.LastError == b.LastError && sameTime
}

func toMap(e *api.BGPPeerNodeStatus) (map[string]any, error) {
	m := map[string]any{"node": e.Node, "state": e.State}
	if e.LastTransitionTime != nil {
		b, err := e.LastTransitionTime.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("lastTransitionTime: %w", err)
		}
		// A JSON string: its quotes off.
		m["lastTransitionTime"] = string(b[1 : len(b)-1])
	}
	if e.LastError != "" {
		m["lastError"] = e.LastError
	}
	return m, nil
}

// truncate cuts s to at most n bytes, at a character boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
