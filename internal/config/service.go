package config

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"time"

	"github.com/xlbproject/xlb/internal/config/schema"
)

// serviceAt remembers where a service was defined, for messages about a
// later one that collides with it.
type serviceAt struct {
	index int
	name  string
	line  schema.Line
}

func (s serviceAt) String() string {
	if s.name == "" {
		return fmt.Sprintf("services[%d]%s", s.index, lineNote(s.line))
	}
	return fmt.Sprintf("service %q (%s)", s.name, withLine(fmt.Sprintf("services[%d]", s.index), s.line))
}

// svcCtx is what checking one service needs to know about the others.
type svcCtx struct {
	names        map[string]serviceAt
	keys         map[Key]serviceAt
	vips         map[netip.Addr]serviceAt // the first service of each VIP
	routes       map[netip.Addr]routeAt   // VIP -> the first service that wrote bgp attributes for it
	hasBGP       bool                     // the document has a bgp section
	inCluster    bool                     // the document has a kubernetes section
	announces    map[netip.Addr]serviceAt // VIP -> the first service that set announce
	tableSize    uint32
	tableSizeSet bool
	skipBackends bool // over MaxBackends already
	nat          natCtx
}

// natCtx is what checking the services needs of the nat section.
type natCtx struct {
	// addr is nat.address when it is not the node address (invalid
	// otherwise), written at line.
	addr netip.Addr
	line schema.Line
	// clash is why a service cannot have forwarding nat on this host
	// (natPorts); "" when it can.
	clash string
}

func (c *checker) services(f schema.Field[[]schema.Field[schema.Service]], path string, dp Dataplane, tableSizeSet, hasBGP bool, nat natCtx) []Service {
	items := f.V
	if len(items) > MaxServices {
		c.errorf(f.At.Key, path, "%d services exceed the limit of %d (MaxServices) that one agent can serve; remove some", len(items), MaxServices)
		items = items[:MaxServices]
	}
	if len(items) == 0 {
		// `services: []` and `services:` (null) are no services, as
		// when the section is left out: the same configuration.
		return nil
	}
	ctx := svcCtx{names: map[string]serviceAt{}, keys: map[Key]serviceAt{}, vips: map[netip.Addr]serviceAt{}, routes: map[netip.Addr]routeAt{},
		hasBGP: hasBGP, inCluster: c.inCluster, announces: map[netip.Addr]serviceAt{}, tableSize: dp.TableSize, tableSizeSet: tableSizeSet, nat: nat}
	out := make([]Service, 0, len(items))
	total := 0 // backend entries over all services
	for i, item := range items {
		if item.Bad {
			continue
		}
		s, n := c.service(item, i, index(path, i), ctx)
		if !ctx.skipBackends && total+n > int(dp.MaxBackends) {
			ctx.skipBackends = true
		}
		total += n
		out = append(out, s)
	}
	// One route per VIP: a service that shares its VIP with one that
	// wrote attributes announces the same route, and one that shares it
	// with an l2 service is answered by ARP with it.
	for i := range out {
		if _, ok := ctx.announces[out[i].VIP]; ok {
			out[i].Announce = AnnounceL2
		}
		if r, ok := ctx.routes[out[i].VIP]; ok && out[i].BGP.IsZero() {
			out[i].BGP = r.attrs.clone()
		}
	}
	// A backend at a VIP, of this service or another, written before or
	// after it.
	for _, p := range c.placed {
		if at, ok := ctx.vips[p.addr]; ok {
			c.errorf(p.line, p.path, "%s is the VIP of %s; a backend is a real server's own address: packets tunnelled to a VIP would come back to the load balancers instead of reaching a server: write the server's own address", p.addr, at)
		}
		if p.addr == nat.addr {
			c.errorf(p.line, p.path, "%s is nat.address, the address this node's NAT sessions come from; a backend is another host: write that host's address", p.addr)
		}
	}
	if at, ok := ctx.vips[nat.addr]; ok {
		c.errorf(nat.line, "nat.address", "%s is the VIP of %s; nat.address is this node's own address, which backends reply to: write an address of this node, or remove nat.address for the node address", nat.addr, at)
	}
	if ctx.skipBackends {
		c.errorf(f.At.Key, path, "%d backend entries over all services exceed the limit of %d (dataplane.maxBackends) that the data plane holds; every backend of every service is one entry, drained ones included: raise dataplane.maxBackends (at most %d) or remove some", total, dp.MaxBackends, MaxBackends)
	}
	return out
}

