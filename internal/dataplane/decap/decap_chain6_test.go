package decap

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/dataplane/lb"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// newChainFixture6 is the daisy-chaining fixture with the IPv6 VIP and
// client local too, a listener on [VIP]:80 and a connection to it from
// the client, whose client port it returns.
func newChainFixture6(t *testing.T) (*fixtureNS, *backendObjects, uint16) {
	t.Helper()
	f, objs := newChainFixture(t)
	for _, a := range []netip.Addr{fxVIP6, fxClient6} {
		ipcmd(t, "-n", f.Name, "addr", "add", a.String()+"/128", "dev", "lo")
	}
	var ln net.Listener
	var c net.Conn
	err := f.Runner.Do(func() error {
		var err error
		if ln, err = net.Listen("tcp6", netip.AddrPortFrom(fxVIP6, 80).String()); err != nil {
			return err
		}
		d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(fxClient6, 0)), Timeout: 5 * time.Second}
		c, err = d.Dial("tcp6", netip.AddrPortFrom(fxVIP6, 80).String())
		return err
	})
	if ln != nil {
		t.Cleanup(func() { ln.Close() })
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return f, objs, uint16(c.LocalAddr().(*net.TCPAddr).Port)
}

// hintGUE6 is hintGUE's header saying IPv6 inside.
func hintGUE6(prev, prev2 netip.Addr, changed, generation uint32) []byte {
	h := hintGUE(prev, prev2, changed, generation)
	h[1] = nhIPv6
	return h
}

// TestDecapChainIPv6: the hint of a GUE/IPv4 packet with IPv6 inside is
// followed as for IPv4: a SYN or a packet of a local connection is
// delivered, one without goes on to the previous owner (the inner packet
// untouched), a stale one is dropped, a forged one is refused. Over an
// IPv6 outer header, whose hint names IPv4 previous owners, it is not
// followed.
func TestDecapChainIPv6(t *testing.T) {
	f, objs, conn := newChainFixture6(t)
	now := uint32(time.Now().Unix())
	var none netip.Addr
	tcp6 := func(sport, dport uint16, flags uint8) []byte {
		return ethFrame(f.MAC, seg{src: fxClient6, dst: fxVIP6, sport: sport, dport: dport, proto: nhTCP, seq: 1000, ack: 1, flags: flags}.datagram())
	}
	ack := func(sport, dport uint16) []byte { return tcp6(sport, dport, 0x10) }
	// gue wraps an IPv6 frame in GUE/IPv4 to this host.
	gue := func(inner, hint []byte) []byte {
		out := encapsulate(inner, fxBackend, wire.GUEPort, hint)
		out[12], out[13] = 0x08, 0x00
		return out
	}
	fresh := hintGUE6(chainPrevTX, none, now, now)
	delivered := func(name string, inner, hint []byte, stat string) chainCase {
		return chainCase{name: name, frame: gue(inner, hint), verdict: xdpPass, want: inner, decap: "decap_gue", chain: stat}
	}
	dropped := func(name string, frame []byte, stat string) chainCase {
		return chainCase{name: name, frame: frame, verdict: xdpDrop, chain: stat}
	}
	for _, c := range []chainCase{
		delivered("SYN", tcp6(40000, 80, 0x02), fresh, "syn"),
		delivered("established connection", ack(conn, 80), fresh, "socket"),
		delivered("listener only, no previous owner", ack(40001, 80), hintGUE6(none, none, now, now), "no_socket"),
		{name: "listener only, fresh hint: chained", frame: gue(ack(40001, 80), fresh), verdict: xdpTX,
			chain: "chained", chainedTo: chainPrevTX, dstMAC: fxRouterMAC, srcMAC: f.MAC},
		{name: "two previous owners: to prev, prev2 travels on", frame: gue(ack(40001, 80), hintGUE6(chainPrevTX, chainPrevRedir, now, now)),
			verdict: xdpTX, chain: "chained", chainedTo: chainPrevTX, next: chainPrevRedir, dstMAC: fxRouterMAC, srcMAC: f.MAC},
		delivered("newest generation, no socket", ack(40002, 8080), hintGUE6(none, none, now, now), "no_socket"),
		dropped("older generation, no socket", gue(ack(40002, 8080), hintGUE6(none, none, now, now-1)), "stale_drop"),
		dropped("from an unknown source", fromSource(gue(ack(40001, 80), fresh), chainStranger), "chain_drop_untrusted_source"),
		dropped("to an unknown previous owner", gue(ack(40001, 80), hintGUE6(chainUnknown, none, now, now)), "chain_drop_unknown_owner"),
		delivered("UDP with a hint", ethFrame(f.MAC, seg{src: fxClient6, dst: fxVIP6, sport: 5353, dport: 53, proto: nhUDP}.datagram()), fresh, ""),
		delivered("no hint", ack(40001, 80), gue6, ""),
		{name: "GUE/IPv6: the hint is not followed", frame: ethFrame(f.MAC, tunnel{dst: fxBackend6, gue: fresh}.wrap(ack(40001, 80)[14:])),
			verdict: xdpPass, want: ack(40001, 80), decap: "decap_gue"},
	} {
		t.Run(c.name, func(t *testing.T) { runChainCase(t, f, objs, c) })
	}
}

