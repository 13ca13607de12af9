package config

import (
	"cmp"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Fields of the bgp mappings, in the order the documentation lists them.
var (
	bgpFields   = []string{"asn", "routerID", "holdTime", "keepalive", "drainTime", "listenPort", "peers"}
	peerFields  = []string{"address", "asn", "port", "password", "holdTime", "keepalive", "multihop", "passive", "maxPrefixes", "bfd"}
	bfdFields   = []string{"minRx", "minTx", "multiplier"}
	routeFields = []string{"communities", "largeCommunities", "localPreference", "med"}
)

// asTrans (RFC 6793) stands in for a 4-byte ASN towards old speakers; it
// is never anyone's ASN.
const asTrans = 23456

// bgp parses the bgp section. node is the parsed node section: its
// address is the router ID's default and no peer's address. With
// clusterPeers (a kubernetes section) the peer list may be empty or left
// out: the BGPPeer objects add to it.
func (d *decoder) bgp(f field, path string, node Node, clusterPeers bool) *BGP {
	b := &BGP{RouterID: node.Address, DrainTime: DefaultDrainTime}
	if v := d.resolve(f.value); v == nil || v.Kind != yaml.MappingNode && !isNull(v) {
		if v != nil {
			d.errorf(v, path, "expected a mapping with asn and peers, got %s", describe(v))
		}
		return b
	}
	fs := d.mapping(f.value, path, bgpFields)
	at := func(name string) string { return join(path, name) }

	asnOK := false
	if g, ok := fs["asn"]; ok {
		b.ASN, asnOK = d.asn(g, at("asn"))
	} else {
		d.missing(f.key, at("asn"), "required: give this node's autonomous system number, e.g. asn: 65001")
	}

	if g, ok := fs["routerID"]; ok {
		if s, ok := d.text(g, at("routerID")); ok && s != "" {
			if a, why := parseRouterID(s); why != "" {
				d.errorf(g.value, at("routerID"), "%s", why)
			} else {
				b.RouterID = a
			}
		}
	}

	top := d.timerSpec(fs, path)
	b.HoldTime, b.Keepalive = d.timers(top, nil)

	if g, ok := fs["drainTime"]; ok {
		if t, v, ok := d.durationValue(g, at("drainTime")); ok {
			switch {
			case t < 0:
				d.errorf(v, at("drainTime"), "%s is negative; write 0 to exit right after withdrawing the routes", show(v.Value))
			case t > MaxDrainTime:
				d.errorf(v, at("drainTime"), "%s is above the maximum %s", show(v.Value), MaxDrainTime)
			default:
				b.DrainTime = t
			}
		}
	}

	g, ok := fs["peers"]
	if !ok && !clusterPeers {
		d.missing(f.key, at("peers"), "required: list at least one neighbour to announce the VIPs to, e.g. peers: [{address: 10.0.1.1, asn: 65000}]")
	}
	var passive *peerAt
	if ok {
		b.Peers, passive = d.peers(g, at("peers"), b.ASN, asnOK, node, top, clusterPeers)
	}

	if g, ok := fs["listenPort"]; ok {
		if n, ok := d.integer(g, at("listenPort"), 0, 65535); ok {
			b.ListenPort = int(n)
			if n == 0 && passive != nil {
				d.errorf(g.value, at("listenPort"), "0 means no listener, but %s (line %d) is passive and waits for its neighbour to connect; remove listenPort (the default is then %d) or give a port", passive.path, passive.line, DefaultBGPPort)
			}
		}
	} else if passive != nil {
		b.ListenPort = DefaultBGPPort
	}
	return b
}

// peerAt remembers where a peer was defined.
type peerAt struct {
	path string
	line int
}

// peers parses the peer list. It also returns the first passive peer, nil
// without one. The list may be empty only when mayBeEmpty.
func (d *decoder) peers(f field, path string, localASN uint32, localOK bool, node Node, top *timerSpec, mayBeEmpty bool) ([]Peer, *peerAt) {
	items, ok := d.sequence(f.value, path)
	if !ok {
		return nil, nil
	}
	if len(items) == 0 {
		if !mayBeEmpty {
			d.errorf(f.key, path, "the list is empty; list at least one neighbour to announce the VIPs to, e.g. peers: [{address: 10.0.1.1, asn: 65000}]")
		}
		return nil, nil
	}
	addrs := map[netip.Addr]peerAt{}
	var passive *peerAt
	out := make([]Peer, 0, len(items))
	for i, item := range items {
		if d.exhausted {
			return nil, nil
		}
		p := index(path, i)
		item = d.resolve(item)
		if item == nil {
			return nil, nil
		}
		if item.Kind != yaml.MappingNode {
			d.errorf(item, p, "expected a peer (a mapping with address and asn), got %s", describe(item))
			continue
		}
		at := func(name string) string { return join(p, name) }
		peer := Peer{Port: DefaultBGPPort, MaxPrefixes: DefaultMaxPrefixes}
		fs := d.mapping(item, p, peerFields)

		if g, ok := fs["address"]; ok {
			if v, ok := d.text(g, at("address")); ok {
				a, why := parseUnicast4(v)
				switch first, dup := addrs[a]; {
				case why != "":
					d.errorf(g.value, at("address"), "%s", why)
				case dup:
					d.errorf(g.value, at("address"), "%s is already listed as %s (line %d); list each neighbour once", a, first.path, first.line)
				case a == node.Address:
					d.errorf(g.value, at("address"), "%s is this node's own address (node.address); a peer is another router", a)
				default:
					peer.Address = a
					addrs[a] = peerAt{path: p, line: g.value.Line}
				}
			}
		} else {
			d.missing(item, at("address"), "required: give the neighbour's IPv4 address, e.g. address: 10.0.1.1")
		}

		asnOK := false
		if g, ok := fs["asn"]; ok {
			peer.ASN, asnOK = d.asn(g, at("asn"))
		} else {
			d.missing(item, at("asn"), "required: give the neighbour's autonomous system number (bgp.asn's value for iBGP), e.g. asn: 65000")
		}

		if g, ok := fs["port"]; ok {
			if n, ok := d.integer(g, at("port"), 1, 65535); ok {
				peer.Port = uint16(n)
			}
		}

		if g, ok := fs["password"]; ok {
			if s, ok := d.str(g, at("password")); ok {
				// The message never repeats the password: errors end up in logs.
				if why := checkPassword(s); why != "" {
					d.errorf(g.value, at("password"), "%s", why)
				} else {
					peer.Password = s
				}
			}
		}

		spec := d.timerSpec(fs, p)
		peer.HoldTime, peer.Keepalive = d.timers(spec, top)

		if g, ok := fs["multihop"]; ok {
			if n, ok := d.integer(g, at("multihop"), 0, 255); ok {
				peer.Multihop = uint8(n)
				if n > 0 && asnOK && localOK && peer.ASN == localASN {
					d.errorf(g.value, at("multihop"), "applies to eBGP only, and this peer is iBGP (its asn %d is bgp.asn): iBGP sessions are not limited to one hop anyway; remove multihop", localASN)
				}
			}
		}

		if g, ok := fs["passive"]; ok {
			if v, ok := d.boolean(g, at("passive")); ok {
				peer.Passive = v
				if v && passive == nil {
					passive = &peerAt{path: p, line: item.Line}
				}
			}
		}

		if g, ok := fs["maxPrefixes"]; ok {
			if n, ok := d.maxPrefixes(g, at("maxPrefixes")); ok {
				peer.MaxPrefixes = n
			}
		}

		if g, ok := fs["bfd"]; ok {
			peer.BFD = d.bfd(g, at("bfd"))
			if peer.Multihop > 0 {
				d.errorf(g.key, at("bfd"), "xlb's BFD watches directly connected neighbours only (RFC 5881), and this peer is multihop %d; remove bfd or multihop", peer.Multihop)
			}
		}
		out = append(out, peer)
	}
	return out, passive
}

// maxPrefixes returns the value of a peer's maxPrefixes field:
// 1..MaxMaxPrefixes.
func (d *decoder) maxPrefixes(f field, path string) (uint32, bool) {
	n, ok := d.integer(f, path, math.MinInt64, math.MaxInt64)
	v := d.resolve(f.value)
	switch {
	case !ok:
		return 0, false
	case n < 0:
		d.errorf(v, path, "%d is negative; write 1..%d, or remove maxPrefixes for the default %d", n, MaxMaxPrefixes, DefaultMaxPrefixes)
		return 0, false
	case n == 0:
		d.errorf(v, path, "0 would turn the prefix limit off, and xlb keeps one: every prefix a peer sends takes memory until its session ends; "+
			"write 1..%d, or remove maxPrefixes for the default %d", MaxMaxPrefixes, DefaultMaxPrefixes)
		return 0, false
	case n > MaxMaxPrefixes:
		d.errorf(v, path, "%d is above the maximum %d: xlb imports no routes, yet holds every prefix a peer sends for as long as the session lasts "+
			"(about 1 KB of memory each, and GoBGP's work for every UPDATE grows with their number); make the router send this node fewer: it needs none", n, MaxMaxPrefixes)
		return 0, false
	}
	return uint32(n), true
}

// timerSpec is a holdTime and keepalive as written in the bgp section or
// in one peer. A nil field was not written.
type timerSpec struct {
	hold, keepalive *setting[time.Duration]
	// bad: a field was written with an invalid value (already reported).
	bad bool
}

func (d *decoder) timerSpec(fs fields, path string) *timerSpec {
	t := &timerSpec{}
	for _, tf := range []struct {
		name  string
		dst   **setting[time.Duration]
		parse func(field, string) (time.Duration, bool)
	}{{"holdTime", &t.hold, d.holdTime}, {"keepalive", &t.keepalive, d.keepalive}} {
		if g, ok := fs[tf.name]; ok {
			if v, ok := tf.parse(g, join(path, tf.name)); ok {
				*tf.dst = &setting[time.Duration]{v, g.value, join(path, tf.name)}
			} else {
				t.bad = true
			}
		}
	}
	return t
}

// timers resolves the hold time and keepalive of c merged over top, the
// bgp section's (nil when c is the section's own), and reports the
// conflicts that c's own fields cause: those of the section's fields
// alone are reported once, at the section, not at every peer.
func (d *decoder) timers(c, top *timerSpec) (hold, keepalive time.Duration) {
	h, k := c.hold, c.keepalive
	report := !c.bad
	if top != nil {
		h = cmp.Or(h, top.hold)
		k = cmp.Or(k, top.keepalive)
		report = report && !top.bad
	}
	hold = DefaultHoldTime
	if h != nil {
		hold = h.v
	}
	if hold == 0 {
		if report && k != nil && k == c.keepalive {
			d.errorf(k.node, k.path, "does not apply: the hold time is 0 (%s, line %d), so no keepalives are sent; remove keepalive or set a hold time of 3s or more", h.path, h.node.Line)
		}
		return 0, 0
	}
	if k == nil {
		return hold, (hold / 3).Truncate(time.Second)
	}
	if k.v >= hold && report {
		const why = "a keepalive must be sent well before the hold time runs out"
		switch {
		case k == c.keepalive && h == nil:
			d.errorf(k.node, k.path, "%s is not shorter than the hold time (default %s); %s: lower keepalive (usually a third of holdTime) or raise holdTime", k.v, hold, why)
		case k == c.keepalive:
			d.errorf(k.node, k.path, "%s is not shorter than the hold time %s (%s, line %d); %s: lower keepalive (usually a third of holdTime) or raise holdTime", k.v, hold, h.path, h.node.Line, why)
		case h != nil && h == c.hold:
			d.errorf(h.node, h.path, "%s is not longer than the keepalive %s (%s, line %d); %s: raise holdTime or set a shorter keepalive here", hold, k.v, k.path, k.node.Line, why)
		}
	}
	return hold, k.v
}

// holdTime returns the value of a holdTime field: 0 or whole seconds in
// MinHoldTime..MaxHoldTime (RFC 4271 §4.2).
func (d *decoder) holdTime(f field, path string) (time.Duration, bool) {
	t, v, ok := d.durationValue(f, path)
	if !ok {
		return 0, false
	}
	if t != 0 && (t < MinHoldTime || t > MaxHoldTime) {
		d.errorf(v, path, "%s is out of range; the hold time is 0 (no keepalives) or 3s..65535s", show(v.Value))
		return 0, false
	}
	return t, d.wholeSeconds(t, v, path)
}

// keepalive returns the value of a keepalive field: whole seconds, at
// least 1s. That it is below the hold time is checked by timers.
func (d *decoder) keepalive(f field, path string) (time.Duration, bool) {
	t, v, ok := d.durationValue(f, path)
	if !ok {
		return 0, false
	}
	if t < time.Second || t >= MaxHoldTime {
		d.errorf(v, path, "%s is out of range 1s..65534s; to send no keepalives, set holdTime: 0", show(v.Value))
		return 0, false
	}
	return t, d.wholeSeconds(t, v, path)
}

// wholeSeconds reports whether t is whole seconds, as BGP carries its
// timers, and reports it if not.
func (d *decoder) wholeSeconds(t time.Duration, v *yaml.Node, path string) bool {
	if t%time.Second == 0 {
		return true
	}
	d.errorf(v, path, "%s is not a whole number of seconds, and BGP carries its timers in seconds; write e.g. %s", show(v.Value), max(t.Round(time.Second), time.Second))
	return false
}

// asn returns the value of an ASN field: 1..4294967295, not AS_TRANS.
func (d *decoder) asn(f field, path string) (uint32, bool) {
	v := d.resolve(f.value)
	if v == nil {
		return 0, false
	}
	if v.Kind == yaml.ScalarNode && (v.ShortTag() == "!!float" || v.ShortTag() == "!!str") {
		if n, ok := asdot(v.Value); ok {
			d.errorf(v, path, "%s is in asdot notation; write the ASN as one number: %d", v.Value, n)
			return 0, false
		}
	}
	n, ok := d.integer(f, path, 0, math.MaxUint32)
	switch {
	case !ok:
		return 0, false
	case n == 0:
		d.errorf(v, path, "0 is reserved and is no one's ASN (RFC 7607); use 1..4294967295, e.g. a private ASN from 64512..65534")
		return 0, false
	case n == asTrans:
		d.errorf(v, path, "23456 is AS_TRANS (RFC 6793), which only stands in for 4-byte ASNs towards old speakers; use the real ASN")
		return 0, false
	}
	return uint32(n), true
}

// asdot parses the asdot notation of an ASN, "HIGH.LOW" (RFC 5396), so
// that the error can give the number to write instead.
func asdot(s string) (uint32, bool) {
	hi, lo, ok := strings.Cut(s, ".")
	if !ok {
		return 0, false
	}
	h, err1 := strconv.ParseUint(hi, 10, 16)
	l, err2 := strconv.ParseUint(lo, 10, 16)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return uint32(h<<16 | l), true
}

// bfd parses a peer's bfd field. Its presence enables BFD, so a null or
// empty mapping means every default.
func (d *decoder) bfd(f field, path string) *BFD {
	b := &BFD{MinRx: DefaultBFDInterval, MinTx: DefaultBFDInterval, Multiplier: DefaultBFDMultiplier}
	if v := d.resolve(f.value); v == nil || v.Kind != yaml.MappingNode && !isNull(v) {
		if v != nil {
			d.errorf(v, path, "expected a mapping such as {minRx: 300ms, minTx: 300ms, multiplier: 3}, got %s; write bfd: {} for the defaults, or remove bfd to go without", describe(v))
		}
		return b
	}
	fs := d.mapping(f.value, path, bfdFields)
	for _, bf := range []struct {
		name string
		dst  *time.Duration
	}{{"minRx", &b.MinRx}, {"minTx", &b.MinTx}} {
		g, ok := fs[bf.name]
		if !ok {
			continue
		}
		p := join(path, bf.name)
		t, v, ok := d.durationValue(g, p)
		switch {
		case !ok:
		case t < MinBFDInterval:
			d.errorf(v, p, "%s is below the minimum %s", show(v.Value), MinBFDInterval)
		case t > MaxBFDInterval:
			d.errorf(v, p, "%s is above the maximum %s", show(v.Value), MaxBFDInterval)
		default:
			*bf.dst = t
		}
	}
	if g, ok := fs["multiplier"]; ok {
		if n, ok := d.integer(g, join(path, "multiplier"), 1, 255); ok {
			b.Multiplier = uint8(n)
		}
	}
	return b
}

// boolean returns the value of a true/false field.
func (d *decoder) boolean(f field, path string) (bool, bool) {
	v := d.resolve(f.value)
	if v == nil {
		return false, false
	}
	if isNull(v) {
		d.errorf(f.key, path, "has no value; give one or remove the field")
		return false, false
	}
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" {
		d.errorf(v, path, "expected true or false, got %s", describe(v))
		return false, false
	}
	var b bool
	if err := v.Decode(&b); err != nil {
		d.errorf(v, path, "expected true or false, got %s", describe(v))
		return false, false
	}
	return b, true
}

