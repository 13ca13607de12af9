package lb

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/testbed/netns"
)

// The IPv6 side of the fixture namespace (newFixtureLB6): the node is
// fd00:1::2 on veth0, its router fd00:1::1 (a permanent neighbour);
// fd00:4::/64 leads out of veth2; fd00:6::/64 goes via a neighbour never
// resolved; fd00:7::/64 has a route MTU of 1400.
var (
	fxNode6      = netip.MustParseAddr("fd00:1::2")
	fxClient6    = netip.MustParseAddr("fd00:2::2")
	fxBackend6   = netip.MustParseAddr("fd00:3::2")
	fxRedirBE6   = netip.MustParseAddr("fd00:4::2")
	fxNoNeighBE6 = netip.MustParseAddr("fd00:6::2")
	fxSmallMTU6  = netip.MustParseAddr("fd00:7::2")
	fxVIP6       = netip.MustParseAddr("fd00:99::1")
	fxVIP4to6    = netip.MustParseAddr("10.99.1.1")
)

// Services of the IPv6 fixture: every pair of families, in both
// encapsulations, and the paths that are not a plain forward.
var fx6Services = []struct {
	key     ServiceKey
	encap   Encap
	backend netip.Addr
}{
	{ServiceKey{fxVIP6, 80, ProtoTCP}, EncapIPIP, fxBackend6},                              // IPv6 in IPv6
	{ServiceKey{fxVIP6, 53, ProtoUDP}, EncapGUE, fxBackend6},                               // GUE/IPv6, inner IPv6
	{ServiceKey{fxVIP6, 81, ProtoTCP}, EncapIPIP, fxBackend},                               // IPv6 in IPv4
	{ServiceKey{fxVIP6, 54, ProtoUDP}, EncapGUE, fxBackend},                                // GUE/IPv4, inner IPv6
	{ServiceKey{fxVIP4to6, 80, ProtoTCP}, EncapIPIP, fxBackend6},                           // IPv4 in IPv6
	{ServiceKey{fxVIP4to6, 53, ProtoUDP}, EncapGUE, fxBackend6},                            // GUE/IPv6, inner IPv4
	{ServiceKey{netip.MustParseAddr("fd00:99::2"), 80, ProtoTCP}, EncapIPIP, fxRedirBE6},   // out of veth2
	{ServiceKey{netip.MustParseAddr("fd00:99::3"), 80, ProtoTCP}, EncapIPIP, fxNoNeighBE6}, // no neighbour
	{ServiceKey{netip.MustParseAddr("fd00:99::4"), 80, ProtoTCP}, EncapIPIP, fxSmallMTU6},  // too big
	{ServiceKey{netip.MustParseAddr("10.99.1.2"), 80, ProtoTCP}, EncapIPIP, fxSmallMTU6},   // IPv4, too big in IPv6
	{ServiceKey{netip.MustParseAddr("fd00:99::5"), 80, ProtoTCP}, EncapIPIP, fxSmallMTU},   // IPv6, too big in IPv4
}

// prepareFixture6 gives the fixture namespace its IPv6 addresses and
// routes, and prepares veth0 as Load does for a node with an IPv6
// address.
func prepareFixture6(t testing.TB, f *fixtureNS) {
	t.Helper()
	n := f.Name
	ipcmd(t, "-n", n, "addr", "add", "fd00:1::2/64", "dev", "veth0", "nodad")
	ipcmd(t, "-n", n, "addr", "add", "fd00:5::2/64", "dev", "veth2", "nodad")
	ipcmd(t, "-n", n, "neigh", "add", "fd00:1::1", "lladdr", fxRouterMAC.String(), "dev", "veth0", "nud", "permanent")
	ipcmd(t, "-n", n, "neigh", "add", "fd00:5::1", "lladdr", fxOtherMAC.String(), "dev", "veth2", "nud", "permanent")
	ipcmd(t, "-n", n, "route", "add", "fd00:3::/64", "via", "fd00:1::1")
	ipcmd(t, "-n", n, "route", "add", "fd00:4::/64", "via", "fd00:5::1")
	ipcmd(t, "-n", n, "route", "add", "fd00:6::/64", "via", "fd00:1::9")
	ipcmd(t, "-n", n, "route", "add", "fd00:7::/64", "via", "fd00:1::1", "mtu", "lock", "1400")
	if err := netns.Do(n, func() error { return PrepareInterface6("veth0") }); err != nil {
		t.Fatal(err)
	}
}

