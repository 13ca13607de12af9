package bfd

import (
	"net/netip"
	"time"
)

// slowTxInterval is the floor of bfd.DesiredMinTxInterval while a session
// is not Up (RFC 5880 §6.8.3).
const slowTxInterval = time.Second

// session is the protocol state of one BFD session (RFC 5880 §6.8):
// the state machine, timer negotiation and the Poll sequence. It does no
// I/O and reads no clock: callers pass the time in and send the packets
// it returns, which keeps it deterministic under test. It is not safe for
// concurrent use.
type session struct {
	peer       netip.Addr
	cfg        Config // with defaults applied
	localDiscr uint32
	rand       func() float64 // uniform in [0, 1), for jitter

	state State
	diag  Diag

	// What the last accepted packet said (bfd.Remote*).
	remoteDiscr  uint32
	remoteState  State
	remoteDiag   Diag
	remoteMinRx  time.Duration // bfd.RemoteMinRxInterval
	remoteTx     time.Duration // its Desired Min TX Interval
	remoteMult   uint8
	remoteDemand bool

	// advTx and advRx are what our packets advertise
	// (bfd.DesiredMinTxInterval and bfd.RequiredMinRxInterval). txBase
	// and detectRx are the values in force locally: while a Poll
	// sequence runs they may still hold the previous ones (§6.8.3).
	advTx, advRx     time.Duration
	txBase, detectRx time.Duration
	polling          bool // our packets carry P until a packet with F arrives
	repoll           bool // the timers changed again during the poll

	created  time.Time
	lastTx   time.Time // zero until the first packet
	txFactor float64   // jitter of the interval that follows lastTx
	txNow    bool      // the state changed: tell the peer without waiting
	lastRx   time.Time

	upSince    time.Time
	lastChange time.Time

	txPackets, rxPackets, txErrors, ups, downs uint64
}

func newSession(peer netip.Addr, cfg Config, discr uint32, now time.Time, rnd func() float64) *session {
	s := &session{
		peer:        peer,
		cfg:         cfg.WithDefaults(),
		localDiscr:  discr,
		rand:        rnd,
		state:       StateDown,
		remoteState: StateDown,
		remoteMinRx: time.Microsecond, // initial value required by §6.8.1
		created:     now,
		lastChange:  now,
	}
	s.updateTimers()
	return s
}

// txInterval is the negotiated transmit interval before jitter (§6.8.7),
// or 0 when the peer wants no packets at all.
func (s *session) txInterval() time.Duration {
	if s.remoteMinRx == 0 {
		return 0
	}
	return max(s.txBase, s.remoteMinRx)
}

// rxInterval is the interval at which the peer should be sending to us.
func (s *session) rxInterval() time.Duration {
	if s.remoteTx == 0 {
		return 0
	}
	return max(s.detectRx, s.remoteTx)
}

// detectionTime is how long the session survives without a packet in
// asynchronous mode (§6.8.4): the peer's multiplier times the interval
// it sends at.
func (s *session) detectionTime() time.Duration {
	return time.Duration(s.remoteMult) * s.rxInterval()
}

func (s *session) canTransmit() bool {
	if s.cfg.Passive && s.remoteDiscr == 0 {
		return false // §6.8.7: a passive system waits for the peer
	}
	return s.remoteMinRx != 0
}

func (s *session) nextTx() (time.Time, bool) {
	if !s.canTransmit() {
		return time.Time{}, false
	}
	if s.lastTx.IsZero() {
		return s.created, true
	}
	if s.txNow {
		return s.lastChange, true
	}
	return s.lastTx.Add(time.Duration(float64(s.txInterval()) * s.txFactor)), true
}

func (s *session) detectDeadline() (time.Time, bool) {
	if s.remoteDiscr == 0 {
		return time.Time{}, false
	}
	return s.lastRx.Add(s.detectionTime()), true
}

// nextWake is when tick has something to do next.
func (s *session) nextWake() (time.Time, bool) {
	tx, txOK := s.nextTx()
	dd, ddOK := s.detectDeadline()
	switch {
	case txOK && ddOK:
		if dd.Before(tx) {
			return dd, true
		}
		return tx, true
	case txOK:
		return tx, true
	case ddOK:
		return dd, true
	}
	return time.Time{}, false
}

// jitter draws the factor of the next interval: 75–100 %, or 75–90 %
// with a multiplier of 1 so that one late packet cannot expire the peer's
// detection time (§6.8.7).
func (s *session) jitter() float64 {
	if s.cfg.Multiplier == 1 {
		return 0.75 + 0.15*s.rand()
	}
	return 0.75 + 0.25*s.rand()
}

// tick runs the timers due at now: detection expiry first, then the
// periodic transmission, whose packet it returns.
func (s *session) tick(now time.Time) *packet {
	if dd, ok := s.detectDeadline(); ok && !now.Before(dd) {
		s.detectionExpired(now)
	}
	if tx, ok := s.nextTx(); ok && !now.Before(tx) {
		return s.transmit(now)
	}
	return nil
}

// transmit builds the next periodic packet and restarts the TX timer.
func (s *session) transmit(now time.Time) *packet {
	p := s.control(false)
	s.lastTx = now
	s.txFactor = s.jitter()
	s.txNow = false
	return &p
}

