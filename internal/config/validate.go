package config

import (
	"fmt"
	"net/netip"
	"strconv"

	"github.com/xlbproject/xlb/internal/config/schema"
	"github.com/xlbproject/xlb/internal/flowhash"
)

// Error is one problem in a configuration, located by line and field
// path, e.g. "agent.yaml:14: services[1].backends[0].address: ...".
type Error = schema.Error

// Env is what Validate knows beyond the document.
type Env struct {
	// File names the configuration in errors: the file's path, or the
	// source that built it ("kubernetes").
	File string
	// Host is the machine the configuration is for; nil: unknown, and
	// no value is checked against its addresses.
	Host *Host
}

// Validate checks what the values of doc mean (ranges, addresses, the
// rules between fields and across services, the node's own addresses
// on env.Host) and returns the configuration with every default
// applied. On failure it returns every problem found, one per line, each
// an *Error naming env.File, the line (when doc was decoded from a file),
// the field path and the reason. A field that Decode marked Bad was
// reported by Decode: Validate says nothing more of it.
func Validate(doc *schema.Document, env Env) (*Config, error) {
	cfg, errs := check(doc, env)
	if err := errs.Err(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// ValidateConfig checks a configuration built in code (a cluster's) by
// the rules a file passes: it validates the Document that Render makes of
// c, so that its errors are those Parse would give for Marshal(c), without
// lines.
func ValidateConfig(c *Config, env Env) (*Config, error) {
	return Validate(Render(c), env)
}

func check(doc *schema.Document, env Env) (*Config, *schema.Errors) {
	c := &checker{errs: schema.Errors{File: env.File}, misspelt: doc.Misspelt, host: env.Host, hostAddrs: env.Host.holders()}
	return c.config(doc), &c.errs
}

// checker validates one Document and collects every problem it finds
// instead of stopping at the first.
type checker struct {
	errs     schema.Errors
	misspelt map[string]bool // schema.Document.Misspelt

	// host is the machine the configuration is for (nil: unknown), and
	// hostAddrs its addresses with the interface holding each.
	host      *Host
	hostAddrs map[netip.Addr]string
	// nodeAddr is the node address (node.address, or the host's first
	// IPv4 of node.interface); invalid when neither is known.
	nodeAddr netip.Addr
	nodeFrom string // where nodeAddr comes from, for messages
	// nodeAddr6 is the node's IPv6 address (node.address6, or the
	// host's first global IPv6 of node.interface); invalid when neither
	// is known.
	nodeAddr6 netip.Addr
	nodeFrom6 string
	// inCluster: the document has a kubernetes section.
	inCluster bool
	// placed lists every backend address with where it was written, for
	// the check against every service's VIP once all are known.
	placed []placedAddr
}

// placedAddr is a backend address and the line and path it was written at.
type placedAddr struct {
	addr netip.Addr
	line schema.Line
	path string
}

func (c *checker) errorf(line schema.Line, path, format string, args ...any) {
	c.errs.Add(int(line), path, format, args...)
}

// missing reports a required field that is absent, unless a misspelling
// of it has been reported already: one error says it all.
func (c *checker) missing(line schema.Line, path, format string, args ...any) {
	if !c.misspelt[path] {
		c.errorf(line, path, format, args...)
	}
}

// valid reports whether f is written with a value Decode accepted.
func valid[T any](f schema.Field[T]) bool { return f.Given && !f.Bad }

// integer returns the value of a whole-number field within [lo, hi],
// and reports one out of range at the value.
func (c *checker) integer(f schema.Field[schema.Int], path string, lo, hi int64) (int64, bool) {
	switch {
	case !valid(f):
		return 0, false
	case f.V.Big != "":
		c.errorf(f.At.Node, path, "%s is out of range %d..%d", schema.Show(f.V.Big), lo, hi)
		return 0, false
	case f.V.N < lo || f.V.N > hi:
		c.errorf(f.At.Node, path, "%d is out of range %d..%d", f.V.N, lo, hi)
		return 0, false
	}
	return f.V.N, true
}

// lineNote refers to a line in a message: " (line 12)", or "" in a
// document built in code, which has no lines.
func lineNote(line schema.Line) string {
	if line == 0 {
		return ""
	}
	return " (line " + strconv.Itoa(int(line)) + ")"
}

// withLine refers to a field and its line: "services[0].name, line 12",
// or the field alone in a document built in code.
func withLine(path string, line schema.Line) string {
	if line == 0 {
		return path
	}
	return path + ", line " + strconv.Itoa(int(line))
}

// join appends a field name to a path.
func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// index appends a list index to a path.
func index(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

func (c *checker) config(doc *schema.Document) *Config {
	cfg := &Config{}
	if doc.Node.Given {
		cfg.Node = c.node(doc.Node, "node")
	} else {
		c.missing(doc.At.Node, "node", "required section is missing; add at least \"node: {interface: eth0}\" naming the interface XDP attaches to")
	}
	c.nodeAddr, c.nodeFrom = c.host.NodeAddress(cfg.Node), "node.address"
	if !cfg.Node.Address.IsValid() {
		c.nodeFrom = fmt.Sprintf("the first IPv4 address of node.interface %s, which the agent takes when node.address is not set", cfg.Node.Interface)
	}
	c.nodeAddr6, c.nodeFrom6 = c.host.NodeAddress6(cfg.Node), "node.address6"
	if !cfg.Node.Address6.IsValid() {
		c.nodeFrom6 = fmt.Sprintf("the first global IPv6 address of node.interface %s, which the agent takes when node.address6 is not set", cfg.Node.Interface)
	}
	cfg.API = c.api(doc.API, "api")
	dp, tableSizeSet := c.dataplane(doc.Dataplane, "dataplane")
	cfg.Dataplane = dp
	if doc.Kubernetes.Given {
		cfg.Kubernetes = c.kubernetes(doc.Kubernetes, "kubernetes")
		c.inCluster = true
	}
	if doc.BGP.Given {
		cfg.BGP = c.bgp(doc.BGP, "bgp", cfg.Node, doc.Kubernetes.Given)
		// The router ID defaults to the node's IPv4 address; a node with
		// IPv6 alone has none to take.
		if !doc.BGP.Bad && !cfg.BGP.RouterID.IsValid() && c.host != nil && cfg.Node.Interface != "" && !c.host.hasIPv4(cfg.Node.Interface) {
			c.missing(doc.BGP.At.Key, "bgp.routerID", "required here: node.interface %s has no IPv4 address and node.address is not set, so there is no default; "+
				"a BGP router ID is 32 bits, written as an IPv4 address, and needs not be an address of the node: write one unique among the routers, e.g. routerID: 10.0.1.2", cfg.Node.Interface)
		}
	}
	c.announce(doc, cfg)
	if doc.Policy.Given {
		cfg.Policy = c.policy(doc.Policy, "policy")
	}
	cfg.NAT = c.nat(doc.NAT, "nat")
	nat := natCtx{clash: c.natPorts(doc.NAT, "nat", cfg.NAT)}
	if a := cfg.NAT.Address; a.IsValid() && a != c.nodeAddr {
		nat.addr, nat.line = a, doc.NAT.V.Address.At.Value
	}
	cfg.Services = c.services(doc.Services, "services", dp, tableSizeSet, doc.BGP.Given, nat)
	return cfg
}

func (c *checker) node(f schema.Field[schema.Node], path string) Node {
	var n Node
	if g := f.V.Interface; !g.Given {
		c.missing(f.At.Key, join(path, "interface"), "required: name the network interface XDP attaches to, e.g. interface: eth0")
	} else if valid(g) {
		if why := checkInterface(g.V); why != "" {
			c.errorf(g.At.Value, join(path, "interface"), "%s", why)
		} else {
			n.Interface = g.V
		}
	}
	if g := f.V.Address; valid(g) && g.V != "" {
		if a, why := parseUnicast4(string(g.V), "node.address is the node's IPv4 address: write this one in node.address6"); why != "" {
			c.errorf(g.At.Value, join(path, "address"), "%s", why)
		} else {
			n.Address = a
		}
	}
	if g := f.V.Announce; valid(g) {
		if m, err := ParseAnnounce(g.V); err != nil {
			c.errorf(g.At.Value, join(path, "announce"), "%v", err)
		} else if m != AnnounceBGP {
			n.Announce = m
		}
	}
	if g := f.V.Address6; valid(g) && g.V != "" {
		if a, why := parseUnicast6(string(g.V), "node.address6 is the node's IPv6 address: write this one in node.address"); why != "" {
			c.errorf(g.At.Value, join(path, "address6"), "%s", why)
		} else {
			n.Address6 = a
		}
	}
	return n
}

func (c *checker) api(f schema.Field[schema.API], path string) API {
	a := API{Socket: DefaultSocket}
	if g := f.V.Socket; valid(g) {
		if why := checkSocket(g.V); why != "" {
			c.errorf(g.At.Value, join(path, "socket"), "%s", why)
		} else {
			a.Socket = g.V
		}
	}
	if g := f.V.Metrics; valid(g) {
		if why := CheckMetrics(string(g.V)); why != "" {
			c.errorf(g.At.Value, join(path, "metrics"), "%s", why)
		} else {
			a.Metrics = string(g.V)
		}
	}
	return a
}

// dataplane also reports whether tableSize was written, so that a later
// error can point at it.
func (c *checker) dataplane(f schema.Field[schema.Dataplane], path string) (Dataplane, bool) {
	dp := Dataplane{AttachMode: DefaultAttachMode, TableSize: DefaultTableSize, MaxBackends: DefaultMaxBackends, FlowHash: DefaultFlowHash, PingVIPs: DefaultPingVIPs}
	v := f.V
	if g := v.PinPath; valid(g) {
		if why := checkPinPath(g.V); why != "" {
			c.errorf(g.At.Value, join(path, "pinPath"), "%s", why)
		} else {
			dp.PinPath = g.V
		}
	}
	if g := v.AttachMode; valid(g) {
		if m, err := ParseAttachMode(g.V); err != nil {
			c.errorf(g.At.Value, join(path, "attachMode"), "%v", err)
		} else {
			dp.AttachMode = m
		}
	}
	if n, ok := c.integer(v.TableSize, join(path, "tableSize"), MinTableSize, MaxTableSize); ok {
		if isPrime(uint32(n)) {
			dp.TableSize = uint32(n)
		} else {
			lo, hi := nearestPrimes(uint32(n))
			c.errorf(v.TableSize.At.Value, join(path, "tableSize"), "%d is not a prime, and Maglev needs a prime table size; the nearest primes are %d and %d", n, lo, hi)
		}
	}
	if n, ok := c.integer(v.MaxBackends, join(path, "maxBackends"), 1, MaxBackends); ok {
		dp.MaxBackends = uint32(n)
	}
	if n, ok := c.integer(v.ConntrackSize, join(path, "conntrackSize"), MinConntrackSize, MaxConntrackSize); ok {
		dp.ConntrackSize = uint32(n)
	}
	if g := v.FlowHash; valid(g) {
		if _, err := flowhash.Parse(g.V); err != nil {
			c.errorf(g.At.Value, join(path, "flowHash"), "%v", err)
		} else {
			dp.FlowHash = g.V
		}
	}
	if g := v.PingVIPs; valid(g) {
		dp.PingVIPs = g.V
	}
	return dp, v.TableSize.Given
}

// kubernetes checks the kubernetes section. An empty section takes every
// default.
func (c *checker) kubernetes(f schema.Field[schema.Kubernetes], path string) *Kubernetes {
	k := &Kubernetes{}
	v := f.V
	if g := v.Kubeconfig; valid(g) {
		if why := checkAbs(g.V); why != "" {
			c.errorf(g.At.Value, join(path, "kubeconfig"), "%s; give the kubeconfig file's absolute path, or remove kubeconfig to use the in-cluster configuration", why)
		} else {
			k.Kubeconfig = g.V
		}
	}
	if g := v.NodeName; valid(g) {
		if why := checkNodeName(g.V); why != "" {
			c.errorf(g.At.Value, join(path, "nodeName"), "%s", why)
		} else {
			k.NodeName = g.V
		}
	}
	if g := v.SecretNamespace; valid(g) {
		if why := checkNamespace(g.V); why != "" {
			c.errorf(g.At.Value, join(path, "secretNamespace"), "%s", why)
		} else {
			k.SecretNamespace = g.V
		}
	}
	if g := v.ServeClassless; valid(g) {
		k.ServeClassless = g.V
	}
	return k
}
