package labrun

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestLoad(t *testing.T) {
	errBoom := errors.New("boom")
	for _, c := range []struct {
		name     string
		n, par   int
		failAt   int // the request number that fails; 0 for none
		want     int // answers counted
		err      string
		maxCalls int // at most this many calls of one (the first failure stops the rest)
	}{
		{"all answered", 100, 8, 0, 100, "", 100},
		{"sequential", 10, 1, 0, 10, "", 10},
		{"more workers than requests", 3, 8, 0, 3, "", 3},
		{"none", 0, 4, 0, 0, "", 0},
		{"first failure stops", 100, 1, 5, 4, "after 4 of 100 answers: boom", 5},
		{"failure in parallel", 1000, 4, 10, -1, "boom", 30},
		{"bad parallel", 10, 0, 0, 0, "parallel >= 1", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			var calls, inFlight, maxInFlight atomic.Int64
			one := func(ctx context.Context) (string, error) {
				k := calls.Add(1)
				cur := inFlight.Add(1)
				defer inFlight.Add(-1)
				for {
					m := maxInFlight.Load()
					if cur <= m || maxInFlight.CompareAndSwap(m, cur) {
						break
					}
				}
				time.Sleep(100 * time.Microsecond)
				if c.failAt != 0 && k == int64(c.failAt) {
					return "", errBoom
				}
				return fmt.Sprintf("be%d", k%4+1), nil
			}
			var progressMu sync.Mutex
			last := 0
			tally, err := load(context.Background(), c.n, c.par, one, func(done int) {
				progressMu.Lock()
				defer progressMu.Unlock()
				if done != last+1 {
					t.Errorf("progress %d after %d", done, last)
				}
				last = done
			})
			if c.err == "" && err != nil {
				t.Fatal(err)
			}
			if c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
				t.Fatalf("error %v, want one containing %q", err, c.err)
			}
			if c.want >= 0 && tally.Total() != c.want {
				t.Errorf("%d answers counted, want %d (%v)", tally.Total(), c.want, tally)
			}
			if c.err == "" && c.n >= 4 && len(tally.Backends()) != 4 {
				t.Errorf("backends %v, want 4", tally.Backends())
			}
			if got := calls.Load(); got > int64(c.maxCalls) {
				t.Errorf("%d requests made, want at most %d", got, c.maxCalls)
			}
			if c.par > 0 && maxInFlight.Load() > int64(c.par) {
				t.Errorf("%d requests in flight at once, want at most %d", maxInFlight.Load(), c.par)
			}
			if last != tally.Total() {
				t.Errorf("progress ended at %d, answers %d", last, tally.Total())
			}
		})
	}
}

func TestLoadCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var calls, atCancel atomic.Int64
	one := func(ctx context.Context) (string, error) {
		if calls.Add(1) == 20 {
			cancel()
			// The other worker runs on meanwhile: what it may not do is
			// start a request once cancel has returned.
			atCancel.Store(calls.Load())
		}
		return "be1", ctx.Err()
	}
	tally, err := load(ctx, 1000, 2, one, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	// At most one more: the other worker may have taken its next request
	// before the cancel and called it after. The 20th and that one fail.
	if n := atCancel.Load(); calls.Load() > n+1 || int64(tally.Total()) >= n {
		t.Errorf("%d requests, %d answers; %d requests had started when the cancel at the 20th returned", calls.Load(), tally.Total(), n)
	}
}

// dialLocal connects an HTTPConn to a test server on loopback; DialHTTP
// itself needs a network namespace, and with it root.
func dialLocal(t *testing.T, srv *httptest.Server) *HTTPConn {
	t.Helper()
	target := netip.MustParseAddrPort(srv.Listener.Addr().String())
	conn, err := net.Dial("tcp", target.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &HTTPConn{conn: conn, r: bufio.NewReader(conn), target: target}
}

func TestHTTPConnGet(t *testing.T) {
	backend := func(name string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set(BackendHeader, name)
			fmt.Fprintln(w, name)
		}
	}
	for _, c := range []struct {
		name    string
		handler http.HandlerFunc
		want    string
		err     string
	}{
		{"lab backend", backend("be2"), "be2", ""},
		{"server error", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set(BackendHeader, "be1")
			http.Error(w, "be1", http.StatusInternalServerError)
		}, "", "status 500"},
		{"no header", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "be1") }, "", "not an answer of a lab backend"},
		{"body differs", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set(BackendHeader, "be1")
			fmt.Fprintln(w, "be3")
		}, "", "not an answer of a lab backend"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(c.handler)
			defer srv.Close()
			got, err := dialLocal(t, srv).Get(context.Background(), false)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

// Requests without last share one connection; with last, the server
// closes it and the next request fails rather than dialling again.
func TestHTTPConnKeepAlive(t *testing.T) {
	var mu sync.Mutex
	conns := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		conns[r.RemoteAddr]++
		mu.Unlock()
		w.Header().Set(BackendHeader, "be1")
		fmt.Fprintln(w, "be1")
	}))
	defer srv.Close()
	c := dialLocal(t, srv)
	ctx := context.Background()
	for i := range 5 {
		if _, err := c.Get(ctx, i == 4); err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
	}
	mu.Lock()
	if len(conns) != 1 || conns[c.LocalAddr().String()] != 5 {
		t.Errorf("requests per client connection %v, want 5 on %s", conns, c.LocalAddr())
	}
	mu.Unlock()
	if _, err := c.Get(ctx, false); err == nil {
		t.Error("a request after Connection: close succeeded")
	}
}

// A cancelled context interrupts a request whose answer does not come.
func TestHTTPConnGetCancelled(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	defer srv.Close()
	defer close(release)
	c := dialLocal(t, srv)
	ctx, cancel := context.WithCancelCause(context.Background())
	errStop := errors.New("stop")
	time.AfterFunc(50*time.Millisecond, func() { cancel(errStop) })
	start := time.Now()
	_, err := c.Get(ctx, false)
	if !errors.Is(err, errStop) {
		t.Fatalf("error %v, want the cancel cause", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("cancelled after %s", el)
	}
}

// A client of the target's family: an IPv6 target needs an IPv6 socket.
func TestNetworkFamily(t *testing.T) {
	for _, c := range []struct{ proto, addr, want string }{
		{"tcp", "10.99.0.1", "tcp4"},
		{"udp", "10.99.0.2", "udp4"},
		{"tcp", "fd00:99::1", "tcp6"},
		{"udp", "fd00:99::2", "udp6"},
		{"tcp", "::ffff:10.99.0.1", "tcp4"},
	} {
		if got := network(c.proto, netip.MustParseAddr(c.addr)); got != c.want {
			t.Errorf("network(%s, %s) = %s, want %s", c.proto, c.addr, got, c.want)
		}
	}
}

// A plain backend's X-Peer is nginx's $remote_addr:$remote_port: an
// IPv6 address comes without brackets.
func TestParsePeer(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.1.2:20001":       "10.0.1.2:20001",
		"fd00:10:1::2:20001":   "[fd00:10:1::2]:20001",
		"[fd00:10:1::2]:20001": "[fd00:10:1::2]:20001",
	} {
		got, err := parsePeer(in)
		if err != nil || got != netip.MustParseAddrPort(want) {
			t.Errorf("parsePeer(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"", "10.0.1.2", "fd00::2:x"} {
		if got, err := parsePeer(in); err == nil {
			t.Errorf("parsePeer(%q) = %v, want an error", in, got)
		}
	}
}
