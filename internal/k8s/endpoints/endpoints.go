// Package endpoints reads EndpointSlices the one way both sides of xlb
// need it: the LB nodes (internal/k8s/source) make backends of the
// endpoints, and the Kubernetes nodes (internal/k8s/nodenat) translate
// VIP:port to them. Reading them with the same code keeps the two
// agreeing on which address serves a Service port, and at which port.
package endpoints

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/xlbproject/xlb/internal/config"
)

// State is what an endpoint's conditions allow; better states are
// higher.
type State int

const (
	// Gone: neither ready nor serving while terminating. Not a backend.
	Gone State = iota
	// Draining: serving and terminating, a Pod being deleted that still
	// passes its readiness probe. The LB gives it no table slots while
	// another endpoint is ready; its node still translates for it.
	Draining
	// Ready and not terminating.
	Ready
)

// StateOf reads an endpoint's conditions as the EndpointSlice API
// defines them: ready unset means ready; serving unset defers to ready;
// terminating unset means not terminating.
func StateOf(c discoveryv1.EndpointConditions) State {
	isReady := c.Ready == nil || *c.Ready
	serving := isReady
	if c.Serving != nil {
		serving = *c.Serving
	}
	terminating := c.Terminating != nil && *c.Terminating
	switch {
	case isReady && !terminating:
		return Ready
	case serving && terminating:
		return Draining
	}
	return Gone
}

// SlicePort returns the port an EndpointSlice gives for a Service port,
// matched by name and protocol as the EndpointSlice controller writes
// them; 0 if it has none.
func SlicePort(sl *discoveryv1.EndpointSlice, port corev1.ServicePort) uint16 {
	want := port.Protocol
	if want == "" {
		want = corev1.ProtocolTCP
	}
	for _, p := range sl.Ports {
		proto := corev1.ProtocolTCP
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		if name == port.Name && proto == want && p.Port != nil && *p.Port >= 1 && *p.Port <= 65535 {
			return uint16(*p.Port)
		}
	}
	return 0
}

// Endpoint is one address that serves a Service port.
type Endpoint struct {
	Addr  netip.Addr
	Port  uint16 // the target port the slices give for the Service port
	State State  // Ready or Draining
}

// Select returns the endpoints of one Service port, sorted by address:
// the IPv4 addresses (not 0.0.0.0) of the endpoints that are Ready or
// Draining and that keep accepts (nil keeps every one), at the port the
// EndpointSlices give for the Service port. An address listed more than
// once (slices overlap while the EndpointSlice controller moves
// endpoints) counts once: in its best state, then at its lowest port.
func Select(eps []*discoveryv1.EndpointSlice, port corev1.ServicePort, keep func(discoveryv1.Endpoint) bool) []Endpoint {
	return selectEndpoints(eps, port, keep, false)
}

// Listed is Select with the Gone endpoints too (State Gone): every
// address the slices list for the Service port. A node translates for
// its pods as soon as they are listed, before they are ready, so that
// the translation is in place when the LB nodes start sending (the two
// follow the slices independently). An address Select returns, Listed
// returns at the same port: a better state wins over a lower port.
func Listed(eps []*discoveryv1.EndpointSlice, port corev1.ServicePort, keep func(discoveryv1.Endpoint) bool) []Endpoint {
	return selectEndpoints(eps, port, keep, true)
}

// ListedOf is Listed over the slices of one address type, IPv4 or IPv6:
// a dual-stack Service's endpoints of its VIP's family.
func ListedOf(eps []*discoveryv1.EndpointSlice, port corev1.ServicePort, keep func(discoveryv1.Endpoint) bool, family discoveryv1.AddressType) []Endpoint {
	return selectFamily(eps, port, keep, true, family)
}

func selectEndpoints(eps []*discoveryv1.EndpointSlice, port corev1.ServicePort, keep func(discoveryv1.Endpoint) bool, gone bool) []Endpoint {
	return selectFamily(eps, port, keep, gone, discoveryv1.AddressTypeIPv4)
}

