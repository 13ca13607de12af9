package decap

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// IPv6 addresses of the fixture: this host's (a tunnel's outer
// destination), a VIP, the client and the xlb node that sends.
var (
	fxBackend6 = netip.MustParseAddr("fd00:3::2")
	fxVIP6     = netip.MustParseAddr("fd00:99::1")
	fxClient6  = netip.MustParseAddr("fd00:2::2")
	fxNode6    = netip.MustParseAddr("fd00:1::2")
	fxOther6   = netip.MustParseAddr("fd00:4::2")
)

// Ethernet types and the IPv6 next headers the tests build.
const (
	ethIPv4 = 0x0800
	ethIPv6 = 0x86dd
	nhHop   = 0
	nhIPIP  = 4
	nhTCP   = 6
	nhUDP   = 17
	nhIPv6  = 41
	nhRoute = 43
	nhFrag  = 44
	nhICMP6 = 58
	nhDst   = 60
)

// sum16 is the one's-complement sum of b added to s, folded, not
// inverted.
func sum16(b []byte, s uint32) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = (s & 0xffff) + s>>16
	}
	return s
}

// l4Csum is the TCP, UDP or ICMPv6 checksum of l4 (its checksum field
// zero) between src and dst, of either family, over the pseudo-header.
func l4Csum(src, dst netip.Addr, proto uint8, l4 []byte) uint16 {
	var ph []byte
	if src.Is4() {
		s, d := src.As4(), dst.As4()
		ph = append(append(append(ph, s[:]...), d[:]...), 0, proto, byte(len(l4)>>8), byte(len(l4)))
	} else {
		s, d := src.As16(), dst.As16()
		ph = append(append(ph, s[:]...), d[:]...)
		ph = binary.BigEndian.AppendUint32(ph, uint32(len(l4)))
		ph = append(ph, 0, 0, 0, proto)
	}
	c := ^uint16(sum16(l4, sum16(ph, 0)))
	if c == 0 && proto == nhUDP {
		c = 0xffff
	}
	return c
}

// seg is a TCP segment or UDP datagram of either family.
type seg struct {
	src, dst     netip.Addr
	sport, dport uint16
	proto        uint8
	seq, ack     uint32
	flags        uint8 // TCP flags; 0: ACK
	payload      []byte
}

// l4 is the transport header and payload, with its checksum.
func (s seg) l4() []byte {
	var l4 []byte
	off := 6
	if s.proto == nhUDP {
		l4 = make([]byte, 8+len(s.payload))
		binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
		copy(l4[8:], s.payload)
	} else {
		l4 = make([]byte, 20+len(s.payload))
		binary.BigEndian.PutUint32(l4[4:], s.seq)
		binary.BigEndian.PutUint32(l4[8:], s.ack)
		l4[12] = 5 << 4
		l4[13] = s.flags
		if l4[13] == 0 {
			l4[13] = 0x10
		}
		binary.BigEndian.PutUint16(l4[14:], 65535)
		copy(l4[20:], s.payload)
		off = 16
	}
	binary.BigEndian.PutUint16(l4[0:], s.sport)
	binary.BigEndian.PutUint16(l4[2:], s.dport)
	binary.BigEndian.PutUint16(l4[off:], l4Csum(s.src, s.dst, s.proto, l4))
	return l4
}

// datagram is the IP datagram of s, of its addresses' family.
func (s seg) datagram() []byte {
	return ipDatagram(s.src, s.dst, s.proto, nil, s.l4())
}

