package bgp

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	gobgp "github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"
)

// Session states as PeerStatus reports them (RFC 4271 names).
const (
	StateIdle        = "idle"
	StateConnect     = "connect"
	StateActive      = "active"
	StateOpenSent    = "opensent"
	StateOpenConfirm = "openconfirm"
	StateEstablished = "established"
)

// PeerStatus is one peer's session as Peers reports it.
type PeerStatus struct {
	Address netip.Addr
	ASN     uint32
	// State is one of the State* constants. A session xlb initiates
	// stays "active" while the speaker connects (connect.go), so
	// "connect" does not show for it.
	State string
	// Since is when the session entered State (zero before Start).
	Since time.Time
	// Uptime is how long the session has been established; 0 otherwise.
	Uptime time.Duration
	// Counters are the session's counters as GoBGP last reported them;
	// nil when it has not reported them since the session last changed
	// state (it was busy, or the speaker is stopped).
	Counters *Counters
	// MaxPrefixes is the peer's prefix limit (Peer.MaxPrefixes).
	MaxPrefixes int
	// PrefixLimit is set while the session is held down because the
	// peer sent more than MaxPrefixes prefixes.
	PrefixLimit *PrefixLimitHold
	// LastError says in words why the session last failed or went
	// down; it stays after the session recovers, with LastErrorAt.
	LastError   string
	LastErrorAt time.Time
	// Flaps counts how often the session left Established.
	Flaps int
	// ForcedDown is PeerDown's reason while the session is held down.
	ForcedDown string
	// RestartTime is the graceful restart time this speaker advertises
	// to the peer (Peer.RestartTime); 0 without graceful restart.
	RestartTime time.Duration
}

// Counters are a session's counters, read from GoBGP.
type Counters struct {
	// At is when GoBGP reported them.
	At time.Time
	// PrefixesSent and PrefixesReceived count the unicast routes (both
	// families)
	// advertised to the peer and those it sent that GoBGP holds (its
	// Adj-RIB-In, which MaxPrefixes bounds; none of them is imported).
	PrefixesSent, PrefixesReceived int
	// MessagesSent and MessagesReceived count BGP messages of every
	// kind, UpdatesSent and UpdatesReceived the UPDATEs among them.
	MessagesSent, MessagesReceived uint64
	UpdatesSent, UpdatesReceived   uint64
	// PeerRestarts says whether the peer advertised the graceful
	// restart capability in its OPEN (peerRestarts): then it keeps this
	// node's routes, stale, while the agent restarts, if this speaker
	// advertises it too. False before the session is established.
	PeerRestarts bool
}

// PrefixLimitHold says why and until when a session is held down after
// its peer went over its prefix limit.
type PrefixLimitHold struct {
	// Limit is the MaxPrefixes the peer went over.
	Limit int
	// At is when the speaker closed the session.
	At time.Time
	// Times counts how often this happened in a row (sessions that
	// ended so within prefixLimitRetryMax of re-forming).
	Times int
	// RetryAt is when the speaker lets the session re-form.
	RetryAt time.Time
}

// peerRecord is what the speaker knows about a peer beyond GoBGP's view.
type peerRecord struct {
	cfg         Peer
	state       string
	since       time.Time
	established time.Time
	lastError   string
	lastErrorAt time.Time
	flaps       int
	forcedDown  string
	// checking: an admin-state check (see checkAdminState) runs.
	checking bool
	// notifRecv is the NOTIFICATION the peer last sent, while GoBGP's
	// state event that follows has not consumed it yet.
	notifRecv string
	// probeWanted is set when the peer rejected our OPEN in a way GoBGP
	// does not report (see probeOpen); nextProbe rate-limits probes.
	probeWanted bool
	nextProbe   time.Time
	// rejection is the NOTIFICATION the peer last answered our OPEN
	// with, in words, as the relay or a probe saw it. GoBGP's later
	// events for the same failure say less, so it stands in for them
	// until the session comes up or something else is found.
	rejection string
	// standIn is the loopback address GoBGP knows the peer by when the
	// speaker relays its sessions (see connect.go); gobgpAddr is the
	// address GoBGP has it configured under (standIn or cfg.Address),
	// invalid while GoBGP does not have it.
	standIn   netip.Addr
	gobgpAddr netip.Addr
	// conn dials the peer for GoBGP when it is relayed; nil otherwise.
	conn *connector
	// pfx is set while the session is held down for its prefix limit;
	// pfxTimer ends the hold. pfxTimes counts the holds in a row, also
	// after the last one ended.
	pfx      *PrefixLimitHold
	pfxTimer *time.Timer
	pfxTimes int
	// counters are GoBGP's, as last read; nil when none were read since
	// the session last changed state.
	counters *Counters
}

