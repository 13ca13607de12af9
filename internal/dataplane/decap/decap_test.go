package decap

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

func newFixtureDecap(t testing.TB, f *fixtureNS) *backendObjects {
	t.Helper()
	var objs backendObjects
	if err := loadBackendObjects(&objs, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { objs.Close() })
	if err := setAddrs(objs.HostAddrs, []netip.Addr{fxBackend, fxBackend6}); err != nil {
		t.Fatal(err)
	}
	if err := setAddrs(objs.DecapVips, []netip.Addr{fxVIP, fxVIP6}); err != nil {
		t.Fatal(err)
	}
	return &objs
}

// encapsulate wraps an IPv4 frame the way a third party might: outer
// header to dst, optionally UDP to port with the given 4 GUE bytes.
func encapsulate(inner []byte, dst netip.Addr, udpPort uint16, gue []byte) []byte {
	payload := inner[14:]
	proto := byte(4)
	if udpPort != 0 {
		udp := make([]byte, 8, 8+len(gue)+len(payload))
		binary.BigEndian.PutUint16(udp[0:], 50000)
		binary.BigEndian.PutUint16(udp[2:], udpPort)
		binary.BigEndian.PutUint16(udp[4:], uint16(8+len(gue)+len(payload)))
		payload = append(append(udp, gue...), payload...)
		proto = 17
	}
	ip := make([]byte, 20, 20+len(payload))
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(payload)))
	ip[8] = 64
	ip[9] = proto
	s, d := fxNode.As4(), dst.As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	binary.BigEndian.PutUint16(ip[10:], csum(ip))
	out := append([]byte{}, inner[:14]...)
	return append(out, append(ip, payload...)...)
}

// outer rewrites the outer IPv4 header of an encapsulated frame (a copy)
// with fn and fixes its checksum.
func outer(frame []byte, fn func(ip []byte)) []byte {
	f := append([]byte{}, frame...)
	ip := f[14:]
	fn(ip)
	ihl := int(ip[0]&0xf) * 4
	if ihl < 20 {
		ihl = 20
	}
	ip[10], ip[11] = 0, 0
	binary.BigEndian.PutUint16(ip[10:], csum(ip[:ihl]))
	return f
}

// setTotLen returns a header rewrite that sets the total length.
func setTotLen(n int) func(ip []byte) {
	return func(ip []byte) { binary.BigEndian.PutUint16(ip[2:], uint16(n)) }
}

// innerHdr rewrites the inner IPv4 header of an IPIP frame (a copy) with
// fn and fixes its checksum.
func innerHdr(frame []byte, fn func(ip []byte)) []byte {
	f := append([]byte{}, frame...)
	ip := f[14+20:]
	fn(ip)
	ip[10], ip[11] = 0, 0
	binary.BigEndian.PutUint16(ip[10:], csum(ip[:20]))
	return f
}

// withOuterOptions inserts one 4-byte option word (NOPs, then end of
// list) into the outer header of an encapsulated frame.
func withOuterOptions(frame []byte) []byte {
	f := append(append(append([]byte{}, frame[:14+20]...), 1, 1, 1, 0), frame[14+20:]...)
	return outer(f, func(ip []byte) {
		ip[0] = 0x46
		binary.BigEndian.PutUint16(ip[2:], uint16(len(f)-14))
	})
}

