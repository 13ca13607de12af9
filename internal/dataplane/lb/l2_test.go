package lb

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"
)

var (
	l2MAC    = net.HardwareAddr{0x02, 0x00, 0x5e, 0x10, 0x00, 0x02}
	askerMAC = net.HardwareAddr{0x02, 0x00, 0x5e, 0x10, 0x00, 0x99}
	asker    = netip.MustParseAddr("10.0.1.50")
)

// arpFrame is an ARP packet for IPv4 over Ethernet; fields as RFC 826
// names them.
type arpFrame struct {
	dst, src net.HardwareAddr // Ethernet
	htype    uint16
	ptype    uint16
	hlen     uint8
	plen     uint8
	oper     uint16
	sha      net.HardwareAddr
	spa      netip.Addr
	tha      net.HardwareAddr
	tpa      netip.Addr
	pad      int
}

func arpRequest(tpa netip.Addr) arpFrame {
	return arpFrame{dst: net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, src: askerMAC, htype: 1, ptype: 0x0800, hlen: 6, plen: 4,
		oper: 1, sha: askerMAC, spa: asker, tha: make(net.HardwareAddr, 6), tpa: tpa}
}

func (a arpFrame) bytes() []byte {
	b := append(append([]byte{}, a.dst...), a.src...)
	b = binary.BigEndian.AppendUint16(b, 0x0806)
	b = binary.BigEndian.AppendUint16(b, a.htype)
	b = binary.BigEndian.AppendUint16(b, a.ptype)
	b = append(b, a.hlen, a.plen)
	b = binary.BigEndian.AppendUint16(b, a.oper)
	spa, tpa := a.spa.As4(), a.tpa.As4()
	b = append(append(b, a.sha...), spa[:]...)
	b = append(append(b, a.tha...), tpa[:]...)
	return append(b, make([]byte, a.pad)...)
}

// newL2LB is the fixture LB with vip owned for an hour.
func newL2LB(t *testing.T, vip netip.Addr) (*Dataplane, *fixtureNS) {
	t.Helper()
	d, f := newPingLB(t, true)
	now, err := Monotonic()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetL2Owned([]netip.Addr{vip}, l2MAC, now+time.Hour); err != nil {
		t.Fatal(err)
	}
	return d, f
}

func TestARPReply(t *testing.T) {
	d, f := newL2LB(t, fxVIP)
	for _, pad := range []int{0, 18} { // as sent, and padded to 60 bytes on a wire
		req := arpRequest(fxVIP)
		req.pad = pad
		// The reply, from RFC 826: to the asker, from the owner's MAC,
		// the VIP at the owner's MAC.
		want := arpFrame{dst: askerMAC, src: l2MAC, htype: 1, ptype: 0x0800, hlen: 6, plen: 4, oper: 2,
			sha: l2MAC, spa: fxVIP, tha: askerMAC, tpa: asker, pad: pad}
		var v uint32
		var out []byte
		delta := reasonDelta(t, d, func() { v, out = f.Run(t, d.objs.XlbLbProg, req.bytes()) })
		if v != xdpTX || !bytes.Equal(out, want.bytes()) {
			t.Errorf("pad %d: verdict %s, frame\n%x\nwant XDP_TX and\n%x", pad, verdictNames[v], out, want.bytes())
		}
		if len(delta) != 1 || delta["tx_arp_reply"] != 1 {
			t.Errorf("pad %d: reasons %v, want tx_arp_reply 1", pad, delta)
		}
	}
}

