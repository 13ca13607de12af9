package bfd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// RFC 5881 §4: control packets go to port 3784, from a source port in
// 49152–65535, with TTL (IPv6: hop limit) 255.
const (
	Port         = 3784
	minSrcPort   = 49152
	maxSrcPort   = 65535
	gtsmTTL      = 255
	portAttempts = 64
	// tosCS6 marks control packets as network control traffic, so a
	// congested link queues them ahead of data (as FRR does).
	tosCS6 = 0xc0
)

// udpNetwork is the network name of a UDP socket of addr's family.
func udpNetwork(addr netip.Addr) string {
	if addr.Is4() {
		return "udp4"
	}
	return "udp6"
}

// listenRx opens the socket every session receives on: local:3784, with
// the TTL (IPv6: hop limit) of each packet delivered as a control message.
func listenRx(local netip.Addr) (*net.UDPConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		if local.Is4() {
			return setsockopt(c, unix.IPPROTO_IP, unix.IP_RECVTTL, 1)
		}
		return setsockopt(c, unix.IPPROTO_IPV6, unix.IPV6_RECVHOPLIMIT, 1)
	}}
	addr := netip.AddrPortFrom(local, Port).String()
	pc, err := lc.ListenPacket(context.Background(), udpNetwork(local), addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return pc.(*net.UDPConn), nil
}

// dialTx opens one session's sending socket: bound to local and a free
// source port in the RFC 5881 range (Linux's ephemeral range is another
// one, so we pick the port ourselves), connected to peer:3784.
func dialTx(local, peer netip.Addr) (*net.UDPConn, error) {
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		if local.Is4() {
			return errors.Join(
				setsockopt(c, unix.IPPROTO_IP, unix.IP_TTL, gtsmTTL),
				setsockopt(c, unix.IPPROTO_IP, unix.IP_TOS, tosCS6),
			)
		}
		return errors.Join(
			setsockopt(c, unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS, gtsmTTL),
			setsockopt(c, unix.IPPROTO_IPV6, unix.IPV6_TCLASS, tosCS6),
		)
	}}
	remote := netip.AddrPortFrom(peer, Port).String()
	var err error
	for range portAttempts {
		port := uint16(minSrcPort + rand.IntN(maxSrcPort-minSrcPort+1))
		d.LocalAddr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, port))
		var c net.Conn
		c, err = d.Dial(udpNetwork(local), remote)
		if err == nil {
			return c.(*net.UDPConn), nil
		}
		if !errors.Is(err, unix.EADDRINUSE) {
			break
		}
	}
	return nil, fmt.Errorf("open a socket from %s to %s: %w", local, remote, err)
}

func setsockopt(c syscall.RawConn, level, opt, value int) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), level, opt, value)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("setsockopt(%d, %d, %d): %w", level, opt, value, serr)
	}
	return nil
}

// receivedTTL finds the IP_TTL control message that IP_RECVTTL asks the
// kernel for, or the IPV6_HOPLIMIT one of IPV6_RECVHOPLIMIT (an int
// either way).
func receivedTTL(oob []byte) (int, bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0, false
	}
	for _, m := range msgs {
		ttl := m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TTL
		hops := m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_HOPLIMIT
		if (ttl || hops) && len(m.Data) >= 4 {
			return int(binary.NativeEndian.Uint32(m.Data)), true
		}
	}
	return 0, false
}

// netnsHandle remembers the network namespace a Manager was created in,
// so that sessions added later from any goroutine (whose thread may sit
// in another namespace, as in tests that drive several namespaces from
// one process) open their sockets next to the Manager's.
type netnsHandle struct {
	f *os.File
}

func currentNetns() (*netnsHandle, error) {
	f, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("open own network namespace: %w", err)
	}
	return &netnsHandle{f: f}, nil
}

func (h *netnsHandle) close() error { return h.f.Close() }

// isCurrent reports whether the calling thread is in the namespace.
func (h *netnsHandle) isCurrent() (bool, error) {
	var want, got unix.Stat_t
	if err := unix.Fstat(int(h.f.Fd()), &want); err != nil {
		return false, err
	}
	if err := unix.Stat("/proc/thread-self/ns/net", &got); err != nil {
		return false, err
	}
	return want.Dev == got.Dev && want.Ino == got.Ino, nil
}

// do runs fn on a thread in the namespace. Entering another namespace
// needs CAP_SYS_ADMIN; a thread that is already in it (the usual case: a
// process that never switches) needs nothing.
func (h *netnsHandle) do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		same, err := h.isCurrent()
		if err == nil && !same {
			err = unix.Setns(int(h.f.Fd()), unix.CLONE_NEWNET)
			if err != nil {
				err = fmt.Errorf("enter the manager's network namespace: %w", err)
			}
		}
		if err == nil {
			err = fn()
		}
		errc <- err
		if same {
			runtime.UnlockOSThread()
		}
		// A thread moved into another namespace stays locked, and Go
		// ends it with this goroutine instead of reusing it.
	}()
	return <-errc
}
