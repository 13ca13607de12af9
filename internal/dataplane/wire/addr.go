package wire

import (
	"encoding/binary"
	"net/netip"
)

// Addr4 is the uint32 whose little-endian bytes are the IPv4 address a in
// network order: how a program sees a __be32 it loads on this machine,
// and so how every map key and value holds an address. a must be IPv4.
func Addr4(a netip.Addr) uint32 {
	b := a.As4()
	return binary.LittleEndian.Uint32(b[:])
}

// AddrFrom4 is the address that Addr4 stores as v.
func AddrFrom4(v uint32) netip.Addr {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

// Port is how a map holds port p (a __be16 as a program loads it).
func Port(p uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], p)
	return binary.LittleEndian.Uint16(b[:])
}

// PortFrom is the port that Port stores as v.
func PortFrom(v uint16) uint16 {
	var b [2]byte
	binary.LittleEndian.PutUint16(b[:], v)
	return binary.BigEndian.Uint16(b[:])
}
