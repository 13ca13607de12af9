package agent

import (
	"sync"
	"time"

	"github.com/xlbproject/xlb/internal/api"
)

// What made the agent reconcile the data plane with its configuration.
const (
	triggerConfig = "config" // the start or a reload
	triggerHealth = "health" // a backend's health changed
	triggerRetry  = "retry"  // the last apply failed
)

// reconcileBuckets are the histogram's upper bounds in seconds: from one
// table rewrite (well under a millisecond) to a cold start with a
// thousand services.
var reconcileBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// timings is a histogram of reconcile durations per trigger.
type timings struct {
	mu  sync.Mutex
	by  map[string]*api.Reconcile
	now func() time.Time
}

func newTimings() *timings {
	return &timings{by: map[string]*api.Reconcile{}, now: time.Now}
}

// observe records one reconcile of duration d.
func (t *timings) observe(trigger string, d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.by[trigger]
	if r == nil {
		r = &api.Reconcile{Buckets: make([]api.Bucket, len(reconcileBuckets))}
		for i, le := range reconcileBuckets {
			r.Buckets[i].Le = le
		}
		t.by[trigger] = r
	}
	s := d.Seconds()
	r.Count++
	r.SumSeconds += s
	r.LastSeconds = s
	r.Last = t.now()
	for i := range r.Buckets {
		if s <= r.Buckets[i].Le {
			r.Buckets[i].Count++
		}
	}
}

// snapshot copies the histograms for a status report.
func (t *timings) snapshot() map[string]api.Reconcile {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]api.Reconcile, len(t.by))
	for k, r := range t.by {
		c := *r
		c.Buckets = append([]api.Bucket(nil), r.Buckets...)
		out[k] = c
	}
	return out
}
