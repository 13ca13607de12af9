package main

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

func TestNearestRank(t *testing.T) {
	var s []time.Duration
	for i := 1; i <= 200; i++ {
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	for p, want := range map[float64]time.Duration{50: 100 * time.Millisecond, 99: 198 * time.Millisecond, 100: 200 * time.Millisecond, 0.1: time.Millisecond} {
		if got := nearestRank(s, p); got != want {
			t.Errorf("p%g = %v, want %v", p, got, want)
		}
	}
	if nearestRank(nil, 50) != 0 {
		t.Error("no samples: want 0")
	}
	if nearestRank(s[:10], 99) != 10*time.Millisecond {
		t.Error("with fewer than 100 samples p99 is the maximum")
	}
}

func TestSummarize(t *testing.T) {
	outs := []outcome{
		{latency: 1 * time.Millisecond, backend: "be1"},
		{latency: 2 * time.Millisecond, backend: "be2"},
		{latency: 3 * time.Millisecond, backend: "be1", late: time.Millisecond},
		{err: "connect", late: 2 * time.Millisecond},
		{err: "skipped"},
	}
	r := summarize(openloopOptions{Rate: 2, Duration: 2 * time.Second}, outs)
	if r.Scheduled != 5 || r.OK != 3 || r.Achieved != 1.5 {
		t.Errorf("scheduled %d, ok %d, achieved %g", r.Scheduled, r.OK, r.Achieved)
	}
	if r.Errors["connect"] != 1 || r.Errors["skipped"] != 1 || r.ErrorCount() != 2 {
		t.Errorf("errors %v", r.Errors)
	}
	if r.AnsweredBy["be1"] != 2 || r.AnsweredBy["be2"] != 1 {
		t.Errorf("answered by %v", r.AnsweredBy)
	}
	if r.P50Ms != 2 || r.P99Ms != 3 || r.MaxMs != 3 {
		t.Errorf("p50 %g, p99 %g, max %g", r.P50Ms, r.P99Ms, r.MaxMs)
	}
	// Lateness counts every request sent, failed or not, but not the
	// skipped ones, which never started.
	if r.LateP99Ms != 2 || r.LateP50Ms != 0 {
		t.Errorf("late p50 %g, p99 %g", r.LateP50Ms, r.LateP99Ms)
	}
}

// TestRunOpenloop: the client sends rate × (warm-up + duration) requests,
// counts those after the warm-up, and takes the targets in turn; a
// request that is due while MaxInFlight are open is skipped.
func TestRunOpenloop(t *testing.T) {
	var sent atomic.Int64
	targets := map[string]*atomic.Int64{"a:80": {}, "b:80": {}}
	fake := func(_ context.Context, target string, _ time.Duration) outcome {
		sent.Add(1)
		targets[target].Add(1)
		return outcome{backend: target}
	}
	o := openloopOptions{Targets: []string{"a:80", "b:80"}, Rate: 1000, Warmup: 50 * time.Millisecond,
		Duration: 200 * time.Millisecond, Timeout: time.Second, MaxInFlight: 100}
	start := time.Now()
	r := runOpenloop(context.Background(), o, fake)
	if took := time.Since(start); took < 240*time.Millisecond || took > 5*time.Second {
		t.Errorf("took %v for 250 ms of requests", took)
	}
	if sent.Load() != 250 || r.Scheduled != 200 || r.OK != 200 {
		t.Errorf("sent %d, scheduled %d, ok %d; want 250, 200, 200", sent.Load(), r.Scheduled, r.OK)
	}
	if targets["a:80"].Load() != 125 || targets["b:80"].Load() != 125 {
		t.Errorf("targets got %d and %d", targets["a:80"].Load(), targets["b:80"].Load())
	}

	block := make(chan struct{})
	slow := func(ctx context.Context, _ string, _ time.Duration) outcome {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return outcome{backend: "be1"}
	}
	o = openloopOptions{Targets: []string{"a:80"}, Rate: 1000, Duration: 50 * time.Millisecond, Timeout: time.Second, MaxInFlight: 10}
	time.AfterFunc(200*time.Millisecond, func() { close(block) })
	r = runOpenloop(context.Background(), o, slow)
	if r.OK != 10 || r.Errors["skipped"] != 40 {
		t.Errorf("ok %d, errors %v; want 10 answered, 40 skipped", r.OK, r.Errors)
	}
}

func TestAnsweredBy(t *testing.T) {
	for _, tc := range []struct {
		in, name string
		ok       bool
	}{
		{"HTTP/1.1 200 OK\r\nServer: nginx\r\nContent-Length: 13\r\n\r\nbe3 10.0.3.4\n", "be3", true},
		{"HTTP/1.1 502 Bad Gateway\r\n\r\nbad", "", false},
		{"HTTP/1.1 200 OK\r\nContent-Length: 13\r\n", "", false},
		{"HTTP/1.1 200 OK\r\n\r\n", "", false},
		{"", "", false},
	} {
		name, ok := answeredBy([]byte(tc.in))
		if name != tc.name || ok != tc.ok {
			t.Errorf("%q: %q %v, want %q %v", tc.in, name, ok, tc.name, tc.ok)
		}
	}
}

func TestOpenloopArgs(t *testing.T) {
	o := openloopOptions{Targets: []string{"10.99.0.2:80"}, Rate: 2000, Warmup: time.Second, Duration: 4 * time.Second,
		Timeout: 2 * time.Second, MaxInFlight: 4096}
	got := shellJoin(o.args())
	want := "openloop -targets 10.99.0.2:80 -rate 2000 -warmup 1s -duration 4s -timeout 2s -max-inflight 4096"
	if got != want {
		t.Errorf("args:\n got %s\nwant %s", got, want)
	}
}
