package lb

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/internal/flowhash"
)

// The NAT fixture: the fixture namespace with a route to the clients, a
// NAT address (the node's) with a range of ports, and four services on
// the VIP: full NAT over TCP and UDP, DNAT over TCP and UDP, each to its
// own port of fxBackend.
var (
	natPortMin uint16 = 20000
	natPortMax uint16 = 20999
	natTCP            = ServiceKey{fxVIP, 80, ProtoTCP}
	natUDP            = ServiceKey{fxVIP, 53, ProtoUDP}
	dnatTCP           = ServiceKey{fxVIP, 81, ProtoTCP}
	dnatUDP           = ServiceKey{fxVIP, 54, ProtoUDP}
	// natSmall is a NAT service whose backend is behind a route of MTU
	// 1400 (fxSmallMTU).
	natSmall = ServiceKey{fxVIP, 82, ProtoTCP}
	// natClientMTU is a client behind a route of MTU 1400.
	natClientMTU = netip.MustParseAddr("10.0.9.2")
)

// The NAT fixture's backends: id, address and port.
var natBackends = map[uint32]netip.AddrPort{
	30: netip.AddrPortFrom(fxBackend, 8080),
	31: netip.AddrPortFrom(fxBackend, 5353),
	32: netip.AddrPortFrom(fxBackend, 8081),
	33: netip.AddrPortFrom(fxBackend, 5454),
	34: netip.AddrPortFrom(fxSmallMTU, 8082),
	35: netip.AddrPortFrom(fxRedirBE, 8080), // the drain tests' second backend
}

type natFixture struct {
	d *Dataplane
	f *fixtureNS
	t testing.TB
}

func newNATFixture(t *testing.T) *natFixture {
	t.Helper()
	return newNATFixtureWith(t, Options{})
}

// newNATFixtureWith is newNATFixture on a data plane loaded with opts
// (its node address and table size are the fixture's).
func newNATFixtureWith(t testing.TB, opts Options) *natFixture {
	t.Helper()
	requirePrivileges(t)
	f := newFixtureNS(t)
	opts.NodeAddr, opts.TableSize = fxNode, fxTableSize
	d, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	x := &natFixture{d: d, f: f, t: t}
	x.setup()
	return x
}

// setup programs x.d with the fixture's NAT settings, backends and
// services, and the namespace with the clients' routes.
func (x *natFixture) setup() {
	t := x.t
	t.Helper()
	ipcmd(t, "-n", x.f.Name, "route", "replace", "10.0.2.0/24", "via", "10.0.1.1")
	ipcmd(t, "-n", x.f.Name, "route", "replace", "10.0.9.0/24", "via", "10.0.1.1", "mtu", "lock", "1400")
	if err := x.d.SetNAT(NATConfig{Address: fxNode, PortMin: natPortMin, PortMax: natPortMax}); err != nil {
		t.Fatal(err)
	}
	for id, ap := range natBackends {
		if err := x.d.UpsertBackend(id, ap); err != nil {
			t.Fatal(err)
		}
	}
	for i, s := range []struct {
		key   ServiceKey
		encap Encap
		id    uint32
	}{{natTCP, EncapNAT, 30}, {natUDP, EncapNAT, 31}, {dnatTCP, EncapDNAT, 32}, {dnatUDP, EncapDNAT, 33}, {natSmall, EncapNAT, 34}} {
		x.point(uint32(40+i), s.key, s.encap, s.id)
	}
}

// point installs service id on key with every slot naming backend bid.
func (x *natFixture) point(id uint32, key ServiceKey, encap Encap, bid uint32) {
	x.t.Helper()
	table := make([]uint32, fxTableSize)
	for i := range table {
		table[i] = bid
	}
	if err := x.d.UpsertService(Service{ID: id, Key: key, Encap: encap, Table: table}); err != nil {
		x.t.Fatal(err)
	}
}

// run sends one frame and returns the verdict, the frame as the program
// left it and the reasons it counted.
func (x *natFixture) run(frame []byte) (uint32, []byte, map[string]uint64) {
	x.t.Helper()
	var v uint32
	var out []byte
	delta := reasonDelta(x.t, x.d, func() { v, out = x.f.Run(x.t, x.d.objs.XlbLbProg, frame) })
	return v, out, delta
}

// stats are the NAT counters by name.
func (x *natFixture) stats() map[string]uint64 {
	x.t.Helper()
	s, err := x.d.NATStatCounters()
	if err != nil {
		x.t.Fatal(err)
	}
	return s
}

// natDelta runs fn and returns how the NAT counters moved.
func (x *natFixture) natDelta(fn func()) map[string]uint64 {
	x.t.Helper()
	before := x.stats()
	fn()
	delta := map[string]uint64{}
	for k, v := range x.stats() {
		if v != before[k] {
			delta[k] = v - before[k]
		}
	}
	return delta
}

// A packet's 5-tuple.
type tuple struct {
	src, dst netip.AddrPort
	proto    uint8
}

// segment builds a TCP segment (flags) or a UDP datagram of t with
// payload, with full checksums.
func segment(t tuple, flags uint8, payload []byte) pkt {
	return pkt{Src: t.src.Addr(), Dst: t.dst.Addr(), Sport: t.src.Port(), Dport: t.dst.Port(), Proto: t.proto,
		DF: true, TCPFlags: flags, Payload: payload}
}

// reverse is the tuple turned around.
func (t tuple) reverse() tuple { return tuple{t.dst, t.src, t.proto} }

// translated is the software reference of a translation: frame in with
// its addresses and ports replaced by t's, its TTL one less, its MACs
// those of the next hop (to, from), and its checksums computed from
// scratch, a UDP checksum 0 left 0 (no checksum).
func translated(in []byte, t tuple, to, from net.HardwareAddr) []byte {
	out := append([]byte{}, in...)
	copy(out[0:6], to)
	copy(out[6:12], from)
	ip := out[14:]
	ihl := int(ip[0]&0xf) * 4
	total := int(binary.BigEndian.Uint16(ip[2:]))
	s, d := t.src.Addr().As4(), t.dst.Addr().As4()
	copy(ip[12:16], s[:])
	copy(ip[16:20], d[:])
	ip[8]--
	ip[10], ip[11] = 0, 0
	binary.BigEndian.PutUint16(ip[10:], csum(ip[:ihl]))
	l4 := ip[ihl:total]
	binary.BigEndian.PutUint16(l4[0:], t.src.Port())
	binary.BigEndian.PutUint16(l4[2:], t.dst.Port())
	off := 16
	if ip[9] == 17 {
		off = 6
		if binary.BigEndian.Uint16(l4[6:]) == 0 {
			return out
		}
	}
	l4[off], l4[off+1] = 0, 0
	c := l4Csum(s, d, ip[9], l4)
	if c == 0 && ip[9] == 17 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(l4[off:], c)
	return out
}

// l4Csum is the TCP or UDP checksum of segment l4 (its checksum field
// zero) from src to dst, computed from scratch with the pseudo-header.
func l4Csum(src, dst [4]byte, proto uint8, l4 []byte) uint16 {
	ph := append(append(append([]byte{}, src[:]...), dst[:]...), 0, proto, byte(len(l4)>>8), byte(len(l4)))
	return csum(append(ph, l4...))
}

// expectForward sends frame and checks that it left by XDP_TX towards
// the router as the reference translation to want, with no reason
// counted.
func (x *natFixture) expectForward(what string, frame []byte, want tuple) {
	x.t.Helper()
	v, out, r := x.run(frame)
	if v != xdpTX || len(r) != 0 {
		x.t.Fatalf("%s: verdict %s reasons %v, want TX and none", what, verdictNames[v], r)
	}
	ref := translated(frame, want, fxRouterMAC, x.f.MAC)
	if !bytes.Equal(out, ref) {
		x.t.Fatalf("%s: the program's frame differs from the reference translation to %v -> %v:\n got %x\nwant %x", what, want.src, want.dst, out, ref)
	}
}

// source is the NAT source a forward frame got: its source address and
// port after translation.
func (x *natFixture) source(frame []byte) netip.AddrPort {
	x.t.Helper()
	v, out, r := x.run(frame)
	if v != xdpTX {
		x.t.Fatalf("verdict %s reasons %v, want TX", verdictNames[v], r)
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(out[26:30])), binary.BigEndian.Uint16(out[34:]))
}

// natCandidate is candidate i of the ports a flow tries (lbnat_candidate
// and lbnat_port_hash in bpf/xlb_lbnat.h).
func natCandidate(c tuple, i uint32, min, max uint16) uint16 {
	s, d := c.src.Addr().As4(), c.dst.Addr().As4()
	var p [4]byte
	binary.BigEndian.PutUint16(p[0:], c.src.Port())
	binary.BigEndian.PutUint16(p[2:], c.dst.Port())
	k := uint64(binary.LittleEndian.Uint32(s[:]))<<32 | uint64(binary.LittleEndian.Uint32(p[:]))
	k ^= uint64(binary.LittleEndian.Uint32(d[:])) ^ uint64(c.proto)<<56 ^ 0x6c626e6174706f72
	h := flowhash.Mix64(k)
	r := uint64(max) - uint64(min) + 1
	return min + uint16(uint64(uint32(flowhash.Mix64(h+uint64(i)*0x9e3779b97f4a7c15)))*r>>32)
}

func clientAt(port uint16) netip.AddrPort { return netip.AddrPortFrom(fxClient, port) }

func vip(port uint16) netip.AddrPort { return netip.AddrPortFrom(fxVIP, port) }

