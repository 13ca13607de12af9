package health

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/config"
)

// helperEnv makes the test binary serve listeners for another process
// instead of running tests, so that measurements of the prober do not
// include the work of the servers it probes.
const helperEnv = "XLB_HEALTH_TEST_LISTENERS"

func TestMain(m *testing.M) {
	if n := os.Getenv(helperEnv); n != "" {
		os.Exit(serveListeners(n))
	}
	os.Exit(m.Run())
}

// serveListeners opens n TCP listeners that accept and close and n HTTP
// listeners that answer 200, prints "tcp PORT" and "http PORT" lines and
// "ready", and serves until its stdin closes.
func serveListeners(count string) int {
	n, err := strconv.Atoi(count)
	if err != nil || n < 1 || n > 64 {
		fmt.Fprintf(os.Stderr, "%s=%q: want a count of listeners, 1..64\n", helperEnv, count)
		return 2
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	for range n {
		tl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		go func() {
			for {
				c, err := tl.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		hl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		go http.Serve(hl, ok)
		fmt.Printf("tcp %d\nhttp %d\n", port(tl), port(hl))
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// listeners are the ports of a helper process started by startListeners.
type listeners struct {
	tcp, http []uint16
}

// startListeners runs n TCP and n HTTP listeners in a child process that
// ends with the test.
func startListeners(tb testing.TB, n int) listeners {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", helperEnv, n))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	var l listeners
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		kind, num, _ := strings.Cut(sc.Text(), " ")
		if kind == "ready" {
			return l
		}
		p, err := strconv.ParseUint(num, 10, 16)
		if err != nil {
			tb.Fatalf("listener helper printed %q", sc.Text())
		}
		switch kind {
		case "tcp":
			l.tcp = append(l.tcp, uint16(p))
		case "http":
			l.http = append(l.http, uint16(p))
		}
	}
	tb.Fatalf("listener helper ended before it was ready: %v", sc.Err())
	return l
}

// cpuTime returns the user and system CPU time this process has used.
func cpuTime(tb testing.TB) (user, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// BenchmarkProber1000 measures the prober's own CPU use with 1000 targets
// probed every second against listeners in another process. One
// iteration is one second of wall time: run it with -benchtime=10x. The
// figure that matters is cpu-ms/s, CPU milliseconds per wall second
// (1000 would be a whole core). sys-ms/s is the kernel's part of it; on
// loopback it includes the listener side of each handshake, which the
// kernel processes in the connecting process's context.
func BenchmarkProber1000(b *testing.B) {
	const n = 1000
	l := startListeners(b, 8)
	for _, typ := range []config.CheckType{config.CheckTCP, config.CheckHTTP} {
		b.Run(string(typ), func(b *testing.B) {
			ports := l.tcp
			if typ == config.CheckHTTP {
				ports = l.http
			}
			targets := make([]Target, n)
			for i := range targets {
				targets[i] = Target{Key: fmt.Sprintf("bench/%d", i), Addr: loopback, Check: Check{
					Type: typ, Port: ports[i%len(ports)], Path: "/", Interval: time.Second, Timeout: 500 * time.Millisecond,
				}}
			}
			p := New(slog.New(slog.DiscardHandler))
			var probes, failures atomic.Int64
			var lastError atomic.Value
			p.observe = func(_ string, r Result) {
				probes.Add(1)
				if r.LastError != "" {
					failures.Add(1)
					lastError.Store(r.LastError)
				}
			}
			p.Set(targets)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { p.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()

			// Let the first round and its burst pass, and the workers the
			// burst needed end: steady state is what runs for days.
			time.Sleep(time.Second + workerIdle)
			peak, workers := 0, 0
			user0, sys0 := cpuTime(b)
			probes0, failures0, wall0 := probes.Load(), failures.Load(), time.Now()
			b.ResetTimer()
			for range b.N {
				end := time.Now().Add(time.Second)
				for time.Now().Before(end) {
					peak = max(peak, runtime.NumGoroutine())
					p.mu.Lock()
					workers = max(workers, p.workers)
					p.mu.Unlock()
					time.Sleep(50 * time.Millisecond)
				}
			}
			b.StopTimer()
			wall := time.Since(wall0).Seconds()
			user, sys := cpuTime(b)
			user, sys = user-user0, sys-sys0
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / wall }
			b.ReportMetric(ms(user+sys), "cpu-ms/s")
			b.ReportMetric(ms(sys), "sys-ms/s")
			b.ReportMetric(float64(probes.Load()-probes0)/wall, "probes/s")
			b.ReportMetric(float64(peak), "goroutines")
			b.ReportMetric(float64(workers), "workers")
			// A machine busy with other work can make a probe miss its
			// timeout now and then; more means the prober falls behind.
			f, n := failures.Load()-failures0, probes.Load()-probes0
			b.ReportMetric(float64(f), "failures")
			if f > n/100 {
				b.Errorf("%d of %d probes failed against local listeners, the last with %q", f, n, lastError.Load())
			}
		})
	}
}
