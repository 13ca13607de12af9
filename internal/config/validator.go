package config

import (
	"net/netip"
	"reflect"
	"slices"
)

// Validator validates one configuration after another, each as
// ValidateConfig would, and reuses what it found for the services that are as they were
// in the last configuration it accepted. A cluster's configuration is
// built anew for every change and differs from the one before in a
// service or two: checking a thousand unchanged services again took most
// of the time from an EndpointSlice change to its configuration
// (bench/k8sbench).
//
// The shortcut applies when everything but the services is as before and
// no service writes route attributes (they reach other services of the
// same VIP). Then every service's check depends on that service alone,
// apart from the checks across services, which Validator repeats itself:
// unique names, unique VIP, port and protocol, the number of services and
// of backend entries, no backend at any service's VIP. ValidateConfig
// checks the new and changed services, in a configuration of their own.
// Whenever anything fails, or the shortcut does not apply, the whole
// configuration goes through ValidateConfig, so every error is its own.
// TestValidatorAgreesWithValidate holds the two together.
//
// A result shares the unchanged services with earlier results; like
// ValidateConfig's, it must not be modified. A Validator is not safe for
// concurrent use.
type Validator struct {
	rest    *Config            // the last accepted input, without its services
	checked *Config            // Validate's result for it, without its services
	known   map[string]checked // by name: the last accepted input's services
	host    *Host              // the host it was checked for
	vips    map[netip.Addr]bool
}

// checked is a service as given, and as ValidateConfig returned it.
type checked struct {
	in, out Service
}

// Validate returns ValidateConfig(c, env), reusing the checks of
// unchanged services when env.Host is the host of the last accepted
// configuration.
func (v *Validator) Validate(c *Config, env Env) (*Config, error) {
	if out, ok := v.quick(c, env); ok {
		return out, nil
	}
	out, err := ValidateConfig(c, env)
	if err != nil {
		return nil, err
	}
	v.remember(c, out, env.Host, nil)
	return out, nil
}

// quick validates c from the last accepted configuration, or reports
// that it cannot.
func (v *Validator) quick(c *Config, env Env) (*Config, bool) {
	h := env.Host
	if v.rest == nil || c == nil || len(c.Services) == 0 || len(c.Services) > MaxServices || !h.equal(v.host) {
		return nil, false
	}
	rest := *c
	rest.Services = nil
	if !reflect.DeepEqual(&rest, v.rest) {
		return nil, false
	}
	services := make([]Service, len(c.Services))
	var changed []int
	for i, s := range c.Services {
		if !s.BGP.IsZero() {
			return nil, false
		}
		if k, ok := v.known[s.Name]; ok && sameService(k.in, s) {
			services[i] = k.out
			continue
		}
		changed = append(changed, i)
	}
	if len(changed) > 0 {
		part := rest
		part.Services = make([]Service, 0, len(changed))
		for _, i := range changed {
			part.Services = append(part.Services, c.Services[i])
		}
		out, err := ValidateConfig(&part, env)
		if err != nil || len(out.Services) != len(changed) {
			return nil, false
		}
		for j, i := range changed {
			services[i] = out.Services[j]
		}
	}
	// The checks across services (checker.services).
	names := make(map[string]bool, len(services))
	keys := make(map[Key]bool, len(services))
	announce := make(map[netip.Addr]Announce, len(services))
	entries := 0
	for _, s := range services {
		if names[s.Name] || keys[s.Key()] {
			return nil, false
		}
		// Services of one VIP that disagree on announce: ValidateConfig
		// makes them all l2.
		if a, ok := announce[s.VIP]; ok && a != s.Announce {
			return nil, false
		}
		names[s.Name], keys[s.Key()], announce[s.VIP] = true, true, s.Announce
		entries += len(s.Backends)
	}
	if entries > int(v.checked.Dataplane.MaxBackends) {
		return nil, false
	}
	// No backend at a VIP: the changed services' backends against every
	// VIP, the unchanged ones' against the VIPs they were not checked
	// against (new ones), if any.
	vips := vipSet(services)
	for _, i := range changed {
		if atVIP(services[i], vips) {
			return nil, false
		}
	}
	var fresh map[netip.Addr]bool
	for a := range vips {
		if !v.vips[a] {
			if fresh == nil {
				fresh = map[netip.Addr]bool{}
			}
			fresh[a] = true
		}
	}
	if fresh != nil {
		for _, s := range services {
			if atVIP(s, fresh) {
				return nil, false
			}
		}
	}
	out := *v.checked
	out.Services = services
	v.remember(c, &out, h, vips)
	return &out, true
}

func vipSet(services []Service) map[netip.Addr]bool {
	out := make(map[netip.Addr]bool, len(services))
	for _, s := range services {
		out[s.VIP] = true
	}
	return out
}

// atVIP reports whether a backend of s, current or earlier, is in vips.
func atVIP(s Service, vips map[netip.Addr]bool) bool {
	for _, b := range s.Backends {
		if vips[b.Address] {
			return true
		}
	}
	for _, g := range s.History {
		for _, b := range g.Backends {
			if vips[b.Address] {
				return true
			}
		}
	}
	return false
}

// remember makes c, which ValidateConfig accepted as out for host h, the last
// accepted configuration; vips are its services' VIPs (nil: not known
// yet).
func (v *Validator) remember(c, out *Config, h *Host, vips map[netip.Addr]bool) {
	rest, result := *c, *out
	rest.Services, result.Services = nil, nil
	if vips == nil {
		vips = vipSet(out.Services)
	}
	v.rest, v.checked, v.host, v.vips = &rest, &result, h, vips
	v.known = make(map[string]checked, len(c.Services))
	for i, s := range c.Services {
		// A service with route attributes, its own or another's of the
		// same VIP, is checked again: quick applies only when no service
		// writes any, and then this one would have none.
		if out.Services[i].BGP.IsZero() {
			v.known[s.Name] = checked{in: s, out: out.Services[i]}
		}
	}
}

// sameService reports whether a and b are the same service, as given to
// ValidateConfig, neither with route attributes (quick takes no other). It is
// reflect.DeepEqual without reflection, which cost a third of a build of
// 1000 services; TestSameServiceCoversEveryField fails when Service gains
// a field this does not compare.
func sameService(a, b Service) bool {
	return a.Name == b.Name && a.VIP == b.VIP && a.Port == b.Port && a.Protocol == b.Protocol &&
		a.Forwarding == b.Forwarding && a.TranslatePorts == b.TranslatePorts && a.Flows == b.Flows && a.Affinity == b.Affinity && a.Announce == b.Announce &&
		slices.Equal(a.SourceRanges, b.SourceRanges) &&
		slices.Equal(a.Backends, b.Backends) &&
		slices.EqualFunc(a.History, b.History, func(x, y Generation) bool {
			return x.Until.Equal(y.Until) && x.Until.Location() == y.Until.Location() && slices.Equal(x.Backends, y.Backends)
		}) &&
		a.BGP.IsZero() && b.BGP.IsZero()
}
