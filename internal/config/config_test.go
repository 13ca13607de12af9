package config

import (
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/config/schema"
)

const file = "agent.yaml"

// minimal is the smallest useful configuration: everything else defaults.
const minimal = `node:
  interface: eth0
services:
  - name: web
    vip: 10.99.0.1
    port: 80
    backends:
      - address: 10.0.3.2
`

func TestLoadFullExample(t *testing.T) {
	cfg, err := Load(filepath.Join("testdata", "full.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ip := netip.MustParseAddr
	webCheck := HealthCheck{Type: CheckHTTP, Port: 80, Path: "/", StatusMin: 200, StatusMax: 399,
		Interval: time.Second, Timeout: 500 * time.Millisecond, Rise: 2, Fall: 2}
	healthz := webCheck
	healthz.Path = "/healthz"
	dnsCheck := HealthCheck{Type: CheckTCP, Port: 53, Interval: time.Second, Timeout: time.Second, Rise: 2, Fall: 2}
	appCheck := HealthCheck{Type: CheckTCP, Port: 8443, Interval: time.Second, Timeout: time.Second, Rise: 2, Fall: 2}
	want := &Config{
		Node:      Node{Interface: "eth0", Address: ip("10.0.1.2")},
		API:       API{Socket: "/run/xlb/xlb.sock", Metrics: "127.0.0.1:9400"},
		Dataplane: Dataplane{PinPath: "/sys/fs/bpf/xlb", AttachMode: "auto", TableSize: 65537, MaxBackends: DefaultMaxBackends, FlowHash: FlowHashFmix64, PingVIPs: true},
		BGP: &BGP{
			ASN: 65001, RouterID: ip("10.0.1.2"), HoldTime: 9 * time.Second, Keepalive: 3 * time.Second,
			DrainTime: 5 * time.Second, ListenPort: 179,
			Peers: []Peer{
				{Address: ip("10.0.1.1"), ASN: 65000, Port: 179, HoldTime: 9 * time.Second, Keepalive: 3 * time.Second, MaxPrefixes: DefaultMaxPrefixes,
					BFD: &BFD{MinRx: 300 * time.Millisecond, MinTx: 300 * time.Millisecond, Multiplier: 3}},
				{Address: ip("10.0.2.1"), ASN: 65001, Port: 179, HoldTime: 9 * time.Second, Keepalive: 3 * time.Second, Passive: true, MaxPrefixes: DefaultMaxPrefixes},
			},
		},
		Policy: Policy{Deny: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("198.51.100.7/32")}},
		NAT: NATConfig{Address: ip("10.0.1.2"), Ports: PortRange{20000, 32767}, Sessions: 262144,
			Timeouts: NATTimeouts{TCPSyn: 5 * time.Second, TCPEstablished: time.Hour, TCPClosing: 10 * time.Second, UDP: time.Minute, TCPTimeWait: time.Minute}},
		Services: []Service{
			{
				Name: "web", VIP: ip("10.99.0.1"), Port: 80, Protocol: TCP, Forwarding: DSRIPIP,
				SourceRanges: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("172.16.0.0/12")},
				BGP: RouteAttributes{Communities: []string{"65000:100", "no-export"}, LargeCommunities: []string{"65000:1:2"},
					LocalPreference: ptr(uint32(200)), MED: ptr(uint32(10))},
				Backends: []Backend{
					{Address: ip("10.0.3.2"), Port: 80, Weight: 1, HealthCheck: webCheck},
					{Address: ip("10.0.3.3"), Port: 80, Weight: 2, HealthCheck: healthz},
					{Address: ip("10.0.3.4"), Port: 80, Weight: 0, HealthCheck: webCheck},
				},
			},
			{
				Name: "dns", VIP: ip("10.99.0.2"), Port: 53, Protocol: UDP, Forwarding: DSRGUE,
				Backends: []Backend{
					{Address: ip("10.0.3.2"), Port: 53, Weight: 1, HealthCheck: dnsCheck},
					{Address: ip("10.0.3.3"), Port: 53, Weight: 1, HealthCheck: dnsCheck},
				},
			},
			{
				Name: "app", VIP: ip("10.99.0.3"), Port: 443, Protocol: TCP, Forwarding: NAT,
				Backends: []Backend{
					{Address: ip("10.0.4.2"), Port: 8443, Weight: 1, HealthCheck: appCheck},
					{Address: ip("10.0.4.3"), Port: 8443, Weight: 1, HealthCheck: appCheck},
				},
			},
		},
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("got\n%+v\nwant\n%+v", cfg, want)
	}
	if err := invariants(cfg); err != nil {
		t.Error(err)
	}
}

func ptr[T any](v T) *T { return &v }

// The example in the documentation must stay valid: it is what users copy.
func TestDocExampleParses(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "configuration.md"))
	if err != nil {
		t.Skipf("docs/configuration.md not readable: %v", err)
	}
	blocks := yamlBlocks(string(doc))
	if len(blocks) == 0 {
		t.Fatal("docs/configuration.md has no yaml code block")
	}
	full, err := os.ReadFile(filepath.Join("testdata", "full.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if blocks[0] != string(full) {
		t.Errorf("the first yaml block of docs/configuration.md differs from testdata/full.yaml; keep them identical")
	}
	for i, b := range blocks {
		if strings.Contains(b, "# invalid") {
			continue
		}
		if _, err := Parse(fmt.Sprintf("block%d.yaml", i), []byte(b)); err != nil {
			t.Errorf("yaml block %d of docs/configuration.md:\n%v", i, err)
		}
	}
}

// yamlBlocks returns the contents of the ```yaml fences of a markdown text.
func yamlBlocks(md string) []string {
	var out []string
	for {
		_, rest, ok := strings.Cut(md, "```yaml\n")
		if !ok {
			return out
		}
		block, after, ok := strings.Cut(rest, "```")
		if !ok {
			return out
		}
		out = append(out, block)
		md = after
	}
}

