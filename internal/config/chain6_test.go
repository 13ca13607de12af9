package config

import (
	"strings"
	"testing"
)

// A daisy-chained service may have an IPv6 VIP; its backends are IPv4,
// as the hint names them, and an IPv6 one is refused at its line.
func TestDaisyChainFamilies(t *testing.T) {
	const chained = `node:
  interface: eth0
  address: 10.0.1.2
  address6: "fd00:1::2"
services:
  - name: web6
    vip: "2001:db8:99::1"
    port: 80
    forwarding: dsr-gue
    flows: daisy-chain
    backends:
      - address: 10.0.3.2
      - address: 10.0.3.3
`
	cfg, err := Parse(file, []byte(chained))
	if err != nil {
		t.Fatalf("a daisy-chained IPv6 VIP with IPv4 backends: %v", err)
	}
	if s := cfg.Services[0]; s.Flows != FlowsDaisyChain || len(s.Backends) != 2 {
		t.Errorf("service %+v, want daisy-chained with two backends", s)
	}
	for _, vip := range []string{`"2001:db8:99::1"`, "10.99.0.1"} {
		doc := strings.Replace(strings.Replace(chained, "address: 10.0.3.3", `address: "fd00:3::2"`, 1), `"2001:db8:99::1"`, vip, 1)
		_, err = Parse(file, []byte(doc))
		want := "agent.yaml:13: services[0].backends[1].address: fd00:3::2 is IPv6, and flows: daisy-chain reaches IPv4 backends only"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("VIP %s, an IPv6 backend: %v, want %q", vip, err, want)
		}
	}
}
