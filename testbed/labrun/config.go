// Package labrun runs xlb agents in a lab (package lab) and measures what
// they do: it writes the nodes' configuration files, starts the agents and
// waits until they serve, sends HTTP and UDP traffic from inside a client
// namespace, and reads the counters of the agents, the interfaces and the
// client's TCP/IP stack. The demo and the end-to-end tests share it, so
// that both exercise xlb the same way.
package labrun

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/config/schema"
	"github.com/xlbproject/xlb/testbed/lab"
)

// Service is one service as the lab's agents serve it.
type Service struct {
	Name       string
	VIP        netip.Addr
	Port       uint16
	Protocol   config.Protocol
	Forwarding config.Forwarding
	Backends   []netip.Addr
	// SourceRanges are the only sources that reach the service; none:
	// every source.
	SourceRanges []netip.Prefix
	// Check is the service's health check; nil: none.
	Check *Check
	// Flows is the service's flows mode ("": stateless).
	Flows config.Flows
	// Affinity is the service's affinity ("": none).
	Affinity config.Affinity
	// History is a daisy-chained service's earlier backend sets, as a
	// tool that changes the backends would record them.
	History []Generation
	// BackendPort is the port of every backend, which forwarding nat and
	// dnat rewrite the destination to; 0: the service's port.
	BackendPort uint16
	// Drained are backends kept in the service with weight 0: they get
	// no new connections, and a NAT service keeps their open ones.
	Drained []netip.Addr
}

// Generation is a backend set that was a service's until Until.
type Generation struct {
	Until    time.Time
	Backends []netip.Addr
}

// Check is a service's health check as the lab writes it; zero fields
// are left out of the file, so the agent's defaults apply.
type Check struct {
	Type     config.CheckType // tcp or http
	Port     uint16
	Path     string
	Interval time.Duration
	Timeout  time.Duration
	Rise     int
	Fall     int
}

// WithCheck returns services with the check of the service named name
// set to c (nil: none).
func WithCheck(services []Service, name string, c *Check) []Service {
	out := slices.Clone(services)
	for i := range out {
		if out[i].Name == name {
			out[i].Check = c
		}
	}
	return out
}

// Target is the address clients send the service's traffic to.
func (s Service) Target() netip.AddrPort { return netip.AddrPortFrom(s.VIP, s.Port) }

// Services returns the lab's two services over every backend of p:
// "web", HTTP on the first VIP's port 80 over IPIP, and "echo", UDP echo on
// the second VIP's port 9000 over GUE. They match what `lab up` runs on
// the backends.
func Services(p lab.Plan) ([]Service, error) {
	if len(p.VIPs) < 2 {
		return nil, fmt.Errorf("lab %q has %d VIPs, want 2", p.Spec.Prefix, len(p.VIPs))
	}
	var backends []netip.Addr
	for _, b := range p.Backends {
		backends = append(backends, b.Addr)
	}
	return []Service{
		{Name: "web", VIP: p.VIPs[0], Port: lab.HTTPPort, Protocol: config.TCP, Forwarding: config.DSRIPIP, Backends: backends},
		{Name: "echo", VIP: p.VIPs[1], Port: lab.UDPPort, Protocol: config.UDP, Forwarding: config.DSRGUE, Backends: slices.Clone(backends)},
	}, nil
}