// TestLBNATTranslations: every translation, both ways, TCP and UDP, NAT
// and DNAT, each frame equal byte for byte to a reference built from
// scratch in Go (its checksums computed anew, not patched); the client's
// first packet after its backend's reply moves the session to the
// established tables, the reply alone does not; the port a session gets
// is the flow's first candidate.
func TestLBNATTranslations(t *testing.T) {
	x := newNATFixture(t)
	node := func(p uint16) netip.AddrPort { return netip.AddrPortFrom(fxNode, p) }

	// Full NAT, TCP: SYN, SYN-ACK, ACK, data both ways.
	c := tuple{clientAt(40000), vip(80), 6}
	port := natCandidate(c, 0, natPortMin, natPortMax)
	toBE := tuple{node(port), natBackends[30], 6}
	delta := x.natDelta(func() {
		x.expectForward("SYN", segment(c, tcpSYN, nil).Frame(x.f.MAC), toBE)
	})
	if delta["created"] != 1 || delta["forward"] != 1 {
		t.Errorf("SYN: NAT counters moved %v, want created and forward", delta)
	}
	delta = x.natDelta(func() {
		x.expectForward("SYN-ACK", segment(toBE.reverse(), tcpSYN|tcpACK, nil).Frame(x.f.MAC), c.reverse())
	})
	if delta["promoted"] != 0 || delta["reverse"] != 1 {
		t.Errorf("SYN-ACK: NAT counters moved %v, want reverse and no promotion", delta)
	}
	delta = x.natDelta(func() {
		x.expectForward("ACK with data", segment(c, tcpACK, []byte("GET / HTTP/1.1\r\n\r\n")).Frame(x.f.MAC), toBE)
	})
	if delta["promoted"] != 1 || delta["forward"] != 1 {
		t.Errorf("the client's ACK: NAT counters moved %v, want promoted and forward", delta)
	}
	x.expectForward("reply data", segment(toBE.reverse(), tcpACK, bytes.Repeat([]byte("x"), 333)).Frame(x.f.MAC), c.reverse())

	// Full NAT, UDP, with a checksum and with none.
	u := tuple{clientAt(5000), vip(53), 17}
	uPort := natCandidate(u, 0, natPortMin, natPortMax)
	uBE := tuple{node(uPort), natBackends[31], 17}
	x.expectForward("UDP query", segment(u, 0, []byte("query")).Frame(x.f.MAC), uBE)
	x.expectForward("UDP answer", segment(uBE.reverse(), 0, []byte("answer!")).Frame(x.f.MAC), u.reverse())
	noSum := segment(u, 0, []byte("no checksum")).Frame(x.f.MAC)
	noSum[14+20+6], noSum[14+20+7] = 0, 0
	x.expectForward("UDP without a checksum", noSum, uBE)
	noSumBack := segment(uBE.reverse(), 0, []byte("none here either")).Frame(x.f.MAC)
	noSumBack[14+20+6], noSumBack[14+20+7] = 0, 0
	x.expectForward("UDP answer without a checksum", noSumBack, u.reverse())

	// DNAT keeps the client's address and port; the reply, addressed to
	// the client, passes the node.
	d := tuple{clientAt(40001), vip(81), 6}
	dBE := tuple{d.src, natBackends[32], 6}
	x.expectForward("DNAT SYN", segment(d, tcpSYN, nil).Frame(x.f.MAC), dBE)
	x.expectForward("DNAT SYN-ACK", segment(dBE.reverse(), tcpSYN|tcpACK, nil).Frame(x.f.MAC), d.reverse())
	x.expectForward("DNAT ACK", segment(d, tcpACK, nil).Frame(x.f.MAC), dBE)
	du := tuple{clientAt(5001), vip(54), 17}
	duBE := tuple{du.src, natBackends[33], 17}
	x.expectForward("DNAT UDP", segment(du, 0, []byte("q")).Frame(x.f.MAC), duBE)
	x.expectForward("DNAT UDP answer", segment(duBE.reverse(), 0, []byte("a")).Frame(x.f.MAC), du.reverse())
	x.expectForward("DNAT UDP again", segment(du, 0, []byte("q2")).Frame(x.f.MAC), duBE)

	sessions, err := x.d.Sessions(fxVIP, 80, ProtoTCP, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(sessions) != 1 {
		t.Fatalf("sessions of %v: %+v, want one", natTCP, sessions)
	}
	s := sessions[0]
	want := Session{Protocol: 6, Client: c.src, VIP: c.dst, Backend: natBackends[30], BackendID: 30, Source: toBE.src, State: "established", Replied: true}
	s.Idle = 0
	if s != want {
		t.Errorf("session %+v, want %+v", s, want)
	}
	if got, _ := x.d.Sessions(fxVIP, 81, ProtoTCP, 0); len(got) != 1 || got[0].Source != d.src || got[0].Backend != natBackends[32] {
		t.Errorf("DNAT session %+v, want its source the client %v", got, d.src)
	}
	counters, err := x.d.NATCounters()
	if err != nil {
		t.Fatal(err)
	}
	if counters.Sessions != 4 || counters.Embryonic != 0 || counters.Created != 4 {
		t.Errorf("counters %+v, want 4 sessions created, none embryonic", counters)
	}
}

// TestLBNATMidFlowAndReverseMiss: a TCP segment other than a SYN opens
// no session and is dropped; a packet to an allocated port without a
// session goes to the kernel untouched and counts as a reverse miss; one
// to the NAT address outside the range (the node's own connections) is
// not looked at.
func TestLBNATMidFlowAndReverseMiss(t *testing.T) {
	x := newNATFixture(t)
	ack := segment(tuple{clientAt(41000), vip(80), 6}, tcpACK, []byte("x")).Frame(x.f.MAC)
	var v uint32
	var r map[string]uint64
	delta := x.natDelta(func() { v, _, r = x.run(ack) })
	if v != xdpDrop || !sameReasons(r, "drop_nat_no_session") || delta["created"] != 0 {
		t.Errorf("mid-flow ACK: verdict %s reasons %v NAT %v, want a drop as drop_nat_no_session and no session", verdictNames[v], r, delta)
	}

	for _, c := range []struct {
		what string
		dst  netip.AddrPort
		miss uint64
	}{
		{"an allocated port without a session", netip.AddrPortFrom(fxNode, natPortMin+5), 1},
		{"a port outside the range (a health check's reply)", netip.AddrPortFrom(fxNode, 45000), 0},
		{"another address", netip.AddrPortFrom(netip.MustParseAddr("10.0.1.9"), natPortMin+5), 0},
	} {
		in := segment(tuple{natBackends[30], c.dst, 6}, tcpSYN|tcpACK, nil).Frame(x.f.MAC)
		var out []byte
		delta := x.natDelta(func() { v, out, r = x.run(in) })
		if v != xdpPass || !bytes.Equal(out, in) || !sameReasons(r, "pass_no_service") || delta["reverse_miss"] != c.miss {
			t.Errorf("%s: verdict %s reasons %v NAT %v, want it passed untouched with %d reverse miss", c.what, verdictNames[v], r, delta, c.miss)
		}
	}
}

// TestLBNATPortAllocation: clients get ports from the range, none
// shares a backend-side 5-tuple, each the first free candidate of its
// flow; a port claimed already (here by a session written in place) is
// skipped for the next candidate, and the claim stays its owner's.
func TestLBNATPortAllocation(t *testing.T) {
	x := newNATFixture(t)
	seen := map[netip.AddrPort]tuple{}
	for i := range 200 {
		c := tuple{netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 2, byte(2 + i%50)}), uint16(30000+i)), vip(80), 6}
		src := x.source(segment(c, tcpSYN, nil).Frame(x.f.MAC))
		if src.Addr() != fxNode || src.Port() < natPortMin || src.Port() > natPortMax {
			t.Fatalf("client %v got source %v, want %v with a port in %d-%d", c.src, src, fxNode, natPortMin, natPortMax)
		}
		if other, ok := seen[src]; ok {
			t.Fatalf("clients %v and %v share the backend-side tuple %v -> %v", other.src, c.src, src, natBackends[30])
		}
		seen[src] = c
		// The first free candidate of the flow.
		for j := uint32(0); ; j++ {
			p := natCandidate(c, j, natPortMin, natPortMax)
			if p == src.Port() {
				break
			}
			if _, taken := seen[netip.AddrPortFrom(fxNode, p)]; !taken || j > 64 {
				t.Fatalf("client %v got port %d, but its candidate %d (%d) was free", c.src, src.Port(), j, p)
			}
		}
	}

	// Claim the next client's first candidate with a session of
	// another client, written in place.
	c := tuple{clientAt(50000), vip(80), 6}
	first := natCandidate(c, 0, natPortMin, natPortMax)
	claim := wire.SessionKey{Src: wire.AddrOf(fxBackend), Dst: wire.AddrOf(fxNode), Sport: wire.Port(8080), Dport: wire.Port(first), Proto: 6}
	other := wire.Session{Client: wire.AddrOf(netip.MustParseAddr("10.0.2.99")), Vip: wire.AddrOf(fxVIP), ClientPort: wire.Port(1), VipPort: wire.Port(80),
		BackendId: 30, Last: monotonicNow(), State: wire.SessionEstablished, Flags: wire.SessionReplied}
	if err := x.d.objs.NatRev.Put(&claim, &other); err != nil {
		t.Fatal(err)
	}
	src := x.source(segment(c, tcpSYN, nil).Frame(x.f.MAC))
	if second := natCandidate(c, 1, natPortMin, natPortMax); src.Port() == first || src.Port() != second {
		t.Errorf("with its first candidate %d claimed, the client got %d, want its second candidate %d", first, src.Port(), second)
	}
	var still wire.Session
	if err := x.d.objs.NatRev.Lookup(&claim, &still); err != nil || still.Client != other.Client {
		t.Errorf("the claim of port %d: %+v (%v), want it still the other client's", first, still, err)
	}
	// A reply to the claimed port goes to its owner, not to the client
	// that was turned away from it.
	back := segment(tuple{natBackends[30], netip.AddrPortFrom(fxNode, first), 6}, tcpACK, nil).Frame(x.f.MAC)
	v, out, _ := x.run(back)
	if v != xdpTX || netip.AddrFrom4([4]byte(out[30:34])) != netip.MustParseAddr("10.0.2.99") {
		t.Errorf("a reply to the claimed port: verdict %s to %v, want the claim's owner", verdictNames[v], netip.AddrFrom4([4]byte(out[30:34])))
	}
}

// TestLBNATRangeExhausted: a client whose every candidate port is taken
// gets no session; the failure is counted and the packet dropped.
func TestLBNATRangeExhausted(t *testing.T) {
	x := newNATFixture(t)
	if err := x.d.SetNAT(NATConfig{Address: fxNode, PortMin: 30000, PortMax: 30000}); err != nil {
		t.Fatal(err)
	}
	if got := x.source(segment(tuple{clientAt(1), vip(80), 6}, tcpSYN, nil).Frame(x.f.MAC)); got.Port() != 30000 {
		t.Fatalf("the one port of the range: got %v", got)
	}
	var v uint32
	var r map[string]uint64
	delta := x.natDelta(func() { v, _, r = x.run(segment(tuple{clientAt(2), vip(80), 6}, tcpSYN, nil).Frame(x.f.MAC)) })
	if v != xdpDrop || !sameReasons(r, "drop_nat_no_port") || delta["alloc_failed"] != 1 {
		t.Errorf("second client on a range of one port: verdict %s reasons %v NAT %v, want a drop, drop_nat_no_port and alloc_failed", verdictNames[v], r, delta)
	}
	c, err := x.d.NATCounters()
	if err != nil || c.AllocFailures != 1 {
		t.Errorf("NATCounters %+v (%v), want 1 allocation failure", c, err)
	}
	// Without a NAT address no full-NAT session can begin.
	if err := x.d.SetNAT(NATConfig{}); err != nil {
		t.Fatal(err)
	}
	if v, _, r := x.run(segment(tuple{clientAt(3), vip(80), 6}, tcpSYN, nil).Frame(x.f.MAC)); v != xdpDrop || !sameReasons(r, "drop_nat_no_port") {
		t.Errorf("no NAT address: verdict %s reasons %v, want drop_nat_no_port", verdictNames[v], r)
	}
}

// setLast writes session k's timestamp, in the established tables (the
// session's and its forward entry's: the client's packets stamp that
// one) or the embryonic ones: the tests' clock.
func (x *natFixture) setLast(k wire.SessionKey, est bool, last uint64) {
	x.t.Helper()
	if est {
		x.setStamps(k, last, last)
		return
	}
	var s wire.Session
	if err := x.d.objs.NatRevSyn.Lookup(&k, &s); err != nil {
		x.t.Fatalf("session %v: %v", k, err)
	}
	s.Last = last
	if err := x.d.objs.NatRevSyn.Put(&k, &s); err != nil {
		x.t.Fatal(err)
	}
}

// sessionKey is the reverse key of the session of client c with backend
// be from source src.
func sessionKey(src, be netip.AddrPort, proto uint8) wire.SessionKey {
	return wire.SessionKey{Src: wire.AddrOf(be.Addr()), Dst: wire.AddrOf(src.Addr()), Sport: wire.Port(be.Port()), Dport: wire.Port(src.Port()), Proto: proto}
}