func TestDefaults(t *testing.T) {
	cfg, err := Parse(file, []byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Node.Address.IsValid() {
		t.Errorf("node.address = %v, want unset", cfg.Node.Address)
	}
	if cfg.API != (API{Socket: DefaultSocket}) {
		t.Errorf("api = %+v, want socket %s and no metrics", cfg.API, DefaultSocket)
	}
	if cfg.Dataplane != (Dataplane{AttachMode: DefaultAttachMode, TableSize: DefaultTableSize, MaxBackends: DefaultMaxBackends, FlowHash: DefaultFlowHash, PingVIPs: true}) {
		t.Errorf("dataplane = %+v, want the defaults", cfg.Dataplane)
	}
	if len(cfg.Services) != 1 {
		t.Fatalf("got %d services, want 1", len(cfg.Services))
	}
	s := cfg.Services[0]
	if s.Protocol != TCP || s.Forwarding != DSRIPIP {
		t.Errorf("protocol, forwarding = %s, %s; want tcp, dsr-ipip", s.Protocol, s.Forwarding)
	}
	want := []Backend{{Address: netip.MustParseAddr("10.0.3.2"), Port: 80, Weight: DefaultWeight, HealthCheck: HealthCheck{Type: CheckNone}}}
	if !reflect.DeepEqual(s.Backends, want) {
		t.Errorf("backends = %+v, want %+v", s.Backends, want)
	}
}

func TestParseValid(t *testing.T) {
	ip := netip.MustParseAddr
	tests := []struct {
		name  string
		yaml  string
		check func(*Config) error
	}{
		{"no services", "node: {interface: eth0}\n", func(c *Config) error {
			return expect(len(c.Services) == 0 && c.Node.Interface == "eth0", "want eth0 and no services")
		}},
		{"empty services list", "node: {interface: eth0}\nservices: []\n", nil},
		{"null sections", "node: {interface: eth0}\napi:\ndataplane:\nservices:\n", func(c *Config) error {
			return expect(c.API.Socket == DefaultSocket && c.Dataplane.TableSize == DefaultTableSize, "null sections must get defaults")
		}},
		{"empty optional strings mean unset", "node: {interface: eth0, address: \"\"}\napi: {metrics: \"\"}\ndataplane: {pinPath: \"\"}\n", func(c *Config) error {
			return expect(!c.Node.Address.IsValid() && c.API.Metrics == "" && c.Dataplane.PinPath == "", "want unset fields")
		}},
		{"interface of 15 bytes", "node: {interface: abcdefghijklmno}\n", nil},
		{"source ranges, overlapping and /0", minimalWith("port: 80", "port: 80\n    sourceRanges: [10.0.0.0/8, 10.1.0.0/16, 10.1.0.0/16, 0.0.0.0/0, 192.0.2.7/32]"), func(c *Config) error {
			r := c.Services[0].SourceRanges
			return expect(len(r) == 5 && r[0] == netip.MustParsePrefix("10.0.0.0/8") && r[4] == netip.MustParsePrefix("192.0.2.7/32"), "want the five ranges as written")
		}},
		{"empty source ranges: every source", minimalWith("port: 80", "port: 80\n    sourceRanges: []"), func(c *Config) error {
			return expect(c.Services[0].SourceRanges == nil, "want no ranges")
		}},
		{"deny list", "node: {interface: eth0}\npolicy:\n  deny:\n    - 192.0.2.0/24\n    - 192.0.2.128/25\n    - 0.0.0.0/0\n", func(c *Config) error {
			return expect(len(c.Policy.Deny) == 3 && c.Policy.Deny[2] == netip.MustParsePrefix("0.0.0.0/0"), "want three prefixes")
		}},
		{"empty policy", "node: {interface: eth0}\npolicy: {}\n", func(c *Config) error {
			return expect(c.Policy.Deny == nil, "want no deny list")
		}},
		{"null policy", "node: {interface: eth0}\npolicy:\n", nil},
		{"source ranges at the limit", minimalWith("port: 80", "port: 80\n    sourceRanges: ["+prefixesText(MaxSourceRanges)+"]"), func(c *Config) error {
			return expect(len(c.Services[0].SourceRanges) == MaxSourceRanges, "want every range")
		}},
		{"metrics on every address", "node: {interface: eth0}\napi: {metrics: \":9400\"}\n", nil},
		{"metrics on localhost", "node: {interface: eth0}\napi: {metrics: localhost:9400}\n", nil},
		{"metrics on IPv6 loopback", "node: {interface: eth0}\napi: {metrics: \"[::1]:65535\"}\n", nil},
		{"link-local and private addresses", minimalWith("vip: 10.99.0.1", "vip: 169.254.1.1"), func(c *Config) error {
			return expect(c.Services[0].VIP == ip("169.254.1.1"), "want the link-local VIP")
		}},
		{"backend port equal to service port", minimalWith("address: 10.0.3.2", "{address: 10.0.3.2, port: 80}"), nil},
		{"drained backend beside an active one", minimalWith("- address: 10.0.3.2", "- {address: 10.0.3.2, weight: 0}\n      - {address: 10.0.3.3, weight: 65535}"), func(c *Config) error {
			b := c.Services[0].Backends
			return expect(len(b) == 2 && b[0].Weight == 0 && b[1].Weight == 65535, "want weights 0 and 65535")
		}},
		{"same VIP and port, other protocol", "node: {interface: eth0}\nservices:\n" +
			"  - {name: a, vip: 10.99.0.1, port: 53, protocol: tcp, backends: [{address: 10.0.3.2}]}\n" +
			"  - {name: b, vip: 10.99.0.1, port: 53, protocol: udp, backends: [{address: 10.0.3.2}]}\n", nil},
		{"healthCheck type none", withCheck("{type: none}", ""), checkIs(HealthCheck{Type: CheckNone})},
		{"empty healthCheck", withCheck("{}", ""), checkIs(HealthCheck{Type: CheckNone})},
		{"null healthCheck", withCheck("", ""), checkIs(HealthCheck{Type: CheckNone})},
		{"http defaults", withCheck("{type: http}", ""), checkIs(HealthCheck{Type: CheckHTTP, Port: 80, Path: "/",
			StatusMin: 200, StatusMax: 399, Interval: time.Second, Timeout: time.Second, Rise: 2, Fall: 2})},
		{"tcp: the timeout defaults to a shorter interval", withCheck("{type: tcp, interval: 200ms}", ""), checkIs(HealthCheck{Type: CheckTCP, Port: 80,
			Interval: 200 * time.Millisecond, Timeout: 200 * time.Millisecond, Rise: 2, Fall: 2})},
		{"every field", withCheck("{type: http, port: 8080, path: \"/ready?full=1\", expectStatus: \"200-204\", interval: 250ms, timeout: 250ms, rise: 1, fall: 100}", ""),
			checkIs(HealthCheck{Type: CheckHTTP, Port: 8080, Path: "/ready?full=1", StatusMin: 200, StatusMax: 204,
				Interval: 250 * time.Millisecond, Timeout: 250 * time.Millisecond, Rise: 1, Fall: 100})},
		{"one status code as a number", withCheck("{type: http, expectStatus: 204}", ""), func(c *Config) error {
			hc := c.Services[0].Backends[0].HealthCheck
			return expect(hc.StatusMin == 204 && hc.StatusMax == 204, "want 204-204")
		}},
		{"one status code as a string", withCheck("{type: http, expectStatus: \"503\"}", ""), func(c *Config) error {
			hc := c.Services[0].Backends[0].HealthCheck
			return expect(hc.StatusMin == 503 && hc.StatusMax == 503, "want 503-503")
		}},
		{"shortest and longest interval", withCheck("{type: tcp, interval: 10ms}", "") + "  - {name: b, vip: 10.99.0.2, port: 80, healthCheck: {type: tcp, interval: 1h, timeout: 1h}, backends: [{address: 10.0.3.2}]}\n", func(c *Config) error {
			a, b := c.Services[0].Backends[0].HealthCheck, c.Services[1].Backends[0].HealthCheck
			return expect(a.Interval == MinCheckInterval && b.Interval == MaxCheckInterval && b.Timeout == time.Hour, "want 10ms and 1h")
		}},
		{"backend without a check of its own", withCheck("{type: tcp, rise: 3}", "address: 10.0.3.2\n      - address: 10.0.3.3"), func(c *Config) error {
			b := c.Services[0].Backends
			return expect(b[0].HealthCheck == b[1].HealthCheck && b[1].HealthCheck.Rise == 3, "both backends take the service's check")
		}},
		{"backend overrides field by field", withCheck("{type: http, path: /a, interval: 2s, timeout: 300ms}",
			"{address: 10.0.3.2, healthCheck: {path: /b, fall: 5}}\n      - {address: 10.0.3.3, healthCheck: {type: tcp}}\n      - {address: 10.0.3.4, healthCheck: {type: none}}\n      - {address: 10.0.3.5, healthCheck: {interval: 100ms, timeout: 100ms}}"),
			func(c *Config) error {
				b := c.Services[0].Backends
				want := []HealthCheck{
					{Type: CheckHTTP, Port: 80, Path: "/b", StatusMin: 200, StatusMax: 399, Interval: 2 * time.Second, Timeout: 300 * time.Millisecond, Rise: 2, Fall: 5},
					{Type: CheckTCP, Port: 80, Interval: 2 * time.Second, Timeout: 300 * time.Millisecond, Rise: 2, Fall: 2},
					{Type: CheckNone},
					{Type: CheckHTTP, Port: 80, Path: "/a", StatusMin: 200, StatusMax: 399, Interval: 100 * time.Millisecond, Timeout: 100 * time.Millisecond, Rise: 2, Fall: 2},
				}
				for i, w := range want {
					if b[i].HealthCheck != w {
						return fmt.Errorf("backend %d: %+v, want %+v", i, b[i].HealthCheck, w)
					}
				}
				return nil
			}},
		{"backend check without a service check", withCheck("", "{address: 10.0.3.2, healthCheck: {type: tcp, port: 22}}\n      - address: 10.0.3.3"), func(c *Config) error {
			b := c.Services[0].Backends
			return expect(b[0].HealthCheck.Type == CheckTCP && b[0].HealthCheck.Port == 22 && b[1].HealthCheck.Type == CheckNone, "want tcp:22 and none")
		}},
		{"backend switches to tcp: the service's path is unused", withCheck("{type: http, path: /x, expectStatus: 200}", "{address: 10.0.3.2, healthCheck: {type: tcp}}"), func(c *Config) error {
			hc := c.Services[0].Backends[0].HealthCheck
			return expect(hc.Type == CheckTCP && hc.Path == "" && hc.StatusMin == 0, "want a tcp check without http fields")
		}},
		{"shared healthCheck through an anchor", withCheck("&hc {type: tcp, interval: 2s}", "") + "  - {name: b, vip: 10.99.0.2, port: 53, healthCheck: *hc, backends: [{address: 10.0.3.2}]}\n", func(c *Config) error {
			hc := c.Services[1].Backends[0].HealthCheck
			return expect(hc.Type == CheckTCP && hc.Interval == 2*time.Second && hc.Port == 53, "want the anchored check on port 53")
		}},
		{"smallest and largest table sizes", "node: {interface: eth0}\ndataplane: {tableSize: 251}\n", func(c *Config) error {
			return expect(c.Dataplane.TableSize == MinTableSize, "want 251")
		}},
		{"largest table size", "node: {interface: eth0}\ndataplane: {tableSize: 1048573}\n", nil},
		{"hexadecimal port", minimalWith("port: 80", "port: 0x50"), func(c *Config) error {
			return expect(c.Services[0].Port == 80, "0x50 is 80")
		}},
		{"anchors, aliases and merge keys", `node: {interface: eth0}
services:
  - &web
    name: web
    vip: 10.99.0.1
    port: 80
    backends: &pool
      - address: 10.0.3.2
      - address: 10.0.3.3
  - <<: *web
    name: web-udp
    protocol: udp
  - {name: other, vip: 10.99.0.2, port: 80, backends: *pool}
`, func(c *Config) error {
			if len(c.Services) != 3 {
				return fmt.Errorf("got %d services, want 3", len(c.Services))
			}
			s := c.Services[1]
			return expect(s.Name == "web-udp" && s.Protocol == UDP && s.Port == 80 && len(s.Backends) == 2 && len(c.Services[2].Backends) == 2,
				"the merged service must keep its own name and protocol and inherit the rest")
		}},
		{"trailing document marker", minimal + "---\n", nil},
		{"comments everywhere", "# head\nnode: # n\n  interface: eth0 # i\n# tail\n", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse(file, []byte(tc.yaml))
			if err != nil {
				t.Fatalf("unexpected error:\n%v", err)
			}
			if tc.check != nil {
				if err := tc.check(cfg); err != nil {
					t.Error(err)
				}
			}
			if err := invariants(cfg); err != nil {
				t.Error(err)
			}
		})
	}
}