// Services6 returns the IPv6 services of a dual-stack lab (lab.Spec.IPv6)
// over every backend of p, beside Services' IPv4 ones on the same
// backends and servers: "web6", HTTP on the first IPv6 VIP's port 80 to
// the backends' IPv6 addresses over IPIP (IPv6-in-IPv6); "echo6", UDP
// echo on the second IPv6 VIP's port 9000 to the same over GUE (UDP over
// IPv6); "web6to4", HTTP on the second IPv6 VIP's port 80 to the
// backends' IPv4 addresses over IPIP (IPv6-in-IPv4); and "echo6to4", UDP
// echo on the first IPv6 VIP's port 9000 to the backends' IPv4 addresses
// over GUE (UDP over IPv4, an IPv6 packet inside).
func Services6(p lab.Plan) ([]Service, error) {
	if len(p.VIPs6) < 2 {
		return nil, fmt.Errorf("lab %q has %d IPv6 VIPs, want 2 (build it with IPv6)", p.Spec.Prefix, len(p.VIPs6))
	}
	var backends, backends4 []netip.Addr
	for _, b := range p.Backends {
		backends = append(backends, b.Addr6)
		backends4 = append(backends4, b.Addr)
	}
	return []Service{
		{Name: "web6", VIP: p.VIPs6[0], Port: lab.HTTPPort, Protocol: config.TCP, Forwarding: config.DSRIPIP, Backends: backends},
		{Name: "echo6", VIP: p.VIPs6[1], Port: lab.UDPPort, Protocol: config.UDP, Forwarding: config.DSRGUE, Backends: slices.Clone(backends)},
		{Name: "web6to4", VIP: p.VIPs6[1], Port: lab.HTTPPort, Protocol: config.TCP, Forwarding: config.DSRIPIP, Backends: backends4},
		{Name: "echo6to4", VIP: p.VIPs6[0], Port: lab.UDPPort, Protocol: config.UDP, Forwarding: config.DSRGUE, Backends: slices.Clone(backends4)},
	}, nil
}

// Without returns services with backend addr removed from every service.
func Without(services []Service, addr netip.Addr) []Service {
	out := make([]Service, len(services))
	for i, s := range services {
		s.Backends = slices.DeleteFunc(slices.Clone(s.Backends), func(a netip.Addr) bool { return a == addr })
		out[i] = s
	}
	return out
}

// ConfigPath is where the agent of node reads its configuration.
func ConfigPath(p lab.Plan, node lab.Host) string {
	return filepath.Join(p.StateDir, node.Name+".yaml")
}

// Socket is the API socket of the agent of node.
func Socket(p lab.Plan, node lab.Host) string {
	return filepath.Join(p.StateDir, node.Name+".sock")
}

