package config

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

const daisy = `node:
  interface: eth0
services:
  - name: web
    vip: 10.99.0.1
    port: 80
    forwarding: dsr-gue
    flows: daisy-chain
    history:
      - until: 2026-11-25T10:05:00Z
        backends: [{address: 10.0.3.2}, {address: 10.0.3.3, weight: 2}]
      - until: 2026-11-25T10:00:00+01:00
        backends: [{address: 10.0.3.2}]
    backends:
      - address: 10.0.3.2
`

// A daisy-chained service's history comes out oldest first, in UTC-equal
// instants, and renders back to itself.
func TestFlowsAndHistory(t *testing.T) {
	cfg, err := Parse(file, []byte(daisy))
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Services[0]
	if s.Flows != FlowsDaisyChain || len(s.History) != 2 {
		t.Fatalf("flows %q, %d history entries; want daisy-chain, 2", s.Flows, len(s.History))
	}
	first, second := s.History[0], s.History[1]
	if !first.Until.Equal(time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)) || len(first.Backends) != 1 {
		t.Errorf("oldest entry %+v, want the one ending 09:00 UTC with one backend", first)
	}
	if !second.Until.Equal(time.Date(2026, 11, 25, 10, 5, 0, 0, time.UTC)) || len(second.Backends) != 2 ||
		second.Backends[1].Address != netip.MustParseAddr("10.0.3.3") || second.Backends[1].Weight != 2 ||
		second.Backends[0].Port != 80 {
		t.Errorf("newest entry %+v, want 10:05 UTC with 10.0.3.2:80 and 10.0.3.3:80 weight 2", second)
	}
	// The rendering is in UTC; compare what it parses to with itself.
	for i := range s.History {
		cfg.Services[0].History[i].Until = s.History[i].Until.UTC()
	}
	if err := roundTrip(cfg); err != nil {
		t.Error(err)
	}

	for flows, want := range map[string]Flows{"stateless": "", "stateful": FlowsStateful} {
		c, err := Parse(file, []byte(minimalWith("port: 80", "port: 80\n    flows: "+flows)))
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Services[0].Flows; got != want {
			t.Errorf("flows: %s parsed to %q, want %q", flows, got, want)
		}
	}
}

func TestFlowsErrors(t *testing.T) {
	tooMany := "    history:\n"
	for i := range MaxHistory + 1 {
		tooMany += "      - {until: 2026-11-25T10:0" + string(rune('0'+i)) + ":00Z, backends: [{address: 10.0.3.2}]}\n"
	}
	tests := []struct {
		name, yaml string
		line       int
		path, want string
	}{
		{"unknown mode", minimalWith("port: 80", "port: 80\n    flows: sticky"), 7, "services[0].flows", `"sticky" is not a flows mode; use stateless, daisy-chain or stateful`},
		{"daisy chain over IPIP", minimalWith("port: 80", "port: 80\n    flows: daisy-chain"), 7, "services[0].flows", "set forwarding: dsr-gue"},
		{"history without daisy chain", minimalWith("port: 80", "port: 80\n    history: []"), 7, "services[0].history", "set flows: daisy-chain"},
		{"bad time", strings.Replace(daisy, "2026-11-25T10:05:00Z", "yesterday", 1), 10, "services[0].history[0].until", `"yesterday" is not a time; write it as RFC 3339`},
		{"time before 1970", strings.Replace(daisy, "2026-11-25T10:05:00Z", "1969-01-01T00:00:00Z", 1), 10, "services[0].history[0].until", "outside 1970-2106"},
		{"same end twice", strings.Replace(daisy, "2026-11-25T10:00:00+01:00", "2026-11-25T10:05:00Z", 1), 12, "services[0].history[1].until", "history[0] ends at the same time"},
		{"missing until", strings.Replace(daisy, "until: 2026-11-25T10:05:00Z", "backends: []\n        ", 1), 10, "services[0].history[0].until", "required"},
		{"bad backend", strings.Replace(daisy, "{address: 10.0.3.3, weight: 2}", "{address: 10.0.3.300}", 1), 11, "services[0].history[0].backends[1].address", ""},
		{"too many", strings.Replace(daisy, daisy[strings.Index(daisy, "    history:"):strings.Index(daisy, "    backends:\n      - address: 10.0.3.2\n")], tooMany, 1), 9, "services[0].history", "at most 8 are kept"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { wantError(t, tc.yaml, tc.line, tc.path, tc.want) })
	}
}

