package nodenat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/xlbproject/xlb/internal/backendhost"
)

// recorder is an Apply function that remembers every call.
type recorder struct {
	mu    sync.Mutex
	calls []applyCall
	fail  func(n int) error // n: the call's index; nil: never fails
	wake  chan struct{}
}

type applyCall struct {
	at      time.Time
	entries []backendhost.NATEntry
	state   State
	err     error
}

func newRecorder() *recorder { return &recorder{wake: make(chan struct{}, 1)} }

func (r *recorder) apply(st State) error {
	r.mu.Lock()
	var err error
	if r.fail != nil {
		err = r.fail(len(r.calls))
	}
	r.calls = append(r.calls, applyCall{at: time.Now(), entries: slices.Clone(st.NAT), state: st, err: err})
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return err
}

func (r *recorder) snapshot() []applyCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// waitFor waits until the last successful apply holds want (as strings)
// and returns that call.
func (r *recorder) waitFor(t *testing.T, want []string, timeout time.Duration) applyCall {
	t.Helper()
	deadline := time.After(timeout)
	for {
		calls := r.snapshot()
		for i := len(calls) - 1; i >= 0; i-- {
			if calls[i].err == nil {
				if slices.Equal(strs(calls[i].entries), want) {
					return calls[i]
				}
				break
			}
		}
		select {
		case <-r.wake:
		case <-deadline:
			var last []string
			if len(calls) > 0 {
				last = strs(calls[len(calls)-1].entries)
			}
			t.Fatalf("after %v: last applied %q, want %q (%d calls)", timeout, last, want, len(calls))
		}
	}
}

func strs(entries []backendhost.NATEntry) []string {
	out := []string{}
	for _, e := range entries {
		out = append(out, e.String())
	}
	return out
}

func quietLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// startWatcher runs a watcher for node A over client until the test ends.
func startWatcher(t *testing.T, client kubernetes.Interface, rec *recorder, tune func(*Watcher)) *Watcher {
	t.Helper()
	w, err := New(Options{Client: client, Node: nodeA, Apply: rec.apply, Log: quietLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	if tune != nil {
		tune(w)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10s of its context ending")
		}
	})
	return w
}

const waitTimeout = 10 * time.Second