// renderConfig returns the configuration file of node's agent: the
// configuration's own schema, with only what the lab sets written, so
// that the agent's defaults apply to the rest.
func renderConfig(p lab.Plan, node lab.Host, services []Service, opts NodeOptions) ([]byte, error) {
	dp := schema.Dataplane{PinPath: schema.Set(node.PinDir)}
	if opts.AttachMode != "" {
		dp.AttachMode = schema.Set(string(opts.AttachMode))
	}
	if opts.ConntrackSize != 0 {
		dp.ConntrackSize = schema.SetInt(opts.ConntrackSize)
	}
	sn := schema.Node{Interface: schema.Set(node.Interface)}
	if !opts.IPv6Only {
		sn.Address = schema.Set(schema.Text(node.Addr.String()))
	}
	if node.Addr6.IsValid() {
		sn.Address6 = schema.Set(schema.Text(node.Addr6.String()))
	}
	doc := schema.Document{
		Node:      schema.Set(sn),
		API:       schema.Set(schema.API{Socket: schema.Set(Socket(p, node))}),
		Dataplane: schema.Set(dp),
		Services:  schema.Set([]schema.Field[schema.Service]{}),
	}
	if b := p.BGP; b != nil {
		peer := schema.Peer{Address: schema.Set(schema.Text(b.PeerAddr.String())), ASN: schema.SetASN(b.PeerASN)}
		if b.BFD != nil {
			peer.BFD = schema.Set(schema.BFD{MinRx: duration(b.BFD.MinRx), MinTx: duration(b.BFD.MinTx), Multiplier: schema.SetInt(b.BFD.Multiplier)})
		}
		if b.GracefulRestart {
			peer.GracefulRestart = schema.Set(schema.GracefulRestart{})
		}
		// drainTime: long enough for the router to act on the
		// withdrawal, short enough for tests that restart agents.
		sb := schema.BGP{ASN: schema.SetASN(b.NodeASN), HoldTime: duration(b.HoldTime), DrainTime: schema.SetDuration(DrainTime),
			Peers: schema.Set([]schema.Field[schema.Peer]{schema.Set(peer)})}
		if opts.IPv6Only {
			// No IPv4 address to default to: the plan's IPv4 address of
			// the node is a router ID unique in the lab.
			sb.RouterID = schema.Set(schema.Text(node.Addr.String()))
		}
		doc.BGP = schema.Set(sb)
	}
	if p.Spec.L2 {
		// Layer-2 mode: every node of the lab shares every VIP.
		doc.Node.V.Announce = schema.Set(string(config.AnnounceL2))
		var nodes []schema.Field[schema.L2Node]
		for _, n := range p.Nodes {
			nodes = append(nodes, schema.Set(schema.L2Node{Name: schema.Set(n.Name), Address: schema.Set(schema.Text(n.Addr.String()))}))
		}
		doc.L2 = schema.Set(schema.L2{NodeName: schema.Set(node.Name), Nodes: schema.Set(nodes)})
	}
	if len(opts.Deny) > 0 {
		doc.Policy = schema.Set(schema.Policy{Deny: prefixes(opts.Deny)})
	}
	for _, s := range services {
		fs := schema.Service{
			Name: schema.Set(s.Name), VIP: schema.Set(schema.Text(s.VIP.String())), Port: schema.SetInt(s.Port),
			Protocol: schema.Set(string(s.Protocol)), Forwarding: schema.Set(string(s.Forwarding)),
			Backends: weightedBackends(s.Backends, s.Drained, s.BackendPort),
		}
		if s.Flows != "" {
			fs.Flows = schema.Set(string(s.Flows))
		}
		if s.Affinity != "" {
			fs.Affinity = schema.Set(string(s.Affinity))
		}
		if len(s.SourceRanges) > 0 {
			fs.SourceRanges = prefixes(s.SourceRanges)
		}
		if len(s.History) > 0 {
			var history []schema.Field[schema.Generation]
			for _, g := range s.History {
				history = append(history, schema.Set(schema.Generation{Until: schema.Set(schema.Text(g.Until.UTC().Format(time.RFC3339))), Backends: backends(g.Backends)}))
			}
			fs.History = schema.Set(history)
		}
		if c := s.Check; c != nil {
			fc := schema.Check{Type: schema.Set(string(c.Type)), Interval: duration(c.Interval), Timeout: duration(c.Timeout)}
			if c.Port != 0 {
				fc.Port = schema.SetInt(c.Port)
			}
			if c.Path != "" {
				fc.Path = schema.Set(c.Path)
			}
			if c.Rise != 0 {
				fc.Rise = schema.SetInt(c.Rise)
			}
			if c.Fall != 0 {
				fc.Fall = schema.SetInt(c.Fall)
			}
			fs.HealthCheck = schema.Set(&fc)
		}
		doc.Services.V = append(doc.Services.V, schema.Set(fs))
	}
	var buf bytes.Buffer
	buf.WriteString("# Written by xlb's lab runner (testbed/labrun) for " + node.Name + ".\n")
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("%s: encode configuration: %w", node.Name, err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("%s: encode configuration: %w", node.Name, err)
	}
	if opts.NAT != nil {
		buf.WriteString(opts.NAT.yaml())
	}
	return buf.Bytes(), nil
}

// weightedBackends writes the backends of a service: addrs with the
// default weight, drained with weight 0, each on port (0: the service's).
func weightedBackends(addrs, drained []netip.Addr, port uint16) schema.Field[[]schema.Field[schema.Backend]] {
	out := make([]schema.Field[schema.Backend], 0, len(addrs)+len(drained))
	for i, a := range append(slices.Clone(addrs), drained...) {
		b := schema.Backend{Address: schema.Set(schema.Text(a.String()))}
		if port != 0 {
			b.Port = schema.SetInt(port)
		}
		if i >= len(addrs) {
			b.Weight = schema.SetInt(0)
		}
		out = append(out, schema.Set(b))
	}
	return schema.Set(out)
}

// backends writes a list of backends by address, each on the service's
// port with the default weight.
func backends(addrs []netip.Addr) schema.Field[[]schema.Field[schema.Backend]] {
	out := make([]schema.Field[schema.Backend], 0, len(addrs))
	for _, a := range addrs {
		out = append(out, schema.Set(schema.Backend{Address: schema.Set(schema.Text(a.String()))}))
	}
	return schema.Set(out)
}

