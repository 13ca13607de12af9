package main

import (
	"math"
	"slices"
	"time"
)

// Summary describes a distribution of durations, in milliseconds.
type Summary struct {
	N    int     `json:"n"`
	Min  float64 `json:"min_ms"`
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
	Mean float64 `json:"mean_ms"`
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted: the smallest sample with at least p % of the samples at or
// below it. It never interpolates, so every figure reported is a sample
// that was measured; with fewer than 100 samples p99 is the maximum.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// summarize describes samples (milliseconds); the zero Summary for none.
func summarize(samples []float64) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	var sum float64
	for _, v := range s {
		sum += v
	}
	return Summary{
		N: len(s), Min: s[0], Max: s[len(s)-1], Mean: round3(sum / float64(len(s))),
		P50: percentile(s, 50), P90: percentile(s, 90), P99: percentile(s, 99),
	}
}

// ms converts d to milliseconds with microsecond resolution.
func ms(d time.Duration) float64 { return round3(float64(d.Microseconds()) / 1000) }

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// shift returns samples each minus by.
func shift(samples []float64, by float64) []float64 {
	out := make([]float64, len(samples))
	for i, v := range samples {
		out[i] = round3(v - by)
	}
	return out
}
