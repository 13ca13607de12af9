package backendhost

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// IPv6 addresses of the translation fixtures.
var (
	fxClient6 = netip.MustParseAddr("fd00:1::2")
	fxLB6     = netip.MustParseAddr("fd00:2::1")
	fxNode6   = netip.MustParseAddr("fd00:2::2")
	fxVIP6    = netip.MustParseAddr("fd00:99::1")
	fxPod6    = netip.MustParseAddr("fd00:244::2")
	fxFarPod6 = netip.MustParseAddr("fd00:244:2::2")
	// IPv6 translations beside fxEntries.
	fxEntries6 = []NATEntry{
		{fxVIP6, 80, wire.ProtoTCP, fxPod6, 8080},
		{fxVIP6, 53, wire.ProtoUDP, fxPod6, 5353},
	}
)

// newNATFixture6 is newNATFixture with fxEntries6 too, and the node's
// IPv6 address and VIP for the host mode beside them.
func newNATFixture6(t *testing.T) *natFixture {
	t.Helper()
	f := newNATFixture(t, NATOptions{})
	if _, err := f.nat.apply(append(append([]NATEntry{}, fxEntries...), fxEntries6...), NATOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.objs.HostAddrs.Put(wire.AddrOf(fxNode6), uint8(1)); err != nil {
		t.Fatal(err)
	}
	if err := f.objs.DecapVips.Put(wire.AddrOf(fxVIP6), uint8(1)); err != nil {
		t.Fatal(err)
	}
	return f
}

// ethOf frames a datagram of either family.
func ethOf(d []byte) []byte {
	f := eth(d)
	if d[0]>>4 == 6 {
		binary.BigEndian.PutUint16(f[12:], 0x86dd)
	}
	return f
}

// checkDatagram6 verifies the TCP or UDP checksum of an IPv6 datagram.
func checkDatagram6(t *testing.T, d []byte) {
	t.Helper()
	if len(d) < 40 || d[0]>>4 != 6 {
		t.Fatalf("no IPv6 datagram: %x", d)
	}
	l4 := d[40 : 40+int(binary.BigEndian.Uint16(d[4:]))]
	src := netip.AddrFrom16([16]byte(d[8:24]))
	dst := netip.AddrFrom16([16]byte(d[24:40]))
	if c := ^uint16(sum16(l4, pseudoSum6(src, dst, d[6], len(l4)))); c != 0 {
		t.Errorf("transport checksum invalid (off by %#04x)", c)
	}
}

// icmp6Error builds an ICMPv6 error (type, code) from src to dst quoting
// quote (an IPv6 datagram, cut to its header and n bytes more).
func icmp6Error(src, dst netip.Addr, typ, code uint8, quote []byte, n int) []byte {
	q := quote[:min(len(quote), 40+n)]
	m := make([]byte, 8, 8+len(q))
	m[0], m[1] = typ, code
	if typ == 2 {
		binary.BigEndian.PutUint32(m[4:], 1400)
	}
	m = append(m, q...)
	binary.BigEndian.PutUint16(m[2:], ^uint16(sum16(m, pseudoSum6(src, dst, 58, len(m)))))
	return append(ipv6Header(src, dst, 58, len(m)), m...)
}

// TestNATForward6: an IPv6 packet tunnelled over IPv6 to a local IPv6
// pod reaches it as client -> pod:targetPort, its checksum right, and its
// flow is recorded; what cannot be translated is dropped under one
// counter, and an IPv6 VIP is never translated for an IPv4 pod, nor an
// IPv4 one for an IPv6 pod.
func TestNATForward6(t *testing.T) {
	f := newNATFixture6(t)
	get := []byte("GET / HTTP/1.0\r\n\r\n")
	tcpVIP := func(cport, dport uint16) ip6Seg {
		return ip6Seg{src: fxClient6, dst: fxVIP6, sport: cport, dport: dport, proto: 6, seq: 1, flags: 0x18, payload: get}
	}
	tcpPod := func(cport uint16) ip6Seg {
		return ip6Seg{src: fxClient6, dst: fxPod6, sport: cport, dport: 8080, proto: 6, seq: 1, flags: 0x18, payload: get}
	}
	udpVIP := ip6Seg{src: fxClient6, dst: fxVIP6, sport: 40053, dport: 53, proto: 17, payload: []byte("\x12\x34query")}
	udpPod := ip6Seg{src: fxClient6, dst: fxPod6, sport: 40053, dport: 5353, proto: 17, payload: []byte("\x12\x34query")}
	gue6 := []byte{0, 41, 0, 0}
	// Next headers the translation does not read past.
	withNH := func(d []byte, nh uint8) []byte {
		d = append([]byte{}, d...)
		d[6] = nh
		return d
	}
	cut := tcpVIP(40000, 80).bytes()
	binary.BigEndian.PutUint16(cut[4:], 2000) // payload beyond the outer datagram
	toPod := encap(tcpVIP(40000, 80).bytes(), fxLB6, fxPod6, nil, false)
	outerLonger := append([]byte{}, toPod...)
	binary.BigEndian.PutUint16(outerLonger[4:], uint16(len(toPod)-40+1))

	// A Packet Too Big a router on the reply path sends to the VIP about
	// a reply, and what the pod must see of it; an echo request, which
	// is no error.
	router6 := netip.MustParseAddr("fd00:9::1")
	reply := ip6Seg{src: fxVIP6, dst: fxClient6, sport: 80, dport: 40000, proto: 6, flags: 0x18, payload: make([]byte, 1400)}
	podReply := ip6Seg{src: fxPod6, dst: fxClient6, sport: 8080, dport: 40000, proto: 6, flags: 0x18, payload: make([]byte, 1400)}
	tooBig := icmp6Error(router6, fxVIP6, 2, 0, reply.bytes(), 8)
	tooBigPod := icmp6Error(router6, fxPod6, 2, 0, podReply.bytes(), 8)
	echo := icmp6Error(fxClient6, fxVIP6, 128, 0, nil, 0)

	cases := []struct {
		name    string
		frame   []byte
		verdict uint32
		want    []byte // the datagram handed to the stack; nil: the frame unchanged
		counts  []string
	}{
		{"ICMPv6 Packet Too Big about a reply", encap(tooBig, fxLB6, fxPod6, nil, false), xdpPass, tooBigPod, []string{"decap_ipip", "nat_fwd_icmp"}},
		{"ICMPv6 echo request to the VIP", encap(echo, fxLB6, fxPod6, nil, false), xdpDrop, nil, []string{"nat_drop_proto"}},
		{"ICMPv6 error whose quote ends before the ports", encap(icmp6Error(router6, fxVIP6, 2, 0, reply.bytes(), 2), fxLB6, fxPod6, nil, false), xdpDrop, nil, []string{"nat_drop_malformed"}},
		{"IPv6-in-IPv6 TCP", encap(tcpVIP(40000, 80).bytes(), fxLB6, fxPod6, nil, false), xdpPass, tcpPod(40000).bytes(), []string{"decap_ipip", "nat_fwd"}},
		{"GUE/IPv6 UDP, after destination options", encap(udpVIP.bytes(), fxLB6, fxPod6, gue6, true), xdpPass, udpPod.bytes(), []string{"decap_gue", "nat_fwd"}},
		{"host mode still works beside it", encap(tcpVIP(40000, 80).bytes(), fxLB6, fxNode6, nil, false), xdpPass, tcpVIP(40000, 80).bytes(), []string{"decap_ipip"}},
		{"pod on another node", encap(tcpVIP(40000, 80).bytes(), fxLB6, fxFarPod6, nil, false), xdpPass, nil, []string{"pass_not_ours"}},
		{"plain TCP to a local pod", tcpPod(40000).bytes(), xdpPass, nil, []string{"pass_not_ours"}},
		{"unknown VIP port", encap(tcpVIP(40000, 443).bytes(), fxLB6, fxPod6, nil, false), xdpDrop, nil, []string{"nat_drop_no_entry"}},
		{"IPv4 VIP for an IPv6 pod", encap(ipPkt{src: fxClient, dst: fxVIP1, sport: 1, dport: 80, proto: 6}.bytes(), fxLB6, fxPod6, nil, false), xdpDrop, nil, []string{"nat_drop_no_entry"}},
		{"IPv6 VIP for an IPv4 pod", encap(tcpVIP(40000, 80).bytes(), fxLB, fxPod1, nil, false), xdpDrop, nil, []string{"nat_drop_no_entry"}},
		{"inner ICMPv6", encap(withNH(tcpVIP(40000, 80).bytes(), 58), fxLB6, fxPod6, nil, false), xdpDrop, nil, []string{"nat_drop_proto"}},
		{"inner destination options", encap(withNH(tcpVIP(40000, 80).bytes(), 60), fxLB6, fxPod6, nil, false), xdpDrop, nil, []string{"nat_drop_proto"}},
		{"inner fragment", encap(withNH(tcpVIP(40000, 80).bytes(), 44), fxLB6, fxPod6, nil, false), xdpDrop, nil, []string{"nat_drop_fragment"}},
		{"inner length beyond the outer datagram", encap(cut, fxLB6, fxPod6, nil, false), xdpDrop, nil, []string{"nat_drop_malformed"}},
		{"outer length beyond the frame", outerLonger, xdpDrop, nil, []string{"nat_drop_malformed"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			frame := ethOf(c.frame)
			var v uint32
			var out []byte
			f.expectCounts(t, c.counts, func() { v, out = run(t, f.objs.Decap, frame) })
			if v != c.verdict {
				t.Fatalf("verdict %d, want %d", v, c.verdict)
			}
			if v != xdpPass {
				return
			}
			want := frame
			if c.want != nil {
				want = ethOf(c.want)
				checkDatagram6(t, out[14:])
			}
			if !bytes.Equal(out, want) {
				t.Errorf("output\n got %x\nwant %x", out, want)
			}
		})
	}
	for _, c := range []struct {
		port, cport uint16
		proto       uint8
		want        wire.NATVIP
	}{{8080, 40000, 6, vipOf(fxVIP6, 80)}, {5353, 40053, 17, vipOf(fxVIP6, 53)}} {
		if got, ok := f.flow(t, fxPod6, c.port, fxClient6, c.cport, c.proto); !ok || got != c.want {
			t.Errorf("flow record %v:%d <- client:%d: %v (found %v), want %v", fxPod6, c.port, c.cport, got, ok, c.want)
		}
	}
}

// TestNATReply6: an IPv6 pod's reply to a translated flow leaves as
// VIP:port, its checksum right; anything else from it leaves untouched.
func TestNATReply6(t *testing.T) {
	f := newNATFixture6(t)
	for _, fw := range [][]byte{
		encap(ip6Seg{src: fxClient6, dst: fxVIP6, sport: 40000, dport: 80, proto: 6, flags: 0x02}.bytes(), fxLB6, fxPod6, nil, false),
		encap(ip6Seg{src: fxClient6, dst: fxVIP6, sport: 40053, dport: 53, proto: 17}.bytes(), fxLB6, fxPod6, nil, false),
	} {
		if v, _ := run(t, f.objs.Decap, ethOf(fw)); v != xdpPass {
			t.Fatalf("forward packet: verdict %d", v)
		}
	}
	body := []byte("HTTP/1.0 200 OK\r\n\r\npod")
	tcp := func(src netip.Addr, sport, cport uint16) []byte {
		return ip6Seg{src: src, dst: fxClient6, sport: sport, dport: cport, proto: 6, seq: 7, ack: 2, flags: 0x18, payload: body}.bytes()
	}
	udp := func(src netip.Addr, sport, cport uint16) []byte {
		return ip6Seg{src: src, dst: fxClient6, sport: sport, dport: cport, proto: 17, payload: []byte("answer")}.bytes()
	}
	frag := tcp(fxPod6, 8080, 40000)
	frag[6] = 44
	icmp6 := tcp(fxPod6, 8080, 40000)
	icmp6[6] = 58
	// ICMPv6 errors about the client's translated packet: from the pod
	// (port unreachable), and from the node itself.
	toPod := ip6Seg{src: fxClient6, dst: fxPod6, sport: 40053, dport: 5353, proto: 17, payload: []byte("q")}.bytes()
	// What the client must see quoted: its packet to VIP:53, the quoted
	// transport checksum left as it was (no stack checks it).
	toVIP := append([]byte{}, toPod...)
	copy(toVIP[24:40], fxVIP6.AsSlice())
	binary.BigEndian.PutUint16(toVIP[42:], 53)
	toPodNoFlow := ip6Seg{src: fxClient6, dst: fxPod6, sport: 50000, dport: 5353, proto: 17}.bytes()

	for _, c := range []struct {
		name   string
		frame  []byte
		want   []byte // nil: unchanged
		counts []string
	}{
		{"TCP reply", tcp(fxPod6, 8080, 40000), tcp(fxVIP6, 80, 40000), []string{"nat_rev_flow"}},
		{"port unreachable from the pod", icmp6Error(fxPod6, fxClient6, 1, 4, toPod, 100), icmp6Error(fxVIP6, fxClient6, 1, 4, toVIP, 100), []string{"nat_rev_icmp"}},
		{"an error from the node keeps its source", icmp6Error(fxNode6, fxClient6, 3, 0, toPod, 100), icmp6Error(fxNode6, fxClient6, 3, 0, toVIP, 100), []string{"nat_rev_icmp"}},
		{"an error about a packet without a flow", icmp6Error(fxPod6, fxClient6, 1, 4, toPodNoFlow, 100), nil, []string{"nat_rev_untracked"}},
		{"UDP reply", udp(fxPod6, 5353, 40053), udp(fxVIP6, 53, 40053), []string{"nat_rev_flow"}},
		{"reply to a direct client (a health check)", tcp(fxPod6, 8080, 50000), nil, []string{"nat_rev_untracked"}},
		{"fragment from a pod", frag, nil, []string{"nat_rev_fragment"}},
		{"ICMPv6 from a pod", icmp6, nil, nil},
		{"from the node itself", tcp(fxNode6, 8080, 40000), nil, nil},
		{"from a pod without translations", tcp(fxFarPod6, 8080, 40000), nil, nil},
		{"from an IPv4-mapped address", tcp(netip.AddrFrom16(fxPod1.As16()), 8080, 40000), nil, nil},
		{"truncated", tcp(fxPod6, 8080, 40000)[:40+10], nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			frame := ethOf(c.frame)
			var v uint32
			var out []byte
			f.expectCounts(t, c.counts, func() { v, out = run(t, f.objs.Reply, frame) })
			if v != tcNext {
				t.Fatalf("verdict %#x, want TC_NEXT", v)
			}
			want := frame
			if c.want != nil {
				want = ethOf(c.want)
				checkDatagram6(t, out[14:])
			}
			if !bytes.Equal(out, want) {
				t.Errorf("output\n got %x\nwant %x", out, want)
			}
		})
	}
}
