package lb

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// u128 is an IPv6 address as a 128-bit number: high and low 64 bits.
type u128 struct{ hi, lo uint64 }

func u128Of(a netip.Addr) u128 {
	b := a.As16()
	var v u128
	for i := range 8 {
		v.hi = v.hi<<8 | uint64(b[i])
		v.lo = v.lo<<8 | uint64(b[8+i])
	}
	return v
}

func (a u128) cmp(b u128) int {
	if c := cmp.Compare(a.hi, b.hi); c != 0 {
		return c
	}
	return cmp.Compare(a.lo, b.lo)
}

// next is a + 1, and whether it did not wrap.
func (a u128) next() (u128, bool) {
	a.lo++
	if a.lo == 0 {
		a.hi++
		if a.hi == 0 {
			return a, false
		}
	}
	return a, true
}

// span6 is an inclusive interval of IPv6 addresses.
type span6 struct{ lo, hi u128 }

func span6Of(p netip.Prefix) span6 {
	lo := u128Of(p.Masked().Addr())
	hi := lo
	host := 128 - p.Bits()
	switch {
	case host >= 64:
		hi.lo = ^uint64(0)
		if host == 128 {
			hi.hi = ^uint64(0)
		} else {
			hi.hi |= 1<<(host-64) - 1
		}
	case host > 0:
		hi.lo |= 1<<host - 1
	}
	return span6{lo, hi}
}

// ranges6 is struct xlb_ranges6 of an IPv6 service's source ranges, as
// prefixset.Ranges4 builds IPv4 ones: the prefixes as disjoint
// intervals, overlapping and adjacent ones merged, sorted, the last one
// repeated to fill the table, so that source_allowed6's binary search
// of fixed depth finds the one an address may be in.
func ranges6(ps []netip.Prefix) (wire.Ranges6, error) {
	var r wire.Ranges6
	if len(ps) == 0 {
		return r, errors.New("no source ranges")
	}
	spans := make([]span6, 0, len(ps))
	for _, p := range ps {
		switch {
		case !p.IsValid():
			return r, fmt.Errorf("invalid prefix %v", p)
		case p.Addr().Is4() || p.Addr().Is4In6():
			return r, fmt.Errorf("%v: an IPv4 prefix, for an IPv6 VIP; an IPv6 service takes IPv6 ranges only", p)
		case p.Masked() != p:
			return r, fmt.Errorf("%v has host bits set: its network is %v", p, p.Masked())
		}
		spans = append(spans, span6Of(p))
	}
	slices.SortFunc(spans, func(a, b span6) int { return a.lo.cmp(b.lo) })
	merged := spans[:1]
	for _, s := range spans[1:] {
		last := &merged[len(merged)-1]
		after, ok := last.hi.next()
		if !ok || s.lo.cmp(after) <= 0 {
			// Overlapping or adjacent (or the last ends at the top).
			if s.hi.cmp(last.hi) > 0 {
				last.hi = s.hi
			}
			continue
		}
		merged = append(merged, s)
	}
	if len(merged) > wire.MaxRanges {
		return r, fmt.Errorf("%d source ranges, more than the %d a service holds", len(merged), wire.MaxRanges)
	}
	for i := range wire.MaxRanges {
		s := merged[min(i, len(merged)-1)]
		r.LoHi[i], r.LoLo[i], r.HiHi[i], r.HiLo[i] = s.lo.hi, s.lo.lo, s.hi.hi, s.hi.lo
	}
	return r, nil
}