// IPv6 previous owners in the fixture namespace (prepareChain6): one
// whose next hop is on the ingress interface (XDP_TX), a second one
// there, one whose neighbour is never resolved; and one in no set.
var (
	chainPrev6TX      = netip.MustParseAddr("fd00:9::7")
	chainPrev6TX2     = netip.MustParseAddr("fd00:9::8")
	chainPrev6NoNeigh = netip.MustParseAddr("fd00:6::2")
	chainUnknown6     = netip.MustParseAddr("fd00:9::99")
	chainStranger6    = netip.MustParseAddr("fd00:1::99")
)

// chainSets6 is chainSets with the IPv6 xlb node and previous owners.
var chainSets6 = Chain{Window: chainWindow,
	From: append([]netip.Prefix{netip.PrefixFrom(fxNode6, 128)}, chainSets.From...),
	To: append([]netip.Prefix{netip.PrefixFrom(chainPrev6TX, 128), netip.PrefixFrom(chainPrev6TX2, 128),
		netip.PrefixFrom(chainPrev6NoNeigh, 128)}, chainSets.To...)}

// prepareChain6 gives the fixture namespace this host's IPv6 address on
// veth0 with a router (fd00:3::1, a permanent neighbour) towards
// fd00:9::/64, and fd00:6::/64 via a neighbour never resolved; veth0
// forwards IPv6 as `xlb backend` makes it when it chains; the chaining
// sets are chainSets6.
func prepareChain6(t testing.TB, f *fixtureNS, objs *backendObjects) {
	t.Helper()
	n := f.Name
	ipcmd(t, "-n", n, "addr", "add", fxBackend6.String()+"/64", "dev", "veth0", "nodad")
	ipcmd(t, "-n", n, "neigh", "add", "fd00:3::1", "lladdr", fxRouterMAC.String(), "dev", "veth0", "nud", "permanent")
	ipcmd(t, "-n", n, "route", "add", "fd00:9::/64", "via", "fd00:3::1")
	ipcmd(t, "-n", n, "route", "add", "fd00:6::/64", "via", "fd00:3::9")
	if err := f.Runner.Do(func() error { return lb.PrepareInterface6("veth0") }); err != nil {
		t.Fatal(err)
	}
	setChainT(t, objs, chainSets6)
}

// hint6GUE is the GUE header (variant 0, hlen 10) with the daisy-chain
// hint an xlb node sends to an IPv6 backend: 16-byte owners (invalid:
// none), when the slot changed, the generation; inner says the inner
// packet's GUE protocol.
func hint6GUE(inner uint8, prev, prev2 netip.Addr, changed, generation uint32) []byte {
	h := make([]byte, 44)
	h[0], h[1] = 10, inner
	for i, a := range []netip.Addr{prev, prev2} {
		if a.IsValid() {
			b := a.As16()
			copy(h[4+16*i:], b[:])
		}
	}
	binary.BigEndian.PutUint32(h[36:], changed)
	binary.BigEndian.PutUint32(h[40:], generation)
	return h
}