// parseRouterID parses a BGP identifier: any non-zero 32-bit number,
// written as an IPv4 address (RFC 6286).
func parseRouterID(s string) (netip.Addr, string) {
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		if p, perr := netip.ParsePrefix(s); perr == nil {
			return netip.Addr{}, fmt.Sprintf("%q is a prefix, not an address; write the address alone (%s)", s, p.Addr())
		}
		return netip.Addr{}, fmt.Sprintf("%q is not an IPv4 address; a router ID is written as one, e.g. 10.0.1.2", s)
	case a.Is4In6():
		return netip.Addr{}, fmt.Sprintf("%q is an IPv4-mapped IPv6 address; write it as plain IPv4 (%s)", s, a.Unmap())
	case a.Is6():
		return netip.Addr{}, fmt.Sprintf("%q is an IPv6 address; a router ID is 32 bits, written as an IPv4 address", s)
	case a.IsUnspecified():
		return netip.Addr{}, "0.0.0.0 is not a valid router ID: it must not be zero; remove routerID to use node.address"
	}
	return a, ""
}

// checkPassword accepts a TCP MD5 key. The reason never quotes the key.
func checkPassword(s string) string {
	if len(s) > MaxPasswordLen {
		return fmt.Sprintf("is %d bytes long; a TCP MD5 key has at most %d", len(s), MaxPasswordLen)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' {
			return fmt.Sprintf("has a character that is not printable ASCII at position %d; use printable ASCII only, which every router accepts too", i+1)
		}
	}
	return ""
}