// TestLBNATExpiry: each state has its own timeout, and a session just
// within it lives while one just past it is gone for the packet path,
// with no sweep (the forward path opens it again for a SYN, drops a
// mid-flow segment; the reverse path passes the reply); ExpireSessions
// removes what expired and counts it, a session that never had a reply
// as such too.
func TestLBNATExpiry(t *testing.T) {
	x := newNATFixture(t)
	cfg := NATConfig{Address: fxNode, PortMin: natPortMin, PortMax: natPortMax,
		TCPSyn: 3 * time.Second, TCPEstablished: 100 * time.Second, TCPClosing: 7 * time.Second, UDP: 30 * time.Second}
	if err := x.d.SetNAT(cfg); err != nil {
		t.Fatal(err)
	}
	open := func(c tuple, reply, ack, fin bool) (wire.SessionKey, tuple) {
		t.Helper()
		flags := uint8(0)
		if c.proto == 6 {
			flags = tcpSYN
		}
		src := x.source(segment(c, flags, nil).Frame(x.f.MAC))
		be := natBackends[30]
		if c.proto == 17 {
			be = natBackends[31]
		}
		back := tuple{be, src, c.proto}
		if reply {
			f := uint8(0)
			if c.proto == 6 {
				f = tcpSYN | tcpACK
			}
			if v, _, r := x.run(segment(back, f, nil).Frame(x.f.MAC)); v != xdpTX {
				t.Fatalf("reply: %s %v", verdictNames[v], r)
			}
		}
		if ack {
			f := uint8(0)
			if c.proto == 6 {
				f = tcpACK
			}
			if v, _, r := x.run(segment(c, f, nil).Frame(x.f.MAC)); v != xdpTX {
				t.Fatalf("the client's ACK: %s %v", verdictNames[v], r)
			}
		}
		if fin {
			if v, _, r := x.run(segment(c, tcpACK|0x01, nil).Frame(x.f.MAC)); v != xdpTX {
				t.Fatalf("FIN: %s %v", verdictNames[v], r)
			}
		}
		return sessionKey(src, be, c.proto), back
	}
	for i, c := range []struct {
		state           string
		proto           uint8
		reply, ack, fin bool
		timeout         time.Duration
		established     bool
		wantStateAfter  string
	}{
		{"syn", 6, false, false, false, cfg.TCPSyn, false, "syn"},
		{"syn answered, not acknowledged", 6, true, false, false, cfg.TCPSyn, false, "syn"},
		{"established", 6, true, true, false, cfg.TCPEstablished, true, "established"},
		{"closing", 6, true, true, true, cfg.TCPClosing, true, "closing"},
		{"udp", 17, true, true, false, cfg.UDP, true, "udp"},
		{"udp answered, the client silent since", 17, true, false, false, cfg.UDP, false, "udp"},
		{"udp without a reply", 17, false, false, false, cfg.UDP, false, "udp"},
	} {
		port := uint16(42000 + i)
		svc := vip(80)
		if c.proto == 17 {
			svc = vip(53)
		}
		cl := tuple{clientAt(port), svc, c.proto}
		k, back := open(cl, c.reply, c.ack, c.fin)
		got, err := x.d.Sessions(fxVIP, svc.Port(), c.proto, 0)
		if err != nil {
			t.Fatal(err)
		}
		var state string
		for _, s := range got {
			if s.Client == cl.src {
				state = s.State
			}
		}
		if state != c.wantStateAfter {
			t.Fatalf("%s: session state %q, want %q", c.state, state, c.wantStateAfter)
		}

		// Just within its timeout: alive (a packet that changes no
		// state: a reply would answer a syn session, a client's
		// packet after a reply would establish it).
		x.setLast(k, c.established, monotonicNow()-uint64(c.timeout-time.Second))
		if c.reply && !c.ack {
			x.expectForward(c.state+": the backend a second before the timeout", segment(back, tcpACK, nil).Frame(x.f.MAC), cl.reverse())
		} else {
			again := uint8(tcpACK)
			if !c.reply {
				again = tcpSYN
			}
			if got := x.source(segment(cl, again, nil).Frame(x.f.MAC)); got != netip.AddrPortFrom(fxNode, wire.PortFrom(k.Dport)) {
				t.Errorf("%s: the client a second before the timeout: source %v, want the session's", c.state, got)
			}
		}
		// Just past it: gone, with no sweep.
		x.setLast(k, c.established, monotonicNow()-uint64(c.timeout+time.Second))
		var v uint32
		var out []byte
		reply := segment(back, tcpACK, nil).Frame(x.f.MAC)
		delta := x.natDelta(func() { v, out, _ = x.run(reply) })
		if v != xdpPass || !bytes.Equal(out, reply) || delta["expired"] != 1 || delta["reverse_miss"] != 1 {
			t.Errorf("%s: a reply a second past the timeout: %s NAT %v, want it passed untouched, expired and a reverse miss", c.state, verdictNames[v], delta)
		}
		if (delta["no_reply"] == 1) == c.reply {
			t.Errorf("%s: no_reply moved by %d, the session was answered: %v", c.state, delta["no_reply"], c.reply)
		}
		if c.proto == 6 {
			if v, _, r := x.run(segment(cl, tcpACK, nil).Frame(x.f.MAC)); v != xdpDrop || !sameReasons(r, "drop_nat_no_session") {
				t.Errorf("%s: the client's next segment: %s %v, want drop_nat_no_session", c.state, verdictNames[v], r)
			}
		}
	}

	// The sweep: sessions past their timeout are removed, the others kept.
	live, _ := open(tuple{clientAt(43000), vip(80), 6}, true, true, false)
	old, _ := open(tuple{clientAt(43001), vip(80), 6}, true, true, false)
	silent, _ := open(tuple{clientAt(43002), vip(53), 17}, false, false, false)
	// Its backend silent past the timeout, its client not: the reverse
	// entry's stamp alone would have it swept.
	uploading, _ := open(tuple{clientAt(43003), vip(80), 6}, true, true, false)
	x.setLast(old, true, monotonicNow()-uint64(cfg.TCPEstablished+time.Second))
	x.setLast(silent, false, monotonicNow()-uint64(cfg.UDP+time.Second))
	x.setStamps(uploading, monotonicNow()-uint64(cfg.TCPEstablished+time.Second), monotonicNow())
	before, _ := x.d.NATCounters()
	n, err := x.d.ExpireSessions()
	if err != nil || n != 2 {
		t.Fatalf("ExpireSessions: %d (%v), want 2", n, err)
	}
	after, _ := x.d.NATCounters()
	if after.Expired-before.Expired != 2 || after.NoReply-before.NoReply != 1 || after.Sessions != 2 {
		t.Errorf("after the sweep: %+v (before %+v), want 2 more expired, 1 more without reply, 2 sessions left", after, before)
	}
	var s wire.Session
	for _, k := range []wire.SessionKey{live, uploading} {
		if err := x.d.objs.NatRev.Lookup(&k, &s); err != nil {
			t.Errorf("live session %v was swept: %v", k, err)
		}
	}
	if n, err := x.d.ExpireSessions(); err != nil || n != 0 {
		t.Errorf("second sweep: %d (%v), want 0", n, err)
	}
}

// closeSession takes client c's TCP session through SYN, SYN-ACK, ACK
// (established) and a FIN each way (closing), and returns its NAT source.
func (x *natFixture) closeSession(c tuple, be netip.AddrPort) netip.AddrPort {
	x.t.Helper()
	src := x.source(segment(c, tcpSYN, nil).Frame(x.f.MAC))
	back := tuple{be, src, 6}
	x.expectForward("SYN-ACK", segment(back, tcpSYN|tcpACK, nil).Frame(x.f.MAC), c.reverse())
	x.expectForward("ACK", segment(c, tcpACK, nil).Frame(x.f.MAC), back.reverse())
	x.expectForward("the client's FIN", segment(c, tcpACK|tcpFIN, nil).Frame(x.f.MAC), back.reverse())
	x.expectForward("the backend's FIN", segment(back, tcpACK|tcpFIN, nil).Frame(x.f.MAC), c.reverse())
	var s wire.Session
	k := sessionKey(src, be, 6)
	if err := x.d.objs.NatRev.Lookup(&k, &s); err != nil || s.State != wire.SessionClosing {
		x.t.Fatalf("after a FIN each way: %+v (%v), want an established-table session in state closing", s, err)
	}
	return src
}

// sessionTables says which tables hold reverse key k (the claim) and
// which forward entry client c has and what it names.
func (x *natFixture) sessionTables(k wire.SessionKey, c tuple) (rev, revSyn bool, fwd, fwdSyn *wire.SessionKey) {
	x.t.Helper()
	var s wire.Session
	rev = x.d.objs.NatRev.Lookup(&k, &s) == nil
	revSyn = x.d.objs.NatRevSyn.Lookup(&k, &s) == nil
	fk := wire.SessionKey{Src: wire.AddrOf(c.src.Addr()), Dst: wire.AddrOf(c.dst.Addr()), Sport: wire.Port(c.src.Port()), Dport: wire.Port(c.dst.Port()), Proto: c.proto}
	var f wire.SessionFwd
	if x.d.objs.NatFwd.Lookup(&fk, &f) == nil {
		fwd = &wire.SessionKey{}
		*fwd = f.Rk
	}
	var v wire.SessionKey
	if x.d.objs.NatFwdSyn.Lookup(&fk, &v) == nil {
		fwdSyn = &wire.SessionKey{}
		*fwdSyn = v
	}
	return rev, revSyn, fwd, fwdSyn
}

