// Package allocator hands out load-balancer addresses (VIPs) to Services
// from address pools. It is pure bookkeeping: it parses pools, decides
// which pools a Service may use and which address it gets, and remembers
// who holds what. Reading Services and writing their status is the
// controller's job; the allocator never sees the API server, so its rules
// can be tested exhaustively.
//
// An address is held by one Service, or shared by Services of one
// namespace that have the same sharing key and no port in common
// (share.go).
package allocator

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/xlbproject/xlb/internal/k8s/api"
)

// span is an inclusive range of addresses of one family; text is the
// pool entry it came from, for messages.
type span struct {
	lo, hi netip.Addr
	text   string
}

// Pool is a parsed, valid AddressPool.
type Pool struct {
	// Name is the AddressPool's name.
	Name string
	// AutoAssign: Services that request neither an address nor a pool
	// may get addresses from this pool.
	AutoAssign bool
	// Priority orders the pools Services get addresses from; see Less.
	Priority int

	spans        []span // sorted (IPv4 first), disjoint
	avoidBuggy   bool
	size         [2]uint64 // usable addresses by family (index v6), at most MaxUint64
	namespaces   []string
	nsSelectors  []labels.Selector
	svcSelectors []labels.Selector
}

// ParsePool checks an AddressPool's spec and returns the pool. The error
// names every bad entry and says what is wrong with it.
func ParsePool(name string, spec api.AddressPoolSpec) (*Pool, error) {
	p := &Pool{Name: name, AutoAssign: spec.AutoAssigns(), avoidBuggy: spec.AvoidBuggyIPs}
	var problems []string
	if len(spec.Addresses) == 0 {
		problems = append(problems, "spec.addresses is empty: list at least one CIDR (10.99.0.0/28, 2001:db8:99::/120) or range (10.99.0.10-10.99.0.20)")
	}
	for i, entry := range spec.Addresses {
		s, err := parseEntry(entry)
		if err != nil {
			problems = append(problems, fmt.Sprintf("spec.addresses[%d] %q: %v", i, entry, err))
			continue
		}
		p.spans = append(p.spans, s)
	}
	slices.SortFunc(p.spans, func(a, b span) int { return a.lo.Compare(b.lo) })
	for i := 1; i < len(p.spans); i++ {
		if prev, s := p.spans[i-1], p.spans[i]; s.lo.BitLen() == prev.hi.BitLen() && s.lo.Compare(prev.hi) <= 0 {
			problems = append(problems, fmt.Sprintf("spec.addresses: %q overlaps %q; list each address once", s.text, prev.text))
		}
	}
	if sa := spec.ServiceAllocation; sa != nil {
		if sa.Priority < 0 {
			problems = append(problems, fmt.Sprintf("spec.serviceAllocation.priority %d is negative; use 0 (tried last) or a positive number (lower first)", sa.Priority))
		}
		p.Priority = sa.Priority
		p.namespaces = slices.Clone(sa.Namespaces)
		var bad []string
		p.nsSelectors, bad = selectors("spec.serviceAllocation.namespaceSelectors", sa.NamespaceSelectors)
		problems = append(problems, bad...)
		p.svcSelectors, bad = selectors("spec.serviceAllocation.serviceSelectors", sa.ServiceSelectors)
		problems = append(problems, bad...)
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("address pool %q: %s", name, strings.Join(problems, "; "))
	}
	for _, s := range p.spans {
		f := fam(s.lo)
		p.size[f] = addSat(p.size[f], s.count(p.avoidBuggy))
	}
	if p.Size() == 0 {
		return nil, fmt.Errorf("address pool %q: has no usable address: avoidBuggyIPs leaves out every address of %s", name, p.describe())
	}
	return p, nil
}

