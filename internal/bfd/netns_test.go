package bfd

import (
	"testing"
	"time"
)

// TestNamespaces runs two Managers in two network namespaces joined by a
// veth pair: a real link, real neighbours, and a failure made by taking
// an address away.
func TestNamespaces(t *testing.T) {
	t.Parallel()
	p := newNSPair(t)
	a, b := p.manager(t, 0), p.manager(t, 1)
	addrA, addrB := p.addr[0], p.addr[1]
	// Add from this goroutine: the Managers open their sockets in their
	// own namespaces whatever thread calls.
	for _, add := range []func() error{
		func() error { return a.Add(addrB, fast) },
		func() error { return b.Add(addrA, fast) },
	} {
		if err := add(); err != nil {
			t.Fatal(err)
		}
	}
	waitEvent(t, a, addrB, StateUp, 5*time.Second)
	waitEvent(t, b, addrA, StateUp, 5*time.Second)

	// AdminDown from b: a goes Down with diag 3 at once.
	if err := b.Remove(addrA); err != nil {
		t.Fatal(err)
	}
	ev := waitEvent(t, a, addrB, StateDown, time.Second)
	if ev.Diag != DiagNeighborDown || ev.RemoteDiag != DiagAdminDown {
		t.Fatalf("a's event %+v, want diag Neighbor Signaled Session Down, remote diag Administratively Down", ev)
	}

	if err := b.Add(addrA, fast); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, a, addrB, StateUp, 5*time.Second)
	waitEvent(t, b, addrA, StateUp, 5*time.Second)
	// Let the polls for the fast timers end.
	var dt time.Duration
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline) && dt != 300*time.Millisecond; time.Sleep(20 * time.Millisecond) {
		dt = sessionOf(t, a, addrB).DetectionTime
	}
	if dt != 300*time.Millisecond {
		t.Fatalf("a's detection time %v, want 3 × 100ms", dt)
	}

	// b loses its address: its packets stop, a must notice by itself.
	start := time.Now()
	run(t, "ip", "-n", p.ns[1], "addr", "del", addrB.String()+"/24", "dev", p.ifname[1])
	ev = waitEvent(t, a, addrB, StateDown, 3*dt)
	measured := ev.Time.Sub(start)
	t.Logf("namespaces: Down detected %v after b lost its address (detection time %v)", measured, dt)
	if ev.Diag != DiagDetectionTimeExpired {
		t.Fatalf("a's event %+v, want diag Control Detection Time Expired", ev)
	}
	if st := sessionOf(t, b, addrA); st.TxErrors == 0 {
		t.Logf("b counted no send errors (the kernel may drop silently): %+v", st)
	}
}
