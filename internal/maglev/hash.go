package maglev

import "github.com/xlbproject/xlb/internal/flowhash"

// The hash below decides every instance's table, so it is part of the wire
// contract between xlb instances: two instances that hash a key differently
// send the same flow to different backends. It is therefore spelled out here
// (not taken from hash/maphash, which is randomly seeded per process) and
// pinned by tests (TestHashVectors, TestGolden). Changing any constant is a
// breaking change for mixed-version clusters.

const (
	fnvOffsetBasis = 14695981039346656037 // FNV-1a 64-bit offset basis
	fnvPrime       = 1099511628211        // FNV-1a 64-bit prime

	// Domain-separation seeds, so offset and skip are independent functions
	// of the key. ASCII "maglev-o" and "maglev-s".
	offsetSeed = 0x6d61676c65762d6f
	skipSeed   = 0x6d61676c65762d73
)

// fnv1a64 is the standard 64-bit FNV-1a hash of s.
func fnv1a64(s string) uint64 {
	h := uint64(fnvOffsetBasis)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// permutation returns the start (offset) and stride (skip) of key's
// preference list over a table of prime size m: slot j of the list is
// (offset + j*skip) mod m. Because m is prime and 1 <= skip < m, the list
// visits every slot exactly once.
func permutation(key string, m uint32) (offset, skip uint32) {
	// FNV-1a alone spreads a change in the last byte of similar keys
	// ("10.0.0.1:80", "10.0.0.2:80") poorly: the finalizer makes every
	// input bit affect every output bit before the modulo.
	h := fnv1a64(key)
	offset = uint32(flowhash.Mix64(h^offsetSeed) % uint64(m))
	skip = uint32(flowhash.Mix64(h^skipSeed)%uint64(m-1)) + 1
	return offset, skip
}
