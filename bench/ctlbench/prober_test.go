package main

import "testing"

func TestParseBench(t *testing.T) {
	out := `goos: linux
goarch: amd64
pkg: github.com/xlbproject/xlb/internal/health
cpu: AMD EPYC
BenchmarkProber1000/tcp-2         	      10	1000172730 ns/op	        19.00 failures	        41.50 cpu-ms/s	        12.00 goroutines	       999.1 probes/s	        26.10 sys-ms/s	         8.000 workers
BenchmarkProber1000/http          	      10	1000210014 ns/op	        0 failures	        63.20 cpu-ms/s	       999.0 probes/s
BenchmarkProber1000/tcp-2 --- FAIL: a message line, not a result
BenchmarkOther/tcp-2         	      10	1000 ns/op	        99 cpu-ms/s
PASS
ok  	github.com/xlbproject/xlb/internal/health	25.1s
`
	got := parseBench(out, "BenchmarkProber1000/")
	if len(got) != 2 {
		t.Fatalf("parsed %v, want tcp and http", got)
	}
	checks := []struct {
		typ, unit string
		want      float64
	}{
		{"tcp", "cpu-ms/s", 41.5},
		{"tcp", "sys-ms/s", 26.1},
		{"tcp", "failures", 19},
		{"tcp", "ns/op", 1000172730},
		{"http", "cpu-ms/s", 63.2}, // no -GOMAXPROCS suffix
		{"http", "probes/s", 999},
	}
	for _, c := range checks {
		if v, ok := got[c.typ][c.unit]; !ok || v != c.want {
			t.Errorf("%s %s = %v (present %v), want %v", c.typ, c.unit, v, ok, c.want)
		}
	}
}
