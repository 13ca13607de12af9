package config

import (
	"net/netip"
	"strings"
	"testing"
)

// A daisy-chained service may have a VIP and backends of either family,
// mixed too: each slot's hint names owners of its backend's family. Pods
// (translatePorts: their node translates and chains) may be IPv6 too:
// their node chains IPv6 pods as it chains IPv4 ones.
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
	for _, vip := range []string{`"2001:db8:99::1"`, "10.99.0.1"} {
		for _, backends := range [][2]string{{"10.0.3.2", "10.0.3.3"}, {"10.0.3.2", `"fd00:3::2"`}, {`"fd00:3::3"`, `"fd00:3::2"`}} {
			doc := strings.Replace(chained, `"2001:db8:99::1"`, vip, 1)
			doc = strings.Replace(doc, "address: 10.0.3.2", "address: "+backends[0], 1)
			doc = strings.Replace(doc, "address: 10.0.3.3", "address: "+backends[1], 1)
			cfg, err := Parse(file, []byte(doc))
			if err != nil {
				t.Errorf("VIP %s, backends %v: %v", vip, backends, err)
				continue
			}
			s := cfg.Services[0]
			want := netip.MustParseAddr(strings.Trim(backends[1], `"`))
			if s.Flows != FlowsDaisyChain || len(s.Backends) != 2 || s.Backends[1].Address != want {
				t.Errorf("VIP %s: service %+v, want daisy-chained with backends %v", vip, s, backends)
			}
		}
	}
	// IPv6 pods behind the IPv6 VIP, with their history: accepted.
	doc := strings.Replace(strings.Replace(chained, "address: 10.0.3.3", `address: "fd00:244::3"`, 1), "address: 10.0.3.2", `address: "fd00:244::2"`, 1)
	doc = strings.Replace(doc, "    flows: daisy-chain\n", "    flows: daisy-chain\n    translatePorts: true\n", 1)
	doc += `    history:
      - until: 2026-11-25T10:00:00Z
        backends:
          - address: "fd00:244::4"
`
	cfg, err := Parse(file, []byte(doc))
	if err != nil {
		t.Fatalf("IPv6 pods: %v", err)
	}
	s := cfg.Services[0]
	if !s.TranslatePorts || s.Flows != FlowsDaisyChain || len(s.Backends) != 2 || !s.Backends[0].Address.Is6() || !s.Backends[1].Address.Is6() ||
		len(s.History) != 1 || s.History[0].Backends[0].Address != netip.MustParseAddr("fd00:244::4") {
		t.Errorf("IPv6 pods: service %+v, want daisy-chained IPv6 pods with translatePorts and their history", s)
	}
}

// A backend of another family than the VIP's, with translatePorts: its
// host would have to rewrite an IPv4 packet to an IPv6 pod (or the
// reverse), which no host does; refused at its line, with or without
// daisy chaining. Without translatePorts the same backends are tunnelled
// between families, and accepted.
func TestTranslatePortsFamilies(t *testing.T) {
	const doc = `node:
  interface: eth0
  address: 10.0.1.2
  address6: "fd00:1::2"
services:
  - name: web
    vip: VIP
    port: 80
    forwarding: dsr-gue
    translatePorts: true
    backends:
      - address: 10.0.3.2
      - address: "fd00:3::2"
`
	for _, c := range []struct {
		vip, flows, bad, line string
	}{
		{"10.99.0.1", "", "fd00:3::2", "13"},
		{"10.99.0.1", "    flows: daisy-chain\n", "fd00:3::2", "14"},
		{`"2001:db8:99::1"`, "", "10.0.3.2", "12"},
	} {
		d := strings.Replace(doc, "VIP", c.vip, 1)
		d = strings.Replace(d, "    translatePorts: true\n", "    translatePorts: true\n"+c.flows, 1)
		_, err := Parse(file, []byte(d))
		if err == nil || !strings.Contains(err.Error(), "agent.yaml:"+c.line+": services[0].backends[") ||
			!strings.Contains(err.Error(), c.bad+" is IPv") || !strings.Contains(err.Error(), "with translatePorts the backend's host rewrites") {
			t.Errorf("VIP %s %q: %v, want %s refused at line %s", c.vip, c.flows, err, c.bad, c.line)
		}
		if _, err := Parse(file, []byte(strings.Replace(d, "    translatePorts: true\n", "", 1))); err != nil {
			t.Errorf("VIP %s %q without translatePorts: %v", c.vip, c.flows, err)
		}
	}
}