func TestWatcherFollowsTheCluster(t *testing.T) {
	ctx := t.Context()
	httpPort := slicePorts(sport("http", 8080, corev1.ProtocolTCP))
	client := fake.NewClientset(
		service("web"),
		slice("web", "web-1", httpPort, ep{nodeA, []string{"10.244.1.2"}, condReady}, ep{nodeB, []string{"10.244.2.2"}, condReady}),
	)
	rec := newRecorder()
	w := startWatcher(t, client, rec, nil)
	rec.waitFor(t, []string{"10.99.0.1:80/tcp=10.244.1.2:8080"}, waitTimeout)

	slicesAPI := client.DiscoveryV1().EndpointSlices("default")
	svcAPI := client.CoreV1().Services("default")
	updateSlice := func(sl *discoveryv1.EndpointSlice) {
		t.Helper()
		if _, err := slicesAPI.Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		name   string
		change func()
		want   []string
	}{
		{"a second slice", func() {
			if _, err := slicesAPI.Create(ctx, slice("web", "web-2", httpPort, ep{nodeA, []string{"10.244.1.3"}, condReady}), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}, []string{"10.99.0.1:80/tcp=10.244.1.2:8080", "10.99.0.1:80/tcp=10.244.1.3:8080"}},
		{"a new pod, not ready yet: translated already", func() {
			updateSlice(slice("web", "web-1", httpPort, ep{nodeA, []string{"10.244.1.2"}, condReady}, ep{nodeA, []string{"10.244.1.4"}, condNotReady},
				ep{nodeB, []string{"10.244.2.2"}, condReady}))
		}, []string{"10.99.0.1:80/tcp=10.244.1.2:8080", "10.99.0.1:80/tcp=10.244.1.3:8080", "10.99.0.1:80/tcp=10.244.1.4:8080"}},
		{"a pod leaves the slice", func() {
			updateSlice(slice("web", "web-1", httpPort, ep{nodeA, []string{"10.244.1.2"}, condNotReady}, ep{nodeB, []string{"10.244.2.2"}, condReady}))
		}, []string{"10.99.0.1:80/tcp=10.244.1.2:8080", "10.99.0.1:80/tcp=10.244.1.3:8080"}},
		{"terminating and serving", func() {
			updateSlice(slice("web", "web-1", httpPort, ep{nodeA, []string{"10.244.1.2"}, condDraining}, ep{nodeB, []string{"10.244.2.2"}, condReady}))
		}, []string{"10.99.0.1:80/tcp=10.244.1.2:8080", "10.99.0.1:80/tcp=10.244.1.3:8080"}},
		{"a second port", func() {
			svc := service("web", withPorts(corev1.ServicePort{Name: "http", Port: 80}, corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}))
			if _, err := svcAPI.Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			updateSlice(slice("web", "web-2", slicePorts(sport("http", 8080, corev1.ProtocolTCP), sport("dns", 5353, corev1.ProtocolUDP)),
				ep{nodeA, []string{"10.244.1.3"}, condReady}))
		}, []string{"10.99.0.1:53/udp=10.244.1.3:5353", "10.99.0.1:80/tcp=10.244.1.2:8080", "10.99.0.1:80/tcp=10.244.1.3:8080"}},
		{"a new address", func() {
			svc := service("web", withIngress("10.99.0.7"))
			if _, err := svcAPI.UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}, []string{"10.99.0.7:80/tcp=10.244.1.2:8080", "10.99.0.7:80/tcp=10.244.1.3:8080"}},
		{"Service deleted", func() {
			if err := svcAPI.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}, []string{}},
	}
	for _, s := range steps {
		s.change()
		rec.waitFor(t, s.want, waitTimeout)
		st := settledStats(w, func(st Stats) bool { return st.Synced && st.Entries == len(s.want) && st.LastError == "" })
		if !st.Synced || st.Entries != len(s.want) || st.LastError != "" {
			t.Errorf("%s: stats %+v, want synced with %d entries", s.name, st, len(s.want))
		}
	}
	// Identical lists are not applied twice.
	calls := rec.snapshot()
	for i := 1; i < len(calls); i++ {
		if slices.Equal(calls[i].entries, calls[i-1].entries) {
			t.Errorf("call %d applied the same list again: %v", i, strs(calls[i].entries))
		}
	}
}

// TestWatcherFirstApply: the first apply comes after the caches synced,
// even with nothing to translate, so that a restarted DaemonSet pod
// clears what its predecessor left behind.
func TestWatcherFirstApply(t *testing.T) {
	rec := newRecorder()
	startWatcher(t, fake.NewClientset(), rec, nil)
	rec.waitFor(t, []string{}, waitTimeout)
	time.Sleep(200 * time.Millisecond)
	if n := len(rec.snapshot()); n != 1 {
		t.Errorf("%d applies without any change, want 1", n)
	}
}

