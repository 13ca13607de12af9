package source

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/k8s/api"
)

// denyList is a DenyList object as the dynamic client returns it.
func denyList(name string, created time.Time, prefixes ...string) *unstructured.Unstructured {
	ps := make([]any, len(prefixes))
	for i, p := range prefixes {
		ps[i] = p
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": api.Group + "/" + api.Version, "kind": "DenyList",
		"metadata": map[string]any{"name": name, "creationTimestamp": created.Format(time.RFC3339)},
		"spec":     map[string]any{"prefixes": ps},
	}}
}

func withRanges(ranges ...string) svcOpt {
	return func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = ranges }
}

// rangesOf says which source ranges each served port got.
func rangesOf(cfg *config.Config) map[string]string {
	out := map[string]string{}
	for _, s := range cfg.Services {
		var rs []string
		for _, p := range s.SourceRanges {
			rs = append(rs, p.String())
		}
		out[s.Name] = strings.Join(rs, ",")
	}
	return out
}

// A Service's spec.loadBalancerSourceRanges, or the legacy annotation
// when the field is empty, become its ports' source ranges, read as
// Kubernetes reads them; an entry xlb cannot enforce keeps the Service
// out (serving it would let in what the ranges leave out), with a
// problem naming it.
func TestSourceRanges(t *testing.T) {
	eps := func(svc string) *discoveryv1.EndpointSlice {
		return endpointSlice("shop", svc, svc+"-1", []discoveryv1.EndpointPort{slicePortOf("", 8080, corev1.ProtocolTCP)}, endpoint(condReady, "10.244.0.5"))
	}
	anno := api.AnnotationSourceRanges
	f := fixture{}
	for i, tc := range []struct {
		name string
		opts []svcOpt
	}{
		{"open", nil},
		{"field", []svcOpt{withRanges("10.0.0.0/8", " 192.0.2.0/24 ")}},
		{"annotation", []svcOpt{withAnnotation(anno, "172.16.0.0/12, 198.51.100.7/32")}},
		{"field-wins", []svcOpt{withRanges("10.0.0.0/8"), withAnnotation(anno, "172.16.0.0/12")}},
		{"legacy", []svcOpt{withRanges("010.000.0.1/8", "192.0.2.7/032")}},
		{"dual-stack", []svcOpt{withRanges("10.0.0.0/8", "2001:db8::/32")}},
		{"blank-annotation", []svcOpt{withAnnotation(anno, "  ")}},
		{"ipv6-only", []svcOpt{withRanges("2001:db8::/32")}},
		{"bad-annotation", []svcOpt{withAnnotation(anno, "10.0.0.0/8,office")}},
		{"bad-mapped", []svcOpt{withRanges("::ffff:10.0.0.0/104")}},
		{"too-many", []svcOpt{withRanges(manyRanges(config.MaxSourceRanges + 1)...)}},
		{"at-limit", []svcOpt{withRanges(manyRanges(config.MaxSourceRanges)...)}},
	} {
		opts := append([]svcOpt{withIngress(fmt.Sprintf("10.99.0.%d", i+1)), withPorts(port("", 80, corev1.ProtocolTCP))}, tc.opts...)
		f.services = append(f.services, service("shop", tc.name, opts...))
		f.slices = append(f.slices, eps(tc.name))
	}
	cfg, probs, err := run(t, parseBase(t, ""), f)
	if err != nil {
		t.Fatal(err)
	}
	got := rangesOf(cfg)
	at := strings.Join(manyRanges(config.MaxSourceRanges), ",")
	want := map[string]string{
		"shop/open:80/tcp":             "",
		"shop/field:80/tcp":            "10.0.0.0/8,192.0.2.0/24",
		"shop/annotation:80/tcp":       "172.16.0.0/12,198.51.100.7/32",
		"shop/field-wins:80/tcp":       "10.0.0.0/8",
		"shop/legacy:80/tcp":           "10.0.0.0/8,192.0.2.7/32",
		"shop/dual-stack:80/tcp":       "10.0.0.0/8",
		"shop/blank-annotation:80/tcp": "",
		"shop/at-limit:80/tcp":         at,
	}
	for name, w := range want {
		if g, ok := got[name]; !ok || g != w {
			t.Errorf("%s: ranges %q (served: %v), want %q", name, g, ok, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("served %v, want only %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}
	checkProblems(t, probs, []string{
		"Service shop/ipv6-only: spec.loadBalancerSourceRanges holds IPv6 ranges only, and xlb serves the Service's IPv4 address: no IPv4 client may reach it; the Service is not served until this is corrected",
		`Service shop/bad-annotation: annotation service.beta.kubernetes.io/load-balancer-source-ranges: "office" is not a CIDR (no prefix length); the Service is not served`,
		`Service shop/bad-mapped: spec.loadBalancerSourceRanges: "::ffff:10.0.0.0/104" is an IPv4-mapped IPv6 CIDR; write it as IPv4`,
		"Service shop/too-many: spec.loadBalancerSourceRanges holds 65 IPv4 ranges, more than the 64 a service holds",
	})
}

func manyRanges(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("10.%d.0.0/16", i)
	}
	return out
}

// Every DenyList's prefixes and the file's policy.deny make the node's
// deny list, each prefix once; bad entries are left out with a problem,
// and a list that would take the node over its limit is left out whole,
// the newest first.
func TestDenyLists(t *testing.T) {
	base := parseBase(t, "policy: {deny: [192.0.2.0/24]}\n")
	f := fixture{lists: []*unstructured.Unstructured{
		denyList("later", t0.Add(time.Hour), "203.0.113.0/24", "192.0.2.0/24"),
		denyList("first", t0, "198.51.100.0/24", "198.51.100.1/24", "2001:db8::/32", "bad"),
	}}
	cfg, probs, err := run(t, base, f)
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("2001:db8::/32"), netip.MustParsePrefix("203.0.113.0/24")}
	if !slices.Equal(cfg.Policy.Deny, want) {
		t.Errorf("deny list %v, want %v (the file's, then the lists' oldest first, each once)", cfg.Policy.Deny, want)
	}
	checkProblems(t, probs, []string{
		`DenyList first: spec.prefixes: 198.51.100.1/24 has host bits set; write its network, 198.51.100.0/24; "bad" is not a CIDR; these are not denied, the list's other prefixes are`,
	})

	// Over the limit: the newest list that does not fit is left out.
	big := make([]string, config.MaxDenyPrefixes-2)
	for i := range big {
		big[i] = fmt.Sprintf("%d.%d.%d.0/24", 1+i>>16, byte(i>>8), byte(i))
	}
	f.lists = append(f.lists, denyList("big", t0.Add(2*time.Hour), big...))
	cfg, probs, err = run(t, base, f)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Policy.Deny, want) {
		t.Errorf("with a list over the limit: %d prefixes, want the %d of the others", len(cfg.Policy.Deny), len(want))
	}
	if !slices.ContainsFunc(probs, func(p string) bool {
		return strings.HasPrefix(p, fmt.Sprintf("DenyList big: not denied: its %d prefixes would take the node's deny list over %d", len(big), config.MaxDenyPrefixes))
	}) {
		t.Errorf("no problem for the list over the limit: %v", probs)
	}
	// No lists and no file: none.
	cfg, _, err = run(t, parseBase(t, ""), fixture{})
	if err != nil || cfg.Policy.Deny != nil {
		t.Errorf("no lists: deny %v, err %v", cfg.Policy.Deny, err)
	}
}

// A build whose DenyLists are the very objects of the last one reuses
// its list, and any other object builds it anew.
func TestDenyListsReused(t *testing.T) {
	base := parseBase(t, "")
	l := denyList("a", t0, "192.0.2.0/24")
	st := settings{base: base, secretNamespace: "xlb-system"}
	var tr translated
	d1, _ := tr.translate(st, fixture{lists: []*unstructured.Unstructured{l}}.cluster())
	d2, _ := tr.translate(st, fixture{lists: []*unstructured.Unstructured{l}}.cluster())
	if len(d1.cfg.Policy.Deny) != 1 || &d1.cfg.Policy.Deny[0] != &d2.cfg.Policy.Deny[0] {
		t.Error("the same DenyList objects built the list again")
	}
	l2 := l.DeepCopy()
	l2.Object["spec"] = map[string]any{"prefixes": []any{"198.51.100.0/24"}}
	d3, _ := tr.translate(st, fixture{lists: []*unstructured.Unstructured{l2}}.cluster())
	if !slices.Equal(d3.cfg.Policy.Deny, []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}) {
		t.Errorf("a changed DenyList: %v", d3.cfg.Policy.Deny)
	}
}