func expect(ok bool, msg string) error {
	if ok {
		return nil
	}
	return errors.New(msg)
}

// withCheck returns the minimal configuration with the service's
// healthCheck (line 7) set to check and, unless "", its backend list item
// (line 9) replaced by backend.
func withCheck(check, backend string) string {
	s := minimalWith("port: 80", "port: 80\n    healthCheck: "+check)
	if backend != "" {
		s = strings.Replace(s, "- address: 10.0.3.2", "- "+backend, 1)
	}
	return s
}

// checkIs checks the health check of the first service's first backend.
func checkIs(want HealthCheck) func(*Config) error {
	return func(c *Config) error {
		if got := c.Services[0].Backends[0].HealthCheck; got != want {
			return fmt.Errorf("health check %+v, want %+v", got, want)
		}
		return nil
	}
}

// minimalWith returns the minimal configuration with one replacement.
func minimalWith(old, new string) string {
	if !strings.Contains(minimal, old) {
		panic("minimal has no " + old)
	}
	return strings.Replace(minimal, old, new, 1)
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		line int
		path string // "" for errors about the whole file
		want string // part of the reason
	}{
		// The file as a whole.
		{"empty file", "", 0, "", "the file is empty"},
		{"only comments", "# nothing\n", 0, "", "the file is empty"},
		{"null document", "~\n", 0, "", "holds no configuration"},
		{"unclosed list", "node:\n  interface: [eth0\n", 2, "", "invalid YAML: did not find expected ',' or ']' (in the block that starts on this line"},
		{"bad indentation", "node:\n  interface: eth0\n address: 10.0.1.2\n", 3, "", "invalid YAML"},
		{"unknown escape", "node:\n  interface: \"\\q\"\n", 2, "", "invalid YAML: found unknown escape character"},
		{"tab indentation", "node:\n\tinterface: eth0\n", 2, "", "spaces, not tabs"},
		{"two documents", minimal + "---\nnode: {interface: eth1}\n", 9, "", "a second YAML document starts here"},
		{"top level is a list", "- node\n", 1, "", "the top level must be a mapping"},
		{"missing node", "services: []\n", 1, "node", "required section is missing"},
		{"unknown top-level field", "node: {interface: eth0}\nservice: []\n", 2, "service", `did you mean "services"?`},
		{"unknown field without suggestion", "node: {interface: eth0}\nfoo: 1\n", 2, "foo", "valid fields here: node, api, dataplane, bgp, l2, policy, nat, services, kubernetes"},
		{"duplicate field", "node: {interface: eth0}\nnode: {interface: eth1}\n", 2, "node", "appears twice"},

		// Source ranges and the deny list: each bad entry at its line.
		{"source range not a CIDR", minimalWith("port: 80", "port: 80\n    sourceRanges:\n      - 10.0.0.0/8\n      - office"), 9, "services[0].sourceRanges[1]", `office is not a CIDR: write a network and its prefix length, e.g. 192.0.2.0/24`},
		{"source range an address", minimalWith("port: 80", "port: 80\n    sourceRanges: [10.0.0.1]"), 7, "services[0].sourceRanges[0]", "10.0.0.1 is an address, not a CIDR: write 10.0.0.1/32 for it alone"},
		{"source range with host bits", minimalWith("port: 80", "port: 80\n    sourceRanges: [10.0.0.1/8]"), 7, "services[0].sourceRanges[0]", "10.0.0.1/8 has host bits set: write its network, 10.0.0.0/8, or 10.0.0.1/32 for the one address"},
		{"source range too long", minimalWith("port: 80", "port: 80\n    sourceRanges: [10.0.0.0/33]"), 7, "services[0].sourceRanges[0]", "is not a CIDR"},
		{"source range IPv6", minimalWith("port: 80", "port: 80\n    sourceRanges: [\"2001:db8::/32\"]"), 7, "services[0].sourceRanges[0]", "2001:db8::/32 is an IPv6 prefix; the service's VIP 10.99.0.1 is IPv4, and only IPv4 clients reach it: write an IPv4 range"},
		{"source range IPv4 for an IPv6 VIP", minimalWith("vip: 10.99.0.1", "vip: \"2001:db8:99::1\"\n    sourceRanges: [10.0.0.0/8]"), 6, "services[0].sourceRanges[0]", "10.0.0.0/8 is an IPv4 prefix; the service's VIP 2001:db8:99::1 is IPv6, and only IPv6 clients reach it: write an IPv6 range"},
		{"source range IPv6 link-local host bits", minimalWith("vip: 10.99.0.1", "vip: \"2001:db8:99::1\"\n    sourceRanges: [\"2001:db8::1/64\"]"), 6, "services[0].sourceRanges[0]", "2001:db8::1/64 has host bits set: write its network, 2001:db8::/64, or 2001:db8::1/128 for the one address"},
		{"source range IPv4-mapped", minimalWith("port: 80", "port: 80\n    sourceRanges: [\"::ffff:10.0.0.0/104\"]"), 7, "services[0].sourceRanges[0]", "IPv4-mapped IPv6 prefix; write it as IPv4: 10.0.0.0/8"},
		{"source range a number", minimalWith("port: 80", "port: 80\n    sourceRanges: [10]"), 7, "services[0].sourceRanges[0]", "10 is not a CIDR"},
		{"source ranges not a list", minimalWith("port: 80", "port: 80\n    sourceRanges: 10.0.0.0/8"), 7, "services[0].sourceRanges", "expected a list"},
		{"too many source ranges", minimalWith("port: 80", "port: 80\n    sourceRanges: ["+prefixesText(MaxSourceRanges+1)+"]"), 7, "services[0].sourceRanges", "65 source ranges exceed the limit of 64 that a service holds"},
		{"deny entry with host bits", "node: {interface: eth0}\npolicy:\n  deny:\n    - 192.0.2.0/24\n    - 198.51.100.1/24\n", 5, "policy.deny[1]", "198.51.100.1/24 has host bits set: write its network, 198.51.100.0/24"},
		{"deny entry IPv6 with host bits", "node: {interface: eth0}\npolicy:\n  deny: [\"2001:db8::1/32\"]\n", 3, "policy.deny[0]", "2001:db8::1/32 has host bits set: write its network, 2001:db8::/32"},
		{"deny entry IPv6 address", "node: {interface: eth0}\npolicy:\n  deny: [\"2001:db8::7\"]\n", 3, "policy.deny[0]", "2001:db8::7 is an address, not a CIDR: write 2001:db8::7/128 for it alone"},
		{"deny entry garbage", "node: {interface: eth0}\npolicy:\n  deny: [\"192.0.2.0/24 # attackers\"]\n", 3, "policy.deny[0]", "is not a CIDR"},
		{"policy misspelt", "node: {interface: eth0}\npolicy:\n  denied: [192.0.2.0/24]\n", 3, "policy.denied", "unknown field; valid fields here: deny"},
		{"policy a list", "node: {interface: eth0}\npolicy: [192.0.2.0/24]\n", 2, "policy", "expected a mapping such as {deny: [192.0.2.0/24]}"},

		// node
		{"node is a list", "node: [eth0]\n", 1, "node", "expected a mapping"},
		{"misspelt interface", "node:\n  interfce: eth0\n", 2, "node.interfce", `unknown field (did you mean "interface"?)`},
		{"missing interface", "node:\n  address: 10.0.1.2\n", 1, "node.interface", "required"},
		{"empty interface", "node: {interface: \"\"}\n", 1, "node.interface", "is empty"},
		{"interface too long", "node: {interface: abcdefghijklmnop}\n", 1, "node.interface", "at most 15"},
		{"interface with slash", "node: {interface: eth/0}\n", 1, "node.interface", "not a valid interface name"},
		{"interface with space", "node: {interface: \"eth 0\"}\n", 1, "node.interface", "not a valid interface name"},
		{"interface with colon", "node: {interface: \"eth0:1\"}\n", 1, "node.interface", "not a valid interface name"},
		{"interface dot-dot", "node: {interface: \"..\"}\n", 1, "node.interface", "not a valid interface name"},
		{"interface is a number", "node:\n  interface: 0\n", 2, "node.interface", `expected a string, got the integer 0; quote it ("0")`},
		{"interface without value", "node:\n  interface:\n", 2, "node.interface", "has no value"},
		{"interface is a boolean", "node:\n  interface: true\n", 2, "node.interface", "expected a string, got the boolean true"},
		{"interface is a mapping", "node:\n  interface: {name: eth0}\n", 2, "node.interface", "expected a string, got a mapping"},
		{"node address without value", "node:\n  interface: eth0\n  address:\n", 3, "node.address", "has no value"},
		{"node address is a list", "node:\n  interface: eth0\n  address: [10.0.1.2]\n", 3, "node.address", "expected a single value, got a list"},
		{"node address IPv6", "node: {interface: eth0, address: \"2001:db8::1\"}\n", 1, "node.address", `"2001:db8::1" is an IPv6 address; node.address is the node's IPv4 address: write this one in node.address6`},
		{"node address6 IPv4", "node: {interface: eth0, address6: 10.0.1.2}\n", 1, "node.address6", `"10.0.1.2" is an IPv4 address; node.address6 is the node's IPv6 address: write this one in node.address`},
		{"node address6 garbage", "node:\n  interface: eth0\n  address6: fd00::x\n", 3, "node.address6", `"fd00::x" is not an IPv6 address`},
		{"node address6 link-local", "node: {interface: eth0, address6: \"fe80::2\"}\n", 1, "node.address6", "fe80::2 is a link-local address (fe80::/10)"},
		{"node address6 zone", "node: {interface: eth0, address6: \"fd00::2%eth0\"}\n", 1, "node.address6", `"fd00::2%eth0" has a zone (%eth0)`},
		{"node address6 multicast", "node: {interface: eth0, address6: \"ff02::1\"}\n", 1, "node.address6", "ff02::1 is a multicast address (ff00::/8)"},
		{"node address6 unspecified", "node: {interface: eth0, address6: \"::\"}\n", 1, "node.address6", ":: is the unspecified address; use a unicast IPv6 address"},
		{"node address6 loopback", "node: {interface: eth0, address6: \"::1\"}\n", 1, "node.address6", "::1 is the loopback address"},
		{"node address6 IPv4-mapped", "node: {interface: eth0, address6: \"::ffff:10.0.1.2\"}\n", 1, "node.address6", "IPv4-mapped IPv6 address; write it as plain IPv4 (10.0.1.2)"},
		{"node address6 misspelt", "node: {interface: eth0, adress6: \"fd00::2\"}\n", 1, "node.adress6", `did you mean "address6"?`},
		{"node address garbage", "node:\n  interface: eth0\n  address: 10.0.1.x\n", 3, "node.address", `"10.0.1.x" is not an IPv4 address`},
		{"node address loopback", "node: {interface: eth0, address: 127.0.0.1}\n", 1, "node.address", "loopback"},

		// api
		{"relative socket", "node: {interface: eth0}\napi:\n  socket: xlb.sock\n", 3, "api.socket", "not an absolute path"},
		{"empty socket", "node: {interface: eth0}\napi:\n  socket: \"\"\n", 3, "api.socket", "not an absolute path"},
		{"socket too long", "node: {interface: eth0}\napi:\n  socket: /" + strings.Repeat("a", 107) + "\n", 3, "api.socket", "at most 107"},
		{"metrics without port", "node: {interface: eth0}\napi:\n  metrics: 127.0.0.1\n", 3, "api.metrics", "not host:port"},
		{"metrics as a number", "node: {interface: eth0}\napi:\n  metrics: 9400\n", 3, "api.metrics", "not host:port"},
		{"metrics named port", "node: {interface: eth0}\napi:\n  metrics: localhost:http\n", 3, "api.metrics", "must be a number in 1..65535"},
		{"metrics port zero", "node: {interface: eth0}\napi:\n  metrics: \":0\"\n", 3, "api.metrics", "must be a number in 1..65535"},
		{"metrics port too big", "node: {interface: eth0}\napi:\n  metrics: \":65536\"\n", 3, "api.metrics", "must be a number in 1..65535"},
		{"metrics host name", "node: {interface: eth0}\napi:\n  metrics: example.com:9400\n", 3, "api.metrics", "must be an IP address, localhost, or empty"},
		{"misspelt metrics", "node: {interface: eth0}\napi:\n  metric: \":9400\"\n", 3, "api.metric", `did you mean "metrics"?`},

		// dataplane
		{"relative pin path", "node: {interface: eth0}\ndataplane:\n  pinPath: xlb\n", 3, "dataplane.pinPath", "not an absolute path"},
		{"pin path with NUL", "node: {interface: eth0}\ndataplane:\n  pinPath: \"/sys/fs/bpf/a\\0b\"\n", 3, "dataplane.pinPath", "contains a NUL byte"},
		{"attach mode", "node: {interface: eth0}\ndataplane:\n  attachMode: offload\n", 3, "dataplane.attachMode", "use auto (native, falling back to generic), native or generic"},
		{"flow hash", "node: {interface: eth0}\ndataplane:\n  flowHash: jhash\n", 3, "dataplane.flowHash", `"jhash" is not a flow hash; use fmix64 (the default) or lookup3`},
		{"flow hash as a number", "node: {interface: eth0}\ndataplane:\n  flowHash: 3\n", 3, "dataplane.flowHash", "expected a string"},
		{"max backends zero", "node: {interface: eth0}\ndataplane:\n  maxBackends: 0\n", 3, "dataplane.maxBackends", "1"},
		{"max backends too large", "node: {interface: eth0}\ndataplane:\n  maxBackends: 2000000\n", 3, "dataplane.maxBackends", "1048576"},
		{"table size not prime", "node: {interface: eth0}\ndataplane:\n  tableSize: 65536\n", 3, "dataplane.tableSize", "not a prime, and Maglev needs a prime table size; the nearest primes are 65521 and 65537"},
		{"table size too small", "node: {interface: eth0}\ndataplane:\n  tableSize: 241\n", 3, "dataplane.tableSize", "out of range 251..1048573"},
		{"table size too large", "node: {interface: eth0}\ndataplane:\n  tableSize: 1048583\n", 3, "dataplane.tableSize", "out of range 251..1048573"},
		{"table size as a string", "node: {interface: eth0}\ndataplane:\n  tableSize: \"65537\"\n", 3, "dataplane.tableSize", "expected a whole number"},
		{"table size overflowing int64", "node: {interface: eth0}\ndataplane:\n  tableSize: 99999999999999999999\n", 3, "dataplane.tableSize", "expected a whole number"},
		{"snake-case field", "node: {interface: eth0}\ndataplane:\n  table_size: 251\n", 3, "dataplane.table_size", `did you mean "tableSize"?`},

		// services
		{"services is a mapping", "node: {interface: eth0}\nservices:\n  web: {}\n", 3, "services", "expected a list"},
		{"service is a string", "node: {interface: eth0}\nservices:\n  - web\n", 3, "services[0]", "expected a service"},
		{"missing name", minimalWith("  - name: web\n    vip", "  - vip"), 4, "services[0].name", "required"},
		{"bad name", minimalWith("name: web", "name: Web_1"), 4, "services[0].name", `"Web_1" is not a valid name`},
		{"name ending in a dash", minimalWith("name: web", "name: web-"), 4, "services[0].name", "not a valid name"},
		{"name too long", minimalWith("name: web", "name: "+strings.Repeat("a", 64)), 4, "services[0].name", "64 characters long"},
		{"duplicate name", minimal + "  - {name: web, vip: 10.99.0.2, port: 80, backends: [{address: 10.0.3.2}]}\n", 9, "services[1].name", `"web" is already the name of services[0] (line 4)`},
		{"missing vip", minimalWith("    vip: 10.99.0.1\n", ""), 4, "services[0].vip", "required"},
		{"vip garbage", minimalWith("vip: 10.99.0.1", "vip: 10.99.0.x"), 5, "services[0].vip", `"10.99.0.x" is not an IP address`},
		{"vip is a number", minimalWith("vip: 10.99.0.1", "vip: 10.99"), 5, "services[0].vip", `"10.99" is not an IP address`},
		{"vip with prefix", minimalWith("vip: 10.99.0.1", "vip: 10.99.0.1/32"), 5, "services[0].vip", "is a prefix, not an address; write the address alone (10.99.0.1)"},
		{"vip IPv6 link-local", minimalWith("vip: 10.99.0.1", "vip: \"fe80::1\""), 5, "services[0].vip", "fe80::1 is a link-local address (fe80::/10)"},
		{"vip IPv6 multicast", minimalWith("vip: 10.99.0.1", "vip: \"ff05::2\""), 5, "services[0].vip", "ff05::2 is a multicast address (ff00::/8)"},
		{"vip IPv6 unspecified", minimalWith("vip: 10.99.0.1", "vip: \"::\""), 5, "services[0].vip", ":: is the unspecified address; use a unicast IPv6 address"},
		{"vip IPv6 loopback", minimalWith("vip: 10.99.0.1", "vip: \"::1\""), 5, "services[0].vip", "::1 is the loopback address"},
		{"vip IPv6 with prefix", minimalWith("vip: 10.99.0.1", "vip: \"2001:db8::1/128\""), 5, "services[0].vip", "is a prefix, not an address; write the address alone (2001:db8::1)"},
		{"vip IPv6 is node.address6", "node: {interface: eth0, address6: \"fd00::2\"}\nservices:\n  - {name: a, vip: \"fd00::2\", port: 80, backends: [{address: 10.0.3.2}]}\n", 3, "services[0].vip", "fd00::2 is this node's own IPv6 address (node.address6); a VIP must be an address that no interface of the node holds"},
		{"vip IPv6 with nat, IPv4 backend", minimalWith("vip: 10.99.0.1", "vip: \"2001:db8:99::1\"\n    forwarding: nat"), 9, "services[0].backends[0].address", "10.0.3.2 is IPv4 and the VIP 2001:db8:99::1 is IPv6: forwarding nat rewrites addresses within one family (no NAT64)"},
		{"vip IPv6 with dnat, IPv4 backend", minimalWith("vip: 10.99.0.1", "vip: \"2001:db8:99::1\"\n    forwarding: dnat"), 9, "services[0].backends[0].address", "10.0.3.2 is IPv4 and the VIP 2001:db8:99::1 is IPv6: forwarding dnat rewrites addresses within one family (no NAT64)"},
		{"vip IPv4-mapped", minimalWith("vip: 10.99.0.1", "vip: \"::ffff:10.99.0.1\""), 5, "services[0].vip", "write it as plain IPv4 (10.99.0.1)"},
		{"vip unspecified", minimalWith("vip: 10.99.0.1", "vip: 0.0.0.0"), 5, "services[0].vip", "unspecified address"},
		{"vip broadcast", minimalWith("vip: 10.99.0.1", "vip: 255.255.255.255"), 5, "services[0].vip", "broadcast address"},
		{"vip multicast", minimalWith("vip: 10.99.0.1", "vip: 239.1.1.1"), 5, "services[0].vip", "multicast address"},
		{"vip loopback", minimalWith("vip: 10.99.0.1", "vip: 127.0.0.53"), 5, "services[0].vip", "loopback address"},
		{"missing port", minimalWith("    port: 80\n", ""), 4, "services[0].port", "required"},
		{"port zero", minimalWith("port: 80", "port: 0"), 6, "services[0].port", "0 is out of range 1..65535"},
		{"port too big", minimalWith("port: 80", "port: 65536"), 6, "services[0].port", "65536 is out of range 1..65535"},
		{"port negative", minimalWith("port: 80", "port: -1"), 6, "services[0].port", "out of range"},
		{"port as a string", minimalWith("port: 80", "port: \"80\""), 6, "services[0].port", `expected a whole number, got the string "80"`},
		{"port as a float", minimalWith("port: 80", "port: 80.5"), 6, "services[0].port", "expected a whole number, got the number 80.5"},
		{"port as a list", minimalWith("port: 80", "port: [80]"), 6, "services[0].port", "expected a whole number, got a list"},
		{"protocol", minimalWith("port: 80", "port: 80\n    protocol: TCP"), 7, "services[0].protocol", `"TCP" is not a protocol; use tcp or udp`},
		{"forwarding", minimalWith("port: 80", "port: 80\n    forwarding: snat"), 7, "services[0].forwarding", `"snat" is not a forwarding mode; use dsr-ipip, dsr-gue, nat or dnat`},

		// healthCheck
		{"healthCheck is a string", withCheck("http", ""), 7, "services[0].healthCheck", "expected a mapping such as {type: http"},
		{"check type", withCheck("{type: HTTP}", ""), 7, "services[0].healthCheck.type", `"HTTP" is not a check type; use tcp`},
		{"check type is a number", withCheck("{type: 1}", ""), 7, "services[0].healthCheck.type", "expected a string, got the integer 1"},
		{"misspelt check field", withCheck("{type: http, intervall: 1s}", ""), 7, "services[0].healthCheck.intervall", `did you mean "interval"?`},
		{"check port zero", withCheck("{type: tcp, port: 0}", ""), 7, "services[0].healthCheck.port", "0 is out of range 1..65535"},
		{"relative check path", withCheck("{type: http, path: healthz}", ""), 7, "services[0].healthCheck.path", "does not start with /"},
		{"check path with a space", withCheck("{type: http, path: \"/a b\"}", ""), 7, "services[0].healthCheck.path", "percent-encode"},
		{"check path not ASCII", withCheck("{type: http, path: /é}", ""), 7, "services[0].healthCheck.path", "printable ASCII"},
		{"check path too long", withCheck("{type: http, path: /"+strings.Repeat("a", MaxCheckPath)+"}", ""), 7, "services[0].healthCheck.path", "at most 1024"},
		{"status class", withCheck("{type: http, expectStatus: 2xx}", ""), 7, "services[0].healthCheck.expectStatus", `2xx is not an HTTP status code or range of them; write one status code (e.g. 200) or a range (e.g. "200-399")`},
		{"status out of range", withCheck("{type: http, expectStatus: 600}", ""), 7, "services[0].healthCheck.expectStatus", "600 is out of range 100..599"},
		{"status range out of range", withCheck("{type: http, expectStatus: 200-999}", ""), 7, "services[0].healthCheck.expectStatus", "codes in 100..599"},
		{"status range reversed", withCheck("{type: http, expectStatus: 399-200}", ""), 7, "services[0].healthCheck.expectStatus", "399-200 is an empty range; write the lower code first (200-399)"},
		{"status is a boolean", withCheck("{type: http, expectStatus: true}", ""), 7, "services[0].healthCheck.expectStatus", "expected a string, got the boolean true"},
		{"interval without unit", withCheck("{type: tcp, interval: 1}", ""), 7, "services[0].healthCheck.interval", "expected a duration with a unit, got the integer 1; write e.g. 1ms or 1s"},
		{"interval not a duration", withCheck("{type: tcp, interval: soon}", ""), 7, "services[0].healthCheck.interval", "soon is not a duration"},
		{"interval too short", withCheck("{type: tcp, interval: 5ms}", ""), 7, "services[0].healthCheck.interval", "5ms is below the minimum 10ms"},
		{"interval too long", withCheck("{type: tcp, interval: 2h}", ""), 7, "services[0].healthCheck.interval", "2h is above the maximum 1h0m0s"},
		{"interval is a list", withCheck("{type: tcp, interval: [1s]}", ""), 7, "services[0].healthCheck.interval", "expected a duration such as 500ms or 2s, got a list"},
		{"timeout zero", withCheck("{type: tcp, timeout: 0s}", ""), 7, "services[0].healthCheck.timeout", "0s is not above 0"},
		{"timeout a bare zero", withCheck("{type: tcp, timeout: 0}", ""), 7, "services[0].healthCheck.timeout", "0 is not above 0"},
		{"interval a bare zero", withCheck("{type: tcp, interval: 0}", ""), 7, "services[0].healthCheck.interval", "0 is below the minimum 10ms"},
		{"timeout negative", withCheck("{type: tcp, timeout: -1s}", ""), 7, "services[0].healthCheck.timeout", "-1s is not above 0"},
		{"timeout above the interval", withCheck("{type: tcp, interval: 1s, timeout: 2s}", ""), 7, "services[0].healthCheck.timeout",
			"2s is longer than the interval 1s (services[0].healthCheck.interval, line 7); a probe must end before the next one starts"},
		{"timeout above the default interval", withCheck("{type: tcp, timeout: 1500ms}", ""), 7, "services[0].healthCheck.timeout", "1.5s is longer than the interval (default 1s)"},
		{"rise zero", withCheck("{type: tcp, rise: 0}", ""), 7, "services[0].healthCheck.rise", "0 is out of range 1..100"},
		{"fall too big", withCheck("{type: tcp, fall: 101}", ""), 7, "services[0].healthCheck.fall", "101 is out of range 1..100"},
		{"fields without a type", withCheck("{interval: 1s, rise: 3}", ""), 7, "services[0].healthCheck.type", "required when other fields are given: add type: http or type: tcp"},
		{"fields with type none", withCheck("{type: none, interval: 1s}", ""), 7, "services[0].healthCheck.interval", "does not apply: type is none, so nothing is probed"},
		{"path with a tcp check", withCheck("{type: tcp, path: /}", ""), 7, "services[0].healthCheck.path", "applies to http checks only, and this check's type is tcp; remove it, or set type: http"},
		{"status with a tcp check", withCheck("{type: tcp, expectStatus: 200}", ""), 7, "services[0].healthCheck.expectStatus", "applies to http checks only"},
		{"backend check is a list", withCheck("", "{address: 10.0.3.2, healthCheck: [tcp]}"), 9, "services[0].backends[0].healthCheck", "expected a mapping"},
		{"backend interval below the service timeout", withCheck("{type: tcp, timeout: 500ms}", "{address: 10.0.3.2, healthCheck: {interval: 100ms}}"), 9, "services[0].backends[0].healthCheck.interval",
			"100ms is shorter than the timeout 500ms (services[0].healthCheck.timeout, line 7); a probe must end before the next one starts: raise interval or set a shorter timeout here"},
		{"backend timeout above the service interval", withCheck("{type: tcp, interval: 200ms}", "{address: 10.0.3.2, healthCheck: {timeout: 300ms}}"), 9, "services[0].backends[0].healthCheck.timeout",
			"300ms is longer than the interval 200ms (services[0].healthCheck.interval, line 7)"},
		{"backend path under a tcp service", withCheck("{type: tcp}", "{address: 10.0.3.2, healthCheck: {path: /x}}"), 9, "services[0].backends[0].healthCheck.path",
			"this check's type is tcp (services[0].healthCheck.type, line 7)"},
		{"backend fields under type none", withCheck("{type: none}", "{address: 10.0.3.2, healthCheck: {rise: 3}}"), 9, "services[0].backends[0].healthCheck.rise",
			"does not apply: type is none (services[0].healthCheck.type, line 7)"},
		{"backend fields without any type", withCheck("", "{address: 10.0.3.2, healthCheck: {rise: 3}}"), 9, "services[0].backends[0].healthCheck.type", "required when other fields are given"},
		{"misspelt backend check field", withCheck("{type: tcp}", "{address: 10.0.3.2, healthcheck: {type: tcp}}"), 9, "services[0].backends[0].healthcheck", `did you mean "healthCheck"?`},
		{"misspelt service field", minimalWith("port: 80", "port: 80\n    protocl: tcp"), 7, "services[0].protocl", `did you mean "protocol"?`},
		{"duplicate vip, port, protocol", minimal + "  - name: api\n    vip: 10.99.0.1\n    port: 80\n    backends: [{address: 10.0.3.2}]\n", 9, "services[1]",
			`10.99.0.1:80/tcp is already served by service "web" (services[0], line 4)`},
		{"duplicate key of an unnamed service", "node: {interface: eth0}\nservices:\n  - {name: X, vip: 10.99.0.1, port: 80, backends: [{address: 10.0.3.2}]}\n  - {name: y, vip: 10.99.0.1, port: 80, backends: [{address: 10.0.3.2}]}\n",
			4, "services[1]", "10.99.0.1:80/tcp is already served by services[0] (line 3)"},

		// backends
		{"missing backends", minimalWith("    backends:\n      - address: 10.0.3.2\n", ""), 4, "services[0].backends", "required"},
		{"empty backends", minimalWith("backends:\n      - address: 10.0.3.2\n", "backends: []\n"), 7, "services[0].backends", "the list is empty"},
		{"null backends", minimalWith("backends:\n      - address: 10.0.3.2\n", "backends:\n"), 7, "services[0].backends", "the list is empty"},
		{"backend is a string", minimalWith("- address: 10.0.3.2", "- 10.0.3.2"), 8, "services[0].backends[0]", "expected a backend"},
		{"backend without address", minimalWith("- address: 10.0.3.2", "- weight: 1"), 8, "services[0].backends[0].address", "required"},
		{"backend address garbage", minimalWith("- address: 10.0.3.2", "- address: 10.0.3.x"), 8, "services[0].backends[0].address", `"10.0.3.x" is not an IP address`},
		{"backend address multicast", minimalWith("- address: 10.0.3.2", "- address: 224.0.0.1"), 8, "services[0].backends[0].address", "multicast"},
		{"backend address IPv6 link-local", minimalWith("- address: 10.0.3.2", "- address: \"fe80::2\""), 8, "services[0].backends[0].address", "fe80::2 is a link-local address"},
		{"backend address IPv4-mapped", minimalWith("- address: 10.0.3.2", "- address: \"::ffff:10.0.3.2\""), 8, "services[0].backends[0].address", "IPv4-mapped IPv6 address; write it as plain IPv4 (10.0.3.2)"},
		{"backend address IPv6 with nat", minimalWith("- address: 10.0.3.2", "- address: \"fd00::3:2\"\n    forwarding: nat"), 8, "services[0].backends[0].address", "fd00::3:2 is IPv6 and the VIP 10.99.0.1 is IPv4: forwarding nat rewrites addresses within one family (no NAT64)"},
		{"backend address IPv6 with dnat", "node: {interface: eth0}\nservices:\n  - {name: a, vip: 10.99.0.1, port: 80, forwarding: dnat, backends: [{address: \"fd00::3:2\"}]}\n", 3, "services[0].backends[0].address", "fd00::3:2 is IPv6 and the VIP 10.99.0.1 is IPv4: forwarding dnat rewrites addresses within one family (no NAT64)"},
		{"backend address is node.address6", "node: {interface: eth0, address6: \"fd00::2\"}\nservices:\n  - {name: a, vip: 10.99.0.1, port: 80, backends: [{address: \"fd00::2\"}]}\n", 3, "services[0].backends[0].address", "fd00::2 is this node's own IPv6 address (node.address6); a backend is another host"},
		{"backend IPv6 at an IPv6 VIP", "node: {interface: eth0}\nservices:\n  - {name: a, vip: \"2001:db8:99::1\", port: 80, backends: [{address: \"fd00::3\"}]}\n  - {name: b, vip: \"fd00::3\", port: 80, backends: [{address: \"2001:db8::3\"}]}\n", 3, "services[0].backends[0].address", "fd00::3 is the VIP of service \"b\""},
		{"duplicate backend", minimalWith("- address: 10.0.3.2", "- address: 10.0.3.2\n      - address: 10.0.3.2"), 9, "services[0].backends[1].address",
			"10.0.3.2 is already listed as services[0].backends[0] (line 8)"},
		{"backend port differs", minimalWith("- address: 10.0.3.2", "- {address: 10.0.3.2, port: 8080}"), 8, "services[0].backends[0].port",
			"8080 differs from the service port 80; DSR delivers the packet with VIP:port unchanged, so it cannot translate ports"},
		{"backend port out of range", minimalWith("- address: 10.0.3.2", "- {address: 10.0.3.2, port: 70000}"), 8, "services[0].backends[0].port", "out of range 1..65535"},
		{"weight too big", minimalWith("- address: 10.0.3.2", "- {address: 10.0.3.2, weight: 65536}"), 8, "services[0].backends[0].weight", "65536 is out of range 0..65535"},
		{"weight negative", minimalWith("- address: 10.0.3.2", "- {address: 10.0.3.2, weight: -1}"), 8, "services[0].backends[0].weight", "out of range 0..65535"},
		{"weight without value", minimalWith("- address: 10.0.3.2", "- address: 10.0.3.2\n        weight:"), 9, "services[0].backends[0].weight", "has no value"},
		{"all weights zero", minimalWith("- address: 10.0.3.2", "- {address: 10.0.3.2, weight: 0}\n      - {address: 10.0.3.3, weight: 0}"), 7, "services[0].backends",
			"every backend has weight 0"},
		{"misspelt weight", minimalWith("- address: 10.0.3.2", "- {address: 10.0.3.2, weigth: 2}"), 8, "services[0].backends[0].weigth", `did you mean "weight"?`},
		{"more backends than table slots", "node: {interface: eth0}\ndataplane: {tableSize: 251}\nservices:\n  - name: big\n    vip: 10.99.0.1\n    port: 80\n    backends:\n" + backendLines(251, 0),
			7, "services[0].backends", "251 backends do not fit a Maglev table of 251 entries; raise dataplane.tableSize"},

		// YAML features used badly
		{"merge of a scalar", "node:\n  <<: eth0\n", 2, "node", "a merge key (<<) takes a mapping"},
		{"custom tag", "node:\n  interface: !iface eth0\n", 2, "node.interface", "custom tag !iface"},
		{"field name is a list", "node:\n  ? [a]\n  : b\n", 2, "node", "a field name must be a plain word"},
		{"weird field name stays on one line", "node:\n  \"a\\nb\": 1\n  interface: eth0\n", 2, `node."a\nb"`, "unknown field"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { wantError(t, tc.yaml, tc.line, tc.path, tc.want) })
	}
}