// Every frame that is not a well-formed request for an owned VIP goes to
// the kernel untouched: a non-owner must never answer.
func TestARPNotAnswered(t *testing.T) {
	d, f := newL2LB(t, fxVIP)
	with := func(edit func(*arpFrame)) []byte {
		a := arpRequest(fxVIP)
		edit(&a)
		return a.bytes()
	}
	short := arpRequest(fxVIP).bytes()
	cases := []struct {
		name  string
		frame []byte
	}{
		{"request for an address not owned", arpRequest(netip.MustParseAddr("10.99.0.77")).bytes()},
		{"request for the node's own address", arpRequest(fxNode).bytes()},
		{"reply for an owned VIP", with(func(a *arpFrame) { a.oper = 2 })},
		{"gratuitous reply from another node", with(func(a *arpFrame) { a.oper = 2; a.spa = fxVIP })},
		{"not Ethernet hardware", with(func(a *arpFrame) { a.htype = 6 })},
		{"not IPv4", with(func(a *arpFrame) { a.ptype = 0x86dd })},
		{"wrong hardware length", with(func(a *arpFrame) { a.hlen = 8 })},
		{"wrong protocol length", with(func(a *arpFrame) { a.plen = 16 })},
		{"multicast sender", with(func(a *arpFrame) { a.sha = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff} })},
		{"truncated", short[:len(short)-1]},
		{"only the Ethernet header", short[:14]},
	}
	for _, c := range cases {
		var v uint32
		var out []byte
		delta := reasonDelta(t, d, func() { v, out = f.Run(t, d.objs.XlbLbProg, c.frame) })
		if v != xdpPass || !bytes.Equal(out, c.frame) || len(delta) != 1 || delta["pass_not_ipv4"] != 1 {
			t.Errorf("%s: verdict %s, reasons %v, frame changed %v; want XDP_PASS, pass_not_ipv4 1, unchanged",
				c.name, verdictNames[v], delta, !bytes.Equal(out, c.frame))
		}
	}
}

// An entry the agent stopped refreshing is not answered, and a VIP given
// up is not either.
func TestARPExpiredAndGivenUp(t *testing.T) {
	d, f := newL2LB(t, fxVIP)
	now, err := Monotonic()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetL2Owned([]netip.Addr{fxVIP}, l2MAC, now-time.Millisecond); err != nil {
		t.Fatal(err)
	}
	req := arpRequest(fxVIP).bytes()
	var v uint32
	var out []byte
	delta := reasonDelta(t, d, func() { v, out = f.Run(t, d.objs.XlbLbProg, req) })
	if v != xdpPass || !bytes.Equal(out, req) || len(delta) != 1 || delta["pass_arp_expired"] != 1 {
		t.Errorf("expired: verdict %s, reasons %v; want XDP_PASS, pass_arp_expired 1, unchanged", verdictNames[v], delta)
	}
	if err := d.SetL2Owned(nil, l2MAC, now+time.Hour); err != nil {
		t.Fatal(err)
	}
	if owned, err := d.L2Owned(); err != nil || len(owned) != 0 {
		t.Fatalf("owned after giving every VIP up: %v, %v", owned, err)
	}
	delta = reasonDelta(t, d, func() { v, out = f.Run(t, d.objs.XlbLbProg, req) })
	if v != xdpPass || !bytes.Equal(out, req) || delta["pass_not_ipv4"] != 1 {
		t.Errorf("given up: verdict %s, reasons %v; want XDP_PASS, pass_not_ipv4 1, unchanged", verdictNames[v], delta)
	}
}

// BenchmarkARP is the LB program's cost for an ARP request
// (BPF_PROG_TEST_RUN): for an address not owned, passed to the kernel,
// and for an owned VIP whose entry expired, which costs what an answer
// costs but for rewriting 28 bytes in place (an answer itself cannot be
// repeated: the first run turns the request into the reply). Decision
// 0009 cites it.
//
//	go test -run '^$' -bench BenchmarkARP ./internal/dataplane/lb/
func BenchmarkARP(b *testing.B) {
	requirePrivileges(b)
	f := newFixtureNS(b)
	d, err := New(Options{NodeAddr: fxNode, TableSize: fxTableSize})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	now, err := Monotonic()
	if err != nil {
		b.Fatal(err)
	}
	if err := d.SetL2Owned([]netip.Addr{fxVIP}, l2MAC, now-time.Second); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		to   netip.Addr
		want uint32
	}{{"not-owned", netip.MustParseAddr("10.99.0.77"), xdpPass}, {"owned-expired", fxVIP, xdpPass}} {
		b.Run(c.name, func(b *testing.B) {
			frame := arpRequest(c.to).bytes()
			var v uint32
			var per time.Duration
			err := f.Runner.Do(func() (err error) {
				v, per, err = d.objs.XlbLbProg.Benchmark(frame, b.N, nil)
				return err
			})
			if err != nil || v != c.want {
				b.Fatalf("verdict %d, %v; want %d", v, err, c.want)
			}
			b.ReportMetric(float64(per.Nanoseconds()), "ns/packet")
		})
	}
}