// newFixtureLB6 loads the LB program with the node's IPv6 address and
// installs fx6Services, each with a table of one backend.
func newFixtureLB6(t testing.TB) (*Dataplane, *fixtureNS) {
	t.Helper()
	requirePrivileges(t)
	f := newFixtureNS(t)
	prepareFixture6(t, f)
	d, err := New(Options{NodeAddr: fxNode, NodeAddr6: fxNode6, TableSize: fxTableSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	for id, s := range fx6Services {
		if err := d.UpsertBackend(uint32(id), apOf(s.backend)); err != nil {
			t.Fatal(err)
		}
		table := make([]uint32, fxTableSize)
		for i := range table {
			table[i] = uint32(id)
		}
		if err := d.UpsertService(Service{ID: uint32(id), Key: s.key, Encap: s.encap, Table: table}); err != nil {
			t.Fatal(err)
		}
	}
	return d, f
}

// ext6 is an IPv6 extension header of a test packet: its type (the
// next-header value that names it) and its bytes after the first two.
type ext6 struct {
	typ  uint8
	body []byte // 6 + 8n bytes
}

// pkt6 describes an IPv6 test packet.
type pkt6 struct {
	Src, Dst     netip.Addr
	Sport, Dport uint16
	Proto        uint8 // 6, 17 or 58 (then Payload is the ICMPv6 message)
	HopLimit     uint8
	TClass       uint8
	Ext          []ext6
	Payload      []byte
}

// frame builds Ethernet + IPv6 + extension headers + TCP/UDP (valid
// checksum) or ICMPv6.
func (p pkt6) frame(dstMAC net.HardwareAddr) []byte {
	if p.HopLimit == 0 {
		p.HopLimit = 64
	}
	var l4 []byte
	switch p.Proto {
	case 17:
		l4 = make([]byte, 8+len(p.Payload))
		binary.BigEndian.PutUint16(l4[0:], p.Sport)
		binary.BigEndian.PutUint16(l4[2:], p.Dport)
		binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
		copy(l4[8:], p.Payload)
	case 6:
		l4 = make([]byte, 20+len(p.Payload))
		binary.BigEndian.PutUint16(l4[0:], p.Sport)
		binary.BigEndian.PutUint16(l4[2:], p.Dport)
		binary.BigEndian.PutUint32(l4[4:], 1000)
		l4[12], l4[13] = 5<<4, 0x10
		binary.BigEndian.PutUint16(l4[14:], 65535)
		copy(l4[20:], p.Payload)
	default:
		l4 = append([]byte{}, p.Payload...)
	}
	s, d := p.Src.As16(), p.Dst.As16()
	ph := append(append(append([]byte{}, s[:]...), d[:]...), 0, 0, byte(len(l4)>>8), byte(len(l4)), 0, 0, 0, p.Proto)
	if off := map[uint8]int{6: 16, 17: 6, 58: 2}[p.Proto]; off > 0 || p.Proto == 58 {
		binary.BigEndian.PutUint16(l4[off:], csum(append(ph, l4...)))
	}
	var exts []byte
	next := p.Proto
	for i := len(p.Ext) - 1; i >= 0; i-- {
		e := p.Ext[i]
		h := append([]byte{next, byte((2+len(e.body))/8 - 1)}, e.body...)
		exts = append(h, exts...)
		next = e.typ
	}
	ip := make([]byte, 40, 40+len(exts)+len(l4))
	binary.BigEndian.PutUint32(ip[0:], 6<<28|uint32(p.TClass)<<20|0x12345)
	binary.BigEndian.PutUint16(ip[4:], uint16(len(exts)+len(l4)))
	ip[6], ip[7] = next, p.HopLimit
	copy(ip[8:], s[:])
	copy(ip[24:], d[:])
	ip = append(append(ip, exts...), l4...)
	eth := make([]byte, 14, 14+len(ip))
	copy(eth[0:], dstMAC)
	copy(eth[6:], srcMAC)
	binary.BigEndian.PutUint16(eth[12:], 0x86dd)
	return append(eth, ip...)
}

func tcp6To(dst netip.Addr, dport uint16) pkt6 {
	return pkt6{Src: fxClient6, Dst: dst, Sport: 40000, Dport: dport, Proto: 6, Payload: []byte("GET / HTTP/1.1\r\n\r\n")}
}

func udp6To(dst netip.Addr, dport uint16) pkt6 {
	return pkt6{Src: fxClient6, Dst: dst, Sport: 5353, Dport: dport, Proto: 17, Payload: []byte("query")}
}

// wantEncap is the frame the program must send for inner (the IP packet,
// hop limit or TTL already decremented) to backend be in mode, with
// flow hash hash: built here byte for byte from the family matrix.
func wantEncap(t *testing.T, dstMAC, srcMAC net.HardwareAddr, inner []byte, be netip.Addr, mode Encap, hash uint32) []byte {
	t.Helper()
	inner6 := inner[0]>>4 == 6
	innerProto := byte(4)
	if inner6 {
		innerProto = 41
	}
	var tos byte
	var df bool
	if inner6 {
		tos = byte(binary.BigEndian.Uint32(inner) >> 20)
		df = true
	} else {
		tos, df = inner[1], binary.BigEndian.Uint16(inner[6:])&0x4000 != 0
	}
	var gue []byte
	proto := innerProto
	if mode == EncapGUE {
		proto = 17
		gue = make([]byte, 12)
		binary.BigEndian.PutUint16(gue[0:], 0xc000|uint16(hash&0x3fff))
		binary.BigEndian.PutUint16(gue[2:], 6080)
		binary.BigEndian.PutUint16(gue[4:], uint16(12+len(inner)))
		gue[9] = innerProto
	}
	var outer []byte
	if be.Is6() {
		outer = make([]byte, 40)
		binary.BigEndian.PutUint32(outer[0:], 6<<28|uint32(tos)<<20|hash&0xfffff)
		binary.BigEndian.PutUint16(outer[4:], uint16(len(gue)+len(inner)))
		outer[6], outer[7] = proto, 64
		s, d := fxNode6.As16(), be.As16()
		copy(outer[8:], s[:])
		copy(outer[24:], d[:])
	} else {
		outer = make([]byte, 20)
		outer[0], outer[1] = 0x45, tos
		binary.BigEndian.PutUint16(outer[2:], uint16(20+len(gue)+len(inner)))
		if df {
			outer[6] = 0x40
		}
		outer[8], outer[9] = 64, proto
		s, d := fxNode.As4(), be.As4()
		copy(outer[12:], s[:])
		copy(outer[16:], d[:])
		binary.BigEndian.PutUint16(outer[10:], csum(outer))
	}
	eth := append(append([]byte{}, dstMAC...), srcMAC...)
	if be.Is6() {
		eth = append(eth, 0x86, 0xdd)
	} else {
		eth = append(eth, 0x08, 0x00)
	}
	return append(append(append(eth, outer...), gue...), inner...)
}

// decremented is the IP packet of frame in with its hop limit (or TTL,
// with the checksum the program patches) one less.
func decremented(in []byte) []byte {
	ip := append([]byte{}, in[14:]...)
	if ip[0]>>4 == 6 {
		ip[7]--
		return ip
	}
	ip[8]--
	ip[10], ip[11] = 0, 0
	ihl := int(ip[0]&0xf) * 4
	binary.BigEndian.PutUint16(ip[10:], csum(ip[:ihl]))
	return ip
}

// TestLB6EncapsulationMatrix: every pair of families in both
// encapsulations, each frame byte for byte as the matrix says, with the
// flow label and GUE port the Go flow hash predicts.
func TestLB6EncapsulationMatrix(t *testing.T) {
	d, f := newFixtureLB6(t)
	vip4 := fxVIP4to6
	for _, c := range []struct {
		name string
		svc  int
		in   []byte
		hash uint32
	}{
		{"IPv6 in IPv6", 0, tcp6To(fxVIP6, 80).frame(f.MAC), FlowHash(fxClient6, fxVIP6, 40000, 80, 6)},
		{"GUE/IPv6, inner IPv6", 1, udp6To(fxVIP6, 53).frame(f.MAC), FlowHash(fxClient6, fxVIP6, 5353, 53, 17)},
		{"IPv6 in IPv4", 2, tcp6To(fxVIP6, 81).frame(f.MAC), FlowHash(fxClient6, fxVIP6, 40000, 81, 6)},
		{"GUE/IPv4, inner IPv6", 3, udp6To(fxVIP6, 54).frame(f.MAC), FlowHash(fxClient6, fxVIP6, 5353, 54, 17)},
		{"IPv4 in IPv6", 4, tcpTo(vip4, 80).Frame(f.MAC), FlowHash(fxClient, vip4, 40000, 80, 6)},
		{"GUE/IPv6, inner IPv4", 5, pkt{Src: fxClient, Dst: vip4, Sport: 5353, Dport: 53, Proto: 17, Payload: []byte("query")}.Frame(f.MAC),
			FlowHash(fxClient, vip4, 5353, 53, 17)},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := fx6Services[c.svc]
			var v uint32
			var out []byte
			delta := reasonDelta(t, d, func() { v, out = f.Run(t, d.objs.XlbLbProg, c.in) })
			if v != xdpTX || len(delta) != 0 {
				t.Fatalf("verdict %s reasons %v, want TX and none", verdictNames[v], delta)
			}
			want := wantEncap(t, fxRouterMAC, f.MAC, decremented(c.in), s.backend, s.encap, c.hash)
			if !bytes.Equal(out, want) {
				t.Fatalf("frame differs\n got %x\nwant %x", out, want)
			}
			cnt, err := d.ServiceCounters(uint32(c.svc))
			if err != nil {
				t.Fatal(err)
			}
			if cnt.Packets != 1 || cnt.Bytes != uint64(len(c.in)-14) {
				t.Errorf("service counters %+v, want 1 packet of %d bytes", cnt, len(c.in)-14)
			}
		})
	}
}

