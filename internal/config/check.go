package config

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"
)

// Each check returns "" when the value is valid, or else the reason,
// phrased to follow the field path in an error message.

// checkInterface applies the kernel's rules for interface names
// (dev_valid_name): 1 to 15 bytes (IFNAMSIZ less the NUL), not "." or
// "..", and no '/', ':' or white space.
func checkInterface(name string) string {
	switch {
	case name == "":
		return "is empty; name the network interface XDP attaches to, e.g. eth0"
	case len(name) > 15:
		return fmt.Sprintf("%q is %d bytes long; Linux interface names have at most 15", name, len(name))
	case name == "." || name == "..":
		return fmt.Sprintf("%q is not a valid interface name", name)
	}
	for _, r := range name {
		if r == '/' || r == ':' || r == 0 || unicode.IsSpace(r) {
			return fmt.Sprintf("%q is not a valid interface name: it contains %q", name, r)
		}
	}
	return ""
}

var broadcast = netip.AddrFrom4([4]byte{255, 255, 255, 255})

// parseUnicast4 parses an IPv4 address that can be a VIP, a backend or the
// node address: not 0.0.0.0, not multicast, not broadcast, not loopback.
// Link-local and private addresses are fine: labs and clusters use them.
// why6 says what to do with an IPv6 address instead.
func parseUnicast4(s, why6 string) (netip.Addr, string) {
	if _, err := netip.ParseAddr(s); err != nil && !strings.Contains(s, "/") {
		return netip.Addr{}, fmt.Sprintf("%q is not an IPv4 address", s)
	}
	a, why := parseUnicast(s)
	switch {
	case why != "":
		return a, why
	case a.Is6():
		return netip.Addr{}, fmt.Sprintf("%q is an IPv6 address; %s", s, why6)
	}
	return a, ""
}

// parseUnicast6 parses an IPv6 address that can be the node's IPv6
// address. why4 says what to do with an IPv4 address instead.
func parseUnicast6(s, why4 string) (netip.Addr, string) {
	if _, err := netip.ParseAddr(s); err != nil && !strings.Contains(s, "/") {
		return netip.Addr{}, fmt.Sprintf("%q is not an IPv6 address", s)
	}
	a, why := parseUnicast(s)
	switch {
	case why != "":
		return a, why
	case a.Is4():
		return netip.Addr{}, fmt.Sprintf("%q is an IPv4 address; %s", s, why4)
	}
	return a, ""
}

// ParseUnicast parses an address of either family as the configuration
// takes a VIP, a backend or a peer, or says why it is none (the reason
// quotes s); for the command line's addresses (xlb backend --vip).
func ParseUnicast(s string) (netip.Addr, string) { return parseUnicast(s) }

// parseUnicast parses an address of either family that can be a VIP, a
// backend, a peer or a node address. IPv4: as parseUnicast4 says. IPv6:
// not ::, not multicast, not loopback, not link-local (fe80::/10 is
// ambiguous without an interface, and neither a route nor a tunnel
// leads to it), not IPv4-mapped (that is IPv4: written as IPv4).
func parseUnicast(s string) (netip.Addr, string) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		if p, perr := netip.ParsePrefix(s); perr == nil {
			return netip.Addr{}, fmt.Sprintf("%q is a prefix, not an address; write the address alone (%s)", s, p.Addr())
		}
		return netip.Addr{}, fmt.Sprintf("%q is not an IP address; write an IPv4 (e.g. 10.99.0.1) or an IPv6 address (e.g. 2001:db8::1)", s)
	}
	if a.Is6() {
		return parseUnicastIPv6(s, a)
	}
	switch {
	case a.IsUnspecified():
		return netip.Addr{}, fmt.Sprintf("%s is the unspecified address; use a unicast IPv4 address", a)
	case a == broadcast:
		return netip.Addr{}, fmt.Sprintf("%s is the broadcast address; use a unicast IPv4 address", a)
	case a.IsMulticast():
		return netip.Addr{}, fmt.Sprintf("%s is a multicast address (224.0.0.0/4); use a unicast IPv4 address", a)
	case a.IsLoopback():
		return netip.Addr{}, fmt.Sprintf("%s is a loopback address (127.0.0.0/8), which never leaves a host; use a unicast IPv4 address", a)
	}
	return a, ""
}

func parseUnicastIPv6(s string, a netip.Addr) (netip.Addr, string) {
	switch {
	case a.Is4In6():
		return netip.Addr{}, fmt.Sprintf("%q is an IPv4-mapped IPv6 address; write it as plain IPv4 (%s)", s, a.Unmap())
	case a.Zone() != "":
		return netip.Addr{}, fmt.Sprintf("%q has a zone (%%%s); write the address without one: xlb's addresses are global, not tied to an interface", s, a.Zone())
	case a.IsUnspecified():
		return netip.Addr{}, fmt.Sprintf("%s is the unspecified address; use a unicast IPv6 address", a)
	case a.IsMulticast():
		return netip.Addr{}, fmt.Sprintf("%s is a multicast address (ff00::/8); use a unicast IPv6 address", a)
	case a.IsLoopback():
		return netip.Addr{}, fmt.Sprintf("%s is the loopback address, which never leaves a host; use a unicast IPv6 address", a)
	case a.IsLinkLocalUnicast():
		return netip.Addr{}, fmt.Sprintf("%s is a link-local address (fe80::/10), which is only valid on one link and needs an interface to mean anything; use a global or unique local IPv6 address (e.g. 2001:db8::1 or fd00::1)", a)
	}
	return a, ""
}

