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
			"the data plane's deny table holds; aggregate neighbouring prefixes into shorter ones",
			"IPv6 sources cannot be denied yet: xlb serves IPv4 only, so no IPv6 packet reaches a VIP; remove it")
	}
	return p
}

// sourceRanges checks a service's source ranges.
func (c *checker) sourceRanges(f schema.Field[[]schema.Field[schema.Text]], path string) []netip.Prefix {
	return c.prefixList(f, path, "source ranges", MaxSourceRanges,
		"a service holds; merge neighbouring ranges into shorter prefixes, or move sources every service refuses to policy.deny",
		"the service's VIP is IPv4, and only IPv4 clients reach it: write an IPv4 range")
}

// prefixList checks a list of IPv4 prefixes: each one a CIDR with no
// host bits set, at most limit of them. Overlapping and repeated
// prefixes are fine: they cover what their union covers. The prefixes
// are returned as written; nil for an empty list. why6 says what to do
// about an IPv6 prefix.
func (c *checker) prefixList(f schema.Field[[]schema.Field[schema.Text]], path, what string, limit int, over, why6 string) []netip.Prefix {
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
		if why == "" && !p.Addr().Is4() {
			why = fmt.Sprintf("%s is an IPv6 prefix; %s", p, why6)
		}
		if why != "" {
			c.errorf(item.At.Value, index(path, i), "%s", why)
			continue
		}
		out = append(out, p)
	}
	return out
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
