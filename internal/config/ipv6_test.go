package config

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

// dualStack is a configuration with IPv6 wherever an address goes.
const dualStack = `node:
  interface: eth0
  address: 10.0.1.2
  address6: "fd00:1::2"
bgp:
  asn: 65001
  peers:
    - {address: 10.0.1.1, asn: 65000}
    - {address: "fd00:1::1", asn: 65000}
policy:
  deny: [192.0.2.0/24]
services:
  - name: web6
    vip: "2001:db8:99::1"
    port: 80
    sourceRanges: ["2001:db8::/32"]
    backends:
      - address: "fd00:3::2"
      - address: 10.0.3.3
  - name: web4
    vip: 10.99.0.1
    port: 80
    forwarding: dsr-gue
    backends:
      - address: "fd00:3::2"
`

func TestParseIPv6(t *testing.T) {
	cfg, err := Parse(file, []byte(dualStack))
	if err != nil {
		t.Fatal(err)
	}
	ip, pfx := netip.MustParseAddr, netip.MustParsePrefix
	if want := (Node{Interface: "eth0", Address: ip("10.0.1.2"), Address6: ip("fd00:1::2")}); cfg.Node != want {
		t.Errorf("node %+v, want %+v", cfg.Node, want)
	}
	if got := []netip.Addr{cfg.BGP.Peers[0].Address, cfg.BGP.Peers[1].Address}; !reflect.DeepEqual(got, []netip.Addr{ip("10.0.1.1"), ip("fd00:1::1")}) {
		t.Errorf("peers %v", got)
	}
	if cfg.BGP.RouterID != ip("10.0.1.2") {
		t.Errorf("router ID %v, want node.address", cfg.BGP.RouterID)
	}
	if want := []netip.Prefix{pfx("192.0.2.0/24")}; !reflect.DeepEqual(cfg.Policy.Deny, want) {
		t.Errorf("deny %v, want %v", cfg.Policy.Deny, want)
	}
	s := cfg.Services[0]
	if s.VIP != ip("2001:db8:99::1") || !reflect.DeepEqual(s.SourceRanges, []netip.Prefix{pfx("2001:db8::/32")}) ||
		s.Backends[0].Address != ip("fd00:3::2") || s.Backends[1].Address != ip("10.0.3.3") {
		t.Errorf("IPv6 service %+v", s)
	}
	if b := cfg.Services[1].Backends[0]; b.Address != ip("fd00:3::2") || b.Port != 80 {
		t.Errorf("IPv6 backend of an IPv4 service %+v", b)
	}
	if err := roundTrip(cfg); err != nil {
		t.Error(err)
	}
	// The node's deny list takes prefixes of both families, each checked
	// as an IPv4 one is.
	cfg, err = Parse(file, []byte(strings.Replace(dualStack, "deny: [192.0.2.0/24]", `deny: [192.0.2.0/24, "2001:db8:bad::/48", "::/0"]`, 1)))
	if err != nil {
		t.Fatalf("IPv6 deny prefixes: %v", err)
	}
	if want := []netip.Prefix{pfx("192.0.2.0/24"), pfx("2001:db8:bad::/48"), pfx("::/0")}; !reflect.DeepEqual(cfg.Policy.Deny, want) {
		t.Errorf("deny %v, want %v", cfg.Policy.Deny, want)
	}
	if err := roundTrip(cfg); err != nil {
		t.Error(err)
	}
	for _, c := range []struct{ entry, want string }{
		{"2001:db8:bad::1/48", "policy.deny[1]: 2001:db8:bad::1/48 has host bits set: write its network, 2001:db8:bad::/48, or 2001:db8:bad::1/128 for the one address"},
		{"::ffff:192.0.2.0/120", "policy.deny[1]: ::ffff:192.0.2.0/120 is an IPv4-mapped IPv6 prefix; write it as IPv4: 192.0.2.0/24"},
		{"2001:db8::1", "policy.deny[1]: 2001:db8::1 is an address, not a CIDR: write 2001:db8::1/128 for it alone"},
	} {
		_, err = Parse(file, []byte(strings.Replace(dualStack, "deny: [192.0.2.0/24]", `deny: [192.0.2.0/24, "`+c.entry+`"]`, 1)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("deny entry %s: %v, want %q", c.entry, err, c.want)
		}
	}
}

// hostWith6 holds 10.0.1.2 and a global IPv6 on eth0 (after a link-local
// one, which never is the node's), and 2001:db8:7::7 on dummy0.
var hostWith6 = &Host{Interfaces: map[string][]netip.Addr{
	"eth0":   {netip.MustParseAddr("fe80::1"), netip.MustParseAddr("10.0.1.2"), netip.MustParseAddr("fd00:1::2"), netip.MustParseAddr("fd00:1::9")},
	"dummy0": {netip.MustParseAddr("2001:db8:7::7")},
}}

// hostOnly6 has no IPv4 address on eth0.
var hostOnly6 = &Host{Interfaces: map[string][]netip.Addr{
	"eth0": {netip.MustParseAddr("fe80::1"), netip.MustParseAddr("fd00:1::2")},
}}

func TestNodeAddress6(t *testing.T) {
	n := Node{Interface: "eth0"}
	if got := hostWith6.NodeAddress6(n); got != netip.MustParseAddr("fd00:1::2") {
		t.Errorf("from the host: %v, want the first global IPv6 address fd00:1::2", got)
	}
	if got := testHost.NodeAddress6(n); got.IsValid() {
		t.Errorf("a host with a link-local IPv6 address only: %v, want none", got)
	}
	n.Address6 = netip.MustParseAddr("2001:db8::5")
	if got := hostWith6.NodeAddress6(n); got != n.Address6 {
		t.Errorf("node.address6 set: %v, want it", got)
	}
}

// TestIPv6OnHost: what the node's addresses of each family decide.
func TestIPv6OnHost(t *testing.T) {
	svc := func(vip, backend string) string {
		return "services:\n  - name: web\n    vip: \"" + vip + "\"\n    port: 80\n    backends:\n      - address: \"" + backend + "\"\n"
	}
	noAddr := "node:\n  interface: eth0\n"
	tests := []struct {
		name string
		host *Host
		yaml string
		line int
		path string
		want string
	}{
		{"IPv6 backend, no node IPv6", testHost, noAddr + svc("10.99.0.1", "fd00:3::2"), 8, "services[0].backends[0].address",
			"fd00:3::2 is IPv6, and the node has no IPv6 address: node.address6 is not set and node.interface has no global IPv6 address"},
		{"IPv6 backend of an IPv6 VIP, no node IPv6", testHost, noAddr + svc("2001:db8:99::1", "fd00:3::2"), 8, "services[0].backends[0].address",
			"set node.address6, add a global IPv6 address to the interface, or use an IPv4 backend"},
		{"IPv4 backend, no node IPv4", hostOnly6, noAddr + "bgp: {asn: 65001, routerID: 10.0.1.2, peers: [{address: \"fd00:1::1\", asn: 65000}]}\n" + svc("2001:db8:99::1", "10.0.3.2"), 9, "services[0].backends[0].address",
			"10.0.3.2 is IPv4, and the node has no IPv4 address: node.address is not set and node.interface has none"},
		{"IPv4 VIP, no node IPv4", hostOnly6, noAddr + svc("10.99.0.1", "fd00:3::2"), 5, "services[0].vip",
			"10.99.0.1 is IPv4, and the node has no IPv4 address: node.address is not set and node.interface has none; an IPv4 VIP is announced with the node's IPv4 address as next hop"},
		{"router ID without IPv4", hostOnly6, noAddr + "bgp: {asn: 65001, peers: [{address: \"fd00:1::1\", asn: 65000}]}\n", 3, "bgp.routerID",
			"required here: node.interface eth0 has no IPv4 address and node.address is not set, so there is no default"},
		{"VIP is the interface's IPv6 address", hostWith6, noAddr + svc("fd00:1::2", "10.0.3.2"), 5, "services[0].vip",
			"fd00:1::2 is this node's own IPv6 address (the first global IPv6 address of node.interface eth0, which the agent takes when node.address6 is not set)"},
		{"VIP is another IPv6 address of the host", hostWith6, noAddr + svc("2001:db8:7::7", "10.0.3.2"), 5, "services[0].vip",
			"2001:db8:7::7 is configured on this host (interface dummy0)"},
		{"backend is the interface's IPv6 address", hostWith6, noAddr + svc("2001:db8:99::1", "fd00:1::2"), 8, "services[0].backends[0].address",
			"fd00:1::2 is this node's own IPv6 address (the first global IPv6 address of node.interface eth0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { wantErrorOn(t, tc.host, tc.yaml, tc.line, tc.path, tc.want) })
	}

	// What the host provides is accepted.
	for name, c := range map[string]struct {
		host *Host
		yaml string
	}{
		"IPv6 backend with the interface's IPv6":  {hostWith6, noAddr + svc("10.99.0.1", "fd00:3::2")},
		"IPv6 backend with node.address6":         {testHost, "node:\n  interface: eth0\n  address6: \"fd00:1::5\"\n" + svc("10.99.0.1", "fd00:3::2")},
		"IPv6-only node with a router ID":         {hostOnly6, noAddr + "bgp: {asn: 65001, routerID: 10.0.1.2, peers: [{address: \"fd00:1::1\", asn: 65000}]}\n" + svc("2001:db8:99::1", "fd00:3::2")},
		"IPv6-only node, node.address6 set":       {hostOnly6, "node:\n  interface: eth0\n  address6: \"fd00:1::2\"\n" + svc("2001:db8:99::1", "fd00:3::2")},
		"IPv4 VIP, node.address set":              {hostOnly6, "node:\n  interface: eth0\n  address: 10.0.1.2\n" + svc("10.99.0.1", "fd00:3::2")},
		"IPv4 backend of an IPv6 VIP, IPv4 node":  {hostWith6, noAddr + svc("2001:db8:99::1", "10.0.3.2")},
		"the file alone: node families not known": {nil, noAddr + svc("2001:db8:99::1", "fd00:3::2")},
	} {
		if _, err := ParseOn(file, []byte(c.yaml), c.host); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
