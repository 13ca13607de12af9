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

// newPingLB is the fixture LB loaded with ping_vips set to ping.
func newPingLB(t *testing.T, ping bool) (*Dataplane, *fixtureNS) {
	t.Helper()
	requirePrivileges(t)
	f := newFixtureNS(t)
	d, err := New(Options{NodeAddr: fxNode, TableSize: fxTableSize, PingVIPs: ping})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.UpsertBackend(0, apOf(fxBackend)); err != nil {
		t.Fatal(err)
	}
	splitless := make([]uint32, fxTableSize)
	if err := d.UpsertService(Service{ID: 0, Key: ServiceKey{fxVIP, 80, ProtoTCP}, Encap: EncapIPIP, Table: splitless}); err != nil {
		t.Fatal(err)
	}
	return d, f
}

// echo describes an ICMP echo request (or another ICMP message of its
// shape) to build.
type echo struct {
	src, dst  netip.Addr
	typ, code uint8
	id, seq   uint16
	payload   []byte
	options   []byte // IP options, a multiple of 4 bytes
	frag      uint16 // raw frag_off bits
	ttl       uint8
	srcMAC    []byte // nil: the fixture's
	pad       int    // Ethernet padding after the datagram
}

func (e echo) frame(dstMAC []byte) []byte {
	icmp := make([]byte, 8+len(e.payload))
	icmp[0], icmp[1] = e.typ, e.code
	binary.BigEndian.PutUint16(icmp[4:], e.id)
	binary.BigEndian.PutUint16(icmp[6:], e.seq)
	copy(icmp[8:], e.payload)
	binary.BigEndian.PutUint16(icmp[2:], csum(icmp))
	ihl := 20 + len(e.options)
	ip := make([]byte, ihl, ihl+len(icmp))
	ip[0] = 0x40 | byte(ihl/4)
	ip[1] = 0x10 // a TOS the reply keeps
	binary.BigEndian.PutUint16(ip[2:], uint16(ihl+len(icmp)))
	binary.BigEndian.PutUint16(ip[4:], 0xbeef)
	binary.BigEndian.PutUint16(ip[6:], e.frag)
	ip[8] = e.ttl
	if ip[8] == 0 {
		ip[8] = 57
	}
	ip[9] = 1
	s, d := e.src.As4(), e.dst.As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	copy(ip[20:], e.options)
	binary.BigEndian.PutUint16(ip[10:], csum(ip))
	src := e.srcMAC
	if src == nil {
		src = srcMAC
	}
	fr := append(append(append([]byte{}, dstMAC...), src...), 0x08, 0x00)
	fr = append(append(fr, ip...), icmp...)
	return append(fr, make([]byte, e.pad)...)
}

// wantReply is the echo reply to request in, built independently of the
// program: addresses swapped, type 0, TTL 64, both checksums computed
// from scratch, everything else (TOS, ID, flags, identifier, sequence,
// payload, padding) as it came.
func wantReply(in []byte) []byte {
	out := slices.Clone(in)
	copy(out[0:6], in[6:12])
	copy(out[6:12], in[0:6])
	ip := out[14:34]
	copy(ip[12:16], in[14+16:14+20])
	copy(ip[16:20], in[14+12:14+16])
	ip[8] = 64
	ip[10], ip[11] = 0, 0
	binary.BigEndian.PutUint16(ip[10:], csum(ip))
	icmp := out[34 : 14+int(binary.BigEndian.Uint16(ip[2:]))]
	icmp[0] = 0
	icmp[2], icmp[3] = 0, 0
	binary.BigEndian.PutUint16(icmp[2:], csum(icmp))
	return out
}

// TestLBPingReply: with ping_vips an echo request to a VIP comes back as
// its echo reply, byte for byte what wantReply builds from scratch (the
// program updates the ICMP checksum incrementally), with valid
// checksums, for payloads of every parity, random contents that reach
// the checksum's carries, the largest a 1500-byte MTU carries and more,
// and Ethernet padding; and counts tx_ping_reply alone.
func TestLBPingReply(t *testing.T) {
	d, f := newPingLB(t, true)
	rng := rand.New(rand.NewPCG(22, 7))
	var cases []echo
	for _, n := range []int{0, 1, 7, 56, 1472, 3000} {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(rng.IntN(256))
		}
		cases = append(cases, echo{payload: p, id: uint16(rng.IntN(1 << 16)), seq: uint16(n)})
	}
	for i := range 200 {
		p := make([]byte, 8+rng.IntN(64))
		for j := range p {
			p[j] = byte(rng.IntN(256))
		}
		cases = append(cases, echo{payload: p, id: uint16(rng.IntN(1 << 16)), seq: uint16(i), frag: uint16(rng.IntN(2)) * 0x4000})
	}
	// The checksum's corner cases: requests whose checksum is 0xffff or
	// 0x0000 before or after, found by trying identifiers.
	for _, want := range []uint16{0x0000, 0xffff, 0xf7ff, 0x0800} {
		for id := range 1 << 16 {
			e := echo{src: fxClient, dst: fxVIP, typ: 8, id: uint16(id), payload: []byte("xlb")}
			icmp := e.frame(f.MAC)[34:]
			if binary.BigEndian.Uint16(icmp[2:]) == want {
				cases = append(cases, e)
				break
			}
		}
	}
	cases = append(cases, echo{payload: []byte("padded"), pad: 12}, echo{payload: nil, ttl: 1})
	for i, e := range cases {
		e.src, e.dst, e.typ = fxClient, fxVIP, 8
		in := e.frame(f.MAC)
		var v uint32
		var out []byte
		delta := reasonDelta(t, d, func() { v, out = f.Run(t, d.objs.XlbLbProg, in) })
		name := fmt.Sprintf("request %d (payload %d bytes, identifier %#x)", i, len(e.payload), e.id)
		if v != xdpTX || delta["tx_ping_reply"] != 1 || len(delta) != 1 {
			t.Fatalf("%s: verdict %s reasons %v, want TX and tx_ping_reply alone", name, verdictNames[v], delta)
		}
		if want := wantReply(in); !bytes.Equal(out, want) {
			t.Fatalf("%s: reply\n got %x\nwant %x", name, out, want)
		}
		if csum(out[14:34]) != 0 || csum(out[34:14+int(binary.BigEndian.Uint16(out[16:18]))]) != 0 {
			t.Fatalf("%s: a checksum of the reply does not verify", name)
		}
	}
}

