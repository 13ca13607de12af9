package bfd

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var fast = Config{MinTx: 100 * time.Millisecond, MinRx: 100 * time.Millisecond, Multiplier: 3}

// TestManagersOverLoopback runs two Managers against each other on
// 127/8: needs no privileges, and exercises sockets, GTSM (loopback
// keeps TTL 255), the goroutines and the API.
func TestManagersOverLoopback(t *testing.T) {
	addrA, addrB := loopbackPair()
	a, b := newManager(t, addrA, "a"), newManager(t, addrB, "b")
	if err := a.Add(addrB, fast); err != nil {
		t.Fatal(err)
	}
	if err := b.Add(addrA, fast); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitEvent(t, a, addrB, StateUp, 5*time.Second)
	waitEvent(t, b, addrA, StateUp, 5*time.Second)
	t.Logf("both Up in %v", time.Since(start))

	// The polls that bring in the fast timers end quickly.
	var st SessionStatus
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if st = sessionOf(t, a, addrB); st.TxInterval == 100*time.Millisecond && st.DetectionTime == 300*time.Millisecond {
			break
		}
	}
	if st.State != StateUp || st.RemoteState != StateUp || st.TxInterval != 100*time.Millisecond ||
		st.RxInterval != 100*time.Millisecond || st.DetectionTime != 300*time.Millisecond ||
		st.UpSince.IsZero() || st.RemoteDiscr == 0 || st.TxPackets == 0 || st.RxPackets == 0 || st.Config != fast {
		t.Fatalf("a's session: %+v", st)
	}

	// A new configuration goes through a Poll sequence without a flap.
	slower := Config{MinTx: 200 * time.Millisecond, MinRx: 100 * time.Millisecond, Multiplier: 4}
	if err := a.Add(addrB, slower); err != nil {
		t.Fatal(err)
	}
	// b takes the new detection time from a's Poll; a slows its own
	// transmissions only once b's Final arrives (RFC 5880 6.8.3), a
	// moment later: wait for both.
	var aTx time.Duration
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		st, aTx = sessionOf(t, b, addrA), sessionOf(t, a, addrB).TxInterval
		if st.DetectionTime == 800*time.Millisecond && aTx == 200*time.Millisecond {
			break
		}
	}
	if st.RxInterval != 200*time.Millisecond || st.DetectionTime != 800*time.Millisecond || st.State != StateUp {
		t.Fatalf("b after a's change: rx %v, detection %v, %v; want 200ms, 800ms, Up", st.RxInterval, st.DetectionTime, st.State)
	}
	if aTx != 200*time.Millisecond {
		t.Fatalf("a's TX interval %v, want 200ms after the poll", aTx)
	}

	// Remove says AdminDown: b goes Down with diag 3 at once.
	start = time.Now()
	if err := a.Remove(addrB); err != nil {
		t.Fatal(err)
	}
	ev := waitEvent(t, b, addrA, StateDown, time.Second)
	t.Logf("Remove took %v, b Down after %v", time.Since(start), ev.Time.Sub(start))
	if ev.Diag != DiagNeighborDown || ev.RemoteDiag != DiagAdminDown || ev.Previous != StateUp {
		t.Fatalf("b's event %+v, want Up→Down, diag Neighbor Signaled Session Down, remote diag AdminDown", ev)
	}
	if err := a.Remove(addrB); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("second Remove: %v, want ErrUnknownPeer", err)
	}
	if n := len(a.Sessions()); n != 0 {
		t.Fatalf("a still lists %d sessions", n)
	}

	// Back up, then a crashes (no AdminDown): b detects it.
	if err := a.Add(addrB, fast); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, b, addrA, StateUp, 5*time.Second)
	waitEvent(t, a, addrB, StateUp, 5*time.Second)
	time.Sleep(500 * time.Millisecond) // let the polls end
	dt := sessionOf(t, b, addrA).DetectionTime
	start = time.Now()
	if err := a.shutdown(false); err != nil {
		t.Fatal(err)
	}
	ev = waitEvent(t, b, addrA, StateDown, 3*dt)
	t.Logf("b detected a's crash after %v (detection time %v)", ev.Time.Sub(start), dt)
	if ev.Diag != DiagDetectionTimeExpired {
		t.Fatalf("b's event %+v, want diag Control Detection Time Expired", ev)
	}
	if _, ok := <-a.Events(); ok {
		t.Fatal("a's events still open after shutdown")
	}
	if err := a.Add(addrB, fast); !errors.Is(err, ErrClosed) {
		t.Fatalf("Add after Close: %v, want ErrClosed", err)
	}

	// Close is graceful: b's session to a, now Down, tells a nothing
	// useful, but Close must still end and close the channel.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// rawPeer sends hand-made packets to a Manager from a chosen address and
// TTL, to check what the Manager accepts.
type rawPeer struct {
	t    *testing.T
	conn *net.UDPConn
	to   netip.AddrPort
}

