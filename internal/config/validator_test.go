package config

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"
)

// TestValidatorAgreesWithValidate: over random walks of configurations
// built in code, as a cluster source builds them (a service or two
// changed at a time, sometimes into something invalid: a name or key
// taken twice, a bad address, too many backend entries, route
// attributes, a changed dataplane section, a VIP on the host, a backend
// at a VIP, another host), a Validator returns exactly what Validate
// returns, and takes its shortcut for most steps.
func TestValidatorAgreesWithValidate(t *testing.T) {
	base, err := Parse(file, []byte("node: {interface: eth0, address: 10.0.1.2}\ndataplane: {maxBackends: 28}\n"+
		"bgp: {asn: 65001, peers: [{address: 10.0.1.1, asn: 65000}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(11, 12))
	// A quarter of the backends and VIPs are IPv6: the host without an
	// IPv6 address refuses those backends.
	addr := func() netip.Addr {
		if rng.IntN(4) == 0 {
			return netip.AddrFrom16([16]byte{0xfd, 0, 0, 3, 15: byte(2 + rng.IntN(12))})
		}
		return netip.AddrFrom4([4]byte{10, 0, 3, byte(2 + rng.IntN(12))})
	}
	var vips []string
	for i := range 16 {
		vips = append(vips, fmt.Sprint("10.99.0.", i+1))
	}
	for i := range 4 {
		vips = append(vips, fmt.Sprint("2001:db8:99::", i+1))
	}
	newService := func(i int) Service {
		s := Service{Name: fmt.Sprint("s", i), VIP: netip.MustParseAddr(vips[rng.IntN(len(vips))]), Port: uint16(80 + rng.IntN(3)),
			Protocol: TCP, Forwarding: DSRIPIP}
		for range 1 + rng.IntN(4) {
			s.Backends = append(s.Backends, Backend{Address: addr(), Port: s.Port, Weight: uint32(1 + rng.IntN(3))})
		}
		return s
	}
	var services []Service
	for i := range 8 {
		services = append(services, newService(i))
	}
	next := len(services)
	// 10.99.0.16 is one of the VIPs the walk picks.
	host := &Host{Interfaces: map[string][]netip.Addr{"eth0": {netip.MustParseAddr("10.0.1.2"), netip.MustParseAddr("fd00:1::2")}, "dummy0": {netip.MustParseAddr("10.99.0.16")}}}
	other := &Host{Interfaces: map[string][]netip.Addr{"eth0": {netip.MustParseAddr("10.0.1.2")}, "dummy0": {netip.MustParseAddr("10.99.0.15")}}}
	v := &Validator{}
	quick, invalid, over, withAttrs := 0, 0, 0, 0
	var lastValid []Service
	const steps = 3000
	for step := range steps {
		cfg := *base
		cfg.Dataplane.MaxBackends = 28 // which the services' backends reach at times
		if step%97 == 0 {
			cfg.Dataplane.MaxBackends = 16 // another dataplane section, for a moment
		}
		edit(rng, services, addr, vips)
		switch rng.IntN(25) {
		case 0:
			if len(services) < 12 {
				services = append(services, newService(next))
				next++
			}
		case 1:
			if len(services) > 6 {
				i := rng.IntN(len(services))
				services = slices.Delete(services, i, i+1)
			}
		case 2:
			rng.Shuffle(len(services), func(i, j int) { services[i], services[j] = services[j], services[i] })
		case 3, 4, 5:
			for i := range services { // route attributes come and go
				services[i].BGP = RouteAttributes{}
			}
		}
		cfg.Services = deepCopy(services)
		h := host
		if step/50%4 == 3 {
			h = other // the host's addresses changed, for a while
		}

		want, wantErr := ValidateConfig(&cfg, Env{File: "cluster", Host: h})
		// The shortcut on a copy of the Validator (it replaces what it
		// remembers, never changes it), then the Validator itself.
		probe := *v
		if out, ok := probe.quick(deepConfig(&cfg), Env{File: "cluster", Host: h}); ok {
			quick++
			if wantErr == nil && !reflect.DeepEqual(out, want) {
				for i := range want.Services {
					if !reflect.DeepEqual(out.Services[i], want.Services[i]) {
						t.Logf("service %d: got %+v\nwant %+v", i, out.Services[i], want.Services[i])
					}
				}
				if !reflect.DeepEqual(out.BGP, want.BGP) {
					t.Logf("bgp: %+v / %+v", out.BGP, want.BGP)
				}
			}
			if wantErr != nil || !reflect.DeepEqual(out, want) {
				t.Fatalf("step %d: the shortcut accepted a configuration that Validate answers with %v / %+v:\n%+v", step, wantErr, want, out)
			}
		}
		if wantErr != nil {
			invalid++
		}
		for _, x := range cfg.Services {
			if !x.BGP.IsZero() {
				withAttrs++
				break
			}
		}
		if n := entries(cfg.Services); n > 28 {
			over++
		}
		got, gotErr := v.Validate(&cfg, Env{File: "cluster", Host: h})
		if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d: Validator: %v / %+v; Validate: %v / %+v", step, gotErr, got, wantErr, want)
		}
		// A source repairs what the checks reject: keep walking from a
		// valid configuration most of the time.
		if wantErr == nil {
			lastValid = deepCopy(cfg.Services)
		} else if rng.IntN(3) > 0 {
			services = deepCopy(lastValid)
		}
	}
	t.Logf("%d of %d steps took the shortcut, %d were invalid, %d over the backend limit, %d with route attributes", quick, steps, invalid, over, withAttrs)
	if quick < steps/4 {
		t.Errorf("only %d of %d steps took the shortcut", quick, steps)
	}
}

// edit changes one random service a little, sometimes into something
// invalid.
func edit(rng *rand.Rand, services []Service, addr func() netip.Addr, vips []string) {
	if len(services) == 0 {
		return
	}
	s := &services[rng.IntN(len(services))]
	s.Backends = slices.Clone(s.Backends)
	switch rng.IntN(15) {
	case 0, 1, 2:
		if len(s.Backends) > 0 {
			s.Backends[rng.IntN(len(s.Backends))].Weight = uint32(rng.IntN(4))
		}
	case 3, 4:
		if len(s.Backends) < 4 {
			s.Backends = append(s.Backends, Backend{Address: addr(), Port: s.Port, Weight: 1})
		}
	case 5:
		if len(s.Backends) > 0 {
			s.Backends = s.Backends[:len(s.Backends)-1]
		}
	case 6:
		s.VIP = netip.MustParseAddr(vips[rng.IntN(len(vips))])
		if o := services[rng.IntN(len(services))]; rng.IntN(3) == 0 { // perhaps another's key
			s.VIP, s.Port, s.Protocol = o.VIP, o.Port, o.Protocol
			for i := range s.Backends {
				s.Backends[i].Port = s.Port
			}
		}
	case 7:
		s.Port = uint16(80 + rng.IntN(3))
		if rng.IntN(4) > 0 { // else a backend port differs
			for i := range s.Backends {
				s.Backends[i].Port = s.Port
			}
		}
	case 8:
		s.Protocol = []Protocol{"", TCP, UDP, UDP}[rng.IntN(4)]
	case 9:
		s.Name = services[rng.IntN(len(services))].Name // perhaps another's
	case 10:
		s.Forwarding = []Forwarding{DSRIPIP, DSRGUE}[rng.IntN(2)]
		s.Flows = []Flows{"", FlowsDaisyChain, FlowsStateful}[rng.IntN(3)]
	case 11:
		if rng.IntN(4) == 0 { // no shortcut while a service has them
			med := uint32(rng.IntN(3))
			s.BGP = RouteAttributes{MED: &med}
			if o := services[rng.IntN(len(services))]; rng.IntN(2) == 0 {
				s.VIP = o.VIP // another service's route
			}
		} else {
			s.BGP = RouteAttributes{}
		}
	case 12:
		if len(s.Backends) > 0 {
			b := &s.Backends[rng.IntN(len(s.Backends))]
			b.HealthCheck = HealthCheck{Type: CheckTCP, Interval: time.Second, Timeout: time.Duration(1+rng.IntN(2)) * 600 * time.Millisecond}
		}
	case 13:
		s.VIP = netip.MustParseAddr("127.0.0.1") // not a VIP
	case 14:
		if len(s.Backends) > 0 { // a backend at a VIP, perhaps one in use
			s.Backends[rng.IntN(len(s.Backends))].Address = netip.MustParseAddr(vips[rng.IntN(len(vips))])
		}
	}
}

func deepCopy(services []Service) []Service {
	out := slices.Clone(services)
	for i := range out {
		out[i].Backends = slices.Clone(out[i].Backends)
	}
	return out
}

func deepConfig(c *Config) *Config {
	out := *c
	out.Services = deepCopy(c.Services)
	return &out
}

func entries(services []Service) int {
	n := 0
	for _, s := range services {
		n += len(s.Backends)
	}
	return n
}

// TestSameServiceCoversEveryField: two services that differ in any one
// field are not the same, and every field of Service is on the list
// (a field added to Service fails here until sameService compares it).
func TestSameServiceCoversEveryField(t *testing.T) {
	base := func() Service {
		return Service{Name: "a", VIP: netip.MustParseAddr("10.99.0.1"), Port: 80, Protocol: TCP, Forwarding: DSRGUE,
			Backends: []Backend{{Address: netip.MustParseAddr("10.0.3.2"), Port: 80, Weight: 1}},
			Flows:    FlowsDaisyChain,
			History:  []Generation{{Until: time.Unix(1000, 0).UTC(), Backends: []Backend{{Address: netip.MustParseAddr("10.0.3.3"), Port: 80, Weight: 1}}}},
		}
	}
	med := uint32(5)
	edits := map[string]func(*Service){
		"Name":           func(s *Service) { s.Name = "b" },
		"VIP":            func(s *Service) { s.VIP = netip.MustParseAddr("10.99.0.2") },
		"Port":           func(s *Service) { s.Port = 81 },
		"Protocol":       func(s *Service) { s.Protocol = UDP },
		"SourceRanges":   func(s *Service) { s.SourceRanges = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")} },
		"Forwarding":     func(s *Service) { s.Forwarding = DSRIPIP },
		"TranslatePorts": func(s *Service) { s.TranslatePorts = true },
		"Backends":       func(s *Service) { s.Backends[0].HealthCheck.Rise = 3 },
		"Flows":          func(s *Service) { s.Flows = FlowsStateful },
		"Affinity":       func(s *Service) { s.Affinity = AffinityClientIP },
		"Announce":       func(s *Service) { s.Announce = AnnounceL2 },
		"History":        func(s *Service) { s.History[0].Until = s.History[0].Until.Add(time.Second) },
		"BGP":            func(s *Service) { s.BGP.MED = &med },
	}
	typ := reflect.TypeOf(Service{})
	for i := range typ.NumField() {
		if edits[typ.Field(i).Name] == nil {
			t.Errorf("Service.%s: no case here; make sameService compare it and add one", typ.Field(i).Name)
		}
	}
	if !sameService(base(), base()) {
		t.Fatal("a service is not the same as its copy")
	}
	for name, edit := range edits {
		s := base()
		s.Backends = slices.Clone(s.Backends)
		s.History = slices.Clone(s.History)
		edit(&s)
		if sameService(base(), s) || sameService(s, base()) {
			t.Errorf("%s differs, yet the services are the same", name)
		}
	}
	// History backends, and a time in another zone.
	s := base()
	s.History = []Generation{{Until: s.History[0].Until, Backends: nil}}
	if sameService(base(), s) {
		t.Error("a history's backends differ, yet the services are the same")
	}
	s = base()
	s.History = []Generation{{Until: s.History[0].Until.Local(), Backends: s.History[0].Backends}}
	if sameService(base(), s) {
		t.Error("the same instant in another zone counts as the same")
	}
}