// A dual-stack Service's addresses each get the source ranges of their
// family; ranges of one family only leave the other address unserved,
// with a problem naming it; nat serves both addresses, each with the
// endpoints of its family.
func TestDualStackRangesAndNAT(t *testing.T) {
	eps := func(svc string) []*discoveryv1.EndpointSlice {
		v6 := endpointSlice("shop", svc, svc+"-6", []discoveryv1.EndpointPort{slicePortOf("", 8080, corev1.ProtocolTCP)}, endpoint(condReady, "fd00:244::5"))
		v6.AddressType = discoveryv1.AddressTypeIPv6
		return []*discoveryv1.EndpointSlice{
			endpointSlice("shop", svc, svc+"-4", []discoveryv1.EndpointPort{slicePortOf("", 8080, corev1.ProtocolTCP)}, endpoint(condReady, "10.244.0.5")), v6}
	}
	f := fixture{}
	for i, tc := range []struct {
		name string
		opts []svcOpt
	}{
		{"both", []svcOpt{withRanges("10.0.0.0/8", "2001:db8::/32")}},
		{"v4-ranges", []svcOpt{withRanges("10.0.0.0/8")}},
		{"nat", []svcOpt{withAnnotation(api.AnnotationForwarding, "nat")}},
	} {
		opts := append([]svcOpt{withIngress(fmt.Sprintf("10.99.0.%d", i+1), fmt.Sprintf("2001:db8:99::%d", i+1)), withPorts(port("", 80, corev1.ProtocolTCP))}, tc.opts...)
		f.services = append(f.services, service("shop", tc.name, opts...))
		f.slices = append(f.slices, eps(tc.name)...)
	}
	cfg, probs, err := run(t, parseBase(t, ""), f)
	if err != nil {
		t.Fatal(err)
	}
	got := rangesOf(cfg)
	want := map[string]string{
		"shop/both:80/tcp":      "10.0.0.0/8",
		"shop/both:80/tcp/ipv6": "2001:db8::/32",
		"shop/v4-ranges:80/tcp": "10.0.0.0/8",
		"shop/nat:80/tcp":       "",
		"shop/nat:80/tcp/ipv6":  "",
	}
	if !maps.Equal(got, want) {
		t.Errorf("served with ranges %v, want %v", got, want)
	}
	for _, s := range cfg.Services {
		if s.Name == "shop/nat:80/tcp/ipv6" && (s.Forwarding != config.NAT || s.VIP != netip.MustParseAddr("2001:db8:99::3") || len(s.Backends) != 1 || s.Backends[0].Address != netip.MustParseAddr("fd00:244::5")) {
			t.Errorf("IPv6 nat service %+v, want nat on VIP 2001:db8:99::3 with backend fd00:244::5", s)
		}
		if s.Name == "shop/both:80/tcp/ipv6" && (s.VIP != netip.MustParseAddr("2001:db8:99::1") || len(s.Backends) != 1 || s.Backends[0].Address != netip.MustParseAddr("fd00:244::5")) {
			t.Errorf("IPv6 service %+v, want VIP 2001:db8:99::1 with backend fd00:244::5", s)
		}
	}
	checkProblems(t, probs, []string{
		"Service shop/v4-ranges: spec.loadBalancerSourceRanges holds IPv4 ranges only, and xlb serves the Service's IPv6 address: no IPv6 client may reach it; the Service's address 2001:db8:99::2 is not served until this is corrected",
	})
}
