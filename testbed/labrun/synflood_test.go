package labrun

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

// The SYN's TCP checksum verifies over the pseudo-header, as a receiver
// checks it.
func TestSYNPacket(t *testing.T) {
	pkt := make([]byte, 40)
	synPacket(pkt, 0x0a000281, netip.MustParseAddrPort("10.99.0.1:80"), 40000, 12345)
	sum := uint32(0)
	for i := 12; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(pkt[i:]))
	}
	sum += 6 + 20
	for i := 20; i < 40; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(pkt[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	if sum != 0xffff {
		t.Errorf("TCP checksum does not verify: sum %#x", sum)
	}
	if pkt[33] != 0x02 || binary.BigEndian.Uint16(pkt[22:]) != 80 || netip.AddrFrom4([4]byte(pkt[12:16])).String() != "10.0.2.129" {
		t.Errorf("not a SYN from 10.0.2.129 to port 80: %x", pkt)
	}
}
