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

	"github.com/xlbproject/xlb/internal/config/schema"
)

// asTrans (RFC 6793) stands in for a 4-byte ASN towards old speakers; it
// is never anyone's ASN.
const asTrans = 23456

// bgp checks the bgp section. node is the checked node section: its
// address is the router ID's default and no peer's address. With
// clusterPeers (a kubernetes section) the peer list may be empty or left
// out: the BGPPeer objects add to it.
func (c *checker) bgp(f schema.Field[schema.BGP], path string, node Node, clusterPeers bool) *BGP {
	b := &BGP{RouterID: node.Address, DrainTime: DefaultDrainTime}
	if f.Bad {
		return b
	}
	v := f.V
	at := func(name string) string { return join(path, name) }

	asnOK := false
	if v.ASN.Given {
		b.ASN, asnOK = c.asn(v.ASN, at("asn"))
	} else {
		c.missing(f.At.Key, at("asn"), "required: give this node's autonomous system number, e.g. asn: 65001")
	}

	if g := v.RouterID; valid(g) && g.V != "" {
		if a, why := parseRouterID(string(g.V)); why != "" {
			c.errorf(g.At.Value, at("routerID"), "%s", why)
		} else {
			b.RouterID = a
		}
	}

	top := c.timerSpec(v.HoldTime, v.Keepalive, path)
	b.HoldTime, b.Keepalive = c.timers(top, nil)

	if g := v.DrainTime; valid(g) {
		switch t := g.V.D; {
		case t < 0:
			c.errorf(g.At.Node, at("drainTime"), "%s is negative; write 0 to exit right after withdrawing the routes", schema.Show(g.V.String()))
		case t > MaxDrainTime:
			c.errorf(g.At.Node, at("drainTime"), "%s is above the maximum %s", schema.Show(g.V.String()), MaxDrainTime)
		default:
			b.DrainTime = t
		}
	}

	if !v.Peers.Given && !clusterPeers {
		c.missing(f.At.Key, at("peers"), "required: list at least one neighbour to announce the VIPs to, e.g. peers: [{address: 10.0.1.1, asn: 65000}]")
	}
	var passive *peerAt
	if v.Peers.Given {
		b.Peers, passive = c.peers(v.Peers, at("peers"), b.ASN, asnOK, node, top, clusterPeers)
	}

	if g := v.ListenPort; g.Given {
		if n, ok := c.integer(g, at("listenPort"), 0, 65535); ok {
			b.ListenPort = int(n)
			if n == 0 && passive != nil {
				c.errorf(g.At.Value, at("listenPort"), "0 means no listener, but %s%s is passive and waits for its neighbour to connect; remove listenPort (the default is then %d) or give a port", passive.path, lineNote(passive.line), DefaultBGPPort)
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
	line schema.Line
}

// peers checks the peer list. It also returns the first passive peer, nil
// without one. The list may be empty only when mayBeEmpty.
func (c *checker) peers(f schema.Field[[]schema.Field[schema.Peer]], path string, localASN uint32, localOK bool, node Node, top *timerSpec, mayBeEmpty bool) ([]Peer, *peerAt) {
	if f.Bad {
		return nil, nil
	}
	if len(f.V) == 0 {
		if !mayBeEmpty {
			c.errorf(f.At.Key, path, "the list is empty; list at least one neighbour to announce the VIPs to, e.g. peers: [{address: 10.0.1.1, asn: 65000}]")
		}
		return nil, nil
	}
	addrs := map[netip.Addr]peerAt{}
	var passive *peerAt
	out := make([]Peer, 0, len(f.V))
	for i, item := range f.V {
		if item.Bad {
			continue
		}
		p, v := index(path, i), item.V
		at := func(name string) string { return join(p, name) }
		peer := Peer{Port: DefaultBGPPort, MaxPrefixes: DefaultMaxPrefixes}

		if g := v.Address; !g.Given {
			c.missing(item.At.Node, at("address"), "required: give the neighbour's IPv4 or IPv6 address, e.g. address: 10.0.1.1")
		} else if valid(g) {
			a, why := parseUnicast(string(g.V))
			switch first, dup := addrs[a]; {
			case why != "":
				c.errorf(g.At.Value, at("address"), "%s", why)
			case dup:
				c.errorf(g.At.Value, at("address"), "%s is already listed as %s%s; list each neighbour once", a, first.path, lineNote(first.line))
			case a == node.Address:
				c.errorf(g.At.Value, at("address"), "%s is this node's own address (node.address); a peer is another router", a)
			case a == node.Address6:
				c.errorf(g.At.Value, at("address"), "%s is this node's own IPv6 address (node.address6); a peer is another router", a)
			default:
				peer.Address = a
				addrs[a] = peerAt{path: p, line: g.At.Value}
			}
		}

		asnOK := false
		if v.ASN.Given {
			peer.ASN, asnOK = c.asn(v.ASN, at("asn"))
		} else {
			c.missing(item.At.Node, at("asn"), "required: give the neighbour's autonomous system number (bgp.asn's value for iBGP), e.g. asn: 65000")
		}

		if n, ok := c.integer(v.Port, at("port"), 1, 65535); ok {
			peer.Port = uint16(n)
		}

		if g := v.Password; valid(g) {
			// The message never repeats the password: errors end up in logs.
			if why := checkPassword(g.V); why != "" {
				c.errorf(g.At.Value, at("password"), "%s", why)
			} else {
				peer.Password = g.V
			}
		}

		spec := c.timerSpec(v.HoldTime, v.Keepalive, p)
		peer.HoldTime, peer.Keepalive = c.timers(spec, top)

		if n, ok := c.integer(v.Multihop, at("multihop"), 0, 255); ok {
			peer.Multihop = uint8(n)
			if n > 0 && asnOK && localOK && peer.ASN == localASN {
				c.errorf(v.Multihop.At.Value, at("multihop"), "applies to eBGP only, and this peer is iBGP (its asn %d is bgp.asn): iBGP sessions are not limited to one hop anyway; remove multihop", localASN)
			}
		}

		if g := v.Passive; valid(g) {
			peer.Passive = g.V
			if g.V && passive == nil {
				passive = &peerAt{path: p, line: item.At.Node}
			}
		}

		if n, ok := c.maxPrefixes(v.MaxPrefixes, at("maxPrefixes")); ok {
			peer.MaxPrefixes = n
		}

		if g := v.BFD; g.Given {
			peer.BFD = c.bfd(g, at("bfd"))
			if peer.Multihop > 0 {
				c.errorf(g.At.Key, at("bfd"), "xlb's BFD watches directly connected neighbours only (RFC 5881), and this peer is multihop %d; remove bfd or multihop", peer.Multihop)
			}
		}
		if g := v.GracefulRestart; g.Given {
			peer.GracefulRestart = c.gracefulRestart(g, at("gracefulRestart"))
		}
		out = append(out, peer)
	}
	return out, passive
}

// maxPrefixes returns the value of a peer's maxPrefixes field:
// 1..MaxMaxPrefixes.
func (c *checker) maxPrefixes(f schema.Field[schema.Int], path string) (uint32, bool) {
	n, ok := c.integer(f, path, math.MinInt64, math.MaxInt64)
	switch {
	case !ok:
		return 0, false
	case n < 0:
		c.errorf(f.At.Node, path, "%d is negative; write 1..%d, or remove maxPrefixes for the default %d", n, MaxMaxPrefixes, DefaultMaxPrefixes)
		return 0, false
	case n == 0:
		c.errorf(f.At.Node, path, "0 would turn the prefix limit off, and xlb keeps one: every prefix a peer sends takes memory until its session ends; "+
			"write 1..%d, or remove maxPrefixes for the default %d", MaxMaxPrefixes, DefaultMaxPrefixes)
		return 0, false
	case n > MaxMaxPrefixes:
		c.errorf(f.At.Node, path, "%d is above the maximum %d: xlb imports no routes, yet holds every prefix a peer sends for as long as the session lasts "+
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

func (c *checker) timerSpec(hold, keepalive schema.Field[schema.Duration], path string) *timerSpec {
	t := &timerSpec{}
	for _, tf := range []struct {
		name  string
		f     schema.Field[schema.Duration]
		dst   **setting[time.Duration]
		check func(schema.Field[schema.Duration], string) (time.Duration, bool)
	}{{"holdTime", hold, &t.hold, c.holdTime}, {"keepalive", keepalive, &t.keepalive, c.keepalive}} {
		if !tf.f.Given {
			continue
		}
		p := join(path, tf.name)
		if v, ok := tf.check(tf.f, p); ok {
			*tf.dst = &setting[time.Duration]{v, tf.f.At.Value, p}
		} else {
			t.bad = true
		}
	}
	return t
}

// timers resolves the hold time and keepalive of c merged over top, the
// bgp section's (nil when t is the section's own), and reports the
// conflicts that t's own fields cause: those of the section's fields
// alone are reported once, at the section, not at every peer.
func (c *checker) timers(t, top *timerSpec) (hold, keepalive time.Duration) {
	h, k := t.hold, t.keepalive
	report := !t.bad
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
		if report && k != nil && k == t.keepalive {
			c.errorf(k.line, k.path, "does not apply: the hold time is 0 (%s), so no keepalives are sent; remove keepalive or set a hold time of 3s or more", withLine(h.path, h.line))
		}
		return 0, 0
	}
	if k == nil {
		return hold, (hold / 3).Truncate(time.Second)
	}
	if k.v >= hold && report {
		const why = "a keepalive must be sent well before the hold time runs out"
		switch {
		case k == t.keepalive && h == nil:
			c.errorf(k.line, k.path, "%s is not shorter than the hold time (default %s); %s: lower keepalive (usually a third of holdTime) or raise holdTime", k.v, hold, why)
		case k == t.keepalive:
			c.errorf(k.line, k.path, "%s is not shorter than the hold time %s (%s); %s: lower keepalive (usually a third of holdTime) or raise holdTime", k.v, hold, withLine(h.path, h.line), why)
		case h != nil && h == t.hold:
			c.errorf(h.line, h.path, "%s is not longer than the keepalive %s (%s); %s: raise holdTime or set a shorter keepalive here", hold, k.v, withLine(k.path, k.line), why)
		}
	}
	return hold, k.v
}

// holdTime returns the value of a holdTime field: 0 or whole seconds in
// MinHoldTime..MaxHoldTime (RFC 4271 §4.2).
func (c *checker) holdTime(f schema.Field[schema.Duration], path string) (time.Duration, bool) {
	if !valid(f) {
		return 0, false
	}
	t := f.V.D
	if t != 0 && (t < MinHoldTime || t > MaxHoldTime) {
		c.errorf(f.At.Node, path, "%s is out of range; the hold time is 0 (no keepalives) or 3s..65535s", schema.Show(f.V.String()))
		return 0, false
	}
	return t, c.wholeSeconds(f, path)
}

// keepalive returns the value of a keepalive field: whole seconds, at
// least 1s. That it is below the hold time is checked by timers.
func (c *checker) keepalive(f schema.Field[schema.Duration], path string) (time.Duration, bool) {
	if !valid(f) {
		return 0, false
	}
	t := f.V.D
	if t < time.Second || t >= MaxHoldTime {
		c.errorf(f.At.Node, path, "%s is out of range 1s..65534s; to send no keepalives, set holdTime: 0", schema.Show(f.V.String()))
		return 0, false
	}
	return t, c.wholeSeconds(f, path)
}

// wholeSeconds reports whether f is whole seconds, as BGP carries its
// timers, and reports it if not.
func (c *checker) wholeSeconds(f schema.Field[schema.Duration], path string) bool {
	t := f.V.D
	if t%time.Second == 0 {
		return true
	}
	c.errorf(f.At.Node, path, "%s is not a whole number of seconds, and BGP carries its timers in seconds; write e.g. %s", schema.Show(f.V.String()), max(t.Round(time.Second), time.Second))
	return false
}

// asn returns the value of an ASN field: 1..4294967295, not AS_TRANS.
func (c *checker) asn(f schema.Field[schema.ASN], path string) (uint32, bool) {
	n, ok := c.integer(schema.Field[schema.Int]{V: schema.Int(f.V), Given: f.Given, Bad: f.Bad, At: f.At}, path, 0, math.MaxUint32)
	switch {
	case !ok:
		return 0, false
	case n == 0:
		c.errorf(f.At.Node, path, "0 is reserved and is no one's ASN (RFC 7607); use 1..4294967295, e.g. a private ASN from 64512..65534")
		return 0, false
	case n == asTrans:
		c.errorf(f.At.Node, path, "23456 is AS_TRANS (RFC 6793), which only stands in for 4-byte ASNs towards old speakers; use the real ASN")
		return 0, false
	}
	return uint32(n), true
}

// bfd checks a peer's bfd field. Its presence enables BFD, so a null or
// empty mapping means every default.
func (c *checker) bfd(f schema.Field[schema.BFD], path string) *BFD {
	b := &BFD{MinRx: DefaultBFDInterval, MinTx: DefaultBFDInterval, Multiplier: DefaultBFDMultiplier}
	for _, bf := range []struct {
		name string
		f    schema.Field[schema.Duration]
		dst  *time.Duration
	}{{"minRx", f.V.MinRx, &b.MinRx}, {"minTx", f.V.MinTx, &b.MinTx}} {
		if !valid(bf.f) {
			continue
		}
		p, t, text := join(path, bf.name), bf.f.V.D, schema.Show(bf.f.V.String())
		switch {
		case t < MinBFDInterval:
			c.errorf(bf.f.At.Node, p, "%s is below the minimum %s", text, MinBFDInterval)
		case t > MaxBFDInterval:
			c.errorf(bf.f.At.Node, p, "%s is above the maximum %s", text, MaxBFDInterval)
		default:
			*bf.dst = t
		}
	}
	if n, ok := c.integer(f.V.Multiplier, join(path, "multiplier"), 1, 255); ok {
		b.Multiplier = uint8(n)
	}
	return b
}

// gracefulRestart checks a peer's gracefulRestart field.
func (c *checker) gracefulRestart(f schema.Field[schema.GracefulRestart], path string) *GracefulRestart {
	g := &GracefulRestart{RestartTime: DefaultRestartTime}
	rf := f.V.RestartTime
	if !valid(rf) {
		return g
	}
	p, t, text := join(path, "restartTime"), rf.V.D, schema.Show(rf.V.String())
	switch {
	case t < MinRestartTime:
		c.errorf(rf.At.Node, p, "%s is below the minimum %s; remove gracefulRestart to have the router drop the routes at once when the session ends", text, MinRestartTime)
	case t > MaxRestartTime:
		c.errorf(rf.At.Node, p, "%s is above the maximum %s (RFC 4724 carries it in 12 bits of seconds)", text, MaxRestartTime)
	case t%time.Second != 0:
		c.errorf(rf.At.Node, p, "%s is not whole seconds (RFC 4724 carries it in seconds); write e.g. %s", text, t.Round(time.Second))
	default:
		g.RestartTime = t
	}
	return g
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
		return 0, fmt.Sprintf("%s has three numbers, as a large community has; move it to largeCommunities", schema.Show(s))
	default:
		return 0, fmt.Sprintf("%s is not a community; write ASN:VALUE with two numbers 0..65535 (e.g. 65000:100) or one of the names %s", schema.Show(s), wellKnownNames())
	}
	var v [2]uint64
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			if _, err := strconv.ParseUint(p, 10, 32); err == nil {
				return 0, fmt.Sprintf("%s: %s is above 65535; a community holds two 16-bit numbers, so for a 4-byte ASN use largeCommunities (e.g. %s:%s:0)", schema.Show(s), p, parts[0], parts[1])
			}
			return 0, fmt.Sprintf("%s is not a community; write ASN:VALUE with two numbers 0..65535 (e.g. 65000:100) or one of the names %s", schema.Show(s), wellKnownNames())
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
			return [3]uint32{}, fmt.Sprintf("%s has two numbers, as a community has; move it to communities, or %s", schema.Show(s), form)
		}
	}
	if len(parts) != 3 {
		return [3]uint32{}, fmt.Sprintf("%s is not a large community; %s", schema.Show(s), form)
	}
	var v [3]uint32
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return [3]uint32{}, fmt.Sprintf("%s is not a large community; %s", schema.Show(s), form)
		}
		v[i] = uint32(n)
	}
	return v, ""
}