// service checks the i-th service, f. It also returns the number of its
// backends, which the caller counts against MaxBackends.
func (c *checker) service(f schema.Field[schema.Service], i int, path string, ctx svcCtx) (Service, int) {
	s := Service{Protocol: TCP, Forwarding: DSRIPIP}
	v, line := f.V, f.At.Node

	if g := v.Name; !g.Given {
		c.missing(line, join(path, "name"), "required: give the service a name, e.g. name: web")
	} else if valid(g) {
		if why := checkName(g.V); why != "" {
			c.errorf(g.At.Value, join(path, "name"), "%s", why)
		} else if first, dup := ctx.names[g.V]; dup {
			c.errorf(g.At.Value, join(path, "name"), "%q is already the name of services[%d]%s; service names must be unique", g.V, first.index, lineNote(first.line))
		} else {
			s.Name = g.V
			ctx.names[g.V] = serviceAt{index: i, name: g.V, line: g.At.Value}
		}
	}

	if g := v.VIP; !g.Given {
		c.missing(line, join(path, "vip"), "required: give the service's virtual IP address, e.g. vip: 10.99.0.1 or vip: 2001:db8:99::1")
	} else if valid(g) {
		if a, why := parseUnicast(string(g.V)); why != "" {
			c.errorf(g.At.Value, join(path, "vip"), "%s", why)
		} else if why := c.hostsVIP(a); why != "" {
			c.errorf(g.At.Value, join(path, "vip"), "%s", why)
		} else if why := c.vipFamily(a); why != "" {
			c.errorf(g.At.Value, join(path, "vip"), "%s", why)
		} else {
			s.VIP = a
			if _, seen := ctx.vips[a]; !seen {
				ctx.vips[a] = serviceAt{index: i, name: s.Name, line: g.At.Value}
			}
		}
	}

	if !v.Port.Given {
		c.missing(line, join(path, "port"), "required: give the service's port, e.g. port: 80")
	} else if n, ok := c.integer(v.Port, join(path, "port"), 1, 65535); ok {
		s.Port = uint16(n)
	}

	protocolOK := !v.Protocol.Given
	if g := v.Protocol; valid(g) {
		if p, err := ParseProtocol(g.V); err != nil {
			c.errorf(g.At.Value, join(path, "protocol"), "%v", err)
		} else {
			s.Protocol, protocolOK = p, true
		}
	}

	if g := v.SourceRanges; g.Given {
		s.SourceRanges = c.sourceRanges(g, join(path, "sourceRanges"), s.VIP)
	}

	fwdBad := v.Forwarding.Bad
	if g := v.Forwarding; valid(g) {
		if fwd, err := ParseForwarding(g.V); err != nil {
			c.errorf(g.At.Value, join(path, "forwarding"), "%v", err)
			fwdBad = true
		} else {
			s.Forwarding = fwd
			if fwd == NAT && ctx.nat.clash != "" {
				c.errorf(g.At.Value, join(path, "forwarding"), "%s", ctx.nat.clash)
			}
		}
	}

	// An invalid translatePorts or forwarding is reported once, not
	// again at every backend port that it would have allowed. nat and
	// dnat rewrite packets to each backend's own port.
	s.TranslatePorts = v.TranslatePorts.V
	translate := s.TranslatePorts || v.TranslatePorts.Bad || fwdBad || s.Forwarding.Translates()
	if g := v.TranslatePorts; s.TranslatePorts && s.Forwarding.Translates() {
		c.errorf(g.At.Value, join(path, "translatePorts"), "forwarding %s rewrites packets to each backend's own address and port on this node; translatePorts is for DSR backends whose hosts translate VIP:port themselves (xlb backend's Kubernetes mode): remove it", s.Forwarding)
	}

	var check *checkSpec
	if g := v.HealthCheck; g.Given {
		check = c.checkSpec(g, join(path, "healthCheck"))
		c.resolveCheck(check, nil, s.Port, true)
	}

	if g := v.BGP; g.Given {
		attrs, ok := c.routeAttributes(g, join(path, "bgp"))
		switch {
		case !ctx.hasBGP:
			c.errorf(g.At.Key, join(path, "bgp"), "nothing is announced without a bgp section: add a top-level bgp section with asn and peers, or remove this field")
		case ok && !attrs.IsZero() && s.VIP.IsValid():
			s.BGP = attrs
			c.checkRoute(ctx.routes, s, serviceAt{index: i, name: s.Name, line: g.At.Key}, g.At.Key, join(path, "bgp"))
		}
	}

	// The key is checked only once its parts are valid: a service with a
	// bad VIP has already been reported.
	if s.VIP.IsValid() && s.Port != 0 && protocolOK {
		k := s.Key()
		if first, dup := ctx.keys[k]; dup {
			c.errorf(line, path, "%s is already served by %s; each VIP, port and protocol belongs to one service", k, first)
		} else {
			ctx.keys[k] = serviceAt{index: i, name: s.Name, line: line}
		}
	}

	if g := v.Flows; valid(g) {
		switch flows, err := ParseFlows(g.V); {
		case err != nil:
			c.errorf(g.At.Value, join(path, "flows"), "%v", err)
		case flows == FlowsStateless: // the zero value
		case s.Forwarding.Translates():
			// A NAT service's node keeps every connection on its
			// backend through its session table already.
			fix := "remove flows: the session table keeps each connection on its backend (on this node); flows: stateful is for DSR services"
			if flows == FlowsDaisyChain {
				fix = "remove flows, or set forwarding: dsr-gue to daisy-chain with xlb backend on the backends"
			}
			c.errorf(g.At.Value, join(path, "flows"), "forwarding %s holds a session per connection on the node, which is stateful by nature; %s", s.Forwarding, fix)
		default:
			s.Flows = flows
			if flows == FlowsDaisyChain && s.Forwarding != DSRGUE {
				c.errorf(g.At.Value, join(path, "flows"), "daisy chaining needs the hint that only dsr-gue carries; set forwarding: dsr-gue")
			}
		}
	}
	if g := v.Affinity; valid(g) {
		switch a, err := ParseAffinity(g.V); {
		case err != nil:
			c.errorf(g.At.Value, join(path, "affinity"), "%v", err)
		case a == AffinityNone: // the zero value
		default:
			s.Affinity = a
		}
	}
	c.serviceAnnounce(v.Announce, path, &s, i, ctx)
	if g := v.History; g.Given {
		if s.Flows != FlowsDaisyChain {
			c.errorf(g.At.Key, join(path, "history"), "only daisy-chained services use a history; set flows: daisy-chain or remove it")
		} else {
			s.History = c.history(g, join(path, "history"), s.VIP, s.Port, translate, s.Forwarding)
		}
	}

	g := v.Backends
	switch {
	case !g.Given:
		c.missing(line, join(path, "backends"), "required: list at least one backend, e.g. backends: [{address: 10.0.3.2}]")
		return s, 0
	case g.Bad:
		return s, 0
	case len(g.V) == 0:
		c.errorf(g.At.Key, join(path, "backends"), "the list is empty; a service needs at least one backend")
		return s, 0
	}
	if len(g.V) >= int(ctx.tableSize) {
		verb := "set"
		if ctx.tableSizeSet {
			verb = "raise"
		}
		c.errorf(g.At.Key, join(path, "backends"), "%d backends do not fit a Maglev table of %d entries; %s dataplane.tableSize to a prime larger than %d (Maglev balances well when the table is about 100 times larger than the backends)", len(g.V), ctx.tableSize, verb, len(g.V))
	}
	if ctx.skipBackends {
		// Over the MaxBackends limit already: the caller reports it, and
		// checking more backends would only cost time.
		return s, len(g.V)
	}
	s.Backends = c.backends(g, join(path, "backends"), s.VIP, s.Port, translate, s.TranslatePorts, check, s.Forwarding)
	return s, len(g.V)
}

