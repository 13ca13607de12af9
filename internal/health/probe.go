package health

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/xlbproject/xlb/internal/config"
)

// maxBody is how much of a response body an HTTP probe reads: enough to
// drain a typical health page so that closing sends FIN rather than RST,
// never a whole download.
const maxBody = 4 << 10

// readers recycles the buffers of HTTP probes: at a thousand probes a
// second, fresh 4 KiB buffers would be most of the prober's garbage.
var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4<<10) }}

// run probes once as s says and returns how long the probe took up to
// its verdict: the connect for tcp, the response headers for http. The
// error text is short and meant for people: "connect 10.0.3.2:80:
// connection refused", "HTTP 503", "timeout after 500ms: no response
// headers".
func run(ctx context.Context, s spec) (time.Duration, error) {
	if s.err != nil {
		return 0, s.err
	}
	start := time.Now()
	deadline := start.Add(s.check.Timeout)
	// No keepalive: the connection lives for one exchange, and skipping it
	// saves system calls on every probe.
	d := net.Dialer{Deadline: deadline, KeepAlive: -1}
	conn, err := d.DialContext(ctx, "tcp", s.hostPort)
	if err != nil {
		return time.Since(start), fmt.Errorf("connect %s: %s", s.hostPort, reason(err, s.check.Timeout))
	}
	defer conn.Close()
	if s.check.Type != config.CheckHTTP {
		return time.Since(start), nil
	}
	return exchange(ctx, conn, s, start, deadline)
}

// exchange sends the HTTP request of s on conn and judges the status of
// the response. Redirects count by their status; they are not followed.
func exchange(ctx context.Context, conn net.Conn, s spec, start, deadline time.Time) (time.Duration, error) {
	if err := conn.SetDeadline(deadline); err != nil {
		return time.Since(start), fmt.Errorf("set deadline: %s", reason(err, s.check.Timeout))
	}
	// The deadline alone would let a hanging backend hold up the end of
	// Run for a whole timeout.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	if _, err := conn.Write(s.request); err != nil {
		return time.Since(start), fmt.Errorf("send request: %s", reason(err, s.check.Timeout))
	}
	br := readers.Get().(*bufio.Reader)
	br.Reset(conn)
	defer func() {
		br.Reset(nil)
		readers.Put(br)
	}()
	resp, err := http.ReadResponse(br, nil)
	latency := time.Since(start)
	if err != nil {
		if isTransport(err) {
			return latency, fmt.Errorf("%s: no response headers", reason(err, s.check.Timeout))
		}
		return latency, fmt.Errorf("bad HTTP response: %v", err)
	}
	_, _ = io.CopyN(io.Discard, resp.Body, maxBody) // the verdict is in: errors here change nothing
	resp.Body.Close()
	if resp.StatusCode < s.check.StatusMin || resp.StatusCode > s.check.StatusMax {
		return latency, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return latency, nil
}

// isTransport tells failures of the connection from malformed responses.
func isTransport(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// reason turns a network error into its short cause: "connection
// refused", "timeout after 500ms", "connection closed".
func reason(err error, timeout time.Duration) string {
	var ne net.Error
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return "timeout after " + timeout.String()
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "connection closed"
	}
	return err.Error()
}
