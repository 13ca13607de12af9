package benchutil

import (
	"math"
	"slices"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(i + 1) // 1..100
	}
	sixty := make([]float64, 60)
	for i := range sixty {
		sixty[i] = float64(10 * (i + 1)) // 10..600
	}
	tests := []struct {
		name   string
		sorted []float64
		p      float64
		want   float64
	}{
		{"one sample is every percentile", []float64{7}, 50, 7},
		{"one sample, p99", []float64{7}, 99, 7},
		{"median of two is the lower", []float64{1, 2}, 50, 1},
		{"p50 of 1..100", hundred, 50, 50},
		{"p90 of 1..100", hundred, 90, 90},
		{"p99 of 1..100", hundred, 99, 99},
		{"p100 is the maximum", hundred, 100, 100},
		{"tiny p is the minimum", hundred, 0.001, 1},
		// ceil(0.99 × 60) = 60: below 100 samples p99 is the maximum.
		{"p99 of 60 samples", sixty, 99, 600},
		{"p90 of 60 samples", sixty, 90, 540},
		{"p50 of 60 samples", sixty, 50, 300},
	}
	for _, tc := range tests {
		if got := Percentile(tc.sorted, tc.p); got != tc.want {
			t.Errorf("%s: Percentile(p=%g) = %g, want %g", tc.name, tc.p, got, tc.want)
		}
	}
	if got := Percentile(nil, 50); !math.IsNaN(got) {
		t.Errorf("percentile of nothing = %g, want NaN", got)
	}
}

func TestSummarize(t *testing.T) {
	in := []float64{5, 1, 4, 2, 3}
	orig := slices.Clone(in)
	s := Summarize(in)
	want := Summary{N: 5, Min: 1, P50: 3, P90: 5, P99: 5, Max: 5, Mean: 3}
	if s != want {
		t.Errorf("Summarize(%v) = %+v, want %+v", orig, s, want)
	}
	if !slices.Equal(in, orig) {
		t.Errorf("Summarize reordered its input: %v", in)
	}
	if s := Summarize(nil); s != (Summary{}) {
		t.Errorf("Summarize(nil) = %+v, want zero", s)
	}
}

func TestShiftAndMs(t *testing.T) {
	if got := Shift([]float64{350.5, 400, 420.25}, 400); !slices.Equal(got, []float64{-49.5, 0, 20.25}) {
		t.Errorf("Shift = %v", got)
	}
	for _, tc := range []struct {
		d    time.Duration
		want float64
	}{
		{1500 * time.Microsecond, 1.5},
		{400 * time.Millisecond, 400},
		{1234567 * time.Nanosecond, 1.234}, // microsecond resolution
		{0, 0},
	} {
		if got := Ms(tc.d); got != tc.want {
			t.Errorf("Ms(%v) = %v, want %v", tc.d, got, tc.want)
		}
	}
}

func TestFmtMsAndRow(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{{3.14, "3.1"}, {-2.25, "-2.2"}, {9.96, "10.0"}, {10, "10"}, {1234.5, "1234"}, {-12.7, "-13"}} {
		if got := FmtMs(tc.v); got != tc.want {
			t.Errorf("FmtMs(%v) = %q, want %q", tc.v, got, tc.want)
		}
	}
	s := Summarize([]float64{1.5, 20, 300})
	if got, want := SummaryRow(s), "3 | 20 | 300 | 300 | 300"; got != want {
		t.Errorf("SummaryRow = %q, want %q", got, want)
	}
}
