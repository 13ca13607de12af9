package lb

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// The IPv6 NAT fixture: the IPv6 fixture namespace (prepareFixture6)
// with routes to the clients, the node's IPv6 address as full NAT's
// source, and services on an IPv6 VIP to IPv6 backends: full NAT and
// DNAT over TCP and UDP, and full NAT to a backend behind a route of MTU
// 1400.
var (
	nat6VIP       = netip.MustParseAddr("fd00:98::1")
	nat6Router    = netip.MustParseAddr("fd00:9::1") // a router on the way, sending errors
	nat6ClientMTU = netip.MustParseAddr("fd00:8::2") // a client behind a route of MTU 1400
	nat6Backends  = map[uint32]netip.AddrPort{
		60: netip.AddrPortFrom(fxBackend6, 8080),
		61: netip.AddrPortFrom(fxBackend6, 5353),
		62: netip.AddrPortFrom(fxBackend6, 8081),
		63: netip.AddrPortFrom(fxBackend6, 5454),
		64: netip.AddrPortFrom(fxSmallMTU6, 8082),
	}
)

func newNAT6Fixture(t testing.TB) *natFixture {
	t.Helper()
	requirePrivileges(t)
	f := newFixtureNS(t)
	prepareFixture6(t, f)
	ipcmd(t, "-n", f.Name, "route", "add", "fd00:2::/64", "via", "fd00:1::1")
	ipcmd(t, "-n", f.Name, "route", "add", "fd00:8::/64", "via", "fd00:1::1", "mtu", "lock", "1400")
	d, err := New(Options{NodeAddr: fxNode, NodeAddr6: fxNode6, TableSize: fxTableSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	x := &natFixture{d: d, f: f, t: t}
	if err := d.SetNAT(NATConfig{Address: fxNode, PortMin: natPortMin, PortMax: natPortMax}); err != nil {
		t.Fatal(err)
	}
	for id, ap := range nat6Backends {
		if err := d.UpsertBackend(id, ap); err != nil {
			t.Fatal(err)
		}
	}
	for i, s := range []struct {
		port  uint16
		proto uint8
		encap Encap
		id    uint32
	}{{80, ProtoTCP, EncapNAT, 60}, {53, ProtoUDP, EncapNAT, 61}, {81, ProtoTCP, EncapDNAT, 62}, {54, ProtoUDP, EncapDNAT, 63}, {82, ProtoTCP, EncapNAT, 64}} {
		x.point(uint32(70+i), ServiceKey{nat6VIP, s.port, s.proto}, s.encap, s.id)
	}
	return x
}

func client6(port uint16) netip.AddrPort { return netip.AddrPortFrom(fxClient6, port) }
func vip6(port uint16) netip.AddrPort    { return netip.AddrPortFrom(nat6VIP, port) }
func node6(port uint16) netip.AddrPort   { return netip.AddrPortFrom(fxNode6, port) }

// seg6 builds an IPv6 TCP segment (flags) or UDP datagram of t with
// payload and extension headers, with full checksums.
func seg6(t tuple, flags uint8, payload []byte, mac net.HardwareAddr, ext ...ext6) []byte {
	p := pkt6{Src: t.src.Addr(), Dst: t.dst.Addr(), Sport: t.src.Port(), Dport: t.dst.Port(), Proto: t.proto, Ext: ext, Payload: payload}
	f := p.frame(mac)
	if t.proto == 6 {
		l4 := f[len(f)-20-len(payload):]
		l4[13] = flags
		l4[16], l4[17] = 0, 0
		binary.BigEndian.PutUint16(l4[16:], l6Csum(f[22:38], f[38:54], 6, l4))
	}
	return f
}

// l6Csum is the TCP, UDP or ICMPv6 checksum of l4 (its checksum field
// zero) from src to dst, from scratch with the IPv6 pseudo-header.
func l6Csum(src, dst []byte, proto uint8, l4 []byte) uint16 {
	ph := append(append(append([]byte{}, src...), dst...), 0, 0, byte(len(l4)>>8), byte(len(l4)), 0, 0, 0, proto)
	return csum(append(ph, l4...))
}

// l4Of is the offset of frame's upper-layer header and its protocol,
// past the extension headers.
func l4Of(frame []byte) (int, uint8) {
	off, nh := 14+40, frame[14+6]
	for (nh == 0 || nh == 60 || nh == 43) && off+1 < len(frame) {
		nh, off = frame[off], off+(int(frame[off+1])+1)*8
	}
	return min(off, len(frame)), nh
}

// translated6 is the software reference of an IPv6 translation: frame
// in with its addresses and ports replaced by t's, its hop limit one
// less, its MACs the next hop's (to, from), its transport checksum
// computed from scratch (a UDP 0 sent as 0xffff).
func translated6(in []byte, t tuple, to, from net.HardwareAddr) []byte {
	out := append([]byte{}, in...)
	copy(out[0:6], to)
	copy(out[6:12], from)
	s, d := t.src.Addr().As16(), t.dst.Addr().As16()
	copy(out[22:38], s[:])
	copy(out[38:54], d[:])
	out[21]--
	off, proto := l4Of(out)
	l4 := out[off : 54+int(binary.BigEndian.Uint16(out[18:]))]
	binary.BigEndian.PutUint16(l4[0:], t.src.Port())
	binary.BigEndian.PutUint16(l4[2:], t.dst.Port())
	at := 16
	if proto == 17 {
		at = 6
	}
	l4[at], l4[at+1] = 0, 0
	c := l6Csum(s[:], d[:], proto, l4)
	if c == 0 && proto == 17 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(l4[at:], c)
	return out
}

// expectForward6 sends frame and checks that it left by XDP_TX towards
// the router as the reference translation to want, no reason counted.
func (x *natFixture) expectForward6(what string, frame []byte, want tuple) {
	x.t.Helper()
	v, out, r := x.run(frame)
	if v != xdpTX || len(r) != 0 {
		x.t.Fatalf("%s: verdict %s reasons %v, want TX and none", what, verdictNames[v], r)
	}
	if ref := translated6(frame, want, fxRouterMAC, x.f.MAC); !bytes.Equal(out, ref) {
		x.t.Fatalf("%s: the program's frame differs from the reference translation to %v -> %v:\n got %x\nwant %x", what, want.src, want.dst, out, ref)
	}
}

// source6 is the NAT source an IPv6 forward frame got.
func (x *natFixture) source6(frame []byte) netip.AddrPort {
	x.t.Helper()
	v, out, r := x.run(frame)
	if v != xdpTX {
		x.t.Fatalf("verdict %s reasons %v, want TX", verdictNames[v], r)
	}
	off, _ := l4Of(out)
	return netip.AddrPortFrom(netip.AddrFrom16([16]byte(out[22:38])), binary.BigEndian.Uint16(out[off:]))
}

// TestLBNAT6Translations: every IPv6 translation, both ways, TCP and UDP,
// NAT and DNAT, each frame equal byte for byte to a reference built from
// scratch (checksums over the IPv6 pseudo-header computed anew); full
// NAT's source is the node's IPv6 address and a port of the range; the
// client's ACK establishes the session; the sessions are listed and
// counted; a UDP checksum 0, invalid over IPv6, is dropped.
func TestLBNAT6Translations(t *testing.T) {
	x := newNAT6Fixture(t)
	mac := x.f.MAC

	c := tuple{client6(40000), vip6(80), 6}
	src := x.source6(seg6(c, tcpSYN, nil, mac))
	if src.Addr() != fxNode6 || src.Port() < natPortMin || src.Port() > natPortMax {
		t.Fatalf("SYN left from %v, want %v with a port in %d-%d", src, fxNode6, natPortMin, natPortMax)
	}
	toBE := tuple{src, nat6Backends[60], 6}
	// The SYN again (a retransmission) keeps the session and port.
	delta := x.natDelta(func() { x.expectForward6("SYN again", seg6(c, tcpSYN, nil, mac), toBE) })
	if delta["created"] != 0 || delta["forward"] != 1 {
		t.Errorf("retransmitted SYN: NAT counters moved %v, want forward only", delta)
	}
	delta = x.natDelta(func() {
		x.expectForward6("SYN-ACK", seg6(toBE.reverse(), tcpSYN|tcpACK, nil, mac), c.reverse())
	})
	if delta["reverse"] != 1 || delta["promoted"] != 0 {
		t.Errorf("SYN-ACK: NAT counters moved %v, want reverse and no promotion", delta)
	}
	delta = x.natDelta(func() {
		x.expectForward6("ACK with data", seg6(c, tcpACK, []byte("GET / HTTP/1.1\r\n\r\n"), mac), toBE)
	})
	if delta["promoted"] != 1 {
		t.Errorf("the client's ACK: NAT counters moved %v, want promoted", delta)
	}
	x.expectForward6("reply data", seg6(toBE.reverse(), tcpACK, bytes.Repeat([]byte("x"), 333), mac), c.reverse())
	// A destination options header before TCP: the rewrite finds the
	// ports behind it.
	opts := ext6{typ: 60, body: []byte{1, 4, 0, 0, 0, 0}}
	x.expectForward6("data behind a destination options header", seg6(c, tcpACK, []byte("more"), mac, opts), toBE)

	u := tuple{client6(5000), vip6(53), 17}
	uSrc := x.source6(seg6(u, 0, []byte("query"), mac))
	uBE := tuple{uSrc, nat6Backends[61], 17}
	x.expectForward6("UDP query again", seg6(u, 0, []byte("query2"), mac), uBE)
	x.expectForward6("UDP answer", seg6(uBE.reverse(), 0, []byte("answer!"), mac), u.reverse())
	// A payload whose translated checksum is 0 goes out as 0xffff: found
	// by trying payloads, the reference computes it from scratch.
	for i := range 65536 {
		p := []byte{byte(i >> 8), byte(i)}
		if ref := translated6(seg6(u, 0, p, mac), uBE, fxRouterMAC, mac); binary.BigEndian.Uint16(ref[54+6:]) == 0xffff {
			x.expectForward6("UDP whose checksum becomes 0", seg6(u, 0, p, mac), uBE)
			break
		}
	}
	noSum := seg6(u, 0, []byte("no checksum"), mac)
	noSum[54+6], noSum[54+7] = 0, 0
	if v, _, r := x.run(noSum); v != xdpDrop || !sameReasons(r, "drop_malformed_l4") {
		t.Errorf("UDP over IPv6 with checksum 0: %s %v, want drop_malformed_l4", verdictNames[v], r)
	}

	// DNAT keeps the client's address and port; the reply passes.
	d := tuple{client6(40001), vip6(81), 6}
	dBE := tuple{d.src, nat6Backends[62], 6}
	x.expectForward6("DNAT SYN", seg6(d, tcpSYN, nil, mac), dBE)
	x.expectForward6("DNAT SYN-ACK", seg6(dBE.reverse(), tcpSYN|tcpACK, nil, mac), d.reverse())
	x.expectForward6("DNAT ACK", seg6(d, tcpACK, nil, mac), dBE)
	du := tuple{client6(5001), vip6(54), 17}
	duBE := tuple{du.src, nat6Backends[63], 17}
	x.expectForward6("DNAT UDP", seg6(du, 0, []byte("q"), mac), duBE)
	x.expectForward6("DNAT UDP answer", seg6(duBE.reverse(), 0, []byte("a"), mac), du.reverse())

	sessions, err := x.d.Sessions(nat6VIP, 80, ProtoTCP, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := Session{Protocol: 6, Client: c.src, VIP: c.dst, Backend: nat6Backends[60], BackendID: 60, Source: src, State: "established", Replied: true}
	if len(sessions) != 1 {
		t.Fatalf("sessions of %v: %+v, want one", c.dst, sessions)
	}
	s := sessions[0]
	s.Idle = 0
	if s != want {
		t.Errorf("session %+v, want %+v", s, want)
	}
	if got, _ := x.d.Sessions(nat6VIP, 81, ProtoTCP, 0); len(got) != 1 || got[0].Source != d.src || got[0].State != "established" {
		t.Errorf("DNAT session %+v, want its source the client %v, established", got, d.src)
	}
	counters, err := x.d.NATCounters()
	if err != nil {
		t.Fatal(err)
	}
	if counters.Sessions != 4 || counters.Created != 4 {
		t.Errorf("counters %+v, want 4 sessions created and in use", counters)
	}

	// A reply to an allocated port without a session passes and counts;
	// one outside the range is not looked at.
	for _, c := range []struct {
		dst  netip.AddrPort
		miss uint64
	}{{node6(natPortMin + 999), 1}, {node6(45000), 0}} {
		in := seg6(tuple{nat6Backends[60], c.dst, 6}, tcpACK, nil, mac)
		var v uint32
		var out []byte
		var r map[string]uint64
		delta := x.natDelta(func() { v, out, r = x.run(in) })
		if v != xdpPass || !bytes.Equal(out, in) || !sameReasons(r, "pass_no_service") || delta["reverse_miss"] != c.miss {
			t.Errorf("reply to %v: %s %v NAT %v, want passed untouched with %d reverse miss", c.dst, verdictNames[v], r, delta, c.miss)
		}
	}
	// A mid-flow segment opens nothing.
	if v, _, r := x.run(seg6(tuple{client6(40099), vip6(80), 6}, tcpACK, nil, mac)); v != xdpDrop || !sameReasons(r, "drop_nat_no_session") {
		t.Errorf("mid-flow ACK: %s %v, want drop_nat_no_session", verdictNames[v], r)
	}
}

// TestLBNAT6SynAfterClose: over IPv6 too (whose table entries name their
// backends by id with a flag), a SYN from the tuple of a closed session
// whose backend the table still gives opens it again in place: the same
// claim and port, in the established tables, in state syn, counted as
// created; the client's ACK of the answer establishes it.
func TestLBNAT6SynAfterClose(t *testing.T) {
	x := newNAT6Fixture(t)
	mac := x.f.MAC
	c := tuple{client6(40100), vip6(80), 6}
	src := x.source6(seg6(c, tcpSYN, nil, mac))
	toBE := tuple{src, nat6Backends[60], 6}
	x.expectForward6("SYN-ACK", seg6(toBE.reverse(), tcpSYN|tcpACK, nil, mac), c.reverse())
	x.expectForward6("ACK", seg6(c, tcpACK, nil, mac), toBE)
	x.expectForward6("the client's FIN", seg6(c, tcpACK|tcpFIN, nil, mac), toBE)
	x.expectForward6("the backend's FIN", seg6(toBE.reverse(), tcpACK|tcpFIN, nil, mac), c.reverse())
	k := sessionKey(src, nat6Backends[60], 6)
	var s wire.Session
	if err := x.d.objs.NatRev.Lookup(&k, &s); err != nil || s.State != wire.SessionClosing {
		t.Fatalf("after a FIN each way: %+v (%v), want an established-table session in state closing", s, err)
	}
	delta := x.natDelta(func() { x.expectForward6("SYN after the close", seg6(c, tcpSYN, nil, mac), toBE) })
	if delta["created"] != 1 || delta["forward"] != 1 || len(delta) != 2 {
		t.Errorf("SYN after the close: NAT counters moved %v, want created and forward", delta)
	}
	if rev, revSyn, fwd, fwdSyn := x.sessionTables(k, c); !rev || revSyn || fwd == nil || *fwd != k || fwdSyn != nil {
		t.Errorf("SYN after the close: claim established %v, embryonic %v, forward %v, %v; want the session in the established tables only", rev, revSyn, fwd, fwdSyn)
	}
	if ss, _ := x.d.Sessions(nat6VIP, 80, ProtoTCP, 0); len(ss) != 1 || ss[0].State != "syn" || ss[0].Replied || ss[0].Source != src {
		t.Errorf("sessions %+v, want one from %v, new, waiting for a reply", ss, src)
	}
	x.expectForward6("SYN-ACK again", seg6(toBE.reverse(), tcpSYN|tcpACK, nil, mac), c.reverse())
	x.expectForward6("ACK again", seg6(c, tcpACK, nil, mac), toBE)
	if ss, _ := x.d.Sessions(nat6VIP, 80, ProtoTCP, 0); len(ss) != 1 || ss[0].State != "established" || !ss[0].Replied {
		t.Errorf("sessions %+v, want one, established", ss)
	}
}

// icmp6Error builds an ICMPv6 error (typ, 4-byte field) from src to dst
// quoting the first bytes of frame's IP packet (quote bytes).
func icmp6Error(mac net.HardwareAddr, typ uint8, field uint32, src, dst netip.Addr, frame []byte, quote int) []byte {
	msg := []byte{typ, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(msg[4:], field)
	msg = append(msg, frame[14:14+quote]...)
	return pkt6{Src: src, Dst: dst, Proto: 58, Payload: msg}.frame(mac)
}

// TestLBNAT6ICMP: ICMPv6 errors translated both ways, each compared with
// a reference built from scratch (ICMPv6 checksum over the pseudo-header
// computed anew): a Packet Too Big from a router on the client's side
// about a reply goes to the backend about the packet it sent (from the
// node's address for nat, the router's for dnat); a Packet Too Big and a
// port unreachable about a forwarded packet go to the client about its
// own.
func TestLBNAT6ICMP(t *testing.T) {
	x := newNAT6Fixture(t)
	mac := x.f.MAC
	c := tuple{client6(40000), vip6(80), 6}
	src := x.source6(seg6(c, tcpSYN, nil, mac))
	toBE := tuple{src, nat6Backends[60], 6}
	x.run(seg6(toBE.reverse(), tcpSYN|tcpACK, nil, mac))
	d := tuple{client6(40001), vip6(81), 6}
	dBE := tuple{d.src, nat6Backends[62], 6}
	x.run(seg6(d, tcpSYN, nil, mac))

	// want is the reference: the error in with outer and quoted
	// addresses and ports replaced, hop limit one less, ICMPv6 checksum
	// from scratch; the quoted TCP checksum left alone.
	want := func(in []byte, osrc, odst netip.Addr, q tuple) []byte {
		out := append([]byte{}, in...)
		copy(out[0:6], fxRouterMAC)
		copy(out[6:12], mac)
		s, dd := osrc.As16(), odst.As16()
		copy(out[22:38], s[:])
		copy(out[38:54], dd[:])
		out[21]--
		qs, qd := q.src.Addr().As16(), q.dst.Addr().As16()
		copy(out[62+8:], qs[:])
		copy(out[62+24:], qd[:])
		binary.BigEndian.PutUint16(out[62+40:], q.src.Port())
		binary.BigEndian.PutUint16(out[62+42:], q.dst.Port())
		out[56], out[57] = 0, 0
		binary.BigEndian.PutUint16(out[56:], l6Csum(s[:], dd[:], 58, out[54:]))
		return out
	}
	ptbNATReply := icmp6Error(mac, 2, 1280, nat6Router, nat6VIP, seg6(c.reverse(), tcpACK, bytes.Repeat([]byte("r"), 100), mac), 40+20+32)
	ptbDNATReply := icmp6Error(mac, 2, 1280, nat6Router, nat6VIP, seg6(d.reverse(), tcpACK, bytes.Repeat([]byte("r"), 100), mac), 40+20+32)
	ptbNATFwd := icmp6Error(mac, 2, 1300, nat6Router, fxNode6, seg6(toBE, tcpACK, bytes.Repeat([]byte("f"), 100), mac), 40+20+40)
	unreachDNAT := icmp6Error(mac, 1, 0, fxBackend6, d.src.Addr(), seg6(dBE, tcpSYN, nil, mac), 40+20)
	for _, c := range []struct {
		what     string
		in, want []byte
	}{
		{"Packet Too Big about a nat reply, to the backend", ptbNATReply, want(ptbNATReply, fxNode6, fxBackend6, toBE.reverse())},
		{"Packet Too Big about a dnat reply, to the backend", ptbDNATReply, want(ptbDNATReply, nat6Router, fxBackend6, dBE.reverse())},
		{"Packet Too Big about a forwarded nat packet, to the client", ptbNATFwd, want(ptbNATFwd, nat6VIP, fxClient6, c)},
		{"port unreachable from the backend about a forwarded dnat packet, to the client", unreachDNAT, want(unreachDNAT, nat6VIP, fxClient6, d)},
	} {
		var v uint32
		var out []byte
		var r map[string]uint64
		delta := x.natDelta(func() { v, out, r = x.run(c.in) })
		if v != xdpTX || delta["icmp_translated"] != 1 {
			t.Errorf("%s: %s %v NAT %v, want TX and icmp_translated", c.what, verdictNames[v], r, delta)
			continue
		}
		if !bytes.Equal(out, c.want) {
			t.Errorf("%s: the program's frame differs from the reference:\n got %x\nwant %x", c.what, out, c.want)
		}
	}
	// An error about no session's packet passes, counted as a miss.
	in := icmp6Error(mac, 2, 1280, nat6Router, fxNode6, seg6(tuple{node6(natPortMin + 998), nat6Backends[60], 6}, tcpACK, nil, mac), 60)
	var v uint32
	var out []byte
	delta := x.natDelta(func() { v, out, _ = x.run(in) })
	if v != xdpPass || !bytes.Equal(in, out) || delta["reverse_miss"] != 1 {
		t.Errorf("an error about no session's packet: %s NAT %v, want passed untouched, a reverse miss", verdictNames[v], delta)
	}
}

// TestLBNAT6TooBig: a client's packet too big for the route to its
// backend is answered from the node with an ICMPv6 Packet Too Big (the
// node's address, the route's MTU), as a backend's reply too big for the
// route to its client is answered to the backend.
func TestLBNAT6TooBig(t *testing.T) {
	x := newNAT6Fixture(t)
	mac := x.f.MAC
	c := tuple{client6(40000), vip6(82), 6}
	x.run(seg6(c, tcpSYN, nil, mac))
	v, out, r := x.run(seg6(c, tcpACK, bytes.Repeat([]byte("b"), 1400), mac))
	if v != xdpTX || !sameReasons(r, "tx_icmp_too_big") {
		t.Fatalf("too big for the backend's route: %s %v, want TX tx_icmp_too_big", verdictNames[v], r)
	}
	if out[14+6] != 58 || out[54] != 2 || binary.BigEndian.Uint32(out[58:]) != 1400 ||
		netip.AddrFrom16([16]byte(out[22:38])) != fxNode6 || netip.AddrFrom16([16]byte(out[38:54])) != fxClient6 {
		t.Errorf("answer %x, want an ICMPv6 Packet Too Big of MTU 1400 from %v to %v", out[:62], fxNode6, fxClient6)
	}

	m := tuple{netip.AddrPortFrom(nat6ClientMTU, 40000), vip6(80), 6}
	src := x.source6(seg6(m, tcpSYN, nil, mac))
	back := tuple{nat6Backends[60], src, 6}
	v, out, r = x.run(seg6(back, tcpACK, bytes.Repeat([]byte("b"), 1400), mac))
	if v != xdpTX || !sameReasons(r, "tx_icmp_too_big") || netip.AddrFrom16([16]byte(out[38:54])) != fxBackend6 {
		t.Errorf("reply too big for the client's route: %s %v, want TX tx_icmp_too_big to the backend", verdictNames[v], r)
	}
}

// TestLBNAT6Fragments: IPv6 fragments to a NAT service are dropped; a
// first fragment (its ports known) counts as a NAT fragment, a later one
// only as drop_fragment, as for IPv4.
func TestLBNAT6Fragments(t *testing.T) {
	x := newNAT6Fixture(t)
	mac := x.f.MAC
	frag := func(offset uint16, dport uint16) []byte {
		// A fragment header (next header TCP) before a TCP header.
		in := seg6(tuple{client6(40000), vip6(dport), 6}, tcpSYN, nil, mac)
		hdr := []byte{6, 0, byte(offset >> 5), byte(offset<<3) | 1, 0, 0, 0, 7}
		out := append(append(append([]byte{}, in[:54]...), hdr...), in[54:]...)
		out[14+6] = 44
		binary.BigEndian.PutUint16(out[18:], binary.BigEndian.Uint16(out[18:])+8)
		return out
	}
	for _, c := range []struct {
		what string
		in   []byte
		nat  uint64
	}{
		{"a first fragment to a nat service", frag(0, 80), 1},
		{"a first fragment to a dnat service", frag(0, 81), 1},
		{"a later fragment", frag(185, 80), 0},
	} {
		var v uint32
		var r map[string]uint64
		delta := x.natDelta(func() { v, _, r = x.run(c.in) })
		if v != xdpDrop || !sameReasons(r, "drop_fragment") || delta["fragment"] != c.nat || delta["created"] != 0 {
			t.Errorf("%s: %s %v NAT %v, want drop_fragment and %d NAT fragments, no session", c.what, verdictNames[v], r, delta, c.nat)
		}
	}
}

// TestLBNAT6PortAllocation: IPv6 clients get ports of the range on the
// node's IPv6 address, no two share a backend-side 5-tuple; with one
// port in the range the second client finds none (counted, dropped);
// and a port whose backend closed first (TIME_WAIT) is skipped by
// another client while others are free.
func TestLBNAT6PortAllocation(t *testing.T) {
	x := newNAT6Fixture(t)
	mac := x.f.MAC
	seen := map[netip.AddrPort]netip.AddrPort{}
	for i := range 200 {
		a := fxClient6.As16()
		a[15] = byte(2 + i%50)
		c := tuple{netip.AddrPortFrom(netip.AddrFrom16(a), uint16(30000+i)), vip6(80), 6}
		src := x.source6(seg6(c, tcpSYN, nil, mac))
		if src.Addr() != fxNode6 || src.Port() < natPortMin || src.Port() > natPortMax {
			t.Fatalf("client %v got source %v", c.src, src)
		}
		if other, ok := seen[src]; ok {
			t.Fatalf("clients %v and %v share the backend-side tuple %v -> %v", other, c.src, src, nat6Backends[60])
		}
		seen[src] = c.src
	}

	// TIME_WAIT: a session the backend closes first; the next client
	// whose first choice would be that port gets another. Which port a
	// client draws first is read from a range of one port first.
	if err := x.d.SetNAT(NATConfig{Address: fxNode, PortMin: 30000, PortMax: 30001}); err != nil {
		t.Fatal(err)
	}
	a := tuple{client6(41000), vip6(80), 6}
	aSrc := x.source6(seg6(a, tcpSYN, nil, mac))
	aBE := tuple{aSrc, nat6Backends[60], 6}
	x.run(seg6(aBE.reverse(), tcpSYN|tcpACK, nil, mac))
	x.run(seg6(a, tcpACK, nil, mac))
	x.run(seg6(aBE.reverse(), tcpFIN|tcpACK, nil, mac)) // the backend closes first
	// End the session (as tcpClosing would), keeping the stamp.
	end := func() {
		if _, err := x.d.EndBackendSessions(60); err != nil {
			t.Fatal(err)
		}
	}
	end()
	// Another client: whatever its first candidate, it avoids aSrc's
	// port while the other is free.
	for i := range 8 {
		b := tuple{client6(42000 + uint16(i)), vip6(80), 6}
		got := x.source6(seg6(b, tcpSYN, nil, mac))
		if got.Port() == aSrc.Port() {
			t.Fatalf("client %v got port %d, in the backend's TIME_WAIT of another connection, with port %d free", b.src, got.Port(), 30001-(aSrc.Port()-30000))
		}
		end() // the port free again for the next client
	}
	// The same client connection again takes its own port back.
	if got := x.source6(seg6(a, tcpSYN, nil, mac)); got.Port() != aSrc.Port() {
		t.Errorf("the same client connection got port %d, want its own %d back", got.Port(), aSrc.Port())
	}

	// One port: the second client finds none.
	if err := x.d.SetNAT(NATConfig{Address: fxNode, PortMin: 31000, PortMax: 31000}); err != nil {
		t.Fatal(err)
	}
	if got := x.source6(seg6(tuple{client6(1), vip6(80), 6}, tcpSYN, nil, mac)); got.Port() != 31000 {
		t.Fatalf("the one port of the range: got %v", got)
	}
	var v uint32
	var r map[string]uint64
	delta := x.natDelta(func() { v, _, r = x.run(seg6(tuple{client6(2), vip6(80), 6}, tcpSYN, nil, mac)) })
	if v != xdpDrop || !sameReasons(r, "drop_nat_no_port") || delta["alloc_failed"] != 1 {
		t.Errorf("second client on a range of one port: %s %v NAT %v, want drop_nat_no_port and alloc_failed", verdictNames[v], r, delta)
	}
}

// TestUpsertNATFamilies: a NAT or DNAT service's backends are of its
// VIP's family; an IPv6 VIP with an IPv4 backend is refused, naming both.
func TestUpsertNATFamilies(t *testing.T) {
	x := newNAT6Fixture(t)
	if err := x.d.UpsertBackend(65, netip.AddrPortFrom(fxBackend, 8080)); err != nil {
		t.Fatal(err)
	}
	table := make([]uint32, fxTableSize)
	for i := range table {
		table[i] = 65
	}
	for _, e := range []Encap{EncapNAT, EncapDNAT} {
		err := x.d.UpsertService(Service{ID: 80, Key: ServiceKey{nat6VIP, 90, ProtoTCP}, Encap: e, Table: table})
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte("is IPv4 and the VIP fd00:98::1 is IPv6: NAT and DNAT rewrite addresses within one family (no NAT64)")) {
			t.Errorf("encap %d, IPv6 VIP, IPv4 backend: error %v, want the family refusal", e, err)
		}
	}
}

// BenchmarkNAT6SessionHit: a session hit of each direction, IPv6 beside
// IPv4 on the same data plane, interleaved, one packet per
// BPF_PROG_TEST_RUN (a repeated run would see its own rewrite): the
// kernel's time of a run, its setup included, median over the calls.
//
//	go test -run '^$' -bench NAT6SessionHit -benchtime 5000x ./internal/dataplane/lb/
func BenchmarkNAT6SessionHit(b *testing.B) {
	x := newNAT6Fixture(b)
	x.setup() // the IPv4 services beside the IPv6 ones
	mac := x.f.MAC
	open := func(c tuple, seg func(tuple, uint8, []byte) []byte, src func([]byte) netip.AddrPort, be netip.AddrPort) (fwd, rev []byte) {
		s := src(seg(c, tcpSYN, nil))
		toBE := tuple{s, be, 6}
		x.run(seg(toBE.reverse(), tcpSYN|tcpACK, nil))
		x.run(seg(c, tcpACK, nil))
		return seg(c, tcpACK, []byte("GET / HTTP/1.1\r\n\r\n")), seg(toBE.reverse(), tcpACK, bytes.Repeat([]byte("x"), 100))
	}
	seg4 := func(t tuple, flags uint8, p []byte) []byte { return segment(t, flags, p).Frame(mac) }
	seg6f := func(t tuple, flags uint8, p []byte) []byte { return seg6(t, flags, p, mac) }
	fwd4, rev4 := open(tuple{clientAt(40000), vip(80), 6}, seg4, x.source, natBackends[30])
	fwd6, rev6 := open(tuple{client6(40000), vip6(80), 6}, seg6f, x.source6, nat6Backends[60])
	names := []string{"fwd4", "fwd6", "rev4", "rev6"}
	runs := make([][]time.Duration, len(names))
	for b.Loop() {
		for i, f := range [][]byte{fwd4, fwd6, rev4, rev6} {
			v, d := x.timedRun(f, 1)
			if v != xdpTX {
				b.Fatalf("%s: verdict %s", names[i], verdictNames[v])
			}
			runs[i] = append(runs[i], d)
		}
	}
	for i, n := range names {
		slices.Sort(runs[i])
		b.ReportMetric(float64(runs[i][len(runs[i])/2].Nanoseconds()), "ns/"+n)
	}
}

// FuzzLBNAT6 is FuzzLBNAT over IPv6: random frames (made IPv6) through
// the program with IPv6 NAT sessions open. Whatever arrives, the verdict
// is defined, a passed frame is untouched, and an emitted one is IPv6:
// a Packet Too Big from the node with a valid checksum, or a translation
// to a backend or from the VIP whose transport (or ICMPv6) checksum is
// valid exactly when the input's was.
//
//	go test -fuzz FuzzLBNAT6 -fuzztime 30s -fuzzminimizetime 1x -parallel 1 ./internal/dataplane/lb/
func FuzzLBNAT6(f *testing.F) {
	x := newNAT6Fixture(f)
	mac := x.f.MAC
	c := tuple{client6(40000), vip6(80), 6}
	src := x.source6(seg6(c, tcpSYN, nil, mac))
	toBE := tuple{src, nat6Backends[60], 6}
	x.run(seg6(toBE.reverse(), tcpSYN|tcpACK, nil, mac))
	x.run(seg6(c, tcpACK, nil, mac))
	d := tuple{client6(40001), vip6(81), 6}
	x.run(seg6(d, tcpSYN, nil, mac))
	for _, fr := range [][]byte{
		seg6(c, tcpACK, []byte("data"), mac),
		seg6(toBE.reverse(), tcpACK, []byte("reply"), mac),
		seg6(tuple{client6(5000), vip6(53), 17}, 0, []byte("q"), mac),
		seg6(tuple{d.src, nat6Backends[62], 6}.reverse(), tcpSYN|tcpACK, nil, mac),
		icmp6Error(mac, 2, 1280, nat6Router, nat6VIP, seg6(c.reverse(), tcpACK, nil, mac), 60),
		icmp6Error(mac, 1, 0, nat6Router, fxNode6, seg6(toBE, tcpACK, nil, mac), 60),
		seg6(c, tcpACK, bytes.Repeat([]byte("b"), 1400), mac, ext6{typ: 60, body: make([]byte, 6)}),
	} {
		f.Add(fr)
	}
	// As FuzzLBNAT: the namespace lives as long as its thread.
	if out, err := exec.Command("ip", "netns", "del", x.f.Name).CombinedOutput(); err != nil {
		f.Fatalf("ip netns del %s: %v: %s", x.f.Name, err, out)
	}
	backends := map[netip.Addr]bool{fxBackend6: true, fxSmallMTU6: true}
	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) < 14 {
			frame = append(frame, make([]byte, 14-len(frame))...)
		}
		if len(frame) > 3000 {
			frame = frame[:3000]
		}
		frame = append([]byte(nil), frame...)
		frame[12], frame[13] = 0x86, 0xdd
		v, out := x.f.Run(t, x.d.objs.XlbLbProg, frame)
		switch v {
		case xdpDrop:
		case xdpPass:
			if !bytes.Equal(out, frame) {
				t.Fatalf("passed a changed frame:\n in %x\nout %x", frame, out)
			}
		case xdpTX, xdpRedirect:
			checkNAT6Emitted(t, frame, out, backends)
		default:
			t.Fatalf("verdict %d", v)
		}
	})
}

