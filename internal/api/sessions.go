package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// DefaultSessionSample is how many sessions of each service GET
// /v1/sessions lists when the request says nothing; MaxSessionSample
// is the most a request may ask for.
const (
	DefaultSessionSample = 50
	MaxSessionSample     = 10000
)

// SessionQuery names the NAT services whose sessions to list: the
// services of a VIP, or of one of its ports, or of one port and
// protocol.
type SessionQuery struct {
	VIP      netip.Addr
	Port     uint16 // 0: every port
	Protocol string // "tcp", "udp", or "": both
	Max      int    // sessions listed per service, 1..MaxSessionSample
}

// String writes q as ParseSessionQuery reads it.
func (q SessionQuery) String() string {
	s := q.VIP.String()
	if q.Port != 0 {
		s = netip.AddrPortFrom(q.VIP, q.Port).String()
	}
	if q.Protocol != "" {
		s += "/" + q.Protocol
	}
	return s
}

// ParseSessionQuery reads VIP[:PORT][/PROTOCOL], e.g. 10.99.0.1,
// 10.99.0.1:443, 10.99.0.1:53/udp, 2001:db8::1 or [2001:db8::1]:443;
// Max is DefaultSessionSample.
func ParseSessionQuery(s string) (SessionQuery, error) {
	q := SessionQuery{Max: DefaultSessionSample}
	const form = "write VIP, VIP:PORT or VIP:PORT/PROTOCOL, e.g. 10.99.0.1:443, 10.99.0.1:53/udp or [2001:db8::1]:443"
	rest, proto, hasProto := strings.Cut(s, "/")
	if hasProto {
		if proto != "tcp" && proto != "udp" {
			return q, fmt.Errorf("%q: protocol %q is not tcp or udp; %s", s, proto, form)
		}
		q.Protocol = proto
	}
	if a, err := netip.ParseAddr(rest); err == nil {
		q.VIP = a
	} else if ap, err := netip.ParseAddrPort(rest); err == nil && ap.Port() != 0 {
		q.VIP, q.Port = ap.Addr(), ap.Port()
	} else {
		return q, fmt.Errorf("%q is not a VIP with an optional port; %s", s, form)
	}
	if q.VIP.Zone() != "" || q.VIP.Is4In6() {
		return q, fmt.Errorf("%q: %s is no VIP (a zone, or IPv4-mapped); %s", s, q.VIP, form)
	}
	if hasProto && q.Port == 0 {
		return q, fmt.Errorf("%q names a protocol without a port; %s", s, form)
	}
	return q, nil
}

// SessionsFunc lists up to q.Max sessions of each NAT service that q
// names. An error wrapping ErrNoNATService means q names none.
type SessionsFunc func(q SessionQuery) (*Sessions, error)

// ErrNoNATService: a session query names no service with forwarding nat
// or dnat.
var ErrNoNATService = errors.New("no service with forwarding nat or dnat")

// Sessions is the body of GET /v1/sessions: a sample of the sessions of
// each NAT service the query names.
type Sessions struct {
	Services []ServiceSessions `json:"services"`
}

// ServiceSessions is a sample of one service's sessions.
type ServiceSessions struct {
	Name       string     `json:"name"`
	VIP        netip.Addr `json:"vip"`
	Port       uint16     `json:"port"`
	Protocol   string     `json:"protocol"`
	Forwarding string     `json:"forwarding"`
	Sessions   []Session  `json:"sessions"`
	// More: the service has more sessions than those listed.
	More bool `json:"more"`
}

// Session is one NAT session.
type Session struct {
	Client  netip.AddrPort `json:"client"`
	Backend netip.AddrPort `json:"backend"`
	// Source is what the backend sees as the source: the node's NAT
	// address and port (nat), or the client (dnat).
	Source netip.AddrPort `json:"source"`
	State  string         `json:"state"` // syn, established, closing or udp
	// Replied: the backend has answered.
	Replied bool `json:"replied"`
	// IdleSeconds is how long the session has seen no packet.
	IdleSeconds float64 `json:"idleSeconds"`
}

// Idle is IdleSeconds as a duration.
func (s Session) Idle() time.Duration { return time.Duration(s.IdleSeconds * float64(time.Second)) }

// WithSessions answers GET /v1/sessions (`xlb status --sessions`) with
// sessions.
func WithSessions(sessions SessionsFunc) Option {
	return func(mux *http.ServeMux) { mux.HandleFunc("GET /v1/sessions", sessionsHandler(sessions)) }
}

// sessionQuery reads the query of GET /v1/sessions: vip, and optionally
// port, protocol and max.
func sessionQuery(v url.Values) (SessionQuery, error) {
	q := SessionQuery{Max: DefaultSessionSample}
	vip := v.Get("vip")
	a, err := netip.ParseAddr(vip)
	if err != nil || a.Zone() != "" || a.Is4In6() {
		return q, fmt.Errorf("vip %q is not an IPv4 or IPv6 address; give the VIP whose sessions to list, e.g. ?vip=10.99.0.1&port=443", vip)
	}
	q.VIP = a
	if p := v.Get("port"); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return q, fmt.Errorf("port %q is not a port (1..65535); leave it out for every port of the VIP", p)
		}
		q.Port = uint16(n)
	}
	switch p := v.Get("protocol"); p {
	case "", "tcp", "udp":
		if p != "" && q.Port == 0 {
			return q, fmt.Errorf("protocol %q without a port; give port too, or leave protocol out", p)
		}
		q.Protocol = p
	default:
		return q, fmt.Errorf("protocol %q is not tcp or udp", p)
	}
	if m := v.Get("max"); m != "" {
		n, err := strconv.Atoi(m)
		if err != nil || n < 1 || n > MaxSessionSample {
			return q, fmt.Errorf("max %q is not a whole number in 1..%d", m, MaxSessionSample)
		}
		q.Max = n
	}
	return q, nil
}

func sessionsHandler(sessions SessionsFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fail := func(code int, err error) {
			w.WriteHeader(code)
			json.NewEncoder(w).Encode(errorBody{Error: err.Error()})
		}
		q, err := sessionQuery(r.URL.Query())
		if err != nil {
			fail(http.StatusBadRequest, err)
			return
		}
		out, err := sessions(q)
		switch {
		case errors.Is(err, ErrNoNATService):
			fail(http.StatusNotFound, err)
			return
		case err != nil:
			fail(http.StatusInternalServerError, err)
			return
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(out)
	}
}

// ErrNoSessions means that the agent on the socket does not list
// sessions (an agent from before NAT forwarding).
var ErrNoSessions = errors.New("the running agent cannot list sessions (it predates NAT forwarding)")

// GetSessions asks the agent listening on socket for the sessions q
// names.
func GetSessions(socket string, q SessionQuery) (*Sessions, error) {
	v := url.Values{"vip": {q.VIP.String()}}
	if q.Port != 0 {
		v.Set("port", strconv.Itoa(int(q.Port)))
	}
	if q.Protocol != "" {
		v.Set("protocol", q.Protocol)
	}
	if q.Max != 0 {
		v.Set("max", strconv.Itoa(q.Max))
	}
	var out Sessions
	code, err := call(socket, http.MethodGet, "/v1/sessions?"+v.Encode(), "", nil, 10*time.Second, &out)
	switch {
	case code == http.StatusNotFound && !strings.Contains(err.Error(), ErrNoNATService.Error()):
		// The route itself is missing: the mux's plain 404.
		return nil, fmt.Errorf("%w: %v", ErrNoSessions, err)
	case err != nil:
		return nil, err
	}
	return &out, nil
}
