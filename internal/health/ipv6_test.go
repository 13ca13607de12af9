package health

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/config"
)

// TestProbeIPv6: TCP and HTTP checks of an IPv6 backend dial
// [address]:port and ask for Host [address], and a refused connection
// names the backend so.
func TestProbeIPv6(t *testing.T) {
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	hosts := make(chan string, 4)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hosts <- r.Host }), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	addr := netip.IPv6Loopback()

	for _, typ := range []config.CheckType{config.CheckTCP, config.CheckHTTP} {
		if _, err := run(context.Background(), newSpec(addr, Check{Type: typ, Port: port, Timeout: 5 * time.Second})); err != nil {
			t.Errorf("%s check of [::1]:%d: %v", typ, port, err)
		}
	}
	if h := <-hosts; h != "[::1]" {
		t.Errorf("HTTP check sent Host %q, want [::1]", h)
	}

	closed, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	cport := uint16(closed.Addr().(*net.TCPAddr).Port)
	closed.Close()
	_, err = run(context.Background(), newSpec(addr, Check{Type: config.CheckTCP, Port: cport, Timeout: 5 * time.Second}))
	if want := "connect [::1]:" + strconv.Itoa(int(cport)) + ": connection refused"; errString(err) != want {
		t.Errorf("error %q, want %q", errString(err), want)
	}
}
