package bfd

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"time"
)

// received is a packet on its way from the Manager's socket to a session.
type received struct {
	p  packet
	at time.Time
}

// runner drives one session: a goroutine that owns its timer, applies
// received packets and sends. mu guards s, which status reads too.
type runner struct {
	m    *Manager
	log  *slog.Logger
	conn *net.UDPConn
	rxc  chan received
	kick chan struct{} // the configuration changed: recompute the timer
	stop chan bool     // true: tell the peer AdminDown first
	done chan struct{}

	mu sync.Mutex
	s  *session
}

func (r *runner) run() {
	defer close(r.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		r.arm(timer)
		select {
		case rp := <-r.rxc:
			r.receive(rp)
		case <-timer.C:
			r.tick()
		case <-r.kick:
		case graceful := <-r.stop:
			if graceful {
				r.adminDown(timer)
			}
			r.conn.Close()
			return
		}
	}
}

// arm sets the timer to the session's next deadline, or stops it.
func (r *runner) arm(timer *time.Timer) {
	r.mu.Lock()
	wake, ok := r.s.nextWake()
	r.mu.Unlock()
	if ok {
		timer.Reset(time.Until(wake))
	} else {
		timer.Stop()
	}
}

func (r *runner) receive(rp received) {
	r.mu.Lock()
	before := r.s.state
	reply := r.s.receive(rp.p, rp.at)
	ev, changed := r.change(before, rp.at)
	r.mu.Unlock()
	if reply != nil {
		r.send(reply)
	}
	if changed {
		r.report(ev)
	}
}

// tick runs the session's timers. Packets already queued for the session
// go first: the goroutine may wake late (a busy machine, a stalled
// process), when the timer and packets that arrived before its deadline
// are both waiting, and select takes either. Without this, a session
// could expire although its peer's packets had come in time.
func (r *runner) tick() {
	r.drain()
	r.timers()
}

// timers runs the session's due timers: detection, then transmission.
func (r *runner) timers() {
	now := time.Now()
	r.mu.Lock()
	before := r.s.state
	p := r.s.tick(now)
	ev, changed := r.change(before, now)
	r.mu.Unlock()
	if p != nil {
		r.send(p)
	}
	if changed {
		r.report(ev)
	}
}

// drain applies every packet waiting in rxc, without blocking.
func (r *runner) drain() {
	for {
		select {
		case rp := <-r.rxc:
			r.receive(rp)
		default:
			return
		}
	}
}

// change returns the event for a state change since before, if any.
// Called with mu held.
func (r *runner) change(before State, now time.Time) (Event, bool) {
	s := r.s
	if s.state == before {
		return Event{}, false
	}
	return Event{Peer: s.peer, State: s.state, Previous: before, Diag: s.diag, RemoteDiag: s.remoteDiag, Time: now}, true
}

func (r *runner) report(ev Event) {
	level := slog.LevelInfo
	if ev.Previous == StateUp {
		level = slog.LevelWarn
	}
	r.log.Log(context.Background(), level, "BFD session state changed",
		"from", ev.Previous.String(), "to", ev.State.String(), "diag", ev.Diag.String(), "remoteDiag", ev.RemoteDiag.String())
	r.m.events.push(ev)
}

func (r *runner) send(p *packet) {
	var buf [headerLen]byte
	_, err := r.conn.Write(p.encode(buf[:0]))
	r.mu.Lock()
	if err != nil {
		r.s.txErrors++
	} else {
		r.s.txPackets++
	}
	first := r.s.txErrors == 1 && err != nil
	r.mu.Unlock()
	if err != nil {
		// A peer that is unreachable (no route, address gone, ICMP
		// port unreachable) is what BFD detects on its own; say so once
		// per session at warning level, then at debug level.
		level := slog.LevelDebug
		if first {
			level = slog.LevelWarn
		}
		r.log.Log(context.Background(), level, "BFD send failed", "err", err)
	}
}

func (r *runner) setConfig(cfg Config) {
	r.mu.Lock()
	r.s.setConfig(cfg)
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// halt stops the session and waits for its goroutine to end.
func (r *runner) halt(graceful bool) {
	r.stop <- graceful
	<-r.done
}

// adminDown tells the peer AdminDown and waits, up to adminDownWait,
// for it to report Down, sending again when the TX timer says so in case
// a packet was lost.
func (r *runner) adminDown(timer *time.Timer) {
	now := time.Now()
	r.mu.Lock()
	talking := r.s.remoteDiscr != 0
	r.s.adminDown(now)
	var p *packet
	if r.s.canTransmit() {
		p = r.s.transmit(now)
	}
	r.mu.Unlock()
	if p != nil {
		r.send(p)
	}
	if !talking {
		return
	}
	deadline := time.NewTimer(adminDownWait)
	defer deadline.Stop()
	for {
		r.arm(timer)
		select {
		case rp := <-r.rxc:
			r.mu.Lock()
			r.s.receive(rp.p, rp.at)
			r.mu.Unlock()
			if rp.p.state == StateDown || rp.p.state == StateAdminDown {
				return
			}
		case <-timer.C:
			// Not tick: its drain would take the peer's answer past
			// the check above.
			r.timers()
		case <-deadline.C:
			return
		}
	}
}

func (r *runner) status() SessionStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.s
	return SessionStatus{
		Peer:          s.peer,
		Config:        s.cfg,
		State:         s.state,
		Diag:          s.diag,
		RemoteState:   s.remoteState,
		RemoteDiag:    s.remoteDiag,
		LocalDiscr:    s.localDiscr,
		RemoteDiscr:   s.remoteDiscr,
		TxInterval:    s.txInterval(),
		RxInterval:    s.rxInterval(),
		DetectionTime: s.detectionTime(),
		UpSince:       s.upSince,
		LastChange:    s.lastChange,
		TxPackets:     s.txPackets,
		RxPackets:     s.rxPackets,
		TxErrors:      s.txErrors,
		Downs:         s.downs,
	}
}