// TestWatcherWakesOnRelevantChanges checks the event filter: it is what
// keeps a node from recomputing on every change in a large cluster.
func TestWatcherWakesOnRelevantChanges(t *testing.T) {
	httpPort := slicePorts(sport("http", 8080, corev1.ProtocolTCP))
	onA := slice("web", "w1", httpPort, ep{nodeA, []string{"10.244.1.2"}, condReady})
	onB := slice("web", "w2", httpPort, ep{nodeB, []string{"10.244.2.2"}, condReady})
	onB2 := slice("web", "w2", httpPort, ep{nodeB, []string{"10.244.2.3"}, condReady})
	ours := service("web")
	clusterIP := service("web", withType(corev1.ServiceTypeClusterIP))
	otherClass := service("web", withClass(ptr("example.com/lb")))
	tomb := cache.DeletedFinalStateUnknown{Key: "default/x", Obj: onB}
	// A slice of a served Service lists previous owners for daisy
	// chaining, on whatever node: it wakes the loop too.
	served := func(fn func(w *Watcher)) func(w *Watcher) {
		return func(w *Watcher) {
			w.servedSlice = func(*discoveryv1.EndpointSlice) bool { return true }
			fn(w)
		}
	}
	node := func(addrs ...string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeB}}
		for _, a := range addrs {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
		}
		return n
	}
	relabelled := node("10.0.1.11")
	relabelled.Labels = map[string]string{"x": "y"}
	tests := []struct {
		name     string
		fn       func(w *Watcher)
		wantWake bool
	}{
		{"slice of a served Service on another node added", served(func(w *Watcher) { w.sliceChanged(nil, onB) }), true},
		{"slice of a served Service on another node changed", served(func(w *Watcher) { w.sliceChanged(onB, onB2) }), true},
		{"Node address changed", func(w *Watcher) { w.nodeChanged(node("10.0.1.11"), node("10.0.1.12")) }, true},
		{"Node changed, not its addresses", func(w *Watcher) { w.nodeChanged(node("10.0.1.11"), relabelled) }, false},
		{"slice on this node added", func(w *Watcher) { w.sliceChanged(nil, onA) }, true},
		{"slice on another node added", func(w *Watcher) { w.sliceChanged(nil, onB) }, false},
		{"slice on another node changed", func(w *Watcher) { w.sliceChanged(onB, onB2) }, false},
		{"endpoint moved to this node", func(w *Watcher) { w.sliceChanged(onB, onA) }, true},
		{"endpoint moved away", func(w *Watcher) { w.sliceChanged(onA, onB) }, true},
		{"slice on this node deleted", func(w *Watcher) { w.sliceChanged(onA, nil) }, true},
		{"slice deletion missed by the watch", func(w *Watcher) { w.sliceChanged(tomb, nil) }, true},
		{"served Service changed", func(w *Watcher) { w.serviceChanged(ours, ours) }, true},
		{"Service stopped being served", func(w *Watcher) { w.serviceChanged(ours, clusterIP) }, true},
		{"Service became served", func(w *Watcher) { w.serviceChanged(otherClass, ours) }, true},
		{"ClusterIP Service", func(w *Watcher) { w.serviceChanged(nil, clusterIP) }, false},
		{"other class", func(w *Watcher) { w.serviceChanged(clusterIP, otherClass) }, false},
		{"Service deletion missed by the watch", func(w *Watcher) {
			w.serviceChanged(cache.DeletedFinalStateUnknown{Key: "default/web", Obj: clusterIP}, nil)
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, err := New(Options{Client: fake.NewClientset(), Node: nodeA, Apply: func(State) error { return nil }})
			if err != nil {
				t.Fatal(err)
			}
			tc.fn(w)
			woke := len(w.kick) == 1
			if woke != tc.wantWake {
				t.Errorf("woke %v, want %v", woke, tc.wantWake)
			}
		})
	}
}

