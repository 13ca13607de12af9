package source

import (
	"context"
	"sync"
	"time"
)

// Default debouncing: a burst of changes (a rollout touches a Service's
// EndpointSlices many times within milliseconds) becomes one update once
// the cluster has been quiet this long, and never later than the maximum
// after the burst's first change.
const (
	DefaultQuiet    = 30 * time.Millisecond
	DefaultMaxDelay = 200 * time.Millisecond
)

// debouncer gathers change notifications into bursts. A burst ends when
// quiet has passed since its last change, or maxDelay since its first.
type debouncer struct {
	quiet, maxDelay time.Duration
	kick            chan struct{} // capacity 1: "something changed"

	mu          sync.Mutex
	first, last time.Time // of the pending burst; first is zero without one
	count       int
}

func newDebouncer(quiet, maxDelay time.Duration) *debouncer {
	return &debouncer{quiet: quiet, maxDelay: max(maxDelay, quiet), kick: make(chan struct{}, 1)}
}

// burst is a completed run of changes.
type burst struct {
	first time.Time // when its first change was seen
	count int
}

// changed records a change seen at now.
func (d *debouncer) changed(now time.Time) {
	d.mu.Lock()
	if d.first.IsZero() {
		d.first = now
	}
	d.last = now
	d.count++
	d.mu.Unlock()
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// wait blocks until a burst is complete and takes it; changes seen
// afterwards start the next one. ok is false when ctx ends first.
func (d *debouncer) wait(ctx context.Context) (b burst, ok bool) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		d.mu.Lock()
		first, last := d.first, d.last
		if !first.IsZero() {
			due := last.Add(d.quiet)
			if limit := first.Add(d.maxDelay); limit.Before(due) {
				due = limit
			}
			if wait := time.Until(due); wait <= 0 {
				b = burst{first: first, count: d.count}
				d.first, d.count = time.Time{}, 0
				d.mu.Unlock()
				return b, true
			} else if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
		}
		d.mu.Unlock()
		var fire <-chan time.Time
		if timer != nil && !first.IsZero() {
			fire = timer.C
		}
		select {
		case <-ctx.Done():
			return burst{}, false
		case <-d.kick:
		case <-fire:
		}
	}
}