// wellKnownCommunities are the community names a file may use (RFC 1997,
// 7999, 8326, 9494).
var wellKnownCommunities = []struct {
	name  string
	value uint32
}{
	{"no-export", 0xFFFFFF01},
	{"no-advertise", 0xFFFFFF02},
	{"no-export-subconfed", 0xFFFFFF03},
	{"no-peer", 0xFFFFFF04},
	{"blackhole", 0xFFFF029A},
	{"graceful-shutdown", 0xFFFF0000},
}

// wellKnownNames lists the names for messages.
func wellKnownNames() string {
	names := make([]string, len(wellKnownCommunities))
	for i, w := range wellKnownCommunities {
		names[i] = w.name
	}
	return strings.Join(names, ", ")
}

// parseCommunity parses an RFC 1997 community: "ASN:VALUE" with two
// decimal numbers 0..65535, or a well-known name in any case.
func parseCommunity(s string) (uint32, string) {
	for _, w := range wellKnownCommunities {
		if strings.EqualFold(s, w.name) {
			return w.value, ""
		}
	}
	parts := strings.Split(s, ":")
	switch len(parts) {
	case 2:
	case 3:
		return 0, fmt.Sprintf("%s has three numbers, as a large community has; move it to largeCommunities", show(s))
	default:
		return 0, fmt.Sprintf("%s is not a community; write ASN:VALUE with two numbers 0..65535 (e.g. 65000:100) or one of the names %s", show(s), wellKnownNames())
	}
	var v [2]uint64
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			if _, err := strconv.ParseUint(p, 10, 32); err == nil {
				return 0, fmt.Sprintf("%s: %s is above 65535; a community holds two 16-bit numbers, so for a 4-byte ASN use largeCommunities (e.g. %s:%s:0)", show(s), p, parts[0], parts[1])
			}
			return 0, fmt.Sprintf("%s is not a community; write ASN:VALUE with two numbers 0..65535 (e.g. 65000:100) or one of the names %s", show(s), wellKnownNames())
		}
		v[i] = n
	}
	return uint32(v[0]<<16 | v[1]), ""
}

