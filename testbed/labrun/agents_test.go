package labrun

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
)

// statusOf makes the status an agent reports when it serves services.
func statusOf(gen uint64, services []Service) *api.Status {
	st := &api.Status{Config: api.Config{Generation: gen, Result: api.ResultOK}}
	for _, s := range services {
		as := api.Service{Name: s.Name, VIP: s.VIP, Port: s.Port, Protocol: string(s.Protocol), Forwarding: string(s.Forwarding), Installed: true}
		for _, b := range s.Backends {
			as.Backends = append(as.Backends, api.Backend{Address: b, Port: s.Port, Weight: 1})
		}
		st.Services = append(st.Services, as)
	}
	return st
}

func TestServing(t *testing.T) {
	p := testPlan(t)
	all, err := Services(p)
	if err != nil {
		t.Fatal(err)
	}
	less := Without(all, p.Backends[3].Addr)

	for _, c := range []struct {
		name   string
		st     *api.Status
		minGen uint64
		want   []Service
		err    string // "" when serving
	}{
		{"started", statusOf(1, all), 1, all, ""},
		{"newer generation", statusOf(3, less), 2, less, ""},
		{"affinity not applied yet", statusOf(3, all), 2, withAffinity(all), "service \"web\" has affinity none, want client-ip"},
		{"affinity applied", func() *api.Status {
			st := statusOf(3, all)
			st.Services[0].Affinity = "client-ip"
			return st
		}(), 2, withAffinity(all), ""},
		{"old generation", statusOf(1, all), 2, less, "generation 1, waiting for 2"},
		{"reload failed", func() *api.Status {
			st := statusOf(2, all)
			st.Config.Result, st.Config.Error = api.ResultError, "services[0].port: bad"
			return st
		}(), 2, all, "services[0].port: bad"},
		{"not installed", func() *api.Status {
			st := statusOf(1, all)
			st.Services[1].Installed = false
			return st
		}(), 1, all, `service "echo" is not installed`},
		{"removed backend still there", statusOf(2, all), 2, less, `service "web" has backends`},
		{"backend missing", statusOf(2, less), 2, all, `service "web" has backends`},
		{"service missing", statusOf(1, all[:1]), 1, all, "1 services, want 2"},
		{"other service", func() *api.Status {
			st := statusOf(1, all)
			st.Services[1].Name = "dns"
			return st
		}(), 1, all, `service "echo" missing`},
		{"wrong forwarding", func() *api.Status {
			st := statusOf(1, all)
			st.Services[0].Forwarding = "dsr-gue"
			return st
		}(), 1, all, "dsr-gue, want 10.99.0.1:80/tcp dsr-ipip"},
		{"wrong port", func() *api.Status {
			st := statusOf(1, all)
			st.Services[0].VIP = netip.MustParseAddr("10.99.0.9")
			return st
		}(), 1, all, "10.99.0.9:80"},
		// The agent may list backends in another order than the file.
		{"backend order", func() *api.Status {
			st := statusOf(1, all)
			b := st.Services[0].Backends
			b[0], b[3] = b[3], b[0]
			return st
		}(), 1, all, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := serving(c.st, c.minGen, c.want)
			if c.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("error %v, want one containing %q", err, c.err)
			}
		})
	}
}

// withAffinity is services with client-IP affinity on the first.
func withAffinity(services []Service) []Service {
	out := slices.Clone(services)
	out[0].Affinity = config.AffinityClientIP
	return out
}
