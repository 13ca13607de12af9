package config

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

// natService is minimal with a second service in forwarding MODE whose
// backends listen on their own port (line 12: forwarding, line 14: the
// first backend's address).
const natService = minimal + `  - name: app
    vip: 10.99.0.3
    port: 443
    forwarding: %s
    backends:
      - address: 10.0.4.2
        port: 8443
`

// Without a nat section every default applies; nat and dnat take each
// backend's own port, and a configuration with them renders back to
// itself.
func TestNATDefaults(t *testing.T) {
	for _, mode := range []Forwarding{NAT, DNAT} {
		cfg, err := Parse(file, fmt.Appendf(nil, natService, mode))
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		if !reflect.DeepEqual(cfg.NAT, DefaultNAT()) {
			t.Errorf("%s: nat = %+v, want the defaults %+v", mode, cfg.NAT, DefaultNAT())
		}
		want := NATConfig{Ports: PortRange{20000, 32767}, Sessions: 262144,
			Timeouts: NATTimeouts{TCPSyn: 5 * time.Second, TCPEstablished: time.Hour, TCPClosing: 10 * time.Second, UDP: time.Minute, TCPTimeWait: time.Minute}}
		if DefaultNAT() != want {
			t.Errorf("DefaultNAT() = %+v, want the documented %+v", DefaultNAT(), want)
		}
		s := cfg.Services[1]
		if s.Forwarding != mode || s.TranslatePorts || s.Backends[0].Port != 8443 || s.Backends[0].HealthCheck.Port != 0 {
			t.Errorf("%s: service %+v, want forwarding %s to backend port 8443 without translatePorts", mode, s, mode)
		}
		if err := roundTrip(cfg); err != nil {
			t.Errorf("%s: %v", mode, err)
		}
		if err := invariants(cfg); err != nil {
			t.Errorf("%s: %v", mode, err)
		}
	}
	// The DSR services of the same file still refuse another port.
	wantError(t, strings.Replace(fmt.Sprintf(natService, NAT), "      - address: 10.0.3.2\n", "      - address: 10.0.3.2\n        port: 8080\n", 1),
		9, "services[0].backends[0].port", "or set forwarding: nat (or dnat), which rewrites to the backend's port")
}

// nat and dnat take an IPv6 VIP with IPv6 backends, and refuse a backend
// of the other family than the VIP's.
func TestNATIPv6(t *testing.T) {
	const v6 = "node: {interface: eth0, address6: \"fd00::2\"}\nservices:\n  - {name: a, vip: \"2001:db8:99::1\", port: 80, forwarding: %s, backends: [{address: \"fd00::3:2\", port: 8080}]}\n"
	for _, mode := range []Forwarding{NAT, DNAT} {
		cfg, err := Parse(file, fmt.Appendf(nil, v6, mode))
		if err != nil {
			t.Fatalf("%s over IPv6: %v", mode, err)
		}
		if s := cfg.Services[0]; s.Forwarding != mode || s.Backends[0].Address != netip.MustParseAddr("fd00::3:2") || s.Backends[0].Port != 8080 {
			t.Errorf("%s over IPv6: service %+v", mode, s)
		}
		if err := roundTrip(cfg); err != nil {
			t.Errorf("%s: %v", mode, err)
		}
		wantError(t, strings.Replace(fmt.Sprintf(v6, mode), `"fd00::3:2"`, "10.0.3.2", 1), 3, "services[0].backends[0].address",
			fmt.Sprintf("10.0.3.2 is IPv4 and the VIP 2001:db8:99::1 is IPv6: forwarding %s rewrites addresses within one family (no NAT64); give the service backends of its VIP's family, or use forwarding dsr-ipip or dsr-gue", mode))
		wantError(t, strings.Replace(fmt.Sprintf(v6, mode), `"2001:db8:99::1"`, "10.99.0.1", 1), 3, "services[0].backends[0].address",
			fmt.Sprintf("fd00::3:2 is IPv6 and the VIP 10.99.0.1 is IPv4: forwarding %s rewrites addresses within one family (no NAT64)", mode))
	}
}