// checkChained6 verifies a frame the program sent on over IPv6: new MAC
// addresses (or, through the stack, the old ones and the xlb node as
// source), outer source this host's IPv6 address, destination the
// previous owner, hop limit 64, the outer extension headers and UDP
// header as they came but a zero checksum, the hint's owners rewritten
// (prev the next candidate, prev2 none) and everything else, the inner
// packet above all, as it came.
func checkChained6(t *testing.T, out []byte, c chainCase) {
	t.Helper()
	in := c.frame
	if len(out) != len(in) {
		t.Fatalf("length %d, want %d", len(out), len(in))
	}
	wantDst, wantSrc, wantFrom := c.dstMAC, c.srcMAC, fxBackend6
	if c.from.IsValid() {
		wantFrom = c.from
	}
	if c.viaStack {
		wantDst, wantSrc, wantFrom = in[0:6], in[6:12], netip.AddrFrom16([16]byte(in[22:38]))
	}
	if !bytes.Equal(out[0:6], wantDst) || !bytes.Equal(out[6:12], wantSrc) || !bytes.Equal(out[12:14], in[12:14]) {
		t.Errorf("MACs %x -> %x, want %x -> %x", out[6:12], out[0:6], wantSrc, wantDst)
	}
	ip := out[14 : 14+40]
	if src := netip.AddrFrom16([16]byte(ip[8:24])); src != wantFrom {
		t.Errorf("outer source %v, want %v", src, wantFrom)
	}
	if dst := netip.AddrFrom16([16]byte(ip[24:40])); dst != c.chainedTo {
		t.Errorf("outer destination %v, want %v", dst, c.chainedTo)
	}
	if ip[7] != 64 {
		t.Errorf("outer hop limit %d, want 64", ip[7])
	}
	if !bytes.Equal(ip[:7], in[14:21]) {
		t.Errorf("outer header %x, want %x (but addresses and hop limit)", ip[:8], in[14:22])
	}
	// The UDP header follows the outer extension headers, unchanged.
	off, nh := 14+40, ip[6]
	for nh == nhHop || nh == nhDst {
		nh, off = out[off], off+(int(out[off+1])+1)*8
	}
	if !bytes.Equal(out[14+40:off], in[14+40:off]) {
		t.Errorf("outer extension headers changed")
	}
	udp := out[off : off+8]
	if !bytes.Equal(udp[:6], in[off:off+6]) || udp[6] != 0 || udp[7] != 0 {
		t.Errorf("UDP header %x, want %x with checksum 0", udp, in[off:off+8])
	}
	gue := out[off+8 : off+8+44]
	want := append([]byte{}, in[off+8:off+12]...)
	next := make([]byte, 32)
	if c.next.IsValid() {
		b := c.next.As16()
		copy(next, b[:])
	}
	want = append(append(want, next...), in[off+8+36:off+8+44]...)
	if !bytes.Equal(gue, want) {
		t.Errorf("GUE header and hint %x, want %x (prev %v, prev2 none, changed and generation kept)", gue, want, c.next)
	}
	if !bytes.Equal(out[off+52:], in[off+52:]) {
		t.Errorf("inner packet changed:\n got %x\nwant %x", out[off+52:], in[off+52:])
	}
}