// TestLB6FlowHashMatchesGo: the flow label of IPv6-in-IPv6 carries 20
// bits of the program's flow hash; for many clients it is what the Go
// flow hash predicts, with and without client-IP affinity.
func TestLB6FlowHashMatchesGo(t *testing.T) {
	d, f := newFixtureLB6(t)
	for _, clientIP := range []bool{false, true} {
		table := make([]uint32, fxTableSize)
		if err := d.UpsertService(Service{ID: 0, Key: fx6Services[0].key, Encap: EncapIPIP, Table: table, ClientIP: clientIP}); err != nil {
			t.Fatal(err)
		}
		for i := range 64 {
			p := tcp6To(fxVIP6, 80)
			b := p.Src.As16()
			b[8], b[15] = byte(i*37), byte(i)
			p.Src, p.Sport = netip.AddrFrom16(b), uint16(30000+7*i)
			v, out := f.Run(t, d.objs.XlbLbProg, p.frame(f.MAC))
			if v != xdpTX {
				t.Fatalf("verdict %s", verdictNames[v])
			}
			// With affinity the hash leaves the port out, and the
			// tunnel (the flow label) mixes it back in (tunnel_hash).
			hash := FlowHash(p.Src, fxVIP6, HashedPort(p.Sport, clientIP), 80, 6)
			if clientIP {
				hash ^= uint32(wire.Port(p.Sport))
			}
			if got := binary.BigEndian.Uint32(out[14:]) & 0xfffff; got != hash&0xfffff {
				t.Fatalf("client-IP %v, flow %v:%d: flow label %#x, Go predicts %#x", clientIP, p.Src, p.Sport, got, hash&0xfffff)
			}
		}
	}
}

// TestFlowHash6Golden pins the IPv6 flow hash, a contract between xlb
// versions and nodes as the IPv4 one is (TestFlowHashGolden).
func TestFlowHash6Golden(t *testing.T) {
	for _, c := range []struct {
		sport, dport uint16
		proto        uint8
		want         uint32
	}{
		{40000, 80, 6, 0x351eab25},
		{5353, 53, 17, 0x18ec37f0},
		{0, 443, 6, 0x81e027c2},
	} {
		if got := FlowHash(fxClient6, fxVIP6, c.sport, c.dport, c.proto); got != c.want {
			t.Errorf("flow hash of %v:%d → %v:%d/%d = %#08x, want %#08x", fxClient6, c.sport, fxVIP6, c.dport, c.proto, got, c.want)
		}
		for _, kind := range []wire.FlowHash{wire.FlowHashFmix64, wire.FlowHashLookup3} {
			if FlowHashOf(kind, fxClient6, fxVIP6, c.sport, c.dport, c.proto) != FlowHash(fxClient6, fxVIP6, c.sport, c.dport, c.proto) {
				t.Errorf("IPv6 flow hash depends on the configured kind %d", kind)
			}
		}
	}
}

// icmp6About builds an ICMPv6 error of type typ from a router on the
// return path to the VIP, quoting a reply the backend sent from
// vip:vport to client:cport.
func icmp6About(mac net.HardwareAddr, typ uint8, vip, client netip.Addr, vport, cport uint16) []byte {
	reply := tcp6To(client, cport)
	reply.Src, reply.Sport = vip, vport
	quoted := reply.frame(mac)[14 : 14+40+20]
	msg := append([]byte{typ, 0, 0, 0, 0, 0, 0x05, 0x00}, quoted...) // MTU 1280 for a too big
	return pkt6{Src: netip.MustParseAddr("fd00:9::1"), Dst: vip, Proto: 58, Payload: msg}.frame(mac)
}

// TestLB6Verdicts covers every IPv6 verdict that is not a plain forward:
// each case gets its verdict and exactly one reason counted, and a PASS
// leaves the frame untouched.
func TestLB6Verdicts(t *testing.T) {
	d, f := newFixtureLB6(t)
	other := netip.MustParseAddr("fd00:55::1")
	pad := func(n int) []byte { return make([]byte, n) }
	hbh := ext6{0, pad(6)}
	dst := ext6{60, pad(14)}
	rt1 := ext6{43, append([]byte{0, 1}, pad(4)...)} // segments left 1
	frag := ext6{44, pad(6)}

	withExt := func(p pkt6, e ...ext6) pkt6 { p.Ext = e; return p }
	hop1 := tcp6To(fxVIP6, 80)
	hop1.HopLimit = 1
	good := tcp6To(fxVIP6, 80).frame(f.MAC)
	truncatedL4 := good[:14+40+2]
	truncatedL4[14+5] = 2 // payload length 2: the ports cut
	longPayload := append([]byte{}, good...)
	binary.BigEndian.PutUint16(longPayload[14+4:], uint16(len(good)-14-40+1))
	badVersion := append([]byte{}, good...)
	badVersion[14] = 0x40
	ns := pkt6{Src: fxClient6, Dst: fxVIP6, Proto: 58, HopLimit: 255, Payload: append([]byte{135, 0, 0, 0, 0, 0, 0, 0}, fxVIP6.AsSlice()...)}
	ra := pkt6{Src: netip.MustParseAddr("fe80::1"), Dst: netip.MustParseAddr("ff02::1"), Proto: 58, HopLimit: 255, Payload: pad(16)}
	ra.Payload[0] = 134
	echo := pkt6{Src: fxClient6, Dst: fxVIP6, Proto: 58, Payload: []byte{128, 0, 0, 0, 0, 1, 0, 1}}
	echoOther := echo
	echoOther.Dst = other
	hbhNotFirst := withExt(tcp6To(fxVIP6, 80), dst, hbh)

	cases := []struct {
		name    string
		frame   []byte
		verdict uint32
		reason  string
	}{
		{"hop limit 1", hop1.frame(f.MAC), xdpPass, "pass_ttl_exceeded"},
		{"not to a VIP", tcp6To(other, 80).frame(f.MAC), xdpPass, "pass_no_service"},
		{"VIP, other port", tcp6To(fxVIP6, 8080).frame(f.MAC), xdpDrop, "drop_vip_no_service"},
		{"fragment to a VIP", withExt(tcp6To(fxVIP6, 80), frag).frame(f.MAC), xdpDrop, "drop_fragment"},
		{"fragment not to a VIP", withExt(tcp6To(other, 80), frag).frame(f.MAC), xdpPass, "pass_ipv6_ext"},
		{"routing header with segments left, to a VIP", withExt(tcp6To(fxVIP6, 80), rt1).frame(f.MAC), xdpDrop, "drop_ipv6_ext"},
		{"routing header with segments left, not to a VIP", withExt(tcp6To(other, 80), rt1).frame(f.MAC), xdpPass, "pass_ipv6_ext"},
		{"hop-by-hop after another header", hbhNotFirst.frame(f.MAC), xdpDrop, "drop_ipv6_ext"},
		{"five extension headers", withExt(tcp6To(fxVIP6, 80), hbh, dst, dst, dst, dst).frame(f.MAC), xdpDrop, "drop_ipv6_ext"},
		{"fixed header truncated", good[:14+39], xdpDrop, "drop_malformed_ip"},
		{"payload length beyond the frame", longPayload, xdpDrop, "drop_malformed_ip"},
		{"version 4 in an IPv6 frame", badVersion, xdpDrop, "drop_malformed_ip"},
		{"extension header truncated", withExt(tcp6To(fxVIP6, 80), hbh).frame(f.MAC)[:14+40+4], xdpDrop, "drop_malformed_ip"},
		{"ports truncated", truncatedL4, xdpDrop, "drop_malformed_l4"},
		{"neighbour solicitation for a VIP", ns.frame(f.MAC), xdpPass, "pass_not_tcp_udp"},
		{"router advertisement", ra.frame(f.MAC), xdpPass, "pass_not_tcp_udp"},
		{"echo request to a VIP", echo.frame(f.MAC), xdpDrop, "drop_vip_no_service"},
		{"echo request not to a VIP", echoOther.frame(f.MAC), xdpPass, "pass_not_tcp_udp"},
		{"ICMPv6 error quoting no reply of a VIP", icmp6About(f.MAC, 1, fxVIP6, fxClient6, 80, 40000)[:14+40+8+39], xdpDrop, "drop_vip_no_service"},
		{"no neighbour", tcp6To(netip.MustParseAddr("fd00:99::3"), 80).frame(f.MAC), xdpPass, "pass_no_neigh"},
	}
	// The truncated ICMPv6 error: its payload length must match what is
	// left, so that only the quote is short.
	c := &cases[len(cases)-2]
	binary.BigEndian.PutUint16(c.frame[14+4:], uint16(len(c.frame)-14-40))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := append([]byte{}, c.frame...)
			var v uint32
			var out []byte
			delta := reasonDelta(t, d, func() { v, out = f.Run(t, d.objs.XlbLbProg, in) })
			if v != c.verdict {
				t.Errorf("verdict %s, want %s", verdictNames[v], verdictNames[c.verdict])
			}
			if len(delta) != 1 || delta[c.reason] != 1 {
				t.Errorf("reasons %v, want exactly %s 1", delta, c.reason)
			}
			if v == xdpPass && c.reason != "pass_no_neigh" && !bytes.Equal(out, c.frame) {
				t.Errorf("passed frame modified")
			}
		})
	}
}