// formatCommunity is the normal form of a community: its well-known
// name, or ASN:VALUE in decimal.
func formatCommunity(c uint32) string {
	for _, w := range wellKnownCommunities {
		if w.value == c {
			return w.name
		}
	}
	return fmt.Sprintf("%d:%d", c>>16, c&0xFFFF)
}

// parseLargeCommunity parses an RFC 8092 large community,
// "GLOBAL:LOCAL1:LOCAL2" with three decimal numbers 0..4294967295.
func parseLargeCommunity(s string) ([3]uint32, string) {
	const form = "write GLOBAL:LOCAL1:LOCAL2 with three numbers 0..4294967295 (e.g. 65000:1:2)"
	parts := strings.Split(s, ":")
	if len(parts) == 2 {
		if _, why := parseCommunity(s); why == "" {
			return [3]uint32{}, fmt.Sprintf("%s has two numbers, as a community has; move it to communities, or %s", show(s), form)
		}
	}
	if len(parts) != 3 {
		return [3]uint32{}, fmt.Sprintf("%s is not a large community; %s", show(s), form)
	}
	var v [3]uint32
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return [3]uint32{}, fmt.Sprintf("%s is not a large community; %s", show(s), form)
		}
		v[i] = uint32(n)
	}
	return v, ""
}

