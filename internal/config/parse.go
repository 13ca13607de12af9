package config

import (
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"slices"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// maxFileSize bounds what Load reads. A configuration at every limit
// (MaxBackends backends written one per line) takes about 1 MiB.
const maxFileSize = 16 << 20

// Fields each mapping may hold, in the order the documentation lists them.
var (
	topFields       = []string{"node", "api", "dataplane", "bgp", "services", "kubernetes"}
	nodeFields      = []string{"interface", "address"}
	apiFields       = []string{"socket", "metrics"}
	dataplaneFields = []string{"pinPath", "attachMode", "tableSize", "maxBackends", "conntrackSize", "flowHash"}
	serviceFields   = []string{"name", "vip", "port", "protocol", "forwarding", "translatePorts", "flows", "history", "healthCheck", "bgp", "backends"}
	historyFields   = []string{"until", "backends"}
	backendFields   = []string{"address", "port", "weight", "healthCheck"}
)

// Load reads and parses the configuration file at path.
func Load(path string) (*Config, error) {
	return LoadOn(path, nil)
}

// LoadOn reads and parses the configuration file at path for host h, as
// ParseOn does.
func LoadOn(path string, h *Host) (*Config, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseOn(path, data, h)
}

// ReadFile reads the configuration file at path, as Load does.
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("%s: the file is larger than %d MiB; this is not an xlb configuration", path, maxFileSize>>20)
	}
	return data, nil
}

// Parse parses and validates a configuration and applies its defaults.
// filename only names the input in error messages. On failure it returns
// every problem found, one per line, each an *Error naming the file, the
// line, the field path and the reason.
func Parse(filename string, data []byte) (*Config, error) {
	return ParseOn(filename, data, nil)
}

// ParseOn parses a configuration as Parse does, for host h: it also
// refuses VIPs that are addresses of h, and backends at the node address
// h gives when the file sets none. A nil h is Parse.
func ParseOn(filename string, data []byte, h *Host) (*Config, error) {
	if filename == "" {
		filename = "config"
	}
	d := (&decoder{file: filename, maxSteps: minSteps + stepsPerByte*len(data)}).onHost(h)
	cfg := d.config(data)
	if err := d.err(); err != nil {
		return nil, err
	}
	return cfg, nil
}

func (d *decoder) config(data []byte) *Config {
	return d.configFrom(d.document(data))
}

// configFrom decodes the document's top node.
func (d *decoder) configFrom(top *yaml.Node) *Config {
	top = d.resolve(top)
	if top == nil {
		return nil
	}
	if top.Kind != yaml.MappingNode {
		d.errorf(top, "", "the top level must be a mapping of sections (node, api, dataplane, bgp, services, kubernetes), got %s", describe(top))
		return nil
	}
	fs := d.mapping(top, "", topFields)
	cfg := &Config{}
	if f, ok := fs["node"]; ok {
		cfg.Node = d.node(f, "node")
	} else {
		d.missing(top, "node", "required section is missing; add at least \"node: {interface: eth0}\" naming the interface XDP attaches to")
	}
	d.nodeAddr, d.nodeFrom = d.host.NodeAddress(cfg.Node), "node.address"
	if !cfg.Node.Address.IsValid() {
		d.nodeFrom = fmt.Sprintf("the first IPv4 address of node.interface %s, which the agent takes when node.address is not set", cfg.Node.Interface)
	}
	cfg.API = d.api(fs["api"], "api")
	dp, tableSizeSet := d.dataplane(fs["dataplane"], "dataplane")
	cfg.Dataplane = dp
	k, hasKubernetes := fs["kubernetes"]
	if hasKubernetes {
		cfg.Kubernetes = d.kubernetes(k, "kubernetes")
	}
	f, hasBGP := fs["bgp"]
	if hasBGP {
		cfg.BGP = d.bgp(f, "bgp", cfg.Node, hasKubernetes)
	}
	cfg.Services = d.services(fs["services"], "services", dp, tableSizeSet, hasBGP)
	return cfg
}

