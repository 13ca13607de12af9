package api

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Ranges are the sources that may reach a Service, as xlb reads them.
// Not an API type: it needs no deep-copy code.
//
// +kubebuilder:object:generate=false
type Ranges struct {
	// From names where they come from: "spec.loadBalancerSourceRanges",
	// the annotation AnnotationSourceRanges, or "" for neither (every
	// source may reach the Service).
	From string
	// IPv4 and IPv6 are the ranges of each family, in their network
	// form: the Service's IPv4 address enforces the IPv4 ones, its
	// IPv6 address (dual stack) the IPv6 ones.
	IPv4 []netip.Prefix
	IPv6 []netip.Prefix
	// Bad are the entries that are no CIDR, each with why.
	Bad []string
}

// Restricted reports whether the Service names its sources: then only
// those reach it, and none if IPv4 is empty.
func (r Ranges) Restricted() bool { return r.From != "" }

// Unservable says why xlb cannot serve a Service's IPv4 address with
// these ranges without letting in sources they leave out, "" when it
// can (UnservableFor).
func (r Ranges) Unservable(max int) string { return r.UnservableFor(false, max) }

// Of returns the ranges of the IPv6 family (v6) or the IPv4 one.
func (r Ranges) Of(v6 bool) []netip.Prefix {
	if v6 {
		return r.IPv6
	}
	return r.IPv4
}

// UnservableFor says why xlb cannot serve the Service's address of one
// family (v6: IPv6) with these ranges without letting in sources they
// leave out, "" when it can: an entry that is no CIDR, more ranges of
// the family than a service holds (max), or ranges that admit no client
// of the family.
func (r Ranges) UnservableFor(v6 bool, max int) string {
	fam, other := "IPv4", "IPv6"
	if v6 {
		fam, other = other, fam
	}
	switch ranges := r.Of(v6); {
	case len(r.Bad) > 0:
		return fmt.Sprintf("%s: %s", r.From, strings.Join(r.Bad, "; "))
	case r.Restricted() && len(ranges) == 0:
		return fmt.Sprintf("%s holds %s ranges only, and xlb serves the Service's %s address: no %s client may reach it", r.From, other, fam, fam)
	case len(ranges) > max:
		return fmt.Sprintf("%s holds %d %s ranges, more than the %d a service holds", r.From, len(ranges), fam, max)
	}
	return ""
}

// SourceRanges reads who may reach svc as Kubernetes defines it:
// spec.loadBalancerSourceRanges or, when that is empty, the annotation
// AnnotationSourceRanges (comma separated); neither, or an annotation of
// blanks, lets every source in. Each entry is read as the API server
// validates these legacy fields (and kube-proxy reads them): blanks
// around it are fine, leading zeros are decimal, and host bits are
// cleared (10.0.0.1/8 is 10.0.0.0/8).
func SourceRanges(svc *corev1.Service) Ranges {
	var r Ranges
	entries := svc.Spec.LoadBalancerSourceRanges
	r.From = "spec.loadBalancerSourceRanges"
	if len(entries) == 0 {
		v, ok := svc.Annotations[AnnotationSourceRanges]
		if !ok || strings.TrimSpace(v) == "" {
			return Ranges{}
		}
		entries = strings.Split(v, ",")
		r.From = "annotation " + AnnotationSourceRanges
	}
	for _, e := range entries {
		p, err := legacyCIDR(e)
		switch {
		case err != nil:
			r.Bad = append(r.Bad, err.Error())
		case p.Addr().Is4():
			r.IPv4 = append(r.IPv4, p)
		default:
			r.IPv6 = append(r.IPv6, p)
		}
	}
	return r
}

// legacyCIDR reads a CIDR as Kubernetes' legacy fields take it.
func legacyCIDR(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	addr, bits, ok := strings.Cut(s, "/")
	if !ok {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR (no prefix length)", s)
	}
	if !strings.Contains(addr, ":") {
		octets := strings.Split(addr, ".")
		for i, o := range octets {
			octets[i] = trimZeros(o)
		}
		addr = strings.Join(octets, ".")
	}
	p, err := netip.ParsePrefix(addr + "/" + trimZeros(bits))
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR", s)
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("%q is an IPv4-mapped IPv6 CIDR; write it as IPv4", s)
	}
	return p.Masked(), nil
}

// trimZeros drops the leading zeros of a decimal number, keeping one
// digit.
func trimZeros(s string) string {
	t := strings.TrimLeft(s, "0")
	if t == "" && s != "" {
		return "0"
	}
	return t
}

// DenyPrefixes reads a DenyList's prefixes: the IPv4 and IPv6 CIDRs in
// their network form, and the other entries, each with why. The CRD's
// schema refuses most of the others; a list stored before it was
// installed may still hold some.
func DenyPrefixes(spec DenyListSpec) (ok []netip.Prefix, bad []string) {
	for _, s := range spec.Prefixes {
		p, err := netip.ParsePrefix(s)
		switch {
		case err != nil:
			bad = append(bad, fmt.Sprintf("%q is not a CIDR", s))
		case p.Addr().Is4In6():
			bad = append(bad, fmt.Sprintf("%s is an IPv4-mapped IPv6 CIDR; write it as IPv4", s))
		case p.Masked() != p:
			bad = append(bad, fmt.Sprintf("%s has host bits set; write its network, %s", s, p.Masked()))
		default:
			ok = append(ok, p)
		}
	}
	return ok, bad
}
