package agent

import (
	"net/netip"
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
