package bfd

import (
	"net"
	"testing"
	"time"
)

// TestRunnerLateWakeup: a runner that wakes late (its process was not
// scheduled) finds its detection timer expired and a packet that came
// in before the deadline waiting in its queue. The packet counts: the
// session stays Up, as it would have had the goroutine run on time.
func TestRunnerLateWakeup(t *testing.T) {
	now := time.Now()
	cfg := Config{MinTx: 100 * time.Millisecond, MinRx: 100 * time.Millisecond, Multiplier: 3}
	s := newSession(addrB, cfg, 1, now.Add(-2*time.Second), half)
	peer := packet{state: StateInit, myDiscr: 9, yourDiscr: 1, detectMult: 3,
		desiredMinTx: 100_000, requiredMinRx: 100_000}
	// Up 400 ms ago: the detection time (3 x 100 ms) ran out 100 ms ago.
	s.receive(peer, now.Add(-400*time.Millisecond))
	if s.state != StateUp {
		t.Fatalf("session %v after the peer's Init, want Up", s.state)
	}
	if dd, ok := s.detectDeadline(); !ok || !dd.Before(now) {
		t.Fatalf("detection deadline %v, %v: want one in the past", dd, ok)
	}

	r := testRunner(t, s)
	// The peer's next packet arrived 250 ms ago, before the deadline.
	peer.state = StateUp
	r.rxc <- received{p: peer, at: now.Add(-250 * time.Millisecond)}

	r.tick()
	if st := r.status(); st.State != StateUp || st.Downs != 0 || st.RxPackets != 2 {
		t.Errorf("after a late wakeup: state %v, downs %d, %d packets received; want Up, no down, 2 packets", st.State, st.Downs, st.RxPackets)
	}
	if len(r.rxc) != 0 {
		t.Errorf("%d packets still queued", len(r.rxc))
	}
}

// TestRunnerAdminDownAnswered: a session told to go AdminDown returns as
// soon as the peer's Down is there, also when its timer is due at the
// same time (select may take either first).
func TestRunnerAdminDownAnswered(t *testing.T) {
	cfg := Config{MinTx: 100 * time.Millisecond, MinRx: 100 * time.Millisecond, Multiplier: 3}
	for i := range 20 {
		now := time.Now()
		s := newSession(addrB, cfg, 1, now.Add(-time.Second), half)
		peer := packet{state: StateInit, myDiscr: 9, yourDiscr: 1, detectMult: 3, desiredMinTx: 100_000, requiredMinRx: 100_000}
		// Up, and silent for longer than the detection time: the
		// timer is due at once.
		s.receive(peer, now.Add(-time.Second))
		r := testRunner(t, s)
		peer.state = StateDown
		r.rxc <- received{p: peer, at: now}
		timer := time.NewTimer(time.Hour)
		start := time.Now()
		r.adminDown(timer)
		timer.Stop()
		if d := time.Since(start); d > adminDownWait/2 {
			t.Fatalf("round %d: AdminDown returned after %v with the peer's Down queued, want at once", i, d)
		}
	}
}

// testRunner returns a runner for s without its goroutine, sending to
// the discard port on loopback and reporting to an event queue nobody
// reads; the test ends both.
func testRunner(t *testing.T, s *session) *runner {
	t.Helper()
	conn, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	q := newEventQueue(testLogger(t, "a"))
	t.Cleanup(q.close)
	return &runner{m: &Manager{events: q}, log: testLogger(t, "a"), conn: conn, rxc: make(chan received, rxQueue), s: s}
}