func (d *decoder) node(f field, path string) Node {
	var n Node
	fs := d.mapping(f.value, path, nodeFields)
	if g, ok := fs["interface"]; ok {
		if s, ok := d.str(g, join(path, "interface")); ok {
			if why := checkInterface(s); why != "" {
				d.errorf(g.value, join(path, "interface"), "%s", why)
			} else {
				n.Interface = s
			}
		}
	} else {
		d.missing(f.key, join(path, "interface"), "required: name the network interface XDP attaches to, e.g. interface: eth0")
	}
	if g, ok := fs["address"]; ok {
		if s, ok := d.text(g, join(path, "address")); ok && s != "" {
			if a, why := parseUnicast4(s); why != "" {
				d.errorf(g.value, join(path, "address"), "%s", why)
			} else {
				n.Address = a
			}
		}
	}
	return n
}

func (d *decoder) api(f field, path string) API {
	a := API{Socket: DefaultSocket}
	if f.key == nil {
		return a
	}
	fs := d.mapping(f.value, path, apiFields)
	if g, ok := fs["socket"]; ok {
		if s, ok := d.str(g, join(path, "socket")); ok {
			if why := checkSocket(s); why != "" {
				d.errorf(g.value, join(path, "socket"), "%s", why)
			} else {
				a.Socket = s
			}
		}
	}
	if g, ok := fs["metrics"]; ok {
		if s, ok := d.text(g, join(path, "metrics")); ok {
			if why := checkMetrics(s); why != "" {
				d.errorf(g.value, join(path, "metrics"), "%s", why)
			} else {
				a.Metrics = s
			}
		}
	}
	return a
}

// dataplane also reports whether tableSize was written in the file, so
// that a later error can point at it.
func (d *decoder) dataplane(f field, path string) (Dataplane, bool) {
	dp := Dataplane{AttachMode: DefaultAttachMode, TableSize: DefaultTableSize, MaxBackends: DefaultMaxBackends, FlowHash: DefaultFlowHash}
	if f.key == nil {
		return dp, false
	}
	fs := d.mapping(f.value, path, dataplaneFields)
	if g, ok := fs["pinPath"]; ok {
		if s, ok := d.str(g, join(path, "pinPath")); ok {
			if why := checkPinPath(s); why != "" {
				d.errorf(g.value, join(path, "pinPath"), "%s", why)
			} else {
				dp.PinPath = s
			}
		}
	}
	if g, ok := fs["attachMode"]; ok {
		if s, ok := d.str(g, join(path, "attachMode")); ok {
			switch s {
			case AttachAuto, AttachNative, AttachGeneric:
				dp.AttachMode = s
			default:
				d.errorf(g.value, join(path, "attachMode"), "%q is not an attach mode; use auto (native, falling back to generic), native or generic", s)
			}
		}
	}
	g, set := fs["tableSize"]
	if set {
		if n, ok := d.integer(g, join(path, "tableSize"), MinTableSize, MaxTableSize); ok {
			if isPrime(uint32(n)) {
				dp.TableSize = uint32(n)
			} else {
				lo, hi := nearestPrimes(uint32(n))
				d.errorf(g.value, join(path, "tableSize"), "%d is not a prime, and Maglev needs a prime table size; the nearest primes are %d and %d", n, lo, hi)
			}
		}
	}
	if g, ok := fs["maxBackends"]; ok {
		if n, ok := d.integer(g, join(path, "maxBackends"), 1, MaxBackends); ok {
			dp.MaxBackends = uint32(n)
		}
	}
	if g, ok := fs["conntrackSize"]; ok {
		if n, ok := d.integer(g, join(path, "conntrackSize"), MinConntrackSize, MaxConntrackSize); ok {
			dp.ConntrackSize = uint32(n)
		}
	}
	if g, ok := fs["flowHash"]; ok {
		if s, ok := d.str(g, join(path, "flowHash")); ok {
			if _, err := wire.ParseFlowHash(s); err != nil {
				d.errorf(g.value, join(path, "flowHash"), "%v", err)
			} else {
				dp.FlowHash = s
			}
		}
	}
	return dp, set
}