// wantError checks that Parse rejects in with an error line at line (0:
// none) and path ("" for the whole file) whose reason contains want.
func wantError(t *testing.T, in string, line int, path, want string) {
	t.Helper()
	cfg, err := Parse(file, []byte(in))
	if err == nil {
		t.Fatalf("no error; want %q", want)
	}
	if cfg != nil {
		t.Errorf("got a config together with an error")
	}
	prefix := file + ": "
	if line > 0 {
		prefix = fmt.Sprintf("%s:%d: ", file, line)
	}
	if path != "" {
		prefix += path + ": "
	}
	for _, l := range strings.Split(err.Error(), "\n") {
		if strings.HasPrefix(l, prefix) && strings.Contains(l, want) {
			return
		}
	}
	t.Errorf("no error line starts with %q and contains %q; got:\n%v", prefix, want, err)
}

// backendLines returns n backend list items with distinct addresses,
// starting after offset.
func backendLines(n, offset int) string {
	var b strings.Builder
	for i := offset; i < offset+n; i++ {
		fmt.Fprintf(&b, "      - address: 10.%d.%d.%d\n", 1+i/65536, i/256%256, i%256)
	}
	return b.String()
}

// A mistake in a service's healthCheck is reported once, not again for
// each backend that inherits it, also for backends with checks of their
// own.
func TestHealthCheckErrorReportedOnce(t *testing.T) {
	for _, check := range []string{
		"{type: tcp, interval: 1s, timeout: 2s}",
		"{type: none, interval: 1s}",
		"{interval: 1s}",
		"{type: tcp, path: /x}",
		"{type: tcp, interval: 1}",
	} {
		t.Run(check, func(t *testing.T) {
			in := withCheck(check, "address: 10.0.3.2\n      - {address: 10.0.3.3, healthCheck: {rise: 3}}\n      - address: 10.0.3.4")
			_, err := Parse(file, []byte(in))
			if err == nil {
				t.Fatal("no error")
			}
			if lines := strings.Split(err.Error(), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], file+":7: services[0].healthCheck") {
				t.Errorf("want one error at the service's healthCheck, got:\n%v", err)
			}
		})
	}
}

