package health

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/testbed/testenv"
)

func TestProbeTCP(t *testing.T) {
	open := newAcceptServer(t)
	closed := closedPort(t)
	tests := []struct {
		name string
		port uint16
		err  string
	}{
		{"listening", open.port, ""},
		{"nothing listening", closed, fmt.Sprintf("connect 127.0.0.1:%d: connection refused", closed)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSpec(loopback, Check{Type: config.CheckTCP, Port: tt.port, Timeout: 5 * time.Second})
			_, err := run(context.Background(), s)
			if got := errString(err); got != tt.err {
				t.Errorf("error %q, want %q", got, tt.err)
			}
		})
	}
	testenv.EventuallyTrue(t, 10*time.Second, "the listening server to see the connection", func() bool { return open.accepted.Load() > 0 })
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestProbeHTTPStatus(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		var code int
		if _, err := fmt.Sscanf(r.URL.Path, "/status/%d", &code); err != nil {
			code = http.StatusInternalServerError
		}
		if code >= 300 && code < 400 {
			w.Header().Set("Location", "/status/500")
		}
		w.WriteHeader(code)
		fmt.Fprintf(w, "status %d\n", code)
	}))
	defer srv.Close()
	p := uint16(srv.Listener.Addr().(*net.TCPAddr).Port)

	tests := []struct {
		status   int
		min, max int
		err      string
	}{
		{200, 0, 0, ""},
		{204, 0, 0, ""},
		{302, 0, 0, ""}, // a redirect counts by its status, and is not followed
		{399, 0, 0, ""},
		{404, 0, 0, "HTTP 404"},
		{503, 0, 0, "HTTP 503"},
		{199, 0, 0, "HTTP 199"},
		{204, 200, 200, "HTTP 204"},
		{200, 200, 200, ""},
		{503, 500, 503, ""},
		{504, 500, 503, "HTTP 504"},
		{301, 200, 299, "HTTP 301"},
		{404, 0, 404, ""},
		{199, 100, 0, ""},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d in %d..%d", tt.status, tt.min, tt.max), func(t *testing.T) {
			mu.Lock()
			paths = nil
			mu.Unlock()
			path := fmt.Sprintf("/status/%d", tt.status)
			s := newSpec(loopback, Check{Type: config.CheckHTTP, Port: p, Path: path, StatusMin: tt.min, StatusMax: tt.max, Timeout: 5 * time.Second})
			if s.err != nil {
				t.Fatal(s.err)
			}
			_, err := run(context.Background(), s)
			if got := errString(err); got != tt.err {
				t.Errorf("error %q, want %q", got, tt.err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(paths) != 1 || paths[0] != path {
				t.Errorf("server saw requests for %q, want exactly one for %q", paths, path)
			}
		})
	}
}

// TestProbeHTTPRequest checks what the server receives.
func TestProbeHTTPRequest(t *testing.T) {
	type seen struct {
		method, host, uri, conn string
		close                   bool
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.Method, r.Host, r.RequestURI, r.Header.Get("Connection"), r.Close}
		// A body larger than a probe reads must not matter.
		w.Write(make([]byte, 1<<20))
	}))
	defer srv.Close()
	p := uint16(srv.Listener.Addr().(*net.TCPAddr).Port)
	s := newSpec(loopback, Check{Type: config.CheckHTTP, Port: p, Path: "/healthz?deep=1", Timeout: 5 * time.Second})
	if _, err := run(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	want := seen{"GET", "127.0.0.1", "/healthz?deep=1", "close", true}
	if g := <-got; g != want {
		t.Errorf("server saw %+v, want %+v", g, want)
	}
}

func TestProbeHTTPFailures(t *testing.T) {
	hang := newHangServer(t)
	// rude answers with raw bytes, or none, then closes.
	rude := func(answer string) uint16 {
		ln := listen(t)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				buf := make([]byte, 4096)
				_, _ = c.Read(buf)
				_, _ = c.Write([]byte(answer))
				c.Close()
			}
		}()
		return port(ln)
	}
	closed := closedPort(t)
	tests := []struct {
		name    string
		port    uint16
		timeout time.Duration
		err     string
		prefix  bool // err is a prefix of the error
	}{
		{"refused", closed, time.Second, fmt.Sprintf("connect 127.0.0.1:%d: connection refused", closed), false},
		{"accepts and never answers", hang.port, 200 * time.Millisecond, "timeout after 200ms: no response headers", false},
		{"closes without answering", rude(""), 5 * time.Second, "connection closed: no response headers", false},
		{"half a status line", rude("HTTP/1.1 20"), 5 * time.Second, "bad HTTP response: ", true},
		{"not HTTP", rude("SSH-2.0-OpenSSH_9.2\r\n\r\n"), 5 * time.Second, "bad HTTP response: ", true},
		{"headers cut short", rude("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n"), 5 * time.Second, "connection closed: no response headers", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSpec(loopback, Check{Type: config.CheckHTTP, Port: tt.port, Timeout: tt.timeout})
			begin := time.Now()
			latency, err := run(context.Background(), s)
			took := time.Since(begin)
			got := errString(err)
			if tt.prefix && !strings.HasPrefix(got, tt.err) || !tt.prefix && got != tt.err {
				t.Errorf("error %q, want %q", got, tt.err)
			}
			if took > tt.timeout+2*time.Second {
				t.Errorf("probe took %v with a timeout of %v", took, tt.timeout)
			}
			if latency <= 0 || latency > took {
				t.Errorf("latency %v, probe took %v", latency, took)
			}
		})
	}
}

// TestProbeCancel checks that ending the context ends a probe at once,
// not at its timeout.
func TestProbeCancel(t *testing.T) {
	hang := newHangServer(t)
	s := newSpec(loopback, Check{Type: config.CheckHTTP, Port: hang.port, Timeout: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type outcome struct {
		err  error
		took time.Duration
	}
	done := make(chan outcome, 1)
	go func() {
		begin := time.Now()
		_, err := run(ctx, s)
		done <- outcome{err, time.Since(begin)}
	}()
	testenv.EventuallyTrue(t, 10*time.Second, "the probe to connect", func() bool { a, _, _ := hang.counts(); return a > 0 })
	cancel()
	select {
	case o := <-done:
		if o.err == nil {
			t.Fatal("a cancelled probe succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a cancelled probe still runs 10s later; its timeout is a minute")
	}
}