func newPeerRecord(p Peer, standIn netip.Addr) *peerRecord {
	return &peerRecord{cfg: p, state: StateIdle, standIn: standIn}
}

func (r *peerRecord) resetSession() {
	r.state = StateIdle
	r.since = time.Time{}
	r.established = time.Time{}
	r.notifRecv = ""
	r.counters = nil
	r.endPrefixHold()
}

// endPrefixHold forgets the prefix-limit hold, if any: a new GoBGP peer
// (speaker restarted, peer re-created) starts enabled.
func (r *peerRecord) endPrefixHold() {
	if r.pfxTimer != nil {
		r.pfxTimer.Stop()
	}
	r.pfx, r.pfxTimer = nil, nil
}

// wantsDown reports whether the speaker keeps the session down: BFD
// (PeerDown) or the prefix limit.
func (r *peerRecord) wantsDown() bool { return r.forcedDown != "" || r.pfx != nil }

func (r *peerRecord) setError(msg string) {
	r.lastError = msg
	r.lastErrorAt = time.Now()
}

// peerError records why a session is not up, and logs it when the
// reason changes: a peer that keeps failing the same way is logged once.
// Called with mu held.
func (s *Speaker) peerError(r *peerRecord, msg string) {
	if msg != r.lastError && r.forcedDown == "" {
		s.log.Warn("bgp peer not established", "peer", r.cfg.Address, "reason", msg,
			"fix", peerFix(msg, r.cfg.Passive)+"; the next failure is logged only if its reason differs")
	}
	r.setError(msg)
}

func stateName(s gobgp.FSMState) string {
	switch s {
	case gobgp.BGP_FSM_IDLE:
		return StateIdle
	case gobgp.BGP_FSM_CONNECT:
		return StateConnect
	case gobgp.BGP_FSM_ACTIVE:
		return StateActive
	case gobgp.BGP_FSM_OPENSENT:
		return StateOpenSent
	case gobgp.BGP_FSM_OPENCONFIRM:
		return StateOpenConfirm
	case gobgp.BGP_FSM_ESTABLISHED:
		return StateEstablished
	}
	return fmt.Sprintf("unknown(%d)", int(s))
}