func TestParseUnnamedInput(t *testing.T) {
	_, err := Parse("", []byte("node: {interface: eth/0}\n"))
	if err == nil || !strings.HasPrefix(err.Error(), "config:1: node.interface: ") {
		t.Errorf("got %v, want an error naming the input \"config\"", err)
	}
}

func TestEveryErrorReported(t *testing.T) {
	in := `node:
  interfce: eth0
services:
  - name: a
    vip: 10.99.0.x
    port: 80
    backends: [{address: 10.0.3.2, port: 81}]
`
	_, err := Parse(file, []byte(in))
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	// The misspelt interface is reported once, as unknown with a
	// suggestion, and not also as a missing node.interface.
	want := []string{
		"agent.yaml:2: node.interfce: unknown field",
		"agent.yaml:5: services[0].vip:",
		"agent.yaml:7: services[0].backends[0].port:",
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(lines), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("error %d = %q, want prefix %q", i, lines[i], w)
		}
	}
	var e *Error
	if !errors.As(err, &e) || e.File != file || e.Line != 2 || e.Path != "node.interfce" {
		t.Errorf("errors.As gives %+v, want the first error with its file, line and path", e)
	}
}

func TestErrorCount(t *testing.T) {
	in := "node: {interface: eth0}\nservices:\n  - name: s\n    vip: 10.99.0.1\n    port: 80\n    backends:\n" +
		strings.Repeat("      - address: x\n", schema.MaxErrors+10)
	_, err := Parse(file, []byte(in))
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != schema.MaxErrors+1 {
		t.Fatalf("got %d lines, want %d", len(lines), schema.MaxErrors+1)
	}
	if last := lines[len(lines)-1]; !strings.Contains(last, "10 more errors not shown") {
		t.Errorf("last line = %q, want the count of the errors left out", last)
	}
}

