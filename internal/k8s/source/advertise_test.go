package source

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/k8s/api"
)

// advertisement is a BGPAdvertisement as the dynamic client returns it.
func advertisement(name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": api.Group + "/" + api.Version, "kind": "BGPAdvertisement",
		"metadata": map[string]any{"name": name},
		"spec":     spec,
	}}
}

func labelled(u *unstructured.Unstructured, lbls map[string]string) *unstructured.Unstructured {
	u.SetLabels(lbls)
	return u
}

func pool(name string, lbls map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": api.Group + "/" + api.Version, "kind": "AddressPool",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"addresses": []any{"10.99.0.0/24"}},
	}}
	u.SetLabels(lbls)
	return u
}

// routeOf is what a test compares of one VIP's announcement.
type routeOf struct {
	attrs config.RouteAttributes
	// peers: "all", or the peers' addresses joined with spaces ("" for
	// none).
	peers string
}

func TestAdvertisements(t *testing.T) {
	ip := netip.MustParseAddr
	peerSpec := func(addr string) map[string]any {
		return map[string]any{"myASN": int64(65001), "peerASN": int64(65000), "peerAddress": addr}
	}
	tors := []*unstructured.Unstructured{
		labelled(bgpPeer("tor-a", peerSpec("10.0.0.1")), map[string]string{"role": "tor"}),
		bgpPeer("rr", peerSpec("10.0.0.2")),
		labelled(bgpPeer("tor-b", peerSpec("10.0.0.3")), map[string]string{"role": "tor"}),
	}
	// blue/web is in pool blue (10.99.0.1), red/db in pool red (10.99.1.1).
	svcs := []*corev1.Service{
		service("blue", "web", withAnnotation(api.AnnotationAllocatedFrom, "blue")),
		service("red", "db", withIngress("10.99.1.1"), withAnnotation(api.AnnotationAllocatedFrom, "red")),
	}
	eps := []*discoveryv1.EndpointSlice{
		endpointSlice("blue", "web", "web-1", []discoveryv1.EndpointPort{slicePortOf("", 80, corev1.ProtocolTCP)}, endpoint(condReady, "10.1.0.5")),
		endpointSlice("red", "db", "db-1", []discoveryv1.EndpointPort{slicePortOf("", 80, corev1.ProtocolTCP)}, endpoint(condReady, "10.1.0.6")),
	}
	pools := []*unstructured.Unstructured{pool("blue", map[string]string{"tier": "web"}), pool("red", nil)}
	lp := func(v uint32) *uint32 { return &v }
	tests := []struct {
		name     string
		adverts  []*unstructured.Unstructured
		annotate map[string]string // blue/web's xlb.io/bgp-communities
		noPeers  bool
		want     map[string]routeOf // by VIP
		aggs     []config.Aggregate
		problems []string
	}{
		{
			name: "none: every VIP plain to every peer",
			want: map[string]routeOf{"10.99.0.1": {peers: "all"}, "10.99.1.1": {peers: "all"}},
		},
		{
			name: "one pool by name to one peer by name, with every attribute and an aggregate",
			adverts: []*unstructured.Unstructured{advertisement("blue-to-a", map[string]any{
				"addressPools": []any{"blue"}, "peers": []any{"tor-a"}, "communities": []any{"65000:100"}, "largeCommunities": []any{"65000:1:2"},
				"localPref": int64(200), "aggregationLength": int64(24)})},
			want: map[string]routeOf{
				"10.99.0.1": {config.RouteAttributes{Communities: []string{"65000:100"}, LargeCommunities: []string{"65000:1:2"}, LocalPreference: lp(200)}, "10.0.0.1"},
				"10.99.1.1": {peers: "all"},
			},
			aggs: []config.Aggregate{{Prefix: netip.MustParsePrefix("10.99.0.0/24"),
				Attrs: config.RouteAttributes{Communities: []string{"65000:100"}, LargeCommunities: []string{"65000:1:2"}, LocalPreference: lp(200)},
				Peers: []netip.Addr{ip("10.0.0.1")}, VIPs: []netip.Addr{ip("10.99.0.1")}}},
		},
		{
			name: "two advertisements of one pool: one route, the union of communities and peers, the highest local preference",
			adverts: []*unstructured.Unstructured{
				advertisement("a", map[string]any{"addressPools": []any{"blue"}, "peers": []any{"tor-a"}, "communities": []any{"65000:100"}, "localPref": int64(100)}),
				advertisement("b", map[string]any{"addressPools": []any{"blue"}, "peers": []any{"rr"}, "communities": []any{"65000:200", "65000:100"}, "localPref": int64(300)}),
			},
			want: map[string]routeOf{
				"10.99.0.1": {config.RouteAttributes{Communities: []string{"65000:100", "65000:200"}, LocalPreference: lp(300)}, "10.0.0.1 10.0.0.2"},
				"10.99.1.1": {peers: "all"},
			},
		},
		{
			name: "selectors: pools and peers by label; an advertisement of every peer makes the route go to all",
			adverts: []*unstructured.Unstructured{
				advertisement("tors", map[string]any{"addressPoolSelectors": []any{map[string]any{"matchLabels": map[string]any{"tier": "web"}}},
					"peerSelectors": []any{map[string]any{"matchLabels": map[string]any{"role": "tor"}}}}),
				advertisement("red-all", map[string]any{"addressPools": []any{"red"}, "communities": []any{"1:1"}}),
			},
			want: map[string]routeOf{
				"10.99.0.1": {peers: "10.0.0.1 10.0.0.3"},
				"10.99.1.1": {config.RouteAttributes{Communities: []string{"1:1"}}, "all"},
			},
		},
		{
			name: "aggregateOnly: the aggregate instead of the /32",
			adverts: []*unstructured.Unstructured{advertisement("agg", map[string]any{
				"addressPools": []any{"blue"}, "peers": []any{"rr"}, "aggregationLength": int64(16), "aggregateOnly": true})},
			want: map[string]routeOf{"10.99.0.1": {peers: ""}, "10.99.1.1": {peers: "all"}},
			aggs: []config.Aggregate{{Prefix: netip.MustParsePrefix("10.99.0.0/16"), Peers: []netip.Addr{ip("10.0.0.2")}, VIPs: []netip.Addr{ip("10.99.0.1")}}},
		},
		{
			name:     "the Service's communities join the advertisement's",
			adverts:  []*unstructured.Unstructured{advertisement("a", map[string]any{"addressPools": []any{"blue"}, "communities": []any{"65000:100"}})},
			annotate: map[string]string{api.AnnotationBGPCommunities: " 65000:7 , 1:2:3,65000:100,No-Export"},
			want: map[string]routeOf{
				"10.99.0.1": {config.RouteAttributes{Communities: []string{"65000:7", "65000:100", "no-export"}, LargeCommunities: []string{"1:2:3"}}, "all"},
				"10.99.1.1": {peers: "all"},
			},
		},
		{
			name:     "a bad annotation leaves the advertisement's communities",
			adverts:  []*unstructured.Unstructured{advertisement("a", map[string]any{"addressPools": []any{"blue"}, "communities": []any{"65000:100"}})},
			annotate: map[string]string{api.AnnotationBGPCommunities: "65000:100000"},
			want: map[string]routeOf{
				"10.99.0.1": {config.RouteAttributes{Communities: []string{"65000:100"}}, "all"},
				"10.99.1.1": {peers: "all"},
			},
			problems: []string{`Service blue/web: annotation xlb.io/bgp-communities: 65000:100000: 100000 is above 65535; a community holds two 16-bit numbers, so for a 4-byte ASN use largeCommunities (e.g. 65000:100000:0); its routes carry the BGPAdvertisements' communities only until it is corrected`},
		},
		{
			name: "a bad advertisement is left out; the others apply",
			adverts: []*unstructured.Unstructured{
				advertisement("bad", map[string]any{"peers": []any{"tor-a"}, "peerSelectors": []any{map[string]any{"matchExpressions": []any{map[string]any{"key": "role", "operator": "In"}}}}}),
				advertisement("good", map[string]any{"addressPools": []any{"red"}, "peers": []any{"tor-b"}}),
			},
			want:     map[string]routeOf{"10.99.0.1": {peers: "all"}, "10.99.1.1": {peers: "10.0.0.3"}},
			problems: []string{"BGPAdvertisement bad: spec.peerSelectors[0]: values: Invalid value: "},
		},
		{
			name:    "a peer name that is no peer of this node: the route goes to none",
			adverts: []*unstructured.Unstructured{advertisement("a", map[string]any{"addressPools": []any{"blue"}, "peers": []any{"elsewhere"}})},
			want:    map[string]routeOf{"10.99.0.1": {peers: ""}, "10.99.1.1": {peers: "all"}},
		},
		{
			name:    "no bgp section: nothing to shape",
			adverts: []*unstructured.Unstructured{advertisement("a", map[string]any{"communities": []any{"65000:100"}, "aggregationLength": int64(24)})},
			noPeers: true,
			want:    map[string]routeOf{"10.99.0.1": {peers: "all"}, "10.99.1.1": {peers: "all"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			services := slices.Clone(svcs)
			if tc.annotate != nil {
				web := services[0].DeepCopy()
				for k, v := range tc.annotate {
					web.Annotations[k] = v
				}
				services[0] = web
			}
			f := fixture{node: node("node-1", nil), services: services, slices: eps, adverts: tc.adverts, pools: pools}
			if !tc.noPeers {
				f.peers = tors
			}
			base := parseBase(t, "")
			st := settings{base: base, secretNamespace: "xlb-system"}
			d, probs := translate(st, f.cluster())
			cfg, more, err := validate(&config.Validator{}, d, base, nil)
			if err != nil {
				t.Fatal(err)
			}
			var gotProbs []string
			for _, p := range append(probs, more...) {
				gotProbs = append(gotProbs, p.String())
			}
			checkProblems(t, gotProbs, tc.problems)
			got := map[string]routeOf{}
			for _, s := range cfg.Services {
				r := routeOf{attrs: s.BGP, peers: "all"}
				if d.ann != nil {
					if ps, ok := d.ann.Peers[s.VIP]; ok {
						var list []string
						for _, p := range ps {
							list = append(list, p.String())
						}
						r.peers = strings.Join(list, " ")
					}
				}
				got[s.VIP.String()] = r
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("routes:\n got %+v\nwant %+v", got, tc.want)
			}
			var aggs []config.Aggregate
			if d.ann != nil {
				aggs = d.ann.Aggregates
			}
			if !reflect.DeepEqual(aggs, tc.aggs) {
				t.Errorf("aggregates:\n got %+v\nwant %+v", aggs, tc.aggs)
			}
		})
	}
}

// A dual-stack Service's two addresses get their aggregate each, of its
// family's length; an advertisement with an IPv4 length alone and
// aggregateOnly keeps its IPv6 address's own route.
func TestAdvertisementsDualStack(t *testing.T) {
	web := []discoveryv1.EndpointPort{slicePortOf("", 80, corev1.ProtocolTCP)}
	v6 := endpointSlice("default", "web", "web-6", web, endpoint(condReady, "fd00:244::2"))
	v6.AddressType = discoveryv1.AddressTypeIPv6
	f := fixture{
		node:     node("node-1", nil),
		services: []*corev1.Service{service("default", "web", withIngress("10.99.0.1", "2001:db8:99::1"), withAnnotation(api.AnnotationAllocatedFrom, "dual"))},
		slices:   []*discoveryv1.EndpointSlice{endpointSlice("default", "web", "web-4", web, endpoint(condReady, "10.244.1.2")), v6},
		peers:    []*unstructured.Unstructured{bgpPeer("tor", map[string]any{"myASN": int64(65001), "peerASN": int64(65000), "peerAddress": "10.0.0.1"})},
	}
	st := settings{base: parseBase(t, ""), secretNamespace: "xlb-system"}
	for _, tc := range []struct {
		name  string
		spec  map[string]any
		aggs  []string
		peers map[string]string // VIP: its peers, for the VIPs restricted
	}{
		{"both lengths", map[string]any{"aggregationLength": int64(24), "aggregationLengthV6": int64(64)},
			[]string{"10.99.0.0/24", "2001:db8:99::/64"}, map[string]string{}},
		{"IPv4 only, instead of the /32", map[string]any{"aggregationLength": int64(16), "aggregateOnly": true},
			[]string{"10.99.0.0/16"}, map[string]string{"10.99.0.1": ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.adverts = []*unstructured.Unstructured{advertisement("a", tc.spec)}
			d, probs := translate(st, f.cluster())
			if len(probs) != 0 {
				t.Errorf("problems %v", probs)
			}
			if d.ann == nil {
				t.Fatal("no announcements")
			}
			var aggs []string
			for _, a := range d.ann.Aggregates {
				aggs = append(aggs, a.Prefix.String())
			}
			if !slices.Equal(aggs, tc.aggs) {
				t.Errorf("aggregates %v, want %v", aggs, tc.aggs)
			}
			peers := map[string]string{}
			for vip, ps := range d.ann.Peers {
				var list []string
				for _, p := range ps {
					list = append(list, p.String())
				}
				peers[vip.String()] = strings.Join(list, " ")
			}
			if !reflect.DeepEqual(peers, tc.peers) {
				t.Errorf("restricted VIPs %v, want %v", peers, tc.peers)
			}
		})
	}
}