// serviceAt remembers where a service was defined, for messages about a
// later one that collides with it.
type serviceAt struct {
	index int
	name  string
	line  int
}

func (d *decoder) services(f field, path string, dp Dataplane, tableSizeSet, hasBGP bool) []Service {
	if f.key == nil {
		return nil
	}
	items, ok := d.sequence(f.value, path)
	if !ok {
		return nil
	}
	if len(items) > MaxServices {
		d.errorf(f.key, path, "%d services exceed the limit of %d (MaxServices) that one agent can serve; remove some", len(items), MaxServices)
		items = items[:MaxServices]
	}
	if len(items) == 0 {
		// `services: []` and `services:` (null) are no services, as
		// when the section is left out: the same configuration.
		return nil
	}
	names := map[string]serviceAt{}
	keys := map[Key]serviceAt{}
	vips := map[netip.Addr]serviceAt{}
	routes := map[netip.Addr]routeAt{}
	out := make([]Service, 0, len(items))
	total := 0 // backend entries over all services
	overflow := false
	for i, item := range items {
		if d.exhausted {
			return nil
		}
		p := index(path, i)
		item = d.resolve(item)
		if item == nil {
			return nil
		}
		if item.Kind != yaml.MappingNode {
			d.errorf(item, p, "expected a service (a mapping with name, vip, port and backends), got %s", describe(item))
			continue
		}
		s, n := d.service(item, i, p, svcCtx{names: names, keys: keys, vips: vips, routes: routes, hasBGP: hasBGP,
			tableSize: dp.TableSize, tableSizeSet: tableSizeSet, skipBackends: overflow})
		if !overflow && total+n > int(dp.MaxBackends) {
			overflow = true
		}
		total += n
		out = append(out, s)
	}
	// One route per VIP: a service that shares its VIP with one that
	// wrote attributes announces the same route.
	for i := range out {
		if r, ok := routes[out[i].VIP]; ok && out[i].BGP.IsZero() {
			out[i].BGP = r.attrs.clone()
		}
	}
	// A backend at a VIP, of this service or another, written before or
	// after it.
	for _, p := range d.placed {
		if at, ok := vips[p.addr]; ok {
			d.errorf(p.node, p.path, "%s is the VIP of %s; a backend is a real server's own address: packets tunnelled to a VIP would come back to the load balancers instead of reaching a server: write the server's own address", p.addr, at)
		}
	}
	if overflow {
		d.errorf(f.key, path, "%d backend entries over all services exceed the limit of %d (dataplane.maxBackends) that the data plane holds; every backend of every service is one entry, drained ones included: raise dataplane.maxBackends (at most %d) or remove some", total, dp.MaxBackends, MaxBackends)
	}
	return out
}

// svcCtx is what parsing one service needs to know about the others.
type svcCtx struct {
	names        map[string]serviceAt
	keys         map[Key]serviceAt
	vips         map[netip.Addr]serviceAt // the first service of each VIP
	routes       map[netip.Addr]routeAt   // VIP -> the first service that wrote bgp attributes for it
	hasBGP       bool                     // the file has a bgp section
	tableSize    uint32
	tableSizeSet bool
	skipBackends bool // over MaxBackends already
}

func (s serviceAt) String() string {
	if s.name == "" {
		return fmt.Sprintf("services[%d] (line %d)", s.index, s.line)
	}
	return fmt.Sprintf("service %q (services[%d], line %d)", s.name, s.index, s.line)
}