// routeAttributes parses a service's bgp field. ok is false when any of
// it is invalid.
func (d *decoder) routeAttributes(f field, path string) (a RouteAttributes, ok bool) {
	if v := d.resolve(f.value); v == nil || v.Kind != yaml.MappingNode && !isNull(v) {
		if v != nil {
			d.errorf(v, path, "expected a mapping such as {communities: [\"65000:100\"], med: 10}, got %s", describe(v))
		}
		return a, false
	}
	before := len(d.errs)
	fs := d.mapping(f.value, path, routeFields)
	if g, ok := fs["communities"]; ok {
		cs := stringList(d, g, join(path, "communities"), MaxCommunities, parseCommunity, cmp.Compare[uint32])
		a.Communities = make([]string, len(cs))
		for i, c := range cs {
			a.Communities[i] = formatCommunity(c)
		}
	}
	if g, ok := fs["largeCommunities"]; ok {
		cs := stringList(d, g, join(path, "largeCommunities"), MaxLargeCommunities, parseLargeCommunity, compareLarge)
		a.LargeCommunities = make([]string, len(cs))
		for i, c := range cs {
			a.LargeCommunities[i] = fmt.Sprintf("%d:%d:%d", c[0], c[1], c[2])
		}
	}
	for _, af := range []struct {
		name string
		dst  **uint32
	}{{"localPreference", &a.LocalPreference}, {"med", &a.MED}} {
		if g, ok := fs[af.name]; ok {
			if n, ok := d.integer(g, join(path, af.name), 0, math.MaxUint32); ok {
				v := uint32(n)
				*af.dst = &v
			}
		}
	}
	if len(a.Communities) == 0 {
		a.Communities = nil
	}
	if len(a.LargeCommunities) == 0 {
		a.LargeCommunities = nil
	}
	return a, len(d.errs) == before
}

