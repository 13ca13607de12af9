package bfd

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"
)

var (
	addrA = netip.MustParseAddr("10.250.0.1")
	addrB = netip.MustParseAddr("10.250.0.2")
	epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
)

func half() float64 { return 0.5 }

func TestNextState(t *testing.T) {
	// RFC 5880 §6.8.6, every (local, received) pair. keep marks "no
	// change" (state and diag as they were: DiagPathDown here).
	const keep = State(255)
	for _, tc := range []struct {
		local, remote State
		want          State
		wantDiag      Diag
	}{
		{StateAdminDown, StateAdminDown, keep, 0},
		{StateAdminDown, StateDown, keep, 0},
		{StateAdminDown, StateInit, keep, 0},
		{StateAdminDown, StateUp, keep, 0},
		{StateDown, StateAdminDown, keep, 0},
		{StateDown, StateDown, StateInit, DiagPathDown},
		{StateDown, StateInit, StateUp, DiagNone},
		{StateDown, StateUp, keep, 0},
		{StateInit, StateAdminDown, StateDown, DiagNeighborDown},
		{StateInit, StateDown, keep, 0},
		{StateInit, StateInit, StateUp, DiagNone},
		{StateInit, StateUp, StateUp, DiagNone},
		{StateUp, StateAdminDown, StateDown, DiagNeighborDown},
		{StateUp, StateDown, StateDown, DiagNeighborDown},
		{StateUp, StateInit, keep, 0},
		{StateUp, StateUp, keep, 0},
	} {
		want, wantDiag := tc.want, tc.wantDiag
		if want == keep {
			want, wantDiag = tc.local, DiagPathDown
		}
		got, gotDiag := nextState(tc.local, DiagPathDown, tc.remote)
		if got != want || gotDiag != wantDiag {
			t.Errorf("%v + received %v = %v (%v), want %v (%v)", tc.local, tc.remote, got, gotDiag, want, wantDiag)
		}
	}
}

// link runs two sessions against each other in simulated time, passing
// packets through the codec and the Manager's lookup rules, with no
// delay. Dropping a direction simulates a failure.
type link struct {
	t      *testing.T
	now    time.Time
	a, b   *session
	cut    map[*session]bool // packets from this side are lost
	events []Event
}

func newLink(t *testing.T, ca, cb Config) *link {
	rng := rand.New(rand.NewPCG(1, 2))
	return &link{
		t:   t,
		now: epoch,
		a:   newSession(addrB, ca, 111, epoch, rng.Float64),
		b:   newSession(addrA, cb, 222, epoch, rng.Float64),
		cut: map[*session]bool{},
	}
}

func (l *link) other(s *session) *session {
	if s == l.a {
		return l.b
	}
	return l.a
}

func (l *link) deliver(from *session, p *packet) {
	if p == nil || l.cut[from] {
		return
	}
	to := l.other(from)
	got, err := decode(p.encode(nil))
	if err != nil {
		l.t.Fatalf("%d sent an invalid packet %+v: %v", from.localDiscr, p, err)
	}
	if got.yourDiscr != 0 && got.yourDiscr != to.localDiscr {
		return // the Manager finds no session
	}
	before := to.state
	reply := to.receive(got, l.now)
	l.record(to, before)
	l.deliver(to, reply)
}

func (l *link) record(s *session, before State) {
	if s.state != before {
		l.events = append(l.events, Event{Peer: s.peer, State: s.state, Previous: before, Diag: s.diag, Time: l.now})
	}
}

// run advances time from wake-up to wake-up until cond holds or limit
// passes, and reports whether cond held.
func (l *link) run(limit time.Duration, cond func() bool) bool {
	end := l.now.Add(limit)
	for i := 0; i < 100000; i++ {
		if cond() {
			return true
		}
		next := end
		for _, s := range []*session{l.a, l.b} {
			if w, ok := s.nextWake(); ok && w.Before(next) {
				next = w
			}
		}
		if next.After(end) || (next.Equal(end) && !l.now.Before(end)) {
			return cond()
		}
		l.now = next
		for _, s := range []*session{l.a, l.b} {
			before := s.state
			p := s.tick(l.now)
			l.record(s, before)
			l.deliver(s, p)
		}
	}
	l.t.Fatal("simulation did not settle")
	return false
}