func TestLimits(t *testing.T) {
	// services builds n services with per backends each.
	services := func(n, per int, maxBackends int) string {
		var b strings.Builder
		b.WriteString("node: {interface: eth0}\n")
		if maxBackends > 0 {
			fmt.Fprintf(&b, "dataplane: {maxBackends: %d}\n", maxBackends)
		}
		b.WriteString("services:\n")
		for i := range n {
			fmt.Fprintf(&b, "  - name: s%d\n    vip: 10.99.%d.%d\n    port: 80\n    backends:\n", i, i/200, 1+i%200)
			b.WriteString(backendLines(per, 0))
		}
		return b.String()
	}
	tests := []struct {
		name         string
		services     int
		perService   int
		maxBackends  int    // 0: the default
		want         string // "" when valid
		wantServices int
	}{
		{"services at the limit", MaxServices, 1, 0, "", MaxServices},
		{"backends at the default limit", MaxServices, DefaultMaxBackends / MaxServices, 0, "", MaxServices},
		{"one service too many", MaxServices + 1, 1, 0, "16385 services exceed the limit of 16384 (MaxServices)", 0},
		{"one backend too many", 2, DefaultMaxBackends/2 + 1, 0, "16386 backend entries over all services exceed the limit of 16384 (dataplane.maxBackends)", 0},
		{"1000 services of 100 backends", 1000, 100, 100000, "", 1000},
		{"one backend over a raised limit", 1000, 100, 99999, "100000 backend entries over all services exceed the limit of 99999 (dataplane.maxBackends)", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			cfg, err := Parse(file, []byte(services(tc.services, tc.perService, tc.maxBackends)))
			t.Logf("parsed in %v", time.Since(start))
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if len(cfg.Services) != tc.wantServices {
					t.Errorf("got %d services, want %d", len(cfg.Services), tc.wantServices)
				}
				if err := invariants(cfg); err != nil {
					t.Error(err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			line := 2
			if tc.maxBackends > 0 {
				line = 3
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("agent.yaml:%d: services: %s", line, tc.want)) {
				t.Errorf("got\n%v\nwant %q at line %d", err, tc.want, line)
			}
		})
	}
}

func TestAliasBomb(t *testing.T) {
	// Each level doubles the work of resolving the one below it: without a
	// budget, 40 levels would take 2^40 steps.
	var b strings.Builder
	b.WriteString("node: {interface: eth0}\nx0: &a0 {interface: eth0}\n")
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&b, "x%d: &a%d {<<: [*a%d, *a%d]}\n", i, i, i-1, i-1)
	}
	b.WriteString("dataplane:\n  <<: *a40\n")
	start := time.Now()
	_, err := Parse(file, []byte(b.String()))
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("took %v", took)
	}
	if err == nil || !strings.Contains(err.Error(), "too many nodes through aliases or merge keys") {
		t.Errorf("got %v, want the alias budget error", err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("node:\n  interface: eth/0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); err == nil || !strings.HasPrefix(err.Error(), bad+":2: node.interface: ") {
		t.Errorf("Load(bad) = %v, want an error naming %s, line 2 and node.interface", err, bad)
	}
	missing := filepath.Join(dir, "missing.yaml")
	if _, err := Load(missing); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("Load(missing) = %v, want a not-exist error naming the file", err)
	}
}

