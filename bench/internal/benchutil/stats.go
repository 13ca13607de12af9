// Package benchutil holds what xlb's benchmark programs (bench/ctlbench,
// bench/bgpbench, bench/k8sbench) share: latency statistics, the machine
// a run happened on, keeping results (JSON files, rendered again with
// -render, a generated section of docs/benchmarks.md) and the parts of
// their SVG plots that are drawn alike.
package benchutil

import (
	"context"
	"fmt"
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

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted: the smallest sample with at least p % of the samples at or
// below it. It never interpolates, so every figure reported is a sample
// that was measured; with fewer than 100 samples p99 is the maximum.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// Summarize describes samples (milliseconds); the zero Summary for none.
func Summarize(samples []float64) Summary {
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
		N: len(s), Min: s[0], Max: s[len(s)-1], Mean: Round3(sum / float64(len(s))),
		P50: Percentile(s, 50), P90: Percentile(s, 90), P99: Percentile(s, 99),
	}
}

// Ms converts d to milliseconds with microsecond resolution.
func Ms(d time.Duration) float64 { return Round3(float64(d.Microseconds()) / 1000) }

// Round3 rounds v to three decimals.
func Round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// Shift returns samples each minus by.
func Shift(samples []float64, by float64) []float64 {
	out := make([]float64, len(samples))
	for i, v := range samples {
		out[i] = Round3(v - by)
	}
	return out
}

// FmtMs formats milliseconds: whole ones from 10 ms on, tenths below.
func FmtMs(v float64) string {
	if v < 10 && v > -10 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

// SummaryRow formats a Summary as markdown table cells: n | p50 | p90 |
// p99 | max.
func SummaryRow(s Summary) string {
	return fmt.Sprintf("%d | %s | %s | %s | %s", s.N, FmtMs(s.P50), FmtMs(s.P90), FmtMs(s.P99), FmtMs(s.Max))
}

// Sleep waits d or until ctx ends.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