func bothUp(l *link) func() bool {
	return func() bool { return l.a.state == StateUp && l.b.state == StateUp }
}

func TestSessionComesUpAndNegotiates(t *testing.T) {
	l := newLink(t,
		Config{MinTx: 100 * time.Millisecond, MinRx: 200 * time.Millisecond, Multiplier: 3},
		Config{MinTx: 50 * time.Millisecond, MinRx: 300 * time.Millisecond, Multiplier: 5})

	// Before Up both advertise the slow rate (§6.8.3).
	if p := l.a.control(false); p.desiredMinTx != 1e6 || p.requiredMinRx != 200e3 || p.state != StateDown {
		t.Fatalf("first packet %+v, want Down with 1 s TX, 200 ms RX", p)
	}
	if !l.run(5*time.Second, bothUp(l)) {
		t.Fatalf("not Up after 5 s: a %v, b %v", l.a.state, l.b.state)
	}
	// Each state change is sent at once: without delay on the link
	// the three-way handshake takes no time.
	if l.now != epoch {
		t.Errorf("Up after %v, want at once", l.now.Sub(epoch))
	}
	// Both sides poll their faster TX in; let the polls finish.
	if !l.run(2*time.Second, func() bool { return !l.a.polling && !l.b.polling }) {
		t.Fatal("poll sequences did not end")
	}
	for _, tc := range []struct {
		name         string
		s            *session
		tx, rx, dt   time.Duration
		advTx, advRx uint32
	}{
		// a sends at max(its 100 ms, b's 300 ms RX) and expects b's
		// packets every max(its 200 ms RX, b's 50 ms TX), detecting
		// after b's multiplier 5 of those.
		{"a", l.a, 300 * time.Millisecond, 200 * time.Millisecond, time.Second, 100e3, 200e3},
		{"b", l.b, 200 * time.Millisecond, 300 * time.Millisecond, 900 * time.Millisecond, 50e3, 300e3},
	} {
		if got := tc.s.txInterval(); got != tc.tx {
			t.Errorf("%s: TX interval %v, want %v", tc.name, got, tc.tx)
		}
		if got := tc.s.rxInterval(); got != tc.rx {
			t.Errorf("%s: RX interval %v, want %v", tc.name, got, tc.rx)
		}
		if got := tc.s.detectionTime(); got != tc.dt {
			t.Errorf("%s: detection time %v, want %v", tc.name, got, tc.dt)
		}
		if p := tc.s.control(false); p.desiredMinTx != tc.advTx || p.requiredMinRx != tc.advRx || p.poll {
			t.Errorf("%s: advertises TX %d RX %d P %v, want %d, %d, no P", tc.name, p.desiredMinTx, p.requiredMinRx, p.poll, tc.advTx, tc.advRx)
		}
	}
}