// vipRule says why a VIP must not be an address of the node.
const vipRule = "a VIP must be an address that no interface of the node holds: the load balancer takes in every packet to a VIP and drops those to ports no service has, " +
	"so the node's own traffic to that address (BGP, BFD, health-check replies, SSH) would be lost; choose another VIP"

// hostsVIP returns why the node cannot serve VIP a: it is the node
// address, or an address of the host; "" when it can.
func (c *checker) hostsVIP(a netip.Addr) string {
	if a == c.nodeAddr {
		return fmt.Sprintf("%s is this node's own address (%s); %s", a, c.nodeFrom, vipRule)
	}
	if a == c.nodeAddr6 {
		return fmt.Sprintf("%s is this node's own IPv6 address (%s); %s", a, c.nodeFrom6, vipRule)
	}
	if iface, ok := c.hostAddrs[a]; ok {
		return fmt.Sprintf("%s is configured on this host (interface %s); %s", a, iface, vipRule)
	}
	return ""
}

// maxSocketPath is the longest path a unix socket can have: sun_path holds
// 108 bytes including the terminating NUL.
const maxSocketPath = 107

func checkSocket(p string) string {
	if why := checkAbs(p); why != "" {
		return why + "; use one starting with / or remove socket for the default " + DefaultSocket
	}
	if len(p) > maxSocketPath {
		return fmt.Sprintf("%q is %d bytes long; a unix socket path has at most %d", p, len(p), maxSocketPath)
	}
	return ""
}

func checkPinPath(p string) string {
	if p == "" {
		return "" // the agent derives one
	}
	if why := checkAbs(p); why != "" {
		return why + "; use a directory under bpffs, e.g. /sys/fs/bpf/xlb, or remove pinPath to let the agent choose one"
	}
	return ""
}

func checkAbs(p string) string {
	switch {
	case strings.ContainsRune(p, 0):
		return fmt.Sprintf("%q contains a NUL byte", p)
	case !filepath.IsAbs(p):
		return fmt.Sprintf("%q is not an absolute path", p)
	}
	return ""
}

// CheckMetrics says why s is not an address for api.metrics ("" when it
// is one, and for ""): host:port where host is empty (every address),
// localhost or an IP address, and port is numeric. The agent listens on
// it, so a name that needs DNS or /etc/services has no place here. The
// agent's --metrics flag is checked by it too.
func CheckMetrics(s string) string {
	if s == "" {
		return ""
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Sprintf("%q is not host:port; write e.g. 127.0.0.1:9400, or :9400 for every address", s)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Sprintf("%q has port %q; the port must be a number in 1..65535", s, port)
	}
	if host == "" || host == "localhost" {
		return ""
	}
	if _, err := netip.ParseAddr(host); err != nil {
		return fmt.Sprintf("%q has host %q; the host must be an IP address, localhost, or empty for every address", s, host)
	}
	return ""
}

// checkServiceName accepts a DNS label as Kubernetes names services:
// lower-case letters, digits and '-', starting and ending with a letter or
// digit, at most 63 characters. Names appear in metrics labels and in the
// pin path, where anything else would need escaping.
func checkServiceName(s string) string {
	const rule = "a service name has 1 to 63 lower-case letters, digits and '-', and starts and ends with a letter or digit"
	if s == "" {
		return "is empty; " + rule
	}
	if len(s) > 63 {
		return fmt.Sprintf("%q is %d characters long; %s", s, len(s), rule)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && (c != '-' || i == 0 || i == len(s)-1) {
			return fmt.Sprintf("%q is not a valid name; %s", s, rule)
		}
	}
	return ""
}

// isPrime is exact for every uint32: trial division by 6k±1 up to the
// square root, at most about 11,000 steps.
func isPrime(n uint32) bool {
	switch {
	case n < 2:
		return false
	case n < 4:
		return true
	case n%2 == 0 || n%3 == 0:
		return false
	}
	for d := uint64(5); d*d <= uint64(n); d += 6 {
		if uint64(n)%d == 0 || uint64(n)%(d+2) == 0 {
			return false
		}
	}
	return true
}

// nearestPrimes returns the nearest allowed table sizes below and above n
// (a non-prime within [MinTableSize, MaxTableSize]), for a helpful error.
// Prime gaps in this range are below 200, so both loops are short.
func nearestPrimes(n uint32) (below, above uint32) {
	below, above = MinTableSize, MaxTableSize
	for p := n - 1; p > MinTableSize; p-- {
		if isPrime(p) {
			below = p
			break
		}
	}
	for p := n + 1; p < MaxTableSize; p++ {
		if isPrime(p) {
			above = p
			break
		}
	}
	return below, above
}