// routeAttributes checks a service's bgp field. ok is false when any of
// it is invalid.
func (c *checker) routeAttributes(f schema.Field[schema.Route], path string) (a RouteAttributes, ok bool) {
	if f.Bad {
		return a, false
	}
	before := c.errs.Len()
	v := f.V
	if v.Communities.Given {
		cs := stringList(c, v.Communities, join(path, "communities"), MaxCommunities, parseCommunity, cmp.Compare[uint32])
		a.Communities = make([]string, len(cs))
		for i, x := range cs {
			a.Communities[i] = formatCommunity(x)
		}
	}
	if v.LargeCommunities.Given {
		cs := stringList(c, v.LargeCommunities, join(path, "largeCommunities"), MaxLargeCommunities, parseLargeCommunity, compareLarge)
		a.LargeCommunities = make([]string, len(cs))
		for i, x := range cs {
			a.LargeCommunities[i] = fmt.Sprintf("%d:%d:%d", x[0], x[1], x[2])
		}
	}
	for _, af := range []struct {
		name string
		f    schema.Field[schema.Int]
		dst  **uint32
	}{{"localPreference", v.LocalPreference, &a.LocalPreference}, {"med", v.MED, &a.MED}} {
		if n, ok := c.integer(af.f, join(path, af.name), 0, math.MaxUint32); ok {
			x := uint32(n)
			*af.dst = &x
		}
	}
	if len(a.Communities) == 0 {
		a.Communities = nil
	}
	if len(a.LargeCommunities) == 0 {
		a.LargeCommunities = nil
	}
	return a, !f.Flawed && c.errs.Len() == before
}