// onPeerEvent follows GoBGP's peer state events. It runs on GoBGP's
// watcher goroutine, one event at a time and in order.
func (s *Speaker) onPeerEvent(srv *server.BgpServer, ev *apiutil.WatchEventMessage_PeerEvent) {
	if ev.Type != apiutil.PEER_EVENT_STATE {
		return
	}
	st := ev.Peer.State
	next := stateName(st.SessionState)
	now := time.Now()

	s.mu.Lock()
	r := s.peerByGoBGP(st.NeighborAddress)
	if r == nil || s.srv != srv {
		s.mu.Unlock()
		return // a removed peer's or an old server's last words
	}
	addr := r.cfg.Address
	prev := r.state
	r.state, r.since = next, now
	r.counters = nil // they were the previous state's
	wentDown := prev == StateEstablished && next != StateEstablished
	var upFor time.Duration
	if wentDown {
		r.flaps++
		upFor = now.Sub(r.established)
		r.established = time.Time{}
	}
	if next == StateEstablished {
		r.established = now
		r.rejection = ""
	}
	var why string
	var hold *PrefixLimitHold
	switch {
	case wentDown && gobgpPrefixLimited(st.AdminState) && r.pfx == nil:
		// GoBGP closed the session for going over the prefix limit,
		// and keeps it idle until told otherwise.
		hold = s.holdForPrefixLimit(srv, r, now, upFor)
		why = fmt.Sprintf("sent NOTIFICATION: Cease / maximum number of prefixes reached (the peer sent more than its limit of %d, maxPrefixes)", hold.Limit)
		r.setError(why) // logged below, with what to do
	case next == StateIdle:
		why = s.disconnectText(r, st.DisconnectReason, st.DisconnectMessage)
		if why != "" {
			s.peerError(r, why)
		}
	}
	r.notifRecv = ""
	forced := r.forcedDown != ""
	wantDown := r.wantsDown()
	asn := r.cfg.ASN
	passive := r.cfg.Passive
	if next == StateIdle && prev == StateOpenConfirm && st.DisconnectReason == api.PeerState_DISCONNECT_REASON_INVALID_MSG {
		r.probeWanted = true
	}
	if next == StateActive && r.conn != nil {
		r.conn.kick()
	}
	// A relayed session shows the peer's NOTIFICATION itself; only
	// sessions GoBGP opens need a probe.
	if next == StateActive && r.probeWanted && !forced && !r.cfg.Passive && r.conn == nil && !now.Before(r.nextProbe) {
		r.probeWanted = false
		r.nextProbe = now.Add(probeInterval)
		s.startProbe(srv, r.cfg)
	}
	s.mu.Unlock()

	switch {
	case next == StateEstablished:
		s.log.Info("bgp peer up", "peer", addr, "asn", asn)
	case hold != nil:
		s.log.Warn("bgp peer down: it sent more prefixes than its limit allows", "peer", addr, "asn", asn, "maxPrefixes", hold.Limit,
			"upFor", upFor.Round(time.Millisecond), "retryIn", hold.RetryAt.Sub(now).Round(time.Second),
			"fix", prefixLimitFix(hold.RetryAt.Sub(now), s.prefixLimitRetryMax()))
	case wentDown:
		s.log.Warn("bgp peer down", "peer", addr, "asn", asn, "reason", why, "upFor", upFor.Round(time.Millisecond),
			"fix", peerFix(why, passive))
	}

	// GoBGP reports its admin state with every event; where it is not
	// what PeerDown/PeerUp or the prefix limit asked for, ask again.
	if gobgpAdminStateDown(st.AdminState) != wantDown {
		go s.fixAdminState(srv, addr)
	}
}

// gobgpAdminStateDown reports whether GoBGP holds a peer down: at our
// request (PeerDown) or for its prefix limit.
func gobgpAdminStateDown(a api.PeerState_AdminState) bool {
	return a == api.PeerState_ADMIN_STATE_DOWN || gobgpPrefixLimited(a)
}

// gobgpPrefixLimited reports whether GoBGP holds a peer down for going
// over its prefix limit: it closed the session and stays idle until the
// peer is enabled again.
func gobgpPrefixLimited(a api.PeerState_AdminState) bool {
	return a == api.PeerState_ADMIN_STATE_PFX_CT
}

// prefixLimitRetryMax is the longest a prefix-limit hold lasts.
func (s *Speaker) prefixLimitRetryMax() time.Duration {
	return max(prefixLimitRetryMax, s.opts.PrefixLimitRetry)
}

// holdForPrefixLimit records that r's peer went over its prefix limit at
// now, after a session of upFor, and arms the timer that lets the
// session re-form: PrefixLimitRetry later, twice as long for each hold
// in a row (a session that lasted prefixLimitRetryMax starts the count
// again), at most prefixLimitRetryMax. Called with mu held.
func (s *Speaker) holdForPrefixLimit(srv *server.BgpServer, r *peerRecord, now time.Time, upFor time.Duration) *PrefixLimitHold {
	longest := s.prefixLimitRetryMax()
	if upFor >= longest {
		r.pfxTimes = 0
	}
	r.pfxTimes++
	wait := s.opts.PrefixLimitRetry
	for i := 1; i < r.pfxTimes && wait < longest; i++ {
		wait *= 2
	}
	wait = min(wait, longest)
	hold := &PrefixLimitHold{Limit: int(r.cfg.MaxPrefixes), At: now, Times: r.pfxTimes, RetryAt: now.Add(wait)}
	r.endPrefixHold()
	r.pfx = hold
	r.pfxTimer = time.AfterFunc(wait, func() { s.endPrefixLimitHold(srv, r, hold) })
	return hold
}

