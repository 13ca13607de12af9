package lb

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// setStamps writes the two timestamps of established session k apart:
// the session's own (the backend's side stamps it) and its forward
// entry's (the client's packets stamp it).
func (x *natFixture) setStamps(k wire.SessionKey, session, forward uint64) {
	x.t.Helper()
	var s wire.Session
	if err := x.d.objs.NatRev.Lookup(&k, &s); err != nil {
		x.t.Fatalf("session %v: %v", k, err)
	}
	s.Last = session
	if err := x.d.objs.NatRev.Put(&k, &s); err != nil {
		x.t.Fatal(err)
	}
	fk := forwardKey(&k, &s)
	var f wire.SessionFwd
	if err := x.d.objs.NatFwd.Lookup(&fk, &f); err != nil || f.Rk != k {
		x.t.Fatalf("session %v: forward entry %+v (%v)", k, f, err)
	}
	f.Last = forward
	if err := x.d.objs.NatFwd.Put(&fk, &f); err != nil {
		x.t.Fatal(err)
	}
}

// forwardEntryOf reads established session k's forward entry.
func (x *natFixture) forwardEntryOf(k wire.SessionKey) wire.SessionFwd {
	x.t.Helper()
	var s wire.Session
	if err := x.d.objs.NatRev.Lookup(&k, &s); err != nil {
		x.t.Fatalf("session %v: %v", k, err)
	}
	fk := forwardKey(&k, &s)
	var f wire.SessionFwd
	if err := x.d.objs.NatFwd.Lookup(&fk, &f); err != nil {
		x.t.Fatalf("session %v: no forward entry: %v", k, err)
	}
	return f
}

// TestLBNATForwardEntryStamps: an established session's client packets
// read and stamp its forward entry alone, its replies the session. Either
// stamp keeps the session: a reply after the session's own stamp aged
// past the timeout, while its client kept sending (a one-way UDP stream),
// is still translated, the sweep keeps it and a new session does not take
// its port; only when both stamps aged is it gone.
func TestLBNATForwardEntryStamps(t *testing.T) {
	x := newNATFixture(t)
	cfg := NATConfig{Address: fxNode, PortMin: natPortMin, PortMax: natPortMax, UDP: 30 * time.Second}
	if err := x.d.SetNAT(cfg); err != nil {
		t.Fatal(err)
	}
	c := tuple{clientAt(44000), vip(53), 17}
	src := x.source(segment(c, 0, nil).Frame(x.f.MAC))
	back := tuple{natBackends[31], src, 17}
	x.expectForward("the answer", segment(back, 0, nil).Frame(x.f.MAC), c.reverse())
	x.expectForward("the client again (established)", segment(c, 0, nil).Frame(x.f.MAC), back.reverse())
	k := sessionKey(src, natBackends[31], 17)

	// The client's datagram stamps the forward entry, not the session.
	now := monotonicNow()
	x.setStamps(k, now-uint64(10*time.Second), now-uint64(10*time.Second))
	x.expectForward("the client's datagram", segment(c, 0, nil).Frame(x.f.MAC), back.reverse())
	var s wire.Session
	if err := x.d.objs.NatRev.Lookup(&k, &s); err != nil {
		t.Fatal(err)
	}
	if f := x.forwardEntryOf(k); f.Last < now || s.Last >= now {
		t.Errorf("after the client's datagram: forward entry stamped %d, session %d, want the forward entry's at least %d and the session's older", f.Last, s.Last, now)
	}

	// The session's stamp past the timeout, the forward entry's fresh.
	x.setStamps(k, monotonicNow()-uint64(cfg.UDP+time.Second), monotonicNow())
	if n, err := x.d.ExpireSessions(); err != nil || n != 0 {
		t.Errorf("sweep of a session whose client sends: removed %d (%v), want 0", n, err)
	}
	x.expectForward("a reply while the client sends", segment(back, 0, nil).Frame(x.f.MAC), c.reverse())

	// Both past it: the reply finds no session.
	x.setStamps(k, monotonicNow()-uint64(cfg.UDP+time.Second), monotonicNow()-uint64(cfg.UDP+time.Second))
	reply := segment(back, 0, nil).Frame(x.f.MAC)
	var v uint32
	var out []byte
	delta := x.natDelta(func() { v, out, _ = x.run(reply) })
	if v != xdpPass || !bytes.Equal(out, reply) || delta["expired"] != 1 || delta["reverse_miss"] != 1 {
		t.Errorf("a reply with both stamps past the timeout: %s NAT %v, want it passed untouched, expired and a reverse miss", verdictNames[v], delta)
	}
}

