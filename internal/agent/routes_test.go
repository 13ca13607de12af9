package agent

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/xlbproject/xlb/internal/announce"
	"github.com/xlbproject/xlb/internal/config"
)

func TestRoutesFor(t *testing.T) {
	med := uint32(10)
	be := func(addr string, w uint32) config.Backend {
		return config.Backend{Address: netip.MustParseAddr(addr), Port: 80, Weight: w}
	}
	svc := func(name, vip string, port uint16, bes ...config.Backend) config.Service {
		return config.Service{Name: name, VIP: netip.MustParseAddr(vip), Port: port, Protocol: "tcp", Backends: bes,
			BGP: config.RouteAttributes{MED: &med}}
	}
	cfg := &config.Config{Services: []config.Service{
		svc("web", "10.99.0.1", 80, be("10.0.3.2", 1), be("10.0.3.3", 1)),
		svc("web-tls", "10.99.0.1", 443, be("10.0.3.2", 1)),
		svc("down", "10.99.0.2", 80, be("10.0.3.4", 1)),
		svc("drained", "10.99.0.3", 80, be("10.0.3.5", 0)),
		svc("shared-down", "10.99.0.4", 80, be("10.0.3.6", 1)),
		svc("shared-up", "10.99.0.4", 81, be("10.0.3.7", 1)),
		svc("missing", "10.99.0.5", 80, be("10.0.3.8", 1)),
	}}
	s := cfg.Services
	down := map[string]bool{
		TargetKey(s[0], s[0].Backends[0]): true, // web keeps 10.0.3.3
		TargetKey(s[2], s[2].Backends[0]): true,
		TargetKey(s[4], s[4].Backends[0]): true,
	}
	installed := func(s config.Service) bool { return s.Name != "missing" }
	got := announce.Plan(cfg.Services, servicesDown(cfg, down), installed)
	want := []struct {
		vip   string
		serve bool
		why   string
	}{
		{"10.99.0.1", true, ""},
		{"10.99.0.2", false, "every backend is down"},
		{"10.99.0.3", false, "every backend is drained (weight 0)"},
		{"10.99.0.4", true, ""},
		{"10.99.0.5", false, "no service of this VIP is programmed"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d routes, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		r := got[i]
		if r.Prefix != netip.MustParsePrefix(w.vip+"/32") || r.Serve != w.serve || r.Why != w.why {
			t.Errorf("route %d: %s serve=%v why=%q, want %s serve=%v why=%q", i, r.Prefix, r.Serve, r.Why, w.vip, w.serve, w.why)
		}
		if r.Attrs.MED == nil || *r.Attrs.MED != med {
			t.Errorf("route %s lost its attributes", r.Prefix)
		}
	}
}

// A node serves BGP pools and l2 pools side by side: the VIPs of services
// with announce: l2 go to the ARP speaker alone, the others to BGP alone;
// with node.announce: l2 every VIP goes to the speaker.
func TestSplitRoutes(t *testing.T) {
	ip := netip.MustParseAddr
	route := func(vip string) announce.Route {
		return announce.Route{Prefix: netip.PrefixFrom(ip(vip), 32), Serve: true}
	}
	routes := []announce.Route{route("10.99.0.1"), route("10.99.0.2"), route("10.99.0.3")}
	cfg := &config.Config{Services: []config.Service{
		{Name: "web", VIP: ip("10.99.0.1"), Announce: config.AnnounceL2},
		{Name: "dns", VIP: ip("10.99.0.2")},
		{Name: "mail", VIP: ip("10.99.0.3"), Announce: config.AnnounceL2},
	}}
	vips := func(rs []announce.Route) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.Prefix.Addr().String())
		}
		return out
	}
	arp, bgp := splitRoutes(cfg, routes)
	if got, want := vips(arp), []string{"10.99.0.1", "10.99.0.3"}; !slices.Equal(got, want) {
		t.Errorf("ARP: %v, want %v", got, want)
	}
	if got, want := vips(bgp), []string{"10.99.0.2"}; !slices.Equal(got, want) {
		t.Errorf("BGP: %v, want %v", got, want)
	}
	cfg.Node.Announce = config.AnnounceL2
	arp, bgp = splitRoutes(cfg, routes)
	if len(arp) != 3 || len(bgp) != 0 {
		t.Errorf("node.announce: l2: ARP %v, BGP %v; want every VIP by ARP", vips(arp), vips(bgp))
	}
}
