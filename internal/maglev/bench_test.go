package maglev

import (
	"fmt"
	"testing"
)

// BenchmarkBuild1000 is the reference case: N = 1000 equal-weight
// backends, M = 65537.
func BenchmarkBuild1000(b *testing.B) {
	bs := equalBackends(1000)
	for b.Loop() {
		if _, err := Build(bs, DefaultSize); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBuild1000Skewed uses one very heavy backend among 999 light ones,
// where stepping through credit rounds one by one would cost O(M·N).
func BenchmarkBuild1000Skewed(b *testing.B) {
	bs := equalBackends(1000)
	bs[0].Weight = 1 << 31
	for b.Loop() {
		if _, err := Build(bs, DefaultSize); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBuildSizes(b *testing.B) {
	for _, n := range []int{10, 100} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			bs := equalBackends(n)
			for b.Loop() {
				if _, err := Build(bs, DefaultSize); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
