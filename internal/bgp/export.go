package bgp

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/server"
)

// A route with Attributes.Peers goes to those peers alone. GoBGP has one
// RIB whose best path goes to every peer, and per-peer policies only for
// route-server clients; so the speaker keeps a global export policy with
// one statement per set of peers: "a prefix of the set's routes, sent to
// a peer that is not one of them: reject". The policy is rebuilt whole
// under a new name when the routes' peer sets or the peers change, and
// swapped in with one assignment; the sessions are then refreshed
// (a soft reset out), which withdraws what the new policy rejects and
// sends what it now lets through.

// exportPrefix names the policy and its sets: exportPrefix-GEN...
const exportPrefix = "xlb-export"

// exportState is the installed export policy.
type exportState struct {
	gen    uint64
	sig    string // what it was built from; "" when none is installed
	policy string // its name; "" without statements
	sets   []*api.DefinedSet
}

// exportGroup is the prefixes that go to one set of peers, by the
// addresses GoBGP knows the peers under.
type exportGroup struct {
	allowed  []string // neighbor-set entries, "ADDR/32" or "ADDR/128"
	prefixes []netip.Prefix
}

// exportGroups groups the restricted routes by their peers. The caller
// holds mu.
func (s *Speaker) exportGroups() []exportGroup {
	byKey := map[string]*exportGroup{}
	for p, a := range s.routes {
		if !a.only {
			continue
		}
		var allowed []string
		for _, addr := range a.peers {
			r := s.peers[addr]
			if r == nil {
				continue // not a peer (yet): nothing to let through
			}
			g := addr
			if s.relay != nil && !r.cfg.Passive {
				g = r.standIn
			}
			allowed = append(allowed, netip.PrefixFrom(g, g.BitLen()).String())
		}
		slices.Sort(allowed)
		key := strings.Join(allowed, ",")
		e := byKey[key]
		if e == nil {
			e = &exportGroup{allowed: allowed}
			byKey[key] = e
		}
		e.prefixes = append(e.prefixes, p)
	}
	out := make([]exportGroup, 0, len(byKey))
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range byKey {
			if !yield(k) {
				return
			}
		}
	}) {
		e := byKey[k]
		slices.SortFunc(e.prefixes, func(a, b netip.Prefix) int {
			if c := a.Addr().Compare(b.Addr()); c != 0 {
				return c
			}
			return a.Bits() - b.Bits()
		})
		out = append(out, *e)
	}
	return out
}

func exportSignature(groups []exportGroup) string {
	var b strings.Builder
	for _, g := range groups {
		b.WriteString(strings.Join(g.allowed, ","))
		b.WriteByte('>')
		for _, p := range g.prefixes {
			b.WriteString(p.String())
			b.WriteByte(' ')
		}
		b.WriteByte(';')
	}
	return b.String()
}

// syncExport installs the export policy the routes and peers ask for,
// unless it is installed already; changed reports a new one, after
// which the established sessions need a refresh (refreshOut). The caller
// holds opMu.
func (s *Speaker) syncExport(ctx context.Context, srv *server.BgpServer) (changed bool, err error) {
	s.mu.Lock()
	groups := s.exportGroups()
	old := s.export
	s.mu.Unlock()
	sig := exportSignature(groups)
	if sig == old.sig {
		return false, nil
	}
	gen := old.gen + 1
	name := fmt.Sprintf("%s-%d", exportPrefix, gen)
	var sets []*api.DefinedSet
	var stmts []*api.Statement
	for i, g := range groups {
		ps := &api.DefinedSet{DefinedType: api.DefinedType_DEFINED_TYPE_PREFIX, Name: fmt.Sprintf("%s-p%d", name, i)}
		for _, p := range g.prefixes {
			ps.Prefixes = append(ps.Prefixes, &api.Prefix{IpPrefix: p.String(), MaskLengthMin: uint32(p.Bits()), MaskLengthMax: uint32(p.Bits())})
		}
		sets = append(sets, ps)
		cond := &api.Conditions{PrefixSet: &api.MatchSet{Type: api.MatchSet_TYPE_ANY, Name: ps.Name}}
		if len(g.allowed) > 0 {
			ns := &api.DefinedSet{DefinedType: api.DefinedType_DEFINED_TYPE_NEIGHBOR, Name: fmt.Sprintf("%s-n%d", name, i), List: g.allowed}
			sets = append(sets, ns)
			cond.NeighborSet = &api.MatchSet{Type: api.MatchSet_TYPE_INVERT, Name: ns.Name}
		}
		stmts = append(stmts, &api.Statement{Name: fmt.Sprintf("%s-s%d", name, i), Conditions: cond,
			Actions: &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_REJECT}})
	}
	for _, d := range sets {
		if err := srv.AddDefinedSet(ctx, &api.AddDefinedSetRequest{DefinedSet: d}); err != nil {
			return false, fmt.Errorf("install the BGP export policy: %w", err)
		}
	}
	var policies []*api.Policy
	next := exportState{gen: gen, sig: sig}
	for _, d := range sets {
		next.sets = append(next.sets, &api.DefinedSet{DefinedType: d.DefinedType, Name: d.Name})
	}
	if len(stmts) > 0 {
		next.policy = name
		if err := srv.AddPolicy(ctx, &api.AddPolicyRequest{Policy: &api.Policy{Name: name, Statements: stmts}}); err != nil {
			return false, fmt.Errorf("install the BGP export policy: %w", err)
		}
		policies = []*api.Policy{{Name: name}}
	}
	if err := srv.SetPolicyAssignment(ctx, &api.SetPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
		Name: "global", Direction: api.PolicyDirection_POLICY_DIRECTION_EXPORT,
		Policies: policies, DefaultAction: api.RouteAction_ROUTE_ACTION_ACCEPT,
	}}); err != nil {
		return false, fmt.Errorf("install the BGP export policy: %w", err)
	}
	s.mu.Lock()
	s.export = next
	s.mu.Unlock()
	s.dropExport(ctx, srv, old)
	return true, nil
}

// dropExport removes an unassigned policy and its sets; what is left
// over only takes memory, so errors are logged.
func (s *Speaker) dropExport(ctx context.Context, srv *server.BgpServer, old exportState) {
	if old.policy != "" {
		if err := srv.DeletePolicy(ctx, &api.DeletePolicyRequest{Policy: &api.Policy{Name: old.policy}}); err != nil {
			s.log.Debug("bgp: old export policy not removed", "policy", old.policy, "err", err)
		}
	}
	for _, d := range old.sets {
		if err := srv.DeleteDefinedSet(ctx, &api.DeleteDefinedSetRequest{DefinedSet: d, All: true}); err != nil {
			s.log.Debug("bgp: old export set not removed", "set", d.Name, "err", err)
		}
	}
}

// refreshOut sends every established session its routes again through
// the current export policy (a soft reset out): what it now rejects is
// withdrawn, what it now lets through is sent.
func refreshOut(ctx context.Context, srv *server.BgpServer) error {
	if err := srv.ResetPeer(ctx, &api.ResetPeerRequest{Address: "all", Soft: true, Direction: api.ResetPeerRequest_DIRECTION_OUT}); err != nil {
		return fmt.Errorf("refresh the sessions after a change of the peers routes go to: %w", err)
	}
	return nil
}