// TestLBNATSynAfterClose: a SYN from the tuple of a closing session (a
// client reusing its port within tcpClosing) is a new connection, to the
// backend the service's table gives it now. With the session's backend
// still there, the session opens again in place: the same claim, in the
// established tables, in state syn and unanswered, counted as created;
// the client's ACK of the answer establishes it (its packets read both
// entries until then). With the backend drained since, the old session
// ends, in every table, and a new one opens to the table's backend, so a
// drained backend gets no new connection and the old backend-side tuple
// is free for another client. A SYN on an established session goes where
// the session goes; a retransmitted SYN keeps its embryonic session's
// backend and port even when the table changed.
func TestLBNATSynAfterClose(t *testing.T) {
	x := newNATFixture(t)
	// One port: a session's claim is the range's only one, so whether
	// the old tuple is free shows in whether another client gets it.
	const port = 30000
	if err := x.d.SetNAT(NATConfig{Address: fxNode, PortMin: port, PortMax: port}); err != nil {
		t.Fatal(err)
	}
	a, b := natBackends[30], natBackends[35]
	nodePort := netip.AddrPortFrom(fxNode, port)

	// The backend still in the table: the session opens again in place.
	c := tuple{clientAt(44000), vip(80), 6}
	src := x.closeSession(c, a)
	old := sessionKey(src, a, 6)
	delta := x.natDelta(func() {
		x.expectForward("SYN after the close, the backend in the table", segment(c, tcpSYN, nil).Frame(x.f.MAC), tuple{nodePort, a, 6})
	})
	if delta["created"] != 1 || delta["forward"] != 1 || len(delta) != 2 {
		t.Errorf("SYN after the close: NAT counters moved %v, want created and forward", delta)
	}
	rev, revSyn, fwd, fwdSyn := x.sessionTables(old, c)
	if !rev || revSyn || fwd == nil || *fwd != old || fwdSyn != nil {
		t.Errorf("SYN after the close: claim in the established table %v, embryonic %v; forward entries %v, %v; want the session in the established tables only", rev, revSyn, fwd, fwdSyn)
	}
	fwdState := func() uint8 {
		fk := wire.SessionKey{Src: wire.AddrOf(c.src.Addr()), Dst: wire.AddrOf(c.dst.Addr()), Sport: wire.Port(c.src.Port()), Dport: wire.Port(c.dst.Port()), Proto: 6}
		var f wire.SessionFwd
		if err := x.d.objs.NatFwd.Lookup(&fk, &f); err != nil {
			t.Fatalf("the client's forward entry: %v", err)
		}
		return f.State
	}
	ss, _ := x.d.Sessions(fxVIP, 80, ProtoTCP, 0)
	if len(ss) != 1 || ss[0].State != "syn" || ss[0].Replied || fwdState() != wire.SessionSyn {
		t.Errorf("sessions %+v, forward entry's state %d; want one, new, waiting for a reply", ss, fwdState())
	}
	// A retransmission of that SYN keeps it as it is.
	x.expectForward("the SYN again", segment(c, tcpSYN, nil).Frame(x.f.MAC), tuple{nodePort, a, 6})
	// It is a session as any other: answered and acknowledged, established,
	// the client's ACK read through both entries (the forward entry's
	// state alone would have it syn for good, and expire it after tcpSyn).
	x.expectForward("SYN-ACK", segment(tuple{a, src, 6}, tcpSYN|tcpACK, nil).Frame(x.f.MAC), c.reverse())
	x.expectForward("ACK", segment(c, tcpACK, nil).Frame(x.f.MAC), tuple{src, a, 6})
	if rev, revSyn, fwd, fwdSyn := x.sessionTables(old, c); !rev || revSyn || fwd == nil || fwdSyn != nil {
		t.Errorf("the new session acknowledged: claim established %v, embryonic %v, forward %v, %v; want it established", rev, revSyn, fwd, fwdSyn)
	}
	ss, _ = x.d.Sessions(fxVIP, 80, ProtoTCP, 0)
	if len(ss) != 1 || ss[0].State != "established" || !ss[0].Replied || fwdState() != wire.SessionEstablished {
		t.Errorf("sessions %+v, forward entry's state %d; want one, established", ss, fwdState())
	}

	// A SYN on an established session (a client that lost its
	// connection and reuses the port) goes where the session goes, which
	// stays established: its backend answers the stale tuple with an ACK,
	// the client with a reset, which closes the session.
	x.point(40, natTCP, EncapNAT, 35)
	x.expectForward("SYN on an established session, the table changed", segment(c, tcpSYN, nil).Frame(x.f.MAC), tuple{src, a, 6})
	var s wire.Session
	if err := x.d.objs.NatRev.Lookup(&old, &s); err != nil || s.State != wire.SessionEstablished {
		t.Errorf("after a SYN on an established session: %+v (%v), want it established", s, err)
	}

	// The backend drained (the table names b now): the client's SYN
	// after the close goes to b, and a's tuple is free.
	x.expectForward("the client's RST", segment(c, tcpRST, nil).Frame(x.f.MAC), tuple{src, a, 6})
	v, out, r := x.run(segment(c, tcpSYN, nil).Frame(x.f.MAC))
	if v != xdpRedirect || len(r) != 0 {
		t.Fatalf("SYN after the close, the backend drained: %s %v, want a redirect to %v", verdictNames[v], r, b)
	}
	gotSrc := netip.AddrPortFrom(netip.AddrFrom4([4]byte(out[26:30])), binary.BigEndian.Uint16(out[34:]))
	gotDst := netip.AddrPortFrom(netip.AddrFrom4([4]byte(out[30:34])), binary.BigEndian.Uint16(out[36:]))
	if gotSrc != nodePort || gotDst != b {
		t.Fatalf("SYN after the close, the backend drained: %v -> %v, want %v -> %v", gotSrc, gotDst, nodePort, b)
	}
	toB := sessionKey(nodePort, b, 6)
	if rev, revSyn, fwd, fwdSyn := x.sessionTables(old, c); rev || revSyn || fwd != nil {
		t.Errorf("the old session after the SYN: claim established %v, embryonic %v, forward %v; want it gone", rev, revSyn, fwd)
	} else if fwdSyn == nil || *fwdSyn != toB {
		t.Errorf("the client's forward entry names %v, want the new session %v", fwdSyn, toB)
	}
	x.point(40, natTCP, EncapNAT, 30)
	d := tuple{clientAt(44001), vip(80), 6}
	x.expectForward("another client, to the drained session's backend", segment(d, tcpSYN, nil).Frame(x.f.MAC), tuple{nodePort, a, 6})

	// A retransmitted SYN keeps its embryonic session, backend and port,
	// even with the table changed since.
	x.point(40, natTCP, EncapNAT, 35)
	x.expectForward("d's SYN again, the table changed", segment(d, tcpSYN, nil).Frame(x.f.MAC), tuple{nodePort, a, 6})
	x.expectForward("d's SYN-ACK", segment(tuple{a, nodePort, 6}, tcpSYN|tcpACK, nil).Frame(x.f.MAC), d.reverse())
	x.expectForward("d's SYN again, answered", segment(d, tcpSYN, nil).Frame(x.f.MAC), tuple{nodePort, a, 6})

	// The session's backend id names another backend since (its own
	// left, and the id was given to the same address at another port):
	// the SYN after the close does not reopen the session to the old
	// one, it opens a new one to the new.
	e := tuple{clientAt(44002), vip(80), 6}
	x.point(40, natTCP, EncapNAT, 30)
	if err := x.d.SetNAT(NATConfig{Address: fxNode, PortMin: natPortMin, PortMax: natPortMax}); err != nil {
		t.Fatal(err)
	}
	eSrc := x.closeSession(e, a)
	moved := netip.AddrPortFrom(a.Addr(), a.Port()+1)
	x.point(40, natTCP, EncapNAT, 35)
	if err := x.d.DeleteBackend(30); err != nil {
		t.Fatal(err)
	}
	if err := x.d.UpsertBackend(30, moved); err != nil {
		t.Fatal(err)
	}
	x.point(40, natTCP, EncapNAT, 30)
	v, out, _ = x.run(segment(e, tcpSYN, nil).Frame(x.f.MAC))
	gotSrc = netip.AddrPortFrom(netip.AddrFrom4([4]byte(out[26:30])), binary.BigEndian.Uint16(out[34:]))
	gotDst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(out[30:34])), binary.BigEndian.Uint16(out[36:]))
	if v != xdpTX || gotSrc.Addr() != fxNode || gotDst != moved {
		t.Errorf("SYN after the close, the id moved: %s %v -> %v, want TX from %v to %v", verdictNames[v], gotSrc, gotDst, fxNode, moved)
	}
	if rev, _, _, _ := x.sessionTables(sessionKey(eSrc, a, 6), e); rev {
		t.Errorf("the old session to %v is still in the established table", a)
	}
}

// icmpError builds an ICMP error (type, code, the rest-of-header word:
// the MTU for fragmentation needed) from src to dst with TTL ttl, quoting
// the first ihl + 8 bytes of the IPv4 packet of frame quoted; every
// checksum computed from scratch.
func icmpError(src, dst netip.Addr, ttl, typ, code uint8, mtu uint16, quoted []byte, dstMAC, srcMAC net.HardwareAddr) []byte {
	q := quoted[14:]
	q = q[:int(q[0]&0xf)*4+8]
	icmp := make([]byte, 8, 8+len(q))
	icmp[0], icmp[1] = typ, code
	binary.BigEndian.PutUint16(icmp[6:], mtu)
	icmp = append(icmp, q...)
	binary.BigEndian.PutUint16(icmp[2:], csum(icmp))
	ip := make([]byte, 20, 20+len(icmp))
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(icmp)))
	ip[8], ip[9] = ttl, 1
	s, d := src.As4(), dst.As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	binary.BigEndian.PutUint16(ip[10:], csum(ip))
	frame := make([]byte, 14, 14+len(ip)+len(icmp))
	copy(frame[0:], dstMAC)
	copy(frame[6:], srcMAC)
	binary.BigEndian.PutUint16(frame[12:], 0x0800)
	return append(append(frame, ip...), icmp...)
}

// quoteOf is a packet as an error quotes it: t's with a payload, TTL and
// the transport checksum of the packet of tuple sent (the quoted
// transport checksum is left as it was: no stack reads it, and a node
// that translates the quote does not recompute it).
func quoteOf(t, sent tuple, flags uint8, payload []byte) []byte {
	f := segment(t, flags, payload).Frame(srcMAC)
	orig := segment(sent, flags, payload).Frame(srcMAC)
	off := 14 + 20 + 16
	if t.proto == 17 {
		off = 14 + 20 + 6
	}
	copy(f[off:off+2], orig[off:off+2])
	return f
}

// TestLBNATICMP: ICMP errors about a session are translated both ways,
// their quoted header and ports too, with the outer, quoted IPv4 and ICMP
// checksums equal to a reference computed from scratch: fragmentation
// needed from a router on the client's side, about a reply, reaches the
// backend about its own packet; port unreachable from the backend and
// fragmentation needed from a router on its side reach the client about
// the client's packet, from the VIP. An error about no session goes to
// the kernel untouched.
func TestLBNATICMP(t *testing.T) {
	x := newNATFixture(t)
	router := netip.MustParseAddr("10.0.2.1")
	beRouter := netip.MustParseAddr("10.0.3.1")

	c := tuple{clientAt(40000), vip(80), 6}
	src := x.source(segment(c, tcpSYN, nil).Frame(x.f.MAC))
	toBE := tuple{src, natBackends[30], 6}
	x.expectForward("SYN-ACK", segment(toBE.reverse(), tcpSYN|tcpACK, nil).Frame(x.f.MAC), c.reverse())

	// A reply VIP:80 -> client was too big for a router on the client's
	// side.
	reply := c.reverse()
	in := icmpError(router, fxVIP, 64, 3, 4, 1300, quoteOf(reply, reply, tcpACK, nil), x.f.MAC, srcMAC)
	want := icmpError(fxNode, fxBackend, 63, 3, 4, 1300, quoteOf(toBE.reverse(), reply, tcpACK, nil), fxRouterMAC, x.f.MAC)
	var v uint32
	var out []byte
	var r map[string]uint64
	delta := x.natDelta(func() { v, out, r = x.run(in) })
	if v != xdpTX || !sameReasons(r, "note_icmp_to_backend") || delta["icmp_translated"] != 1 {
		t.Fatalf("fragmentation needed about a reply: %s %v NAT %v, want TX, note_icmp_to_backend and icmp_translated", verdictNames[v], r, delta)
	}
	if !bytes.Equal(out, want) {
		t.Errorf("fragmentation needed about a reply, translated:\n got %x\nwant %x", out, want)
	}

	// The backend's port unreachable about the node's datagram.
	u := tuple{clientAt(5000), vip(53), 17}
	usrc := x.source(segment(u, 0, []byte("q")).Frame(x.f.MAC))
	sent := tuple{usrc, natBackends[31], 17}
	in = icmpError(fxBackend, fxNode, 64, 3, 3, 0, quoteOf(sent, sent, 0, []byte("q")), x.f.MAC, srcMAC)
	want = icmpError(fxVIP, fxClient, 63, 3, 3, 0, quoteOf(u, sent, 0, []byte("q")), fxRouterMAC, x.f.MAC)
	if v, out, _ = x.run(in); v != xdpTX || !bytes.Equal(out, want) {
		t.Errorf("port unreachable from the backend: %s\n got %x\nwant %x", verdictNames[v], out, want)
	}

	// Fragmentation needed from a router between node and backend.
	in = icmpError(beRouter, fxNode, 64, 3, 4, 1200, quoteOf(toBE, toBE, tcpACK, nil), x.f.MAC, srcMAC)
	want = icmpError(fxVIP, fxClient, 63, 3, 4, 1200, quoteOf(c, toBE, tcpACK, nil), fxRouterMAC, x.f.MAC)
	if v, out, _ = x.run(in); v != xdpTX || !bytes.Equal(out, want) {
		t.Errorf("fragmentation needed on the backend's side: %s\n got %x\nwant %x", verdictNames[v], out, want)
	}

	// An error about a port no session holds.
	stray := tuple{netip.AddrPortFrom(fxNode, natPortMin+1), natBackends[31], 17}
	in = icmpError(fxBackend, fxNode, 64, 3, 3, 0, quoteOf(stray, stray, 0, nil), x.f.MAC, srcMAC)
	delta = x.natDelta(func() { v, out, r = x.run(in) })
	if v != xdpPass || !bytes.Equal(out, in) || !sameReasons(r, "pass_not_tcp_udp") || delta["reverse_miss"] != 1 {
		t.Errorf("an error about no session: %s %v NAT %v, want it passed untouched and a reverse miss", verdictNames[v], r, delta)
	}
	// DNAT: the client's address stays in the quote, the error goes to
	// the backend from the router that sent it.
	d := tuple{clientAt(40001), vip(81), 6}
	dBE := tuple{d.src, natBackends[32], 6}
	x.expectForward("DNAT SYN", segment(d, tcpSYN, nil).Frame(x.f.MAC), dBE)
	in = icmpError(router, fxVIP, 64, 3, 4, 1300, quoteOf(d.reverse(), d.reverse(), tcpACK, nil), x.f.MAC, srcMAC)
	want = icmpError(router, fxBackend, 63, 3, 4, 1300, quoteOf(dBE.reverse(), d.reverse(), tcpACK, nil), fxRouterMAC, x.f.MAC)
	if v, out, _ = x.run(in); v != xdpTX || !bytes.Equal(out, want) {
		t.Errorf("DNAT: fragmentation needed about a reply: %s\n got %x\nwant %x", verdictNames[v], out, want)
	}
}

