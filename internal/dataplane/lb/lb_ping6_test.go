package lb

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

// newPingLB6 is the IPv6 fixture (newFixtureLB6's services) loaded with
// ping_vips set to ping.
func newPingLB6(t *testing.T, ping bool) (*Dataplane, *fixtureNS) {
	t.Helper()
	requirePrivileges(t)
	f := newFixtureNS(t)
	prepareFixture6(t, f)
	d, err := New(Options{NodeAddr: fxNode, NodeAddr6: fxNode6, TableSize: fxTableSize, PingVIPs: ping})
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

// echo6 is an ICMPv6 echo request from the IPv6 client to the fixture's
// IPv6 VIP with identifier id, sequence seq and payload.
func echo6(id, seq uint16, payload []byte) pkt6 {
	msg := make([]byte, 8+len(payload))
	msg[0] = 128
	binary.BigEndian.PutUint16(msg[4:], id)
	binary.BigEndian.PutUint16(msg[6:], seq)
	copy(msg[8:], payload)
	return pkt6{Src: fxClient6, Dst: fxVIP6, Proto: 58, HopLimit: 57, Payload: msg}
}

// wantReply6 is the echo reply to request in, built independently of
// the program: Ethernet and IPv6 addresses swapped, hop limit 64, type
// 129, the checksum computed from scratch over the pseudo-header and the
// message; everything else (traffic class, flow label, identifier,
// sequence, payload) as it came.
func wantReply6(in []byte) []byte {
	out := slices.Clone(in)
	copy(out[0:6], in[6:12])
	copy(out[6:12], in[0:6])
	ip := out[14:54]
	copy(ip[8:24], in[14+24:14+40])
	copy(ip[24:40], in[14+8:14+24])
	ip[7] = 64
	icmp := out[54 : 54+int(binary.BigEndian.Uint16(ip[4:]))]
	icmp[0] = 129
	icmp[2], icmp[3] = 0, 0
	binary.BigEndian.PutUint16(icmp[2:], csum(append(pseudo6(ip, len(icmp)), icmp...)))
	return out
}

// pseudo6 is the ICMPv6 pseudo-header of IPv6 header ip for a message of
// n bytes.
func pseudo6(ip []byte, n int) []byte {
	ph := append([]byte{}, ip[8:40]...)
	return append(ph, byte(n>>24), byte(n>>16), byte(n>>8), byte(n), 0, 0, 0, 58)
}

// TestLB6PingReply: with ping_vips an ICMPv6 echo request to an IPv6 VIP
// comes back as its echo reply, byte for byte what wantReply6 builds
// from scratch (the program updates the checksum incrementally), with a
// checksum that verifies over the pseudo-header, for payloads of every
// parity and random contents, the largest a 1500-byte MTU carries, and
// identifiers that put the request's checksum on its corner values; and
// counts tx_ping_reply alone.
func TestLB6PingReply(t *testing.T) {
	d, f := newPingLB6(t, true)
	rng := rand.New(rand.NewPCG(24, 6))
	var cases []pkt6
	for _, n := range []int{0, 1, 7, 56, 1452} {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(rng.IntN(256))
		}
		cases = append(cases, echo6(uint16(rng.IntN(1<<16)), uint16(n), p))
	}
	for i := range 200 {
		p := make([]byte, rng.IntN(64))
		for j := range p {
			p[j] = byte(rng.IntN(256))
		}
		cases = append(cases, echo6(uint16(rng.IntN(1<<16)), uint16(i), p))
	}
	for _, want := range []uint16{0x0000, 0xffff, 0x7fff, 0x8000, 0x0100} {
		for id := range 1 << 16 {
			e := echo6(uint16(id), 1, []byte("xlb"))
			if binary.BigEndian.Uint16(e.frame(f.MAC)[54+2:]) == want {
				cases = append(cases, e)
				break
			}
		}
	}
	for i, e := range cases {
		in := e.frame(f.MAC)
		var v uint32
		var out []byte
		delta := reasonDelta(t, d, func() { v, out = f.Run(t, d.objs.XlbLbProg, in) })
		name := fmt.Sprintf("request %d (%d bytes, checksum %#04x)", i, len(e.Payload), binary.BigEndian.Uint16(in[56:]))
		if v != xdpTX || delta["tx_ping_reply"] != 1 || len(delta) != 1 {
			t.Fatalf("%s: verdict %s reasons %v, want TX and tx_ping_reply alone", name, verdictNames[v], delta)
		}
		want := wantReply6(in)
		// 0x0000 and 0xffff are the same checksum (ones' complement);
		// the verification below holds either.
		if !bytes.Equal(out, want) {
			t.Fatalf("%s: reply\n got %x\nwant %x", name, out, want)
		}
		if csum(append(pseudo6(out[14:54], len(out)-54), out[54:]...)) != 0 {
			t.Fatalf("%s: the reply's checksum does not verify", name)
		}
	}
}