// A nat section sets each field; the rest keep their defaults.
func TestNATSection(t *testing.T) {
	in := "node:\n  interface: eth0\n  address: 10.0.1.2\nnat:\n  address: 10.0.1.3\n  ports: 40000-49999\n  sessions: 4096\n" +
		"  timeouts: {tcpEstablished: 2h, udp: 30s}\n" + strings.TrimPrefix(fmt.Sprintf(natService, NAT), "node:\n  interface: eth0\n")
	cfg, err := Parse(file, []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := NATConfig{Address: netip.MustParseAddr("10.0.1.3"), Ports: PortRange{40000, 49999}, Sessions: 4096,
		Timeouts: NATTimeouts{TCPSyn: DefaultNATTCPSyn, TCPEstablished: 2 * time.Hour, TCPClosing: DefaultNATTCPClosing, UDP: 30 * time.Second, TCPTimeWait: DefaultNATTCPTimeWait}}
	if cfg.NAT != want {
		t.Errorf("nat = %+v, want %+v", cfg.NAT, want)
	}
	if err := roundTrip(cfg); err != nil {
		t.Error(err)
	}
	// An empty section, and address "", are the defaults.
	cfg, err = Parse(file, []byte(minimalWith("services:", "nat:\n  address: \"\"\nservices:")))
	if err != nil || cfg.NAT != DefaultNAT() {
		t.Errorf("nat with address \"\": %+v (%v), want the defaults", cfg, err)
	}
}

func TestNATErrors(t *testing.T) {
	withNAT := func(section string) string {
		return minimalWith("services:", "nat:\n"+section+"services:")
	}
	tests := []struct {
		name, yaml string
		line       int
		path, want string
	}{
		{"nat with flows stateful", strings.Replace(fmt.Sprintf(natService, NAT), "    forwarding: nat\n", "    forwarding: nat\n    flows: stateful\n", 1), 13, "services[1].flows",
			"forwarding nat holds a session per connection on the node, which is stateful by nature; remove flows"},
		{"dnat with daisy chaining", strings.Replace(fmt.Sprintf(natService, DNAT), "    forwarding: dnat\n", "    forwarding: dnat\n    flows: daisy-chain\n", 1), 13, "services[1].flows",
			"forwarding dnat holds a session per connection on the node, which is stateful by nature; remove flows, or set forwarding: dsr-gue"},
		{"nat with translatePorts", strings.Replace(fmt.Sprintf(natService, NAT), "    forwarding: nat\n", "    forwarding: nat\n    translatePorts: true\n", 1), 13, "services[1].translatePorts",
			"forwarding nat rewrites packets to each backend's own address and port on this node; translatePorts is for DSR backends"},
		{"unknown mode", fmt.Sprintf(natService, "snat"), 12, "services[1].forwarding", `"snat" is not a forwarding mode; use dsr-ipip, dsr-gue, nat or dnat`},
		{"section is a list", withNAT("  - 1\n"), 4, "nat", "expected a mapping such as {address: 10.0.1.2, ports: 20000-32767, sessions: 262144}"},
		{"unknown field", withNAT("  port: 20000-32767\n"), 4, "nat.port", `unknown field (did you mean "ports"?)`},
		{"bad address", withNAT("  address: 10.0.1\n"), 4, "nat.address", `"10.0.1" is not an IPv4 address`},
		{"IPv6 address", withNAT("  address: \"fd00::2\"\n"), 4, "nat.address", `"fd00::2" is an IPv6 address; nat.address is the source of IPv4 full NAT, an IPv4 address of this node; IPv6 services' full NAT comes from node.address6`},
		{"loopback address", withNAT("  address: 127.0.0.1\n"), 4, "nat.address", "loopback"},
		{"one port", withNAT("  ports: 20000\n"), 4, "nat.ports", `20000 is not a port range; write the first and the last port joined by "-", e.g. 20000-32767`},
		{"range reversed", withNAT("  ports: 32767-20000\n"), 4, "nat.ports", "32767-20000 starts above its end; write the lower port first: 20000-32767"},
		{"well-known ports", withNAT("  ports: 80-20000\n"), 4, "nat.ports", "80-20000 starts below port 1024"},
		{"too few ports", withNAT("  ports: 20000-20999\n"), 4, "nat.ports", "20000-20999 holds 1000 ports; a range needs at least 1024"},
		{"beyond 65535", withNAT("  ports: 60000-70000\n"), 4, "nat.ports", "60000-70000 goes beyond port 65535"},
		{"sessions too few", withNAT("  sessions: 1000\n"), 4, "nat.sessions", "1000 is out of range 1024..16777216"},
		{"sessions too many", withNAT("  sessions: 16777217\n"), 4, "nat.sessions", "16777217 is out of range 1024..16777216"},
		{"timeouts not a mapping", withNAT("  timeouts: 5s\n"), 4, "nat.timeouts", "expected a mapping such as {tcpSyn: 5s, tcpEstablished: 1h, tcpClosing: 10s, udp: 60s, tcpTimeWait: 60s}"},
		{"timeout too short", withNAT("  timeouts:\n    tcpSyn: 500ms\n"), 5, "nat.timeouts.tcpSyn", "500ms is out of range 1s..24h"},
		{"timeout too long", withNAT("  timeouts:\n    udp: 25h\n"), 5, "nat.timeouts.udp", "25h is out of range 1s..24h"},
		{"tcpTimeWait too long", withNAT("  timeouts:\n    tcpTimeWait: 48h\n"), 5, "nat.timeouts.tcpTimeWait", "48h is out of range 1s..24h: give the backends' TIME_WAIT"},
		{"timeout without unit", withNAT("  timeouts:\n    tcpClosing: 10\n"), 5, "nat.timeouts.tcpClosing", "expected a duration with a unit"},
		{"unknown timeout", withNAT("  timeouts:\n    tcp: 1h\n"), 5, "nat.timeouts.tcp", "unknown field; valid fields here: tcpSyn, tcpEstablished, tcpClosing, udp, tcpTimeWait"},
		{"address is a VIP", withNAT("  address: 10.99.0.1\n"), 4, "nat.address", `10.99.0.1 is the VIP of service "web" (services[0], line 7); nat.address is this node's own address`},
		{"backend at the address", withNAT("  address: 10.0.3.2\n"), 10, "services[0].backends[0].address", "10.0.3.2 is nat.address, the address this node's NAT sessions come from"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { wantError(t, tc.yaml, tc.line, tc.path, tc.want) })
	}
}

// natHost is testHost whose own connections take ports 32768-60999, as
// Linux's default net.ipv4.ip_local_port_range says.
func natHost(lo, hi uint16) *Host {
	h := *testHost
	h.LocalPorts = PortRange{lo, hi}
	return &h
}

// Full NAT's source ports must stay clear of the host's own: the check
// needs the host, reports at nat.ports when the file writes it and at
// each nat service otherwise, and leaves dnat and DSR alone.
func TestNATPortsOnHost(t *testing.T) {
	withPorts := minimalWith("services:", "nat:\n  ports: 30000-40000\nservices:")
	const why = "overlap this host's net.ipv4.ip_local_port_range 32768-60999, the source ports of the node's own connections (health checks included)"

	if _, err := ParseOn(file, []byte(withPorts), natHost(32768, 60999)); err == nil {
		t.Error("nat.ports overlapping the host's range passed")
	}
	wantErrorOn(t, natHost(32768, 60999), withPorts, 4, "nat.ports", "30000-40000 "+why)
	wantErrorOn(t, natHost(1024, 65535), fmt.Sprintf(natService, NAT), 12, "services[1].forwarding",
		"forwarding nat takes source ports from nat.ports 20000-32767, which overlap this host's net.ipv4.ip_local_port_range 1024-65535")

	for _, tc := range []struct {
		name string
		host *Host
		in   string
	}{
		{"the file alone", nil, withPorts},
		{"host range unknown", natHost(0, 0), withPorts},
		{"default ports below the default range", natHost(32768, 60999), fmt.Sprintf(natService, NAT)},
		{"dnat allocates no ports", natHost(1024, 65535), fmt.Sprintf(natService, DNAT)},
		{"no nat service, ports defaulted", natHost(1024, 65535), minimal},
	} {
		if _, err := ParseOn(file, []byte(tc.in), tc.host); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}

	// Built in code (Kubernetes), the error names the service, so that
	// the source leaves that service out and keeps the rest.
	cfg, err := Parse(file, fmt.Appendf(nil, natService, NAT))
	if err != nil {
		t.Fatal(err)
	}
	cfg.NAT.Ports = PortRange{30000, 40000}
	env := Env{File: "kubernetes", Host: natHost(32768, 60999)}
	_, err = ValidateConfig(cfg, env)
	if err == nil || !strings.HasPrefix(err.Error(), "kubernetes: services[1].forwarding: forwarding nat takes source ports from nat.ports 30000-40000, which "+why) {
		t.Errorf("built in code: %v", err)
	}
	var v Validator
	if _, err := v.Validate(cfg, env); err == nil {
		t.Error("Validator accepted nat.ports overlapping the host's range")
	}
	// Another range of the same host's is another host to the Validator.
	cfg.NAT.Ports = PortRange{20000, 32767}
	if _, err := v.Validate(cfg, env); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Validate(cfg, Env{File: "kubernetes", Host: natHost(1024, 65535)}); err == nil {
		t.Error("Validator reused its checks for a host whose range changed")
	}
}

// A configuration built in code may leave the nat section zero, or some
// of its fields: they take their defaults.
func TestNATZeroInCode(t *testing.T) {
	cfg, err := Parse(file, []byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	cfg.NAT = NATConfig{}
	out, err := ValidateConfig(cfg, Env{File: "code"})
	if err != nil || out.NAT != DefaultNAT() {
		t.Fatalf("zero nat: %+v (%v), want the defaults", out.NAT, err)
	}
	cfg.NAT = NATConfig{Sessions: 2048}
	out, err = ValidateConfig(cfg, Env{File: "code"})
	want := DefaultNAT()
	want.Sessions = 2048
	if err != nil || out.NAT != want {
		t.Fatalf("nat with sessions alone: %+v (%v), want %+v", out.NAT, err, want)
	}
}

func TestPortRange(t *testing.T) {
	r := PortRange{20000, 32767}
	if r.String() != "20000-32767" || r.Len() != 12768 {
		t.Errorf("%v: %q, %d ports", r, r.String(), r.Len())
	}
	for _, tc := range []struct {
		a, b PortRange
		want bool
	}{
		{r, PortRange{32768, 60999}, false},
		{r, PortRange{32767, 60999}, true},
		{r, PortRange{1024, 20000}, true},
		{r, PortRange{}, false},
		{PortRange{}, PortRange{}, false},
	} {
		if got := tc.a.Overlaps(tc.b); got != tc.want || tc.b.Overlaps(tc.a) != tc.want {
			t.Errorf("%v overlaps %v: %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
	if got, why := ParsePortRange(" 1024 - 2047 "); why != "" || got != (PortRange{1024, 2047}) {
		t.Errorf("1024 - 2047: %v, %q", got, why)
	}
}