// stringList checks a list of texts with parse, and returns the values
// distinct and sorted by compare; a value listed twice is reported.
func stringList[T comparable](c *checker, f schema.Field[[]schema.Field[schema.Text]], path string, limit int, parse func(string) (T, string), compare func(a, b T) int) []T {
	if f.Bad {
		return nil
	}
	if len(f.V) > limit {
		c.errorf(f.At.Key, path, "%d entries exceed the limit of %d per route; remove some", len(f.V), limit)
		return nil
	}
	type seen struct {
		i    int
		line schema.Line
	}
	first := map[T]seen{}
	var out []T
	for i, item := range f.V {
		if item.Bad {
			continue
		}
		p, s := index(path, i), string(item.V)
		v, why := parse(s)
		if why != "" {
			c.errorf(item.At.Value, p, "%s", why)
			continue
		}
		if f, dup := first[v]; dup {
			c.errorf(item.At.Value, p, "%s is the same as %s%s; list each once", schema.Show(s), index(path, f.i), lineNote(f.line))
			continue
		}
		first[v] = seen{i, item.At.Value}
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
// in its bgp field, whose key is on line.
func (c *checker) checkRoute(routes map[netip.Addr]routeAt, s Service, at serviceAt, line schema.Line, path string) {
	first, dup := routes[s.VIP]
	if !dup {
		routes[s.VIP] = routeAt{attrs: s.BGP, at: at}
		return
	}
	if first.attrs.Equal(s.BGP) {
		return
	}
	where := withLine(fmt.Sprintf("services[%d].bgp", first.at.index), first.at.line)
	if first.at.name != "" {
		where = fmt.Sprintf("service %q (%s)", first.at.name, where)
	}
	c.errorf(line, path, "differs from the bgp attributes of %s, which has the same VIP %s (%s); services that share a VIP are announced as one route: write the same attributes in both, or in one of them only",
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
