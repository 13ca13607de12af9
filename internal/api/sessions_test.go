package api

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseSessionQuery(t *testing.T) {
	vip := netip.MustParseAddr("10.99.0.1")
	for in, want := range map[string]SessionQuery{
		"10.99.0.1":        {VIP: vip, Max: DefaultSessionSample},
		"10.99.0.1:443":    {VIP: vip, Port: 443, Max: DefaultSessionSample},
		"10.99.0.1:53/udp": {VIP: vip, Port: 53, Protocol: "udp", Max: DefaultSessionSample},
		// IPv6 VIPs have NAT sessions too.
		"2001:db8::1":          {VIP: netip.MustParseAddr("2001:db8::1"), Max: DefaultSessionSample},
		"[2001:db8::1]:443":    {VIP: netip.MustParseAddr("2001:db8::1"), Port: 443, Max: DefaultSessionSample},
		"[2001:db8::1]:53/udp": {VIP: netip.MustParseAddr("2001:db8::1"), Port: 53, Protocol: "udp", Max: DefaultSessionSample},
	} {
		got, err := ParseSessionQuery(in)
		if err != nil || got != want || got.String() != in {
			t.Errorf("%q: %+v (%q), %v; want %+v", in, got, got.String(), err, want)
		}
	}
	for in, want := range map[string]string{
		"10.99.0.x":         `"10.99.0.x" is not a VIP with an optional port; write VIP, VIP:PORT or VIP:PORT/PROTOCOL`,
		"10.99.0.1:0":       `"10.99.0.1:0" is not a VIP with an optional port`,
		"10.99.0.1:70000":   `"10.99.0.1:70000" is not a VIP with an optional port`,
		"10.99.0.1:53/icmp": `protocol "icmp" is not tcp or udp`,
		"10.99.0.1/tcp":     `names a protocol without a port`,
		"::ffff:10.99.0.1":  `::ffff:10.99.0.1 is no VIP (a zone, or IPv4-mapped)`,
		"":                  `"" is not a VIP with an optional port`,
	} {
		if _, err := ParseSessionQuery(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error containing %q", in, err, want)
		}
	}
}

// The sessions of a query travel through the socket unchanged; a query
// the agent cannot read is a 400 that says why, one that names no NAT
// service the agent's own message.
func TestSessionsRoundTrip(t *testing.T) {
	want := &Sessions{Services: []ServiceSessions{{Name: "app", VIP: netip.MustParseAddr("10.99.0.3"), Port: 443, Protocol: "tcp", Forwarding: "nat", More: true,
		Sessions: []Session{{Client: netip.MustParseAddrPort("192.0.2.1:40000"), Backend: netip.MustParseAddrPort("10.0.4.2:8443"),
			Source: netip.MustParseAddrPort("10.0.1.2:20001"), State: "established", Replied: true, IdleSeconds: 1.5}}}}}
	var asked []SessionQuery
	socket := filepath.Join(t.TempDir(), "xlb.sock")
	ln, err := Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := Serve(ln, "", func() (*Status, error) { return sampleStatus(), nil }, quiet, WithSessions(func(q SessionQuery) (*Sessions, error) {
		asked = append(asked, q)
		if q.VIP != netip.MustParseAddr("10.99.0.3") {
			return nil, fmt.Errorf("%w at %s: it has no service", ErrNoNATService, q)
		}
		return want, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	q := SessionQuery{VIP: netip.MustParseAddr("10.99.0.3"), Port: 443, Protocol: "tcp", Max: 7}
	got, err := GetSessions(socket, q)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) || len(asked) != 1 || asked[0] != q {
		t.Errorf("got %+v for the query %+v, want %+v for %+v", got, asked, want, q)
	}
	if _, err := GetSessions(socket, SessionQuery{VIP: netip.MustParseAddr("10.99.0.9"), Max: 1}); !strings.Contains(err.Error(), "no service with forwarding nat or dnat at 10.99.0.9: it has no service") {
		t.Errorf("no NAT service: %v", err)
	}
	for query, want := range map[string]string{
		"vip=10.99.0.x":                       `vip "10.99.0.x" is not an IPv4 or IPv6 address`,
		"vip=10.99.0.3&port=0":                `port "0" is not a port (1..65535)`,
		"vip=10.99.0.3&protocol=tcp":          `protocol "tcp" without a port`,
		"vip=10.99.0.3&port=80&protocol=sctp": `protocol "sctp" is not tcp or udp`,
		"vip=10.99.0.3&max=0":                 `max "0" is not a whole number in 1..10000`,
		"vip=10.99.0.3&max=10001":             `max "10001" is not a whole number in 1..10000`,
	} {
		var out Sessions
		code, err := call(socket, "GET", "/v1/sessions?"+query, "", nil, 0, &out)
		if code != 400 || err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %d %v, want 400 with %q", query, code, err, want)
		}
	}
	if len(asked) != 2 {
		t.Errorf("the agent was asked %d times, want 2 (bad queries stop at the API)", len(asked))
	}
}

// An agent without the sessions endpoint is told apart from one that
// has no such service.
func TestSessionsOldAgent(t *testing.T) {
	_, socket := serve(t, "", func() (*Status, error) { return sampleStatus(), nil })
	if _, err := GetSessions(socket, SessionQuery{VIP: netip.MustParseAddr("10.99.0.3"), Max: 1}); !errors.Is(err, ErrNoSessions) {
		t.Errorf("err = %v, want ErrNoSessions", err)
	}
}