// dataplane.conntrackSize sizes the stateful services' flow table; left
// out, the data plane's default applies.
func TestConntrackSize(t *testing.T) {
	cfg, err := Parse(file, []byte(minimalWith("interface: eth0", "interface: eth0\ndataplane:\n  conntrackSize: 4096")))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Dataplane.ConntrackSize != 4096 {
		t.Errorf("conntrackSize %d, want 4096", cfg.Dataplane.ConntrackSize)
	}
	if err := roundTrip(cfg); err != nil {
		t.Error(err)
	}
	if cfg, err := Parse(file, []byte(minimal)); err != nil || cfg.Dataplane.ConntrackSize != 0 {
		t.Errorf("without conntrackSize: %d (%v), want 0 (the default)", cfg.Dataplane.ConntrackSize, err)
	}
	wantError(t, minimalWith("interface: eth0", "interface: eth0\ndataplane:\n  conntrackSize: 1000"), 4, "dataplane.conntrackSize", "")
}

// services[].affinity: client-ip is kept, none is the zero value, and
// both render back to themselves; any other name is an error at its
// line that lists the names.
func TestAffinity(t *testing.T) {
	for name, want := range map[string]Affinity{"none": "", "client-ip": AffinityClientIP} {
		cfg, err := Parse(file, []byte(minimalWith("port: 80", "port: 80\n    affinity: "+name)))
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.Services[0].Affinity; got != want {
			t.Errorf("affinity: %s parsed to %q, want %q", name, got, want)
		}
		if got := cfg.Services[0].Affinity.Name(); got != name {
			t.Errorf("affinity: %s is named %q", name, got)
		}
		if err := roundTrip(cfg); err != nil {
			t.Error(err)
		}
	}
	if cfg, err := Parse(file, []byte(minimal)); err != nil || cfg.Services[0].Affinity != "" {
		t.Errorf("without affinity: %q (%v), want none", cfg.Services[0].Affinity, err)
	}
	// With every flows mode: affinity picks the slot, flows keeps it.
	for _, flows := range []string{"stateful", "daisy-chain"} {
		y := minimalWith("port: 80", "port: 80\n    forwarding: dsr-gue\n    flows: "+flows+"\n    affinity: client-ip")
		if cfg, err := Parse(file, []byte(y)); err != nil || cfg.Services[0].Affinity != AffinityClientIP {
			t.Errorf("flows: %s with affinity: client-ip: %v", flows, err)
		}
	}
	for _, tc := range []struct {
		name, value, want string
	}{
		{"Kubernetes' spelling", "ClientIP", `"ClientIP" is not an affinity; use none (connections spread) or client-ip (a client's connections go to one backend), lower case`},
		{"upper case", "CLIENT-IP", `"CLIENT-IP" is not an affinity`},
		{"a timeout", "client-ip/3h", `"client-ip/3h" is not an affinity`},
		{"empty", `""`, `"" is not an affinity`},
		{"a number", "1", "expected a string, got the integer 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, minimalWith("port: 80", "port: 80\n    affinity: "+tc.value), 7, "services[0].affinity", tc.want)
		})
	}
	wantError(t, minimalWith("port: 80", "port: 80\n    affinity: [client-ip]"), 7, "services[0].affinity", "expected a string")
}

// dataplane.pingVIPs: on unless written false; anything but a boolean is
// an error at its line.
func TestPingVIPs(t *testing.T) {
	for y, want := range map[string]bool{
		minimal: true,
		minimalWith("interface: eth0", "interface: eth0\ndataplane:\n  pingVIPs: false"): false,
		minimalWith("interface: eth0", "interface: eth0\ndataplane:\n  pingVIPs: true"):  true,
	} {
		cfg, err := Parse(file, []byte(y))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Dataplane.PingVIPs != want {
			t.Errorf("%q: pingVIPs %v, want %v", y, cfg.Dataplane.PingVIPs, want)
		}
		if err := roundTrip(cfg); err != nil {
			t.Error(err)
		}
	}
	wantError(t, minimalWith("interface: eth0", "interface: eth0\ndataplane:\n  pingVIPs: sometimes"), 4, "dataplane.pingVIPs", "")
	wantError(t, minimalWith("interface: eth0", "interface: eth0\ndataplane:\n  pingVIPs: 1"), 4, "dataplane.pingVIPs", "")
}
