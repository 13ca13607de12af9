package nodenat

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/xlbproject/xlb/internal/backendhost"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/internal/k8s/api"
	"github.com/xlbproject/xlb/internal/k8s/endpoints"
)

// input is what one translation reads: the informers' caches, or fixtures.
type input struct {
	node           string
	serveClassless bool
	// local are the node's own addresses: an endpoint with one of them
	// is a hostNetwork pod, which the data plane cannot tell apart from
	// a tunnel to the node itself.
	local    []netip.Addr
	services []*corev1.Service
	nodes    []*corev1.Node
	// slices returns the EndpointSlices of a Service.
	slices func(namespace, name string) []*discoveryv1.EndpointSlice
}

// served reports whether xlb serves svc: type LoadBalancer, of xlb's
// class, or of none when classless ones are served too.
func served(svc *corev1.Service, classless bool) bool {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return false
	}
	if c := svc.Spec.LoadBalancerClass; c != nil {
		return *c == api.LoadBalancerClass
	}
	return classless
}

// ingressIPs returns the addresses of the Service's
// status.loadBalancer.ingress, IPv4 and IPv6 (a dual-stack Service has
// one of each), in order, without repeats. Every one is translated: an
// entry the LB never uses costs a map slot, a missing one would drop
// traffic.
func ingressIPs(svc *corev1.Service) []netip.Addr {
	var out []netip.Addr
	for _, in := range svc.Status.LoadBalancer.Ingress {
		a, err := netip.ParseAddr(in.IP)
		if err != nil || a.IsUnspecified() || a.Zone() != "" || a.Is4In6() || slices.Contains(out, a) {
			continue
		}
		out = append(out, a)
	}
	return out
}

// problem is something translate left out, and what to do about it.
type problem struct {
	msg, fix string
}

// translate computes the node's translations: for every served Service
// with an address, every TCP or UDP port, every endpoint the slices list
// on this node, one entry per VIP of the endpoint's family. Not only ready ones: a pod that is not
// ready yet has its translation by the time it is, before the LB nodes
// (which follow the slices on their own) start sending to it, and one
// that turned unready keeps it for the connections it still has. The
// result is sorted and valid for backendhost.SetNAT: no (VIP, port,
// protocol, pod) maps to two target ports. problems says what was left
// out and why, for the log.
func translate(in input) ([]backendhost.NATEntry, []problem) {
	svcs := slices.Clone(in.services)
	// The oldest Service wins a VIP:port both claim, as on the LB side
	// (internal/k8s/source): the node translates what the LB forwards.
	slices.SortFunc(svcs, func(a, b *corev1.Service) int {
		return cmp.Or(a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time),
			cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	type svcPort struct {
		vip   netip.Addr
		port  uint16
		proto uint8
	}
	owner := map[svcPort]string{}
	// A (VIP, port, protocol, pod) gets one target port, the first:
	// SetNAT refuses a list with two.
	type natKey struct {
		svcPort
		pod netip.Addr
	}
	seen := map[natKey]bool{}
	var out []backendhost.NATEntry
	var probs []problem
	for _, svc := range svcs {
		if !served(svc, in.serveClassless) {
			continue
		}
		vips := ingressIPs(svc)
		if len(vips) == 0 {
			continue // no address assigned yet: nothing reaches the node
		}
		if fwd, _, err := api.ForwardingOf(svc); err == nil && fwd.Translates() {
			// The load-balancer node rewrites to the pods itself: no
			// tunnel reaches this node for them. (A value that names no
			// mode may leave the Service forwarded by DSR: translated.)
			continue
		}
		name := svc.Namespace + "/" + svc.Name
		var eps []*discoveryv1.EndpointSlice
		if in.slices != nil {
			eps = in.slices(svc.Namespace, svc.Name)
		}
		for _, port := range svc.Spec.Ports {
			proto, ok := protocol(port.Protocol)
			if !ok || port.Port < 1 || port.Port > 65535 {
				continue // SCTP: the LB side reports it; the API rejects bad ports
			}
			// A VIP is translated for the pods of its family: the LB
			// forwards an IPv6 VIP to the Service's IPv6 endpoints.
			pods := map[bool][]endpoints.Endpoint{}
			for _, vip := range vips {
				if _, ok := pods[vip.Is6()]; !ok {
					family := discoveryv1.AddressTypeIPv4
					if vip.Is6() {
						family = discoveryv1.AddressTypeIPv6
					}
					pods[vip.Is6()] = endpoints.ListedOf(eps, port, endpoints.OnNode(in.node), family)
				}
				k := svcPort{vip, uint16(port.Port), proto}
				if o, taken := owner[k]; taken && o != name {
					probs = append(probs, problem{fmt.Sprintf("Service %s: %v:%d/%s is already served by the older Service %s; not translated", name, vip, port.Port, protoName(proto), o),
						"give one of the two Services another address or port; the load balancer forwards this VIP:port to the older one only"})
					continue
				}
				owner[k] = name
				for _, p := range pods[vip.Is6()] {
					switch {
					case slices.Contains(in.local, p.Addr):
						probs = append(probs, problem{fmt.Sprintf("Service %s: endpoint %v is an address of this node (a hostNetwork pod?): the node cannot translate to itself; not translated", name, p.Addr),
							"run the Service's pods without hostNetwork: a tunnel to them cannot be told from a tunnel to the node itself"})
						continue
					case p.Addr == vip:
						probs = append(probs, problem{fmt.Sprintf("Service %s: endpoint %v is the Service's own address; not translated", name, p.Addr),
							"take the Service's address out of the pod network (change the AddressPool), or correct the EndpointSlice that lists it"})
						continue
					}
					nk := natKey{k, p.Addr}
					if seen[nk] {
						continue
					}
					seen[nk] = true
					out = append(out, backendhost.NATEntry{VIP: vip, Port: uint16(port.Port), Proto: proto, PodIP: p.Addr, TargetPort: p.Port})
				}
			}
		}
	}
	slices.SortFunc(out, compareEntries)
	slices.SortFunc(probs, func(a, b problem) int { return strings.Compare(a.msg, b.msg) })
	return out, slices.Compact(probs)
}

func compareEntries(a, b backendhost.NATEntry) int {
	return cmp.Or(a.VIP.Compare(b.VIP), cmp.Compare(a.Port, b.Port), cmp.Compare(a.Proto, b.Proto),
		a.PodIP.Compare(b.PodIP), cmp.Compare(a.TargetPort, b.TargetPort))
}

func protocol(p corev1.Protocol) (uint8, bool) {
	proto, ok := endpoints.Protocol(p)
	switch {
	case !ok:
		return 0, false
	case proto == config.UDP:
		return wire.ProtoUDP, true
	}
	return wire.ProtoTCP, true
}

func protoName(p uint8) string {
	if p == wire.ProtoUDP {
		return string(config.UDP)
	}
	return string(config.TCP)
}

// onNode reports whether an EndpointSlice lists an endpoint on node: only
// then can a change to it change the node's translations.
func onNode(sl *discoveryv1.EndpointSlice, node string) bool {
	for _, ep := range sl.Endpoints {
		if ep.NodeName != nil && *ep.NodeName == node {
			return true
		}
	}
	return false
}
