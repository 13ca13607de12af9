package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// BackendHeader names the backend that answered an HTTP request.
const BackendHeader = "X-Backend"

// ServeOptions say what Serve serves.
type ServeOptions struct {
	// Name is what the servers answer with (required).
	Name string
	// HTTP and UDP are listen addresses; either may be empty to leave
	// that server out.
	HTTP, UDP string
	// HTTP6 and UDP6 are IPv6 listen addresses of the same servers
	// (IPv6 only: the IPv4 ones keep their own sockets); empty: none.
	HTTP6, UDP6 string
	// Control, if not empty, is the path of a unix socket on which the
	// HTTP server can be stopped, started and made to hang (see
	// SetHTTPMode), so that tests can fail a backend's health checks.
	Control string
}

// Serve runs a backend's servers until ctx ends: HTTP answers every
// request with status 200, header BackendHeader: name and body "name\n";
// UDP answers each datagram with "name:" and the datagram.
//
// UDP replies leave from the address the datagram was sent to: with DSR
// that is the VIP, and a client whose socket is connected to the VIP
// would discard a reply from the backend's own address.
func Serve(ctx context.Context, o ServeOptions) error {
	if o.Name == "" {
		return errors.New("serve: empty backend name")
	}
	if o.HTTP == "" && o.UDP == "" {
		return errors.New("serve: no address to listen on")
	}
	if o.Control != "" && o.HTTP == "" {
		return errors.New("serve: a control socket needs an HTTP server to control")
	}
	// Bind everything before serving, so a bad address fails at once and
	// a TCP connection that succeeds means UDP is bound too.
	if o.HTTP6 != "" && o.HTTP == "" {
		return errors.New("serve: an IPv6 HTTP address needs an IPv4 one beside it")
	}
	var udps []*net.UDPConn
	for _, a := range []struct {
		addr string
		six  bool
	}{{o.UDP, false}, {o.UDP6, true}} {
		if a.addr == "" {
			continue
		}
		udp, err := listenUDP(a.addr, a.six)
		if err != nil {
			return err
		}
		defer udp.Close()
		udps = append(udps, udp)
	}
	errc := make(chan error, 3)
	var web *switchedHTTP
	if o.HTTP != "" {
		addrs := []string{o.HTTP}
		if o.HTTP6 != "" {
			// IPv6 first: once the IPv4 port answers (what the lab
			// waits for), everything is bound.
			addrs = []string{o.HTTP6, o.HTTP}
		}
		web = &switchedHTTP{name: o.Name, addrs: addrs, handler: nameHandler(o.Name), errc: errc}
		if err := web.set(HTTPStart); err != nil {
			return err
		}
		defer web.set(HTTPStop)
	}
	if o.Control != "" {
		stop, err := serveControl(o.Control, web)
		if err != nil {
			return err
		}
		defer stop()
	}
	for _, udp := range udps {
		go func() { errc <- echo(udp, o.Name) }()
		slog.Info("serving UDP echo", "name", o.Name, "addr", udp.LocalAddr())
	}

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	return nil
}

// HTTPMode is what a backend's HTTP server does (see SetHTTPMode).
type HTTPMode string

const (
	// HTTPStart: listen and answer, as after start-up.
	HTTPStart HTTPMode = "start"
	// HTTPStop: close the listener and every connection; connecting is
	// refused.
	HTTPStop HTTPMode = "stop"
	// HTTPHang: accept connections and read requests but never answer,
	// as a server stuck in its application does.
	HTTPHang HTTPMode = "hang"
)

// switchedHTTP is an HTTP server that can be stopped, started again on
// the same addresses, and made to hang.
type switchedHTTP struct {
	name    string
	addrs   []string
	handler http.Handler
	errc    chan<- error // a failure of the running server

	mu      sync.Mutex
	mode    HTTPMode
	srv     *http.Server  // nil while stopped
	hanging chan struct{} // not nil while hanging; closed when that ends
}

func (h *switchedHTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	hanging := h.hanging
	h.mu.Unlock()
	if hanging != nil {
		select {
		case <-hanging: // answered after all once the hang ends
		case <-r.Context().Done():
			return
		}
	}
	h.handler.ServeHTTP(w, r)
}

// set switches the server to mode.
func (h *switchedHTTP) set(mode HTTPMode) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if mode != HTTPHang && h.hanging != nil {
		close(h.hanging)
		h.hanging = nil
	}
	switch mode {
	case HTTPStop:
		if h.srv != nil {
			// Close, not Shutdown: connections are cut at once, as
			// when a server process dies.
			_ = h.srv.Close()
			h.srv = nil
			slog.Info("HTTP stopped", "name", h.name, "addrs", h.addrs)
		}
	case HTTPStart, HTTPHang:
		if h.srv == nil {
			var lns []net.Listener
			for _, addr := range h.addrs {
				// Go sets SO_REUSEADDR: the address is free again at
				// once although connections of the last run linger in
				// TIME_WAIT. tcp6 is IPv6 only, beside the IPv4 socket.
				network := "tcp4"
				if strings.HasPrefix(addr, "[") {
					network = "tcp6"
				}
				ln, err := net.Listen(network, addr)
				if err != nil {
					for _, l := range lns {
						l.Close()
					}
					return fmt.Errorf("serve: HTTP: %w", err)
				}
				lns = append(lns, ln)
			}
			srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
			h.srv = srv
			for _, ln := range lns {
				go func() {
					if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
						select {
						case h.errc <- fmt.Errorf("serve: HTTP: %w", err):
						default: // Serve has returned with an earlier error
						}
					}
				}()
				slog.Info("serving HTTP", "name", h.name, "addr", ln.Addr())
			}
		}
		if mode == HTTPHang && h.hanging == nil {
			h.hanging = make(chan struct{})
			slog.Info("HTTP hangs: connections are accepted, requests never answered", "name", h.name)
		}
	default:
		return fmt.Errorf("unknown HTTP mode %q: want %s, %s or %s", mode, HTTPStart, HTTPStop, HTTPHang)
	}
	h.mode = mode
	return nil
}

