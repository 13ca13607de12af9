package bgp

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Attributes are the optional path attributes xlb puts on an announced
// route. The zero value announces a plain route (origin IGP, no MED, the
// receiver's default local preference).
type Attributes struct {
	// Communities are RFC 1997 communities, "ASN:VALUE" with two 16-bit
	// numbers (e.g. "65000:100") or a well-known name (see ParseCommunity).
	Communities []string
	// LargeCommunities are RFC 8092 large communities, "GLOBAL:LOCAL1:LOCAL2"
	// with three 32-bit numbers (e.g. "65000:1:2").
	LargeCommunities []string
	// LocalPref is sent to iBGP peers only: BGP strips LOCAL_PREF on eBGP
	// sessions, so on those it has no effect.
	LocalPref *uint32
	// MED is the MULTI_EXIT_DISC sent to every peer.
	MED *uint32
	// Peers, when not nil, are the only peers (by address) the route
	// goes to; the others never get it (see export.go).
	Peers []netip.Addr
}

// wellKnownCommunities are the names ParseCommunity accepts (RFC 1997,
// 3765, 7611, 7999, 8326, 9494); FormatCommunity prints the first name of
// a value, so aliases (FRR's local-as) come after the RFC spelling.
var wellKnownCommunities = []struct {
	name  string
	value uint32
}{
	{"graceful-shutdown", 0xFFFF0000},
	{"accept-own", 0xFFFF0001},
	{"llgr-stale", 0xFFFF0006},
	{"no-llgr", 0xFFFF0007},
	{"blackhole", 0xFFFF029A},
	{"no-export", 0xFFFFFF01},
	{"no-advertise", 0xFFFFFF02},
	{"no-export-subconfed", 0xFFFFFF03},
	{"local-as", 0xFFFFFF03},
	{"no-peer", 0xFFFFFF04},
}

// ParseCommunity parses a standard community: "ASN:VALUE" where both
// halves are decimal numbers from 0 to 65535, or one of the well-known
// names no-export, no-advertise, no-export-subconfed (alias local-as),
// no-peer, blackhole, graceful-shutdown, accept-own, llgr-stale, no-llgr.
func ParseCommunity(s string) (uint32, error) {
	for _, w := range wellKnownCommunities {
		if strings.EqualFold(s, w.name) {
			return w.value, nil
		}
	}
	parts := strings.Split(s, ":")
	if len(parts) != 2 {
		return 0, fmt.Errorf("community %q: want ASN:VALUE (two numbers 0-65535, e.g. 65000:100) or a well-known name such as no-export", s)
	}
	var v [2]uint32
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return 0, fmt.Errorf("community %q: %q is not a number from 0 to 65535", s, p)
		}
		v[i] = uint32(n)
	}
	return v[0]<<16 | v[1], nil
}

// FormatCommunity is the inverse of ParseCommunity: a well-known name
// where the value has one, else "ASN:VALUE".
func FormatCommunity(c uint32) string {
	for _, w := range wellKnownCommunities {
		if w.value == c {
			return w.name
		}
	}
	return fmt.Sprintf("%d:%d", c>>16, c&0xFFFF)
}

// LargeCommunity is a parsed RFC 8092 large community.
type LargeCommunity struct {
	Global, Local1, Local2 uint32
}

func (c LargeCommunity) String() string {
	return fmt.Sprintf("%d:%d:%d", c.Global, c.Local1, c.Local2)
}

func (c LargeCommunity) compare(o LargeCommunity) int {
	if c.Global != o.Global {
		return cmpUint32(c.Global, o.Global)
	}
	if c.Local1 != o.Local1 {
		return cmpUint32(c.Local1, o.Local1)
	}
	return cmpUint32(c.Local2, o.Local2)
}

func cmpUint32(a, b uint32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ParseLargeCommunity parses "GLOBAL:LOCAL1:LOCAL2", three decimal numbers
// from 0 to 4294967295.
func ParseLargeCommunity(s string) (LargeCommunity, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return LargeCommunity{}, fmt.Errorf("large community %q: want GLOBAL:LOCAL1:LOCAL2 (three numbers 0-4294967295, e.g. 65000:1:2)", s)
	}
	var v [3]uint32
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return LargeCommunity{}, fmt.Errorf("large community %q: %q is not a number from 0 to 4294967295", s, p)
		}
		v[i] = uint32(n)
	}
	return LargeCommunity{Global: v[0], Local1: v[1], Local2: v[2]}, nil
}

// Validate reports the first attribute that cannot be announced.
func (a Attributes) Validate() error {
	_, err := a.parse()
	return err
}

// parsedAttrs is the canonical form of Attributes: parsed, sorted and
// without duplicates, so two Attributes that announce the same thing
// compare equal.
type parsedAttrs struct {
	communities []uint32
	large       []LargeCommunity
	localPref   *uint32
	med         *uint32
	// only: the route goes to peers alone (sorted, distinct).
	only  bool
	peers []netip.Addr
}

func (a Attributes) parse() (parsedAttrs, error) {
	var p parsedAttrs
	for i, s := range a.Communities {
		c, err := ParseCommunity(s)
		if err != nil {
			return parsedAttrs{}, fmt.Errorf("communities[%d]: %w", i, err)
		}
		p.communities = append(p.communities, c)
	}
	for i, s := range a.LargeCommunities {
		c, err := ParseLargeCommunity(s)
		if err != nil {
			return parsedAttrs{}, fmt.Errorf("largeCommunities[%d]: %w", i, err)
		}
		p.large = append(p.large, c)
	}
	slices.Sort(p.communities)
	p.communities = slices.Compact(p.communities)
	slices.SortFunc(p.large, LargeCommunity.compare)
	p.large = slices.Compact(p.large)
	if a.LocalPref != nil {
		v := *a.LocalPref
		p.localPref = &v
	}
	if a.MED != nil {
		v := *a.MED
		p.med = &v
	}
	if a.Peers != nil {
		p.only = true
		p.peers = slices.Clone(a.Peers)
		slices.SortFunc(p.peers, netip.Addr.Compare)
		p.peers = slices.Compact(p.peers)
	}
	return p, nil
}

func (p parsedAttrs) equal(o parsedAttrs) bool {
	return slices.Equal(p.communities, o.communities) &&
		slices.Equal(p.large, o.large) &&
		equalPtr(p.localPref, o.localPref) &&
		equalPtr(p.med, o.med) &&
		p.only == o.only && slices.Equal(p.peers, o.peers)
}

func equalPtr(a, b *uint32) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// attributes turns the canonical form back into Attributes for status
// output.
func (p parsedAttrs) attributes() Attributes {
	var a Attributes
	for _, c := range p.communities {
		a.Communities = append(a.Communities, FormatCommunity(c))
	}
	for _, c := range p.large {
		a.LargeCommunities = append(a.LargeCommunities, c.String())
	}
	if p.localPref != nil {
		v := *p.localPref
		a.LocalPref = &v
	}
	if p.med != nil {
		v := *p.med
		a.MED = &v
	}
	if p.only {
		a.Peers = append([]netip.Addr{}, p.peers...)
	}
	return a
}