// TestLB6ExtensionHeadersSkipped: hop-by-hop, destination options and a
// routing header with no segments left change nothing for the LB: the
// packet goes to the flow's backend, whole, in IPv6-in-IPv6.
func TestLB6ExtensionHeadersSkipped(t *testing.T) {
	d, f := newFixtureLB6(t)
	p := tcp6To(fxVIP6, 80)
	p.Ext = []ext6{{0, make([]byte, 6)}, {60, make([]byte, 14)}, {43, make([]byte, 6)}}
	in := p.frame(f.MAC)
	v, out := f.Run(t, d.objs.XlbLbProg, in)
	if v != xdpTX {
		t.Fatalf("verdict %s, want TX", verdictNames[v])
	}
	want := wantEncap(t, fxRouterMAC, f.MAC, decremented(in), fxBackend6, EncapIPIP, FlowHash(fxClient6, fxVIP6, 40000, 80, 6))
	if !bytes.Equal(out, want) {
		t.Fatalf("frame differs\n got %x\nwant %x", out, want)
	}
}

// TestLB6ICMPErrorsReachTheFlowsBackend: an ICMPv6 error about a reply
// (Packet Too Big among them, path MTU discovery for direct server
// return) goes to the backend of the flow it quotes, encapsulated like
// the flow's packets.
func TestLB6ICMPErrorsReachTheFlowsBackend(t *testing.T) {
	d, f := newFixtureLB6(t)
	// Two backends, so that the slot the quoted flow hashes to decides.
	if err := d.UpsertBackend(20, apOf(netip.MustParseAddr("fd00:3::20"))); err != nil {
		t.Fatal(err)
	}
	table := make([]uint32, fxTableSize)
	for i := range table {
		table[i] = []uint32{0, 20}[i%2]
	}
	if err := d.UpsertService(Service{ID: 0, Key: fx6Services[0].key, Encap: EncapIPIP, Table: table}); err != nil {
		t.Fatal(err)
	}
	addrs := map[uint32]netip.Addr{0: fxBackend6, 20: netip.MustParseAddr("fd00:3::20")}
	for _, typ := range []uint8{1, 2, 3, 4} {
		for cport := uint16(40000); cport < 40008; cport++ {
			in := icmp6About(f.MAC, typ, fxVIP6, fxClient6, 80, cport)
			var v uint32
			var out []byte
			delta := reasonDelta(t, d, func() { v, out = f.Run(t, d.objs.XlbLbProg, in) })
			if v != xdpTX || delta["note_icmp_to_backend"] != 1 || len(delta) != 1 {
				t.Fatalf("type %d: verdict %s reasons %v, want TX with note_icmp_to_backend", typ, verdictNames[v], delta)
			}
			hash := FlowHash(fxClient6, fxVIP6, cport, 80, 6)
			be := addrs[table[Slot(hash, fxTableSize)]]
			want := wantEncap(t, fxRouterMAC, f.MAC, decremented(in), be, EncapIPIP, hash)
			if !bytes.Equal(out, want) {
				t.Fatalf("type %d, client port %d: frame differs (the flow's backend is %v)\n got %x\nwant %x", typ, cport, be, out, want)
			}
		}
	}
}