// stringList parses a list of strings with parse, and returns the values
// distinct and sorted by compare; a value listed twice is reported.
func stringList[T comparable](d *decoder, f field, path string, limit int, parse func(string) (T, string), compare func(a, b T) int) []T {
	items, ok := d.sequence(f.value, path)
	if !ok {
		return nil
	}
	if len(items) > limit {
		d.errorf(f.key, path, "%d entries exceed the limit of %d per route; remove some", len(items), limit)
		return nil
	}
	type seen struct {
		i, line int
	}
	first := map[T]seen{}
	var out []T
	for i, item := range items {
		p := index(path, i)
		s, ok := d.text(field{key: item, value: item}, p)
		if !ok {
			continue
		}
		v, why := parse(s)
		if why != "" {
			d.errorf(item, p, "%s", why)
			continue
		}
		if f, dup := first[v]; dup {
			d.errorf(item, p, "%s is the same as %s (line %d); list each once", show(s), index(path, f.i), f.line)
			continue
		}
		first[v] = seen{i, item.Line}
		out = append(out, v)
	}
	slices.SortFunc(out, compare)
	return out
}

func compareLarge(a, b [3]uint32) int {
	return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]), cmp.Compare(a[2], b[2]))
}

// routeAt remembers the first service that wrote bgp attributes for a
// VIP: every other service with that VIP must write the same, or none.
type routeAt struct {
	attrs RouteAttributes
	at    serviceAt // with the line of its bgp field
}