func newRawPeer(t *testing.T, from, to netip.Addr) *rawPeer {
	conn, err := net.ListenUDP(udpNetwork(from), net.UDPAddrFromAddrPort(netip.AddrPortFrom(from, 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rawPeer{t: t, conn: conn, to: netip.AddrPortFrom(to, Port)}
}

func (r *rawPeer) send(b []byte, ttl int) {
	r.t.Helper()
	rc, err := r.conn.SyscallConn()
	if err != nil {
		r.t.Fatal(err)
	}
	level, opt := syscall.IPPROTO_IP, unix.IP_TTL
	if r.to.Addr().Is6() {
		level, opt = syscall.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS
	}
	if err := setsockopt(rc, level, opt, ttl); err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.conn.WriteToUDPAddrPort(b, r.to); err != nil {
		r.t.Fatal(err)
	}
}

// waitCount waits until f() reaches want.
func waitCount(t *testing.T, what string, f func() uint64, want uint64) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if f() >= want {
			return
		}
	}
	t.Fatalf("%s: %d, want %d", what, f(), want)
}

func TestManagerReceptionChecks(t *testing.T) {
	local, peer := loopbackPair()
	stranger := peer.Next()
	m := newManager(t, local, "m")
	// Passive, so that it sends nothing to the raw peer until spoken to.
	if err := m.Add(peer, Config{Passive: true}); err != nil {
		t.Fatal(err)
	}
	p, s := newRawPeer(t, peer, local), newRawPeer(t, stranger, local)
	down := packet{state: StateDown, detectMult: 3, myDiscr: 77, desiredMinTx: 1e6, requiredMinRx: 1e6}

	p.send(down.encode(nil), 64)
	waitCount(t, "TTL drops", func() uint64 { return m.dropped(dropTTL) }, 1)
	p.send([]byte("not BFD at all, but long enough.."), 255)
	waitCount(t, "malformed drops", func() uint64 { return m.dropped(dropMalformed) }, 1)
	s.send(down.encode(nil), 255) // no session for the stranger
	waitCount(t, "no-session drops", func() uint64 { return m.dropped(dropNoSession) }, 1)
	st := sessionOf(t, m, peer)
	if st.RxPackets != 0 || st.TxPackets != 0 || st.State != StateDown {
		t.Fatalf("after invalid packets: %+v, want nothing received or sent", st)
	}

	p.send(down.encode(nil), 255)
	ev := waitEvent(t, m, peer, StateInit, 2*time.Second)
	if ev.Previous != StateDown {
		t.Fatalf("event %+v, want Down→Init", ev)
	}
	st = sessionOf(t, m, peer)
	if st.RemoteDiscr != 77 || st.RxPackets != 1 {
		t.Fatalf("after a valid packet: %+v", st)
	}
	waitCount(t, "packets sent after hearing the peer", func() uint64 { return sessionOf(t, m, peer).TxPackets }, 1)

	// Our discriminator from the wrong source, and an unknown one.
	wrong := packet{state: StateInit, detectMult: 3, myDiscr: 78, yourDiscr: st.LocalDiscr, desiredMinTx: 1e6, requiredMinRx: 1e6}
	s.send(wrong.encode(nil), 255)
	waitCount(t, "wrong-source drops", func() uint64 { return m.dropped(dropWrongSource) }, 1)
	wrong.yourDiscr = st.LocalDiscr + 1
	p.send(wrong.encode(nil), 255)
	waitCount(t, "no-session drops", func() uint64 { return m.dropped(dropNoSession) }, 2)

	// The right one brings the session Up.
	wrong.yourDiscr = st.LocalDiscr
	p.send(wrong.encode(nil), 255)
	waitEvent(t, m, peer, StateUp, 2*time.Second)
}

func TestManagerRejectsBadInput(t *testing.T) {
	for _, a := range []netip.Addr{netip.IPv6Unspecified(), netip.MustParseAddr("ff02::1"), netip.MustParseAddr("fe80::1")} {
		if m, err := NewManager(a, nil); err == nil {
			m.Close()
			t.Errorf("NewManager accepted %s", a)
		}
	}
	local, peer := loopbackPair()
	m := newManager(t, local, "m")
	for _, tc := range []struct {
		peer netip.Addr
		cfg  Config
	}{
		{local, Config{}},
		{netip.MustParseAddr("224.0.0.5"), Config{}},
		{netip.IPv4Unspecified(), Config{}},
		{peer, Config{MinTx: time.Millisecond}},
	} {
		if err := m.Add(tc.peer, tc.cfg); err == nil {
			t.Errorf("Add(%v, %+v) succeeded", tc.peer, tc.cfg)
		}
	}
	if n := len(m.Sessions()); n != 0 {
		t.Fatalf("%d sessions after rejected Adds", n)
	}
	if _, err := NewManager(local, nil); err == nil {
		t.Fatal("a second Manager bound the same address")
	}
}
