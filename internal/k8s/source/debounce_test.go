package source

import (
	"context"
	"testing"
	"time"
)

// Bounds in these tests are generous upwards (a loaded machine delays
// timers) and strict downwards (no timer fires early).

func TestDebounceOneChange(t *testing.T) {
	d := newDebouncer(30*time.Millisecond, 200*time.Millisecond)
	seen := time.Now()
	d.changed(seen)
	b, ok := d.wait(t.Context())
	waited := time.Since(seen)
	if !ok || b.count != 1 || !b.first.Equal(seen) {
		t.Fatalf("burst %+v ok=%v, want one change seen at %v", b, ok, seen)
	}
	if waited < 30*time.Millisecond || waited > time.Second {
		t.Errorf("the burst ended %v after its change, want the quiet time, 30ms", waited)
	}
}

// A burst gathers the changes that come closer together than the quiet
// time, and the next change starts a new burst.
func TestDebounceGathersABurst(t *testing.T) {
	d := newDebouncer(100*time.Millisecond, 10*time.Second)
	first := time.Now()
	d.changed(first)
	for range 4 {
		time.Sleep(5 * time.Millisecond)
		d.changed(time.Now())
	}
	b, ok := d.wait(t.Context())
	if !ok || b.count != 5 || !b.first.Equal(first) {
		t.Fatalf("burst %+v ok=%v, want 5 changes from %v", b, ok, first)
	}
	d.changed(time.Now())
	if b, ok := d.wait(t.Context()); !ok || b.count != 1 {
		t.Errorf("next burst %+v, want one change", b)
	}
}

// Changes that never stop still end a burst at the maximum delay: the
// latency stays bounded under a rollout's stream of changes.
func TestDebounceMaxDelay(t *testing.T) {
	d := newDebouncer(50*time.Millisecond, 100*time.Millisecond)
	ctx, cancel := context.WithCancel(t.Context())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for end := time.Now().Add(2 * time.Second); time.Now().Before(end) && ctx.Err() == nil; time.Sleep(2 * time.Millisecond) {
			d.changed(time.Now())
		}
	}()
	defer func() {
		cancel()
		<-stopped
	}()
	time.Sleep(5 * time.Millisecond) // the first change is in
	b, ok := d.wait(t.Context())
	took := time.Since(b.first)
	if !ok || b.count < 2 {
		t.Fatalf("burst %+v ok=%v, want several changes", b, ok)
	}
	// Without the maximum, the burst would last the 2s of changes.
	if took > time.Second {
		t.Errorf("the burst ended %v after its first change, want about the maximum delay, 100ms", took)
	}
}

func TestDebounceContextEnds(t *testing.T) {
	d := newDebouncer(time.Hour, time.Hour)
	d.changed(time.Now())
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, ok := d.wait(ctx); ok {
		t.Error("wait returned a burst, want ok=false when the context ends")
	}
}
