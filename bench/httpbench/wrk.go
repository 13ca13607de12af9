package main

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// Modes of the throughput runs.
const (
	modeKeepAlive = "keep-alive"
	// modeClose sends every request on a new connection: wrk with
	// "Connection: close", so the backend closes after each answer and
	// wrk connects again.
	modeClose = "new-connection"
)

// wrkSettings are wrk's parameters, the dissertation's (Table 4.1:
// -c800 -t40 -d30s, 20 connections per thread, 5 threads per core of an
// 8-core client) scaled to this machine.
type wrkSettings struct {
	Threads  int           `json:"threads"`
	Conns    int           `json:"connections"`
	Duration time.Duration `json:"duration_ns"`
	Timeout  time.Duration `json:"timeout_ns"`
}

// wrkArgs is wrk's command line for one run against url; script is the
// Lua script (direct path) or "".
func wrkArgs(s wrkSettings, d time.Duration, mode, script, url string) []string {
	args := []string{"wrk", "-t", strconv.Itoa(s.Threads), "-c", strconv.Itoa(s.Conns),
		"-d", wrkDuration(d), "--timeout", wrkDuration(s.Timeout), "--latency"}
	if mode == modeClose {
		args = append(args, "-H", "Connection: close")
	}
	if script != "" {
		args = append(args, "-s", script)
	}
	return append(args, url)
}

// wrkDuration writes d as wrk reads it: whole seconds, at least one.
func wrkDuration(d time.Duration) string {
	return strconv.Itoa(max(1, int(d.Round(time.Second)/time.Second))) + "s"
}

// WrkResult is what one wrk run reports.
type WrkResult struct {
	Requests int     `json:"requests"`
	Seconds  float64 `json:"seconds"`
	RPS      float64 `json:"requests_per_s"`
	P50Ms    float64 `json:"latency_p50_ms"`
	P90Ms    float64 `json:"latency_p90_ms"`
	P99Ms    float64 `json:"latency_p99_ms"`
	// Socket errors by kind, and answers that were not 2xx or 3xx.
	Connect int `json:"connect_errors"`
	Read    int `json:"read_errors"`
	Write   int `json:"write_errors"`
	Timeout int `json:"timeouts"`
	Non2xx  int `json:"non_2xx"`
}

// Errors is every failed request wrk counted.
func (r WrkResult) Errors() int { return r.Connect + r.Read + r.Write + r.Timeout + r.Non2xx }

var (
	wrkTotalRE   = regexp.MustCompile(`(?m)^\s*(\d+) requests in ([0-9.]+)(us|ms|s|m|h),`)
	wrkRateRE    = regexp.MustCompile(`(?m)^Requests/sec:\s+([0-9.]+)\s*$`)
	wrkPctRE     = regexp.MustCompile(`(?m)^\s+(50|90|99)%\s+([0-9.]+)(us|ms|s|m)\s*$`)
	wrkSocketRE  = regexp.MustCompile(`(?m)^\s*Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)\s*$`)
	wrkNon2xxRE  = regexp.MustCompile(`(?m)^\s*Non-2xx or 3xx responses: (\d+)\s*$`)
	wrkUnitScale = map[string]float64{"us": 1e-3, "ms": 1, "s": 1e3, "m": 60e3, "h": 3600e3}
)

// parseWrk reads wrk's report (run with --latency).
func parseWrk(out string) (WrkResult, error) {
	var r WrkResult
	m := wrkTotalRE.FindStringSubmatch(out)
	if m == nil {
		return r, errors.New(`no "N requests in T" line`)
	}
	r.Requests, _ = strconv.Atoi(m[1])
	r.Seconds = round3(ms(m[2], m[3]) / 1e3)
	if m = wrkRateRE.FindStringSubmatch(out); m == nil {
		return r, errors.New(`no "Requests/sec" line`)
	}
	r.RPS, _ = strconv.ParseFloat(m[1], 64)
	pct := map[string]*float64{"50": &r.P50Ms, "90": &r.P90Ms, "99": &r.P99Ms}
	found := 0
	for _, m := range wrkPctRE.FindAllStringSubmatch(out, -1) {
		*pct[m[1]] = round3(ms(m[2], m[3]))
		found++
	}
	if found != 3 && r.Requests > 0 {
		return r, errors.New("no latency distribution (wrk needs --latency)")
	}
	if m = wrkSocketRE.FindStringSubmatch(out); m != nil {
		for i, p := range []*int{&r.Connect, &r.Read, &r.Write, &r.Timeout} {
			*p, _ = strconv.Atoi(m[i+1])
		}
	}
	if m = wrkNon2xxRE.FindStringSubmatch(out); m != nil {
		r.Non2xx, _ = strconv.Atoi(m[1])
	}
	return r, nil
}

func ms(v, unit string) float64 {
	f, _ := strconv.ParseFloat(v, 64)
	return f * wrkUnitScale[unit]
}

// maxErrorShare is the share of failed requests above which a run counts
// as broken: a path that loses requests measures nothing.
const maxErrorShare = 0.001

// checkWrk says why a run's result is not a measurement of a working
// path, or nil. Any answer that is not 2xx/3xx is an error (every backend
// answers 200, so another code means something else answered); socket
// errors are tolerated up to maxErrorShare of the requests.
func checkWrk(r WrkResult) error {
	switch {
	case r.Requests == 0 || r.RPS <= 0:
		return errors.New("no request was answered: the path does not work")
	case r.Non2xx > 0:
		return fmt.Errorf("%d of %d answers were not 2xx/3xx", r.Non2xx, r.Requests)
	case float64(r.Errors()) > maxErrorShare*float64(r.Requests):
		return fmt.Errorf("%d socket errors (connect %d, read %d, write %d, timeout %d) for %d requests: more than %.1f%%",
			r.Errors(), r.Connect, r.Read, r.Write, r.Timeout, r.Requests, 100*maxErrorShare)
	}
	return nil
}