// TestLB6PingOtherICMPUnchanged: with ping_vips on, neighbour discovery
// and every ICMPv6 message that is not an echo request to a VIP go
// where they went before; the echo requests the node does not answer are
// dropped under drop_ping_refused.
func TestLB6PingOtherICMPUnchanged(t *testing.T) {
	d, f := newPingLB6(t, true)
	base := echo6(7, 1, []byte("ping"))
	with := func(mod func(*pkt6)) []byte {
		e := base
		e.Payload = slices.Clone(base.Payload)
		mod(&e)
		return e.frame(f.MAC)
	}
	ns := pkt6{Src: fxClient6, Dst: fxVIP6, Proto: 58, HopLimit: 255, Payload: append([]byte{135, 0, 0, 0, 0, 0, 0, 0}, fxVIP6.AsSlice()...)}
	na := pkt6{Src: fxClient6, Dst: fxVIP6, Proto: 58, HopLimit: 255, Payload: append([]byte{136, 0, 0, 0, 0x60, 0, 0, 0}, fxClient6.AsSlice()...)}
	multicastMAC := with(func(*pkt6) {})
	copy(multicastMAC[6:12], []byte{0x33, 0x33, 0, 0, 0, 1})
	cases := []struct {
		name      string
		frame     []byte
		verdict   uint32
		reason    string
		unchanged bool
	}{
		{"neighbour solicitation for a VIP", ns.frame(f.MAC), xdpPass, "pass_not_tcp_udp", true},
		{"neighbour advertisement to a VIP", na.frame(f.MAC), xdpPass, "pass_not_tcp_udp", true},
		{"echo request to another address", with(func(e *pkt6) { e.Dst = netip.MustParseAddr("fd00:55::1") }), xdpPass, "pass_not_tcp_udp", true},
		{"echo reply to a VIP", with(func(e *pkt6) { e.Payload[0] = 129 }), xdpDrop, "drop_vip_no_service", false},
		{"echo request with code 1", with(func(e *pkt6) { e.Payload[1] = 1 }), xdpDrop, "drop_vip_no_service", false},
		{"ICMPv6 header past the datagram", with(func(e *pkt6) { e.Payload = e.Payload[:6] }), xdpDrop, "drop_vip_no_service", false},
		{"with a hop-by-hop header", with(func(e *pkt6) { e.Ext = []ext6{{0, make([]byte, 6)}} }), xdpDrop, "drop_ping_refused", false},
		{"fragment of an echo request", with(func(e *pkt6) { e.Ext = []ext6{{44, make([]byte, 6)}} }), xdpDrop, "drop_fragment", false},
		{"from the unspecified address", with(func(e *pkt6) { e.Src = netip.IPv6Unspecified() }), xdpDrop, "drop_ping_refused", false},
		{"from loopback", with(func(e *pkt6) { e.Src = netip.IPv6Loopback() }), xdpDrop, "drop_ping_refused", false},
		{"from a multicast address", with(func(e *pkt6) { e.Src = netip.MustParseAddr("ff02::1") }), xdpDrop, "drop_ping_refused", false},
		{"from an IPv4-mapped address", with(func(e *pkt6) { e.Src = netip.MustParseAddr("::ffff:10.0.2.2") }), xdpDrop, "drop_ping_refused", false},
		{"from a multicast MAC", multicastMAC, xdpDrop, "drop_ping_refused", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var v uint32
			var out []byte
			delta := reasonDelta(t, d, func() { v, out = f.Run(t, d.objs.XlbLbProg, c.frame) })
			if v != c.verdict || delta[c.reason] != 1 || len(delta) != 1 {
				t.Errorf("verdict %s reasons %v, want %s and exactly %s 1", verdictNames[v], delta, verdictNames[c.verdict], c.reason)
			}
			if c.unchanged && !bytes.Equal(out, c.frame) {
				t.Errorf("frame changed:\n got %x\nwant %x", out, c.frame)
			}
		})
	}
}

// TestLB6PingOff: without ping_vips an echo request to an IPv6 VIP is
// dropped as before, never answered.
func TestLB6PingOff(t *testing.T) {
	d, f := newPingLB6(t, false)
	var v uint32
	delta := reasonDelta(t, d, func() { v, _ = f.Run(t, d.objs.XlbLbProg, echo6(1, 1, []byte("ping")).frame(f.MAC)) })
	if v != xdpDrop || delta["drop_vip_no_service"] != 1 || len(delta) != 1 {
		t.Fatalf("ping off: verdict %s reasons %v, want DROP drop_vip_no_service", verdictNames[v], delta)
	}
}