// TestWatcherDebounces: a burst of changes is applied in a few calls,
// and the last one holds all of it.
func TestWatcherDebounces(t *testing.T) {
	const n = 30
	ctx := t.Context()
	client := fake.NewClientset(service("web"))
	rec := newRecorder()
	// The burst is split wherever two changes are further apart than the
	// quiet time. The default, 10 ms, is what a node wants, but a loaded
	// CI machine has stalled this loop for longer than that (11 applies
	// for 30 changes). A second separates bursts as well and is out of
	// reach of a scheduling stall.
	startWatcher(t, client, rec, func(w *Watcher) { w.quiet, w.maxDelay = time.Second, time.Minute })
	rec.waitFor(t, []string{}, waitTimeout)
	before := len(rec.snapshot())

	var want []string
	for i := range n {
		addr := fmt.Sprintf("10.244.1.%d", 10+i)
		sl := slice("web", fmt.Sprintf("web-%d", i), slicePorts(sport("http", 8080, corev1.ProtocolTCP)), ep{nodeA, []string{addr}, condReady})
		if _, err := client.DiscoveryV1().EndpointSlices("default").Create(ctx, sl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		want = append(want, "10.99.0.1:80/tcp="+addr+":8080")
	}
	slices.SortFunc(want, func(a, b string) int { return compareEntries(entry(t, a), entry(t, b)) })
	rec.waitFor(t, want, waitTimeout)
	// Creating 30 objects in the fake takes far less than a second, so a
	// handful of applies at most; one per change would be n.
	if applies := len(rec.snapshot()) - before; applies > n/3 {
		t.Errorf("%d changes took %d applies, want at most %d", n, applies, n/3)
	}
}

// TestWatcherRetries: a failed apply is retried with growing backoff
// until it succeeds, and the stats say what happened.
func TestWatcherRetries(t *testing.T) {
	const failures = 4
	rec := newRecorder()
	rec.fail = func(n int) error {
		if n < failures {
			return errors.New("map full")
		}
		return nil
	}
	httpPort := slicePorts(sport("http", 8080, corev1.ProtocolTCP))
	client := fake.NewClientset(service("web"), slice("web", "web-1", httpPort, ep{nodeA, []string{"10.244.1.2"}, condReady}))
	const retryMin = 20 * time.Millisecond
	w := startWatcher(t, client, rec, func(w *Watcher) { w.retryMin, w.retryMax = retryMin, 2*retryMin })

	// While it fails, the stats say so.
	deadline := time.Now().Add(waitTimeout)
	for st := w.Stats(); st.ApplyErrors == 0; st = w.Stats() {
		if time.Now().After(deadline) {
			t.Fatal("no failed apply recorded")
		}
		time.Sleep(time.Millisecond)
	}
	if st := w.Stats(); st.Synced || st.LastError != "map full" {
		t.Errorf("after a failure: stats %+v, want not synced with the error", st)
	}

	rec.waitFor(t, []string{"10.99.0.1:80/tcp=10.244.1.2:8080"}, waitTimeout)
	calls := rec.snapshot()
	if len(calls) != failures+1 {
		t.Fatalf("%d calls, want %d failures and a success", len(calls), failures)
	}
	// Backoff: retryMin, then doubled up to retryMax.
	for i, min := range []time.Duration{retryMin, 2 * retryMin, 2 * retryMin, 2 * retryMin} {
		if gap := calls[i+1].at.Sub(calls[i].at); gap < min {
			t.Errorf("retry %d came after %v, want at least %v", i+1, gap, min)
		}
	}
	if st := settledStats(w, func(st Stats) bool { return st.Applies == 1 }); !st.Synced || st.ApplyErrors != failures || st.Applies != 1 || st.LastError != "" || st.Entries != 1 {
		t.Errorf("after recovering: stats %+v", st)
	}
}

// TestWatcherNewChangeDuringBackoff: a change that alters the list is
// tried at once, not after the backoff of the list that failed.
func TestWatcherNewChangeDuringBackoff(t *testing.T) {
	rec := newRecorder()
	rec.fail = func(n int) error {
		if n == 0 {
			return errors.New("too many translations")
		}
		return nil
	}
	httpPort := slicePorts(sport("http", 8080, corev1.ProtocolTCP))
	client := fake.NewClientset(service("web"), slice("web", "web-1", httpPort, ep{nodeA, []string{"10.244.1.2"}, condReady}))
	startWatcher(t, client, rec, func(w *Watcher) { w.retryMin, w.retryMax = time.Hour, time.Hour })
	deadline := time.Now().Add(waitTimeout)
	for len(rec.snapshot()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no apply")
		}
		time.Sleep(time.Millisecond)
	}
	if err := client.DiscoveryV1().EndpointSlices("default").Delete(t.Context(), "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, []string{}, waitTimeout)
}

func TestNew(t *testing.T) {
	ok := Options{Client: fake.NewClientset(), Node: nodeA, Apply: func(State) error { return nil }}
	for _, tc := range []struct {
		name string
		edit func(*Options)
	}{
		{"no client", func(o *Options) { o.Client = nil }},
		{"no node", func(o *Options) { o.Node = "" }},
		{"no apply", func(o *Options) { o.Apply = nil }},
	} {
		o := ok
		tc.edit(&o)
		if _, err := New(o); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	if _, err := New(ok); err != nil {
		t.Errorf("valid options: %v", err)
	}
}

// settledStats returns w's stats once done says they include the apply
// the recorder saw, or after waitTimeout: the recorder sees an apply from
// inside it, and the watcher counts it only once it returns.
func settledStats(w *Watcher, done func(Stats) bool) Stats {
	st := w.Stats()
	for deadline := time.Now().Add(waitTimeout); !done(st) && time.Now().Before(deadline); st = w.Stats() {
		time.Sleep(5 * time.Millisecond)
	}
	return st
}
