package wire

import (
	"encoding/binary"
	"net/netip"
)

// Addr is an address of either family as map keys and values hold it
// (union xlb_addr): IPv6 as it is, IPv4 as an IPv4-mapped IPv6 address
// (::ffff:a.b.c.d), so that no key needs a family beside it. All zero:
// none.
type Addr = wireXlbAddr

// AddrOf is how a map holds a; the zero Addr for the zero netip.Addr. A
// zone is not stored.
func AddrOf(a netip.Addr) Addr {
	if !a.IsValid() {
		return Addr{}
	}
	return Addr{Bytes: a.As16()}
}

// IP is the address a holds: IPv4 for an IPv4-mapped one, the zero
// netip.Addr for none.
func (a wireXlbAddr) IP() netip.Addr {
	if a == (Addr{}) {
		return netip.Addr{}
	}
	return netip.AddrFrom16(a.Bytes).Unmap()
}

// PrefixKey is how chain_from and chain_to hold prefix p: its length
// counts over the 128 bits of Addr, so an IPv4 /n is 96 + n.
func PrefixKey(p netip.Prefix) ChainPeerKey {
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	return ChainPeerKey{Prefixlen: uint32(bits), Addr: AddrOf(p.Masked().Addr())}
}

// Prefix is the prefix k holds.
func (k wireChainPeerKey) Prefix() netip.Prefix {
	a := k.Addr.IP()
	bits := int(k.Prefixlen)
	if a.Is4() {
		bits -= 96
	}
	return netip.PrefixFrom(a, bits)
}

// Addr4 is the uint32 whose little-endian bytes are the IPv4 address a in
// network order: how a program sees a __be32 it loads on this machine,
// and so how the LB's compact layouts (SvcSlot, TableEntry) and the GUE
// hint hold an IPv4 address. 0 for an address that is not IPv4.
func Addr4(a netip.Addr) uint32 {
	if !a.Is4() {
		return 0
	}
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