// endPrefixLimitHold lets the session that hold kept down re-form,
// unless something else ended the hold first or BFD holds it down (its
// PeerUp then enables the peer).
func (s *Speaker) endPrefixLimitHold(srv *server.BgpServer, r *peerRecord, hold *PrefixLimitHold) {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.mu.Lock()
	addr, gaddr := r.cfg.Address, r.gobgpAddr
	current := s.srv == srv && s.peers[addr] == r && r.pfx == hold
	if current {
		r.pfx, r.pfxTimer = nil, nil
	}
	forced := r.forcedDown != ""
	s.mu.Unlock()
	if !current || forced || !gaddr.IsValid() {
		return
	}
	s.log.Info("bgp peer released after its prefix limit hold: the session may re-form", "peer", addr, "held", time.Since(hold.At).Round(time.Second))
	if err := srv.EnablePeer(context.Background(), &api.EnablePeerRequest{Address: gaddr.String()}); err != nil {
		s.log.Warn("bgp peer admin state", "peer", addr, "err", err,
			"fix", "the speaker asks GoBGP again for a short while; if `xlb status` still shows the session idle without a reason a minute later, restart the agent")
	}
	s.checkAdminState(srv, addr)
}

// prefixLimitFix says what to do about a peer that went over its
// prefix limit, and when the session re-forms by itself.
func prefixLimitFix(retry, longest time.Duration) string {
	return "xlb imports no routes, so the peer need send this node none: filter what the router sends it (an outbound policy on its session with this node, " +
		"or a default route only); if it must send this many, raise maxPrefixes (bgp.peers[].maxPrefixes, or the BGPPeer's spec.maxPrefixes), " +
		fmt.Sprintf("which re-forms the session at once; else it re-forms by itself in %s, and waits twice as long each time this happens again (at most %s)",
			retry.Round(time.Second), longest)
}

// startProbe runs probeOpen for peer p in the background. Called with mu
// held, so that Stop, which clears s.srv under mu before it waits for
// s.wg, never misses a probe it has to wait for.
func (s *Speaker) startProbe(srv *server.BgpServer, p Peer) {
	if s.srv != srv {
		return
	}
	ctx := s.probeCtx
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		// The peer leaves Idle about when we do; give it a moment.
		select {
		case <-time.After(300 * time.Millisecond):
		case <-ctx.Done():
			return
		}
		text, err := probeOpen(ctx, s.opts.localAddr(p.Address), p, s.opts.ASN, s.opts.RouterID,
			s.opts.NextHop.IsValid(), s.opts.NextHop6.IsValid())
		s.mu.Lock()
		defer s.mu.Unlock()
		r := s.peers[p.Address]
		if r == nil || s.srv != srv || r.cfg != p {
			return
		}
		if err != nil {
			// The peer may just not have been ready for us: try again
			// after the next failure, if it comes soon.
			s.log.Debug("bgp OPEN probe failed", "peer", p.Address, "err", err)
			r.nextProbe = time.Now().Add(probeRetry)
			return
		}
		if r.state != StateEstablished {
			r.rejection = text
			if text != "" {
				s.peerError(r, "peer sent NOTIFICATION: "+text)
			}
		}
	}()
}

// peerFix says what to check about a session that failed for reason (as
// peerError and disconnectText word it), and how it comes back. The
// cases follow the reasons' wording in loghook.go and disconnectText;
// a reason none matches gets the general advice.
func peerFix(reason string, passive bool) string {
	retry := "; the speaker dials again by itself, about every 5 s"
	if passive {
		retry = "; the session re-forms when the peer connects again (the peer is passive here)"
	}
	has := func(parts ...string) bool {
		return slices.ContainsFunc(parts, func(p string) bool { return strings.Contains(reason, p) })
	}
	switch {
	case has("peer configuration changed or removed"):
		return "nothing to do: this node's configuration of the peer changed, and a peer still configured connects again by itself"
	case strings.HasPrefix(reason, "forced down"):
		return "BFD found the link to the peer dead: check the link and the peer's BFD; the session re-forms once released (the agent does 1 s later) and the peer answers"
	case has("connection refused"):
		return "check that the peer runs BGP on that address and port and accepts this node's address (its neighbour or listen-range statement)" + retry
	case has("no answer"):
		return "check the TCP MD5 password on both sides (a segment with a wrong or missing key is dropped silently), and that nothing filters TCP between this node and the peer" + retry
	case has("no route to host", "network unreachable"):
		return "check the peer's address, the link and this node's route to the peer; an eBGP peer more than one hop away needs multihop" + retry
	case has("cannot use local address"):
		return "the node address, every session's source, must be configured on an interface of this node: check node.address" + retry
	case has("bad peer AS") && strings.HasPrefix(reason, "peer sent"):
		return "the router expects another AS for this node: correct its neighbour statement, or this node's AS (bgp.asn, or the BGPPeer's spec.myASN)" + retry
	case has("bad peer AS"):
		return "correct the peer's AS in xlb's configuration (bgp.peers[].asn, or the BGPPeer's spec.peerASN), or the AS the router sends" + retry
	case has("bad BGP identifier"):
		return "give this node a router ID of its own, distinct from the router's (bgp.routerID; by default node.address)" + retry
	case has("unacceptable hold time"):
		return "the router refuses this node's hold time: set holdTime (bgp.holdTime, or the peer's) to a value the router accepts" + retry
	case has("rejected our OPEN", "session set-up failed"):
		return "check the ASNs on both sides: the router's neighbour statement for this node, bgp.asn and the peer's asn" + retry
	case has("hold timer expired"):
		return "one side heard nothing from the other within the hold time: check the link, and the load of the router and of this node" + retry
	case has("administrative shutdown", "administrative reset"):
		return "the session was shut down or reset on the router: enable it there if that was not meant" + retry
	}
	return "look at the router's log for its side, and at docs/bgp.md for what the reason means" + retry
}

