package elect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// Config is what an Elector needs: this node, the others, the timers.
type Config struct {
	Self      string
	Nodes     []Node // every node, this one included
	Port      uint16
	Heartbeat time.Duration
	DeadAfter time.Duration
}

// LeaveRepeats is how many times a leaving heartbeat is sent: one lost
// datagram must not leave a VIP unanswered for the dead time.
const LeaveRepeats = 3

// Elector sends this node's heartbeats and follows the others'. It calls
// back with the alive set whenever it changes, and at every heartbeat
// (Tick), so that the caller refreshes what it owns.
type Elector struct {
	cfg  Config
	addr netip.Addr
	conn *net.UDPConn
	log  *slog.Logger
	now  func() time.Time

	mu      sync.Mutex
	members *Members
	seq     uint64
	AliveSet
	sendErr string // the last send failure, "" when sends work
	// left: Leave was called; no plain heartbeat may follow the leaving
	// ones, or the others would count the node back in.
	left bool
}

// New binds the election's UDP port on this node's address.
func New(cfg Config, log *slog.Logger) (*Elector, error) {
	var self netip.Addr
	for _, n := range cfg.Nodes {
		if n.Name == cfg.Self {
			self = n.Address
		}
	}
	if !self.IsValid() {
		return nil, fmt.Errorf("layer-2 election: node %q is not among the nodes", cfg.Self)
	}
	if cfg.Heartbeat <= 0 || cfg.DeadAfter <= cfg.Heartbeat {
		return nil, fmt.Errorf("layer-2 election: heartbeat %s and dead time %s: the dead time must exceed the heartbeat", cfg.Heartbeat, cfg.DeadAfter)
	}
	conn, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(self, cfg.Port)))
	if err != nil {
		return nil, fmt.Errorf("layer-2 election: listen on %s port %d (l2.port): %w", self, cfg.Port, err)
	}
	now := time.Now
	e := &Elector{cfg: cfg, addr: self, conn: conn, log: log, now: now}
	e.members = NewMembers(cfg.Self, cfg.Nodes, cfg.Port, cfg.DeadAfter, now())
	e.Current, e.Changed = e.members.Alive(now()), now()
	return e, nil
}

// Run sends heartbeats and reads the others' until ctx ends, calling
// update with the alive set at every heartbeat and at once when it
// changes. It closes the socket when it returns; call Leave before ctx
// ends to hand the VIPs over at once.
func (e *Elector) Run(ctx context.Context, update func(alive []string)) {
	var wg sync.WaitGroup
	changes := make(chan struct{}, 1)
	wg.Go(func() { e.read(changes) })
	defer func() {
		e.conn.Close()
		wg.Wait()
	}()
	tick := time.NewTicker(e.cfg.Heartbeat)
	defer tick.Stop()
	e.send(false)
	update(e.Alive())
	last := e.now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			// A tick that comes a dead time late: this node was stopped
			// (SIGSTOP, starved) and has not heard the others meanwhile.
			if now := e.now(); now.Sub(last) >= e.cfg.DeadAfter {
				e.resumed(now.Sub(last))
			}
			last = e.now()
			e.send(false)
			e.evaluate()
			update(e.Alive())
		case <-changes:
			update(e.Alive())
		}
	}
}

// resumed restarts the view of the others after this node was stopped
// for gap.
func (e *Elector) resumed(gap time.Duration) {
	e.mu.Lock()
	e.members.Restart(e.now())
	e.mu.Unlock()
	e.log.Warn("layer-2 mode: this agent was stopped or starved longer than the dead time; it waits a dead time for the other nodes' heartbeats before taking any VIP over",
		"gap", gap.Round(time.Millisecond), "fix", "nothing if the agent was stopped on purpose (SIGSTOP); otherwise give it CPU time: a starved agent's node stops answering ARP")
}

