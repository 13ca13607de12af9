package lb

import (
	"encoding/binary"
	"math/bits"
	"net/netip"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/internal/flowhash"
)

// HashSeed is the fixed flow-hash seed (XLB_HASH_SEED in bpf/xlb_consts.h).
const HashSeed = 0x786c6231

// hashSeed64 is fmix64's seed (XLB_HASH_SEED64): HashSeed, then lookup3's
// constant.
const hashSeed64 = HashSeed<<32 | 0xdeadbeef

// FlowHash is the LB program's default flow hash (xlb_flow_hash in
// bpf/xlb_lb.h), for tools and tests that predict which table slot a
// flow takes. Every xlb instance computes the same value for a flow.
func FlowHash(src, dst netip.Addr, sport, dport uint16, proto uint8) uint32 {
	return FlowHashOf(wire.FlowHashFmix64, src, dst, sport, dport, proto)
}

// FlowHashOf is the LB program's flow hash of the given kind.
// An IPv6 flow (dst IPv6) has one hash whatever kind says (FlowHash6).
func FlowHashOf(kind wire.FlowHash, src, dst netip.Addr, sport, dport uint16, proto uint8) uint32 {
	var p [4]byte
	binary.BigEndian.PutUint16(p[0:], sport)
	binary.BigEndian.PutUint16(p[2:], dport)
	pw := binary.LittleEndian.Uint32(p[:])
	if dst.Is6() {
		return flowHash6(src.As16(), dst.As16(), pw, proto)
	}
	s, d := src.As4(), dst.As4()
	sw, dw := binary.LittleEndian.Uint32(s[:]), binary.LittleEndian.Uint32(d[:])
	if kind == wire.FlowHashLookup3 {
		return lookup3(sw, dw, pw, proto)
	}
	return flowFmix64(sw, dw, pw, proto)
}

// flowFmix64 is xlb_flow_hash_fmix64 over the words as the program loads
// them: ports is sport | dport << 16.
func flowFmix64(saddr, daddr, ports uint32, proto uint8) uint32 {
	k := uint64(saddr)<<32 | uint64(ports)
	k ^= uint64(daddr) ^ uint64(proto)<<56 ^ hashSeed64
	return uint32(flowhash.Mix64(k))
}

// flowHash6 is xlb_flow_hash6 (bpf/xlb_lb6.h), the flow hash of IPv6
// flows: the client's 128 bits through two rounds of fmix64, then ports,
// protocol and the VIP folded to 32 bits through a third. The words
// enter as the program loads them (little-endian loads of wire bytes).
func flowHash6(src, dst [16]byte, ports uint32, proto uint8) uint32 {
	le := func(b []byte) uint64 { return uint64(binary.LittleEndian.Uint32(b)) }
	k := flowhash.Mix64((le(src[0:])|le(src[4:])<<32)^hashSeed64) ^ (le(src[8:]) | le(src[12:])<<32)
	d := le(dst[0:]) ^ le(dst[4:]) ^ le(dst[8:]) ^ le(dst[12:])
	k = flowhash.Mix64(k) ^ uint64(ports) ^ d<<32 ^ uint64(proto)<<56
	return uint32(flowhash.Mix64(k))
}

// lookup3 is xlb_flow_hash_lookup3.
func lookup3(saddr, daddr, ports uint32, proto uint8) uint32 {
	seed := uint32(HashSeed)
	init := seed + 0xdeadbeef + (3 << 2) + uint32(proto)
	a := saddr + init
	b := daddr + init
	c := ports + init

	c ^= b
	c -= bits.RotateLeft32(b, 14)
	a ^= c
	a -= bits.RotateLeft32(c, 11)
	b ^= a
	b -= bits.RotateLeft32(a, 25)
	c ^= b
	c -= bits.RotateLeft32(b, 16)
	a ^= c
	a -= bits.RotateLeft32(c, 4)
	b ^= a
	b -= bits.RotateLeft32(a, 14)
	c ^= b
	c -= bits.RotateLeft32(b, 24)
	return c
}

// HashedPort is the source port the flow hash of a service sees
// (hashed_sport in bpf/xlb_lb.h): none with client-IP affinity, so that
// every connection of a client hashes alike.
func HashedPort(sport uint16, clientIP bool) uint16 {
	if clientIP {
		return 0
	}
	return sport
}

// TunnelPort is the GUE outer source port of a flow whose flow hash is
// hash (tunnel_hash and encap_ipv4 in bpf/): 14 bits of the hash in the
// ephemeral range, with the source port mixed back in where client-IP
// affinity left it out of the hash, so that a client's connections keep
// their own outer ports.
func TunnelPort(hash uint32, sport uint16, clientIP bool) uint16 {
	if clientIP {
		hash ^= uint32(wire.Port(sport))
	}
	return uint16(0xc000 | hash&0x3fff)
}

// Slot is the table slot a flow hash selects in a table of size slots:
// hash * size / 2^32, as the LB program computes it (a range reduction
// without a division).
func Slot(hash, size uint32) uint32 {
	return uint32(uint64(hash) * uint64(size) >> 32)
}