// TestLBNATTooBig: a NAT'ed packet larger than the next hop's MTU with
// DF set is answered by the node with fragmentation needed and that MTU,
// quoting the packet as it arrived, in either direction; without DF it
// is dropped.
func TestLBNATTooBig(t *testing.T) {
	x := newNATFixture(t)
	c := tuple{clientAt(40000), vip(82), 6}
	x.source(segment(c, tcpSYN, nil).Frame(x.f.MAC))
	big := segment(c, tcpACK, make([]byte, 1400)).Frame(x.f.MAC)
	check := func(what string, in []byte, to netip.Addr, mtu uint16) {
		t.Helper()
		v, out, r := x.run(in)
		if v != xdpTX || !sameReasons(r, "tx_icmp_too_big") {
			t.Fatalf("%s: %s %v, want TX and tx_icmp_too_big", what, verdictNames[v], r)
		}
		want := icmpError(fxNode, to, 64, 3, 4, mtu, in, srcMAC, x.f.MAC)
		if !bytes.Equal(out, want) {
			t.Errorf("%s:\n got %x\nwant %x", what, out, want)
		}
	}
	check("1440 bytes to a backend behind an MTU of 1400", big, fxClient, 1400)
	noDF := segment(c, tcpACK, make([]byte, 1400))
	noDF.DF = false
	if v, _, r := x.run(noDF.Frame(x.f.MAC)); v != xdpDrop || !sameReasons(r, "drop_too_big") {
		t.Errorf("without DF: %s %v, want drop_too_big", verdictNames[v], r)
	}

	// The other way: a client behind an MTU of 1400.
	far := tuple{netip.AddrPortFrom(natClientMTU, 40000), vip(80), 6}
	fsrc := x.source(segment(far, tcpSYN, nil).Frame(x.f.MAC))
	back := tuple{natBackends[30], fsrc, 6}
	check("a 1440-byte reply to a client behind an MTU of 1400", segment(back, tcpACK, make([]byte, 1400)).Frame(x.f.MAC), fxBackend, 1400)
}

// TestLBNATFragments: fragments to a NAT service are dropped; a first
// fragment, whose ports name the service, counts as a NAT fragment too.
func TestLBNATFragments(t *testing.T) {
	x := newNATFixture(t)
	for _, c := range []struct {
		what string
		key  ServiceKey
		frag uint16
		nat  uint64
	}{
		{"a first fragment to a NAT service", natTCP, 0x2000, 1},
		{"a later fragment", natTCP, 0x2000 | 100, 0},
		{"a first fragment to a DNAT service", dnatUDP, 0x2000, 1},
	} {
		p := segment(tuple{clientAt(40000), vip(c.key.Port), c.key.Proto}, tcpACK, []byte("frag"))
		p.FlagsFrag = c.frag
		var v uint32
		var r map[string]uint64
		delta := x.natDelta(func() { v, _, r = x.run(p.Frame(x.f.MAC)) })
		if v != xdpDrop || !sameReasons(r, "drop_fragment") || delta["fragment"] != c.nat {
			t.Errorf("%s: %s %v NAT %v, want drop_fragment and %d NAT fragments", c.what, verdictNames[v], r, delta, c.nat)
		}
	}
}

// TestLBNATDrainAndEnd: a session keeps its backend after the backend
// leaves the table and the registry (drain), past the id's counters once
// the id is gone; new sessions follow the table; EndBackendSessions ends
// the sessions of a backend at once, and only those that went to the
// address and port its id stands for now.
func TestLBNATDrainAndEnd(t *testing.T) {
	x := newNATFixture(t)
	a := tuple{clientAt(40000), vip(80), 6}
	asrc := x.source(segment(a, tcpSYN, nil).Frame(x.f.MAC))
	toA := tuple{asrc, natBackends[30], 6}

	// The service moves to backend 35; backend 30 leaves.
	x.point(40, natTCP, EncapNAT, 35)
	if err := x.d.DeleteBackend(30); err != nil {
		t.Fatal(err)
	}
	x.expectForward("the drained session's next segment", segment(a, tcpACK, []byte("more")).Frame(x.f.MAC), toA)
	x.expectForward("the drained backend's reply", segment(toA.reverse(), tcpACK, nil).Frame(x.f.MAC), a.reverse())

	b := tuple{clientAt(40001), vip(80), 6}
	v, out, r := x.run(segment(b, tcpSYN, nil).Frame(x.f.MAC))
	if v != xdpRedirect || len(r) != 0 || netip.AddrFrom4([4]byte(out[30:34])) != fxRedirBE {
		t.Fatalf("a new client: %s %v to %v, want a redirect to the table's %v", verdictNames[v], r, netip.AddrFrom4([4]byte(out[30:34])), fxRedirBE)
	}

	// Id 30 given to another backend: its counters do not count the
	// drained session, and ending its sessions leaves that one alone.
	if err := x.d.UpsertBackend(30, netip.AddrPortFrom(fxRedirBE, 9999)); err != nil {
		t.Fatal(err)
	}
	before, _ := x.d.BackendCounters(30)
	x.expectForward("the drained session, id reused", segment(a, tcpACK, nil).Frame(x.f.MAC), toA)
	if after, _ := x.d.BackendCounters(30); after != before {
		t.Errorf("the reused id counted the drained session: %+v -> %+v", before, after)
	}
	if n, err := x.d.EndBackendSessions(30); err != nil || n != 0 {
		t.Errorf("EndBackendSessions of the reused id: %d (%v), want 0", n, err)
	}
	var delta map[string]uint64
	var n int
	delta = x.natDelta(func() {
		var err error
		if n, err = x.d.EndBackendSessions(35); err != nil {
			t.Fatal(err)
		}
	})
	if n != 1 || delta["ended"] != 1 {
		t.Errorf("EndBackendSessions(35): %d, NAT %v, want 1 ended", n, delta)
	}
	if v, _, r := x.run(segment(b, tcpACK, nil).Frame(x.f.MAC)); v != xdpDrop || !sameReasons(r, "drop_nat_no_session") {
		t.Errorf("the ended session's next segment: %s %v, want drop_nat_no_session", verdictNames[v], r)
	}
	x.expectForward("the drained session after the other backend's end", segment(a, tcpACK, nil).Frame(x.f.MAC), toA)
	if _, err := x.d.EndBackendSessions(36); err == nil {
		t.Error("EndBackendSessions of an unknown id: no error")
	}
}

// TestLBNATSynFlood: SYNs that no backend answers, three times as many
// as the embryonic table holds, churn that table and cannot touch an
// established session (answered, and acknowledged by its client): its
// packets keep their port both ways.
func TestLBNATSynFlood(t *testing.T) {
	x := newNATFixtureWith(t, Options{NATSessions: 4096})
	if got := x.d.Shape().NATSessions; got != 4096 {
		t.Fatalf("shape: %d sessions, want 4096", got)
	}
	// Ports enough for the flood: it is the table it fills.
	if err := x.d.SetNAT(NATConfig{Address: fxNode, PortMin: 20000, PortMax: 60000}); err != nil {
		t.Fatal(err)
	}
	embryonic := embryonicSessions(4096)
	a := tuple{clientAt(40000), vip(80), 6}
	asrc := x.source(segment(a, tcpSYN, nil).Frame(x.f.MAC))
	toA := tuple{asrc, natBackends[30], 6}
	x.expectForward("SYN-ACK", segment(toA.reverse(), tcpSYN|tcpACK, nil).Frame(x.f.MAC), a.reverse())
	x.expectForward("ACK", segment(a, tcpACK, nil).Frame(x.f.MAC), toA)

	flood := 3 * int(embryonic)
	delta := x.natDelta(func() {
		for i := range flood {
			src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 2, byte(10 + i%200)}), uint16(1024+i))
			if v, _, r := x.run(segment(tuple{src, vip(80), 6}, tcpSYN, nil).Frame(x.f.MAC)); v != xdpTX {
				t.Fatalf("flood SYN %d: %s %v", i, verdictNames[v], r)
			}
		}
	})
	if delta["created"] != uint64(flood) {
		t.Errorf("the flood opened %d sessions, want %d", delta["created"], flood)
	}
	c, err := x.d.NATCounters()
	if err != nil {
		t.Fatal(err)
	}
	if c.Embryonic > uint64(embryonic) || c.Embryonic < uint64(embryonic)/2 || c.Sessions != c.Embryonic+1 {
		t.Errorf("after the flood: %+v, want the embryonic table (%d) full or nearly, and the one established session", c, embryonic)
	}
	x.expectForward("the established session's client", segment(a, tcpACK, []byte("still here")).Frame(x.f.MAC), toA)
	x.expectForward("the established session's backend", segment(toA.reverse(), tcpACK, []byte("so am I")).Frame(x.f.MAC), a.reverse())
}

// TestLBNATSessionsSurviveRestart: sessions and the NAT settings live in
// pinned maps: an agent that stops and a new one that adopts the maps
// find them, before writing any setting.
func TestLBNATSessionsSurviveRestart(t *testing.T) {
	requirePrivileges(t)
	f := newFixtureNS(t)
	pin := testPinPath(t)
	opts := Options{Interface: "veth0", NodeAddr: fxNode, PinPath: pin, TableSize: fxTableSize}
	d, err := openIn(t, f.Name, opts)
	if err != nil {
		t.Fatal(err)
	}
	x := &natFixture{d: d, f: f, t: t}
	x.setup()
	c := tuple{clientAt(40000), vip(80), 6}
	src := x.source(segment(c, tcpSYN, nil).Frame(f.MAC))
	toBE := tuple{src, natBackends[30], 6}
	x.expectForward("SYN-ACK", segment(toBE.reverse(), tcpSYN|tcpACK, nil).Frame(f.MAC), c.reverse())
	u := tuple{clientAt(5000), vip(53), 17}
	usrc := x.source(segment(u, 0, nil).Frame(f.MAC))
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}

	d, err = openIn(t, f.Name, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if why := d.Migrated(); why != "" {
		t.Fatalf("restart migrated: %s", why)
	}
	x.d = d
	x.expectForward("the client after the restart", segment(c, tcpACK, []byte("again")).Frame(f.MAC), toBE)
	x.expectForward("the backend after the restart", segment(toBE.reverse(), tcpACK, nil).Frame(f.MAC), c.reverse())
	x.expectForward("the embryonic UDP session's answer", segment(tuple{natBackends[31], usrc, 17}, 0, nil).Frame(f.MAC), u.reverse())
	if n, err := d.NATCounters(); err != nil || n.Sessions != 2 {
		t.Errorf("after the restart: %+v (%v), want 2 sessions", n, err)
	}
}