// service parses the i-th service. It also returns the number of its
// backends, which the caller counts against MaxBackends.
func (d *decoder) service(n *yaml.Node, i int, path string, c svcCtx) (Service, int) {
	s := Service{Protocol: TCP, Forwarding: DSRIPIP}
	fs := d.mapping(n, path, serviceFields)

	if g, ok := fs["name"]; ok {
		if v, ok := d.str(g, join(path, "name")); ok {
			if why := checkName(v); why != "" {
				d.errorf(g.value, join(path, "name"), "%s", why)
			} else if first, dup := c.names[v]; dup {
				d.errorf(g.value, join(path, "name"), "%q is already the name of services[%d] (line %d); service names must be unique", v, first.index, first.line)
			} else {
				s.Name = v
				c.names[v] = serviceAt{index: i, name: v, line: g.value.Line}
			}
		}
	} else {
		d.missing(n, join(path, "name"), "required: give the service a name, e.g. name: web")
	}

	if g, ok := fs["vip"]; ok {
		if v, ok := d.text(g, join(path, "vip")); ok {
			if a, why := parseUnicast4(v); why != "" {
				d.errorf(g.value, join(path, "vip"), "%s", why)
			} else if why := d.hostsVIP(a); why != "" {
				d.errorf(g.value, join(path, "vip"), "%s", why)
			} else {
				s.VIP = a
				if _, seen := c.vips[a]; !seen {
					c.vips[a] = serviceAt{index: i, name: s.Name, line: g.value.Line}
				}
			}
		}
	} else {
		d.missing(n, join(path, "vip"), "required: give the service's virtual IPv4 address, e.g. vip: 10.99.0.1")
	}

	if g, ok := fs["port"]; ok {
		if v, ok := d.integer(g, join(path, "port"), 1, 65535); ok {
			s.Port = uint16(v)
		}
	} else {
		d.missing(n, join(path, "port"), "required: give the service's port, e.g. port: 80")
	}

	protocolOK := true
	if g, ok := fs["protocol"]; ok {
		protocolOK = false
		if v, ok := d.str(g, join(path, "protocol")); ok {
			switch Protocol(v) {
			case TCP, UDP:
				s.Protocol = Protocol(v)
				protocolOK = true
			default:
				d.errorf(g.value, join(path, "protocol"), "%q is not a protocol; use tcp or udp (lower case)", v)
			}
		}
	}

	if g, ok := fs["forwarding"]; ok {
		if v, ok := d.str(g, join(path, "forwarding")); ok {
			switch Forwarding(v) {
			case DSRIPIP, DSRGUE:
				s.Forwarding = Forwarding(v)
			default:
				d.errorf(g.value, join(path, "forwarding"), "%q is not a forwarding mode; use dsr-ipip or dsr-gue", v)
			}
		}
	}

	// An invalid translatePorts is reported once, not again at every
	// backend port that it would have allowed.
	translate := false
	if g, ok := fs["translatePorts"]; ok {
		v, ok := d.boolean(g, join(path, "translatePorts"))
		s.TranslatePorts, translate = v, v || !ok
	}

	var check *checkSpec
	if g, ok := fs["healthCheck"]; ok {
		check = d.healthCheck(g, join(path, "healthCheck"))
		d.resolveCheck(check, nil, s.Port, true)
	}

	if g, ok := fs["bgp"]; ok {
		attrs, ok := d.routeAttributes(g, join(path, "bgp"))
		switch {
		case !c.hasBGP:
			d.errorf(g.key, join(path, "bgp"), "nothing is announced without a bgp section: add a top-level bgp section with asn and peers, or remove this field")
		case ok && !attrs.IsZero() && s.VIP.IsValid():
			s.BGP = attrs
			d.checkRoute(c.routes, s, serviceAt{index: i, name: s.Name, line: g.key.Line}, g, join(path, "bgp"))
		}
	}

	// The key is checked only once its parts are valid: a service with a
	// bad VIP has already been reported.
	if s.VIP.IsValid() && s.Port != 0 && protocolOK {
		k := s.Key()
		if first, dup := c.keys[k]; dup {
			d.errorf(n, path, "%s is already served by %s; each VIP, port and protocol belongs to one service", k, first)
		} else {
			c.keys[k] = serviceAt{index: i, name: s.Name, line: n.Line}
		}
	}

	if g, ok := fs["flows"]; ok {
		if v, ok := d.str(g, join(path, "flows")); ok {
			switch Flows(v) {
			case FlowsStateless: // the zero value
			case FlowsStateful:
				s.Flows = Flows(v)
			case FlowsDaisyChain:
				s.Flows = Flows(v)
				if s.Forwarding != DSRGUE {
					d.errorf(g.value, join(path, "flows"), "daisy chaining needs the hint that only dsr-gue carries; set forwarding: dsr-gue")
				}
			default:
				d.errorf(g.value, join(path, "flows"), "%q is not a flows mode; use stateless, daisy-chain or stateful", v)
			}
		}
	}
	if g, ok := fs["history"]; ok {
		if s.Flows != FlowsDaisyChain {
			d.errorf(g.key, join(path, "history"), "only daisy-chained services use a history; set flows: daisy-chain or remove it")
		} else {
			s.History = d.history(g, join(path, "history"), s.Port, translate)
		}
	}

	g, ok := fs["backends"]
	if !ok {
		d.missing(n, join(path, "backends"), "required: list at least one backend, e.g. backends: [{address: 10.0.3.2}]")
		return s, 0
	}
	items, ok := d.sequence(g.value, join(path, "backends"))
	if !ok {
		return s, 0
	}
	if len(items) == 0 {
		d.errorf(g.key, join(path, "backends"), "the list is empty; a service needs at least one backend")
		return s, 0
	}
	if len(items) >= int(c.tableSize) {
		verb := "set"
		if c.tableSizeSet {
			verb = "raise"
		}
		d.errorf(g.key, join(path, "backends"), "%d backends do not fit a Maglev table of %d entries; %s dataplane.tableSize to a prime larger than %d (Maglev balances well when the table is about 100 times larger than the backends)", len(items), c.tableSize, verb, len(items))
	}
	if c.skipBackends {
		// Over the MaxBackends limit already: the caller reports it, and
		// walking more backends would only cost time.
		return s, len(items)
	}
	s.Backends = d.backends(g, items, join(path, "backends"), s.Port, translate, check)
	return s, len(items)
}

