package agent

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
)

// PinPath is where the agent for cfg pins its maps and link:
// cfg.Dataplane.PinPath, or DefaultPinPath of the node interface.
func PinPath(cfg *config.Config) (string, error) {
	if cfg.Dataplane.PinPath != "" {
		return cfg.Dataplane.PinPath, nil
	}
	return DefaultPinPath(cfg.Node.Interface)
}

// DefaultPinPath is /sys/fs/bpf/xlb/<netns inode>-<interface>. bpffs is
// shared by all network namespaces of a host, while interface names are
// not unique across them; the namespace's inode tells agents in different
// namespaces apart (and `xlb cleanup` finds the same directory when run in
// the agent's namespace).
func DefaultPinPath(iface string) (string, error) {
	return bpfobj.DefaultPinPath("", iface)
}

// NodeAddress is the node's IPv4 address: n.Address if set, else the
// first IPv4 address of n.Interface. A node with IPv6 alone (node.address6,
// or a global IPv6 address on the interface) has none: invalid, and no
// error; the configuration's checks then refuse what needs one (IPv4
// backends, a bgp section without routerID).
func NodeAddress(n config.Node) (netip.Addr, error) {
	if n.Address.IsValid() {
		return n.Address, nil
	}
	ifi, err := net.InterfaceByName(n.Interface)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("node.interface %q: %w (list the interfaces with `ip link`)", n.Interface, err)
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("node.interface %q: list addresses: %w", n.Interface, err)
	}
	return pickNodeAddress(n, addrs)
}

// pickNodeAddress is NodeAddress's choice among the interface's addrs.
func pickNodeAddress(n config.Node, addrs []net.Addr) (netip.Addr, error) {
	has6 := n.Address6.IsValid()
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		if ip4 := ipn.IP.To4(); ip4 != nil {
			addr, _ := netip.AddrFromSlice(ip4)
			return addr, nil
		}
		if ip, ok := netip.AddrFromSlice(ipn.IP); ok && config.IsGlobal6(ip) {
			has6 = true
		}
	}
	if has6 {
		return netip.Addr{}, nil
	}
	return netip.Addr{}, fmt.Errorf("node.interface %q has neither an IPv4 nor a global IPv6 address: add one (ip addr add ADDR/LEN dev %s) or set node.address (or node.address6)", n.Interface, n.Interface)
}

// NodeAddress6 is the node's IPv6 address: n.Address6 if set, else the
// first global IPv6 address of n.Interface (config.IsGlobal6: unique
// local ones count, link-local ones do not), in the kernel's order; one
// that failed duplicate address detection is skipped. Invalid, and no error, when the interface has none: the node
// then serves no IPv6 backend (the configuration's checks say so).
func NodeAddress6(n config.Node) (netip.Addr, error) {
	if n.Address6.IsValid() {
		return n.Address6, nil
	}
	link, err := netlink.LinkByName(n.Interface)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("node.interface %q: %w (list the interfaces with `ip link`)", n.Interface, err)
	}
	addrs, err := netlink.AddrList(link, netlink.FAMILY_V6)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("node.interface %q: list IPv6 addresses: %w", n.Interface, err)
	}
	return firstGlobal6(addrs), nil
}

// firstGlobal6 is the first usable global IPv6 address of addrs.
func firstGlobal6(addrs []netlink.Addr) netip.Addr {
	for _, a := range addrs {
		if a.Flags&unix.IFA_F_DADFAILED != 0 || a.IPNet == nil {
			continue
		}
		if ip, ok := netip.AddrFromSlice(a.IP); ok && config.IsGlobal6(ip) {
			return ip
		}
	}
	return netip.Addr{}
}

// LocalHost reads the IPv4 and IPv6 addresses configured in the calling
// thread's network namespace, by interface, and the source ports its own
// connections take, for the checks of config.Host.
func LocalHost() (*config.Host, error) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("list this host's addresses: %w", err)
	}
	h := &config.Host{Interfaces: map[string][]netip.Addr{}}
	var names map[int]string // by index, read only for an address without a label
	for _, a := range addrs {
		// An IPv6 address that another host holds is not this one's.
		if a.IPNet == nil || a.Flags&unix.IFA_F_DADFAILED != 0 {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		// The kernel labels an IPv4 address with its interface's name,
		// or with NAME:ALIAS ("ip addr add … label eth0:1"); an IPv6
		// address has no label, and is named by its interface's index.
		name, _, _ := strings.Cut(a.Label, ":")
		if name == "" {
			if names == nil {
				names = map[int]string{}
				if ifs, err := net.Interfaces(); err == nil {
					for _, ifc := range ifs {
						names[ifc.Index] = ifc.Name
					}
				}
			}
			if name = names[a.LinkIndex]; name == "" {
				name = fmt.Sprintf("if%d", a.LinkIndex)
			}
		}
		h.Interfaces[name] = append(h.Interfaces[name], ip.Unmap())
	}
	// Unknown when it cannot be read: nat.ports is then not checked
	// against it.
	h.LocalPorts, _ = localPorts()
	return h, nil
}

// localPortRange is where the kernel says which source ports the
// calling thread's network namespace gives its own connections.
const localPortRange = "/proc/sys/net/ipv4/ip_local_port_range"

// localPorts reads net.ipv4.ip_local_port_range.
func localPorts() (config.PortRange, error) {
	b, err := os.ReadFile(localPortRange)
	if err != nil {
		return config.PortRange{}, err
	}
	return parseLocalPorts(string(b))
}

// parseLocalPorts reads the two numbers of ip_local_port_range.
func parseLocalPorts(s string) (config.PortRange, error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return config.PortRange{}, fmt.Errorf("%s: %q is not two ports", localPortRange, s)
	}
	lo, err1 := strconv.ParseUint(f[0], 10, 16)
	hi, err2 := strconv.ParseUint(f[1], 10, 16)
	if err1 != nil || err2 != nil || lo > hi {
		return config.PortRange{}, fmt.Errorf("%s: %q is not a range of ports", localPortRange, s)
	}
	return config.PortRange{Min: uint16(lo), Max: uint16(hi)}, nil
}

// LoadFile loads the configuration file at path and checks it against
// this host's addresses (config.LoadOn), as the agent loads it at start,
// at every reload and for `xlb agent --check`.
func LoadFile(path string) (*config.Config, error) {
	h, err := LocalHost()
	if err != nil {
		return nil, err
	}
	return config.LoadOn(path, h)
}

// warmNeighbours sends one tiny UDP datagram to the discard port of each
// address, so the kernel resolves the next hop's MAC address now: the XDP
// program's bpf_fib_lookup only forwards through resolved neighbours.
func warmNeighbours(addrs []netip.Addr, log *slog.Logger) {
	for _, a := range addrs {
		if err := warm(a); err != nil {
			log.Debug("neighbour warm-up failed", "backend", a, "error", err)
		}
	}
}

func warm(a netip.Addr) error {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 9)))
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, err = c.Write([]byte{0})
	return err
}
