package agent

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
)

func parse(t *testing.T, yaml string) *config.Config {
	t.Helper()
	c, err := config.Parse("x.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestDiffConfigs: what a reload would change, in the file's words.
func TestDiffConfigs(t *testing.T) {
	old := parse(t, `node: {interface: eth0, address: 10.0.1.2}
dataplane: {tableSize: 251}
bgp: {asn: 65001, peers: [{address: 10.0.1.1, asn: 65000}, {address: 10.0.1.9, asn: 65000, password: s3cret-old}]}
services:
  - {name: web, vip: 10.99.0.1, port: 80, backends: [{address: 10.0.3.2}, {address: 10.0.3.3}, {address: 10.0.3.4}]}
  - {name: dns, vip: 10.99.0.2, port: 53, protocol: udp, backends: [{address: 10.0.3.2}]}
  - {name: same, vip: 10.99.0.3, port: 80, backends: [{address: 10.0.3.2}]}
`)
	cfg := parse(t, `node: {interface: eth0, address: 10.0.1.3}
dataplane: {tableSize: 251}
bgp: {asn: 65001, holdTime: 30s, peers: [{address: 10.0.1.9, asn: 65000, password: s3cret-new}, {address: 10.0.1.5, asn: 65000}]}
services:
  - name: web
    vip: 10.99.0.1
    port: 80
    forwarding: dsr-gue
    healthCheck: {type: tcp, interval: 2s}
    backends: [{address: 10.0.3.2, weight: 2}, {address: 10.0.3.4}, {address: 10.0.3.9}]
  - {name: same, vip: 10.99.0.3, port: 80, backends: [{address: 10.0.3.2}]}
  - {name: extra, vip: 10.99.0.9, port: 80, backends: [{address: 10.0.3.2}]}
`)
	got := diffConfigs(old, cfg)
	want := &api.Check{
		Added:   []string{"extra (10.99.0.9:80/tcp, 1 backends)"},
		Removed: []string{"dns (10.99.0.2:53/udp)"},
		Changed: []api.ServiceChange{{Name: "web", Changes: []string{
			"forwarding: dsr-ipip → dsr-gue",
			"every backend's healthCheck.type: none → tcp",
			"every backend's healthCheck.port: 0 → 80",
			"every backend's healthCheck.interval: 0s → 2s",
			"every backend's healthCheck.timeout: 0s → 1s",
			"every backend's healthCheck.rise: 0 → 2",
			"every backend's healthCheck.fall: 0 → 2",
			"backend 10.0.3.2:80 weight: 1 → 2",
			"backend 10.0.3.9:80 added (weight 1)",
			"backend 10.0.3.3:80 removed",
		}}},
		BGP: []string{
			"bgp.routerID: 10.0.1.2 → 10.0.1.3", // node.address, by default
			"bgp.holdTime: 9s → 30s",
			"bgp.keepalive: 3s → 10s",
			"the BGP speaker starts anew for the new asn, routerID or listenPort: every session goes down and comes back",
			"peer 10.0.1.9 password: changed",
			"peer 10.0.1.9 holdTime: 9s → 30s",
			"peer 10.0.1.9 keepalive: 3s → 10s",
			"peer 10.0.1.5 added (AS 65000)",
			"peer 10.0.1.1 removed",
		},
		Restart: []string{"node.address: 10.0.1.2 → 10.0.1.3"},
	}
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"added", got.Added, want.Added}, {"removed", got.Removed, want.Removed},
		{"changed", got.Changed, want.Changed}, {"bgp", got.BGP, want.BGP}, {"restart", got.Restart, want.Restart},
	} {
		if g, w := strings.Join(strings.Fields(strings.ReplaceAll(fmtAny(c.got), "\n", " ")), " "), strings.Join(strings.Fields(fmtAny(c.want)), " "); g != w {
			t.Errorf("%s:\n got %s\nwant %s", c.name, g, w)
		}
	}
	if strings.Contains(fmtAny(got), "s3cret") {
		t.Errorf("a password shows: %s", fmtAny(got))
	}

	// The bgp section removed, and unchanged.
	noBGP := *cfg
	noBGP.BGP = nil
	if got := diffConfigs(cfg, &noBGP); !slices.Equal(got.BGP, []string{"bgp section removed: every route is withdrawn and nothing is announced"}) {
		t.Errorf("bgp removed: %q", got.BGP)
	}
	if got := diffConfigs(cfg, cfg); !got.Unchanged() {
		t.Errorf("the same configuration: %+v", got)
	}
}

func fmtAny(v any) string { return fmt.Sprintf("%+v", v) }
