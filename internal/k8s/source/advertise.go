package source

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/k8s/api"
)

// advert is a usable BGPAdvertisement, its selectors compiled.
type advert struct {
	name       string
	spec       api.BGPAdvertisementSpec
	poolSels   []labels.Selector
	allPeers   bool         // no peer selection: every peer
	peers      []netip.Addr // else the node's peers it selects
	aggregates bool         // an aggregation length of either family
}

// routeShape accumulates what the advertisements covering one VIP (or
// one aggregate) ask for.
type routeShape struct {
	covered     bool
	communities map[string]bool
	large       map[string]bool
	localPref   *uint32
	allPeers    bool
	peers       map[netip.Addr]bool
	vips        map[netip.Addr]bool // of an aggregate
}

func newShape() *routeShape {
	return &routeShape{communities: map[string]bool{}, large: map[string]bool{}, peers: map[netip.Addr]bool{}, vips: map[netip.Addr]bool{}}
}

// add merges an advertisement's attributes and peers.
func (r *routeShape) add(a *advert) {
	r.covered = true
	for _, c := range a.spec.Communities {
		r.communities[c] = true
	}
	for _, c := range a.spec.LargeCommunities {
		r.large[c] = true
	}
	if lp := a.spec.LocalPref; lp != nil && (r.localPref == nil || *lp > *r.localPref) {
		v := *lp
		r.localPref = &v
	}
	r.allPeers = r.allPeers || a.allPeers
	for _, p := range a.peers {
		r.peers[p] = true
	}
}

// attrs are the merged attributes, capped at the file's limits.
func (r *routeShape) attrs() config.RouteAttributes {
	a := config.RouteAttributes{LocalPreference: r.localPref}
	a.Communities = sortedKeys(r.communities, config.MaxCommunities)
	a.LargeCommunities = sortedKeys(r.large, config.MaxLargeCommunities)
	return a
}