// natFamilies says why backend a of a service with forwarding fwd
// (nat or dnat) on VIP vip cannot be: its family is not the VIP's (""
// when it is, or the VIP is not known). NAT and DNAT rewrite addresses
// within one family; there is no NAT64.
func natFamilies(fwd Forwarding, vip, a netip.Addr) string {
	if !vip.IsValid() || a.Is6() == vip.Is6() {
		return ""
	}
	return fmt.Sprintf("%s is %s and the VIP %s is %s: forwarding %s rewrites addresses within one family (no NAT64); "+
		"give the service backends of its VIP's family, or use forwarding dsr-ipip or dsr-gue, which tunnel between families", a, family(a), vip, family(vip), fwd)
}

// podFamilies says why backend a of a service with translatePorts on VIP
// vip cannot be ("" when it can, or the VIP is not known): its host
// rewrites the tunnelled packet's VIP:port to a:port, within the
// packet's family, so an IPv4 VIP's packet never reaches an IPv6 pod,
// nor the reverse.
func podFamilies(translatePorts bool, vip, a netip.Addr) string {
	if !translatePorts || !vip.IsValid() || a.Is6() == vip.Is6() {
		return ""
	}
	return fmt.Sprintf("%s is %s and the VIP %s is %s: with translatePorts the backend's host rewrites the packet's VIP:port to the backend within the packet's family (no NAT64), "+
		"so the backend must be of the VIP's family: give this service backends of its VIP's family, and the other family's backends a service of a VIP of theirs (a dual-stack Kubernetes Service gets one per family)", a, family(a), vip, family(vip))
}