// parseEntry parses one entry of spec.addresses: a CIDR or a range.
func parseEntry(entry string) (span, error) {
	text := strings.TrimSpace(entry)
	switch {
	case text == "":
		return span{}, fmt.Errorf("is empty; write a CIDR (10.99.0.0/28) or a range (10.99.0.10-10.99.0.20)")
	case strings.Contains(text, "/"):
		pfx, err := netip.ParsePrefix(text)
		if err != nil {
			return span{}, fmt.Errorf("is not a CIDR (want e.g. 10.99.0.0/28): %v", err)
		}
		if err := checkAddr(pfx.Addr()); err != nil {
			return span{}, err
		}
		if m := pfx.Masked(); m != pfx {
			return span{}, fmt.Errorf("has host bits set: the network is %s", m)
		}
		return span{lo: pfx.Addr(), hi: lastOf(pfx), text: text}, nil
	case strings.Contains(text, "-"):
		first, last, _ := strings.Cut(text, "-")
		var ends [2]netip.Addr
		for i, s := range []string{first, last} {
			a, err := netip.ParseAddr(strings.TrimSpace(s))
			if err != nil {
				return span{}, fmt.Errorf("is not a range of two addresses (want e.g. 10.99.0.10-10.99.0.20): %q is not an address", strings.TrimSpace(s))
			}
			if err := checkAddr(a); err != nil {
				return span{}, err
			}
			ends[i] = a
		}
		if ends[0].Is4() != ends[1].Is4() {
			return span{}, fmt.Errorf("mixes IPv4 and IPv6 (%s, %s); a range is of one family: list a range of each", ends[0], ends[1])
		}
		if ends[1].Less(ends[0]) {
			return span{}, fmt.Errorf("the start %s comes after the end %s; write the lower address first", ends[0], ends[1])
		}
		return span{lo: ends[0], hi: ends[1], text: text}, nil
	default:
		if a, err := netip.ParseAddr(text); err == nil && checkAddr(a) == nil {
			return span{}, fmt.Errorf("is a single address; write it as a CIDR: %s/%d", a, a.BitLen())
		}
		return span{}, fmt.Errorf("is neither a CIDR (10.99.0.0/28, 2001:db8:99::/120) nor a range (10.99.0.10-10.99.0.20)")
	}
}

// checkAddr says why a cannot be in a pool: an address with a zone, or
// an IPv4-mapped one, which is written as IPv4.
func checkAddr(a netip.Addr) error {
	switch {
	case a.Is4In6():
		return fmt.Errorf("is an IPv4-mapped IPv6 address; write it as plain IPv4 (%s)", a.Unmap())
	case a.Zone() != "":
		return fmt.Errorf("has a zone (%%%s); write the address without one", a.Zone())
	}
	return nil
}

// lastOf is the last address of p (masked).
func lastOf(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// fam is the index of a's family: 0 for IPv4, 1 for IPv6.
func fam(a netip.Addr) int {
	if a.Is4() {
		return 0
	}
	return 1
}

// addSat adds without overflow: an IPv6 pool may hold more addresses
// than a uint64 counts, and then holds "all of them".
func addSat(a, b uint64) uint64 {
	if a+b < a {
		return math.MaxUint64
	}
	return a + b
}

func selectors(path string, in []api.LabelSelector) ([]labels.Selector, []string) {
	var out []labels.Selector
	var problems []string
	for i := range in {
		s, err := in[i].AsSelector()
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s[%d]: %v", path, i, err))
			continue
		}
		out = append(out, s)
	}
	return out, problems
}

// Size is the number of addresses the pool hands out (at most
// MaxUint64).
func (p *Pool) Size() uint64 { return addSat(p.size[0], p.size[1]) }

// SizeOf is the number of addresses of one family (v6: IPv6) the pool
// hands out.
func (p *Pool) SizeOf(v6 bool) uint64 { return p.size[famOf(v6)] }

// Has reports whether the pool has addresses of the IPv6 family (v6) or
// of the IPv4 one.
func (p *Pool) Has(v6 bool) bool { return p.size[famOf(v6)] > 0 }

// Family says which families the pool hands out: "IPv4", "IPv6" or
// "IPv4 and IPv6" (a dual-stack pool, which gives a dual-stack Service
// both its addresses).
func (p *Pool) Family() string {
	switch {
	case p.Has(false) && p.Has(true):
		return "IPv4 and IPv6"
	case p.Has(true):
		return "IPv6"
	}
	return "IPv4"
}

func famOf(v6 bool) int {
	if v6 {
		return 1
	}
	return 0
}

// Contains reports whether the pool hands out addr (an address in one of
// its ranges, and not a .0 or .255 one left out by avoidBuggyIPs).
func (p *Pool) Contains(addr netip.Addr) bool {
	if !addr.IsValid() || addr.Zone() != "" || addr.Is4In6() {
		return false
	}
	return p.contains(addr)
}

