package config

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

// withL2 returns a layer-2 configuration of node 10.0.1.2 with one
// service, the l2 section written on line 2 as the flow mapping l2.
func withL2(l2 string) string {
	return "node: {interface: eth0, address: 10.0.1.2, announce: l2}\nl2: " + l2 + `
services:
  - name: web
    vip: 10.99.0.1
    port: 80
    backends: [{address: 10.0.3.2}]
`
}

const threeNodes = "nodes: [{name: a, address: 10.0.1.2}, {name: b, address: 10.0.1.3}, {name: c, address: 10.0.1.4}]"

func defaultL2() *L2 {
	ip := netip.MustParseAddr
	return &L2{NodeName: "a", Port: DefaultL2Port, Heartbeat: DefaultL2Heartbeat, DeadAfter: DefaultL2DeadAfter,
		Nodes: []L2Node{{"a", ip("10.0.1.2")}, {"b", ip("10.0.1.3")}, {"c", ip("10.0.1.4")}}}
}

func TestL2Valid(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name string
		yaml string
		want func(l *L2)
	}{
		{"defaults: this node found by its address", withL2("{" + threeNodes + "}"), func(*L2) {}},
		{"node name given", withL2("{nodeName: a, " + threeNodes + "}"), func(*L2) {}},
		{"heartbeat sets the dead time", withL2("{heartbeat: 50ms, " + threeNodes + "}"), func(l *L2) { l.Heartbeat, l.DeadAfter = 50*ms, 200*ms }},
		{"dead time of its own", withL2("{heartbeat: 50ms, deadAfter: 100ms, " + threeNodes + "}"), func(l *L2) { l.Heartbeat, l.DeadAfter = 50*ms, 100*ms }},
		{"port", withL2("{port: 9000, " + threeNodes + "}"), func(l *L2) { l.Port = 9000 }},
		{"one node alone", withL2("{nodes: [{name: a, address: 10.0.1.2}]}"), func(l *L2) { l.Nodes = l.Nodes[:1] }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse(file, []byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			want := defaultL2()
			tc.want(want)
			if !reflect.DeepEqual(cfg.L2, want) {
				t.Errorf("l2 = %+v, want %+v", cfg.L2, want)
			}
			if cfg.Node.Announce != AnnounceL2 || cfg.BGP != nil {
				t.Errorf("announce %q, bgp %v; want l2 and no bgp", cfg.Node.Announce, cfg.BGP)
			}
			// What Render writes parses back to the same configuration.
			out, err := Marshal(cfg)
			if err != nil {
				t.Fatal(err)
			}
			again, err := Parse(file, out)
			if err != nil {
				t.Fatalf("the rendering does not parse: %v\n%s", err, out)
			}
			if !reflect.DeepEqual(again, cfg) {
				t.Errorf("the rendering parses to\n%+v\nwant\n%+v", again, cfg)
			}
		})
	}
}

