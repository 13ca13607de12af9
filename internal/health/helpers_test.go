package health

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var loopback = netip.MustParseAddr("127.0.0.1")

// listen returns a loopback listener closed when the test ends.
func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func port(ln net.Listener) uint16 { return uint16(ln.Addr().(*net.TCPAddr).Port) }

// acceptServer accepts connections and closes them at once, counting them.
type acceptServer struct {
	port     uint16
	accepted atomic.Int64
}

func newAcceptServer(t testing.TB) *acceptServer {
	ln := listen(t)
	s := &acceptServer{port: port(ln)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			c.Close()
		}
	}()
	return s
}

// hangServer accepts connections and never answers; it keeps each open
// until the client closes it, and counts how many are open at once.
type hangServer struct {
	port     uint16
	mu       sync.Mutex
	open     int
	maxOpen  int
	accepted int
	closed   int
}

func newHangServer(t testing.TB) *hangServer {
	ln := listen(t)
	s := &hangServer{port: port(ln)}
	var wg sync.WaitGroup
	var conns sync.Map
	t.Cleanup(func() {
		ln.Close()
		conns.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Store(c, nil)
			s.mu.Lock()
			s.open++
			s.accepted++
			s.maxOpen = max(s.maxOpen, s.open)
			s.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(io.Discard, c) // until the prober gives up
				c.Close()
				conns.Delete(c)
				s.mu.Lock()
				s.open--
				s.closed++
				s.mu.Unlock()
			}()
		}
	}()
	return s
}

func (s *hangServer) counts() (accepted, closed, maxOpen int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted, s.closed, s.maxOpen
}

// switchServer is an HTTP server answering with a status the test sets.
type switchServer struct {
	*httptest.Server
	port     uint16
	status   atomic.Int64
	requests atomic.Int64
}

func newSwitchServer(t testing.TB, status int) *switchServer {
	s := &switchServer{}
	s.status.Store(int64(status))
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		w.WriteHeader(int(s.status.Load()))
	}))
	t.Cleanup(s.Close)
	s.port = uint16(s.Listener.Addr().(*net.TCPAddr).Port)
	return s
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t testing.TB) uint16 {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := port(ln)
	ln.Close()
	return p
}

// results records every probe result the prober makes, by key.
type results struct {
	mu    sync.Mutex
	byKey map[string][]Result
}

func observe(p *Prober) *results {
	r := &results{byKey: map[string][]Result{}}
	p.observe = func(key string, res Result) {
		r.mu.Lock()
		r.byKey[key] = append(r.byKey[key], res)
		r.mu.Unlock()
	}
	return r
}

func (r *results) byKeyCopy() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[string]int{}
	for k, rs := range r.byKey {
		m[k] = len(rs)
	}
	return m
}

func (r *results) of(key string) []Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Result(nil), r.byKey[key]...)
}

// newProber returns a prober logging to the test.
func newProber(t testing.TB) *Prober {
	return New(slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})))
}

// start runs p until the test ends, and checks that Run then returns.
func start(t testing.TB, p *Prober) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		p.Run(ctx)
		close(done)
	}()
	stop = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10s of its context ending")
		}
	}
	t.Cleanup(stop)
	return stop
}

// stateOf returns key's state in p, or "" if p has no such target.
func stateOf(p *Prober, key string) State {
	return p.Snapshot()[key].State
}

// drain empties p's Changes channel.
func drain(p *Prober) {
	select {
	case <-p.Changes():
	default:
	}
}

// signalled reports whether Changes holds a signal, and takes it.
func signalled(p *Prober) bool {
	select {
	case <-p.Changes():
		return true
	default:
		return false
	}
}