// ipDatagram wraps payload in an IPv4 or IPv6 header from src to dst
// (hop limit or TTL 64) whose protocol, or whose last IPv6 extension
// header's next header, is proto. ext are IPv6 extension headers, each
// its type and its length (a multiple of 8, the options Pad1).
func ipDatagram(src, dst netip.Addr, proto uint8, ext []extHdr, payload []byte) []byte {
	if src.Is4() {
		ip := make([]byte, 20, 20+len(payload))
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(payload)))
		binary.BigEndian.PutUint16(ip[4:], 0x1234)
		ip[6] = 0x40 // DF
		ip[8] = 64
		ip[9] = proto
		s, d := src.As4(), dst.As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		binary.BigEndian.PutUint16(ip[10:], csum(ip))
		return append(ip, payload...)
	}
	var exts []byte
	for i, e := range ext {
		h := make([]byte, e.len)
		h[0] = proto
		if i+1 < len(ext) {
			h[0] = ext[i+1].typ
		}
		h[1] = byte(e.len/8 - 1)
		exts = append(exts, h...)
	}
	ip := make([]byte, 40, 40+len(exts)+len(payload))
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], uint16(len(exts)+len(payload)))
	ip[6] = proto
	if len(ext) > 0 {
		ip[6] = ext[0].typ
	}
	ip[7] = 64
	s, d := src.As16(), dst.As16()
	copy(ip[8:], s[:])
	copy(ip[24:], d[:])
	return append(append(ip, exts...), payload...)
}

type extHdr struct {
	typ uint8
	len int
}

// ethFrame frames a datagram to the fixture's MAC with the ethertype of
// its version.
func ethFrame(mac net.HardwareAddr, datagram []byte) []byte {
	f := make([]byte, 14, 14+len(datagram))
	copy(f, mac)
	copy(f[6:], srcMAC)
	et := uint16(ethIPv4)
	if len(datagram) > 0 && datagram[0]>>4 == 6 {
		et = ethIPv6
	}
	binary.BigEndian.PutUint16(f[12:], et)
	return append(f, datagram...)
}

// tunnel is an encapsulation: its outer destination (its family that of
// the outer header, from the xlb node of that family), IP-in-IP without
// gue, GUE to port (XLB_GUE_PORT if 0) with the GUE header gue (empty:
// variant 1) otherwise, and outer IPv6 extension headers.
type tunnel struct {
	dst  netip.Addr
	gue  []byte
	port uint16
	ext  []extHdr
}

// wrap encapsulates the datagram inner.
func (tn tunnel) wrap(inner []byte) []byte {
	src := fxNode
	if tn.dst.Is6() {
		src = fxNode6
	}
	if tn.gue == nil {
		proto := uint8(nhIPIP)
		if inner[0]>>4 == 6 {
			proto = nhIPv6
		}
		return ipDatagram(src, tn.dst, proto, tn.ext, inner)
	}
	port := tn.port
	if port == 0 {
		port = wire.GUEPort
	}
	udp := make([]byte, 8, 8+len(tn.gue)+len(inner))
	binary.BigEndian.PutUint16(udp[0:], 50000)
	binary.BigEndian.PutUint16(udp[2:], port)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(tn.gue)+len(inner)))
	udp = append(append(udp, tn.gue...), inner...)
	return ipDatagram(src, tn.dst, nhUDP, tn.ext, udp)
}

// GUE headers: variant 0 with IPv4 or IPv6 inside, without and with the
// daisy-chain hint's four words, and variant 1.
var (
	gue4     = []byte{0, nhIPIP, 0, 0}
	gue6     = []byte{0, nhIPv6, 0, 0}
	gue6Hint = append([]byte{4, nhIPv6, 0, 0}, make([]byte, 16)...)
	gueV1    = []byte{}
)

// setLen returns a copy of the datagram d (of either family) with its
// length field, total or payload, set to n.
func setLen(d []byte, n int) []byte {
	d = append([]byte{}, d...)
	if d[0]>>4 == 6 {
		binary.BigEndian.PutUint16(d[4:], uint16(n))
		return d
	}
	binary.BigEndian.PutUint16(d[2:], uint16(n))
	d[10], d[11] = 0, 0
	binary.BigEndian.PutUint16(d[10:], csum(d[:20]))
	return d
}