func (s *session) detectionExpired(now time.Time) {
	if s.state == StateInit || s.state == StateUp {
		s.setState(StateDown, DiagDetectionTimeExpired, now)
	}
	// §6.8.1: the peer is forgotten; what it told us no longer holds.
	s.remoteDiscr = 0
	s.remoteState = StateDown
	s.remoteMinRx = time.Microsecond
	s.remoteTx = 0
	s.remoteMult = 0
	s.remoteDemand = false
}

// receive applies a packet that passed decode and the session lookup
// (the rest of RFC 5880 §6.8.6) and returns the Final packet to send at
// once when the peer polled.
func (s *session) receive(p packet, now time.Time) *packet {
	s.rxPackets++
	s.remoteDiscr = p.myDiscr
	s.remoteState = p.state
	s.remoteDiag = p.diag
	s.remoteDemand = p.demand
	s.remoteMinRx = time.Duration(p.requiredMinRx) * time.Microsecond
	s.remoteTx = time.Duration(p.desiredMinTx) * time.Microsecond
	s.remoteMult = p.detectMult
	if p.final && s.polling {
		s.pollDone()
	}
	if s.state == StateAdminDown {
		return nil
	}
	s.lastRx = now
	if st, diag := nextState(s.state, s.diag, p.state); st != s.state {
		s.setState(st, diag, now)
	}
	// We never ask for Demand mode, and we keep sending periodically
	// even if the peer asks for it (its D bit): it costs the peer
	// nothing but a few packets, and our detection relies on its
	// packets alone.
	if p.poll {
		f := s.control(true)
		return &f
	}
	return nil
}

// nextState is the state machine of RFC 5880 §6.8.6: the state and
// diagnostic after receiving a packet in state remote while in state
// local with diagnostic diag.
func nextState(local State, diag Diag, remote State) (State, Diag) {
	if local == StateAdminDown {
		return local, diag
	}
	if remote == StateAdminDown {
		if local != StateDown {
			return StateDown, DiagNeighborDown
		}
		return local, diag
	}
	switch local {
	case StateDown:
		switch remote {
		case StateDown:
			return StateInit, diag
		case StateInit:
			return StateUp, DiagNone
		}
	case StateInit:
		if remote == StateInit || remote == StateUp {
			return StateUp, DiagNone
		}
	case StateUp:
		if remote == StateDown {
			return StateDown, DiagNeighborDown
		}
	}
	return local, diag
}

func (s *session) setState(st State, diag Diag, now time.Time) {
	old := s.state
	s.state, s.diag = st, diag
	s.lastChange = now
	// Like FRR and BIRD, send the new state at once rather than up to
	// an interval later: the session comes up in a round trip instead
	// of seconds, and a peer still Up hears our Down before its own
	// detection time runs out. At most one extra packet per change,
	// and every change but the first needs a packet or a timeout.
	s.txNow = true
	switch {
	case st == StateUp:
		s.upSince = now
		s.ups++
	case old == StateUp:
		s.upSince = time.Time{}
		s.downs++
	}
	s.updateTimers()
}

// setConfig changes the timers of a running session; while it is Up the
// change goes through a Poll sequence.
func (s *session) setConfig(cfg Config) {
	s.cfg = cfg.WithDefaults()
	s.updateTimers()
}

// updateTimers brings the advertised intervals in line with the
// configuration and the state (RFC 5880 §6.8.3).
func (s *session) updateTimers() {
	wantTx, wantRx := s.cfg.MinTx, s.cfg.MinRx
	if s.state != StateUp {
		wantTx = max(wantTx, slowTxInterval)
	}
	if wantTx == s.advTx && wantRx == s.advRx {
		return
	}
	if s.state != StateUp {
		// Nothing depends on the timers yet: no poll needed.
		s.advTx, s.advRx = wantTx, wantRx
		s.txBase, s.detectRx = wantTx, wantRx
		s.polling, s.repoll = false, false
		return
	}
	if s.polling {
		// One poll at a time: the new values follow when it ends.
		s.repoll = true
		return
	}
	// Sending faster and waiting longer are safe at once; sending
	// slower and waiting less must wait until the peer has seen the
	// new values, i.e. for its Final.
	s.txBase = min(s.txBase, wantTx)
	s.detectRx = max(s.detectRx, wantRx)
	s.advTx, s.advRx = wantTx, wantRx
	s.polling = true
}

func (s *session) pollDone() {
	s.polling = false
	s.txBase, s.detectRx = s.advTx, s.advRx
	if s.repoll {
		s.repoll = false
		s.updateTimers()
	}
}

// adminDown takes the session to AdminDown (§6.8.16): the peer is told,
// and no packet changes our state any more.
func (s *session) adminDown(now time.Time) {
	if s.state != StateAdminDown {
		s.setState(StateAdminDown, DiagAdminDown, now)
	}
}

// control builds a packet from the current state: a periodic one, or
// the answer to a Poll when final is set (never both P and F, §4.1).
func (s *session) control(final bool) packet {
	return packet{
		diag:          s.diag,
		state:         s.state,
		poll:          s.polling && !final,
		final:         final,
		detectMult:    s.cfg.Multiplier,
		myDiscr:       s.localDiscr,
		yourDiscr:     s.remoteDiscr,
		desiredMinTx:  uint32(s.advTx / time.Microsecond),
		requiredMinRx: uint32(s.advRx / time.Microsecond),
		// requiredEcho 0: we do not take Echo packets.
	}
}
