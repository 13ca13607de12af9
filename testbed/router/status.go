package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"syscall"
	"time"
)

// Status is what the router reports on its status socket.
type Status struct {
	ASN      uint32         `json:"asn"`
	PeerASN  uint32         `json:"peerASN"`
	RouterID netip.Addr     `json:"routerID"`
	Listen   netip.AddrPort `json:"listen"`
	Listen6  netip.AddrPort `json:"listen6,omitzero"` // absent without Config.Listen6
	Protocol int            `json:"protocol"`         // rtm_protocol of its kernel routes
	Peers    []PeerStatus   `json:"peers"`
	Routes   []RouteStatus  `json:"routes"`
}

// PeerStatus is one BGP neighbour the router has heard from.
type PeerStatus struct {
	Address netip.Addr `json:"address"`
	ASN     uint32     `json:"asn,omitempty"`
	State   string     `json:"state"` // idle, connect, active, opensent, openconfirm, established
	Since   time.Time  `json:"since"`
	// Failed: PeerFailed took the peer's paths out; it returns with its
	// next established session.
	Failed bool `json:"failed,omitempty"`
	// BFD is the peer's BFD session, if the router runs BFD and the
	// peer has been established since it started.
	BFD *BFDStatus `json:"bfd,omitempty"`
}

// BFDStatus is the BFD session watching a peer (the same fields as
// the agent's status shows for its own sessions).
type BFDStatus struct {
	State       string  `json:"state"` // AdminDown, Down, Init, Up
	RemoteState string  `json:"remoteState"`
	Diag        string  `json:"diag"`        // why it last left Up
	DetectionMs float64 `json:"detectionMs"` // 0 while the peer is unknown
	Downs       uint64  `json:"downs"`       // times it left Up
}

// RouteStatus is one prefix in the kernel FIB, or one the router wanted
// to install and the kernel refused (Error says why).
type RouteStatus struct {
	Prefix   netip.Prefix `json:"prefix"`
	Nexthops []netip.Addr `json:"nexthops"` // as installed
	Error    string       `json:"error,omitempty"`
}

// Status returns the peers and the installed routes, sorted.
func (r *Router) Status() Status {
	var sessions map[netip.Addr]*BFDStatus
	if b := r.bfd.Load(); b != nil {
		sessions = b.sessions()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	st := Status{
		ASN:      r.cfg.ASN,
		PeerASN:  r.cfg.PeerASN,
		RouterID: r.cfg.RouterID,
		Listen:   netip.AddrPortFrom(r.cfg.Listen, uint16(r.cfg.Port)),
		Protocol: Protocol,
		Peers:    []PeerStatus{},
		Routes:   []RouteStatus{},
	}
	if r.cfg.Listen6.IsValid() {
		st.Listen6 = netip.AddrPortFrom(r.cfg.Listen6, uint16(r.cfg.Port))
	}
	for a, p := range r.peers {
		st.Peers = append(st.Peers, PeerStatus{Address: a, ASN: p.asn, State: stateName(p.state), Since: p.since, Failed: r.failed[a], BFD: sessions[a]})
	}
	slices.SortFunc(st.Peers, func(a, b PeerStatus) int { return a.Address.Compare(b.Address) })
	for p, hops := range r.installed {
		st.Routes = append(st.Routes, RouteStatus{Prefix: p, Nexthops: slices.Clone(hops), Error: r.fibErrs[p]})
	}
	for p, e := range r.fibErrs {
		if _, ok := r.installed[p]; !ok {
			st.Routes = append(st.Routes, RouteStatus{Prefix: p, Nexthops: []netip.Addr{}, Error: e})
		}
	}
	slices.SortFunc(st.Routes, func(a, b RouteStatus) int {
		if c := a.Prefix.Addr().Compare(b.Prefix.Addr()); c != 0 {
			return c
		}
		return a.Prefix.Bits() - b.Prefix.Bits()
	})
	return st
}

// statusHandler serves:
//
//	GET  /status             the Status as JSON
//	POST /peers/ADDR/failed  PeerFailed(ADDR): what a failure detector
//	                         would report; lets the lab and tests show
//	                         fast failover without BFD
func (r *Router) statusHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(r.Status())
	})
	mux.HandleFunc("POST /peers/{addr}/failed", func(w http.ResponseWriter, req *http.Request) {
		a, err := netip.ParseAddr(req.PathValue("addr"))
		if err != nil {
			http.Error(w, fmt.Sprintf("peer %q: not an IP address", req.PathValue("addr")), http.StatusBadRequest)
			return
		}
		if err := r.PeerFailed(a); err != nil {
			// The FIB is already clean; only the reset failed (no
			// such session, say).
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

// listenUnix listens on a unix socket at path, replacing a stale socket
// file of a crashed router but never a live one.
func listenUnix(path string) (net.Listener, error) {
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("status socket %s: another router is serving it; stop that one first", path)
	}
	removeSocket(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("status socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("status socket: %w", err)
	}
	return ln, nil
}

// removeSocket removes path if it is a socket, and nothing else.
func removeSocket(path string) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(path)
	}
}

// ReadStatus asks the router serving the unix socket at path for its
// status.
func ReadStatus(ctx context.Context, path string) (Status, error) {
	var st Status
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://router/status", nil)
	if err != nil {
		return st, err
	}
	resp, err := socketClient(path).Do(req)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return st, fmt.Errorf("router status %s: no router is running there: %w", path, err)
		}
		return st, fmt.Errorf("router status %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return st, fmt.Errorf("router status %s: %s: %s", path, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("router status %s: %w", path, err)
	}
	return st, nil
}

func socketClient(path string) *http.Client {
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}},
	}
}
