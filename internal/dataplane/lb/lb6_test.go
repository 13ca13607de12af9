package lb

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

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