var (
	l2VIP6 = netip.MustParseAddr("fd00:99::1")
	asker6 = netip.MustParseAddr("fd00:10:1::50")
)

// nsFrame is a neighbour solicitation (RFC 4861 4.3) from asker6 for
// target, to its solicited-node address, with a source link-layer
// address option unless bare, then pad bytes of Ethernet padding.
type nsFrame struct {
	src      netip.Addr
	target   netip.Addr
	hopLimit uint8
	code     uint8
	bare     bool
	pad      int
	srcMAC   net.HardwareAddr
}

func solicit(target netip.Addr) nsFrame {
	return nsFrame{src: asker6, target: target, hopLimit: 255, srcMAC: askerMAC}
}

func (n nsFrame) bytes() []byte {
	t := n.target.As16()
	icmp := append([]byte{135, n.code, 0, 0, 0, 0, 0, 0}, t[:]...)
	if !n.bare {
		icmp = append(append(icmp, 1, 1), n.srcMAC...)
	}
	dst := netip.AddrFrom16([16]byte{0xff, 2, 10: 0, 11: 1, 12: 0xff, 13: t[13], 14: t[14], 15: t[15]})
	return ipv6Frame(net.HardwareAddr{0x33, 0x33, 0xff, t[13], t[14], t[15]}, n.srcMAC, n.src, dst, n.hopLimit, icmp, n.pad)
}

// ipv6Frame is an Ethernet frame with an IPv6 packet around ICMPv6
// message icmp, its checksum filled in.
func ipv6Frame(dstMAC, srcMAC net.HardwareAddr, src, dst netip.Addr, hop uint8, icmp []byte, pad int) []byte {
	ip := make([]byte, 40)
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], uint16(len(icmp)))
	ip[6], ip[7] = 58, hop
	s, d := src.As16(), dst.As16()
	copy(ip[8:], s[:])
	copy(ip[24:], d[:])
	icmp = append([]byte{}, icmp...)
	icmp[2], icmp[3] = 0, 0
	binary.BigEndian.PutUint16(icmp[2:], csum(append(pseudo6(ip, len(icmp)), icmp...)))
	f := append(append(append([]byte{}, dstMAC...), srcMAC...), 0x86, 0xdd)
	return append(append(append(f, ip...), icmp...), make([]byte, pad)...)
}

// wantAdvert is the solicited advertisement (RFC 4861 4.4, 7.2.4) of vip
// at mac to the asker of a solicitation, built from the RFC.
func wantAdvert(vip netip.Addr, mac net.HardwareAddr) []byte {
	return wantAdvertTo(vip, mac, askerMAC, asker6)
}

// wantAdvertTo is wantAdvert to another asker.
func wantAdvertTo(vip netip.Addr, mac, toMAC net.HardwareAddr, to netip.Addr) []byte {
	t := vip.As16()
	icmp := append([]byte{136, 0, 0, 0, 0x60, 0, 0, 0}, t[:]...) // solicited, override
	icmp = append(append(icmp, 2, 1), mac...)
	return ipv6Frame(toMAC, mac, vip, to, 255, icmp, 0)
}