// selectFamily is selectEndpoints over the slices of one address type,
// IPv4 or IPv6 (a dual-stack Service has slices of each).
func selectFamily(eps []*discoveryv1.EndpointSlice, port corev1.ServicePort, keep func(discoveryv1.Endpoint) bool, gone bool, family discoveryv1.AddressType) []Endpoint {
	best := map[netip.Addr]Endpoint{}
	for _, sl := range eps {
		if sl.AddressType != family {
			continue
		}
		target := SlicePort(sl, port)
		if target == 0 {
			continue
		}
		for _, ep := range sl.Endpoints {
			state := StateOf(ep.Conditions)
			if state == Gone && !gone || keep != nil && !keep(ep) {
				continue
			}
			for _, s := range ep.Addresses {
				a, err := netip.ParseAddr(s)
				if err != nil || a.IsUnspecified() || a.Zone() != "" || a.Is4In6() ||
					a.Is4() != (family == discoveryv1.AddressTypeIPv4) {
					continue
				}
				if old, ok := best[a]; ok && (old.State > state || old.State == state && old.Port <= target) {
					continue
				}
				best[a] = Endpoint{Addr: a, Port: target, State: state}
			}
		}
	}
	out := make([]Endpoint, 0, len(best))
	for _, e := range best {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Endpoint) int { return a.Addr.Compare(b.Addr) })
	return out
}

// OnNode keeps the endpoints whose nodeName is node, for Select.
func OnNode(node string) func(discoveryv1.Endpoint) bool {
	return func(ep discoveryv1.Endpoint) bool { return ep.NodeName != nil && *ep.NodeName == node }
}

// ServiceIndex is a cache index function for EndpointSlices: the
// "namespace/name" of the Service a slice belongs to (its
// kubernetes.io/service-name label), none for a slice without one.
func ServiceIndex(obj any) ([]string, error) {
	sl, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	name := sl.Labels[discoveryv1.LabelServiceName]
	if name == "" {
		return nil, nil
	}
	return []string{sl.Namespace + "/" + name}, nil
}

// Backends returns the xlb backends of one Service port: the IPv4
// addresses of the endpoints that are ready (weight 1) or serving while
// terminating (weight 0: no new flows), at the port the EndpointSlices
// give for it (the targetPort). If no endpoint is ready, the terminating
// ones that still serve take new flows, as kube-proxy does: better than
// none. An address listed twice (slices overlap while the controller
// moves endpoints) counts once, in its best state. The agents' services
// and the controller's endpoint history (internal/k8s/history) both come
// from here, so they name the same sets.
func Backends(eps []*discoveryv1.EndpointSlice, port corev1.ServicePort) []config.Backend {
	return BackendsOf(eps, port, discoveryv1.AddressTypeIPv4)
}

// BackendsOf is Backends over the EndpointSlices of one address type
// (IPv4 or IPv6): the backends of the Service's VIP of that family.
func BackendsOf(eps []*discoveryv1.EndpointSlice, port corev1.ServicePort, family discoveryv1.AddressType) []config.Backend {
	sel := selectFamily(eps, port, nil, false, family)
	anyReady := slices.ContainsFunc(sel, func(e Endpoint) bool { return e.State == Ready })
	out := make([]config.Backend, 0, len(sel))
	for _, e := range sel {
		w := uint32(1)
		if e.State == Draining && anyReady {
			w = 0
		}
		out = append(out, config.Backend{Address: e.Addr, Port: e.Port, Weight: w, HealthCheck: config.HealthCheck{Type: config.CheckNone}})
	}
	return out
}

// Protocol is the protocol of a Service port as xlb serves it: TCP (also
// when the port names none, the API's default) or UDP. ok is false for
// any other (SCTP): xlb does not serve such a port. The LB nodes, the
// controller's endpoint history and the Kubernetes nodes all read a port
// through it, so they serve the same ports.
func Protocol(p corev1.Protocol) (proto config.Protocol, ok bool) {
	switch p {
	case corev1.ProtocolTCP, "":
		return config.TCP, true
	case corev1.ProtocolUDP:
		return config.UDP, true
	}
	return "", false
}
