package config

import "net/netip"

// Announcements shape the node's routes beyond each service's bgp
// attributes: which peers get a VIP's route, and the aggregate routes.
// The Kubernetes source sets them from the BGPAdvertisements once the
// configuration is validated; a file never does (Render leaves them
// out), so a file's VIPs go to every peer.
type Announcements struct {
	// Peers lists, for each VIP it names, the only peers (by address)
	// its route goes to; an empty list: none. A VIP it does not name
	// goes to every peer.
	Peers map[netip.Addr][]netip.Addr
	// Aggregates are covering prefixes announced beside the VIPs.
	Aggregates []Aggregate
}

// Aggregate is a prefix that covers some VIPs, announced while the node
// can serve at least one of them.
type Aggregate struct {
	Prefix netip.Prefix
	Attrs  RouteAttributes
	// Peers are the only peers the route goes to; nil: every peer.
	Peers []netip.Addr
	// VIPs are the addresses that keep the route announced.
	VIPs []netip.Addr
}