// TestLBNATForwardEntryCloses: the backend's FIN closes the session for
// its client's packets too, although they read the forward entry alone:
// past the closing timeout (and well within the established one) the
// client's next segment has no session. The client's FIN closes the
// session for the replies the same way.
func TestLBNATForwardEntryCloses(t *testing.T) {
	x := newNATFixture(t)
	cfg := NATConfig{Address: fxNode, PortMin: natPortMin, PortMax: natPortMax,
		TCPEstablished: 100 * time.Second, TCPClosing: 7 * time.Second}
	if err := x.d.SetNAT(cfg); err != nil {
		t.Fatal(err)
	}
	open := func(c tuple) (wire.SessionKey, tuple) {
		t.Helper()
		src := x.source(segment(c, tcpSYN, nil).Frame(x.f.MAC))
		back := tuple{natBackends[30], src, 6}
		x.expectForward("SYN-ACK", segment(back, tcpSYN|tcpACK, nil).Frame(x.f.MAC), c.reverse())
		x.expectForward("ACK", segment(c, tcpACK, nil).Frame(x.f.MAC), back.reverse())
		x.expectForward("request", segment(c, tcpACK, []byte("GET")).Frame(x.f.MAC), back.reverse())
		return sessionKey(src, natBackends[30], 6), back
	}
	past := func(k wire.SessionKey) {
		old := monotonicNow() - uint64(cfg.TCPClosing+time.Second)
		x.setStamps(k, old, old)
	}

	c := tuple{clientAt(44100), vip(80), 6}
	k, back := open(c)
	if f := x.forwardEntryOf(k); f.State != wire.SessionEstablished {
		t.Fatalf("established session's forward entry in state %d, want established", f.State)
	}
	x.expectForward("the backend's FIN", segment(back, tcpACK|tcpFIN, nil).Frame(x.f.MAC), c.reverse())
	if f := x.forwardEntryOf(k); f.State != wire.SessionClosing {
		t.Errorf("after the backend's FIN: forward entry in state %d, want closing (%d)", f.State, wire.SessionClosing)
	}
	past(k)
	if v, _, r := x.run(segment(c, tcpACK, nil).Frame(x.f.MAC)); v != xdpDrop || !sameReasons(r, "drop_nat_no_session") {
		t.Errorf("the client's segment past the closing timeout after the backend's FIN: %s %v, want drop_nat_no_session", verdictNames[v], r)
	}

	d := tuple{clientAt(44101), vip(80), 6}
	k, back = open(d)
	x.expectForward("the client's FIN", segment(d, tcpACK|tcpFIN, nil).Frame(x.f.MAC), back.reverse())
	var s wire.Session
	if err := x.d.objs.NatRev.Lookup(&k, &s); err != nil || s.State != wire.SessionClosing {
		t.Errorf("after the client's FIN: session %+v (%v), want state closing", s, err)
	}
	past(k)
	reply := segment(back, tcpACK, nil).Frame(x.f.MAC)
	if v, out, _ := x.run(reply); v != xdpPass || !bytes.Equal(out, reply) {
		t.Errorf("a reply past the closing timeout after the client's FIN: %s, want it passed untouched", verdictNames[v])
	}
}

// TestLBNATForwardEntriesRebuilt: a migration whose old forward table
// cannot be carried (another layout, or entries gone) makes each carried
// session's forward entry from the session itself: the clients'
// packets find their sessions after the switch.
func TestLBNATForwardEntriesRebuilt(t *testing.T) {
	x, opts := newMigrationFixture(t)
	f, d := x.f, x.d
	clients, toBE := x.openEstablished(44200, 3)
	// An embryonic one too: answered, its client silent since.
	u := tuple{clientAt(44300), vip(80), 6}
	uSrc := x.source(segment(u, tcpSYN, nil).Frame(f.MAC))
	uBE := tuple{uSrc, natBackends[30], 6}
	x.expectForward("SYN-ACK", segment(uBE.reverse(), tcpSYN|tcpACK, nil).Frame(f.MAC), u.reverse())
	// The old forward tables lose every entry.
	for _, m := range []*ebpf.Map{d.objs.NatFwd, d.objs.NatFwdSyn} {
		var k wire.SessionKey
		for m.NextKey(nil, &k) == nil {
			if err := m.Delete(&k); err != nil {
				t.Fatal(err)
			}
		}
	}
	d.Close()

	opts.NATSessions = 8192
	d, err := loadIn(t, f.Name, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { d.Close() }()
	if why := d.Migrated(); !strings.Contains(why, "4 NAT sessions carried over") {
		t.Errorf("migration reason %q, want 4 sessions carried over", why)
	}
	x.d = d
	x.setup()
	if err := d.Attach(); err != nil {
		t.Fatal(err)
	}
	for i, c := range clients {
		x.expectForward("a carried session's client", segment(c, tcpACK, nil).Frame(f.MAC), toBE[i])
		x.expectForward("a carried session's backend", segment(toBE[i].reverse(), tcpACK, nil).Frame(f.MAC), c.reverse())
	}
	x.expectForward("the carried embryonic session's client", segment(u, tcpACK, nil).Frame(f.MAC), uBE)
	x.expectForward("it again, established", segment(u, tcpACK, nil).Frame(f.MAC), uBE)
}

// newMigrationFixture is a NAT fixture whose program is attached to the
// fixture's interface with its maps pinned, for a migration to follow
// (another NATSessions in opts).
func newMigrationFixture(t *testing.T) (*natFixture, Options) {
	t.Helper()
	requirePrivileges(t)
	f := newFixtureNS(t)
	opts := Options{Interface: "veth0", NodeAddr: fxNode, PinPath: testPinPath(t), TableSize: fxTableSize, NATSessions: 4096}
	d, err := openIn(t, f.Name, opts)
	if err != nil {
		t.Fatal(err)
	}
	x := &natFixture{d: d, f: f, t: t}
	x.setup()
	return x, opts
}

// openEstablished opens and establishes n TCP sessions to VIP port 80,
// from client ports from on, to natBackends[30]: the clients' tuples and
// their backends' view of them.
func (x *natFixture) openEstablished(from uint16, n int) (clients, toBE []tuple) {
	x.t.Helper()
	for i := range n {
		c := tuple{clientAt(from + uint16(i)), vip(80), 6}
		src := x.source(segment(c, tcpSYN, nil).Frame(x.f.MAC))
		be := tuple{src, natBackends[30], 6}
		x.expectForward("SYN-ACK", segment(be.reverse(), tcpSYN|tcpACK, nil).Frame(x.f.MAC), c.reverse())
		x.expectForward("ACK", segment(c, tcpACK, nil).Frame(x.f.MAC), be)
		clients, toBE = append(clients, c), append(toBE, be)
	}
	return clients, toBE
}