// TestDecap runs crafted frames through the backend program: what it
// decapsulates, what it leaves to the stack untouched and what it drops,
// each under exactly one counter. The malformed cases and the verdicts
// chosen for them are in docs/architecture.md (Backend decapsulation
// program).
func TestDecap(t *testing.T) {
	requirePrivileges(t)
	f := newFixtureNS(t)
	objs := newFixtureDecap(t, f)
	inner := tcpTo(fxVIP, 80).Frame(f.MAC)
	notVIP := tcpTo(netip.MustParseAddr("10.99.9.9"), 80).Frame(f.MAC)
	ipipUs := encapsulate(inner, fxBackend, 0, nil)
	gueUs := encapsulate(inner, fxBackend, 6080, []byte{0, 4, 0, 0})
	ipLen := len(ipipUs) - 14 // outer total length of ipipUs

	arp := append(append(append([]byte{}, f.MAC...), srcMAC...), 0x08, 0x06,
		0, 1, 8, 0, 6, 4, 0, 1, 2, 0xaa, 0, 0, 0, 1, 10, 0, 1, 1, 0, 0, 0, 0, 0, 0, 10, 0, 1, 2)
	ipv6 := append(append(append([]byte{}, f.MAC...), srcMAC...), 0x86, 0xdd,
		0x60, 0, 0, 0, 0, 8, 17, 64) // UDP, 8 bytes of payload
	ipv6 = append(append(ipv6, make([]byte, 32)...), 0x9c, 0x40, 0, 53, 0, 8, 0, 0)
	// The frame holds the whole inner packet, the outer datagram ends 8
	// bytes before it: the rest is Ethernet padding, not tunnel payload.
	innerPastOuter := outer(ipipUs, setTotLen(ipLen-8))
	// Ethernet padding after a complete datagram is allowed and stays
	// behind the inner packet for the stack to trim.
	padded := append(append([]byte{}, ipipUs...), 0, 0, 0, 0, 0, 0)
	paddedInner := append(append([]byte{}, inner...), 0, 0, 0, 0, 0, 0)
	// A frame cut after 10 bytes of the inner header, its outer length
	// saying so.
	innerCut := outer(ipipUs[:14+20+10], setTotLen(20+10))

	cases := []struct {
		name    string
		frame   []byte
		verdict uint32
		want    []byte // expected output; nil: unchanged
		stat    string
	}{
		{"IPIP to us", encapsulate(inner, fxBackend, 0, nil), xdpPass, inner, "decap_ipip"},
		{"GUE variant 0 to us", encapsulate(inner, fxBackend, 6080, []byte{0, 4, 0, 0}), xdpPass, inner, "decap_gue"},
		{"GUE variant 0 with one option word", encapsulate(inner, fxBackend, 6080, []byte{1, 4, 0, 0, 9, 9, 9, 9}), xdpPass, inner, "decap_gue"},
		{"GUE variant 1 (IPv4 right after UDP)", encapsulate(inner, fxBackend, 6080, nil), xdpPass, inner, "decap_gue"},
		{"IPIP to another host", encapsulate(inner, fxRedirBE, 0, nil), xdpPass, nil, "pass_not_ours"},
		{"UDP to another port", encapsulate(inner, fxBackend, 6081, []byte{0, 4, 0, 0}), xdpPass, nil, "pass_not_ours"},
		{"unparseable GUE to another host", encapsulate(inner, fxRedirBE, 6080, []byte{0x20, 0, 0, 0}), xdpPass, nil, "pass_not_ours"},
		{"plain TCP to the VIP", inner, xdpPass, nil, "pass_not_ours"},
		{"IPIP, inner not for a local VIP", encapsulate(notVIP, fxBackend, 0, nil), xdpDrop, nil, "drop_bad_inner"},

		// Not IPv4, or an outer header that xlb never sends: the stack
		// judges it, as it would without xlb.
		{"ARP", arp, xdpPass, nil, "pass_not_ours"},
		{"IPv6", ipv6, xdpPass, nil, "pass_not_ours"},
		{"IPv4 ethertype, no room for the header", ipipUs[:14+19], xdpPass, nil, "pass_not_ours"},
		{"outer IHL < 5", outer(ipipUs, func(ip []byte) { ip[0] = 0x44 }), xdpPass, nil, "pass_not_ours"},
		{"outer IHL 0", outer(ipipUs, func(ip []byte) { ip[0] = 0x40 }), xdpPass, nil, "pass_not_ours"},
		{"outer version 6 in an IPv4 frame", outer(ipipUs, func(ip []byte) { ip[0] = 0x65 }), xdpPass, nil, "pass_not_ours"},
		{"outer IP options", withOuterOptions(ipipUs), xdpPass, nil, "pass_not_ours"},
		{"GUE with outer IP options", withOuterOptions(gueUs), xdpPass, nil, "pass_not_ours"},
		{"outer first fragment (MF)", outer(ipipUs, func(ip []byte) { ip[6] = 0x20 }), xdpPass, nil, "pass_not_ours"},
		{"outer later fragment (offset)", outer(ipipUs, func(ip []byte) { ip[7] = 0x10 }), xdpPass, nil, "pass_not_ours"},
		{"outer length beyond the frame, to another host", outer(encapsulate(inner, fxRedirBE, 0, nil), setTotLen(ipLen+1)), xdpPass, nil, "pass_not_ours"},

		// A tunnel to this host whose lengths do not hold together:
		// dropped, nothing of it reaches the stack.
		{"IPIP, outer length beyond the frame", outer(ipipUs, setTotLen(ipLen+1)), xdpDrop, nil, "drop_bad_inner"},
		{"GUE, outer length beyond the frame", outer(gueUs, setTotLen(len(gueUs)-14+1)), xdpDrop, nil, "drop_bad_inner"},
		{"IPIP, frame cut inside the inner packet", ipipUs[:14+20+10], xdpDrop, nil, "drop_bad_inner"},
		{"IPIP, outer length below the outer header", outer(ipipUs, setTotLen(19)), xdpDrop, nil, "drop_bad_inner"},
		{"IPIP, outer datagram ends inside the inner header", outer(ipipUs, setTotLen(20+10)), xdpDrop, nil, "drop_bad_inner"},
		{"IPIP, inner header truncated", innerCut, xdpDrop, nil, "drop_bad_inner"},
		{"IPIP, inner length beyond the outer datagram", innerPastOuter, xdpDrop, nil, "drop_bad_inner"},
		{"IPIP, inner length beyond the frame", innerHdr(ipipUs, setTotLen(2000)), xdpDrop, nil, "drop_bad_inner"},
		{"IPIP, inner length below its header", innerHdr(ipipUs, setTotLen(19)), xdpDrop, nil, "drop_bad_inner"},
		{"IPIP, inner IHL < 5", innerHdr(ipipUs, func(ip []byte) { ip[0] = 0x44 }), xdpDrop, nil, "drop_bad_inner"},
		{"IPIP, inner not IPv4", innerHdr(ipipUs, func(ip []byte) { ip[0] = 0x65 }), xdpDrop, nil, "drop_bad_inner"},
		{"IPIP with Ethernet padding", padded, xdpPass, paddedInner, "decap_ipip"},
		{"GUE control message", encapsulate(inner, fxBackend, 6080, []byte{0x20, 0, 0, 0}), xdpDrop, nil, "drop_bad_gue"},
		{"GUE version 2", encapsulate(inner, fxBackend, 6080, []byte{0x80, 4, 0, 0}), xdpDrop, nil, "drop_bad_gue"},
		{"GUE saying IPv6, carrying IPv4", encapsulate(inner, fxBackend, 6080, []byte{0, 41, 0, 0}), xdpDrop, nil, "drop_bad_inner"},
		{"GUE carrying UDP", encapsulate(inner, fxBackend, 6080, []byte{0, 17, 0, 0}), xdpDrop, nil, "drop_bad_gue"},
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

func decapCounts(t *testing.T, objs *backendObjects) []uint64 {
	t.Helper()
	out := make([]uint64, len(wire.DecapStatNames))
	for i := range wire.DecapStatNames {
		c, err := bpfobj.SumPerCPU(objs.DecapStats, uint32(i))
		if err != nil {
			t.Fatal(err)
		}
		out[i] = c.Packets
	}
	return out
}