// disconnectText turns GoBGP's reason for a session going to idle into
// words; "" when it is no failure worth reporting.
func (s *Speaker) disconnectText(r *peerRecord, reason api.PeerState_DisconnectReason, msg string) string {
	switch reason {
	case api.PeerState_DISCONNECT_REASON_ADMIN_DOWN:
		if r.forcedDown != "" {
			return "forced down: " + r.forcedDown
		}
		return "administratively down"
	case api.PeerState_DISCONNECT_REASON_HOLD_TIMER_EXPIRED:
		return "hold timer expired: nothing heard from the peer within the hold time"
	case api.PeerState_DISCONNECT_REASON_NOTIFICATION_RECEIVED:
		if r.notifRecv != "" {
			return "peer sent NOTIFICATION: " + r.notifRecv
		}
		return "peer sent NOTIFICATION (" + msg + ")"
	case api.PeerState_DISCONNECT_REASON_NOTIFICATION_SENT:
		// The log hook recorded the precise code already.
		if strings.HasPrefix(r.lastError, "sent NOTIFICATION") && time.Since(r.lastErrorAt) < time.Second {
			return r.lastError
		}
		return "sent NOTIFICATION (" + msg + ")"
	case api.PeerState_DISCONNECT_REASON_READ_FAILED:
		return "connection closed by the peer"
	case api.PeerState_DISCONNECT_REASON_WRITE_FAILED:
		return "sending to the peer failed: connection lost"
	case api.PeerState_DISCONNECT_REASON_DECONFIGURED:
		return "session closed: peer configuration changed or removed"
	case api.PeerState_DISCONNECT_REASON_BAD_PEER_AS:
		return fmt.Sprintf("sent NOTIFICATION: OPEN message error / bad peer AS (the peer's OPEN does not carry the configured AS %d)", r.cfg.ASN)
	case api.PeerState_DISCONNECT_REASON_INVALID_MSG:
		if r.notifRecv != "" {
			return "peer sent NOTIFICATION: " + r.notifRecv
		}
		if r.rejection != "" {
			return "peer sent NOTIFICATION: " + r.rejection
		}
		return "session set-up failed: the peer closed the connection or sent an unexpected message after OPEN (often a NOTIFICATION rejecting our OPEN: check ASNs on both sides)"
	case api.PeerState_DISCONNECT_REASON_UNSPECIFIED,
		api.PeerState_DISCONNECT_REASON_IDLE_TIMER_EXPIRED:
		return ""
	}
	if msg == "" {
		return ""
	}
	return "session reset: " + msg
}

// Counter reads. Peers never waits on GoBGP for long: GoBGP answers a
// query only between two UPDATEs it processes, and a peer that floods it
// makes that slow (seconds with hundreds of thousands of routes). Peers
// starts a read when the last one is older than countersFresh and waits
// at most countersWait for it; what the read brings is kept, with its
// time, for later calls.
const (
	countersFresh = time.Second
	countersWait  = 300 * time.Millisecond
)