// TestDecapIPv6: tunnels of every pair of families to this host, over
// IP-in-IP and GUE, are decapsulated to exactly their inner packet, with
// the Ethernet type of its family; what is no tunnel to this host's VIPs
// passes untouched (neighbour discovery among it), and malformed tunnels
// to this host are dropped; each under exactly one counter.
func TestDecapIPv6(t *testing.T) {
	requirePrivileges(t)
	f := newFixtureNS(t)
	objs := newFixtureDecap(t, f)
	mac := f.MAC

	tcp6 := seg{src: fxClient6, dst: fxVIP6, sport: 40000, dport: 80, proto: nhTCP, seq: 1000, payload: []byte("GET / HTTP/1.1\r\n\r\n")}.datagram()
	udp6 := seg{src: fxClient6, dst: fxVIP6, sport: 40000, dport: 53, proto: nhUDP, payload: []byte("query")}.datagram()
	tcp4 := seg{src: fxClient, dst: fxVIP, sport: 40000, dport: 80, proto: nhTCP, seq: 1000, payload: []byte("GET / HTTP/1.1\r\n\r\n")}.datagram()
	notVIP6 := seg{src: fxClient6, dst: netip.MustParseAddr("fd00:99::9"), sport: 40000, dport: 80, proto: nhTCP}.datagram()
	mappedVIP := seg{src: netip.MustParseAddr("::ffff:10.0.2.2"), dst: netip.AddrFrom16(fxVIP.As16()), sport: 40000, dport: 80, proto: nhTCP}.datagram()

	in6 := tunnel{dst: fxBackend6}
	in4 := tunnel{dst: fxBackend}
	gueOver6 := func(g []byte) tunnel { return tunnel{dst: fxBackend6, gue: g} }
	gueOver4 := func(g []byte) tunnel { return tunnel{dst: fxBackend, gue: g} }
	hopDst := []extHdr{{nhHop, 8}, {nhDst, 16}}

	// A neighbour solicitation for this host's address, from another
	// host: ICMPv6 type 135, target fd00:3::2, the source's link-layer
	// address option.
	ns := append([]byte{135, 0, 0, 0, 0, 0, 0, 0}, fxBackend6.AsSlice()...)
	ns = append(ns, 1, 1, 2, 0xaa, 0, 0, 0, 1)
	solicited := netip.MustParseAddr("ff02::1:ff00:2")
	binary.BigEndian.PutUint16(ns[2:], l4Csum(fxNode6, solicited, nhICMP6, ns))
	ndp := ipDatagram(fxNode6, solicited, nhICMP6, nil, ns)
	ndp[7] = 255

	tunnel6 := in6.wrap(tcp6)
	cut := func(d []byte, n int) []byte { return d[:n] }
	// The outer datagram says it ends 8 bytes before the inner packet
	// does: what follows in the frame is padding.
	innerPastOuter6 := setLen(tunnel6, len(tunnel6)-40-8)
	innerPastOuter4 := setLen(in4.wrap(tcp6), len(tcp6)+20-8)

	cases := []struct {
		name    string
		frame   []byte
		verdict uint32
		want    []byte // the inner frame expected; nil: unchanged
		stat    string
	}{
		{"IPv6-in-IPv6", ethFrame(mac, in6.wrap(tcp6)), xdpPass, ethFrame(mac, tcp6), "decap_ipip"},
		{"IPv6-in-IPv6, UDP", ethFrame(mac, in6.wrap(udp6)), xdpPass, ethFrame(mac, udp6), "decap_ipip"},
		{"IPv6-in-IPv4 (protocol 41)", ethFrame(mac, in4.wrap(tcp6)), xdpPass, ethFrame(mac, tcp6), "decap_ipip"},
		{"IPv4-in-IPv6 (next header 4)", ethFrame(mac, in6.wrap(tcp4)), xdpPass, ethFrame(mac, tcp4), "decap_ipip"},
		{"GUE/IPv6, IPv6 inside", ethFrame(mac, gueOver6(gue6).wrap(tcp6)), xdpPass, ethFrame(mac, tcp6), "decap_gue"},
		{"GUE/IPv6, IPv4 inside", ethFrame(mac, gueOver6(gue4).wrap(tcp4)), xdpPass, ethFrame(mac, tcp4), "decap_gue"},
		{"GUE/IPv6 variant 1, IPv6 inside", ethFrame(mac, gueOver6(gueV1).wrap(udp6)), xdpPass, ethFrame(mac, udp6), "decap_gue"},
		{"GUE/IPv6 variant 1, IPv4 inside", ethFrame(mac, gueOver6(gueV1).wrap(tcp4)), xdpPass, ethFrame(mac, tcp4), "decap_gue"},
		{"GUE/IPv6 with a hint's 4 words", ethFrame(mac, gueOver6(gue6Hint).wrap(tcp6)), xdpPass, ethFrame(mac, tcp6), "decap_gue"},
		{"GUE/IPv4, IPv6 inside", ethFrame(mac, gueOver4(gue6).wrap(udp6)), xdpPass, ethFrame(mac, udp6), "decap_gue"},
		{"GUE/IPv4 variant 1, IPv6 inside", ethFrame(mac, gueOver4(gueV1).wrap(tcp6)), xdpPass, ethFrame(mac, tcp6), "decap_gue"},
		{"IPv6-in-IPv6 after hop-by-hop and destination options", ethFrame(mac, tunnel{dst: fxBackend6, ext: hopDst}.wrap(tcp6)), xdpPass, ethFrame(mac, tcp6), "decap_ipip"},
		{"IPv4-in-IPv6 after destination options", ethFrame(mac, tunnel{dst: fxBackend6, ext: []extHdr{{nhDst, 8}}}.wrap(tcp4)), xdpPass, ethFrame(mac, tcp4), "decap_ipip"},
		{"IPv6-in-IPv6 after destination options of 2048 bytes", ethFrame(mac, tunnel{dst: fxBackend6, ext: []extHdr{{nhDst, 2048}}}.wrap(tcp6)), xdpPass, ethFrame(mac, tcp6), "decap_ipip"},
		{"GUE/IPv6 after two destination options", ethFrame(mac, tunnel{dst: fxBackend6, gue: gue6, ext: []extHdr{{nhDst, 8}, {nhDst, 24}}}.wrap(tcp6)), xdpPass, ethFrame(mac, tcp6), "decap_gue"},
		{"IPv6-in-IPv6 with Ethernet padding", append(ethFrame(mac, in6.wrap(tcp6)), 0, 0, 0, 0), xdpPass, append(ethFrame(mac, tcp6), 0, 0, 0, 0), "decap_ipip"},

		// Not a tunnel to this host: the stack gets it as it came.
		{"neighbour solicitation", ethFrame(mac, ndp), xdpPass, nil, "pass_not_ours"},
		{"plain IPv6 TCP to the VIP", ethFrame(mac, tcp6), xdpPass, nil, "pass_not_ours"},
		{"IPv6-in-IPv6 to another host", ethFrame(mac, tunnel{dst: fxOther6}.wrap(tcp6)), xdpPass, nil, "pass_not_ours"},
		{"GUE/IPv6 to another port", ethFrame(mac, tunnel{dst: fxBackend6, gue: gue6, port: 6081}.wrap(tcp6)), xdpPass, nil, "pass_not_ours"},
		{"unparseable GUE/IPv6 to another host", ethFrame(mac, tunnel{dst: fxOther6, gue: []byte{0x20, 0, 0, 0}}.wrap(tcp6)), xdpPass, nil, "pass_not_ours"},
		{"IPv6-in-IPv6 to this host's IPv4 address, IPv4-mapped", ethFrame(mac, tunnel{dst: netip.AddrFrom16(fxBackend.As16())}.wrap(tcp6)), xdpPass, nil, "pass_not_ours"},
		{"after a routing header", ethFrame(mac, tunnel{dst: fxBackend6, ext: []extHdr{{nhRoute, 8}}}.wrap(tcp6)), xdpPass, nil, "pass_not_ours"},
		{"after a fragment header", ethFrame(mac, tunnel{dst: fxBackend6, ext: []extHdr{{nhFrag, 8}}}.wrap(tcp6)), xdpPass, nil, "pass_not_ours"},
		{"hop-by-hop options after destination options", ethFrame(mac, tunnel{dst: fxBackend6, ext: []extHdr{{nhDst, 8}, {nhHop, 8}}}.wrap(tcp6)), xdpPass, nil, "pass_not_ours"},
		{"three option headers", ethFrame(mac, tunnel{dst: fxBackend6, ext: []extHdr{{nhHop, 8}, {nhDst, 8}, {nhDst, 8}}}.wrap(tcp6)), xdpPass, nil, "pass_not_ours"},
		{"frame ends inside the options", ethFrame(mac, cut(tunnel{dst: fxBackend6, ext: hopDst}.wrap(tcp6), 40+8+1)), xdpPass, nil, "pass_not_ours"},
		{"frame ends inside the UDP header", ethFrame(mac, cut(gueOver6(gue6).wrap(tcp6), 40+6)), xdpPass, nil, "pass_not_ours"},
		{"IPv6 ethertype, no room for the header", ethFrame(mac, tunnel6[:39]), xdpPass, nil, "pass_not_ours"},
		{"IPv6 ethertype, version 4 header", append(ethFrame(mac, tunnel6)[:14:14], in4.wrap(tcp6)...), xdpPass, nil, "pass_not_ours"},

		// Tunnels to this host that do not hold together, or not for
		// one of its VIPs: dropped.
		{"outer payload length beyond the frame", ethFrame(mac, setLen(tunnel6, len(tunnel6)-40+1)), xdpDrop, nil, "drop_bad_inner"},
		{"outer payload length 0 (jumbogram)", ethFrame(mac, setLen(tunnel6, 0)), xdpDrop, nil, "drop_bad_inner"},
		{"outer options of 2048 bytes beyond the datagram", ethFrame(mac, setLen(tunnel{dst: fxBackend6, ext: []extHdr{{nhDst, 2048}}}.wrap(tcp6), 8)), xdpDrop, nil, "drop_bad_inner"},
		{"IPv6 inner length beyond the IPv6 outer datagram", ethFrame(mac, innerPastOuter6), xdpDrop, nil, "drop_bad_inner"},
		{"IPv6 inner length beyond the IPv4 outer datagram", ethFrame(mac, innerPastOuter4), xdpDrop, nil, "drop_bad_inner"},
		{"IPv6 inner header cut", ethFrame(mac, setLen(cut(tunnel6, 40+30), 30)), xdpDrop, nil, "drop_bad_inner"},
		{"IPv6 inner header cut, IPv4 outer", ethFrame(mac, setLen(cut(in4.wrap(tcp6), 20+30), 20+30)), xdpDrop, nil, "drop_bad_inner"},
		{"next header 41, IPv4 inside", ethFrame(mac, ipDatagram(fxNode6, fxBackend6, nhIPv6, nil, tcp4)), xdpDrop, nil, "drop_bad_inner"},
		{"next header 4, IPv6 inside", ethFrame(mac, ipDatagram(fxNode6, fxBackend6, nhIPIP, nil, tcp6)), xdpDrop, nil, "drop_bad_inner"},
		{"IPv4 protocol 41, IPv4 inside", ethFrame(mac, ipDatagram(fxNode, fxBackend, nhIPv6, nil, tcp4)), xdpDrop, nil, "drop_bad_inner"},
		{"options past the inner packet's start", ethFrame(mac, setLen(tunnel{dst: fxBackend6, ext: []extHdr{{nhDst, 8}}}.wrap(tcp6), 8+20)), xdpDrop, nil, "drop_bad_inner"},
		{"IPv6 inner not for a local VIP", ethFrame(mac, in6.wrap(notVIP6)), xdpDrop, nil, "drop_bad_inner"},
		{"IPv6 inner to an IPv4 VIP, IPv4-mapped", ethFrame(mac, in6.wrap(mappedVIP)), xdpDrop, nil, "drop_bad_inner"},
		{"IPv4 inner not for a local VIP, IPv6 outer", ethFrame(mac, in6.wrap(seg{src: fxClient, dst: netip.MustParseAddr("10.99.9.9"), proto: nhTCP}.datagram())), xdpDrop, nil, "drop_bad_inner"},
		{"GUE/IPv6 control message", ethFrame(mac, gueOver6([]byte{0x20, 0, 0, 0}).wrap(tcp6)), xdpDrop, nil, "drop_bad_gue"},
		{"GUE/IPv6 version 2", ethFrame(mac, gueOver6([]byte{0x80, nhIPv6, 0, 0}).wrap(tcp6)), xdpDrop, nil, "drop_bad_gue"},
		{"GUE/IPv6 carrying UDP", ethFrame(mac, gueOver6([]byte{0, nhUDP, 0, 0}).wrap(tcp6)), xdpDrop, nil, "drop_bad_gue"},
		{"GUE/IPv6 variant 1, IP version 5", ethFrame(mac, gueOver6(gueV1).wrap(append([]byte{0x50}, tcp6[1:]...))), xdpDrop, nil, "drop_bad_gue"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := decapCounts(t, objs)
			v, out := f.Run(t, objs.XlbDecap, c.frame)
			after := decapCounts(t, objs)
			if v != c.verdict {
				t.Errorf("verdict %s, want %s", verdictNames[v], verdictNames[c.verdict])
			}
			want := c.want
			if want == nil && v == xdpPass {
				want = c.frame
			}
			if want != nil && !bytes.Equal(out, want) {
				t.Errorf("output\n got %x\nwant %x", out, want)
			}
			for i, name := range wire.DecapStatNames {
				d := after[i] - before[i]
				if (name == c.stat) != (d == 1) || d > 1 {
					t.Errorf("counter %s moved by %d (case expects %s)", name, d, c.stat)
				}
			}
		})
	}
}