// TestLB6TooBig: an IPv6 packet that the tunnel would make too big for
// the route is answered by an ICMPv6 Packet Too Big from the node, with
// the MTU left for it inside the tunnel; an IPv4 packet with DF bound
// for an IPv6 tunnel (or the other way round) gets its family's answer.
func TestLB6TooBig(t *testing.T) {
	d, f := newFixtureLB6(t)
	big := tcp6To(netip.MustParseAddr("fd00:99::4"), 80)
	big.Payload = make([]byte, 1400-40-20) // a 1400-byte packet; the route MTU is 1400
	in := big.frame(f.MAC)
	var v uint32
	var out []byte
	delta := reasonDelta(t, d, func() { v, out = f.Run(t, d.objs.XlbLbProg, in) })
	if v != xdpTX || delta["tx_icmp_too_big"] != 1 || len(delta) != 1 {
		t.Fatalf("verdict %s reasons %v, want TX with tx_icmp_too_big", verdictNames[v], delta)
	}
	if !bytes.Equal(out[0:6], srcMAC) || !bytes.Equal(out[6:12], f.MAC) || binary.BigEndian.Uint16(out[12:]) != 0x86dd {
		t.Errorf("Ethernet header %x, want back to the sender, IPv6", out[:14])
	}
	ip := out[14:54]
	if ip[0]>>4 != 6 || ip[6] != 58 || ip[7] != 64 {
		t.Errorf("IPv6 header %x: want version 6, next header 58, hop limit 64", ip)
	}
	if src, dst := netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40])); src != fxNode6 || dst != fxClient6 {
		t.Errorf("ICMPv6 %v -> %v, want %v -> %v", src, dst, fxNode6, fxClient6)
	}
	icmp := out[54:]
	// As much as fits in the IPv6 minimum MTU: 1280 less the error's
	// IPv6 and ICMPv6 headers (RFC 4443 2.4 (c)).
	const quote = 1280 - 40 - 8
	if len(icmp) != 8+quote || int(binary.BigEndian.Uint16(ip[4:])) != 8+quote {
		t.Fatalf("ICMPv6 length %d (payload length %d), want %d", len(icmp), binary.BigEndian.Uint16(ip[4:]), 8+quote)
	}
	if icmp[0] != 2 || icmp[1] != 0 {
		t.Errorf("ICMPv6 type/code %d/%d, want 2/0", icmp[0], icmp[1])
	}
	if mtu := binary.BigEndian.Uint32(icmp[4:]); mtu != 1400-40 {
		t.Errorf("MTU %d, want %d (route MTU minus the IPv6 outer header)", mtu, 1400-40)
	}
	if csum(append(pseudo6(ip, len(icmp)), icmp...)) != 0 {
		t.Errorf("ICMPv6 checksum invalid")
	}
	if !bytes.Equal(icmp[8:], in[14:14+quote]) {
		t.Errorf("quote differs from the packet's first %d bytes", quote)
	}

	// Just fitting: 1360 + 40 = 1400.
	big.Payload = big.Payload[:1360-60]
	if v, _ = f.Run(t, d.objs.XlbLbProg, big.frame(f.MAC)); v != xdpTX {
		t.Fatalf("a packet that fits after encapsulation: verdict %s, want TX", verdictNames[v])
	}

	// IPv4 with DF into an IPv6 tunnel: ICMP fragmentation needed.
	big4 := tcpTo(netip.MustParseAddr("10.99.1.2"), 80)
	big4.Payload = make([]byte, 1400-40)
	delta = reasonDelta(t, d, func() { v, out = f.Run(t, d.objs.XlbLbProg, big4.Frame(f.MAC)) })
	if v != xdpTX || delta["tx_icmp_too_big"] != 1 {
		t.Fatalf("IPv4 into IPv6: verdict %s reasons %v, want TX with tx_icmp_too_big", verdictNames[v], delta)
	}
	if out[14+9] != 1 || out[34] != 3 || out[35] != 4 || binary.BigEndian.Uint16(out[40:]) != 1400-40 {
		t.Errorf("IPv4 into IPv6: not a fragmentation needed with MTU %d: %x", 1400-40, out[14:42])
	}
	big4.DF = false
	delta = reasonDelta(t, d, func() { v, _ = f.Run(t, d.objs.XlbLbProg, big4.Frame(f.MAC)) })
	if v != xdpDrop || delta["drop_too_big"] != 1 {
		t.Fatalf("IPv4 without DF into IPv6: verdict %s reasons %v, want DROP with drop_too_big", verdictNames[v], delta)
	}

	// IPv6 into an IPv4 tunnel (route MTU 1400 to 10.0.7.0/24).
	big6 := tcp6To(netip.MustParseAddr("fd00:99::5"), 80)
	big6.Payload = make([]byte, 1400-40-20)
	delta = reasonDelta(t, d, func() { v, out = f.Run(t, d.objs.XlbLbProg, big6.frame(f.MAC)) })
	if v != xdpTX || delta["tx_icmp_too_big"] != 1 || out[54] != 2 || binary.BigEndian.Uint32(out[58:]) != 1400-20 {
		t.Fatalf("IPv6 into IPv4: verdict %s reasons %v, want a Packet Too Big with MTU %d", verdictNames[v], delta, 1400-20)
	}
}

// TestLB6Redirect: a backend behind another interface is a redirect.
func TestLB6Redirect(t *testing.T) {
	d, f := newFixtureLB6(t)
	v, out := f.Run(t, d.objs.XlbLbProg, tcp6To(netip.MustParseAddr("fd00:99::2"), 80).frame(f.MAC))
	if v != xdpRedirect {
		t.Fatalf("verdict %s, want REDIRECT", verdictNames[v])
	}
	if !bytes.Equal(out[0:6], fxOtherMAC) || binary.BigEndian.Uint16(out[12:]) != 0x86dd {
		t.Errorf("Ethernet header %x, want to %v, IPv6", out[:14], fxOtherMAC)
	}
}

// TestUpsertIPv6Refusals: what the data plane cannot do with IPv6 is
// refused with an error that names it.
func TestUpsertIPv6Refusals(t *testing.T) {
	requirePrivileges(t)
	d, err := New(Options{NodeAddr: fxNode, TableSize: fxTableSize}) // no IPv6 address
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, c := range []struct{ addr, want string }{
		{"fe80::1", "link-local"},
		{"ff02::1", "multicast"},
		{"::", "unspecified"},
		{"::ffff:10.0.0.1", "IPv4-mapped"},
	} {
		err := d.UpsertBackend(50, apOf(netip.MustParseAddr(c.addr)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("backend %s: error %v, want one that says %s", c.addr, err, c.want)
		}
		table := make([]uint32, fxTableSize)
		err = d.UpsertService(Service{ID: 1, Key: ServiceKey{netip.MustParseAddr(c.addr), 80, ProtoTCP}, Encap: EncapIPIP, Table: table})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("VIP %s: error %v, want one that says %s", c.addr, err, c.want)
		}
	}
	table := make([]uint32, fxTableSize)
	for _, c := range []struct {
		svc  Service
		want string
	}{
		{Service{Encap: EncapGUE, SourceRanges: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, "IPv4 prefix"},
	} {
		s := c.svc
		s.ID, s.Key, s.Table = 2, ServiceKey{fxVIP6, 80, ProtoTCP}, table
		if err := d.UpsertService(s); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("IPv6 VIP with %+v: error %v, want one that says %s", c.svc.Encap, err, c.want)
		}
	}
	// An IPv6 backend: registered, but no service reaches it without
	// the node's IPv6 address, nor through NAT.
	if err := d.UpsertBackend(3, apOf(fxBackend6)); err != nil {
		t.Fatal(err)
	}
	for i := range table {
		table[i] = 3
	}
	for _, c := range []struct {
		svc  Service
		want string
	}{
		{Service{Encap: EncapIPIP}, "no IPv6 address"},
		{Service{Encap: EncapNAT}, "is IPv6 and the VIP 10.99.3.1 is IPv4: NAT and DNAT rewrite addresses within one family (no NAT64)"},
		{Service{Encap: EncapDNAT}, "no NAT64"},
		{Service{Encap: EncapGUEHint}, "no IPv6 address"},
		{Service{Encap: EncapGUE, Stateful: true}, "no IPv6 address"},
	} {
		s := c.svc
		s.ID, s.Key, s.Table = 3, ServiceKey{netip.MustParseAddr("10.99.3.1"), 80, ProtoTCP}, table
		if err := d.UpsertService(s); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("IPv6 backend with %v: error %v, want one that says %s", c.svc.Encap, err, c.want)
		}
	}
}

