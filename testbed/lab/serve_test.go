package lab

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// freePort returns a port that was free on the loopback a moment ago.
func freePort(t *testing.T, network string) string {
	t.Helper()
	switch network {
	case "tcp":
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		_, port, _ := net.SplitHostPort(l.Addr().String())
		return port
	default:
		c, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, port, _ := net.SplitHostPort(c.LocalAddr().String())
		return port
	}
}

func startServe(t *testing.T, name, httpAddr, udpAddr string) {
	t.Helper()
	startServeWith(t, ServeOptions{Name: name, HTTP: httpAddr, UDP: udpAddr})
}

func startServeWith(t *testing.T, o ServeOptions) {
	t.Helper()
	httpAddr := o.HTTP
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, o) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not stop")
		}
	})
	if httpAddr == "" {
		return
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		c, err := net.Dial("tcp", httpAddr)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("server on %s not up: %v", httpAddr, err)
		}
	}
}

func TestServeHTTP(t *testing.T) {
	addr := "127.0.0.1:" + freePort(t, "tcp")
	startServe(t, "be7", addr, "")
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()

	for _, tt := range []struct {
		name, method, path string
		close              bool
		wantReused         bool
	}{
		{"first", "GET", "/", false, false},
		{"keep-alive reuses the connection", "GET", "/any/path?x=1", false, true},
		{"POST", "POST", "/", false, true},
		{"Connection: close", "GET", "/", true, true},
		{"after close a new connection", "GET", "/", false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var reused bool
			trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}
			req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), tt.method, "http://"+addr+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Close = tt.close
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 200 || string(body) != "be7\n" || resp.Header.Get("X-Backend") != "be7" {
				t.Errorf("got %d %q X-Backend=%q, want 200 \"be7\\n\" be7", resp.StatusCode, body, resp.Header.Get("X-Backend"))
			}
			if reused != tt.wantReused {
				t.Errorf("connection reused = %v, want %v", reused, tt.wantReused)
			}
			if tt.close && !resp.Close {
				t.Error("server did not confirm Connection: close")
			}
		})
	}
}