// TestDecapChainOverIPv6: a tunnel over IPv6 (an IPv6 backend's) with
// the 40-byte hint is followed for an inner packet of either family: a
// SYN or a packet of a local connection is delivered; one without goes
// on to the IPv6 previous owner, the outer IPv6 header re-addressed from
// this host and the hint rewritten, or through the stack when the next
// hop is unresolved; a stale one is dropped; a forged one (unknown
// source or owner) is dropped and counted. The IPv4 hint over IPv6, and
// the IPv6 hint over IPv4, which no xlb node sends, are not followed.
func TestDecapChainOverIPv6(t *testing.T) {
	f, objs, conn6 := newChainFixture6(t)
	prepareChain6(t, f, objs)
	conn4 := dialVIP(t, f)
	now := uint32(time.Now().Unix())
	var none netip.Addr
	tcp6 := func(sport, dport uint16, flags uint8) []byte {
		return seg{src: fxClient6, dst: fxVIP6, sport: sport, dport: dport, proto: nhTCP, seq: 1000, ack: 1, flags: flags}.datagram()
	}
	tcp4 := func(sport, dport uint16, flags uint8) []byte {
		return seg{src: fxClient, dst: fxVIP, sport: sport, dport: dport, proto: nhTCP, seq: 1000, ack: 1, flags: flags}.datagram()
	}
	// over6 wraps an inner datagram in GUE/IPv6 to this host with hint.
	over6 := func(inner, hint []byte, ext ...extHdr) []byte {
		return ethFrame(f.MAC, tunnel{dst: fxBackend6, gue: hint, ext: ext}.wrap(inner))
	}
	fresh := func(inner uint8) []byte { return hint6GUE(inner, chainPrev6TX, none, now, now) }
	delivered := func(name string, inner, hint []byte, stat string) chainCase {
		return chainCase{name: name, frame: over6(inner, hint), verdict: xdpPass, want: ethFrame(f.MAC, inner), decap: "decap_gue", chain: stat}
	}
	chained := func(name string, frame []byte, to, next netip.Addr) chainCase {
		return chainCase{name: name, frame: frame, verdict: xdpTX, chain: "chained", chainedTo: to, next: next, dstMAC: fxRouterMAC, srcMAC: f.MAC}
	}
	dropped := func(name string, frame []byte, stat string) chainCase {
		return chainCase{name: name, frame: frame, verdict: xdpDrop, chain: stat}
	}
	stranger := over6(tcp6(40001, 80, 0x10), fresh(nhIPv6))
	copy(stranger[14+8:14+24], chainStranger6.AsSlice())
	for _, c := range []chainCase{
		delivered("SYN", tcp6(40000, 80, 0x02), fresh(nhIPv6), "syn"),
		delivered("established connection", tcp6(conn6, 80, 0x10), fresh(nhIPv6), "socket"),
		delivered("IPv4 inside, established connection", tcp4(conn4, 80, 0x10), fresh(nhIPIP), "socket"),
		delivered("listener only, no previous owner", tcp6(40001, 80, 0x10), hint6GUE(nhIPv6, none, none, now, now), "no_socket"),
		chained("listener only, fresh hint: chained", over6(tcp6(40001, 80, 0x10), fresh(nhIPv6)), chainPrev6TX, none),
		chained("IPv4 inside: chained", over6(tcp4(40001, 80, 0x10), fresh(nhIPIP)), chainPrev6TX, none),
		chained("two previous owners: to prev, prev2 travels on",
			over6(tcp6(40001, 80, 0x10), hint6GUE(nhIPv6, chainPrev6TX, chainPrev6TX2, now, now)), chainPrev6TX, chainPrev6TX2),
		chained("prev is this host: to prev2", over6(tcp6(40001, 80, 0x10), hint6GUE(nhIPv6, fxBackend6, chainPrev6TX2, now, now)), chainPrev6TX2, none),
		chained("after destination options", over6(tcp6(40001, 80, 0x10), fresh(nhIPv6), extHdr{nhDst, 16}), chainPrev6TX, none),
		{name: "unresolved next hop: through the stack", frame: over6(tcp6(40001, 80, 0x10), hint6GUE(nhIPv6, chainPrev6NoNeigh, none, now, now)),
			verdict: xdpPass, chain: "chained", also: "chain_no_neighbour", chainedTo: chainPrev6NoNeigh, viaStack: true},
		delivered("window over", tcp6(40001, 80, 0x10), hint6GUE(nhIPv6, chainPrev6TX, none, now-uint32(chainWindow/time.Second)-5, now), "no_socket"),
		delivered("newest generation, no socket", tcp6(40002, 8080, 0x10), hint6GUE(nhIPv6, none, none, now, now), "no_socket"),
		dropped("older generation, no socket", over6(tcp6(40002, 8080, 0x10), hint6GUE(nhIPv6, none, none, now, now-1)), "stale_drop"),
		dropped("from an unknown source", stranger, "chain_drop_untrusted_source"),
		dropped("to an unknown previous owner", over6(tcp6(40001, 80, 0x10), hint6GUE(nhIPv6, chainUnknown6, none, now, now)), "chain_drop_unknown_owner"),
		delivered("the IPv4 hint over IPv6 is not followed", tcp6(40001, 80, 0x10), hintGUE6(chainPrevTX, none, now, now), ""),
		{name: "the IPv6 hint over IPv4 is not followed", frame: ethFrame(f.MAC, tunnel{dst: fxBackend, gue: fresh(nhIPv6)}.wrap(tcp6(40001, 80, 0x10))),
			verdict: xdpPass, want: ethFrame(f.MAC, tcp6(40001, 80, 0x10)), decap: "decap_gue"},
	} {
		t.Run(c.name, func(t *testing.T) { runChainCase(t, f, objs, c) })
	}
}