// TestLBNATStaleEmbryonicGivesPortUp: an embryonic session idle for a
// second gives its port up to a new session that needs it, whether its
// backend left it unanswered or answered it and its client never
// acknowledged (a flood answered by SYN cookies); a younger one keeps
// it, as does an established one however old.
func TestLBNATStaleEmbryonicGivesPortUp(t *testing.T) {
	x := newNATFixture(t)
	if err := x.d.SetNAT(NATConfig{Address: fxNode, PortMin: 30000, PortMax: 30000}); err != nil {
		t.Fatal(err)
	}
	first := tuple{clientAt(1), vip(53), 17}
	src := x.source(segment(first, 0, nil).Frame(x.f.MAC))
	k := sessionKey(src, natBackends[31], 17)
	second := segment(tuple{clientAt(2), vip(53), 17}, 0, nil).Frame(x.f.MAC)
	if v, _, r := x.run(second); v != xdpDrop || !sameReasons(r, "drop_nat_no_port") {
		t.Fatalf("the port held by a fresh embryonic session: %s %v, want drop_nat_no_port", verdictNames[v], r)
	}
	x.setLast(k, false, monotonicNow()-uint64(2*time.Second))
	var got netip.AddrPort
	delta := x.natDelta(func() { got = x.source(second) })
	if got != src || delta["reclaimed"] != 1 || delta["created"] != 1 {
		t.Errorf("after 2 s unanswered: the second client got %v, NAT %v, want the port %v reclaimed", got, delta, src)
	}
	// Answered, and the client silent since: embryonic still, and
	// given up once idle for a second.
	x.expectForward("the answer", segment(tuple{natBackends[31], src, 17}, 0, nil).Frame(x.f.MAC), tuple{vip(53), clientAt(2), 17})
	third := segment(tuple{clientAt(3), vip(53), 17}, 0, nil).Frame(x.f.MAC)
	if v, _, r := x.run(third); v != xdpDrop || !sameReasons(r, "drop_nat_no_port") {
		t.Fatalf("the port held by a fresh answered session: %s %v, want drop_nat_no_port", verdictNames[v], r)
	}
	x.setLast(k, false, monotonicNow()-uint64(2*time.Second))
	delta = x.natDelta(func() { got = x.source(third) })
	if got != src || delta["reclaimed"] != 1 {
		t.Errorf("answered, unacknowledged and 2 s idle: the third client got %v, NAT %v, want the port %v reclaimed", got, delta, src)
	}
	// Established (answered, then the client again), it keeps its port
	// however old.
	x.expectForward("the answer", segment(tuple{natBackends[31], src, 17}, 0, nil).Frame(x.f.MAC), tuple{vip(53), clientAt(3), 17})
	x.expectForward("the client again", third, tuple{src, natBackends[31], 17})
	x.setLast(k, true, monotonicNow()-uint64(10*time.Second))
	if v, _, r := x.run(segment(tuple{clientAt(4), vip(53), 17}, 0, nil).Frame(x.f.MAC)); v != xdpDrop || !sameReasons(r, "drop_nat_no_port") {
		t.Errorf("the port of an established session: %s %v, want drop_nat_no_port", verdictNames[v], r)
	}
}

// TestLBNATSessionsCarriedOnMigration: another NATSessions changes the
// maps' layout, and the migration carries the sessions over (as many as
// fit): those of the old maps when the new ones are made, and those the
// old program opened until the switch; after it the new program
// translates them all both ways. A table too small for them keeps what
// fits and says how many did not.
func TestLBNATSessionsCarriedOnMigration(t *testing.T) {
	x, opts := newMigrationFixture(t)
	f, d := x.f, x.d
	clients, toBE := x.openEstablished(40000, 3)
	u := tuple{clientAt(5000), vip(53), 17}
	uBE := tuple{x.source(segment(u, 0, nil).Frame(f.MAC)), natBackends[31], 17}
	d.Close()

	opts.NATSessions = 8192
	d, err := loadIn(t, f.Name, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { d.Close() }()
	if why := d.Migrated(); !strings.Contains(why, "nat_rev") || !strings.Contains(why, "4 NAT sessions carried over") {
		t.Errorf("migration reason %q, want the NAT maps and 4 sessions carried over", why)
	}
	// The old program, still attached, opens one more session.
	old, err := ebpf.NewProgramFromID(ebpf.ProgramID(xdpProgID(t, f.Name, "veth0")))
	if err != nil {
		t.Fatal(err)
	}
	late := tuple{clientAt(41000), vip(80), 6}
	if v, out := f.Run(t, old, segment(late, tcpSYN, nil).Frame(f.MAC)); v != xdpTX {
		t.Fatalf("the old program: %s", verdictNames[v])
	} else {
		toBE = append(toBE, tuple{netip.AddrPortFrom(fxNode, binary.BigEndian.Uint16(out[34:])), natBackends[30], 6})
		clients = append(clients, late)
	}
	old.Close()
	x.d = d
	x.setup()
	if err := d.Attach(); err != nil {
		t.Fatal(err)
	}
	if carried, lost := d.CarriedSessions(); carried != 5 || lost != 0 {
		t.Errorf("carried %d, lost %d: want 5 and 0", carried, lost)
	}
	for i, c := range clients {
		x.expectForward("a carried session's client", segment(c, tcpACK, nil).Frame(f.MAC), toBE[i])
		x.expectForward("a carried session's backend", segment(toBE[i].reverse(), tcpACK, nil).Frame(f.MAC), c.reverse())
		x.expectForward("a carried session's client again", segment(c, tcpACK, nil).Frame(f.MAC), toBE[i])
	}
	x.expectForward("the carried embryonic session's answer", segment(uBE.reverse(), 0, nil).Frame(f.MAC), u.reverse())
	x.expectForward("the carried embryonic session's client again", segment(u, 0, nil).Frame(f.MAC), uBE)
	d.Close()

	// Shrunk below what it holds: the rest is lost, and said so.
	opts.NATSessions = 2
	d, err = openIn(t, f.Name, opts)
	if err != nil {
		t.Fatal(err)
	}
	// Five sessions, all established by now (the late one and the UDP
	// one were answered, and their clients sent again, through the new
	// program).
	if carried, lost := d.CarriedSessions(); carried != 2 || lost != 3 {
		t.Errorf("into a table of 2: carried %d, lost %d, want 2 and 3", carried, lost)
	}
	if why := d.Migrated(); !strings.Contains(why, "3 did not fit") {
		t.Errorf("migration reason %q, want it to say 3 sessions did not fit", why)
	}
}

// deleteSession removes the embryonic session of client c, as the
// program's tables hold it, with its forward entry.
func (x *natFixture) deleteSession(c tuple) {
	x.t.Helper()
	fk := wire.SessionKey{Src: wire.AddrOf(c.src.Addr()), Dst: wire.AddrOf(c.dst.Addr()), Sport: wire.Port(c.src.Port()), Dport: wire.Port(c.dst.Port()), Proto: c.proto}
	var rk wire.SessionKey
	if err := x.d.objs.NatFwdSyn.LookupAndDelete(&fk, &rk); err != nil {
		x.t.Fatalf("forward entry of %v: %v", c.src, err)
	}
	if err := x.d.objs.NatRevSyn.Delete(&rk); err != nil {
		x.t.Fatalf("session of %v: %v", c.src, err)
	}
}

// TestLBNATAllocationAt90PercentFill measures how often a new session
// finds no free port when 90% of one backend's ports are taken: each
// session draws XLB_NAT_PORT_TRIES (64) ports from its flow's hash, so
// about 0.9^64 = 0.12% should fail. The sessions that fill the range
// (answered, so that none gives its port up) and the ones tried are
// opened by the program from SYNs of distinct clients (the fill's
// answered and acknowledged: established); each tried one is
// removed again, so the fill stays at 90%.
// The figure goes to docs/decisions/0007-nat-sessions.md; the test holds
// it below 1% (8 tries, say, would fail 43%).
func TestLBNATAllocationAt90PercentFill(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 10 900 sessions")
	}
	x := newNATFixtureWith(t, Options{NATSessions: 16384})
	const ports, trials = 1000, 10000
	if err := x.d.SetNAT(NATConfig{Address: fxNode, PortMin: 20000, PortMax: 20000 + ports - 1}); err != nil {
		t.Fatal(err)
	}
	client := func(i int) tuple {
		return tuple{netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 2, byte(2 + i%250)}), uint16(1024+i/250)), vip(80), 6}
	}
	for i := range ports * 9 / 10 {
		src := x.source(segment(client(i), tcpSYN, nil).Frame(x.f.MAC))
		if v, _, r := x.run(segment(tuple{natBackends[30], src, 6}, tcpSYN|tcpACK, nil).Frame(x.f.MAC)); v != xdpTX {
			t.Fatalf("filling: session %d: %s %v", i, verdictNames[v], r)
		}
		if v, _, r := x.run(segment(client(i), tcpACK, nil).Frame(x.f.MAC)); v != xdpTX {
			t.Fatalf("filling: session %d's ACK: %s %v", i, verdictNames[v], r)
		}
	}
	failed := 0
	for i := range trials {
		c := client(ports + i)
		v, _, r := x.run(segment(c, tcpSYN, nil).Frame(x.f.MAC))
		switch {
		case v == xdpTX:
			x.deleteSession(c)
		case v == xdpDrop && sameReasons(r, "drop_nat_no_port"):
			failed++
		default:
			t.Fatalf("trial %d: %s %v", i, verdictNames[v], r)
		}
	}
	rate := float64(failed) / trials
	t.Logf("at 90%% fill of %d ports: %d of %d new sessions found no port (%.3f%%; 0.9^64 = %.3f%%)", ports, failed, trials, 100*rate, 100*0.0011790184577738582)
	if rate > 0.01 {
		t.Errorf("%.2f%% of new sessions failed at 90%% fill, want below 1%%", 100*rate)
	}
}

// TestLBNATStaleForwardEntry: a forward entry whose claim is gone (an LRU
// eviction of an embryonic one does that) is never used with its port
// again, even after another client claimed the port: the first client's
// next packet opens a session of its own, or fails to, and is never sent
// from the other client's port.
func TestLBNATStaleForwardEntry(t *testing.T) {
	x := newNATFixture(t)
	a := tuple{clientAt(1000), vip(53), 17}
	src := x.source(segment(a, 0, nil).Frame(x.f.MAC))
	if err := x.d.objs.NatRevSyn.Delete(sessionKey(src, natBackends[31], 17)); err != nil {
		t.Fatal(err)
	}
	// Only that port left: the next client takes it.
	if err := x.d.SetNAT(NATConfig{Address: fxNode, PortMin: src.Port(), PortMax: src.Port()}); err != nil {
		t.Fatal(err)
	}
	b := tuple{clientAt(2000), vip(53), 17}
	if got := x.source(segment(b, 0, nil).Frame(x.f.MAC)); got != src {
		t.Fatalf("the second client got %v, want the freed port %v", got, src)
	}
	v, out, r := x.run(segment(a, 0, []byte("again")).Frame(x.f.MAC))
	if v != xdpDrop || !sameReasons(r, "drop_nat_no_port") {
		t.Errorf("the first client, its claim gone and the port another's: %s %v from %v:%d, want drop_nat_no_port",
			verdictNames[v], r, netip.AddrFrom4([4]byte(out[26:30])), binary.BigEndian.Uint16(out[34:]))
	}
	x.expectForward("the port's owner's reply", segment(tuple{natBackends[31], src, 17}, 0, nil).Frame(x.f.MAC), b.reverse())
}