// TestLBPingOff: without ping_vips an echo request to a VIP is dropped as
// before (drop_vip_no_service), never answered.
func TestLBPingOff(t *testing.T) {
	d, f := newPingLB(t, false)
	in := echo{src: fxClient, dst: fxVIP, typ: 8, payload: []byte("ping")}.frame(f.MAC)
	var v uint32
	delta := reasonDelta(t, d, func() { v, _ = f.Run(t, d.objs.XlbLbProg, in) })
	if v != xdpDrop || delta["drop_vip_no_service"] != 1 || len(delta) != 1 {
		t.Fatalf("ping off: verdict %s reasons %v, want DROP drop_vip_no_service", verdictNames[v], delta)
	}
}

// TestLBPingOtherICMPUnchanged: with ping_vips on, what is not an echo
// request to a VIP goes where it went before, and the echo requests the
// node does not answer are dropped under drop_ping_refused.
func TestLBPingOtherICMPUnchanged(t *testing.T) {
	d, f := newPingLB(t, true)
	other := netip.MustParseAddr("10.0.2.99")
	base := echo{src: fxClient, dst: fxVIP, typ: 8, payload: []byte("ping")}
	with := func(mod func(*echo)) []byte {
		e := base
		mod(&e)
		return e.frame(f.MAC)
	}
	truncated := with(func(e *echo) { e.payload = nil })
	truncated = truncated[:14+20+4]
	binary.BigEndian.PutUint16(truncated[16:], 24)
	truncated[24], truncated[25] = 0, 0
	binary.BigEndian.PutUint16(truncated[24:], csum(truncated[14:34]))
	cases := []struct {
		name      string
		frame     []byte
		verdict   uint32
		reason    string
		unchanged bool
	}{
		{"echo request to another address", with(func(e *echo) { e.dst = other }), xdpPass, "pass_not_tcp_udp", true},
		{"echo reply to a VIP", with(func(e *echo) { e.typ = 0 }), xdpDrop, "drop_vip_no_service", false},
		{"timestamp request to a VIP", with(func(e *echo) { e.typ = 13 }), xdpDrop, "drop_vip_no_service", false},
		{"echo request with code 1", with(func(e *echo) { e.code = 1 }), xdpDrop, "drop_vip_no_service", false},
		{"ICMP header past the datagram", truncated, xdpDrop, "drop_vip_no_service", false},
		{"later fragment of an echo request", with(func(e *echo) { e.frag = 185 }), xdpDrop, "drop_vip_no_service", false},
		{"first fragment of an echo request", with(func(e *echo) { e.frag = 0x2000 }), xdpDrop, "drop_ping_refused", false},
		{"IP options", with(func(e *echo) { e.options = []byte{1, 1, 1, 0} }), xdpDrop, "drop_ping_refused", false},
		{"from 0.0.0.0", with(func(e *echo) { e.src = netip.MustParseAddr("0.0.0.0") }), xdpDrop, "drop_ping_refused", false},
		{"from loopback", with(func(e *echo) { e.src = netip.MustParseAddr("127.0.0.1") }), xdpDrop, "drop_ping_refused", false},
		{"from a multicast address", with(func(e *echo) { e.src = netip.MustParseAddr("224.0.0.5") }), xdpDrop, "drop_ping_refused", false},
		{"from the broadcast address", with(func(e *echo) { e.src = netip.MustParseAddr("255.255.255.255") }), xdpDrop, "drop_ping_refused", false},
		{"from a multicast MAC", with(func(e *echo) { e.srcMAC = []byte{0x01, 0, 0x5e, 0, 0, 1} }), xdpDrop, "drop_ping_refused", false},
		{"ICMP error about a reply", icmpAbout(f.MAC, 3, 4, fxVIP, fxClient, 80, 40000), xdpTX, "note_icmp_to_backend", false},
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
			if c.reason == "note_icmp_to_backend" {
				checkInner(t, checkOuter(t, out, 4, fxBackend, len(c.frame)-14, false), c.frame)
			}
		})
	}
}