func TestPrimes(t *testing.T) {
	for n := uint32(0); n < 5000; n++ {
		if got, want := isPrime(n), big.NewInt(int64(n)).ProbablyPrime(20); got != want {
			t.Errorf("isPrime(%d) = %v, want %v", n, got, want)
		}
	}
	for _, n := range []uint32{MinTableSize, MaxTableSize, DefaultTableSize, 4294967291} {
		if !isPrime(n) {
			t.Errorf("isPrime(%d) = false, want true", n)
		}
	}
	for _, n := range []uint32{252, 65536, 1000000, MaxTableSize - 1, 4294967295} {
		if isPrime(n) {
			t.Errorf("isPrime(%d) = true, want false", n)
		}
	}
	for _, tc := range []struct{ n, lo, hi uint32 }{
		{252, 251, 257},
		{65536, 65521, 65537},
		{1048572, 1048571, 1048573},
	} {
		if lo, hi := nearestPrimes(tc.n); lo != tc.lo || hi != tc.hi {
			t.Errorf("nearestPrimes(%d) = %d, %d; want %d, %d", tc.n, lo, hi, tc.lo, tc.hi)
		}
	}
}

// prefixesText writes n distinct /32 CIDRs, comma-separated.
func prefixesText(n int) string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("10.%d.%d.1/32", i/256, i%256)
	}
	return strings.Join(out, ", ")
}

// The node's deny list holds at most MaxDenyPrefixes prefixes; one more
// is refused at the list, with what to do.
func TestDenyListLimit(t *testing.T) {
	var b strings.Builder
	b.WriteString("node: {interface: eth0}\npolicy:\n  deny:\n")
	for i := range MaxDenyPrefixes {
		fmt.Fprintf(&b, "    - %d.%d.%d.0/24\n", 1+i>>16, byte(i>>8), byte(i))
	}
	cfg, err := Parse(file, []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Policy.Deny) != MaxDenyPrefixes {
		t.Fatalf("%d prefixes, want %d", len(cfg.Policy.Deny), MaxDenyPrefixes)
	}
	b.WriteString("    - 203.0.113.0/24\n")
	wantError(t, b.String(), 3, "policy.deny", fmt.Sprintf("%d deny prefixes exceed the limit of %d that the data plane's deny table holds; aggregate", MaxDenyPrefixes+1, MaxDenyPrefixes))
}