func TestNDPAdvert(t *testing.T) {
	d, f := newL2LB(t, l2VIP6)
	for _, c := range []struct {
		name string
		ns   nsFrame
	}{
		{"with the source's link-layer address", solicit(l2VIP6)},
		{"without options: the advertisement grows", nsFrame{src: asker6, target: l2VIP6, hopLimit: 255, bare: true, srcMAC: askerMAC}},
		{"padded: the padding goes", func() nsFrame { n := solicit(l2VIP6); n.pad = 20; return n }()},
	} {
		var v uint32
		var out []byte
		delta := reasonDelta(t, d, func() { v, out = f.Run(t, d.objs.XlbLbProg, c.ns.bytes()) })
		want := wantAdvert(l2VIP6, l2MAC)
		if v != xdpTX || !bytes.Equal(out, want) {
			t.Errorf("%s: verdict %s, frame\n%x\nwant XDP_TX and\n%x", c.name, verdictNames[v], out, want)
		}
		if len(delta) != 1 || delta["tx_nd_advert"] != 1 {
			t.Errorf("%s: reasons %v, want tx_nd_advert 1", c.name, delta)
		}
		// The checksum verifies over the pseudo-header.
		if len(out) == len(want) && csum(append(pseudo6(out[14:54], len(out)-54), out[54:]...)) != 0 {
			t.Errorf("%s: the advertisement's checksum does not verify", c.name)
		}
	}
}

// Solicitations that are not for an owned VIP, or not valid, get no
// advertisement and go on unchanged to the LB path.
func TestNDPNotAnswered(t *testing.T) {
	d, f := newL2LB(t, l2VIP6)
	now, err := Monotonic()
	if err != nil {
		t.Fatal(err)
	}
	// The IPv4 VIP owned too: its key is the IPv4-mapped address.
	if err := d.SetL2Owned([]netip.Addr{l2VIP6, fxVIP}, l2MAC, now+time.Hour); err != nil {
		t.Fatal(err)
	}
	with := func(edit func(*nsFrame)) []byte {
		n := solicit(l2VIP6)
		edit(&n)
		return n.bytes()
	}
	full := solicit(l2VIP6).bytes()
	truncated := append([]byte{}, full[:len(full)-12]...)
	cases := []struct {
		name  string
		frame []byte
	}{
		{"for an address not owned", solicit(netip.MustParseAddr("fd00:99::77")).bytes()},
		{"duplicate address detection (from ::)", with(func(n *nsFrame) { n.src = netip.IPv6Unspecified() })},
		{"hop limit below 255 (routed)", with(func(n *nsFrame) { n.hopLimit = 254 })},
		{"code 1", with(func(n *nsFrame) { n.code = 1 })},
		{"from a multicast MAC", with(func(n *nsFrame) { n.srcMAC = net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1} })},
		{"payload length beyond the frame", truncated},
		{"an IPv4-mapped target, an owned IPv4 VIP's key", solicit(netip.AddrFrom16(fxVIP.As16())).bytes()},
		{"a multicast target", solicit(netip.MustParseAddr("ff02::1")).bytes()},
	}
	for _, c := range cases {
		var v uint32
		var out []byte
		delta := reasonDelta(t, d, func() { v, out = f.Run(t, d.objs.XlbLbProg, c.frame) })
		if v == xdpTX || delta["tx_nd_advert"] != 0 || (v == xdpPass && !bytes.Equal(out, c.frame)) {
			t.Errorf("%s: verdict %s, reasons %v; want no advertisement, the frame unchanged", c.name, verdictNames[v], delta)
		}
	}
	// Expired: passed, counted.
	if err := d.SetL2Owned([]netip.Addr{l2VIP6}, l2MAC, now-time.Millisecond); err != nil {
		t.Fatal(err)
	}
	var v uint32
	delta := reasonDelta(t, d, func() { v, _ = f.Run(t, d.objs.XlbLbProg, full) })
	if v != xdpPass || len(delta) != 1 || delta["pass_arp_expired"] != 1 {
		t.Errorf("expired: verdict %s, reasons %v; want XDP_PASS, pass_arp_expired 1", verdictNames[v], delta)
	}
}
