package maglev

import (
	"math/big"
	"math/rand/v2"
	"testing"
)

// TestIsPrimeSieve compares IsPrime with a sieve of Eratosthenes over a
// range that covers every branch of the trial division.
func TestIsPrimeSieve(t *testing.T) {
	const limit = 200_000
	composite := make([]bool, limit)
	composite[0], composite[1] = true, true
	for i := 2; i*i < limit; i++ {
		if !composite[i] {
			for j := i * i; j < limit; j += i {
				composite[j] = true
			}
		}
	}
	for n := range uint32(limit) {
		if got, want := IsPrime(n), !composite[n]; got != want {
			t.Fatalf("IsPrime(%d) = %v, want %v", n, got, want)
		}
	}
}

// TestIsPrimeLarge checks values near 2^32, where d*d and the loop bound
// matter, against math/big (exact below 2^64).
func TestIsPrimeLarge(t *testing.T) {
	check := func(n uint32) {
		t.Helper()
		if got, want := IsPrime(n), new(big.Int).SetUint64(uint64(n)).ProbablyPrime(0); got != want {
			t.Fatalf("IsPrime(%d) = %v, want %v", n, got, want)
		}
	}
	for n := uint32(1<<32 - 1); n > 1<<32-2000; n-- {
		check(n)
	}
	// Squares of primes near 2^16 are the trial division's hardest cases.
	for _, p := range []uint32{65521, 65519, 65497, 65537} {
		if uint64(p)*uint64(p) < 1<<32 {
			check(p * p)
		}
		check(p)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20_000 {
		check(rng.Uint32())
	}
}

func TestIsPrimeKnown(t *testing.T) {
	tests := []struct {
		n    uint32
		want bool
	}{
		{0, false}, {1, false}, {2, true}, {3, true}, {4, false},
		{25, false}, {49, false}, {65536, false}, {DefaultSize, true},
		{4294967291, true}, // largest uint32 prime
		{4294967295, false},
	}
	for _, tt := range tests {
		if got := IsPrime(tt.n); got != tt.want {
			t.Errorf("IsPrime(%d) = %v, want %v", tt.n, got, tt.want)
		}
	}
}
