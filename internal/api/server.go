package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// socketMode lets root and the socket's group (e.g. a monitoring user) read
// the status; nobody else.
const socketMode = 0o660

// Listen creates the API's unix socket: it creates the socket's directory,
// removes a stale socket left by an agent that died, and refuses to take
// over a socket that a running agent still serves (two agents must not
// program one data plane).
func Listen(socket string) (net.Listener, error) {
	if socket == "" {
		return nil, errors.New("no API socket path given")
	}
	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		return nil, fmt.Errorf("create the API socket's directory: %w", err)
	}
	if err := removeStale(socket); err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", socket, err)
	}
	if err := os.Chmod(socket, socketMode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("set the mode of %s: %w", socket, err)
	}
	return ln, nil
}

func removeStale(socket string) error {
	fi, err := os.Lstat(socket)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("check %s: %w", socket, err)
	}
	if fi.Mode()&fs.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket: remove it or set another api.socket", socket)
	}
	if c, err := net.DialTimeout("unix", socket, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("another agent is serving on %s: stop it first, or give this one another api.socket", socket)
	}
	if err := os.Remove(socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the stale socket %s: %w", socket, err)
	}
	return nil
}

// Server serves the API on a unix socket and, optionally, the metrics on a
// TCP address.
type Server struct {
	socket  string
	log     *slog.Logger
	servers []*http.Server
	metrics net.Addr
}

// Option adds to what Serve serves on the socket.
type Option func(*http.ServeMux)

// WithCheck answers POST /v1/check (`xlb agent --check`) with check.
func WithCheck(check CheckFunc) Option {
	return func(mux *http.ServeMux) { mux.HandleFunc("POST /v1/check", checkHandler(check)) }
}

// Serve serves GET /v1/status and GET /metrics on ln (from Listen), and
// what opts add, and, if metricsAddr is not "", GET /metrics on that TCP
// address. It returns once both listen; Close stops them.
func Serve(ln net.Listener, metricsAddr string, status StatusFunc, log *slog.Logger, opts ...Option) (*Server, error) {
	s := &Server{socket: ln.Addr().String(), log: log}
	var mln net.Listener
	if metricsAddr != "" {
		var err error
		if mln, err = net.Listen("tcp", metricsAddr); err != nil {
			return nil, fmt.Errorf("metrics: listen on %s: %w (check api.metrics, or --metrics without a file: is the address this host's, is the port taken?)", metricsAddr, err)
		}
		s.metrics = mln.Addr()
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", statusHandler(status))
	mux.Handle("GET /metrics", metricsHandler(status))
	for _, o := range opts {
		o(mux)
	}
	s.start(ln, mux)
	if mln != nil {
		m := http.NewServeMux()
		m.Handle("GET /metrics", metricsHandler(status))
		s.start(mln, m)
	}
	return s, nil
}

func (s *Server) start(ln net.Listener, h http.Handler) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	s.servers = append(s.servers, srv)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("API server stopped", "address", ln.Addr().String(), "error", err,
				"fix", "restart the agent to serve `xlb status` and metrics again (forwarding continues across restarts)")
		}
	}()
}

// MetricsAddr is the metrics listener's address, nil without one.
func (s *Server) MetricsAddr() net.Addr { return s.metrics }

// Close stops serving, waits briefly for running requests and removes the
// socket.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var errs []error
	for _, srv := range s.servers {
		if err := srv.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.Remove(s.socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// errorBody is the JSON body of a failed request.
type errorBody struct {
	Error string `json:"error"`
}

func statusHandler(status StatusFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		st, err := status()
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			json.NewEncoder(w).Encode(errorBody{Error: err.Error()})
			return
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(st)
	}
}