// backendFamily says why the node cannot tunnel to backend a ("" when it
// can): the outer header is of a's family, and its source is the node's
// address of that family, which must exist. Unknown node addresses (no
// host to look at) are not held against a backend: the agent finds them
// when it starts, and the data plane refuses what it cannot send.
func (c *checker) backendFamily(a netip.Addr) string {
	switch {
	case c.host == nil:
		return ""
	case a.Is6() && !c.nodeAddr6.IsValid():
		return fmt.Sprintf("%s is IPv6, and the node has no IPv6 address: node.address6 is not set and node.interface has no global IPv6 address; "+
			"packets to an IPv6 backend are tunnelled in an IPv6 header from the node's IPv6 address: set node.address6, add a global IPv6 address to the interface, or use an IPv4 backend", a)
	case a.Is4() && !c.nodeAddr.IsValid():
		return fmt.Sprintf("%s is IPv4, and the node has no IPv4 address: node.address is not set and node.interface has none; "+
			"packets to an IPv4 backend are tunnelled in an IPv4 header from the node's IPv4 address: set node.address, add an IPv4 address to the interface, or use an IPv6 backend", a)
	}
	return ""
}

// vipFamily says why the node cannot serve VIP a ("" when it can): an
// IPv4 VIP needs the node's IPv4 address, the next hop BGP announces it
// with and the source of the program's ICMP errors to IPv4 clients. An
// IPv6 VIP needs no IPv6 address of the node (its backends may be IPv4),
// and the announcement reports a missing next hop itself.
func (c *checker) vipFamily(a netip.Addr) string {
	if c.host == nil || !a.Is4() || c.nodeAddr.IsValid() {
		return ""
	}
	return fmt.Sprintf("%s is IPv4, and the node has no IPv4 address: node.address is not set and node.interface has none; "+
		"an IPv4 VIP is announced with the node's IPv4 address as next hop, and the node answers IPv4 clients from it (fragmentation needed): "+
		"set node.address, add an IPv4 address to the interface, or use an IPv6 VIP on this IPv6-only node", a)
}

// backends checks a service's backends; check is the service's
// healthCheck (nil without one), which each backend's own merges over.
// translate lets a backend's port differ from the service's.
// fwd is the service's forwarding: nat and dnat take backends of the
// family of vip (invalid: not known).
func (c *checker) backends(f schema.Field[[]schema.Field[schema.Backend]], path string, vip netip.Addr, servicePort uint16, translate, translatePorts bool, check *checkSpec, fwd Forwarding) []Backend {
	type seen struct {
		index int
		line  schema.Line
	}
	addrs := map[netip.Addr]seen{}
	out := make([]Backend, 0, len(f.V))
	active, weightErr := false, false
	for i, item := range f.V {
		if item.Bad {
			continue
		}
		p := index(path, i)
		v := item.V
		b := Backend{Port: servicePort, Weight: DefaultWeight}
		if g := v.Address; !g.Given {
			c.missing(item.At.Node, join(p, "address"), "required: give the backend's IP address, e.g. address: 10.0.3.2")
		} else if valid(g) {
			at := join(p, "address")
			if a, why := parseUnicast(string(g.V)); why != "" {
				c.errorf(g.At.Value, at, "%s", why)
			} else if why := natFamilies(fwd, vip, a); fwd.Translates() && why != "" {
				c.errorf(g.At.Value, at, "%s", why)
			} else if why := podFamilies(translatePorts, vip, a); why != "" {
				c.errorf(g.At.Value, at, "%s", why)
			} else if why := c.backendFamily(a); why != "" {
				c.errorf(g.At.Value, at, "%s", why)
			} else if first, dup := addrs[a]; dup {
				c.errorf(g.At.Value, at, "%s is already listed as %s%s; list each backend once and use weight to give it more traffic", a, index(path, first.index), lineNote(first.line))
			} else if a == c.nodeAddr {
				c.errorf(g.At.Value, at, "%s is this node's own address (%s); a backend is another host, which the node tunnels packets to: write that host's address", a, c.nodeFrom)
			} else if a == c.nodeAddr6 {
				c.errorf(g.At.Value, at, "%s is this node's own IPv6 address (%s); a backend is another host, which the node tunnels packets to: write that host's address", a, c.nodeFrom6)
			} else {
				b.Address = a
				addrs[a] = seen{index: i, line: g.At.Value}
				c.placed = append(c.placed, placedAddr{addr: a, line: g.At.Value, path: at})
			}
		}
		if v.Port.Given {
			if n, ok := c.integer(v.Port, join(p, "port"), 1, 65535); ok {
				if servicePort != 0 && uint16(n) != servicePort && !translate {
					c.errorf(v.Port.At.Value, join(p, "port"), "%d differs from the service port %d; DSR delivers the packet with VIP:port unchanged, so it cannot translate ports: remove port or set it to %d, or set forwarding: nat (or dnat), which rewrites to the backend's port", n, servicePort, servicePort)
				}
				b.Port = uint16(n)
			}
		}
		if v.Weight.Given {
			if n, ok := c.integer(v.Weight, join(p, "weight"), 0, MaxWeight); ok {
				b.Weight = uint32(n)
			} else {
				weightErr = true
			}
		}
		if b.Weight > 0 {
			active = true
		}
		var own *checkSpec
		if g := v.HealthCheck; g.Given {
			own = c.checkSpec(g, join(p, "healthCheck"))
		}
		b.HealthCheck = c.resolveCheck(check, own, b.Port, own != nil)
		out = append(out, b)
	}
	if !active && !weightErr && len(out) == len(f.V) {
		c.errorf(f.At.Key, path, "every backend has weight 0 (drained), so no backend can take new flows; give at least one a weight above 0")
	}
	return out
}