// Peers reports every configured peer's session, in configuration order.
// Counters are what GoBGP last reported for the session's current state,
// or nil when it has not reported since.
func (s *Speaker) Peers() []PeerStatus {
	s.mu.Lock()
	done := s.readCountersLocked()
	s.mu.Unlock()
	if done != nil {
		t := time.NewTimer(countersWait)
		select {
		case <-done:
		case <-t.C:
		}
		t.Stop()
	}

	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]PeerStatus, 0, len(s.opts.Peers))
	for _, p := range s.opts.Peers {
		r := s.peers[p.Address]
		if r == nil {
			continue
		}
		ps := PeerStatus{
			Address:     p.Address,
			ASN:         p.ASN,
			State:       r.state,
			Since:       r.since,
			LastError:   r.lastError,
			LastErrorAt: r.lastErrorAt,
			Flaps:       r.flaps,
			ForcedDown:  r.forcedDown,
			MaxPrefixes: int(p.MaxPrefixes),
			RestartTime: p.RestartTime,
		}
		if r.state == StateEstablished {
			ps.Uptime = now.Sub(r.established)
		}
		if r.counters != nil {
			c := *r.counters
			ps.Counters = &c
		}
		if r.pfx != nil {
			h := *r.pfx
			ps.PrefixLimit = &h
		}
		out = append(out, ps)
	}
	return out
}

// readCountersLocked starts a read of GoBGP's counters unless one runs,
// or the last ended less than countersFresh ago and left no session's
// counters unknown; it returns the channel that the running read closes
// when it ends (nil if none runs). Called with mu held.
func (s *Speaker) readCountersLocked() <-chan struct{} {
	if s.srv == nil {
		return nil
	}
	if s.countersRead != nil {
		return s.countersRead
	}
	if time.Since(s.countersReadAt) < countersFresh && !s.countersUnknownLocked() {
		return nil
	}
	done := make(chan struct{})
	s.countersRead = done
	srv := s.srv
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(done)
		s.readCounters(srv)
	}()
	return done
}

// countersUnknownLocked reports whether a peer that GoBGP has lacks
// counters (its session changed state since the last read). Called with
// mu held.
func (s *Speaker) countersUnknownLocked() bool {
	for _, r := range s.peers {
		if r.gobgpAddr.IsValid() && r.counters == nil {
			return true
		}
	}
	return false
}

// readCounters asks GoBGP for every peer's counters and keeps them on
// the peers' records. It returns when GoBGP answers or stops.
func (s *Speaker) readCounters(srv *server.BgpServer) {
	start := time.Now()
	got := map[netip.Addr]Counters{} // by GoBGP's address for the peer
	// With nothing imported, the RIB holds only our own routes: counting
	// what each peer is sent costs little.
	err := srv.ListPeer(context.Background(), &api.ListPeerRequest{EnableAdvertised: true}, func(p *api.Peer) {
		if p.Conf == nil {
			return
		}
		addr, err := netip.ParseAddr(p.Conf.NeighborAddress)
		if err != nil {
			return
		}
		var c Counters
		for _, af := range p.AfiSafis {
			if af.State != nil {
				c.PrefixesSent += int(af.State.Advertised)
				c.PrefixesReceived += int(af.State.Received)
			}
		}
		c.PeerRestarts = peerRestarts(p.GetState().GetRemoteCap())
		if m := p.GetState().GetMessages(); m != nil {
			c.MessagesSent, c.UpdatesSent = m.GetSent().GetTotal(), m.GetSent().GetUpdate()
			c.MessagesReceived, c.UpdatesReceived = m.GetReceived().GetTotal(), m.GetReceived().GetUpdate()
		}
		got[addr] = c
	})
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.countersRead, s.countersReadAt = nil, now
	if err != nil || s.srv != srv {
		if err != nil {
			s.log.Debug("bgp counters not read", "err", err)
		}
		return
	}
	for _, r := range s.peers {
		c, ok := got[r.gobgpAddr]
		// A session that changed state while GoBGP answered may have
		// been counted before the change.
		if !ok || !r.gobgpAddr.IsValid() || r.since.After(start) {
			continue
		}
		c.At = now
		r.counters = &c
	}
}

// peerRestarts says whether capabilities caps, a peer's OPEN's, hold
// graceful restart (RFC 4724) for at least one address family: a peer
// that advertises it helps a restarting speaker (a capability without
// families only announces that the peer itself restarted).
func peerRestarts(caps []*api.Capability) bool {
	for _, c := range caps {
		if gr := c.GetGracefulRestart(); gr != nil && len(gr.GetTuples()) > 0 {
			return true
		}
	}
	return false
}
