package announce

import (
	"net/netip"
	"slices"

	"github.com/xlbproject/xlb/internal/bgp"
	"github.com/xlbproject/xlb/internal/config"
)

// Shape applies ann (the BGPAdvertisements' part of a configuration;
// nil: none) to the planned routes: a VIP it names goes to its peers
// alone, or to none, and each aggregate is added, served while at least
// one of its VIPs is.
func Shape(routes []Route, ann *config.Announcements) []Route {
	if ann == nil {
		return routes
	}
	out := slices.Clone(routes)
	serve := make(map[netip.Addr]bool, len(routes))
	for i, r := range out {
		if !r.Prefix.IsSingleIP() {
			continue
		}
		serve[r.Prefix.Addr()] = r.Serve
		peers, ok := ann.Peers[r.Prefix.Addr()]
		if !ok {
			continue
		}
		out[i].Peers = append([]netip.Addr{}, peers...)
		if len(peers) == 0 && r.Serve {
			out[i].Serve, out[i].Why = false, "no BGPAdvertisement sends it to a peer of this node (an aggregate may cover it)"
		}
	}
	for _, g := range ann.Aggregates {
		r := Route{Prefix: g.Prefix, Attrs: g.Attrs, Why: "no address it covers is served by this node"}
		if g.Peers != nil {
			r.Peers = append([]netip.Addr{}, g.Peers...)
		}
		r.Serve = slices.ContainsFunc(g.VIPs, func(v netip.Addr) bool { return serve[v] })
		if r.Serve {
			r.Why = ""
		}
		out = append(out, r)
	}
	return out
}

// withPeers restricts a to peers (nil: every peer).
func withPeers(a bgp.Attributes, peers []netip.Addr) bgp.Attributes {
	if peers != nil {
		a.Peers = slices.Clone(peers)
	}
	return a
}