// history checks a daisy-chained service's earlier backend sets and
// returns them oldest first.
func (c *checker) history(f schema.Field[[]schema.Field[schema.Generation]], path string, vip netip.Addr, servicePort uint16, translate bool, fwd Forwarding) []Generation {
	if f.Bad {
		return nil
	}
	if len(f.V) > MaxHistory {
		c.errorf(f.At.Key, path, "%d earlier backend sets; at most %d are kept, drop the oldest", len(f.V), MaxHistory)
		return nil
	}
	out := make([]Generation, 0, len(f.V))
	seen := map[time.Time]int{}
	for i, item := range f.V {
		// An item that is no mapping is reported by Decode; it lacks
		// what one needs, as an empty one does.
		p, v := index(path, i), item.V
		var gen Generation
		if g := v.Until; !g.Given {
			c.missing(item.At.Node, join(p, "until"), "required: when this backend set stopped being the service's, e.g. until: 2026-11-25T10:00:00Z")
		} else if valid(g) {
			t, err := time.Parse(time.RFC3339, string(g.V))
			switch {
			case err != nil:
				c.errorf(g.At.Value, join(p, "until"), "%q is not a time; write it as RFC 3339, e.g. until: 2026-11-25T10:00:00Z", g.V)
			case t.Unix() <= 0 || t.Unix() > math.MaxUint32:
				c.errorf(g.At.Value, join(p, "until"), "%s is outside 1970-2106, which the data plane's 32-bit seconds hold", g.V)
			default:
				if first, dup := seen[t]; dup {
					c.errorf(g.At.Value, join(p, "until"), "history[%d] ends at the same time; each set ends at its own time", first)
				}
				seen[t] = i
				gen.Until = t
			}
		}
		g := v.Backends
		if !g.Given {
			c.missing(item.At.Node, join(p, "backends"), "required: the backends of that set, e.g. backends: [{address: 10.0.3.2}]")
			continue
		}
		if g.Bad {
			continue
		}
		gen.Backends = c.backends(g, join(p, "backends"), vip, servicePort, translate, false, nil, fwd)
		out = append(out, gen)
	}
	slices.SortFunc(out, func(a, b Generation) int { return a.Until.Compare(b.Until) })
	return out
}

// serviceAnnounce checks a service's announce: l2 is what the Kubernetes
// source writes for a Service of an AddressPool with announce: l2, whose
// node is elected by Leases; a file's own services follow node.announce.
func (c *checker) serviceAnnounce(g schema.Field[string], path string, s *Service, i int, ctx svcCtx) {
	if !valid(g) {
		return
	}
	a, err := ParseAnnounce(g.V)
	switch {
	case err != nil:
		c.errorf(g.At.Value, join(path, "announce"), "%v", err)
		return
	case a == AnnounceBGP:
		return
	case !ctx.inCluster:
		c.errorf(g.At.Value, join(path, "announce"), "l2 per service is for the Services of an AddressPool with announce: l2, whose node is elected by Kubernetes Leases; a file without a kubernetes section answers every VIP by ARP with node.announce: l2 and the l2 section instead: remove announce here")
		return
	}
	s.Announce = a
	if s.VIP.IsValid() {
		if _, ok := ctx.announces[s.VIP]; !ok {
			ctx.announces[s.VIP] = serviceAt{index: i, name: s.Name, line: g.At.Value}
		}
	}
}