// IPv6 VIPs are answered by neighbour discovery.
func TestL2IPv6VIP(t *testing.T) {
	in := strings.Replace(withL2("{"+threeNodes+"}"), "vip: 10.99.0.1", `vip: "2001:db8::1"`, 1)
	in = strings.Replace(in, "address: 10.0.1.2, announce", `address: 10.0.1.2, address6: "fd00:1::2", announce`, 1)
	in = strings.Replace(in, "backends: [{address: 10.0.3.2}]", `backends: [{address: "fd00:3::2"}]`, 1)
	cfg, err := Parse(file, []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.L2 == nil || cfg.Services[0].VIP != netip.MustParseAddr("2001:db8::1") {
		t.Errorf("l2 %v, VIP %s", cfg.L2, cfg.Services[0].VIP)
	}
}

func TestAnnounceBGPIsTheDefault(t *testing.T) {
	for _, in := range []string{minimal, minimalWith("interface: eth0", "interface: eth0\n  announce: bgp")} {
		cfg, err := Parse(file, []byte(in))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Node.Announce != "" || cfg.L2 != nil {
			t.Errorf("announce %q, l2 %v; want the default (bgp) and no l2", cfg.Node.Announce, cfg.L2)
		}
	}
}

func TestL2Errors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		line int
		path string
		want string
	}{
		{"unknown mode", minimalWith("interface: eth0", "interface: eth0\n  announce: arp"), 3, "node.announce", `"arp" is not an announce mode; use bgp (routes over BGP, the bgp section) or l2`},
		{"l2 without its section", "node: {interface: eth0, address: 10.0.1.2, announce: l2}\n", 1, "l2", "required with node.announce: l2: add a top-level l2 section"},
		{"l2 section without l2 mode", minimal + "l2: {" + threeNodes + "}\n", 9, "l2", "is read only with node.announce: l2, and node.announce is bgp (the default)"},
		{"l2 with bgp", withL2("{"+threeNodes+"}") + "bgp: " + onePeer + "\n", 8, "bgp", "node.announce is l2 (node.announce, line 1): the VIPs are answered by ARP from one elected node, and no route is announced; remove the bgp section"},
		{"l2 with kubernetes", withL2("{"+threeNodes+"}") + "kubernetes: {}\n", 8, "kubernetes", "layer-2 mode from a cluster is not available yet"},
		{"no nodes", withL2("{heartbeat: 100ms}"), 2, "l2.nodes", "required: list every node that shares the VIPs"},
		{"empty nodes", withL2("{nodes: []}"), 2, "l2.nodes", "the list is empty"},
		{"l2 a list", withL2("[a, b]"), 2, "l2", "expected a mapping with nodes"},
		{"node without name", withL2("{nodes: [{address: 10.0.1.2}]}"), 2, "l2.nodes[0].name", "required: name the node"},
		{"node without address", withL2("{nodes: [{name: a, address: 10.0.1.2}, {name: b}]}"), 2, "l2.nodes[1].address", "required: give the node's IPv4 address"},
		{"bad name", withL2("{nodes: [{name: A_1, address: 10.0.1.2}]}"), 2, "l2.nodes[0].name", "A_1 is not a valid node name"},
		{"duplicate name", "node: {interface: eth0, address: 10.0.1.2, announce: l2}\nl2:\n  nodes:\n    - {name: a, address: 10.0.1.2}\n    - {name: a, address: 10.0.1.3}\n", 5, "l2.nodes[1].name", "a is already the name of l2.nodes[0] (line 4); give each node its own name"},
		{"duplicate address", "node: {interface: eth0, address: 10.0.1.2, announce: l2}\nl2:\n  nodes:\n    - {name: a, address: 10.0.1.2}\n    - {name: b, address: 10.0.1.2}\n", 5, "l2.nodes[1].address", "10.0.1.2 is already the address of l2.nodes[0] (line 4); list each node once"},
		{"IPv6 node address", withL2(`{nodes: [{name: a, address: "fd00::2"}]}`), 2, "l2.nodes[0].address", `"fd00::2" is an IPv6 address; heartbeats go between the nodes' IPv4 addresses`},
		{"this node not listed", withL2("{nodes: [{name: b, address: 10.0.1.3}]}"), 2, "l2.nodes", "no node has this node's address 10.0.1.2 (node.address); add this node to the list, or write l2.nodeName"},
		{"node name not listed", withL2("{nodeName: z, " + threeNodes + "}"), 2, "l2.nodeName", "z is not in l2.nodes"},
		{"node name of another address", withL2("{nodeName: b, " + threeNodes + "}"), 2, "l2.nodeName", "names b (l2.nodes[1], line 2), whose address 10.0.1.3 is not this node's 10.0.1.2 (node.address)"},
		{"no node address, no name", "node: {interface: eth0, announce: l2}\nl2: {" + threeNodes + "}\n", 2, "l2.nodeName", "required here: node.address is not set"},
		{"heartbeat too short", withL2("{heartbeat: 1ms, " + threeNodes + "}"), 2, "l2.heartbeat", "1ms is out of range 10ms..10s"},
		{"dead too soon", withL2("{heartbeat: 100ms, deadAfter: 150ms, " + threeNodes + "}"), 2, "l2.deadAfter", "150ms is below 2 heartbeats (200ms): one lost heartbeat would move the VIPs"},
		{"dead too late", withL2("{deadAfter: 2m, " + threeNodes + "}"), 2, "l2.deadAfter", "2m is above the maximum 1m0s"},
		{"port 0", withL2("{port: 0, " + threeNodes + "}"), 2, "l2.port", "0 is out of range 1..65535"},
		{"misspelt field", withL2("{node: [], " + threeNodes + "}"), 2, "l2.node", `did you mean "nodes"?`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { wantError(t, tc.yaml, tc.line, tc.path, tc.want) })
	}
}

// A service's announce: l2 (the Kubernetes source's, for an AddressPool
// with announce: l2) is taken with a kubernetes section, reaches every
// service of its VIP (an IPv6 one too: neighbour discovery answers it),
// survives Render, and is refused in a plain file.
func TestServiceAnnounceL2(t *testing.T) {
	const head = "node: {interface: eth0, address: 10.0.1.2}\nkubernetes: {}\nservices:\n"
	const svcs = `  - {name: web, vip: 10.99.0.1, port: 80, announce: l2, backends: [{address: 10.0.3.2}]}
  - {name: dns, vip: 10.99.0.1, port: 53, protocol: udp, backends: [{address: 10.0.3.2}]}
  - {name: other, vip: 10.99.0.2, port: 80, announce: bgp, backends: [{address: 10.0.3.2}]}
  - {name: web6, vip: 'fd00:99::1', port: 80, announce: l2, backends: [{address: 10.0.3.2}]}
`
	cfg, err := Parse(file, []byte(head+svcs))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Announce{}
	for _, s := range cfg.Services {
		got[s.Name] = s.Announce
	}
	want := map[string]Announce{"web": AnnounceL2, "dns": AnnounceL2, "other": "", "web6": AnnounceL2}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("announce by service = %v, want %v", got, want)
	}
	out, err := Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Parse(file, out)
	if err != nil {
		t.Fatalf("rendered configuration does not parse: %v\n%s", err, out)
	}
	if !reflect.DeepEqual(again.Services, cfg.Services) {
		t.Errorf("rendered and parsed again: %+v, want %+v", again.Services, cfg.Services)
	}

	for _, tc := range []struct{ name, yaml, want string }{
		{"plain file", "node: {interface: eth0, address: 10.0.1.2}\nservices:\n  - {name: web, vip: 10.99.0.1, port: 80, announce: l2, backends: [{address: 10.0.3.2}]}\n",
			"services[0].announce: l2 per service is for the Services of an AddressPool"},
		{"unknown", head + "  - {name: web, vip: 10.99.0.1, port: 80, announce: arp, backends: [{address: 10.0.3.2}]}\n",
			"services[0].announce"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(file, []byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
