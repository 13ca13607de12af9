package config

import (
	"fmt"
	"net/netip"

	"github.com/xlbproject/xlb/internal/config/schema"
)

// policy checks the policy section.
func (c *checker) policy(f schema.Field[schema.Policy], path string) Policy {
	var p Policy
	if f.Bad {
		return p
	}
	if g := f.V.Deny; g.Given {
		p.Deny = c.prefixList(g, join(path, "deny"), "deny prefixes", MaxDenyPrefixes,
			"the data plane's deny table holds; aggregate neighbouring prefixes into shorter ones", netip.Addr{})
	}
	return p
}

// sourceRanges checks a service's source ranges; vip is the service's
// VIP (invalid when it is bad), whose family the ranges must be of.
func (c *checker) sourceRanges(f schema.Field[[]schema.Field[schema.Text]], path string, vip netip.Addr) []netip.Prefix {
	return c.prefixList(f, path, "source ranges", MaxSourceRanges,
		"a service holds; merge neighbouring ranges into shorter prefixes, or move sources every service refuses to policy.deny", vip)
}

// prefixList checks a list of IPv4 and IPv6 prefixes: each one a CIDR
// with no host bits set, at most limit of them. Overlapping and repeated
// prefixes are fine: they cover what their union covers. The prefixes
// are returned as written; nil for an empty list. A valid vip restricts
// them to its family: a client of the other family never reaches it.
func (c *checker) prefixList(f schema.Field[[]schema.Field[schema.Text]], path, what string, limit int, over string, vip netip.Addr) []netip.Prefix {
	if f.Bad {
		return nil
	}
	if len(f.V) > limit {
		c.errorf(f.At.Key, path, "%d %s exceed the limit of %d that %s", len(f.V), what, limit, over)
		return nil
	}
	var out []netip.Prefix
	for i, item := range f.V {
		if item.Bad {
			continue
		}
		p, why := parsePrefix(string(item.V))
		if why == "" && vip.IsValid() && p.Addr().Is4() != vip.Is4() {
			why = fmt.Sprintf("%s is an %s prefix; the service's VIP %s is %s, and only %s clients reach it: write an %s range, or give the %s clients a service of their own with an %s VIP",
				p, family(p.Addr()), vip, family(vip), family(vip), family(vip), family(p.Addr()), family(p.Addr()))
		}
		if why != "" {
			c.errorf(item.At.Value, index(path, i), "%s", why)
			continue
		}
		out = append(out, p)
	}
	return out
}

// family names a's address family.
func family(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// parsePrefix reads a CIDR, or says why s is none that xlb takes: not
// a CIDR, IPv4-mapped, or with host bits set.
func parsePrefix(s string) (netip.Prefix, string) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		if a, aerr := netip.ParseAddr(s); aerr == nil {
			return p, fmt.Sprintf("%s is an address, not a CIDR: write %s/%d for it alone", schema.Show(s), a, a.BitLen())
		}
		return p, fmt.Sprintf("%s is not a CIDR: write a network and its prefix length, e.g. 192.0.2.0/24", schema.Show(s))
	}
	if a := p.Addr(); a.Is4In6() {
		if p.Bits() >= 96 {
			return p, fmt.Sprintf("%s is an IPv4-mapped IPv6 prefix; write it as IPv4: %s", p, netip.PrefixFrom(a.Unmap(), p.Bits()-96).Masked())
		}
		return p, fmt.Sprintf("%s is an IPv4-mapped IPv6 prefix; write it as IPv4", p)
	}
	if m := p.Masked(); m != p {
		return p, fmt.Sprintf("%s has host bits set: write its network, %s, or %s/%d for the one address", p, m, p.Addr(), p.Addr().BitLen())
	}
	return p, ""
}