// checkNAT6Emitted asserts that a frame the IPv6 NAT path sent is what a
// translation of in may be (FuzzLBNAT6).
func checkNAT6Emitted(t *testing.T, in, out []byte, backends map[netip.Addr]bool) {
	t.Helper()
	if len(out) < 54 || binary.BigEndian.Uint16(out[12:]) != 0x86dd || out[14]>>4 != 6 {
		t.Fatalf("emitted frame is not IPv6: %x", out)
	}
	n := int(binary.BigEndian.Uint16(out[18:]))
	if 54+n > len(out) {
		t.Fatalf("emitted payload length %d beyond the frame: %x", n, out)
	}
	src, dst := netip.AddrFrom16([16]byte(out[22:38])), netip.AddrFrom16([16]byte(out[38:54]))
	valid := func(f []byte) bool {
		off, proto := l4Of(f)
		end := 54 + int(binary.BigEndian.Uint16(f[18:]))
		if off > end || end > len(f) {
			return false
		}
		return l6Csum(f[22:38], f[38:54], proto, f[off:end]) == 0
	}
	off, proto := l4Of(out)
	if proto == 58 && off < len(out) && out[off] == 2 && src == fxNode6 && valid(out) {
		return // Packet Too Big from the node
	}
	if valid(in) != valid(out) {
		t.Fatalf("checksum valid %v became %v:\n in %x\nout %x", valid(in), valid(out), in, out)
	}
	if !(backends[dst] || src == nat6VIP) {
		t.Fatalf("translated %v -> %v: neither to a backend nor from the VIP:\n in %x\nout %x", src, dst, in, out)
	}
}
