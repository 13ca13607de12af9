package api

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSourceRanges(t *testing.T) {
	svc := func(field []string, annotation *string) *corev1.Service {
		s := &corev1.Service{Spec: corev1.ServiceSpec{LoadBalancerSourceRanges: field}}
		if annotation != nil {
			s.ObjectMeta = metav1.ObjectMeta{Annotations: map[string]string{AnnotationSourceRanges: *annotation}}
		}
		return s
	}
	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		name       string
		svc        *corev1.Service
		from       string
		ipv4       string
		ipv6       int
		bad        string
		unservable string
	}{
		{name: "none", svc: svc(nil, nil)},
		{name: "blank annotation", svc: svc(nil, str(" "))},
		{name: "field", svc: svc([]string{"10.0.0.0/8", " 192.0.2.0/24"}, nil), from: "spec.loadBalancerSourceRanges", ipv4: "10.0.0.0/8 192.0.2.0/24"},
		{name: "field over annotation", svc: svc([]string{"10.0.0.0/8"}, str("172.16.0.0/12")), from: "spec.loadBalancerSourceRanges", ipv4: "10.0.0.0/8"},
		{name: "annotation", svc: svc(nil, str("172.16.0.0/12 ,198.51.100.7/32")), from: "annotation " + AnnotationSourceRanges, ipv4: "172.16.0.0/12 198.51.100.7/32"},
		{name: "legacy forms", svc: svc([]string{"010.1.2.3/8", "192.0.2.255/024"}, nil), from: "spec.loadBalancerSourceRanges", ipv4: "10.0.0.0/8 192.0.2.0/24"},
		{name: "dual stack", svc: svc([]string{"10.0.0.0/8", "2001:db8::/32"}, nil), from: "spec.loadBalancerSourceRanges", ipv4: "10.0.0.0/8", ipv6: 1},
		{name: "IPv6 only", svc: svc([]string{"2001:db8::1/32"}, nil), from: "spec.loadBalancerSourceRanges", ipv6: 1,
			unservable: "spec.loadBalancerSourceRanges holds IPv6 ranges only"},
		{name: "bad", svc: svc(nil, str("10.0.0.0/8,office,")), from: "annotation " + AnnotationSourceRanges, ipv4: "10.0.0.0/8",
			bad: `"office" is not a CIDR (no prefix length); "" is not a CIDR (no prefix length)`, unservable: `annotation service.beta.kubernetes.io/load-balancer-source-ranges: "office" is not a CIDR`},
		{name: "mapped", svc: svc([]string{"::ffff:10.0.0.0/104"}, nil), from: "spec.loadBalancerSourceRanges",
			bad: `"::ffff:10.0.0.0/104" is an IPv4-mapped IPv6 CIDR; write it as IPv4`, unservable: "IPv4-mapped"},
		{name: "too many", svc: svc(many(3), nil), from: "spec.loadBalancerSourceRanges", ipv4: strings.Join(many(3), " "),
			unservable: "holds 3 IPv4 ranges, more than the 2 a service holds"},
	} {
		r := SourceRanges(tc.svc)
		var ipv4 []string
		for _, p := range r.IPv4 {
			ipv4 = append(ipv4, p.String())
		}
		if r.From != tc.from || strings.Join(ipv4, " ") != tc.ipv4 || len(r.IPv6) != tc.ipv6 || strings.Join(r.Bad, "; ") != tc.bad {
			t.Errorf("%s: from %q, IPv4 %v, IPv6 %d, bad %q; want %q, %q, %d, %q", tc.name, r.From, ipv4, len(r.IPv6), r.Bad, tc.from, tc.ipv4, tc.ipv6, tc.bad)
		}
		if got := r.Unservable(2); tc.unservable == "" && got != "" || tc.unservable != "" && !strings.Contains(got, tc.unservable) {
			t.Errorf("%s: unservable %q, want %q", tc.name, got, tc.unservable)
		}
		if r.Restricted() != (tc.from != "") {
			t.Errorf("%s: restricted %v", tc.name, r.Restricted())
		}
	}
}

func many(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("10.%d.0.0/16", i))
	}
	return out
}

func TestDenyPrefixes(t *testing.T) {
	ok, bad := DenyPrefixes(DenyListSpec{Prefixes: []string{"192.0.2.0/24", "192.0.2.1/24", "2001:db8::/32", "::ffff:10.0.0.0/104", "x", "0.0.0.0/0", "010.0.0.0/8"}})
	if want := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("2001:db8::/32"), netip.MustParsePrefix("0.0.0.0/0")}; !slices.Equal(ok, want) {
		t.Errorf("ok %v, want %v", ok, want)
	}
	want := []string{
		"192.0.2.1/24 has host bits set; write its network, 192.0.2.0/24",
		"::ffff:10.0.0.0/104 is an IPv4-mapped IPv6 CIDR; write it as IPv4",
		`"x" is not a CIDR`,
		`"010.0.0.0/8" is not a CIDR`,
	}
	if !slices.Equal(bad, want) {
		t.Errorf("bad:\n%s\nwant:\n%s", strings.Join(bad, "\n"), strings.Join(want, "\n"))
	}
}