func (h *switchedHTTP) current() HTTPMode {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mode
}

// serveControl serves the control API on a unix socket at path:
// POST /http/{mode} switches the HTTP server, GET /http reports its
// mode. The answer's body is "http MODE\n". stop ends it and removes the
// socket.
func serveControl(path string, web *switchedHTTP) (stop func(), err error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("serve: control socket: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("serve: control socket: %w", err)
	}
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter) { fmt.Fprintf(w, "http %s\n", web.current()) }
	mux.HandleFunc("GET /http", func(w http.ResponseWriter, _ *http.Request) { reply(w) })
	mux.HandleFunc("POST /http/{mode}", func(w http.ResponseWriter, r *http.Request) {
		if err := web.set(HTTPMode(r.PathValue("mode"))); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		reply(w)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	slog.Info("serving the control socket", "path", path)
	return func() {
		_ = srv.Close()
		_ = os.Remove(path)
	}, nil
}

// SetHTTPMode switches the HTTP server of the Serve whose control socket
// is at socket. It returns once the server has switched: after
// HTTPStop, connecting is refused.
func SetHTTPMode(ctx context.Context, socket string, mode HTTPMode) error {
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
	defer c.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://lab/http/"+url.PathEscape(string(mode)), nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("http %s through %s: %w", mode, socket, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("http %s through %s: %s: %s", mode, socket, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// ControlSocket is the control socket of backend h's server in lab
// prefix (see SetHTTPMode).
func ControlSocket(prefix string, h Host) string {
	return filepath.Join(StateDir(prefix), ServerName(h)+".ctl")
}

func nameHandler(name string) http.Handler {
	body := name + "\n"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(BackendHeader, name)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, body)
	})
}

// listenUDP binds addr with IP_PKTINFO (IPV6_RECVPKTINFO for an IPv6
// socket, six) on, so that each datagram reports the address it was
// sent to.
func listenUDP(addr string, six bool) (*net.UDPConn, error) {
	network, level, opt := "udp4", unix.IPPROTO_IP, unix.IP_PKTINFO
	if six {
		network, level, opt = "udp6", unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), level, opt, 1)
		})
		if err == nil {
			err = serr
		}
		return err
	}}
	pc, err := lc.ListenPacket(context.Background(), network, addr)
	if err != nil {
		return nil, fmt.Errorf("serve: UDP: %w", err)
	}
	return pc.(*net.UDPConn), nil
}

// echo answers datagrams until the connection is closed.
func echo(c *net.UDPConn, name string) error {
	buf := make([]byte, 64<<10)
	oob := make([]byte, 128)
	prefix := []byte(name + ":")
	for {
		n, oobn, _, from, err := c.ReadMsgUDPAddrPort(buf, oob)
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("serve: UDP: %w", err)
		}
		reply := append(append([]byte(nil), prefix...), buf[:n]...)
		var ctl []byte
		// Broadcast and multicast destinations cannot be a source; the
		// kernel then picks one.
		if dst, ok := pktinfoDst(oob[:oobn]); ok && (dst.IsGlobalUnicast() || dst.IsLoopback()) {
			if dst.Is4() {
				ctl = unix.PktInfo4(&unix.Inet4Pktinfo{Spec_dst: dst.As4()})
			} else {
				ctl = unix.PktInfo6(&unix.Inet6Pktinfo{Addr: dst.As16()})
			}
		}
		if _, _, err := c.WriteMsgUDPAddrPort(reply, ctl, from); err != nil {
			// One unanswerable client must not stop the echo.
			slog.Debug("UDP reply failed", "to", from, "err", err)
		}
	}
}

// pktinfoDst finds the destination address in IP_PKTINFO or
// IPV6_PKTINFO control data.
func pktinfoDst(oob []byte) (netip.Addr, bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return netip.Addr{}, false
	}
	for _, m := range msgs {
		if m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_PKTINFO && len(m.Data) >= unix.SizeofInet6Pktinfo {
			// struct in6_pktinfo: the destination address first.
			var dst [16]byte
			copy(dst[:], m.Data[:16])
			return netip.AddrFrom16(dst), true
		}
		if m.Header.Level != unix.IPPROTO_IP || m.Header.Type != unix.IP_PKTINFO || len(m.Data) < unix.SizeofInet4Pktinfo {
			continue
		}
		// struct in_pktinfo: ifindex (4 bytes), spec_dst, addr. addr is
		// the header's destination.
		var dst [4]byte
		copy(dst[:], m.Data[8:12])
		return netip.AddrFrom4(dst), true
	}
	return netip.Addr{}, false
}
