package config

import (
	"net/netip"
	"strings"
	"testing"
)

// A daisy-chained service may have a VIP and backends of either family,
// mixed too: each slot's hint names owners of its backend's family. Only
// pods (translatePorts: their node translates and chains) must be IPv4,
// and an IPv6 one is refused at its line.
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
		doc := strings.Replace(strings.Replace(chained, "address: 10.0.3.3", `address: "fd00:3::2"`, 1), `"2001:db8:99::1"`, vip, 1)
		doc = strings.Replace(doc, "    flows: daisy-chain\n", "    flows: daisy-chain\n    translatePorts: true\n", 1)
		_, err := Parse(file, []byte(doc))
		want := "agent.yaml:14: services[0].backends[1].address: fd00:3::2 is IPv6, and with translatePorts (pods in xlb backend's Kubernetes mode) flows: daisy-chain reaches IPv4 backends only"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("VIP %s, an IPv6 pod: %v, want %q", vip, err, want)
		}
	}
}
