package config

import (
	"reflect"
	"slices"
)

// Validator validates one configuration after another, each as Validate
// would, and reuses what it found for the services that are as they were
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
// of backend entries. Validate checks the new and changed services, in a
// configuration of their own. Whenever anything fails, or the shortcut
// does not apply, the whole configuration goes through Validate, so every
// error is Validate's own. TestValidatorAgreesWithValidate holds the two
// together.
//
// A result shares the unchanged services with earlier results; like
// Validate's, it must not be modified. A Validator is not safe for
// concurrent use.
type Validator struct {
	rest    *Config            // the last accepted input, without its services
	checked *Config            // Validate's result for it, without its services
	known   map[string]checked // by name: the last accepted input's services
}

// checked is a service as given, and as Validate returned it.
type checked struct {
	in, out Service
}

// Validate returns Validate(name, c), reusing the checks of unchanged
// services when it can.
func (v *Validator) Validate(name string, c *Config) (*Config, error) {
	if out, ok := v.quick(name, c); ok {
		return out, nil
	}
	out, err := Validate(name, c)
	if err != nil {
		return nil, err
	}
	v.remember(c, out)
	return out, nil
}

// quick validates c from the last accepted configuration, or reports
// that it cannot.
func (v *Validator) quick(name string, c *Config) (*Config, bool) {
	if v.rest == nil || c == nil || len(c.Services) == 0 || len(c.Services) > MaxServices {
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
		out, err := Validate(name, &part)
		if err != nil || len(out.Services) != len(changed) {
			return nil, false
		}
		for j, i := range changed {
			services[i] = out.Services[j]
		}
	}
	// The checks across services (decoder.services).
	names := make(map[string]bool, len(services))
	keys := make(map[Key]bool, len(services))
	entries := 0
	for _, s := range services {
		if names[s.Name] || keys[s.Key()] {
			return nil, false
		}
		names[s.Name], keys[s.Key()] = true, true
		entries += len(s.Backends)
	}
	if entries > int(v.checked.Dataplane.MaxBackends) {
		return nil, false
	}
	out := *v.checked
	out.Services = services
	v.remember(c, &out)
	return &out, true
}

// remember makes c, which Validate accepted as out, the last accepted
// configuration.
func (v *Validator) remember(c, out *Config) {
	rest, result := *c, *out
	rest.Services, result.Services = nil, nil
	v.rest, v.checked = &rest, &result
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
// Validate, neither with route attributes (quick takes no other). It is
// reflect.DeepEqual without reflection, which cost a third of a build of
// 1000 services; TestSameServiceCoversEveryField fails when Service gains
// a field this does not compare.
func sameService(a, b Service) bool {
	return a.Name == b.Name && a.VIP == b.VIP && a.Port == b.Port && a.Protocol == b.Protocol &&
		a.Forwarding == b.Forwarding && a.TranslatePorts == b.TranslatePorts && a.Flows == b.Flows &&
		slices.Equal(a.Backends, b.Backends) &&
		slices.EqualFunc(a.History, b.History, func(x, y Generation) bool {
			return x.Until.Equal(y.Until) && x.Until.Location() == y.Until.Location() && slices.Equal(x.Backends, y.Backends)
		}) &&
		a.BGP.IsZero() && b.BGP.IsZero()
}