// FuzzLBProgram6 is FuzzLBProgram over IPv6 frames, with the IPv6
// fixture's services (every pair of families). Whatever arrives, the
// program must return a defined verdict, leave what it passes untouched
// (unless it encapsulated it for the kernel to forward), and emit only
// well-formed packets: encapsulated from the node to a fixture backend,
// or an ICMP or ICMPv6 "too big" from the node.
//
//	go test -fuzz FuzzLBProgram6 -fuzztime 30s -fuzzminimizetime 1x ./internal/dataplane/lb/
//
// (Without -fuzzminimizetime the engine spent most of a run minimizing
// the inputs that found new code, which it does not count as executions.)
func FuzzLBProgram6(f *testing.F) {
	d, fx := newFixtureLB6(f)
	// As FuzzLBProgram: the namespace lives as long as its thread.
	if out, err := exec.Command("ip", "netns", "del", fx.Name).CombinedOutput(); err != nil {
		f.Fatalf("ip netns del %s: %v: %s", fx.Name, err, out)
	}
	for _, p := range []pkt6{
		tcp6To(fxVIP6, 80), udp6To(fxVIP6, 53), tcp6To(fxVIP6, 81), udp6To(fxVIP6, 54),
		tcp6To(netip.MustParseAddr("fd00:99::3"), 80),
		{Src: fxClient6, Dst: fxVIP6, Sport: 1, Dport: 80, Proto: 6, Ext: []ext6{{0, make([]byte, 6)}, {43, make([]byte, 6)}}},
		{Src: fxClient6, Dst: fxVIP6, Sport: 1, Dport: 80, Proto: 6, Ext: []ext6{{44, make([]byte, 6)}}},
	} {
		f.Add(p.frame(fx.MAC))
	}
	f.Add(icmp6About(fx.MAC, 2, fxVIP6, fxClient6, 80, 40000))
	big := tcp6To(netip.MustParseAddr("fd00:99::4"), 80)
	big.Payload = make([]byte, 1400)
	f.Add(big.frame(fx.MAC))
	// Daisy-chained services with IPv6 backends: the 40-byte hint.
	hinted := installHintedIPv6Backends(f, d)
	f.Add(tcp6To(hinted.vip6, 82).frame(fx.MAC))
	f.Add(tcpTo(hinted.vip4, 82).Frame(fx.MAC))
	f.Add(icmp6About(fx.MAC, 2, hinted.vip6, fxClient6, 82, 40000))
	// Layer-2 mode: fxVIP6 is owned, and solicitations for it answered.
	now, err := Monotonic()
	if err != nil {
		f.Fatal(err)
	}
	if err := d.SetL2Owned([]netip.Addr{fxVIP6}, l2MAC, now+24*time.Hour); err != nil {
		f.Fatal(err)
	}
	f.Add(solicit(fxVIP6).bytes())
	f.Add(nsFrame{src: asker6, target: fxVIP6, hopLimit: 255, bare: true, srcMAC: askerMAC}.bytes())

	backends := map[netip.Addr]bool{}
	for _, s := range fx6Services {
		backends[s.backend] = true
	}
	for _, a := range hinted.addrs {
		backends[a] = true
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) < 14 {
			frame = append(frame, make([]byte, 14-len(frame))...)
		}
		if len(frame) > 3000 {
			frame = frame[:3000]
		}
		// Mostly IPv6: the IPv4 path has its own target. On a copy: a
		// fuzz target must not change its input.
		frame = append([]byte(nil), frame...)
		if frame[12] != 0x08 {
			frame[12], frame[13] = 0x86, 0xdd
		}
		v, out := fx.Run(t, d.objs.XlbLbProg, frame)
		switch v {
		case xdpDrop:
			return
		case xdpPass:
			if bytes.Equal(out, frame) {
				return
			}
			checkEmitted6(t, out, map[netip.Addr]bool{fxNoNeighBE6: true})
		case xdpTX, xdpRedirect:
			if len(out) > 54 && out[14+6] == 58 && out[54] == 136 {
				checkAdvert(t, frame, out)
				return
			}
			checkEmitted6(t, out, backends)
		default:
			t.Fatalf("verdict %d", v)
		}
	})
}

// checkAdvert asserts that out is the advertisement of the owned fxVIP6
// at l2MAC in answer to the solicitation in: to its sender, with a
// checksum that verifies.
func checkAdvert(t *testing.T, in, out []byte) {
	t.Helper()
	if len(in) < 14+40+24 || in[14+6] != 58 || in[14+7] != 255 || in[54] != 135 || in[55] != 0 || in[6]&1 != 0 {
		t.Fatalf("advertised in answer to what is no valid solicitation:\n in %x\nout %x", in, out)
	}
	src := netip.AddrFrom16([16]byte(in[14+8 : 14+24]))
	want := wantAdvertTo(fxVIP6, l2MAC, in[6:12], src)
	if !bytes.Equal(out, want) || src.IsUnspecified() || !bytes.Equal(in[54+8:54+24], fxVIP6.AsSlice()) {
		t.Fatalf("bad advertisement:\n in %x\nout %x\nwant %x", in, out, want)
	}
}

// checkEmitted6 is checkEmitted for either family: an IPv4 frame as
// checkEmitted wants it, or an IPv6 one from the node, encapsulated
// (next header 4, 41 or UDP) to an allowed backend with a payload length
// that fills the frame, or an ICMPv6 Packet Too Big with a valid
// checksum.
func checkEmitted6(t *testing.T, out []byte, allowed map[netip.Addr]bool) {
	t.Helper()
	if len(out) >= 14 && binary.BigEndian.Uint16(out[12:]) == 0x0800 {
		checkEmitted(t, out, allowed)
		return
	}
	if len(out) < 54 || binary.BigEndian.Uint16(out[12:]) != 0x86dd || out[14]>>4 != 6 {
		t.Fatalf("emitted frame is neither IPv4 nor IPv6: %x", out)
	}
	ip := out[14:54]
	if int(binary.BigEndian.Uint16(ip[4:])) != len(out)-54 {
		t.Fatalf("emitted payload length %d, frame carries %d", binary.BigEndian.Uint16(ip[4:]), len(out)-54)
	}
	if src := netip.AddrFrom16([16]byte(ip[8:24])); src != fxNode6 {
		t.Fatalf("emitted from %v, want %v", src, fxNode6)
	}
	dst := netip.AddrFrom16([16]byte(ip[24:40]))
	switch ip[6] {
	case 58:
		ph := append(append(append([]byte{}, ip[8:40]...), 0, 0, byte((len(out)-54)>>8), byte(len(out)-54)), 0, 0, 0, 58)
		if out[54] != 2 || csum(append(ph, out[54:]...)) != 0 {
			t.Fatalf("bad ICMPv6 reply %x", out[54:])
		}
	case 4, 41, 17:
		if !allowed[dst] {
			t.Fatalf("encapsulated to %v, not an allowed backend", dst)
		}
	default:
		t.Fatalf("emitted next header %d", ip[6])
	}
}