// backends parses a service's backends; check is the service's
// healthCheck (nil without one), which each backend's own merges over.
// translate lets a backend's port differ from the service's.
func (d *decoder) backends(f field, items []*yaml.Node, path string, servicePort uint16, translate bool, check *checkSpec) []Backend {
	type seen struct {
		index, line int
	}
	addrs := map[netip.Addr]seen{}
	out := make([]Backend, 0, len(items))
	active, weightErr := false, false
	for i, item := range items {
		if d.exhausted {
			return nil
		}
		p := index(path, i)
		item = d.resolve(item)
		if item == nil {
			return nil
		}
		if item.Kind != yaml.MappingNode {
			d.errorf(item, p, "expected a backend (a mapping with address and optionally port, weight and healthCheck), got %s", describe(item))
			continue
		}
		b := Backend{Port: servicePort, Weight: DefaultWeight}
		fs := d.mapping(item, p, backendFields)
		if g, ok := fs["address"]; ok {
			at := join(p, "address")
			if v, ok := d.text(g, at); ok {
				if a, why := parseUnicast4(v); why != "" {
					d.errorf(g.value, at, "%s", why)
				} else if first, dup := addrs[a]; dup {
					d.errorf(g.value, at, "%s is already listed as %s (line %d); list each backend once and use weight to give it more traffic", a, index(path, first.index), first.line)
				} else if a == d.nodeAddr {
					d.errorf(g.value, at, "%s is this node's own address (%s); a backend is another host, which the node tunnels packets to: write that host's address", a, d.nodeFrom)
				} else {
					b.Address = a
					addrs[a] = seen{index: i, line: g.value.Line}
					d.placed = append(d.placed, placedAddr{addr: a, node: g.value, path: at})
				}
			}
		} else {
			d.missing(item, join(p, "address"), "required: give the backend's IPv4 address, e.g. address: 10.0.3.2")
		}
		if g, ok := fs["port"]; ok {
			if v, ok := d.integer(g, join(p, "port"), 1, 65535); ok {
				if servicePort != 0 && uint16(v) != servicePort && !translate {
					d.errorf(g.value, join(p, "port"), "%d differs from the service port %d; DSR delivers the packet with VIP:port unchanged, so it cannot translate ports: remove port or set it to %d", v, servicePort, servicePort)
				}
				b.Port = uint16(v)
			}
		}
		if g, ok := fs["weight"]; ok {
			if v, ok := d.integer(g, join(p, "weight"), 0, MaxWeight); ok {
				b.Weight = uint32(v)
			} else {
				weightErr = true
			}
		}
		if b.Weight > 0 {
			active = true
		}
		var own *checkSpec
		if g, ok := fs["healthCheck"]; ok {
			own = d.healthCheck(g, join(p, "healthCheck"))
		}
		b.HealthCheck = d.resolveCheck(check, own, b.Port, own != nil)
		out = append(out, b)
	}
	if !active && !weightErr && len(out) == len(items) {
		d.errorf(f.key, path, "every backend has weight 0 (drained), so no backend can take new flows; give at least one a weight above 0")
	}
	return out
}