// TestLBNATDNATBackends: the reverse path looks up transit packets only
// from the dnat backends a session went to; the sweep lets a backend go
// once no dnat service names it and two complete passes found no session
// of it, and turns the lookups off when no dnat service is left.
func TestLBNATDNATBackends(t *testing.T) {
	x := newNATFixture(t)
	d := tuple{clientAt(40001), vip(81), 6}
	x.expectForward("DNAT SYN", segment(d, tcpSYN, nil).Frame(x.f.MAC), tuple{d.src, natBackends[32], 6})
	be := wire.NATBackendKey{Addr: wire.AddrOf(fxBackend), Port: wire.Port(8081), Proto: 6}
	var one uint8
	if err := x.d.objs.NatDnatBe.Lookup(&be, &one); err != nil {
		t.Fatalf("the dnat backend after its first session: %v", err)
	}
	for _, c := range []struct {
		what string
		from netip.AddrPort
		miss uint64
	}{
		{"from the dnat backend, of no session", natBackends[32], 1},
		{"from another port of its host", netip.AddrPortFrom(fxBackend, 22), 0},
	} {
		in := segment(tuple{c.from, clientAt(55555), 6}, tcpACK, nil).Frame(x.f.MAC)
		var v uint32
		var out []byte
		delta := x.natDelta(func() { v, out, _ = x.run(in) })
		if v != xdpPass || !bytes.Equal(out, in) || delta["reverse_miss"] != c.miss {
			t.Errorf("%s: %s, NAT %v, want it passed untouched with %d reverse miss", c.what, verdictNames[v], delta, c.miss)
		}
	}

	// The dnat services leave; the session ends.
	if err := x.d.DeleteService(42, dnatTCP); err != nil {
		t.Fatal(err)
	}
	if err := x.d.DeleteService(43, dnatUDP); err != nil {
		t.Fatal(err)
	}
	if n, err := x.d.EndBackendSessions(32); err != nil || n != 1 {
		t.Fatalf("EndBackendSessions: %d, %v", n, err)
	}
	if _, err := x.d.ExpireSessions(); err != nil {
		t.Fatal(err)
	}
	if err := x.d.objs.NatDnatBe.Lookup(&be, &one); err != nil {
		t.Errorf("the backend went after one pass: %v, want it kept until a second", err)
	}
	if _, err := x.d.ExpireSessions(); err != nil {
		t.Fatal(err)
	}
	if err := x.d.objs.NatDnatBe.Lookup(&be, &one); err == nil {
		t.Error("the backend is still looked up after two passes without a service or a session")
	}
	var c wire.NATCfg
	if err := x.d.objs.NatCfg.Lookup(uint32(0), &c); err != nil || c.Flags&wire.NATCfgDNAT != 0 {
		t.Errorf("settings %+v (%v), want the dnat lookups off", c, err)
	}
}

// TestLBNATClientIPAffinity: a NAT service picks a new session's backend
// with the Maglev hash exactly as DSR does, client-IP affinity included:
// two connections of a client whose ports the plain hash sends to
// different backends reach one backend with affinity.
func TestLBNATClientIPAffinity(t *testing.T) {
	x := newNATFixture(t)
	table := make([]uint32, fxTableSize)
	for i := range table {
		table[i] = 30
		if i%2 == 1 {
			table[i] = 35
		}
	}
	backendOf := func(sport uint16, clientIP bool) uint32 {
		return table[Slot(FlowHash(fxClient, fxVIP, HashedPort(sport, clientIP), 80, 6), fxTableSize)]
	}
	// Two ports of the client that the plain hash sends apart.
	p1, p2 := uint16(40000), uint16(40001)
	for backendOf(p2, false) == backendOf(p1, false) {
		p2++
	}
	for _, clientIP := range []bool{false, true} {
		if err := x.d.UpsertService(Service{ID: 40, Key: natTCP, Encap: EncapNAT, Table: table, ClientIP: clientIP}); err != nil {
			t.Fatal(err)
		}
		for _, p := range []uint16{p1, p2} {
			c := tuple{clientAt(p), vip(80), 6}
			if clientIP {
				c.src = netip.AddrPortFrom(fxClient, p+1000) // new connections
			}
			want := backendOf(c.src.Port(), clientIP)
			v, out, r := x.run(segment(c, tcpSYN, nil).Frame(x.f.MAC))
			got := netip.AddrPortFrom(netip.AddrFrom4([4]byte(out[30:34])), binary.BigEndian.Uint16(out[36:]))
			if (v != xdpTX && v != xdpRedirect) || got != natBackends[want] {
				t.Errorf("affinity %v, client port %d: %s %v to %v, want backend %d (%v)", clientIP, c.src.Port(), verdictNames[v], r, got, want, natBackends[want])
			}
		}
	}
	if backendOf(p1+1000, true) != backendOf(p2+1000, true) {
		t.Fatal("with affinity the two ports hash apart: the test is wrong")
	}
}

// revCount is how many sessions reverse table m holds.
func revCount(t testing.TB, m *ebpf.Map) int {
	t.Helper()
	n := 0
	if err := walkSessions(m, func(*wire.SessionKey, *wire.Session) { n++ }); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestLBNATAnsweredNotAcknowledged: a SYN answered by its backend whose
// client never acknowledges the SYN-ACK (a spoofed source, the backend
// answering with SYN cookies) leaves an embryonic session: answered, in
// the embryonic tables, under the syn timeout, after which it is gone and
// its port free for another client. The client's ACK establishes it.
func TestLBNATAnsweredNotAcknowledged(t *testing.T) {
	x := newNATFixture(t)
	cfg := NATConfig{Address: fxNode, PortMin: 30000, PortMax: 30000, TCPSyn: 3 * time.Second}
	if err := x.d.SetNAT(cfg); err != nil {
		t.Fatal(err)
	}
	c := tuple{clientAt(45000), vip(80), 6}
	src := x.source(segment(c, tcpSYN, nil).Frame(x.f.MAC))
	toBE := tuple{src, natBackends[30], 6}
	k := sessionKey(src, natBackends[30], 6)
	delta := x.natDelta(func() {
		x.expectForward("SYN-ACK", segment(toBE.reverse(), tcpSYN|tcpACK, nil).Frame(x.f.MAC), c.reverse())
	})
	if delta["promoted"] != 0 {
		t.Errorf("the SYN-ACK promoted the session: NAT %v", delta)
	}
	var s wire.Session
	if err := x.d.objs.NatRev.Lookup(&k, &s); err == nil {
		t.Errorf("answered, not acknowledged: the session is in the established table: %+v", s)
	}
	if err := x.d.objs.NatRevSyn.Lookup(&k, &s); err != nil {
		t.Fatalf("answered, not acknowledged: not in the embryonic table: %v", err)
	}
	ss, err := x.d.Sessions(fxVIP, 80, ProtoTCP, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 1 || ss[0].State != "syn" || !ss[0].Replied {
		t.Errorf("sessions %+v, want one in state syn, answered", ss)
	}
	if n, err := x.d.NATCounters(); err != nil || n.Sessions != 1 || n.Embryonic != 1 {
		t.Errorf("NATCounters %+v (%v), want 1 session, embryonic", n, err)
	}
	// A retransmitted SYN establishes nothing.
	x.expectForward("the client's SYN again", segment(c, tcpSYN, nil).Frame(x.f.MAC), toBE)
	if err := x.d.objs.NatRevSyn.Lookup(&k, &s); err != nil || s.State != wire.SessionSyn {
		t.Errorf("after a retransmitted SYN: %+v (%v), want it embryonic in state syn", s, err)
	}

	// Past the syn timeout it is gone, and its port (the range's only
	// one) is another client's.
	other := segment(tuple{clientAt(45001), vip(80), 6}, tcpSYN, nil).Frame(x.f.MAC)
	if v, _, r := x.run(other); v != xdpDrop || !sameReasons(r, "drop_nat_no_port") {
		t.Fatalf("another client while the session is fresh: %s %v, want drop_nat_no_port", verdictNames[v], r)
	}
	x.setLast(k, false, monotonicNow()-uint64(cfg.TCPSyn+time.Second))
	var got netip.AddrPort
	delta = x.natDelta(func() { got = x.source(other) })
	if got != src || delta["expired"] != 1 || delta["no_reply"] != 0 {
		t.Errorf("past the syn timeout: another client got %v, NAT %v, want the port %v and one expired (answered)", got, delta, src)
	}
	if v, _, r := x.run(segment(c, tcpACK, nil).Frame(x.f.MAC)); v != xdpDrop || !sameReasons(r, "drop_nat_no_session") {
		t.Errorf("the expired session's ACK: %s %v, want drop_nat_no_session", verdictNames[v], r)
	}

	// Acknowledged, it is established.
	d := tuple{clientAt(45001), vip(80), 6}
	x.expectForward("SYN-ACK", segment(toBE.reverse(), tcpSYN|tcpACK, nil).Frame(x.f.MAC), d.reverse())
	delta = x.natDelta(func() { x.expectForward("ACK", segment(d, tcpACK, nil).Frame(x.f.MAC), toBE) })
	if delta["promoted"] != 1 {
		t.Errorf("the client's ACK: NAT %v, want promoted", delta)
	}
	if err := x.d.objs.NatRev.Lookup(&k, &s); err != nil || s.State != wire.SessionEstablished {
		t.Errorf("acknowledged: %+v (%v), want it established in the established table", s, err)
	}
	if revCount(t, x.d.objs.NatRevSyn) != 0 {
		t.Error("acknowledged: the embryonic table still holds a session")
	}
}

// TestLBNATAnsweredSynFlood: a flood of SYNs from spoofed sources, each
// answered by the backend (SYN cookies) and never acknowledged, three
// times as many as the embryonic table holds and more than the port range,
// stays in the embryonic tables: the established tables hold only the
// established session, which keeps its port both ways, every flood SYN
// finds a port, and so does a new client after the flood.
func TestLBNATAnsweredSynFlood(t *testing.T) {
	x := newNATFixtureWith(t, Options{NATSessions: 4096})
	const ports = 2000
	if err := x.d.SetNAT(NATConfig{Address: fxNode, PortMin: 20000, PortMax: 20000 + ports - 1}); err != nil {
		t.Fatal(err)
	}
	embryonic := int(embryonicSessions(4096))
	a := tuple{clientAt(40000), vip(80), 6}
	toA := tuple{x.source(segment(a, tcpSYN, nil).Frame(x.f.MAC)), natBackends[30], 6}
	x.expectForward("SYN-ACK", segment(toA.reverse(), tcpSYN|tcpACK, nil).Frame(x.f.MAC), a.reverse())
	x.expectForward("ACK", segment(a, tcpACK, nil).Frame(x.f.MAC), toA)

	flood := 3 * embryonic
	if flood <= ports {
		t.Fatalf("a flood of %d does not exceed the %d ports", flood, ports)
	}
	dropped := 0
	delta := x.natDelta(func() {
		for i := range flood {
			src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 2, byte(10 + i%200)}), uint16(1024+i))
			v, out, _ := x.run(segment(tuple{src, vip(80), 6}, tcpSYN, nil).Frame(x.f.MAC))
			if v != xdpTX {
				dropped++
				continue
			}
			nat := netip.AddrPortFrom(netip.AddrFrom4([4]byte(out[26:30])), binary.BigEndian.Uint16(out[34:]))
			if v, _, r := x.run(segment(tuple{natBackends[30], nat, 6}, tcpSYN|tcpACK, nil).Frame(x.f.MAC)); v != xdpTX {
				t.Fatalf("flood SYN-ACK %d: %s %v", i, verdictNames[v], r)
			}
		}
	})
	if dropped != 0 || delta["promoted"] != 0 {
		t.Errorf("the flood: %d of %d SYNs found no port, %d sessions promoted (NAT %v), want none of either", dropped, flood, delta["promoted"], delta)
	}
	if n := revCount(t, x.d.objs.NatRev); n != 1 {
		t.Errorf("the established tables hold %d sessions after the flood, want the one established", n)
	}
	if n := revCount(t, x.d.objs.NatRevSyn); n > embryonic {
		t.Errorf("the embryonic table holds %d sessions, more than its %d places", n, embryonic)
	}
	x.expectForward("the established session's client", segment(a, tcpACK, []byte("still here")).Frame(x.f.MAC), toA)
	x.expectForward("the established session's backend", segment(toA.reverse(), tcpACK, []byte("so am I")).Frame(x.f.MAC), a.reverse())

	b := tuple{netip.AddrPortFrom(netip.MustParseAddr("10.0.2.250"), 50000), vip(80), 6}
	v, out, r := x.run(segment(b, tcpSYN, nil).Frame(x.f.MAC))
	if v != xdpTX {
		t.Fatalf("a new client after the flood: %s %v, want a port", verdictNames[v], r)
	}
	toB := tuple{netip.AddrPortFrom(fxNode, binary.BigEndian.Uint16(out[34:])), natBackends[30], 6}
	x.expectForward("the new client's SYN-ACK", segment(toB.reverse(), tcpSYN|tcpACK, nil).Frame(x.f.MAC), b.reverse())
	x.expectForward("the new client's ACK", segment(b, tcpACK, nil).Frame(x.f.MAC), toB)
	if n := revCount(t, x.d.objs.NatRev); n != 2 {
		t.Errorf("the established tables hold %d sessions, want 2", n)
	}
}