func (p *Pool) contains(x netip.Addr) bool {
	return p.inRange(x) && !(p.avoidBuggy && buggy(x))
}

// inRange reports whether x lies in one of the pool's ranges, usable or not.
func (p *Pool) inRange(x netip.Addr) bool {
	i, found := slices.BinarySearchFunc(p.spans, x, func(s span, x netip.Addr) int { return s.lo.Compare(x) })
	if !found {
		if i == 0 {
			return false
		}
		i--
	}
	s := p.spans[i]
	return s.lo.BitLen() == x.BitLen() && x.Compare(s.hi) <= 0
}

// describe lists the pool's entries as written.
func (p *Pool) describe() string {
	texts := make([]string, len(p.spans))
	for i, s := range p.spans {
		texts[i] = s.text
	}
	return strings.Join(texts, ", ")
}

// Eligible reports whether the pool serves a Service in namespace ns with
// the given labels of the Service and of its namespace; if not, why is a
// sentence fragment saying why ("serves namespaces a, b only").
func (p *Pool) Eligible(ns string, nsLabels, svcLabels map[string]string) (ok bool, why string) {
	if len(p.namespaces) > 0 && !slices.Contains(p.namespaces, ns) {
		return false, fmt.Sprintf("serves namespaces %s only", strings.Join(p.namespaces, ", "))
	}
	if len(p.nsSelectors) > 0 && !anyMatches(p.nsSelectors, nsLabels) {
		return false, fmt.Sprintf("serves namespaces matching its namespaceSelectors only, and the labels of namespace %q match none", ns)
	}
	if len(p.svcSelectors) > 0 && !anyMatches(p.svcSelectors, svcLabels) {
		return false, "serves Services matching its serviceSelectors only, and this Service's labels match none"
	}
	return true, ""
}

func anyMatches(sels []labels.Selector, set map[string]string) bool {
	for _, s := range sels {
		if s.Matches(labels.Set(set)) {
			return true
		}
	}
	return false
}

// Less orders pools the way Services get addresses from them: pools with a
// positive priority first, lowest number first, then those with priority
// 0; among equals by name.
func Less(a, b *Pool) bool { return compare(a, b) < 0 }

func compare(a, b *Pool) int {
	rank := func(p *Pool) int {
		if p.Priority <= 0 {
			return int(^uint(0) >> 1)
		}
		return p.Priority
	}
	if c := cmp.Compare(rank(a), rank(b)); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

// count is the number of usable addresses in s (at most MaxUint64).
func (s span) count(avoidBuggy bool) uint64 {
	if s.lo.Is6() {
		hi, lo := s.hi.As16(), s.lo.As16()
		hh, hl := binary.BigEndian.Uint64(hi[:8]), binary.BigEndian.Uint64(hi[8:])
		lh, ll := binary.BigEndian.Uint64(lo[:8]), binary.BigEndian.Uint64(lo[8:])
		diff, borrow := bits.Sub64(hl, ll, 0)
		if top, _ := bits.Sub64(hh, lh, borrow); top != 0 || diff == math.MaxUint64 {
			return math.MaxUint64
		}
		return diff + 1
	}
	lo, hi := toU32(s.lo), toU32(s.hi)
	n := uint64(hi) - uint64(lo) + 1
	if avoidBuggy {
		n -= buggyUpTo(hi)
		if lo > 0 {
			n += buggyUpTo(lo - 1)
		}
	}
	return n
}

// buggyUpTo counts the addresses in [0, x] ending in .0 or .255.
func buggyUpTo(x uint32) uint64 {
	full := uint64(x) / 256 // complete /24s below x's: each has two
	n := 2 * full
	n++ // x's own .0
	if x&0xff == 0xff {
		n++
	}
	return n
}

// buggy: IPv4 addresses ending in .0 or .255, which some old clients
// and routers take for network or broadcast addresses. IPv6 has no such
// addresses.
func buggy(x netip.Addr) bool {
	if !x.Is4() {
		return false
	}
	b := x.As4()
	return b[3] == 0 || b[3] == 0xff
}

func toU32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func fromU32(x uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(x >> 24), byte(x >> 16), byte(x >> 8), byte(x)})
}
