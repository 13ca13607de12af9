package nodenat

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/backendhost"
)

// TestLinger: a translation that leaves the cluster's list stays for the
// linger time, then goes; one that comes back, or whose VIP:port and pod
// get another target port, is not doubled.
func TestLinger(t *testing.T) {
	vip := netip.MustParseAddr("10.99.0.1")
	e := func(pod string, target uint16) backendhost.NATEntry {
		return backendhost.NATEntry{VIP: vip, Port: 80, Proto: 6, PodIP: netip.MustParseAddr(pod), TargetPort: target}
	}
	a, b, c := e("10.244.1.2", 8080), e("10.244.1.3", 8080), e("10.244.1.4", 8080)
	t0 := time.Unix(1_800_000_000, 0)
	l := newLingering(2*time.Minute, nil)
	steps := []struct {
		at      time.Duration
		current []backendhost.NATEntry
		want    []backendhost.NATEntry
		next    time.Duration // 0: none lingers
	}{
		{0, []backendhost.NATEntry{a, b, c}, []backendhost.NATEntry{a, b, c}, 0},
		{10 * time.Second, []backendhost.NATEntry{a, c}, []backendhost.NATEntry{a, b, c}, 130 * time.Second},  // b leaves
		{20 * time.Second, []backendhost.NATEntry{a}, []backendhost.NATEntry{a, b, c}, 130 * time.Second},     // c leaves
		{60 * time.Second, []backendhost.NATEntry{a, c}, []backendhost.NATEntry{a, b, c}, 130 * time.Second},  // c is back
		{129 * time.Second, []backendhost.NATEntry{a, c}, []backendhost.NATEntry{a, b, c}, 130 * time.Second}, // b still lingers
		{130 * time.Second, []backendhost.NATEntry{a, c}, []backendhost.NATEntry{a, c}, 0},                    // b expired
		{140 * time.Second, []backendhost.NATEntry{e("10.244.1.2", 9090), c}, []backendhost.NATEntry{e("10.244.1.2", 9090), c}, 0},
	}
	for i, s := range steps {
		got := l.merge(s.current, t0.Add(s.at))
		if !slices.Equal(got, s.want) {
			t.Errorf("step %d: %v, want %v", i, got, s.want)
		}
		next, ok := l.next()
		if ok != (s.next != 0) || (ok && !next.Equal(t0.Add(s.next))) {
			t.Errorf("step %d: next expiry %v (%v), want %v", i, next, ok, t0.Add(s.next))
		}
	}
	if got := newLingering(0, []backendhost.NATEntry{b}).merge([]backendhost.NATEntry{a}, t0); !slices.Equal(got, []backendhost.NATEntry{a}) {
		t.Errorf("without linger: %v", got)
	}
	// After a restart: what an earlier run left lingers from the start.
	r := newLingering(time.Minute, []backendhost.NATEntry{c, a, b})
	if got := r.merge([]backendhost.NATEntry{a}, t0); !slices.Equal(got, []backendhost.NATEntry{a, b, c}) {
		t.Errorf("after a restart: %v, want the earlier run's translations to linger", got)
	}
	if got := r.merge([]backendhost.NATEntry{a}, t0.Add(time.Minute)); !slices.Equal(got, []backendhost.NATEntry{a}) {
		t.Errorf("a minute after a restart: %v", got)
	}
}
