package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/xlbproject/xlb/internal/config/schema"
)

// nat checks the nat section; without one every default applies. The
// checks that need the services (nat.address against their VIPs and
// backends, nat.ports against the host's own ports) are natAgainst's.
func (c *checker) nat(f schema.Field[schema.NAT], path string) NATConfig {
	n := DefaultNAT()
	if !f.Given || f.Bad {
		return n
	}
	v := f.V
	if g := v.Address; valid(g) && g.V != "" {
		if a, why := parseUnicast4(string(g.V), "nat.address is the source of IPv4 full NAT, an IPv4 address of this node; IPv6 services' full NAT comes from node.address6"); why != "" {
			c.errorf(g.At.Value, join(path, "address"), "%s", why)
		} else {
			n.Address = a
		}
	}
	if g := v.Ports; valid(g) {
		if r, why := ParsePortRange(string(g.V)); why != "" {
			c.errorf(g.At.Value, join(path, "ports"), "%s", why)
		} else {
			n.Ports = r
		}
	}
	if s, ok := c.integer(v.Sessions, join(path, "sessions"), MinNATSessions, MaxNATSessions); ok {
		n.Sessions = uint32(s)
	}
	if g := v.Timeouts; valid(g) {
		p := join(path, "timeouts")
		t := g.V
		for _, d := range []struct {
			f    schema.Field[schema.Duration]
			name string
			to   *time.Duration
		}{
			{t.TCPSyn, "tcpSyn", &n.Timeouts.TCPSyn},
			{t.TCPEstablished, "tcpEstablished", &n.Timeouts.TCPEstablished},
			{t.TCPClosing, "tcpClosing", &n.Timeouts.TCPClosing},
			{t.UDP, "udp", &n.Timeouts.UDP},
			{t.TCPTimeWait, "tcpTimeWait", &n.Timeouts.TCPTimeWait},
		} {
			if !valid(d.f) {
				continue
			}
			if x := d.f.V.D; x < MinNATTimeout || x > MaxNATTimeout {
				why := "shorter, a session would end between two packets of a live connection; longer, an idle one holds its port and table entry for nothing"
				if d.name == "tcpTimeWait" {
					why = "give the backends' TIME_WAIT (60s on Linux, up to 240s on Windows)"
				}
				c.errorf(d.f.At.Value, join(p, d.name), "%s is out of range %s..%s: %s", d.f.V, MinNATTimeout, "24h", why)
				continue
			}
			*d.to = d.f.V.D
		}
	}
	return n
}

// ParsePortRange reads a range of NAT source ports, MIN-MAX, or says why
// s is none: not two ports, in the wrong order, below MinNATPort, or
// fewer than MinNATPorts of them.
func ParsePortRange(s string) (PortRange, string) {
	const example = "e.g. 20000-32767"
	lo, hi, ok := strings.Cut(strings.TrimSpace(s), "-")
	a, errA := strconv.ParseUint(strings.TrimSpace(lo), 10, 32)
	b, errB := strconv.ParseUint(strings.TrimSpace(hi), 10, 32)
	switch {
	case !ok || errA != nil || errB != nil:
		return PortRange{}, fmt.Sprintf("%s is not a port range; write the first and the last port joined by \"-\", %s", schema.Show(s), example)
	case a > 65535 || b > 65535:
		return PortRange{}, fmt.Sprintf("%s goes beyond port 65535; %s", schema.Show(s), example)
	case a > b:
		return PortRange{}, fmt.Sprintf("%s starts above its end; write the lower port first: %d-%d", schema.Show(s), b, a)
	case a < MinNATPort:
		return PortRange{}, fmt.Sprintf("%s starts below port %d, among the host's well-known services' ports; start at %d or above, %s", schema.Show(s), MinNATPort, MinNATPort, example)
	case b-a+1 < MinNATPorts:
		return PortRange{}, fmt.Sprintf("%s holds %d ports; a range needs at least %d, since each backend (address, port and protocol) has one session per port: widen it, %s", schema.Show(s), b-a+1, MinNATPorts, example)
	}
	return PortRange{Min: uint16(a), Max: uint16(b)}, ""
}

// natPorts checks nat.ports against the ports the host's own
// connections take (when the host is known). An overlap is reported at
// nat.ports when the file writes it; otherwise natPorts returns the
// reason, for each service with forwarding nat to report, so that a
// source that builds its configuration (Kubernetes) drops those
// services alone.
func (c *checker) natPorts(f schema.Field[schema.NAT], path string, n NATConfig) string {
	if c.host == nil || !n.Ports.Overlaps(c.host.LocalPorts) {
		return ""
	}
	local := c.host.LocalPorts
	why := fmt.Sprintf("overlap this host's net.ipv4.ip_local_port_range %s, the source ports of the node's own connections (health checks included): a backend's reply to one of them would be taken for a NAT session's; "+
		"choose nat.ports outside %s, or narrow the host's range (e.g. sysctl -w net.ipv4.ip_local_port_range=\"32768 60999\")", local, local)
	if g := f.V.Ports; valid(g) && g.At.Value > 0 {
		c.errorf(g.At.Value, join(path, "ports"), "%s %s", n.Ports, why)
		return ""
	}
	return fmt.Sprintf("forwarding nat takes source ports from nat.ports %s, which %s", n.Ports, why)
}
