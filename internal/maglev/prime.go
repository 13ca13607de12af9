package maglev

// IsPrime reports whether n is prime. Maglev needs a prime table size so
// that every skip in [1, m-1] is coprime to m and each backend's preference
// list is a full permutation of the slots.
//
// Trial division by 6k±1 up to sqrt(n) is exact for every uint32 and costs
// at most about 22,000 divisions, which is negligible next to a table build.
func IsPrime(n uint32) bool {
	switch {
	case n < 2:
		return false
	case n < 4:
		return true
	case n%2 == 0 || n%3 == 0:
		return false
	}
	// d*d cannot overflow: d stays below 65537 because the loop ends once
	// d*d > n and n < 2^32.
	for d := uint64(5); d*d <= uint64(n); d += 6 {
		if uint64(n)%d == 0 || uint64(n)%(d+2) == 0 {
			return false
		}
	}
	return true
}
