package config

import (
	"maps"
	"net/netip"
	"slices"
)

// Host is what the checks know of the machine a configuration is for,
// beyond the file: the addresses configured on its interfaces (in the
// agent's network namespace), and the source ports of its own
// connections. A VIP that is one of the addresses would take the
// node's own traffic (BGP, BFD, health-check replies, SSH) into the load
// balancer, where every port but the service's is dropped; full NAT
// allocating one of those ports would take a reply to the node's own
// connection for a session's. The agent
// reads the host when it loads a file (at start, at every reload, with
// --check) and for every configuration it builds from a cluster;
// Load, Parse and Validate check a file by itself, without a host.
type Host struct {
	// Interfaces maps each interface's name to its addresses, in the
	// kernel's order: the first IPv4 address of node.interface is the
	// node address when the file sets none, its first global IPv6
	// address the node's IPv6 address when the file sets none.
	Interfaces map[string][]netip.Addr
	// LocalPorts is the host's net.ipv4.ip_local_port_range: the source
	// ports of the node's own connections (health checks, BGP), which
	// nat.ports must leave alone. The zero value: unknown.
	LocalPorts PortRange
}

// NodeAddress is the node address of n on h: n.Address, else the first
// IPv4 address of n.Interface; invalid when h does not know it.
func (h *Host) NodeAddress(n Node) netip.Addr {
	if n.Address.IsValid() || h == nil {
		return n.Address
	}
	for _, a := range h.Interfaces[n.Interface] {
		if a.Is4() {
			return a
		}
	}
	return netip.Addr{}
}

// NodeAddress6 is the node's IPv6 address on h: n.Address6, else the
// first global IPv6 address of n.Interface (unique local addresses
// count: labs and clusters use them); invalid when h does not know one.
func (h *Host) NodeAddress6(n Node) netip.Addr {
	if n.Address6.IsValid() || h == nil {
		return n.Address6
	}
	for _, a := range h.Interfaces[n.Interface] {
		if IsGlobal6(a) {
			return a
		}
	}
	return netip.Addr{}
}

// IsGlobal6 reports whether a can be a node's IPv6 address: IPv6, not
// IPv4-mapped, and global unicast (unique local included), so no
// link-local, loopback, multicast or unspecified address.
func IsGlobal6(a netip.Addr) bool {
	return a.Is6() && !a.Is4In6() && a.Zone() == "" && a.IsGlobalUnicast()
}

// hasIPv4 reports whether h knows an IPv4 address of interface name.
func (h *Host) hasIPv4(name string) bool {
	return h != nil && slices.ContainsFunc(h.Interfaces[name], netip.Addr.Is4)
}

// holders maps each address of h to the interface that holds it; of
// several, the first by name, so that messages do not vary.
func (h *Host) holders() map[netip.Addr]string {
	if h == nil {
		return nil
	}
	out := map[netip.Addr]string{}
	for _, name := range slices.Sorted(maps.Keys(h.Interfaces)) {
		for _, a := range h.Interfaces[name] {
			a = a.Unmap()
			if _, ok := out[a]; !ok {
				out[a] = name
			}
		}
	}
	return out
}

// equal reports whether h and o hold the same addresses.
func (h *Host) equal(o *Host) bool {
	if h == nil || o == nil {
		return h == o
	}
	return h.LocalPorts == o.LocalPorts && maps.EqualFunc(h.Interfaces, o.Interfaces, slices.Equal)
}
