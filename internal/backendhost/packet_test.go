package backendhost

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

// Test packets, built from scratch with checksums computed over the whole
// packet, so that a translated packet can be compared with the one the
// client or pod would have sent had it known the other address.

// ipPkt describes an IPv4 TCP or UDP datagram.
type ipPkt struct {
	src, dst     netip.Addr
	sport, dport uint16
	proto        uint8
	fragOff      uint16 // raw frag_off (MF, offset)
	payload      []byte
	noUDPCsum    bool // UDP checksum 0: none
}

// sum16 is the one's-complement sum of b, folded, not inverted.
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

func csum(b []byte) uint16 { return ^uint16(sum16(b, 0)) }

// pseudoSum is the sum of the TCP/UDP pseudo-header.
func pseudoSum(src, dst netip.Addr, proto uint8, l4len int) uint32 {
	s, d := src.As4(), dst.As4()
	ph := make([]byte, 12)
	copy(ph, s[:])
	copy(ph[4:], d[:])
	ph[9] = proto
	binary.BigEndian.PutUint16(ph[10:], uint16(l4len))
	return sum16(ph, 0)
}

func ipv4Header(src, dst netip.Addr, proto uint8, fragOff uint16, payloadLen int) []byte {
	h := make([]byte, 20)
	h[0] = 0x45
	binary.BigEndian.PutUint16(h[2:], uint16(20+payloadLen))
	binary.BigEndian.PutUint16(h[4:], 0x1234)
	binary.BigEndian.PutUint16(h[6:], fragOff)
	h[8] = 64
	h[9] = proto
	s, d := src.As4(), dst.As4()
	copy(h[12:], s[:])
	copy(h[16:], d[:])
	binary.BigEndian.PutUint16(h[10:], csum(h))
	return h
}

// bytes returns the IPv4 datagram.
func (p ipPkt) bytes() []byte {
	var l4 []byte
	off := 6
	if p.proto == 6 {
		l4 = make([]byte, 20+len(p.payload))
		binary.BigEndian.PutUint32(l4[4:], 1000) // seq
		l4[12] = 5 << 4
		l4[13] = 0x18 // PSH ACK
		binary.BigEndian.PutUint16(l4[14:], 65535)
		copy(l4[20:], p.payload)
		off = 16
	} else {
		l4 = make([]byte, 8+len(p.payload))
		binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
		copy(l4[8:], p.payload)
	}
	binary.BigEndian.PutUint16(l4[0:], p.sport)
	binary.BigEndian.PutUint16(l4[2:], p.dport)
	if p.proto == 6 || !p.noUDPCsum {
		c := ^uint16(sum16(l4, pseudoSum(p.src, p.dst, p.proto, len(l4))))
		if c == 0 && p.proto == 17 {
			c = 0xffff // RFC 768: a computed 0 is sent as all ones
		}
		binary.BigEndian.PutUint16(l4[off:], c)
	}
	return append(ipv4Header(p.src, p.dst, p.proto, p.fragOff, len(l4)), l4...)
}

var (
	testDstMAC = []byte{0x02, 0, 0, 0, 0x02, 0x02}
	testSrcMAC = []byte{0x02, 0, 0, 0, 0x02, 0x01}
)

// eth frames an IPv4 datagram.
func eth(ip []byte) []byte {
	f := make([]byte, 14, 14+len(ip))
	copy(f, testDstMAC)
	copy(f[6:], testSrcMAC)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	return append(f, ip...)
}

// ipip wraps a datagram in IPIP from src to dst.
func ipip(inner []byte, src, dst netip.Addr) []byte {
	return append(ipv4Header(src, dst, 4, 0, len(inner)), inner...)
}

// gue wraps a datagram in UDP to port 6080 with the given GUE header
// (none: variant 1, the IPv4 header right after UDP).
func gue(inner []byte, src, dst netip.Addr, hdr []byte) []byte {
	udp := make([]byte, 8, 8+len(hdr)+len(inner))
	binary.BigEndian.PutUint16(udp[0:], 0xc123)
	binary.BigEndian.PutUint16(udp[2:], 6080)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(hdr)+len(inner)))
	udp = append(append(udp, hdr...), inner...)
	return append(ipv4Header(src, dst, 17, 0, len(udp)), udp...)
}

// icmpError builds an ICMP error (type, code) from src to dst quoting
// quote (an IPv4 datagram, cut to its header and n bytes more).
func icmpError(src, dst netip.Addr, typ, code uint8, quote []byte, n int) []byte {
	q := quote[:min(len(quote), 20+n)]
	m := make([]byte, 8, 8+len(q))
	m[0], m[1] = typ, code
	if typ == 3 && code == 4 {
		binary.BigEndian.PutUint16(m[6:], 1400)
	}
	m = append(m, q...)
	binary.BigEndian.PutUint16(m[2:], csum(m))
	return append(ipv4Header(src, dst, 1, 0, len(m)), m...)
}

// checkDatagram verifies the IPv4 header checksum and, for TCP and UDP
// (unless the UDP checksum is 0) and ICMP, the transport checksum.
func checkDatagram(t *testing.T, d []byte) {
	t.Helper()
	if len(d) < 20 {
		t.Fatalf("datagram of %d bytes", len(d))
	}
	ihl := int(d[0]&0xf) * 4
	if c := csum(d[:ihl]); c != 0 {
		t.Errorf("IPv4 header checksum invalid (sum off by %#04x)", c)
	}
	tot := int(binary.BigEndian.Uint16(d[2:]))
	l4 := d[ihl:tot]
	var src, dst netip.Addr
	src, _ = netip.AddrFromSlice(d[12:16])
	dst, _ = netip.AddrFromSlice(d[16:20])
	switch d[9] {
	case 6:
		if c := ^uint16(sum16(l4, pseudoSum(src, dst, 6, len(l4)))); c != 0 {
			t.Errorf("TCP checksum invalid (off by %#04x)", c)
		}
	case 17:
		if binary.BigEndian.Uint16(l4[6:]) == 0 {
			return
		}
		if c := ^uint16(sum16(l4, pseudoSum(src, dst, 17, len(l4)))); c != 0 {
			t.Errorf("UDP checksum invalid (off by %#04x)", c)
		}
	case 1:
		if c := csum(l4); c != 0 {
			t.Errorf("ICMP checksum invalid (off by %#04x)", c)
		}
	}
}
