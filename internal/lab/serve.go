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
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// BackendHeader names the backend that answered an HTTP request.
const BackendHeader = "X-Backend"

// Serve runs a backend's servers until ctx ends: HTTP on httpAddr answers
// every request with status 200, header BackendHeader: name and body
// "name\n"; UDP on udpAddr answers each datagram with "name:" and the
// datagram. Either address may be empty to leave that server out.
//
// UDP replies leave from the address the datagram was sent to: with DSR
// that is the VIP, and a client whose socket is connected to the VIP
// would discard a reply from the backend's own address.
func Serve(ctx context.Context, name, httpAddr, udpAddr string) error {
	if name == "" {
		return errors.New("serve: empty backend name")
	}
	if httpAddr == "" && udpAddr == "" {
		return errors.New("serve: no address to listen on")
	}
	// Bind everything before serving, so a bad address fails at once and
	// a TCP connection that succeeds means UDP is bound too.
	var udp *net.UDPConn
	if udpAddr != "" {
		var err error
		if udp, err = listenUDP(udpAddr); err != nil {
			return err
		}
		defer udp.Close()
	}
	var ln net.Listener
	if httpAddr != "" {
		var err error
		if ln, err = net.Listen("tcp", httpAddr); err != nil {
			return fmt.Errorf("serve: HTTP: %w", err)
		}
		defer ln.Close()
	}

	errc := make(chan error, 2)
	var srv *http.Server
	if ln != nil {
		srv = &http.Server{
			Handler:           nameHandler(name),
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       time.Minute,
		}
		go func() { errc <- fmt.Errorf("serve: HTTP: %w", srv.Serve(ln)) }()
		slog.Info("serving HTTP", "name", name, "addr", ln.Addr())
	}
	if udp != nil {
		go func() { errc <- echo(udp, name) }()
		slog.Info("serving UDP echo", "name", name, "addr", udp.LocalAddr())
	}

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}
	return nil
}

func nameHandler(name string) http.Handler {
	body := name + "\n"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(BackendHeader, name)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, body)
	})
}

// listenUDP binds addr with IP_PKTINFO on, so that each datagram reports
// the address it was sent to.
func listenUDP(addr string) (*net.UDPConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
		})
		if err == nil {
			err = serr
		}
		return err
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp4", addr)
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
			ctl = unix.PktInfo4(&unix.Inet4Pktinfo{Spec_dst: dst.As4()})
		}
		if _, _, err := c.WriteMsgUDPAddrPort(reply, ctl, from); err != nil {
			// One unanswerable client must not stop the echo.
			slog.Debug("UDP reply failed", "to", from, "err", err)
		}
	}
}

// pktinfoDst finds the destination address in IP_PKTINFO control data.
func pktinfoDst(oob []byte) (netip.Addr, bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return netip.Addr{}, false
	}
	for _, m := range msgs {
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
