package nodenat

import (
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/xlbproject/xlb/internal/k8s/api"
	"github.com/xlbproject/xlb/internal/k8s/history"
)

// The daisy-chaining sets as the cluster tells them (decap.Chain):
//
//   - From, the xlb nodes whose packets may be chained: the InternalIP
//     and ExternalIP addresses of every Node, of either family (an agent
//     tunnels to an IPv6 pod from its Node's IPv6 address). The agents run on Nodes of
//     the cluster and tunnel from their address; which Nodes run one is
//     the agent DaemonSet's nodeSelector, which the cluster does not
//     tell the backend, and the whole set keeps a packet from outside
//     the cluster from ever being chained.
//   - To, the backends that may be a slot's previous owner: every
//     address the EndpointSlices of a served Service list, IPv4 and IPv6 (on any node,
//     in any condition), the addresses of the served Services' endpoint
//     history (the previous owners the agents hint with, written by the
//     leader controller), and the Nodes' addresses (backends with the
//     VIPs on lo, hostNetwork pods). An address that leaves the set stays
//     in it for the chain window, as a departed pod's translation does:
//     the agents still name it in their hints meanwhile.
//
// Both are single addresses (/32, /128). Options.ChainFrom and ChainTo
// add to them.

// nodeAddrs returns the InternalIP and ExternalIP addresses of nodes,
// IPv4 and global IPv6, sorted, without repeats.
func nodeAddrs(nodes []*corev1.Node) []netip.Addr {
	var out []netip.Addr
	for _, n := range nodes {
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
				continue
			}
			if ip, err := netip.ParseAddr(a.Address); err == nil && host(ip) {
				out = append(out, ip)
			}
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// host reports whether a may be a tunnel's outer address: IPv4, or a
// global IPv6 address (tunnels never come from or go to a link-local
// one), neither unspecified nor IPv4-mapped.
func host(a netip.Addr) bool {
	return !a.IsUnspecified() && a.Zone() == "" && !a.Is4In6() && !a.IsLinkLocalUnicast() && !a.IsMulticast()
}

// endpointAddrs returns every address that the EndpointSlices of the
// served Services list (IPv4 and IPv6), and that their endpoint history
// names, sorted, without repeats.
func endpointAddrs(in input) []netip.Addr {
	var out []netip.Addr
	for _, svc := range in.services {
		if !served(svc, in.serveClassless) {
			continue
		}
		if in.slices != nil {
			for _, sl := range in.slices(svc.Namespace, svc.Name) {
				if sl.AddressType != discoveryv1.AddressTypeIPv4 && sl.AddressType != discoveryv1.AddressTypeIPv6 {
					continue
				}
				for _, ep := range sl.Endpoints {
					for _, s := range ep.Addresses {
						if a, err := netip.ParseAddr(s); err == nil && host(a) {
							out = append(out, a)
						}
					}
				}
			}
		}
		// An unreadable history is reported by the agents, which
		// read it for their hints; here it only adds nothing.
		if v, ok := svc.Annotations[api.AnnotationEndpointHistory]; ok {
			if h, err := history.Parse(v); err == nil {
				for _, g := range h.Past {
					for _, set := range g.Sets {
						for _, b := range set {
							out = append(out, b.Address)
						}
					}
				}
			}
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// chainSets returns the sets of the cluster, each with extra added,
// sorted, as single-address prefixes (/32, /128) for the addresses.
func chainSets(in input, extraFrom, extraTo []netip.Prefix) (from, to []netip.Prefix) {
	nodes := nodeAddrs(in.nodes)
	from = appendHosts(slices.Clone(extraFrom), nodes)
	to = appendHosts(appendHosts(slices.Clone(extraTo), nodes), endpointAddrs(in))
	return sortPrefixes(from), sortPrefixes(to)
}

func appendHosts(out []netip.Prefix, addrs []netip.Addr) []netip.Prefix {
	for _, a := range addrs {
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out
}

func sortPrefixes(ps []netip.Prefix) []netip.Prefix {
	slices.SortFunc(ps, comparePrefixes)
	return slices.Compact(ps)
}

func comparePrefixes(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

// prefixLinger keeps the prefixes that left a set for keep after they
// left, as lingering does for translations.
type prefixLinger struct {
	keep  time.Duration
	last  []netip.Prefix
	until map[netip.Prefix]time.Time
}

func newPrefixLinger(keep time.Duration) *prefixLinger {
	return &prefixLinger{keep: keep, until: map[netip.Prefix]time.Time{}}
}

// merge returns current (sorted) with the departed prefixes that have
// not expired at now, sorted.
func (l *prefixLinger) merge(current []netip.Prefix, now time.Time) []netip.Prefix {
	if l.keep <= 0 {
		return current
	}
	cur := make(map[netip.Prefix]bool, len(current))
	for _, p := range current {
		cur[p] = true
		delete(l.until, p)
	}
	for _, p := range l.last {
		if _, ok := l.until[p]; !ok && !cur[p] {
			l.until[p] = now.Add(l.keep)
		}
	}
	l.last = current
	out := slices.Clone(current)
	for p, t := range l.until {
		if !now.Before(t) {
			delete(l.until, p)
			continue
		}
		out = append(out, p)
	}
	return sortPrefixes(out)
}

// next returns the earliest expiry of a departed prefix.
func (l *prefixLinger) next() (time.Time, bool) {
	var first time.Time
	for _, t := range l.until {
		if first.IsZero() || t.Before(first) {
			first = t
		}
	}
	return first, !first.IsZero()
}