// TestLBNATFullRangeFailsFast: once two full searches in a row found no
// port of a backend's range on a CPU, new sessions there try
// XLB_NAT_FAST_TRIES (4) candidates only, counted alloc_fast_fail (a free
// tenth candidate is not found); a port found that way makes the next
// search a full one again, and so does the hint's age (100 ms).
func TestLBNATFullRangeFailsFast(t *testing.T) {
	x := newNATFixture(t)
	all := make([]uint16, 0, natPortMax-natPortMin+1)
	for p := natPortMin; p <= natPortMax; p++ {
		all = append(all, p)
	}
	x.fillPorts(all)
	claim := func(p uint16) wire.SessionKey { return sessionKey(netip.AddrPortFrom(fxNode, p), natBackends[30], 6) }
	free := func(p uint16) {
		t.Helper()
		k := claim(p)
		if err := x.d.objs.NatRev.Delete(&k); err != nil {
			t.Fatalf("free port %d: %v", p, err)
		}
	}
	// syn sends client c's SYN and checks whether it failed, and if so
	// whether fast.
	syn := func(what string, c tuple, wantOK, wantFast bool) netip.AddrPort {
		t.Helper()
		var v uint32
		var out []byte
		delta := x.natDelta(func() { v, out, _ = x.run(segment(c, tcpSYN, nil).Frame(x.f.MAC)) })
		switch {
		case wantOK && (v != xdpTX || delta["alloc_failed"] != 0):
			t.Fatalf("%s: verdict %s, NAT counters %v; want it forwarded", what, verdictNames[v], delta)
		case !wantOK && (v != xdpDrop || delta["alloc_failed"] != 1):
			t.Fatalf("%s: verdict %s, NAT counters %v; want a drop, alloc_failed", what, verdictNames[v], delta)
		case (delta["alloc_fast_fail"] == 1) != (!wantOK && wantFast):
			t.Fatalf("%s: NAT counters %v; want alloc_fast_fail %v", what, delta, !wantOK && wantFast)
		}
		if !wantOK {
			return netip.AddrPort{}
		}
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(out[26:30])), binary.BigEndian.Uint16(out[34:]))
	}
	cl := func(port uint16) tuple { return tuple{clientAt(port), vip(80), 6} }

	syn("first SYN at a full range", cl(1), false, false)
	syn("second SYN", cl(2), false, false)
	syn("third SYN", cl(3), false, true)

	// A client whose tenth candidate is free, its first four taken: not
	// found while the range is known full.
	var d tuple
	var tenth uint16
	for port := uint16(100); ; port++ {
		d, tenth = cl(port), natCandidate(cl(port), 10, natPortMin, natPortMax)
		if !slices.ContainsFunc([]uint32{0, 1, 2, 3}, func(i uint32) bool { return natCandidate(d, i, natPortMin, natPortMax) == tenth }) {
			break
		}
	}
	free(tenth)
	syn("a SYN whose tenth candidate is free", d, false, true)
	x.fillPorts([]uint16{tenth})

	// A port found by a short search: the next search is a full one.
	e := cl(200)
	free(natCandidate(e, 0, natPortMin, natPortMax))
	syn("a SYN whose first candidate is free", e, true, true)
	syn("the SYN after it", cl(201), false, false)
	syn("and the one after that", cl(202), false, true)

	// The hint ages: the client with the free tenth candidate finds it.
	time.Sleep(150 * time.Millisecond)
	free(tenth)
	if got := syn("the SYN with a free tenth candidate, 150 ms on", d, true, false); got.Port() != tenth {
		t.Errorf("the client got %v, want its tenth candidate %d", got, tenth)
	}
}

// closeSessionBackendFirst takes client c's TCP session through SYN,
// SYN-ACK, ACK and the backend's FIN (its active close: it keeps the
// connection in TIME_WAIT), then the client's, and returns its NAT
// source.
func (x *natFixture) closeSessionBackendFirst(c tuple, be netip.AddrPort) netip.AddrPort {
	x.t.Helper()
	src := x.source(segment(c, tcpSYN, nil).Frame(x.f.MAC))
	back := tuple{be, src, 6}
	x.expectForward("SYN-ACK", segment(back, tcpSYN|tcpACK, nil).Frame(x.f.MAC), c.reverse())
	x.expectForward("ACK", segment(c, tcpACK, nil).Frame(x.f.MAC), back.reverse())
	x.expectForward("the backend's FIN", segment(back, tcpACK|tcpFIN, nil).Frame(x.f.MAC), c.reverse())
	x.expectForward("the client's FIN", segment(c, tcpACK|tcpFIN, nil).Frame(x.f.MAC), back.reverse())
	return src
}

// TestLBNATBackendTimeWait: a port whose backend closed first (and so
// holds the connection in TIME_WAIT for tcpTimeWait) is not given to
// another client connection to that backend once the old session
// expired, while the search finds another free port; the same client
// connection (address and port) gets it back, as the backend takes its
// SYN. A port the client closed first is anyone's. With no other port
// free, the search takes it all the same, so the hint costs no capacity;
// a short tcpTimeWait turns it off.
func TestLBNATBackendTimeWait(t *testing.T) {
	x := newNATFixture(t)
	a := natBackends[30]
	expire := func(src netip.AddrPort) {
		t.Helper()
		x.setLast(sessionKey(src, a, 6), true, monotonicNow()-uint64(11*time.Second))
	}
	synFrom := func(c tuple) uint16 {
		t.Helper()
		return x.source(segment(c, tcpSYN, nil).Frame(x.f.MAC)).Port()
	}
	// sharing is a client connection whose first candidate is port p.
	sharing := func(p uint16, from uint16) tuple {
		t.Helper()
		for q := from; q != 0; q++ {
			if c := (tuple{clientAt(q), vip(80), 6}); natCandidate(c, 0, natPortMin, natPortMax) == p {
				return c
			}
		}
		t.Fatalf("no client port from %d has first candidate %d", from, p)
		return tuple{}
	}

	// The backend closed first: the same client connection, back after
	// tcpClosing, gets its port back; another whose first candidate it
	// is takes its second.
	c := tuple{clientAt(45000), vip(80), 6}
	src := x.closeSessionBackendFirst(c, a)
	if p0 := natCandidate(c, 0, natPortMin, natPortMax); src.Port() != p0 {
		t.Fatalf("premise: the first session got port %d, want its first candidate %d", src.Port(), p0)
	}
	expire(src)
	other := sharing(src.Port(), 46000)
	if got, want := synFrom(other), natCandidate(other, 1, natPortMin, natPortMax); got != want {
		t.Errorf("another client connection after the backend closed first: port %d, want its second candidate %d (the first, %d, is in the backend's TIME_WAIT of %v)", got, want, src.Port(), c.src)
	}
	if got := synFrom(c); got != src.Port() {
		t.Errorf("the same client connection after the backend closed first: port %d, want its own %d again", got, src.Port())
	}

	// The client closed first: its port is anyone's at once.
	d := tuple{clientAt(45001), vip(80), 6}
	src = x.closeSession(d, a)
	expire(src)
	if got := synFrom(sharing(src.Port(), 47000)); got != src.Port() {
		t.Errorf("after the client closed first: another client connection got port %d, want its first candidate %d", got, src.Port())
	}

	// A short tcpTimeWait: the backend's close holds nothing.
	e := tuple{clientAt(45002), vip(80), 6}
	src = x.closeSessionBackendFirst(e, a)
	if err := x.d.SetNAT(NATConfig{Address: fxNode, PortMin: natPortMin, PortMax: natPortMax, TCPTimeWait: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	expire(src)
	if got := synFrom(sharing(src.Port(), 48000)); got != src.Port() {
		t.Errorf("tcpTimeWait 1ms: port %d, want the first candidate %d", got, src.Port())
	}

	// Every port looks in another connection's TIME_WAIT: the search,
	// finding none free among its first candidates, tries them all
	// again from the first and takes it.
	if err := x.d.SetNAT(NATConfig{Address: fxNode, PortMin: natPortMin, PortMax: natPortMax}); err != nil {
		t.Fatal(err)
	}
	// Owners are odd: 2 is no client connection's.
	stamp := struct{ Stamp, Owner uint32 }{uint32(monotonicNow() >> 20), 2}
	for i := uint32(0); i < x.d.objs.NatTw.MaxEntries(); i++ {
		if err := x.d.objs.NatTw.Put(i, stamp); err != nil {
			t.Fatal(err)
		}
	}
	h := tuple{clientAt(45005), vip(80), 6}
	if got, want := synFrom(h), natCandidate(h, 0, natPortMin, natPortMax); got != want {
		t.Errorf("every port in TIME_WAIT: port %d, want the first candidate %d", got, want)
	}

	// One port in the range, its backend in TIME_WAIT: a new session
	// still gets it.
	const port = 30000
	if err := x.d.SetNAT(NATConfig{Address: fxNode, PortMin: port, PortMax: port}); err != nil {
		t.Fatal(err)
	}
	f := tuple{clientAt(45003), vip(80), 6}
	src = x.closeSessionBackendFirst(f, a)
	expire(src)
	g := tuple{clientAt(45004), vip(80), 6}
	if got := synFrom(g); got != port {
		t.Errorf("the range's only port in TIME_WAIT: port %d, want %d", got, port)
	}
}