// TestLB6ServiceLifecycle: an IPv6 service is listed as installed with
// its VIP, and once deleted its packets pass as anyone's, while an IPv6
// service that shares the VIP's first 4 bytes and port is untouched.
func TestLB6ServiceLifecycle(t *testing.T) {
	d, f := newFixtureLB6(t)
	// fd00:99::1 and fd00:99::2 share the first 4 bytes (vip) and port 80.
	in, err := d.Installed()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range in.Services {
		if s.ID == 0 {
			found = s.Key == fx6Services[0].key && s.Encap == EncapIPIP
		}
	}
	if !found || in.Backends[0] != fxBackend6 {
		t.Fatalf("installed services %+v, backends %v: want service 0 on %v and backend 0 %v", in.Services, in.Backends, fx6Services[0].key, fxBackend6)
	}
	if err := d.DeleteService(0, fx6Services[0].key); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dst     netip.Addr
		dport   uint16
		verdict uint32
		reason  string
	}{
		{fxVIP6, 80, xdpDrop, "drop_vip_no_service"}, // the VIP has other services
		{netip.MustParseAddr("fd00:99::2"), 80, xdpRedirect, ""},
	} {
		var v uint32
		delta := reasonDelta(t, d, func() { v, _ = f.Run(t, d.objs.XlbLbProg, tcp6To(c.dst, c.dport).frame(f.MAC)) })
		if v != c.verdict || (c.reason != "" && delta[c.reason] != 1) {
			t.Errorf("%v:%d after the delete: verdict %s reasons %v, want %s %s", c.dst, c.dport, verdictNames[v], delta, verdictNames[c.verdict], c.reason)
		}
	}
	// The last service of a VIP gone, the VIP is anyone's address.
	for id := 1; id <= 3; id++ {
		if err := d.DeleteService(uint32(id), fx6Services[id].key); err != nil {
			t.Fatal(err)
		}
	}
	var v uint32
	delta := reasonDelta(t, d, func() { v, _ = f.Run(t, d.objs.XlbLbProg, tcp6To(fxVIP6, 80).frame(f.MAC)) })
	if v != xdpPass || delta["pass_no_service"] != 1 {
		t.Errorf("to %v without services: verdict %s reasons %v, want PASS pass_no_service", fxVIP6, verdictNames[v], delta)
	}
}

