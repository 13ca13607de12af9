package dataplane

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// HashSeed is the fixed flow-hash seed (XLB_HASH_SEED in bpf/xlb_consts.h).
const HashSeed = 0x786c6231

// FlowHash is the LB program's flow hash (xlb_flow_hash in
// bpf/xlb_helpers.h), for tools and tests that predict which table slot a
// flow takes. Every xlb instance computes the same value for a flow.
func FlowHash(src, dst netip.Addr, sport, dport uint16, proto uint8) uint32 {
	s, d := src.As4(), dst.As4()
	var p [4]byte
	binary.BigEndian.PutUint16(p[0:], sport)
	binary.BigEndian.PutUint16(p[2:], dport)
	seed := uint32(HashSeed)
	init := seed + 0xdeadbeef + (3 << 2) + uint32(proto)
	a := binary.LittleEndian.Uint32(s[:]) + init
	b := binary.LittleEndian.Uint32(d[:]) + init
	c := binary.LittleEndian.Uint32(p[:]) + init

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

// Slot is the table slot a flow hash selects in a table of size slots:
// hash * size / 2^32, as the LB program computes it (a range reduction
// without a division).
func Slot(hash, size uint32) uint32 {
	return uint32(uint64(hash) * uint64(size) >> 32)
}
