package labrun

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/testbed/lab"
)

func testPlan(t *testing.T) lab.Plan {
	t.Helper()
	// A plan is only a layout: nothing is built.
	p, err := lab.NewPlan(lab.Spec{Prefix: "xlbunit", Nodes: 2, Backends: 4, Binary: "/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The rendered file must be what the agent accepts, with every value the
// lab needs, for every node and every set of backends the demo and the
// tests write.
func TestRenderConfigParses(t *testing.T) {
	p := testPlan(t)
	all, err := Services(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		services []Service
	}{
		{"all backends", all},
		{"without be4", Without(all, p.Backends[3].Addr)},
		{"without be1 and be2", Without(Without(all, p.Backends[0].Addr), p.Backends[1].Addr)},
		{"no services", nil},
		{"health checks", WithCheck(WithCheck(all, "web", &Check{Type: config.CheckHTTP, Path: "/", Interval: 200 * time.Millisecond, Timeout: 150 * time.Millisecond, Rise: 2, Fall: 3}),
			"echo", &Check{Type: config.CheckTCP, Port: lab.HTTPPort, Interval: 1500 * time.Millisecond})},
		{"client-IP affinity", func() []Service {
			s := slices.Clone(all)
			s[0].Affinity = config.AffinityClientIP
			return s
		}()},
	} {
		for _, node := range p.Nodes {
			t.Run(c.name+"/"+node.Name, func(t *testing.T) {
				b, err := renderConfig(p, node, c.services, NodeOptions{})
				if err != nil {
					t.Fatal(err)
				}
				cfg, err := config.Parse(node.Name+".yaml", b)
				if err != nil {
					t.Fatalf("the agent rejects the file: %v\n%s", err, b)
				}
				if cfg.Node.Interface != node.Interface || cfg.Node.Address != node.Addr {
					t.Errorf("node %+v, want %s %s", cfg.Node, node.Interface, node.Addr)
				}
				if cfg.API.Socket != Socket(p, node) || cfg.Dataplane.PinPath != node.PinDir {
					t.Errorf("socket %q, pin path %q; want %q, %q", cfg.API.Socket, cfg.Dataplane.PinPath, Socket(p, node), node.PinDir)
				}
				if len(cfg.Services) != len(c.services) {
					t.Fatalf("%d services, want %d\n%s", len(cfg.Services), len(c.services), b)
				}
				for i, want := range c.services {
					got := cfg.Services[i]
					var backends []netip.Addr
					for _, be := range got.Backends {
						backends = append(backends, be.Address)
					}
					if got.Name != want.Name || got.VIP != want.VIP || got.Port != want.Port ||
						got.Protocol != want.Protocol || got.Forwarding != want.Forwarding || got.Affinity != want.Affinity ||
						!slices.Equal(backends, want.Backends) {
						t.Errorf("service %d: %+v, want %+v", i, got, want)
					}
					if err := sameCheck(got, want.Check); err != nil {
						t.Errorf("service %s: %v\n%s", want.Name, err, b)
					}
				}
			})
		}
	}
}

func TestServicesMatchTheLab(t *testing.T) {
	p := testPlan(t)
	s, err := Services(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 2 {
		t.Fatalf("%d services, want 2", len(s))
	}
	web, echo := s[0], s[1]
	if web.Target() != netip.AddrPortFrom(p.VIPs[0], lab.HTTPPort) || web.Protocol != config.TCP || web.Forwarding != config.DSRIPIP {
		t.Errorf("web: %+v", web)
	}
	if echo.Target() != netip.AddrPortFrom(p.VIPs[1], lab.UDPPort) || echo.Protocol != config.UDP || echo.Forwarding != config.DSRGUE {
		t.Errorf("echo: %+v", echo)
	}
	for _, svc := range s {
		if len(svc.Backends) != len(p.Backends) {
			t.Errorf("%s: %d backends, want %d", svc.Name, len(svc.Backends), len(p.Backends))
		}
	}
	// The two services must not share a backend slice: Without on one
	// would change the other.
	s[0].Backends[0] = netip.Addr{}
	if !s[1].Backends[0].IsValid() {
		t.Error("the services share their backend list")
	}
}

func TestWithoutLeavesInputAlone(t *testing.T) {
	p := testPlan(t)
	all, err := Services(p)
	if err != nil {
		t.Fatal(err)
	}
	gone := p.Backends[1].Addr
	less := Without(all, gone)
	for i := range all {
		if len(all[i].Backends) != 4 {
			t.Errorf("input service %s lost backends: %v", all[i].Name, all[i].Backends)
		}
		if len(less[i].Backends) != 3 || slices.Contains(less[i].Backends, gone) {
			t.Errorf("service %s without %s: %v", less[i].Name, gone, less[i].Backends)
		}
	}
	if got := Without(all, netip.MustParseAddr("192.0.2.1")); len(got[0].Backends) != 4 {
		t.Errorf("removing an unknown address changed the backends: %v", got[0].Backends)
	}
}

func TestPathsAreInTheStateDir(t *testing.T) {
	p := testPlan(t)
	for _, n := range p.Nodes {
		for _, path := range []string{ConfigPath(p, n), Socket(p, n)} {
			if !strings.HasPrefix(path, p.StateDir+"/") || !strings.Contains(path, n.Name) {
				t.Errorf("%s: %s is not the node's file in %s", n.Name, path, p.StateDir)
			}
		}
	}
	if ConfigPath(p, p.Nodes[0]) == ConfigPath(p, p.Nodes[1]) || Socket(p, p.Nodes[0]) == Socket(p, p.Nodes[1]) {
		t.Error("two nodes share a file")
	}
}

// sameCheck says how the health check of every backend of got differs
// from c (nil: none), the zero fields of c being the agent's defaults.
func sameCheck(got config.Service, c *Check) error {
	for _, b := range got.Backends {
		hc := b.HealthCheck
		if c == nil {
			if hc.Type != config.CheckNone {
				return fmt.Errorf("backend %s: check %+v, want none", b.Address, hc)
			}
			continue
		}
		want := config.HealthCheck{Type: c.Type, Port: cmp.Or(c.Port, got.Port), Interval: cmp.Or(c.Interval, config.DefaultCheckInterval),
			Rise: cmp.Or(c.Rise, config.DefaultRise), Fall: cmp.Or(c.Fall, config.DefaultFall)}
		want.Timeout = cmp.Or(c.Timeout, min(want.Interval, config.DefaultCheckTimeout))
		if c.Type == config.CheckHTTP {
			want.Path = cmp.Or(c.Path, "/")
			want.StatusMin, want.StatusMax = config.DefaultStatusMin, config.DefaultStatusMax
		}
		if hc != want {
			return fmt.Errorf("backend %s: check %+v, want %+v", b.Address, hc, want)
		}
	}
	return nil
}

// Drained backends are written with weight 0 and every backend on
// BackendPort; the nat section is the agent's.
func TestRenderNATService(t *testing.T) {
	p := testPlan(t)
	node := p.Nodes[0]
	a, b, c := p.Backends[0].Addr, p.Backends[1].Addr, p.Backends[2].Addr
	svc := Service{Name: "web", VIP: p.VIPs[0], Port: 8000, Protocol: config.TCP, Forwarding: config.NAT,
		Backends: []netip.Addr{a, b}, Drained: []netip.Addr{c}, BackendPort: 80}
	nat := NAT{PortMin: 20000, PortMax: 29999, Sessions: 4096, TCPSyn: 2 * time.Second, TCPEstablished: time.Minute, TCPClosing: 3 * time.Second, UDP: 30 * time.Second}
	out, err := renderConfig(p, node, []Service{svc}, NodeOptions{NAT: &nat})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(node.Name+".yaml", out)
	if err != nil {
		t.Fatalf("the agent rejects the file: %v\n%s", err, out)
	}
	s := cfg.Services[0]
	got := map[netip.Addr][2]uint32{}
	for _, be := range s.Backends {
		got[be.Address] = [2]uint32{uint32(be.Port), be.Weight}
	}
	want := map[netip.Addr][2]uint32{a: {80, config.DefaultWeight}, b: {80, config.DefaultWeight}, c: {80, 0}}
	if s.Forwarding != config.NAT || len(got) != len(want) || got[a] != want[a] || got[b] != want[b] || got[c] != want[c] {
		t.Errorf("%s, backends (port, weight) %v, want nat, %v\n%s", s.Forwarding, got, want, out)
	}
	n := cfg.NAT
	if n.Ports != (config.PortRange{Min: 20000, Max: 29999}) || n.Sessions != 4096 ||
		n.Timeouts != (config.NATTimeouts{TCPSyn: 2 * time.Second, TCPEstablished: time.Minute, TCPClosing: 3 * time.Second, UDP: 30 * time.Second, TCPTimeWait: config.DefaultNATTCPTimeWait}) {
		t.Errorf("nat %+v\n%s", n, out)
	}
}

func TestNATSection(t *testing.T) {
	for _, tc := range []struct {
		nat  NAT
		want string
	}{
		{NAT{}, "nat: {}\n"},
		{NAT{Address: netip.MustParseAddr("10.0.1.2"), PortMin: 20000, PortMax: 20999, Sessions: 4096, TCPSyn: 2 * time.Second, UDP: time.Minute},
			"nat:\n  address: 10.0.1.2\n  ports: 20000-20999\n  sessions: 4096\n  timeouts: {tcpSyn: 2s, udp: 1m0s}\n"},
	} {
		if got := tc.nat.yaml(); got != tc.want {
			t.Errorf("%+v: got\n%s\nwant\n%s", tc.nat, got, tc.want)
		}
	}
}

// In a dual-stack lab every node's file names its IPv6 address
// (node.address6), and the agent accepts the IPv6 services beside the
// IPv4 ones: IPv6 backends over IPIP and GUE, IPv4 backends behind an
// IPv6 VIP. An IPv4-only lab's file has no address6.
func TestRenderConfigIPv6(t *testing.T) {
	p, err := lab.NewPlan(lab.Spec{Prefix: "xlbunit", Nodes: 2, Backends: 4, Binary: "/bin/true", IPv6: true})
	if err != nil {
		t.Fatal(err)
	}
	v4, err := Services(p)
	if err != nil {
		t.Fatal(err)
	}
	v6, err := Services6(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Services6(testPlan(t)); err == nil {
		t.Error("Services6 of an IPv4-only lab: no error")
	}
	want := map[string]struct {
		vip      netip.Addr
		fwd      config.Forwarding
		backend0 netip.Addr
	}{
		"web6":     {p.VIPs6[0], config.DSRIPIP, p.Backends[0].Addr6},
		"echo6":    {p.VIPs6[1], config.DSRGUE, p.Backends[0].Addr6},
		"web6to4":  {p.VIPs6[1], config.DSRIPIP, p.Backends[0].Addr},
		"echo6to4": {p.VIPs6[0], config.DSRGUE, p.Backends[0].Addr},
	}
	all := slices.Concat(v4, v6)
	for _, node := range p.Nodes {
		b, err := renderConfig(p, node, all, NodeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Parse(node.Name+".yaml", b)
		if err != nil {
			t.Fatalf("the agent rejects the file: %v\n%s", err, b)
		}
		if cfg.Node.Address6 != node.Addr6 || !node.Addr6.Is6() {
			t.Errorf("%s: node.address6 %s, want %s", node.Name, cfg.Node.Address6, node.Addr6)
		}
		if len(cfg.Services) != len(all) {
			t.Fatalf("%d services, want %d", len(cfg.Services), len(all))
		}
		if len(v6) != len(want) {
			t.Errorf("%d IPv6 services, want %d", len(v6), len(want))
		}
		for _, s := range cfg.Services[len(v4):] {
			w, ok := want[s.Name]
			if !ok || s.VIP != w.vip || s.Forwarding != w.fwd || len(s.Backends) != len(p.Backends) || s.Backends[0].Address != w.backend0 {
				t.Errorf("service %s: VIP %s %s, backends %+v; want %+v", s.Name, s.VIP, s.Forwarding, s.Backends, w)
			}
		}
	}
	b, err := renderConfig(testPlan(t), testPlan(t).Nodes[0], nil, NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "address6") {
		t.Errorf("the file of an IPv4-only lab names an IPv6 address:\n%s", b)
	}
}

// An IPv6-only node's file (NodeOptions.IPv6Only) has no node.address
// and a router ID; on a host whose interface has no IPv4 address the
// agent takes it with the IPv6 services over IPv6 backends, and refuses
// those that need the IPv4 address it lacks.
func TestRenderConfigIPv6Only(t *testing.T) {
	p, err := lab.NewPlan(lab.Spec{Prefix: "xlbunit", Nodes: 3, Backends: 2, Binary: "/bin/true", IPv6: true, PeerIPv6: true, Router: lab.RouterFRR})
	if err != nil {
		t.Fatal(err)
	}
	v6, err := Services6(p)
	if err != nil {
		t.Fatal(err)
	}
	node := p.Nodes[2]
	host := &config.Host{Interfaces: map[string][]netip.Addr{node.Interface: {node.Addr6}}}
	b, err := renderConfig(p, node, v6[:2], NodeOptions{IPv6Only: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.ParseOn(node.Name+".yaml", b, host)
	if err != nil {
		t.Fatalf("the agent of an IPv6-only node rejects its file: %v\n%s", err, b)
	}
	if cfg.Node.Address.IsValid() || cfg.BGP == nil || cfg.BGP.RouterID != node.Addr || cfg.BGP.Peers[0].Address != p.BGP.PeerAddr {
		t.Errorf("node %+v, BGP %+v: want no node.address, router ID %s, the peer %s", cfg.Node, cfg.BGP, node.Addr, p.BGP.PeerAddr)
	}
	b, err = renderConfig(p, node, v6, NodeOptions{IPv6Only: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = config.ParseOn(node.Name+".yaml", b, host)
	if err == nil || !strings.Contains(err.Error(), "is IPv4, and the node has no IPv4 address") {
		t.Errorf("IPv4 backends on an IPv6-only node: %v, want them refused", err)
	}
}
