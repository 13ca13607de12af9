package agent

import (
	"testing"
	"time"
)

func TestTimings(t *testing.T) {
	tm := newTimings()
	for _, d := range []time.Duration{300 * time.Microsecond, 3 * time.Millisecond, 3 * time.Millisecond, 20 * time.Second} {
		tm.observe(triggerConfig, d)
	}
	tm.observe(triggerHealth, time.Millisecond)
	snap := tm.snapshot()
	c := snap[triggerConfig]
	if c.Count != 4 || c.LastSeconds != 20 {
		t.Fatalf("config: count %d, last %v", c.Count, c.LastSeconds)
	}
	if want := 20.0063; c.SumSeconds < want-1e-9 || c.SumSeconds > want+1e-9 {
		t.Errorf("sum %v, want %v", c.SumSeconds, want)
	}
	want := map[float64]uint64{0.0005: 1, 0.001: 1, 0.0025: 1, 0.005: 3, 1: 3, 10: 3}
	for _, b := range c.Buckets {
		if n, ok := want[b.Le]; ok && b.Count != n {
			t.Errorf("bucket le=%v: %d, want %d", b.Le, b.Count, n)
		}
	}
	if h := snap[triggerHealth]; h.Count != 1 || h.Buckets[1].Count != 1 || h.Buckets[0].Count != 0 {
		t.Errorf("health: %+v", h)
	}
	// The snapshot is a copy.
	c.Buckets[0].Count = 99
	if tm.snapshot()[triggerConfig].Buckets[0].Count != 1 {
		t.Error("snapshot shares its buckets with the histogram")
	}
}
