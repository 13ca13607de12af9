package maglev

import (
	"hash/fnv"
	"math/rand/v2"
	"testing"
)

// TestFNV1a64 checks the inlined hash against the standard library's FNV-1a,
// so the documented "FNV-1a 64" is what the code computes.
func TestFNV1a64(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	inputs := []string{"", "a", "10.0.3.2:80", "[2001:db8::1]:443"}
	for range 200 {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		inputs = append(inputs, string(b))
	}
	for _, s := range inputs {
		h := fnv.New64a()
		h.Write([]byte(s))
		if got, want := fnv1a64(s), h.Sum64(); got != want {
			t.Fatalf("fnv1a64(%q) = %#x, want %#x", s, got, want)
		}
	}
}

// TestHashVectors pins offset and skip for a few keys. These values are the
// contract between xlb instances of different versions: if this test fails,
// the change makes old and new instances build different tables.
func TestHashVectors(t *testing.T) {
	// Cross-checked with an independent Python implementation of the
	// documented hash when these were pinned.
	tests := []struct {
		key          string
		m            uint32
		offset, skip uint32
	}{
		{"10.0.3.2:80", DefaultSize, 44123, 10167},
		{"10.0.3.3:80", DefaultSize, 53630, 28788},
		{"backend-a", 13, 6, 4},
	}
	for _, tt := range tests {
		offset, skip := permutation(tt.key, tt.m)
		if offset != tt.offset || skip != tt.skip {
			t.Errorf("permutation(%q, %d) = (%d, %d), want (%d, %d)", tt.key, tt.m, offset, skip, tt.offset, tt.skip)
		}
	}
}

// TestPermutationRange checks offset < m and 1 <= skip < m, which make the
// preference list a full permutation when m is prime.
func TestPermutationRange(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, m := range []uint32{2, 3, 5, 13, 251, DefaultSize, 4294967291} {
		for range 2000 {
			key := randKey(rng)
			offset, skip := permutation(key, m)
			if offset >= m || skip < 1 || skip >= m {
				t.Fatalf("permutation(%q, %d) = (%d, %d): out of range", key, m, offset, skip)
			}
		}
	}
}

func randKey(rng *rand.Rand) string {
	b := make([]byte, 1+rng.IntN(20))
	for i := range b {
		b[i] = byte(32 + rng.IntN(95))
	}
	return string(b)
}
