package maglev

import (
	"slices"
	"testing"
)

// fuzzSizes are the table sizes FuzzBuild picks from, with their primality
// written out so the test does not rely on IsPrime to predict errors.
var fuzzSizes = []struct {
	m     uint32
	prime bool
}{
	{0, false}, {1, false}, {2, true}, {3, true}, {4, false}, {5, true},
	{7, true}, {9, false}, {11, true}, {13, true}, {31, true}, {91, false},
	{97, true}, {251, true}, {256, false}, {257, true}, {1009, true},
	{DefaultSize, true}, {4294967291, true},
}

// fuzzBackends decodes data into backends: per backend one length byte
// (key of 0..7 bytes), the key, one weight byte. Weight bytes map to
// drained (0), small (1..168) and huge (up to ~2^32) weights so that both
// fill strategies and the empty/duplicate checks are exercised.
func fuzzBackends(data []byte) []Backend {
	var bs []Backend
	for len(data) >= 2 && len(bs) < 64 {
		l := int(data[0] % 8)
		data = data[1:]
		l = min(l, len(data)-1)
		key := string(data[:l])
		wb := data[l]
		data = data[l+1:]
		var w uint32
		switch {
		case wb < 32:
			w = 0
		case wb < 200:
			w = uint32(wb) - 31
		default:
			w = uint32(wb-199) << 26
		}
		bs = append(bs, Backend{Key: key, Weight: w})
	}
	return bs
}

// FuzzBuild checks that Build never panics, fails exactly on invalid input,
// and otherwise returns a table of length m whose entries all name a
// backend with weight > 0, independent of input order and equal to the
// literal credit-scheme reference.
func FuzzBuild(f *testing.F) {
	f.Add([]byte{3, 'a', 'b', 'c', 40, 1, 'x', 40}, uint8(9))
	f.Add([]byte{1, 'a', 0, 1, 'b', 255, 1, 'c', 50}, uint8(16))
	f.Add([]byte{1, 'a', 40, 1, 'a', 40}, uint8(10))
	f.Add([]byte{0, 40, 1, 'a', 40}, uint8(12))
	f.Add([]byte{2, 'k', '1', 250, 2, 'k', '2', 33, 2, 'k', '3', 34}, uint8(17))
	f.Fuzz(func(t *testing.T, data []byte, sizeSel uint8) {
		size := fuzzSizes[int(sizeSel)%len(fuzzSizes)]
		m := size.m
		bs := fuzzBackends(data)

		seen := map[string]bool{}
		valid := size.prime && m <= maxSize
		active := 0
		for _, b := range bs {
			if b.Key == "" || seen[b.Key] {
				valid = false
			}
			seen[b.Key] = true
			if b.Weight > 0 {
				active++
			}
		}
		valid = valid && active > 0 && active <= int(m)

		table, err := Build(bs, m)
		if !valid {
			if err == nil {
				t.Fatalf("Build(%v, %d) succeeded, want an error", bs, m)
			}
			return
		}
		if err != nil {
			t.Fatalf("Build(%v, %d): %v", bs, m, err)
		}
		if len(table) != int(m) {
			t.Fatalf("table length %d, want %d", len(table), m)
		}
		for i, idx := range table {
			if idx < 0 || idx >= len(bs) || bs[idx].Weight == 0 {
				t.Fatalf("slot %d: index %d is not a backend with weight > 0", i, idx)
			}
		}
		keys := keysOf(t, table, bs)
		rev := slices.Clone(bs)
		slices.Reverse(rev)
		if got := keysOf(t, mustBuild(t, rev, m), rev); !slices.Equal(got, keys) {
			t.Fatalf("reversed input gives a different table")
		}
		if m <= 1009 && !slices.Equal(keys, referenceBuild(bs, m)) {
			t.Fatalf("Build(%v, %d) differs from the reference credit scheme", bs, m)
		}
	})
}