// checkRoute records or compares the attributes a service s (at) wrote
// in its bgp field g.
func (d *decoder) checkRoute(routes map[netip.Addr]routeAt, s Service, at serviceAt, g field, path string) {
	first, dup := routes[s.VIP]
	if !dup {
		routes[s.VIP] = routeAt{attrs: s.BGP, at: at}
		return
	}
	if first.attrs.Equal(s.BGP) {
		return
	}
	where := fmt.Sprintf("services[%d].bgp, line %d", first.at.index, first.at.line)
	if first.at.name != "" {
		where = fmt.Sprintf("service %q (%s)", first.at.name, where)
	}
	d.errorf(g.key, path, "differs from the bgp attributes of %s, which has the same VIP %s (%s); services that share a VIP are announced as one route: write the same attributes in both, or in one of them only",
		where, s.VIP, attrDiff(s.BGP, first.attrs))
}

// attrDiff describes the first attribute in which a (here) differs from
// b (there).
func attrDiff(a, b RouteAttributes) string {
	list := func(s []string) string {
		if len(s) == 0 {
			return "none"
		}
		return "[" + strings.Join(s, " ") + "]"
	}
	num := func(p *uint32) string {
		if p == nil {
			return "unset"
		}
		return strconv.FormatUint(uint64(*p), 10)
	}
	switch {
	case !slices.Equal(a.Communities, b.Communities):
		return fmt.Sprintf("communities %s here, %s there", list(a.Communities), list(b.Communities))
	case !slices.Equal(a.LargeCommunities, b.LargeCommunities):
		return fmt.Sprintf("largeCommunities %s here, %s there", list(a.LargeCommunities), list(b.LargeCommunities))
	case !equalPtr(a.LocalPreference, b.LocalPreference):
		return fmt.Sprintf("localPreference %s here, %s there", num(a.LocalPreference), num(b.LocalPreference))
	}
	return fmt.Sprintf("med %s here, %s there", num(a.MED), num(b.MED))
}