// history parses a daisy-chained service's earlier backend sets and
// returns them oldest first.
func (d *decoder) history(f field, path string, servicePort uint16, translate bool) []Generation {
	items, ok := d.sequence(f.value, path)
	if !ok {
		return nil
	}
	if len(items) > MaxHistory {
		d.errorf(f.key, path, "%d earlier backend sets; at most %d are kept, drop the oldest", len(items), MaxHistory)
		return nil
	}
	out := make([]Generation, 0, len(items))
	seen := map[time.Time]int{}
	for i, item := range items {
		p := index(path, i)
		item = d.resolve(item)
		if item == nil {
			return nil
		}
		fs := d.mapping(item, p, historyFields)
		var gen Generation
		if g, ok := fs["until"]; ok {
			if v, ok := d.text(g, join(p, "until")); ok {
				t, err := time.Parse(time.RFC3339, v)
				switch {
				case err != nil:
					d.errorf(g.value, join(p, "until"), "%q is not a time; write it as RFC 3339, e.g. until: 2026-11-25T10:00:00Z", v)
				case t.Unix() <= 0 || t.Unix() > math.MaxUint32:
					d.errorf(g.value, join(p, "until"), "%s is outside 1970-2106, which the data plane's 32-bit seconds hold", v)
				default:
					if first, dup := seen[t]; dup {
						d.errorf(g.value, join(p, "until"), "history[%d] ends at the same time; each set ends at its own time", first)
					}
					seen[t] = i
					gen.Until = t
				}
			}
		} else {
			d.missing(item, join(p, "until"), "required: when this backend set stopped being the service's, e.g. until: 2026-11-25T10:00:00Z")
		}
		g, ok := fs["backends"]
		if !ok {
			d.missing(item, join(p, "backends"), "required: the backends of that set, e.g. backends: [{address: 10.0.3.2}]")
			continue
		}
		bs, ok := d.sequence(g.value, join(p, "backends"))
		if !ok {
			continue
		}
		gen.Backends = d.backends(g, bs, join(p, "backends"), servicePort, translate, nil)
		out = append(out, gen)
	}
	slices.SortFunc(out, func(a, b Generation) int { return a.Until.Compare(b.Until) })
	return out
}
