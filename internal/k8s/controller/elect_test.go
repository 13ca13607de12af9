package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// Two candidates: one leads at a time; when the leader stops, it gives the
// Lease up only after its run returned, and the other takes over.
func TestRunElectedHandsOver(t *testing.T) {
	client := fake.NewClientset()
	var mu sync.Mutex
	active := map[string]bool{}
	var overlaps []string
	started := make(chan string, 4)

	type candidate struct {
		cancel context.CancelFunc
		done   chan error
	}
	start := func(id string) candidate {
		ctx, cancel := context.WithCancel(context.Background())
		c := candidate{cancel, make(chan error, 1)}
		// A Lease of 3 s: a leader that renews every 100 ms keeps it
		// through a stall of the whole test binary under a loaded CI
		// machine (with 1 s, once, b took over a live a). The handover
		// does not wait for it: a gives the Lease up when it stops.
		e := Election{Client: client, Namespace: "xlb-system", Name: "xlb-controller", Identity: id,
			LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 100 * time.Millisecond,
			Log: slog.New(slog.NewTextHandler(t.Output(), nil))}
		go func() {
			c.done <- RunElected(ctx, e, func(ctx context.Context) error {
				mu.Lock()
				for other, on := range active {
					if on {
						overlaps = append(overlaps, other+" and "+id)
					}
				}
				active[id] = true
				mu.Unlock()
				started <- id
				<-ctx.Done()
				// A last write after the end of leadership must still
				// be covered by the Lease.
				time.Sleep(200 * time.Millisecond)
				mu.Lock()
				active[id] = false
				mu.Unlock()
				return nil
			})
		}()
		return c
	}
	a := start("a")
	if got := nextLeader(t, started); got != "a" {
		t.Fatalf("%s leads, want a (it started alone)", got)
	}
	b := start("b")
	select {
	case id := <-started:
		t.Fatalf("%s leads while a holds the Lease", id)
	case <-time.After(1500 * time.Millisecond):
	}
	lease, err := client.CoordinationV1().Leases("xlb-system").Get(context.Background(), "xlb-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h == nil || *h != "a" {
		t.Errorf("lease holder %v, want a", h)
	}

	a.cancel()
	if err := <-a.done; err != nil {
		t.Errorf("a: %v", err)
	}
	if got := nextLeader(t, started); got != "b" {
		t.Fatalf("%s leads, want b", got)
	}
	b.cancel()
	if err := <-b.done; err != nil {
		t.Errorf("b: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(overlaps) > 0 {
		t.Errorf("two leaders at once: %v", overlaps)
	}
}

func nextLeader(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("nobody leads within 10 s")
		return ""
	}
}

// run's error ends leadership and comes back from RunElected.
func TestRunElectedReturnsRunError(t *testing.T) {
	boom := errors.New("boom")
	e := Election{Client: fake.NewClientset(), Namespace: "ns", Name: "l", Identity: "a",
		LeaseDuration: time.Second, RenewDeadline: 800 * time.Millisecond, RetryPeriod: 100 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := RunElected(ctx, e, func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("RunElected = %v, want boom", err)
	}
	if ctx.Err() != nil {
		t.Error("RunElected returned only when the context ended")
	}
}

func TestRunElectedChecksOptions(t *testing.T) {
	for _, e := range []Election{
		{Namespace: "ns", Name: "l", Identity: "a"},
		{Client: fake.NewClientset(), Name: "l", Identity: "a"},
		{Client: fake.NewClientset(), Namespace: "ns", Name: "l"},
		{Client: fake.NewClientset(), Namespace: "ns", Name: "l", Identity: "a", LeaseDuration: time.Second, RenewDeadline: 2 * time.Second},
	} {
		err := RunElected(context.Background(), e, func(context.Context) error { return nil })
		if err == nil {
			t.Errorf("RunElected(%s) accepted", fmt.Sprintf("%+v", e))
		}
	}
}
