package labrun

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/netns"
)

// RequestTimeout bounds one request: connecting, sending and reading the
// answer. Far above what the lab needs, so that a slow machine is not
// mistaken for a broken xlb.
const RequestTimeout = 5 * time.Second

// BackendHeader names the backend in the lab servers' HTTP answers.
const BackendHeader = lab.BackendHeader

// HTTPConn is one HTTP/1.1 connection to a target, made inside a
// namespace. Requests go over this very connection, in sequence; unlike
// an http.Client it never dials again behind the caller's back, which is
// what a test of a long-lived connection needs.
type HTTPConn struct {
	conn   net.Conn
	r      *bufio.Reader
	target netip.AddrPort
}

// DialHTTP opens a TCP connection from namespace ns to target.
func DialHTTP(ctx context.Context, ns string, target netip.AddrPort) (*HTTPConn, error) {
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	var conn net.Conn
	err := netns.Do(ns, func() error {
		// No TCP keep-alive probes: an idle connection sends nothing,
		// so it adds nothing to the counters that tests compare.
		d := net.Dialer{KeepAlive: -1}
		var err error
		conn, err = d.DialContext(ctx, network("tcp", target.Addr()), target.String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("connect to %s from %s: %w", target, ns, err)
	}
	return &HTTPConn{conn: conn, r: bufio.NewReader(conn), target: target}, nil
}

// LocalAddr is the client's end of the connection.
func (c *HTTPConn) LocalAddr() netip.AddrPort {
	if a, ok := c.conn.LocalAddr().(*net.TCPAddr); ok {
		return a.AddrPort()
	}
	return netip.AddrPort{}
}

// Close closes the connection.
func (c *HTTPConn) Close() error { return c.conn.Close() }

// Get sends GET / on the connection and returns the name of the backend
// that answered. With last set it asks the server to close the connection
// after the answer. The answer must be status 200 with the backend's
// name both in the body and in the X-Backend header.
func (c *HTTPConn) Get(ctx context.Context, last bool) (string, error) {
	a, err := c.Ask(ctx, last)
	return a.Backend, err
}

// Answer is what a lab backend answered.
type Answer struct {
	Backend string
	// Peer is the source the backend saw the connection come from
	// (lab.PeerHeader); invalid from a backend that does not say
	// (only plain backends do).
	Peer netip.AddrPort
}

// Ask is Get, returning the whole answer.
func (c *HTTPConn) Ask(ctx context.Context, last bool) (Answer, error) {
	deadline := time.Now().Add(RequestTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := c.conn.SetDeadline(deadline); err != nil {
		return Answer{}, err
	}
	// Cancelling ctx interrupts a blocked read or write.
	stop := context.AfterFunc(ctx, func() { _ = c.conn.SetDeadline(time.Now()) })
	defer stop()

	req := "GET / HTTP/1.1\r\nHost: " + c.target.String() + "\r\nUser-Agent: xlb-labrun\r\n"
	if last {
		req += "Connection: close\r\n"
	}
	if _, err := io.WriteString(c.conn, req+"\r\n"); err != nil {
		return Answer{}, c.fail(ctx, "send the request", err)
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return Answer{}, c.fail(ctx, "read the answer", err)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if err != nil {
		return Answer{}, c.fail(ctx, "read the answer", err)
	}
	name := resp.Header.Get(BackendHeader)
	switch {
	case resp.StatusCode != http.StatusOK:
		return Answer{}, fmt.Errorf("GET http://%s/: status %s", c.target, resp.Status)
	case name == "" || string(body) != name+"\n":
		return Answer{}, fmt.Errorf("GET http://%s/: %s %q with body %q: not an answer of a lab backend", c.target, BackendHeader, name, body)
	}
	a := Answer{Backend: name}
	if peer := resp.Header.Get(lab.PeerHeader); peer != "" {
		if a.Peer, err = parsePeer(peer); err != nil {
			return Answer{}, fmt.Errorf("GET http://%s/: %s %q: %w", c.target, lab.PeerHeader, peer, err)
		}
	}
	return a, nil
}

// parsePeer reads a plain backend's PeerHeader: nginx writes
// $remote_addr:$remote_port, an IPv6 address without brackets.
func parsePeer(s string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap, nil
	}
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return netip.AddrPort{}, fmt.Errorf("no port in %q", s)
	}
	return netip.ParseAddrPort("[" + s[:i] + "]" + s[i:])
}

func (c *HTTPConn) fail(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		err = context.Cause(ctx)
	}
	return fmt.Errorf("GET http://%s/ from %s: %s: %w", c.target, c.LocalAddr(), what, err)
}

// Tally counts answers by the backend that gave them.
type Tally map[string]int

// Total is the number of answers.
func (t Tally) Total() int {
	n := 0
	for _, c := range t {
		n += c
	}
	return n
}

// Backends lists the backends that answered, sorted.
func (t Tally) Backends() []string { return slices.Sorted(maps.Keys(t)) }

// HTTPLoad sends n requests for http://target/ from namespace ns, each on
// a new TCP connection (so each is a new flow for ECMP and Maglev), at
// most parallel at a time. It stops at the first failed request and
// returns the answers counted until then with the error. progress, if
// not nil, is called after each answer with the number so far.
func HTTPLoad(ctx context.Context, ns string, target netip.AddrPort, n, parallel int, progress func(done int)) (Tally, error) {
	one := func(ctx context.Context) (string, error) {
		c, err := DialHTTP(ctx, ns, target)
		if err != nil {
			return "", err
		}
		defer c.Close()
		return c.Get(ctx, true)
	}
	return load(ctx, n, parallel, one, progress)
}

// UDPReply is the answer to one UDP echo request.
type UDPReply struct {
	Backend string         // the backend that answered
	From    netip.AddrPort // the answer's source
	Local   netip.AddrPort // the client socket's address
}

// udpTries is how often UDPEcho sends its datagram before giving up; each
// waits a part of RequestTimeout for the answer. Resending keeps the
// 5-tuple, so the same backend answers.
const udpTries = 3

// UDPEcho sends payload from a new socket in namespace ns to target, an
// echo service of the lab's backends, and returns the answer. The socket
// is not connected, so an answer from another address than target is
// received and reported rather than silently dropped by the kernel.
func UDPEcho(ctx context.Context, ns string, target netip.AddrPort, payload string) (UDPReply, error) {
	var conn *net.UDPConn
	err := netns.Do(ns, func() error {
		var err error
		conn, err = net.ListenUDP(network("udp", target.Addr()), &net.UDPAddr{})
		return err
	})
	if err != nil {
		return UDPReply{}, fmt.Errorf("UDP socket in %s: %w", ns, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()

	local := conn.LocalAddr().(*net.UDPAddr).AddrPort()
	buf := make([]byte, 2048)
	var lastErr error
	for range udpTries {
		if _, err := conn.WriteToUDPAddrPort([]byte(payload), target); err != nil {
			return UDPReply{}, fmt.Errorf("UDP to %s from %s: %w", target, local, err)
		}
		if err := conn.SetReadDeadline(time.Now().Add(RequestTimeout / udpTries)); err != nil {
			return UDPReply{}, err
		}
		n, from, err := conn.ReadFromUDPAddrPort(buf)
		if ctx.Err() != nil {
			return UDPReply{}, context.Cause(ctx)
		}
		if err != nil {
			lastErr = err
			continue
		}
		name, echoed, ok := strings.Cut(string(buf[:n]), ":")
		if !ok || echoed != payload || name == "" {
			return UDPReply{}, fmt.Errorf("UDP to %s from %s: answer %q from %s is not an echo of %q", target, local, buf[:n], from, payload)
		}
		return UDPReply{Backend: name, From: netip.AddrPortFrom(from.Addr().Unmap(), from.Port()), Local: local}, nil
	}
	return UDPReply{}, fmt.Errorf("UDP to %s from %s: no answer to %d datagrams: %w", target, local, udpTries, lastErr)
}

// UDPLoad sends n echo requests to target from namespace ns, each from a
// new socket (a new source port, so a new flow), at most parallel at a
// time. Every answer must come from target itself, as direct server
// return promises. It stops at the first failure. progress is as for
// HTTPLoad.
func UDPLoad(ctx context.Context, ns string, target netip.AddrPort, n, parallel int, progress func(done int)) (Tally, error) {
	var mu sync.Mutex
	seq := 0
	one := func(ctx context.Context) (string, error) {
		mu.Lock()
		seq++
		payload := fmt.Sprintf("xlb-labrun %d", seq)
		mu.Unlock()
		r, err := UDPEcho(ctx, ns, target, payload)
		if err != nil {
			return "", err
		}
		if r.From != target {
			return "", fmt.Errorf("UDP to %s from %s: %s answered from %s, not from %s", target, r.Local, r.Backend, r.From, target)
		}
		return r.Backend, nil
	}
	return load(ctx, n, parallel, one, progress)
}

// load runs one n times, at most parallel at a time, and counts the
// backends it returns. The first error stops it.
func load(ctx context.Context, n, parallel int, one func(context.Context) (string, error), progress func(int)) (Tally, error) {
	if n < 0 || parallel < 1 {
		return nil, fmt.Errorf("%d requests, %d in parallel: want n >= 0 and parallel >= 1", n, parallel)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	var (
		mu       sync.Mutex
		tally    = Tally{}
		firstErr error
		next     int
		wg       sync.WaitGroup
	)
	for range min(parallel, n) {
		wg.Go(func() {
			for {
				mu.Lock()
				if next == n || firstErr != nil || ctx.Err() != nil {
					mu.Unlock()
					return
				}
				next++
				mu.Unlock()

				name, err := one(ctx)

				mu.Lock()
				switch {
				case err != nil && firstErr == nil:
					firstErr = err
					cancel(err)
				case err == nil:
					tally[name]++
					if progress != nil {
						progress(tally.Total())
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = context.Cause(ctx)
	}
	if firstErr != nil {
		return tally, fmt.Errorf("after %d of %d answers: %w", tally.Total(), n, firstErr)
	}
	return tally, nil
}

// network is tcp4 or udp4 (proto) for an IPv4 target, tcp6 or udp6 for
// an IPv6 one: a client of one family, whatever the namespace has.
func network(proto string, target netip.Addr) string {
	if target.Is4() || target.Is4In6() {
		return proto + "4"
	}
	return proto + "6"
}