// TestDecapIPv6ToPod: the Kubernetes mode translates within one family;
// an IPv6 packet tunnelled to a local IPv4 pod is dropped, counted as
// having no translation, and reaches no pod.
func TestDecapIPv6ToPod(t *testing.T) {
	requirePrivileges(t)
	f := newFixtureNS(t)
	objs := newFixtureDecap(t, f)
	if err := objs.NatPods.Put(wire.AddrOf(fxPod1), uint8(1)); err != nil {
		t.Fatal(err)
	}
	tcp6 := seg{src: fxClient6, dst: fxVIP6, sport: 40000, dport: 80, proto: nhTCP}.datagram()
	noEntry := uint32(slices.Index(wire.NATStatNames, "nat_drop_no_entry"))
	for _, tn := range []tunnel{{dst: fxPod1}, {dst: fxPod1, gue: gue6}} {
		before, err := bpfobj.SumPerCPU(objs.NatStats, noEntry)
		if err != nil {
			t.Fatal(err)
		}
		v, _ := f.Run(t, objs.XlbDecap, ethFrame(f.MAC, tn.wrap(tcp6)))
		after, err := bpfobj.SumPerCPU(objs.NatStats, noEntry)
		if err != nil {
			t.Fatal(err)
		}
		if v != xdpDrop || after.Packets != before.Packets+1 {
			t.Errorf("tunnel %+v: verdict %s, nat_drop_no_entry moved by %d; want DROP, 1", tn, verdictNames[v], after.Packets-before.Packets)
		}
	}
}
