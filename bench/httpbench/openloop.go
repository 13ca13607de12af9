package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The constant-rate (open-loop) client: wrk waits for an answer before it
// sends the next request on a connection, so a slow path slows the
// client down and hides its own latency (coordinated omission). This
// client starts request i at start + i/rate whatever happened to the
// others, on a new connection each, and times it from the moment it
// starts (the dial) to the end of the answer. A slow path cannot delay
// the starts, only the CPU can: how late each request started against
// its schedule is reported beside the latency (Go's timers alone are up
// to about a millisecond late, which timing from the schedule would add
// to every sample). It runs as a process of its own inside the client
// namespace: the benchmark executes itself there with the subcommand
// openloopCommand and reads the JSON it prints.

// openloopCommand is the hidden subcommand of the client.
const openloopCommand = "openloop"

// openloopOptions are the client's settings.
type openloopOptions struct {
	Targets  []string      // host:port, taken in turn
	Rate     float64       // requests per second
	Warmup   time.Duration // sent, not counted
	Duration time.Duration // counted
	Timeout  time.Duration // per request, from its start
	// MaxInFlight bounds the open requests: a request due while that
	// many are open is not sent and counts as Skipped.
	MaxInFlight int
}

// args is the command line that runs the client with o.
func (o openloopOptions) args() []string {
	return []string{openloopCommand, "-targets", strings.Join(o.Targets, ","),
		"-rate", fmt.Sprint(o.Rate), "-warmup", o.Warmup.String(), "-duration", o.Duration.String(),
		"-timeout", o.Timeout.String(), "-max-inflight", fmt.Sprint(o.MaxInFlight)}
}

// OpenloopResult is what the client measured in the counted window.
type OpenloopResult struct {
	Rate      float64 `json:"offered_per_s"`
	Seconds   float64 `json:"seconds"`
	Scheduled int     `json:"scheduled"`
	OK        int     `json:"ok"`
	// Achieved is OK per second of the counted window.
	Achieved float64 `json:"achieved_per_s"`
	// Errors by kind: connect, write, read (with timeouts), status (not
	// 200), skipped (MaxInFlight open at the time).
	Errors map[string]int `json:"errors,omitempty"`
	// Late is how late the client started the requests against their
	// schedule: far above a millisecond, the client itself could not
	// keep the rate.
	LateP50Ms float64 `json:"start_late_p50_ms"`
	LateP99Ms float64 `json:"start_late_p99_ms"`
	P50Ms     float64 `json:"p50_ms"`
	P90Ms     float64 `json:"p90_ms"`
	P99Ms     float64 `json:"p99_ms"`
	MaxMs     float64 `json:"max_ms"`
	// AnsweredBy counts the answers by the backend that gave them (the
	// first word of the body).
	AnsweredBy map[string]int `json:"answered_by"`
}

// ErrorCount is the sum of Errors.
func (r OpenloopResult) ErrorCount() int {
	n := 0
	for _, v := range r.Errors {
		n += v
	}
	return n
}

// openloopMain runs the client subcommand: args are its flags. It prints
// the result as JSON on standard output.
func openloopMain(args []string) error {
	fs := flag.NewFlagSet(openloopCommand, flag.ContinueOnError)
	targets := fs.String("targets", "", "comma-separated host:port, taken in turn")
	var o openloopOptions
	fs.Float64Var(&o.Rate, "rate", 1000, "requests per second")
	fs.DurationVar(&o.Warmup, "warmup", time.Second, "time sent but not counted")
	fs.DurationVar(&o.Duration, "duration", 5*time.Second, "time counted")
	fs.DurationVar(&o.Timeout, "timeout", 2*time.Second, "per request")
	fs.IntVar(&o.MaxInFlight, "max-inflight", 4096, "open requests at most")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for t := range strings.SplitSeq(*targets, ",") {
		if t = strings.TrimSpace(t); t != "" {
			o.Targets = append(o.Targets, t)
		}
	}
	if len(o.Targets) == 0 || o.Rate <= 0 || o.Duration <= 0 || o.Warmup < 0 || o.Timeout <= 0 || o.MaxInFlight < 1 {
		return errors.New("openloop: want -targets, and -rate, -duration, -timeout, -max-inflight above 0")
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.Warmup+o.Duration+o.Timeout+10*time.Second)
	defer cancel()
	res := runOpenloop(ctx, o, dialHTTP)
	return json.NewEncoder(os.Stdout).Encode(res)
}

// outcome is one request's end.
type outcome struct {
	latency time.Duration
	late    time.Duration // start against the schedule
	backend string
	err     string // "" or an Errors kind
}