// The echo must answer from the address the datagram was sent to: a
// connected client socket drops replies from any other source, which is
// what a DSR client sees when a backend replies from its own address
// instead of the VIP. All of 127.0.0.0/8 is local, so 127.0.0.2 stands in
// for a VIP; without IP_PKTINFO the reply would leave from 127.0.0.1.
func TestServeUDPRepliesFromDestination(t *testing.T) {
	port := freePort(t, "udp")
	startServe(t, "be3", "", "0.0.0.0:"+port)

	for _, dst := range []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"} {
		t.Run(dst, func(t *testing.T) {
			c, err := net.Dial("udp4", net.JoinHostPort(dst, port))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			buf := make([]byte, 2048)
			// The server may still be binding: retry a few times.
			for i := 0; ; i++ {
				payload := "hello " + dst
				if _, err := c.Write([]byte(payload)); err != nil {
					t.Fatal(err)
				}
				c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
				n, err := c.Read(buf)
				if err == nil {
					if got, want := string(buf[:n]), "be3:"+payload; got != want {
						t.Errorf("reply %q, want %q", got, want)
					}
					return
				}
				if i == 10 {
					t.Fatalf("no reply from %s: %v", dst, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// With HTTP6 and UDP6 the same servers answer over IPv6 on their own
// sockets, beside the IPv4 ones on the same ports; the UDP echo reads
// the IPv6 destination (IPV6_PKTINFO) to answer from it.
func TestServeIPv6(t *testing.T) {
	if c, err := net.ListenPacket("udp6", "[::1]:0"); err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	} else {
		c.Close()
	}
	port, uport := freePort(t, "tcp"), freePort(t, "udp")
	startServeWith(t, ServeOptions{Name: "be6", HTTP: "127.0.0.1:" + port, HTTP6: "[::1]:" + port,
		UDP: "127.0.0.1:" + uport, UDP6: "[::]:" + uport})
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	for _, host := range []string{"127.0.0.1", "[::1]"} {
		resp, err := client.Get("http://" + host + ":" + port + "/")
		if err != nil {
			t.Fatalf("GET over %s: %v", host, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "be6\n" {
			t.Errorf("GET over %s: %q, want \"be6\\n\"", host, body)
		}
	}
	for _, dst := range []string{"127.0.0.1", "::1"} {
		c, err := net.Dial("udp", net.JoinHostPort(dst, uport))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		buf := make([]byte, 2048)
		for i := 0; ; i++ {
			if _, err := c.Write([]byte("hi")); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			n, err := c.Read(buf)
			if err == nil {
				if got := string(buf[:n]); got != "be6:hi" {
					t.Errorf("UDP over %s: reply %q, want \"be6:hi\"", dst, got)
				}
				break
			}
			if i == 10 {
				t.Fatalf("no UDP reply over %s: %v", dst, err)
			}
		}
	}
	// pktinfoDst reads the destination of IPV6_PKTINFO.
	want := netip.MustParseAddr("fd00:99::2")
	a := want.As16()
	oob := unix.PktInfo6(&unix.Inet6Pktinfo{Addr: a, Ifindex: 3})
	if got, ok := pktinfoDst(oob); !ok || got != want {
		t.Errorf("pktinfoDst(IPV6_PKTINFO for %s) = %s, %v", want, got, ok)
	}
}

func TestServeErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, o := range []ServeOptions{
		{Name: "", HTTP: "127.0.0.1:0"},
		{Name: "be1"},
		{Name: "be1", HTTP: busy.Addr().String()},
		{Name: "be1", UDP: "256.0.0.1:9"},
		{Name: "be1", UDP: "127.0.0.1:0", Control: filepath.Join(t.TempDir(), "c.sock")},
		{Name: "be1", HTTP: "127.0.0.1:0", Control: filepath.Join(t.TempDir(), "no", "such", "dir", "c.sock")},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := Serve(ctx, o)
		cancel()
		if err == nil {
			t.Errorf("Serve(%+v) = nil, want an error", o)
		}
	}
}

// The control socket switches the HTTP server between answering, refusing
// connections and hanging, as the end-to-end tests of health checks need.
func TestServeControl(t *testing.T) {
	addr := "127.0.0.1:" + freePort(t, "tcp")
	socket := filepath.Join(t.TempDir(), "be1.ctl")
	// A stale socket file, as a killed server leaves, is replaced.
	if err := os.WriteFile(socket, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	startServeWith(t, ServeOptions{Name: "be1", HTTP: addr, Control: socket})
	ctx := context.Background()

	get := func(timeout time.Duration) (string, error) {
		c := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Get("http://" + addr + "/")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	// A keep-alive connection opened while the server answers.
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()

	steps := []struct {
		mode HTTPMode
		want string // "ok", "refused" or "hangs"
	}{
		{HTTPStart, "ok"},
		{HTTPStop, "refused"},
		{HTTPStop, "refused"}, // twice is fine
		{HTTPStart, "ok"},
		{HTTPHang, "hangs"},
		{HTTPStart, "ok"},
		{HTTPStop, "refused"},
		{HTTPHang, "hangs"}, // hanging needs a listener: it starts one
		{HTTPStart, "ok"},
	}
	for i, st := range steps {
		if err := SetHTTPMode(ctx, socket, st.mode); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		body, err := get(300 * time.Millisecond)
		var got string
		switch {
		case err == nil && body == "be1\n":
			got = "ok"
		case errors.Is(err, syscall.ECONNREFUSED):
			got = "refused"
		case err != nil && strings.Contains(err.Error(), "Client.Timeout"):
			got = "hangs"
		default:
			got = "body " + body + ", error " + errorString(err)
		}
		if got != st.want {
			t.Errorf("step %d, after http %s: %s, want %s", i, st.mode, got, st.want)
		}
		if st.mode == HTTPStop {
			// Open connections are cut too, as when a server dies.
			idle.SetReadDeadline(time.Now().Add(time.Second))
			if _, err := idle.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("step %d: a connection opened before http stop is still open (%v)", i, err)
			}
		}
	}

	// A request that hangs is answered once the hang ends.
	if err := SetHTTPMode(ctx, socket, HTTPHang); err != nil {
		t.Fatal(err)
	}
	res := make(chan string, 1)
	go func() {
		body, err := get(5 * time.Second)
		res <- body + errorString(err)
	}()
	time.Sleep(100 * time.Millisecond)
	select {
	case r := <-res:
		t.Fatalf("a request was answered while hanging: %q", r)
	default:
	}
	if err := SetHTTPMode(ctx, socket, HTTPStart); err != nil {
		t.Fatal(err)
	}
	if r := <-res; r != "be1\n" {
		t.Errorf("the hung request got %q after http start, want the answer", r)
	}

	if err := SetHTTPMode(ctx, socket, "pause"); err == nil || !strings.Contains(err.Error(), `unknown HTTP mode "pause"`) {
		t.Errorf("http pause: %v, want an error naming the modes", err)
	}
	if err := SetHTTPMode(ctx, filepath.Join(t.TempDir(), "none.ctl"), HTTPStop); err == nil {
		t.Error("no error without a control socket")
	}
}

func errorString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// The control socket goes away with the server.
func TestServeControlRemoved(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "be1.ctl")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ServeOptions{Name: "be1", HTTP: "127.0.0.1:0", Control: socket}) }()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(socket); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no control socket")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("control socket still there: %v", err)
	}
}