// prefixes writes a list of prefixes.
func prefixes(ps []netip.Prefix) schema.Field[[]schema.Field[schema.Text]] {
	out := make([]schema.Field[schema.Text], len(ps))
	for i, p := range ps {
		out[i] = schema.Set(schema.Text(p.String()))
	}
	return schema.Set(out)
}

// DrainTime is the bgp.drainTime of the lab's agents.
const DrainTime = time.Second

// duration writes d; 0 is left out (unset).
func duration(d time.Duration) schema.Field[schema.Duration] {
	if d == 0 {
		return schema.Field[schema.Duration]{}
	}
	return schema.SetDuration(d)
}

// WriteConfig writes the configuration of node's agent. It replaces the
// file by renaming a complete new one over it, so a running agent, which
// polls the file, never reads half of it.
func WriteConfig(p lab.Plan, node lab.Host, services []Service) error {
	return WriteConfigWith(p, node, services, NodeOptions{})
}

// NodeOptions are settings of a node's agent beyond its services.
type NodeOptions struct {
	// ConntrackSize is dataplane.conntrackSize; 0: the default.
	ConntrackSize uint32
	// AttachMode is dataplane.attachMode; "": the default (auto).
	AttachMode config.AttachMode
	// Deny is policy.deny; none: no deny list.
	Deny []netip.Prefix
	// NAT is the node's nat section (forwarding nat and dnat); nil:
	// none, the agent's defaults.
	NAT *NAT
	// IPv6Only leaves node.address out, for a node whose interface has
	// no IPv4 address (an IPv6-only node: take it off with
	// lab.RemoveIPv4 first), and sets bgp.routerID, which has no default
	// there, to the node's IPv4 address in the plan.
	IPv6Only bool
}

// NAT is the node-wide nat section of an agent's configuration; zero
// fields are left out, so the agent's defaults apply.
type NAT struct {
	Address netip.Addr // the source of full-NAT sessions; default node.address
	// PortMin and PortMax are the ports allocated on Address.
	PortMin, PortMax uint16
	Sessions         uint32 // the session table's size
	// Timeouts of a session.
	TCPSyn, TCPEstablished, TCPClosing, UDP, TCPTimeWait time.Duration
}

// yaml writes the nat section. It is text rather than the schema's
// types, so that the lab writes exactly the documented keys.
func (n NAT) yaml() string {
	var b strings.Builder
	b.WriteString("nat:\n")
	if n.Address.IsValid() {
		fmt.Fprintf(&b, "  address: %s\n", n.Address)
	}
	if n.PortMin != 0 || n.PortMax != 0 {
		fmt.Fprintf(&b, "  ports: %d-%d\n", n.PortMin, n.PortMax)
	}
	if n.Sessions != 0 {
		fmt.Fprintf(&b, "  sessions: %d\n", n.Sessions)
	}
	var ts []string
	for _, t := range []struct {
		key string
		d   time.Duration
	}{{"tcpSyn", n.TCPSyn}, {"tcpEstablished", n.TCPEstablished}, {"tcpClosing", n.TCPClosing}, {"udp", n.UDP}, {"tcpTimeWait", n.TCPTimeWait}} {
		if t.d != 0 {
			ts = append(ts, t.key+": "+t.d.String())
		}
	}
	if len(ts) > 0 {
		fmt.Fprintf(&b, "  timeouts: {%s}\n", strings.Join(ts, ", "))
	}
	if b.Len() == len("nat:\n") {
		return "nat: {}\n"
	}
	return b.String()
}

// WriteConfigWith is WriteConfig with node options.
func WriteConfigWith(p lab.Plan, node lab.Host, services []Service, opts NodeOptions) error {
	b, err := renderConfig(p, node, services, opts)
	if err != nil {
		return err
	}
	path := ConfigPath(p, node)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("%s: %w", node.Name, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("%s: %w", node.Name, err)
	}
	return nil
}
