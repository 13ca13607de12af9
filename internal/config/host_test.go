package config

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// testHost holds 10.0.1.2 as the first IPv4 address of eth0 (the node
// address when the file sets none), 10.0.1.9 on eth0 too, and 192.0.2.7
// on a dummy interface.
var testHost = &Host{Interfaces: map[string][]netip.Addr{
	"eth0":   {netip.MustParseAddr("fe80::1"), netip.MustParseAddr("10.0.1.2"), netip.MustParseAddr("10.0.1.9")},
	"dummy0": {netip.MustParseAddr("192.0.2.7")},
	"lo":     {netip.MustParseAddr("127.0.0.1")},
}}

// wantErrorOn checks that ParseOn(h) rejects in with an error line that
// starts with "file:line: path: " and contains want.
func wantErrorOn(t *testing.T, h *Host, in string, line int, path, want string) {
	t.Helper()
	cfg, err := ParseOn(file, []byte(in), h)
	if err == nil {
		t.Fatalf("no error; want %q", want)
	}
	if cfg != nil {
		t.Errorf("got a config together with an error")
	}
	prefix := fmt.Sprintf("%s:%d: %s: ", file, line, path)
	for _, l := range strings.Split(err.Error(), "\n") {
		if strings.HasPrefix(l, prefix) && strings.Contains(l, want) {
			return
		}
	}
	t.Errorf("no error line starts with %q and contains %q; got:\n%v", prefix, want, err)
}

// TestNodeAddressesRefused: a VIP at the node's own address or at any
// address of the host, and a backend at the node address or at a VIP,
// are refused with the file's line and the clash named.
func TestNodeAddressesRefused(t *testing.T) {
	const svc = "services:\n  - name: web\n    vip: %s\n    port: 22\n    backends:\n      - address: %s\n"
	noAddr := "node:\n  interface: eth0\n" + svc
	withAddr := "node:\n  interface: eth0\n  address: 10.0.1.5\n" + svc
	tests := []struct {
		name string
		host *Host // nil: the file alone
		yaml string
		line int
		path string
		want string
	}{
		{"VIP is node.address", nil, fmt.Sprintf(withAddr, "10.0.1.5", "10.0.3.2"), 6, "services[0].vip",
			"10.0.1.5 is this node's own address (node.address); a VIP must be an address that no interface of the node holds"},
		{"VIP is the interface's address", testHost, fmt.Sprintf(noAddr, "10.0.1.2", "10.0.3.2"), 5, "services[0].vip",
			"10.0.1.2 is this node's own address (the first IPv4 address of node.interface eth0, which the agent takes when node.address is not set)"},
		{"VIP is another address of the interface", testHost, fmt.Sprintf(withAddr, "10.0.1.9", "10.0.3.2"), 6, "services[0].vip",
			"10.0.1.9 is configured on this host (interface eth0)"},
		{"VIP is on another interface", testHost, fmt.Sprintf(withAddr, "192.0.2.7", "10.0.3.2"), 6, "services[0].vip",
			"192.0.2.7 is configured on this host (interface dummy0)"},
		{"backend is node.address", nil, fmt.Sprintf(withAddr, "10.99.0.1", "10.0.1.5"), 9, "services[0].backends[0].address",
			"10.0.1.5 is this node's own address (node.address); a backend is another host"},
		{"backend is the interface's address", testHost, fmt.Sprintf(noAddr, "10.99.0.1", "10.0.1.2"), 8, "services[0].backends[0].address",
			"10.0.1.2 is this node's own address (the first IPv4 address of node.interface eth0"},
		{"backend is its own VIP", nil, fmt.Sprintf(withAddr, "10.99.0.1", "10.99.0.1"), 9, "services[0].backends[0].address",
			`10.99.0.1 is the VIP of service "web" (services[0], line 6); a backend is a real server's own address`},
		{"backend is a later service's VIP", nil, fmt.Sprintf(withAddr, "10.99.0.1", "10.99.0.2") +
			"  - name: dns\n    vip: 10.99.0.2\n    port: 53\n    backends: [{address: 10.0.3.2}]\n", 9, "services[0].backends[0].address",
			`10.99.0.2 is the VIP of service "dns" (services[1], line 11)`},
		{"history backend is a VIP", nil, "node:\n  interface: eth0\nservices:\n  - name: web\n    vip: 10.99.0.1\n    port: 80\n" +
			"    forwarding: dsr-gue\n    flows: daisy-chain\n    history:\n      - until: 2026-01-01T00:00:00Z\n        backends:\n          - address: 10.99.0.1\n" +
			"    backends: [{address: 10.0.3.2}]\n", 12, "services[0].history[0].backends[0].address", `10.99.0.1 is the VIP of service "web"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { wantErrorOn(t, tc.host, tc.yaml, tc.line, tc.path, tc.want) })
	}

	// The file alone knows nothing of the host: an address that only the
	// host holds passes Parse, and fails ParseOn.
	in := fmt.Sprintf(withAddr, "192.0.2.7", "10.0.3.2")
	if _, err := Parse(file, []byte(in)); err != nil {
		t.Errorf("Parse without a host: %v", err)
	}
	// Loopback, unspecified, multicast and broadcast VIPs are refused by
	// the file's own checks.
	for _, vip := range []string{"127.0.0.1", "0.0.0.0", "224.0.0.5", "255.255.255.255"} {
		if _, err := Parse(file, []byte(fmt.Sprintf(withAddr, vip, "10.0.3.2"))); err == nil || !strings.Contains(err.Error(), "services[0].vip: "+vip) {
			t.Errorf("VIP %s: %v, want an error at services[0].vip", vip, err)
		}
	}
}

// TestValidateOnHost: a configuration built in code (as the Kubernetes
// source builds one) is refused for the same clashes, without lines.
func TestValidateOnHost(t *testing.T) {
	cfg, err := Parse(file, []byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Services[0].VIP = netip.MustParseAddr("192.0.2.7")
	_, err = ValidateConfig(cfg, Env{File: "cluster", Host: testHost})
	if err == nil || err.Error() != "cluster: services[0].vip: 192.0.2.7 is configured on this host (interface dummy0); "+vipRule {
		t.Errorf("got %v", err)
	}
	if _, err := ValidateConfig(cfg, Env{File: "cluster"}); err != nil {
		t.Errorf("Validate without a host: %v", err)
	}
	var v Validator
	if _, err := v.Validate(cfg, Env{File: "cluster", Host: testHost}); err == nil {
		t.Error("Validator.Validate accepted a VIP of the host")
	}
}
