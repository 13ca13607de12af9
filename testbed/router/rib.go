package router

import (
	"fmt"
	"net/netip"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"
)

// How the router learns every path of a prefix, not just the best one.
//
// GoBGP keeps all paths of a destination in its global RIB, sorted best
// first, but by default tells watchers and ListPath only about the best.
// With Global.UseMultiplePaths it also computes the multipath set: the
// best path and every path that ties with it on GoBGP's comparison
// (locally originated, eBGP over iBGP, LOCAL_PREF, AS_PATH length,
// ORIGIN, MED; not router ID or peer address, which only break ties for
// the single best). ListPath on the global table then flags each member
// of that set Best. That set is exactly what ECMP may use: a node that
// announces a worse path (longer AS path, higher MED) stays out of the
// route until the better ones are gone, like in any router.
//
// Two other mechanisms were rejected:
//   - The OnBestPath callback of WatchEvent does carry multipath
//     changes, but flattened into one list of deltas (withdrawn members
//     and new or changed members, see locRIBPathsForBMP in GoBGP) without
//     saying which prefix's set is now complete; rebuilding the sets from
//     deltas is fragile across peer resets and implicit withdraws.
//   - Watching Adj-RIB-In updates (WatchUpdate plus WatchAdjInWithdraw)
//     sees every received path but skips import policy and best-path
//     rules, so the router would have to re-implement both.
//
// So the router is event-driven but level-triggered: any best-path or
// peer event (never a timer) marks the RIB changed; one goroutine then
// reads the multipath sets with ListPath and reconciles the kernel with
// them. A burst of events costs one read, and a lost or reordered event
// cannot leave a stale next hop behind.
//
// AddPaths (RFC 7911) is not needed for this: it lets a peer send several
// paths for one prefix over one session (a route reflector's clients),
// whereas here each xlb node is its own peer with one path.
//
// Beware that GoBGP keeps UseMultiplePaths in a package variable
// (table.UseMultiplePaths), written by every StartBgp: two BgpServers in
// one process share it, and the last one started wins. The router must
// therefore be the only GoBGP server of its process (xlb lab router is).

// candidate is one path of the global RIB as far as the FIB cares.
type candidate struct {
	multipath bool       // member of GoBGP's multipath set (ListPath's Best flag)
	peer      netip.Addr // the neighbour that announced it
	nexthop   netip.Addr // its BGP NEXT_HOP
}

// selectNexthops returns the next hops of a prefix's multipath set,
// normalized, leaving out every path that was announced by or points at
// a failed peer (see Router.PeerFailed).
func selectNexthops(paths []candidate, failed map[netip.Addr]bool) []netip.Addr {
	var hops []netip.Addr
	for _, p := range paths {
		if !p.multipath || failed[p.peer] || failed[p.nexthop] {
			continue
		}
		hops = append(hops, p.nexthop)
	}
	return normalize(hops)
}

// ribRoutes reads the multipath set of every IPv4 and IPv6 unicast
// prefix from the global RIB and returns the next hops each should be
// routed over.
func ribRoutes(s *server.BgpServer, failed map[netip.Addr]bool) (map[netip.Prefix][]netip.Addr, error) {
	routes := make(map[netip.Prefix][]netip.Addr)
	for _, fam := range []bgp.Family{bgp.RF_IPv4_UC, bgp.RF_IPv6_UC} {
		if err := ribFamily(s, fam, failed, routes); err != nil {
			return nil, err
		}
	}
	return routes, nil
}

// ribFamily adds the routes of one address family to routes.
func ribFamily(s *server.BgpServer, fam bgp.Family, failed map[netip.Addr]bool, routes map[netip.Prefix][]netip.Addr) error {
	var bad error
	err := s.ListPath(apiutil.ListPathRequest{
		TableType: api.TableType_TABLE_TYPE_GLOBAL,
		Family:    fam,
	}, func(nlri bgp.NLRI, paths []*apiutil.Path) {
		n, ok := nlri.(*bgp.IPAddrPrefix)
		if !ok {
			bad = fmt.Errorf("unexpected NLRI %T (%v) in the %s table", nlri, nlri, fam)
			return
		}
		cands := make([]candidate, 0, len(paths))
		for _, p := range paths {
			if p.Withdrawal || p.IsNexthopInvalid {
				continue
			}
			cands = append(cands, candidate{multipath: p.Best, peer: p.PeerAddress.Unmap(), nexthop: nexthopOf(p.Attrs)})
		}
		if hops := selectNexthops(cands, failed); len(hops) > 0 {
			routes[n.Prefix.Masked()] = hops
		}
	})
	if err != nil {
		return fmt.Errorf("read the BGP table (%s): %w", fam, err)
	}
	return bad
}

// nexthopOf returns a path's next hop: the NEXT_HOP attribute for IPv4,
// or the one in MP_REACH_NLRI where a peer sent it there.
func nexthopOf(attrs []bgp.PathAttributeInterface) netip.Addr {
	for _, a := range attrs {
		switch a := a.(type) {
		case *bgp.PathAttributeNextHop:
			return a.Value.Unmap()
		case *bgp.PathAttributeMpReachNLRI:
			return a.Nexthop.Unmap()
		}
	}
	return netip.Addr{}
}