// requestFunc sends one request to target and returns its outcome
// without the latency.
type requestFunc func(ctx context.Context, target string, timeout time.Duration) outcome

// runOpenloop sends o.Rate requests a second for o.Warmup+o.Duration and
// returns what the ones scheduled after the warm-up measured.
func runOpenloop(ctx context.Context, o openloopOptions, do requestFunc) OpenloopResult {
	total := int(math.Round((o.Warmup + o.Duration).Seconds() * o.Rate))
	skip := int(math.Round(o.Warmup.Seconds() * o.Rate))
	outs := make([]outcome, total)
	var open atomic.Int64
	var wg sync.WaitGroup
	start := time.Now().Add(10 * time.Millisecond)
	for i := range total {
		at := start.Add(time.Duration(float64(i) * float64(time.Second) / o.Rate))
		// Sleep only for gaps worth a timer; shorter ones are sent
		// at once, a little early rather than late.
		if d := time.Until(at); d > 200*time.Microsecond {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
		if ctx.Err() != nil {
			for j := i; j < total; j++ {
				outs[j].err = "skipped"
			}
			break
		}
		if open.Load() >= int64(o.MaxInFlight) {
			outs[i].err = "skipped"
			continue
		}
		open.Add(1)
		wg.Add(1)
		go func(i int, at time.Time) {
			defer wg.Done()
			defer open.Add(-1)
			t0 := time.Now()
			out := do(ctx, o.Targets[i%len(o.Targets)], o.Timeout)
			out.latency, out.late = time.Since(t0), max(0, t0.Sub(at))
			outs[i] = out
		}(i, at)
	}
	wg.Wait()
	return summarize(o, outs[skip:])
}

// summarize computes the result from the counted requests' outcomes.
func summarize(o openloopOptions, outs []outcome) OpenloopResult {
	r := OpenloopResult{Rate: o.Rate, Seconds: o.Duration.Seconds(), Scheduled: len(outs),
		Errors: map[string]int{}, AnsweredBy: map[string]int{}}
	var lat, late []time.Duration
	for _, out := range outs {
		if out.err != "skipped" {
			late = append(late, out.late)
		}
		if out.err != "" {
			r.Errors[out.err]++
			continue
		}
		r.OK++
		r.AnsweredBy[out.backend]++
		lat = append(lat, out.latency)
	}
	if len(r.Errors) == 0 {
		r.Errors = nil
	}
	if r.Seconds > 0 {
		r.Achieved = round3(float64(r.OK) / r.Seconds)
	}
	slices.Sort(lat)
	slices.Sort(late)
	msOf := func(d time.Duration) float64 { return round3(float64(d) / 1e6) }
	r.P50Ms, r.P90Ms, r.P99Ms = msOf(nearestRank(lat, 50)), msOf(nearestRank(lat, 90)), msOf(nearestRank(lat, 99))
	if len(lat) > 0 {
		r.MaxMs = msOf(lat[len(lat)-1])
	}
	r.LateP50Ms, r.LateP99Ms = msOf(nearestRank(late, 50)), msOf(nearestRank(late, 99))
	return r
}

// nearestRank is the p-th percentile of sorted by the nearest-rank
// method: always one of the samples; 0 without samples.
func nearestRank(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	k := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(k, 1), len(sorted))-1]
}

// dialHTTP sends one GET with "Connection: close" on a new connection
// and reads the whole answer.
func dialHTTP(ctx context.Context, target string, timeout time.Duration) outcome {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		return outcome{err: "connect"}
	}
	defer c.Close()
	deadline, _ := ctx.Deadline()
	_ = c.SetDeadline(deadline)
	host, _, _ := net.SplitHostPort(target)
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n"); err != nil {
		return outcome{err: "write"}
	}
	b, err := io.ReadAll(io.LimitReader(c, 64<<10))
	if err != nil {
		return outcome{err: "read"}
	}
	name, ok := answeredBy(b)
	if !ok {
		return outcome{err: "status"}
	}
	return outcome{backend: name}
}

// answeredBy checks that b is a whole 200 answer and returns the
// backend its body names.
func answeredBy(b []byte) (string, bool) {
	head, rest, ok := bytes.Cut(b, []byte("\r\n\r\n"))
	if !ok || !bytes.HasPrefix(head, []byte("HTTP/1.1 200 ")) {
		return "", false
	}
	f := strings.Fields(string(rest))
	if len(f) == 0 {
		return "", false
	}
	return f[0], true
}