// TestLB6Stateful: a stateful IPv6 service keeps a flow on the backend
// its first packet got when the table moves; a new flow follows the
// table; a SYN of a flow whose backend left the configuration re-picks,
// and its other packets go on to the backend that left (an orphan), as
// for IPv4 (TestLBStatefulTCP). An ICMPv6 error about a flow follows its
// entry and makes none.
func TestLB6Stateful(t *testing.T) {
	d, f := newFixtureLB6(t)
	addrs := map[uint32]netip.Addr{20: netip.MustParseAddr("fd00:3::20"), 21: netip.MustParseAddr("fd00:3::21")}
	for id, a := range addrs {
		if err := d.UpsertBackend(id, apOf(a)); err != nil {
			t.Fatal(err)
		}
	}
	svc := Service{ID: 12, Key: ServiceKey{netip.MustParseAddr("fd00:99::12"), 80, ProtoTCP}, Encap: EncapIPIP, Stateful: true}
	point := func(id uint32) {
		svc.Table = make([]uint32, fxTableSize)
		for i := range svc.Table {
			svc.Table[i] = id
		}
		if err := d.UpsertService(svc); err != nil {
			t.Fatal(err)
		}
	}
	segment := func(sport uint16, flags uint8) []byte {
		p := tcp6To(svc.Key.VIP, 80)
		p.Sport = sport
		fr := p.frame(f.MAC)
		fr[14+40+13] = flags // the checksum is not checked
		return fr
	}
	send := func(fr []byte) (netip.Addr, map[string]uint64) {
		t.Helper()
		var v uint32
		var out []byte
		delta := reasonDelta(t, d, func() { v, out = f.Run(t, d.objs.XlbLbProg, fr) })
		if v != xdpTX {
			t.Fatalf("verdict %s reasons %v, want TX", verdictNames[v], delta)
		}
		return netip.AddrFrom16([16]byte(out[14+24 : 14+40])), delta
	}
	entries := func() int {
		n, err := d.ConntrackEntries()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	point(20)
	if be, r := send(segment(41000, tcpSYN)); be != addrs[20] || r["note_ct_new"] != 1 {
		t.Fatalf("SYN went to %v with reasons %v, want %v and note_ct_new", be, r, addrs[20])
	}
	point(21)
	if be, r := send(segment(41000, tcpACK)); be != addrs[20] || len(r) != 0 {
		t.Fatalf("the flow's ACK after the table moved went to %v (reasons %v), want its backend %v", be, r, addrs[20])
	}
	if be, _ := send(icmp6About(f.MAC, 2, svc.Key.VIP, fxClient6, 80, 41000)); be != addrs[20] {
		t.Fatalf("an ICMPv6 error about the flow went to %v, want the flow's backend %v", be, addrs[20])
	}
	if n := entries(); n != 1 {
		t.Fatalf("%d flow entries, want 1 (an ICMPv6 error makes none)", n)
	}
	if be, r := send(segment(41001, tcpSYN)); be != addrs[21] || r["note_ct_new"] != 1 {
		t.Fatalf("a new flow went to %v with reasons %v, want the table's %v", be, r, addrs[21])
	}
	if be, r := send(segment(41002, tcpACK)); be != addrs[21] || r["note_ct_midflow_miss"] != 1 {
		t.Fatalf("an ACK without an entry went to %v with reasons %v, want the table's %v and note_ct_midflow_miss", be, r, addrs[21])
	}

	// Backend 20 leaves the configuration: its flow's packets go on to
	// it, past its counters; the flow's SYN re-picks.
	before, err := d.BackendCounters(21)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.DeleteBackend(20); err != nil {
		t.Fatal(err)
	}
	if be, _ := send(segment(41000, tcpACK)); be != addrs[20] {
		t.Fatalf("the orphan's ACK went to %v, want the backend that left, %v", be, addrs[20])
	}
	if be, r := send(segment(41000, tcpSYN)); be != addrs[21] || r["note_ct_new"] != 1 {
		t.Fatalf("the orphan's SYN went to %v with reasons %v, want the table's %v", be, r, addrs[21])
	}
	after, err := d.BackendCounters(21)
	if err != nil {
		t.Fatal(err)
	}
	if after.Packets != before.Packets+1 {
		t.Errorf("backend 21 counted %d packets, want %d (only the re-picked SYN)", after.Packets-before.Packets, 1)
	}
}

// slotRecorder stands in for the svc_index map: it keeps what is written.
type slotRecorder struct{ n int }

func (r *slotRecorder) Put(key, value any) error { r.n++; return nil }

// TestServiceIndexFitsIPv6Prefix: the index's home slot of an IPv6
// service mixes the whole VIP (svc_hash6), so that MaxServices VIPs of
// one /64 on one port spread as random keys do. Hashed as IPv4 keys are,
// by the first 4 bytes of the VIP, they would all share one home slot and
// the 17th would find no free slot within the probe bound.
func TestServiceIndexFitsIPv6Prefix(t *testing.T) {
	m, n := float64(SvcSlots), float64(MaxServices)
	minHomes := int(0.97 * m * (1 - math.Pow(1-1/m, n)))
	var x svcIndex
	homes := map[uint32]bool{}
	for i := range MaxServices {
		b := fxVIP6.As16()
		binary.BigEndian.PutUint32(b[12:], uint32(i+1))
		s := mustSlotKey(t, ServiceKey{netip.AddrFrom16(b), 80, ProtoTCP})
		s.Id, s.Encap = uint32(i), uint8(EncapIPIP)
		if err := x.upsert(&slotRecorder{}, s); err != nil {
			t.Fatalf("service %d of %d (%v): %v", i+1, MaxServices, netip.AddrFrom16(b), err)
		}
		homes[slotHash(s)&(SvcSlots-1)] = true
	}
	if len(homes) < minHomes {
		t.Errorf("%d IPv6 services of one /64 on %d home slots, want at least %d", MaxServices, len(homes), minHomes)
	}
}

// TestLB6SourceRanges: an IPv6 service with source ranges forwards what
// comes from them, an ICMPv6 error by the client of the flow it quotes,
// and drops the rest before any table is read, counted for the service.
func TestLB6SourceRanges(t *testing.T) {
	d, f := newFixtureLB6(t)
	key := fx6Services[0].key
	err := d.SetSourceRanges(0, key, []netip.Prefix{
		netip.MustParsePrefix("fd00:2::/64"), netip.MustParsePrefix("2001:db8::/32"), netip.MustParsePrefix("fd00:2:0:1::5/128"),
	})
	if err != nil {
		t.Fatal(err)
	}
	from := func(src string) []byte {
		p := tcp6To(fxVIP6, 80)
		p.Src = netip.MustParseAddr(src)
		return p.frame(f.MAC)
	}
	for _, c := range []struct {
		name    string
		frame   []byte
		verdict uint32
	}{
		{"in the /64", from("fd00:2::2"), xdpTX},
		{"last address of the /64", from("fd00:2::ffff:ffff:ffff:ffff"), xdpTX},
		{"the /128", from("fd00:2:0:1::5"), xdpTX},
		{"next to the /128", from("fd00:2:0:1::6"), xdpDrop},
		{"in the /32", from("2001:db8:ffff::1"), xdpTX},
		{"below the /32", from("2001:db7:ffff:ffff:ffff:ffff:ffff:ffff"), xdpDrop},
		{"after the /32", from("2001:db9::"), xdpDrop},
		{"elsewhere", from("fd00:3::9"), xdpDrop},
		{"ICMPv6 error about an allowed client's flow", icmp6About(f.MAC, 2, fxVIP6, fxClient6, 80, 40000), xdpTX},
		{"ICMPv6 error about another's", icmp6About(f.MAC, 2, fxVIP6, netip.MustParseAddr("fd00:3::9"), 80, 40000), xdpDrop},
	} {
		var v uint32
		delta := reasonDelta(t, d, func() { v, _ = f.Run(t, d.objs.XlbLbProg, c.frame) })
		if v != c.verdict || (v == xdpDrop) != (delta["drop_source_range"] == 1) {
			t.Errorf("%s: verdict %s reasons %v, want %s", c.name, verdictNames[v], delta, verdictNames[c.verdict])
		}
	}
	drops, err := d.SourceRangeDrops(0)
	if err != nil {
		t.Fatal(err)
	}
	if drops.Packets != 5 {
		t.Errorf("the service counted %d packets dropped for their source, want 5", drops.Packets)
	}
	// No ranges: everyone again.
	if err := d.SetSourceRanges(0, key, nil); err != nil {
		t.Fatal(err)
	}
	if v, _ := f.Run(t, d.objs.XlbLbProg, from("fd00:3::9")); v != xdpTX {
		t.Errorf("without ranges: verdict %s, want TX", verdictNames[v])
	}
}

// TestRanges6: ranges6 holds exactly the addresses its prefixes cover,
// as source_allowed6 searches it, for random prefixes (merged, nested,
// adjacent) and the addresses around their edges.
func TestRanges6(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	for round := range 200 {
		var ps []netip.Prefix
		for range 1 + rng.IntN(20) {
			var b [16]byte
			b[0], b[1] = 0x20, 0x01
			b[2] = byte(rng.IntN(4))
			for i := 3; i < 16; i++ {
				b[i] = byte(rng.IntN(3))
			}
			ps = append(ps, netip.PrefixFrom(netip.AddrFrom16(b), 20+rng.IntN(109)).Masked())
		}
		r, err := ranges6(ps)
		if err != nil {
			t.Fatal(err)
		}
		holds := func(a netip.Addr) bool { // source_allowed6
			v := u128Of(a)
			le := func(i int, hi bool) bool {
				if hi {
					return v.cmp(u128{r.HiHi[i], r.HiLo[i]}) <= 0
				}
				return (u128{r.LoHi[i], r.LoLo[i]}).cmp(v) <= 0
			}
			i := 0
			for s := wire.MaxRanges / 2; s > 0; s >>= 1 {
				if le((i+s)&(wire.MaxRanges-1), false) {
					i += s
				}
			}
			i &= wire.MaxRanges - 1
			return le(i, false) && le(i, true)
		}
		for _, p := range ps {
			first := p.Addr()
			s := span6Of(p)
			last := netip.AddrFrom16(func() (b [16]byte) {
				for i := range 8 {
					b[i], b[8+i] = byte(s.hi.hi>>(56-8*i)), byte(s.hi.lo>>(56-8*i))
				}
				return
			}())
			for _, a := range []netip.Addr{first, last, first.Prev(), last.Next()} {
				if !a.IsValid() {
					continue
				}
				want := false
				for _, q := range ps {
					want = want || q.Contains(a)
				}
				if got := holds(a); got != want {
					t.Fatalf("round %d, prefixes %v: %v held %v, want %v", round, ps, a, got, want)
				}
			}
		}
	}
}

// TestLB6TooBigWithoutNodeAddr6: a node without an IPv6 address forwards
// an IPv6 VIP's packets to IPv4 backends, but has no source for a Packet
// Too Big: one that does not fit the tunnel is dropped (drop_too_big).
func TestLB6TooBigWithoutNodeAddr6(t *testing.T) {
	requirePrivileges(t)
	f := newFixtureNS(t)
	d, err := New(Options{NodeAddr: fxNode, TableSize: fxTableSize})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.UpsertBackend(0, apOf(fxSmallMTU)); err != nil {
		t.Fatal(err)
	}
	vip := netip.MustParseAddr("fd00:99::5")
	if err := d.UpsertService(Service{ID: 0, Key: ServiceKey{vip, 80, ProtoTCP}, Encap: EncapIPIP, Table: make([]uint32, fxTableSize)}); err != nil {
		t.Fatal(err)
	}
	small := tcp6To(vip, 80)
	if v, _ := f.Run(t, d.objs.XlbLbProg, small.frame(f.MAC)); v != xdpTX {
		t.Fatalf("a packet that fits: verdict %s, want TX", verdictNames[v])
	}
	big := tcp6To(vip, 80)
	big.Payload = make([]byte, 1400-40-20)
	var v uint32
	delta := reasonDelta(t, d, func() { v, _ = f.Run(t, d.objs.XlbLbProg, big.frame(f.MAC)) })
	if v != xdpDrop || delta["drop_too_big"] != 1 || len(delta) != 1 {
		t.Fatalf("too big: verdict %s reasons %v, want DROP with drop_too_big", verdictNames[v], delta)
	}
}