func TestDetectionTimeExpiry(t *testing.T) {
	cfg := Config{MinTx: 100 * time.Millisecond, MinRx: 100 * time.Millisecond, Multiplier: 3}
	l := newLink(t, cfg, cfg)
	if !l.run(5*time.Second, bothUp(l)) || !l.run(2*time.Second, func() bool { return !l.a.polling && !l.b.polling }) {
		t.Fatal("session did not come up")
	}
	l.events = nil
	lastFromB := l.a.lastRx
	l.cut[l.b] = true
	if !l.run(2*time.Second, func() bool { return l.a.state == StateDown }) {
		t.Fatalf("a still %v 2 s after b went silent", l.a.state)
	}
	if got, want := l.now.Sub(lastFromB), 300*time.Millisecond; got != want {
		t.Errorf("Down %v after b's last packet, want exactly the detection time %v", got, want)
	}
	if len(l.events) == 0 || l.events[0] != (Event{Peer: addrB, State: StateDown, Previous: StateUp, Diag: DiagDetectionTimeExpired, Time: l.now}) {
		t.Errorf("events %+v, want a's Up→Down with diag 1 first", l.events)
	}
	if l.a.remoteDiscr != 0 || l.a.advTx != slowTxInterval || l.a.upSince != (time.Time{}) || l.a.downs != 1 {
		t.Errorf("after expiry: remote discr %d, adv TX %v, up since %v, downs %d; want 0, 1s, zero, 1",
			l.a.remoteDiscr, l.a.advTx, l.a.upSince, l.a.downs)
	}
	// b, still hearing a (which now says Down), follows with diag 3.
	if !l.run(time.Second, func() bool { return l.b.state == StateDown }) || l.b.diag != DiagNeighborDown {
		t.Errorf("b: %v %v, want Down, Neighbor Signaled Session Down", l.b.state, l.b.diag)
	}
	// When b speaks again, the session comes back.
	l.cut[l.b] = false
	if !l.run(5*time.Second, bothUp(l)) {
		t.Fatalf("no recovery: a %v, b %v", l.a.state, l.b.state)
	}
}

func TestAdminDownReceived(t *testing.T) {
	l := newLink(t, DefaultConfig(), DefaultConfig())
	if !l.run(5*time.Second, bothUp(l)) {
		t.Fatal("session did not come up")
	}
	l.b.adminDown(l.now)
	l.deliver(l.b, l.b.transmit(l.now))
	if l.a.state != StateDown || l.a.diag != DiagNeighborDown || l.a.remoteState != StateAdminDown {
		t.Fatalf("a after AdminDown: %v, %v, remote %v; want Down, Neighbor Signaled Session Down, AdminDown", l.a.state, l.a.diag, l.a.remoteState)
	}
	// b stays AdminDown whatever it hears.
	l.run(3*time.Second, func() bool { return false })
	if l.b.state != StateAdminDown || l.a.state != StateDown {
		t.Fatalf("a %v, b %v; want Down, AdminDown", l.a.state, l.b.state)
	}
}

func TestPollSequence(t *testing.T) {
	cfg := Config{MinTx: 100 * time.Millisecond, MinRx: 100 * time.Millisecond, Multiplier: 3}
	l := newLink(t, cfg, cfg)
	if !l.run(5*time.Second, bothUp(l)) || !l.run(2*time.Second, func() bool { return !l.a.polling && !l.b.polling }) {
		t.Fatal("session did not come up")
	}

	// Slower TX and faster RX: advertised at once, in force after F.
	l.cut[l.b] = true // hold b's Final back
	l.a.setConfig(Config{MinTx: 400 * time.Millisecond, MinRx: 50 * time.Millisecond, Multiplier: 3})
	p := l.a.control(false)
	if !p.poll || p.desiredMinTx != 400e3 || p.requiredMinRx != 50e3 {
		t.Fatalf("polling packet %+v, want P with TX 400 ms, RX 50 ms", p)
	}
	if l.a.txBase != 100*time.Millisecond || l.a.detectRx != 100*time.Millisecond {
		t.Fatalf("before Final: tx base %v, detect rx %v; want the old 100 ms both", l.a.txBase, l.a.detectRx)
	}
	// A change during the poll waits for the next one.
	l.a.setConfig(Config{MinTx: 500 * time.Millisecond, MinRx: 50 * time.Millisecond, Multiplier: 3})
	if p := l.a.control(false); p.desiredMinTx != 400e3 || !l.a.repoll {
		t.Fatalf("mid-poll change advertised TX %d, repoll %v; want 400000, true", p.desiredMinTx, l.a.repoll)
	}

	// b answers the poll with F, in a packet without P.
	l.cut[l.b] = false
	before := l.b.rxPackets
	var final *packet
	for i := 0; i < 10 && final == nil; i++ {
		l.now = l.now.Add(10 * time.Millisecond)
		final = l.b.receive(l.a.transmit(l.now).copyPtr(), l.now)
	}
	if final == nil || !final.final || final.poll {
		t.Fatalf("b's answer to P: %+v, want F without P", final)
	}
	if l.b.rxPackets == before {
		t.Fatal("b received nothing")
	}
	if l.b.txInterval() != 100*time.Millisecond || l.b.remoteMinRx != 50*time.Millisecond {
		t.Errorf("b: tx interval %v, remote min rx %v; want 100ms, 50ms", l.b.txInterval(), l.b.remoteMinRx)
	}
	l.a.receive(*final, l.now)
	// The first poll ended (400 ms in force) and the second began.
	if !l.a.polling || l.a.advTx != 500*time.Millisecond || l.a.txBase != 400*time.Millisecond || l.a.detectRx != 50*time.Millisecond {
		t.Fatalf("after Final: polling %v adv %v base %v rx %v; want true 500ms 400ms 50ms", l.a.polling, l.a.advTx, l.a.txBase, l.a.detectRx)
	}
	if !l.run(3*time.Second, func() bool { return !l.a.polling }) || l.a.txInterval() != 500*time.Millisecond {
		t.Fatalf("second poll: polling %v, tx interval %v; want done, 500ms", l.a.polling, l.a.txInterval())
	}
	if l.a.state != StateUp || l.b.state != StateUp {
		t.Fatalf("session flapped: a %v, b %v", l.a.state, l.b.state)
	}
	// b's detection time follows a's new TX at once.
	if got := l.b.detectionTime(); got != 1500*time.Millisecond {
		t.Errorf("b's detection time %v, want 3 × 500ms", got)
	}
}