// peerList is the route's peers; nil: every peer.
func (r *routeShape) peerList() []netip.Addr {
	if r.allPeers {
		return nil
	}
	out := make([]netip.Addr, 0, len(r.peers))
	for p := range r.peers {
		out = append(out, p)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

func sortedKeys(m map[string]bool, limit int) []string {
	if len(m) == 0 {
		return nil
	}
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out[:min(len(out), limit)]
}

// advertise applies the BGPAdvertisements and the Services' community
// annotations to d: the merged attributes on each cluster service, the
// peers and aggregates in d.ann. Without advertisements and annotations
// it leaves d as it is: every VIP to every peer, plain. A malformed
// advertisement or annotation is left out with a problem; the rest
// applies.
func advertise(c cluster, d *desired, nBase int) []problem {
	var probs []problem
	adverts, p := compileAdverts(c, d, nBase)
	probs = append(probs, p...)
	svcByKey := make(map[string]*corev1.Service, len(c.services))
	for _, s := range c.services {
		svcByKey[s.Namespace+"/"+s.Name] = s
	}
	poolLabels := map[string]labels.Set{}
	for _, u := range c.pools {
		poolLabels[u.GetName()] = labels.Set(u.GetLabels())
	}

	vips := map[netip.Addr]*routeShape{}
	aggs := map[netip.Prefix]*routeShape{}
	annotated := map[string]bool{} // Services whose bad annotation was reported
	for i := nBase; i < len(d.cfg.Services); i++ {
		s := d.cfg.Services[i]
		key, ok := strings.CutPrefix(d.serviceFrom[i-nBase], "Service ")
		svc := svcByKey[key]
		if !ok || svc == nil {
			continue
		}
		r := vips[s.VIP]
		if r == nil {
			r = newShape()
			vips[s.VIP] = r
		}
		if v, ok := svc.Annotations[api.AnnotationBGPCommunities]; ok {
			std, large, err := api.ParseCommunities(v)
			switch {
			case err != nil && !annotated[key]:
				annotated[key] = true
				probs = append(probs, problem{"Service " + key, fmt.Sprintf("annotation %s: %v; its routes carry the BGPAdvertisements' communities only until it is corrected", api.AnnotationBGPCommunities, err),
					fmt.Sprintf("correct the annotation %s: a comma-separated list of communities such as 65000:100 and large communities such as 65000:1:2", api.AnnotationBGPCommunities)})
			case err == nil:
				for _, c := range std {
					r.communities[c] = true
				}
				for _, c := range large {
					r.large[c] = true
				}
			}
		}
		pool := svc.Annotations[api.AnnotationAllocatedFrom]
		for _, a := range adverts {
			if !a.selectsPool(pool, poolLabels[pool]) {
				continue
			}
			bits := a.spec.AggregationLength
			if s.VIP.Is6() {
				bits = a.spec.AggregationLengthV6
			}
			if bits == nil {
				r.add(a)
				continue
			}
			if a.spec.AggregateOnly {
				// The aggregate instead: the VIP's own route does not
				// go to this advertisement's peers.
				r.covered = true
			} else {
				r.add(a)
			}
			pfx, err := s.VIP.Prefix(int(*bits))
			if err != nil {
				continue
			}
			g := aggs[pfx]
			if g == nil {
				g = newShape()
				aggs[pfx] = g
			}
			g.add(a)
			g.vips[s.VIP] = true
		}
	}
	if d.cfg.BGP == nil {
		// Nothing is announced; the file's checks refuse attributes
		// without a bgp section.
		return probs
	}
	ann := &config.Announcements{}
	for i := nBase; i < len(d.cfg.Services); i++ {
		r := vips[d.cfg.Services[i].VIP]
		if r == nil {
			continue
		}
		d.cfg.Services[i].BGP = r.attrs()
	}
	for vip, r := range vips {
		if !r.covered {
			continue
		}
		if ps := r.peerList(); ps != nil {
			if ann.Peers == nil {
				ann.Peers = map[netip.Addr][]netip.Addr{}
			}
			ann.Peers[vip] = ps
		}
	}
	for pfx, g := range aggs {
		if _, isVIP := vips[pfx.Addr()]; isVIP && pfx.IsSingleIP() {
			continue // the VIP's own route
		}
		agg := config.Aggregate{Prefix: pfx, Attrs: g.attrs(), Peers: g.peerList()}
		for v := range g.vips {
			agg.VIPs = append(agg.VIPs, v)
		}
		slices.SortFunc(agg.VIPs, netip.Addr.Compare)
		if agg.Peers != nil && len(agg.Peers) == 0 {
			continue // to no peer of this node
		}
		ann.Aggregates = append(ann.Aggregates, agg)
	}
	slices.SortFunc(ann.Aggregates, func(a, b config.Aggregate) int {
		return cmp.Or(a.Prefix.Addr().Compare(b.Prefix.Addr()), cmp.Compare(a.Prefix.Bits(), b.Prefix.Bits()))
	})
	if ann.Peers != nil || ann.Aggregates != nil {
		d.ann = ann
	}
	return probs
}

// selectsPool reports whether a covers the pool named name with labels
// set; a Service without a pool (none recorded) is covered only by the
// advertisements of every pool.
func (a *advert) selectsPool(name string, set labels.Set) bool {
	if len(a.spec.AddressPools) == 0 && len(a.poolSels) == 0 {
		return true
	}
	if name == "" {
		return false
	}
	if slices.Contains(a.spec.AddressPools, name) {
		return true
	}
	for _, s := range a.poolSels {
		if s.Matches(set) {
			return true
		}
	}
	return false
}

// compileAdverts reads the BGPAdvertisements, by name, and resolves the
// peers each selects among this node's: the BGPPeers behind d's peers
// from the cluster (after the base's nBase).
func compileAdverts(c cluster, d *desired, nBase int) ([]*advert, []problem) {
	var probs []problem
	peerLabels := map[string]labels.Set{}
	for _, u := range c.peers {
		peerLabels[u.GetName()] = labels.Set(u.GetLabels())
	}
	type nodePeer struct {
		name string
		addr netip.Addr
	}
	var nodePeers []nodePeer
	if b := d.cfg.BGP; b != nil {
		for i, from := range d.peerFrom {
			if name, ok := strings.CutPrefix(from, "BGPPeer "); ok && nBase+i < len(b.Peers) {
				nodePeers = append(nodePeers, nodePeer{name, b.Peers[nBase+i].Address})
			}
		}
	}
	list := slices.Clone(c.adverts)
	slices.SortFunc(list, func(a, b *unstructured.Unstructured) int { return strings.Compare(a.GetName(), b.GetName()) })
	var out []*advert
	for _, u := range list {
		obj := "BGPAdvertisement " + u.GetName()
		var ba api.BGPAdvertisement
		if err := api.FromUnstructured(u, &ba); err != nil {
			probs = append(probs, problem{obj, fmt.Sprintf("cannot be read: %v; it is left out", err),
				"correct the BGPAdvertisement as the error says (kubectl edit bgpadvertisement " + u.GetName() + "); if it matches the schema, install the CustomResourceDefinitions of this xlb version (deploy/crds)"})
			continue
		}
		a, why := compileAdvert(ba)
		if why != "" {
			probs = append(probs, problem{obj, why + "; it is left out until this is corrected",
				"correct it with kubectl edit bgpadvertisement " + u.GetName() + "; `kubectl get bgpadvertisements` shows the controller's verdict"})
			continue
		}
		if !a.allPeers {
			peerSels, _ := compileSelectors(ba.Spec.PeerSelectors) // checked by compileAdvert
			for _, p := range nodePeers {
				if slices.Contains(ba.Spec.Peers, p.name) || slices.ContainsFunc(peerSels, func(s labels.Selector) bool { return s.Matches(peerLabels[p.name]) }) {
					a.peers = append(a.peers, p.addr)
				}
			}
		}
		out = append(out, a)
	}
	return out, probs
}

// compileAdvert checks what the schema cannot and compiles the
// selectors; why says what keeps the advertisement out.
func compileAdvert(ba api.BGPAdvertisement) (*advert, string) {
	s := ba.Spec
	a := &advert{name: ba.Name, spec: s, allPeers: len(s.Peers) == 0 && len(s.PeerSelectors) == 0,
		aggregates: s.AggregationLength != nil || s.AggregationLengthV6 != nil}
	if why := api.CheckAdvertisement(s); why != "" {
		return nil, why
	}
	a.poolSels, _ = compileSelectors(s.AddressPoolSelectors) // checked above
	return a, ""
}

func compileSelectors(sels []api.LabelSelector) ([]labels.Selector, error) {
	out := make([]labels.Selector, 0, len(sels))
	for i := range sels {
		s, err := sels[i].AsSelector()
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		out = append(out, s)
	}
	return out, nil
}
