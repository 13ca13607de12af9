package lab

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"testing"
	"time"
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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, name, httpAddr, udpAddr) }()
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

func TestServeErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, tt := range []struct{ name, http, udp string }{
		{"", "127.0.0.1:0", ""},
		{"be1", "", ""},
		{"be1", busy.Addr().String(), ""},
		{"be1", "", "256.0.0.1:9"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := Serve(ctx, tt.name, tt.http, tt.udp)
		cancel()
		if err == nil {
			t.Errorf("Serve(%q, %q, %q) = nil, want an error", tt.name, tt.http, tt.udp)
		}
	}
}
