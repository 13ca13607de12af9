package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

const wrkClean = `Running 3s test @ http://10.99.0.2:80/
  8 threads and 160 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     4.11ms    3.02ms  47.46ms   86.94%
    Req/Sec     5.01k   612.37     7.02k    71.25%
  Latency Distribution
     50%    3.37ms
     75%    4.86ms
     90%    7.24ms
     99%   16.57ms
  119701 requests in 3.00s, 23.97MB read
Requests/sec:  39852.14
Transfer/sec:      7.98MB
`

const wrkErrors = `Running 2s test @ http://10.99.0.3:80/
  8 threads and 160 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   812.33us    1.01ms   1.20s    99.10%
    Req/Sec     1.10k   100.00     2.00k    70.00%
  Latency Distribution
     50%  612.00us
     75%  900.00us
     90%    1.10ms
     99%    1.20s
  17600 requests in 2.00m, 3.52MB read
  Socket errors: connect 3, read 2, write 1, timeout 4
  Non-2xx or 3xx responses: 5
Requests/sec:    146.66
Transfer/sec:     30.00KB
`

func TestParseWrk(t *testing.T) {
	r, err := parseWrk(wrkClean)
	if err != nil {
		t.Fatal(err)
	}
	want := WrkResult{Requests: 119701, Seconds: 3, RPS: 39852.14, P50Ms: 3.37, P90Ms: 7.24, P99Ms: 16.57}
	if r != want {
		t.Errorf("clean run:\n got %+v\nwant %+v", r, want)
	}
	if err := checkWrk(r); err != nil {
		t.Errorf("clean run rejected: %v", err)
	}

	r, err = parseWrk(wrkErrors)
	if err != nil {
		t.Fatal(err)
	}
	want = WrkResult{Requests: 17600, Seconds: 120, RPS: 146.66, P50Ms: 0.612, P90Ms: 1.1, P99Ms: 1200,
		Connect: 3, Read: 2, Write: 1, Timeout: 4, Non2xx: 5}
	if r != want {
		t.Errorf("run with errors:\n got %+v\nwant %+v", r, want)
	}
	if r.Errors() != 15 {
		t.Errorf("Errors() = %d, want 15", r.Errors())
	}
	if err := checkWrk(r); err == nil || !strings.Contains(err.Error(), "not 2xx") {
		t.Errorf("non-2xx answers: err %v", err)
	}

	for name, out := range map[string]string{
		"no total":   strings.Replace(wrkClean, "119701 requests in 3.00s,", "", 1),
		"no rate":    strings.Replace(wrkClean, "Requests/sec:", "Req:", 1),
		"no latency": strings.Replace(wrkClean, "99%   16.57ms", "", 1),
		"nothing":    "unable to connect to 10.99.0.2:80 Connection refused\n",
	} {
		if _, err := parseWrk(out); err == nil {
			t.Errorf("%s: parsed without error", name)
		}
	}
}

func TestCheckWrk(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    WrkResult
		ok   bool
	}{
		{"clean", WrkResult{Requests: 10000, RPS: 5000}, true},
		{"nothing answered", WrkResult{}, false},
		{"a few read errors", WrkResult{Requests: 10000, RPS: 5000, Read: 10}, true},
		{"too many timeouts", WrkResult{Requests: 10000, RPS: 5000, Timeout: 11}, false},
		{"one non-2xx", WrkResult{Requests: 10000, RPS: 5000, Non2xx: 1}, false},
	} {
		if err := checkWrk(tc.r); (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

func TestWrkArgs(t *testing.T) {
	s := wrkSettings{Threads: 8, Conns: 160, Duration: 3 * time.Second, Timeout: 2 * time.Second}
	got := wrkArgs(s, s.Duration, modeKeepAlive, "", "http://10.99.0.1:80/")
	want := []string{"wrk", "-t", "8", "-c", "160", "-d", "3s", "--timeout", "2s", "--latency", "http://10.99.0.1:80/"}
	if !slices.Equal(got, want) {
		t.Errorf("keep-alive:\n got %q\nwant %q", got, want)
	}
	got = wrkArgs(s, 1500*time.Millisecond, modeClose, "/d.lua", "http://10.0.3.2:80/")
	want = []string{"wrk", "-t", "8", "-c", "160", "-d", "2s", "--timeout", "2s", "--latency",
		"-H", "Connection: close", "-s", "/d.lua", "http://10.0.3.2:80/"}
	if !slices.Equal(got, want) {
		t.Errorf("new connection, direct:\n got %q\nwant %q", got, want)
	}
	if got := shellJoin(want); got != "wrk -t 8 -c 160 -d 2s --timeout 2s --latency -H 'Connection: close' -s /d.lua http://10.0.3.2:80/" {
		t.Errorf("shellJoin: %s", got)
	}
	if wrkDuration(200*time.Millisecond) != "1s" {
		t.Error("wrk needs at least one second")
	}
}