func (p *packet) copyPtr() packet { return *p }

func TestPassiveWaitsForPeer(t *testing.T) {
	s := newSession(addrB, Config{Passive: true}, 1, epoch, half)
	if w, ok := s.nextWake(); ok {
		t.Fatalf("passive session wants to wake at %v before hearing the peer", w)
	}
	if p := s.tick(epoch.Add(time.Hour)); p != nil {
		t.Fatalf("passive session sent %+v", p)
	}
	peer := packet{state: StateDown, detectMult: 3, myDiscr: 9, desiredMinTx: 1e6, requiredMinRx: 300e3}
	now := epoch.Add(time.Hour)
	s.receive(peer, now)
	p := s.tick(now)
	if p == nil || p.state != StateInit || p.yourDiscr != 9 {
		t.Fatalf("after hearing the peer: %+v, want Init to discriminator 9 at once", p)
	}
	// When the peer falls silent, the passive side stops again.
	s.tick(now.Add(3 * time.Second))
	if s.state != StateDown || s.canTransmit() {
		t.Fatalf("after detection time: %v, can transmit %v; want Down, false", s.state, s.canTransmit())
	}
}

func TestTransmitRules(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mult     uint8
		rand     float64
		minRx    uint32 // peer's Required Min RX, µs
		want     time.Duration
		wantNone bool
	}{
		{"no jitter", 3, 1, 1, time.Second, false},
		{"most jitter", 3, 0, 1, 750 * time.Millisecond, false},
		{"multiplier 1 caps at 90%", 1, 1, 1, 900 * time.Millisecond, false},
		{"multiplier 1 floor", 1, 0, 1, 750 * time.Millisecond, false},
		{"peer slower than us", 3, 1, 2e6, 2 * time.Second, false},
		{"peer wants nothing", 3, 1, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSession(addrB, Config{Multiplier: tc.mult}, 1, epoch, func() float64 { return tc.rand * 0.999999999 })
			s.receive(packet{state: StateDown, detectMult: 3, myDiscr: 9, desiredMinTx: 1e6, requiredMinRx: tc.minRx}, epoch)
			s.transmit(epoch)
			next, ok := s.nextTx()
			if ok == tc.wantNone {
				t.Fatalf("nextTx ok = %v, want %v", ok, !tc.wantNone)
			}
			if got := next.Sub(epoch); ok && (got > tc.want || got < tc.want-time.Millisecond) {
				t.Fatalf("next packet after %v, want %v", got, tc.want)
			}
		})
	}
}