// read takes the others' heartbeats until the socket closes.
func (e *Elector) read(changes chan<- struct{}) {
	buf := make([]byte, 512)
	for {
		n, from, err := e.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		e.mu.Lock()
		_, drop := e.members.Receive(from, buf[:n], e.now())
		changed := drop == "" && e.evaluateLocked()
		e.mu.Unlock()
		if drop != "" {
			e.log.Debug("layer-2 heartbeat refused", "from", from, "reason", drop)
		}
		if changed {
			select {
			case changes <- struct{}{}:
			default:
			}
		}
	}
}

// evaluate recomputes the alive set; true when it changed.
func (e *Elector) evaluate() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.evaluateLocked()
}

func (e *Elector) evaluateLocked() bool {
	now := e.now()
	return e.Set(e.log, e.members.Alive(now), now)
}

// AliveSet is an election's alive nodes (Current) and when they last
// changed (Changed), as its owner updates them under its own lock.
type AliveSet struct {
	Current []string
	Changed time.Time
}

// Set makes alive the set at now, and logs and reports whether it
// changed.
func (a *AliveSet) Set(log *slog.Logger, alive []string, now time.Time) bool {
	if slices.Equal(alive, a.Current) {
		return false
	}
	gone, came := diff(a.Current, alive)
	a.Current, a.Changed = alive, now
	log.Info("layer-2 nodes changed", "alive", alive, "gone", gone, "came", came)
	return true
}

// diff lists the names of a missing from b, and of b missing from a.
func diff(a, b []string) (gone, came []string) {
	for _, n := range a {
		if !slices.Contains(b, n) {
			gone = append(gone, n)
		}
	}
	for _, n := range b {
		if !slices.Contains(a, n) {
			came = append(came, n)
		}
	}
	return gone, came
}

// send sends one heartbeat to every other node.
func (e *Elector) send(leaving bool) {
	e.mu.Lock()
	if e.left && !leaving {
		e.mu.Unlock()
		return
	}
	e.left = e.left || leaving
	e.seq++
	msg := Heartbeat{Name: e.cfg.Self, Leaving: leaving, Seq: e.seq}.Marshal()
	others := e.members.Others()
	e.mu.Unlock()
	var failed []string
	var last error
	for _, n := range others {
		if _, err := e.conn.WriteToUDPAddrPort(msg, netip.AddrPortFrom(n.Address, e.cfg.Port)); err != nil {
			failed, last = append(failed, n.Name), err
		}
	}
	e.mu.Lock()
	prev := e.sendErr
	e.sendErr = ""
	if last != nil {
		e.sendErr = fmt.Sprintf("to %v: %v", failed, last)
	}
	now := e.sendErr
	e.mu.Unlock()
	if now != "" && prev == "" {
		e.log.Warn("layer-2 heartbeats cannot be sent", "error", now,
			"fix", "check the route from node.address to the other l2.nodes addresses; until they hear from this node, they take its VIPs over")
	}
}

// Leave tells every other node, LeaveRepeats times, that this one is
// leaving: they take its VIPs over at once.
func (e *Elector) Leave() {
	for range LeaveRepeats {
		e.send(true)
	}
}

// Alive is the alive set: this node first, then the others as listed.
func (e *Elector) Alive() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.Current)
}

// Peer is another node as this one sees it.
type Peer struct {
	Name    string
	Address netip.Addr
	Alive   bool
	// LastHeard is the time since its last heartbeat, or since this
	// node started when none came yet.
	LastHeard time.Duration
}

// View is this node's view of the election.
type View struct {
	Self    string
	Alive   []string
	Changed time.Time // when the alive set last changed
	Peers   []Peer
	Dropped map[string]uint64
	SendErr string
}

// View reports the election as this node sees it.
func (e *Elector) View() View {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	v := View{Self: e.cfg.Self, Alive: slices.Clone(e.Current), Changed: e.Changed, Dropped: e.members.Dropped(), SendErr: e.sendErr}
	for _, n := range e.members.Others() {
		p := Peer{Name: n.Name, Address: n.Address, Alive: e.members.IsAlive(n.Name, now), LastHeard: now.Sub(e.members.LastHeard(n.Name))}
		v.Peers = append(v.Peers, p)
	}
	return v
}
