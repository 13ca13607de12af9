package config

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzParse checks that Parse never panics, that every error line names
// the file, and that whatever it accepts satisfies the invariants the rest
// of the agent relies on. Run it with: go test -fuzz FuzzParse ./internal/config/
func FuzzParse(f *testing.F) {
	full, err := os.ReadFile(filepath.Join("testdata", "full.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	seeds := []string{
		string(full),
		minimal,
		"node: {interface: eth0}\n",
		"node: {interface: eth0}\nservices:\n  - &s {name: a, vip: 10.99.0.1, port: 53, protocol: udp, backends: &b [{address: 10.0.3.2, weight: 0}, {address: 10.0.3.3}]}\n  - {<<: *s, name: b, protocol: tcp, forwarding: dsr-gue}\n",
		"node: {interface: eth0, address: 10.0.1.2}\napi: {socket: /run/x.sock, metrics: \"[::1]:9400\"}\ndataplane: {pinPath: /sys/fs/bpf/x, attachMode: generic, tableSize: 251}\n",
		"node:\n  interfce: eth0\nbgp: {asn: 1}\n",
		"node: {interface: eth0}\nbgp: {asn: 65001, holdTime: 0, keepalive: 1s, listenPort: 0, peers: [{address: 10.0.1.1, asn: 65001, multihop: 2, passive: true}, {address: 10.0.1.1, asn: 1.10, bfd: true}]}\n",
		"node: {interface: eth0, address: 10.0.1.2}\nbgp:\n  asn: 4294967295\n  routerID: 1.2.3.4\n  holdTime: 30s\n  keepalive: 10s\n  drainTime: 0\n  peers:\n    - &p {address: 10.0.1.1, asn: 65000, port: 1179, password: \"k\", holdTime: 0, multihop: 3, passive: true}\n    - {<<: *p, address: 10.0.1.3, multihop: 0, bfd: {minRx: 10ms, minTx: 1m, multiplier: 255}}\n" +
			"services:\n  - {name: a, vip: 10.99.0.1, port: 80, bgp: &r {communities: [no-export, \"65000:100\"], largeCommunities: [\"1:2:3\"], localPreference: 100, med: 0}, backends: [{address: 10.0.3.2}]}\n" +
			"  - {name: b, vip: 10.99.0.1, port: 53, protocol: udp, bgp: *r, backends: [{address: 10.0.3.2}]}\n  - {name: c, vip: 10.99.0.1, port: 81, backends: [{address: 10.0.3.2}]}\n",
		"node: {interface: eth0}\nbgp: {asn: 65001, holdTime: 30s, peers: []}\nkubernetes: {kubeconfig: /k, nodeName: n.a, secretNamespace: lb, serveClassless: true}\nservices:\n" +
			"  - {name: default/web:80/tcp, vip: 10.99.0.1, port: 80, translatePorts: true, backends: [{address: 10.244.1.2, port: 8080}, {address: 10.244.1.3, port: 8080, weight: 0}]}\n",
		"node: {interface: eth0, address: 10.0.1.2}\nnat: {address: 10.0.1.3, ports: 40000-41023, sessions: 1024, timeouts: {tcpSyn: 1s, tcpEstablished: 24h, tcpClosing: 2s, udp: 30s}}\nservices:\n" +
			"  - {name: a, vip: 10.99.0.1, port: 80, forwarding: nat, affinity: client-ip, backends: [{address: 10.0.3.2, port: 8080}, {address: 10.0.3.3, port: 8081}]}\n" +
			"  - {name: b, vip: 10.99.0.1, port: 53, protocol: udp, forwarding: dnat, backends: [{address: 10.0.3.2, port: 5353}]}\n",
		"node: {interface: eth0}\nservices:\n  - name: a\n    vip: 10.99.0.1\n    port: 80\n    healthCheck: {type: http, path: /h, expectStatus: \"200-204\", interval: 200ms, timeout: 150ms, rise: 1, fall: 3}\n    backends: [{address: 10.0.3.2, healthCheck: {type: tcp, port: 22}}, {address: 10.0.3.3, healthCheck: {interval: 1s}}]\n",
	}
	seeds = append(seeds, dualStack,
		"node: {interface: eth0, address6: \"fd00::2\"}\npolicy: {deny: [\"::/0\", \"fe80::/10\"]}\nservices:\n  - {name: a, vip: \"2001:db8::1\", port: 80, sourceRanges: [\"2001:db8::/32\", 10.0.0.0/8], forwarding: nat, backends: [{address: \"fe80::2\"}, {address: \"::ffff:10.0.3.2\"}, {address: \"ff02::1\"}, {address: \"fd00::2\"}]}\n",
		"node: {interface: eth0}\nbgp: {asn: 1, peers: [{address: \"fd00::1%eth0\", asn: 2}, {address: \"::\", asn: 2}]}\n")
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("f.yaml", data)
		if err != nil {
			if cfg != nil {
				t.Fatalf("got a config together with the error %v", err)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "f.yaml:") {
					t.Fatalf("error line %q does not start with the file name", line)
				}
			}
			return
		}
		if err := invariants(cfg); err != nil {
			t.Fatalf("%v\ninput:\n%s", err, data)
		}
		if err := roundTrip(cfg); err != nil {
			t.Fatalf("%v\ninput:\n%s", err, data)
		}
	})
}

var (
	serviceName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	// kubernetesName is NAMESPACE/NAME:PORT/PROTOCOL; the port's range is
	// checked apart.
	kubernetesName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?:([1-9][0-9]{0,4})/(tcp|udp)$`)
)

func validName(s string) bool {
	if len(s) <= 63 && serviceName.MatchString(s) {
		return true
	}
	m := kubernetesName.FindStringSubmatch(s)
	if m == nil {
		return false
	}
	port, err := strconv.Atoi(m[3])
	return err == nil && port <= 65535
}

// invariants re-checks a parsed configuration independently of the parser's
// own code: what Parse accepts, the data plane must be able to take.
func invariants(c *Config) error {
	if c == nil {
		return errors.New("nil config without an error")
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	ifname := c.Node.Interface
	if len(ifname) < 1 || len(ifname) > 15 || ifname == "." || ifname == ".." || strings.ContainsAny(ifname, "/: \t\n\v\f\r\x00") {
		bad("invalid interface %q", ifname)
	}
	if a := c.Node.Address; a.IsValid() && !unicast4(a) {
		bad("invalid node address %v", a)
	}
	if a := c.Node.Address6; a.IsValid() && !unicast6(a) {
		bad("invalid node IPv6 address %v", a)
	}
	if !strings.HasPrefix(c.API.Socket, "/") || len(c.API.Socket) > 107 {
		bad("invalid socket %q", c.API.Socket)
	}
	if m := c.API.Metrics; m != "" {
		host, port, err := net.SplitHostPort(m)
		n, perr := strconv.Atoi(port)
		_, herr := netip.ParseAddr(host)
		if err != nil || perr != nil || n < 1 || n > 65535 || host != "" && host != "localhost" && herr != nil {
			bad("invalid metrics address %q", m)
		}
	}
	dp := c.Dataplane
	if dp.PinPath != "" && !strings.HasPrefix(dp.PinPath, "/") {
		bad("invalid pin path %q", dp.PinPath)
	}
	if dp.AttachMode != "auto" && dp.AttachMode != "native" && dp.AttachMode != "generic" {
		bad("invalid attach mode %q", dp.AttachMode)
	}
	if dp.TableSize < MinTableSize || dp.TableSize > MaxTableSize || !big.NewInt(int64(dp.TableSize)).ProbablyPrime(20) {
		bad("invalid table size %d", dp.TableSize)
	}

	if len(c.Services) > MaxServices {
		bad("%d services", len(c.Services))
	}
	names := map[string]bool{}
	keys := map[Key]bool{}
	total := 0
	for i, s := range c.Services {
		if !validName(s.Name) || names[s.Name] {
			bad("services[%d]: invalid or duplicate name %q", i, s.Name)
		}
		names[s.Name] = true
		nat := s.Forwarding == "nat" || s.Forwarding == "dnat"
		if !unicast(s.VIP) || s.VIP == c.Node.Address6 || s.Port == 0 || (s.Protocol != TCP && s.Protocol != UDP) || (s.Forwarding != DSRIPIP && s.Forwarding != DSRGUE && !nat) {
			bad("services[%d]: invalid %+v", i, s)
		}
		// A NAT service holds a session per connection, on the node
		// that rewrites to the backend's own port.
		if nat && (s.Flows != "" || s.TranslatePorts || len(s.History) > 0) {
			bad("services[%d]: forwarding %s with flows %q, translatePorts %v", i, s.Forwarding, s.Flows, s.TranslatePorts)
		}
		// Source ranges are of the VIP's family (NAT backends too,
		// below).
		for _, p := range s.SourceRanges {
			if p.Addr().Is4() != s.VIP.Is4() || p.Masked() != p {
				bad("services[%d]: source range %v for the VIP %v", i, p, s.VIP)
			}
		}
		if s.VIP == c.NAT.Address {
			bad("services[%d]: VIP %v is nat.address", i, s.VIP)
		}
		if keys[s.Key()] {
			bad("services[%d]: duplicate key %v", i, s.Key())
		}
		keys[s.Key()] = true
		if len(s.Backends) == 0 || uint32(len(s.Backends)) >= dp.TableSize {
			bad("services[%d]: %d backends for a table of %d", i, len(s.Backends), dp.TableSize)
		}
		total += len(s.Backends)
		addrs := map[netip.Addr]bool{}
		active := false
		for j, b := range s.Backends {
			if !unicast(b.Address) || nat && b.Address.Is4() != s.VIP.Is4() || b.Address == c.Node.Address6 || addrs[b.Address] || b.Port == 0 || b.Port != s.Port && !s.TranslatePorts && !nat || b.Weight > 65535 || b.Address == c.NAT.Address {
				bad("services[%d].backends[%d]: invalid or duplicate %+v", i, j, b)
			}
			addrs[b.Address] = true
			active = active || b.Weight > 0
			if err := checkInvariants(b.HealthCheck); err != nil {
				bad("services[%d].backends[%d]: %v", i, j, err)
			}
		}
		if !active {
			bad("services[%d]: no backend with weight > 0", i)
		}
	}
	if total > int(c.Dataplane.MaxBackends) {
		bad("%d backends", total)
	}
	n := c.NAT
	if a := n.Address; a.IsValid() && !unicast4(a) {
		bad("invalid nat address %v", a)
	}
	if n.Ports.Min < 1024 || n.Ports.Max < n.Ports.Min || int(n.Ports.Max)-int(n.Ports.Min)+1 < 1024 {
		bad("invalid nat ports %+v", n.Ports)
	}
	if n.Sessions < 1024 || n.Sessions > 1<<24 {
		bad("invalid nat sessions %d", n.Sessions)
	}
	for _, d := range []time.Duration{n.Timeouts.TCPSyn, n.Timeouts.TCPEstablished, n.Timeouts.TCPClosing, n.Timeouts.UDP, n.Timeouts.TCPTimeWait} {
		if d < time.Second || d > 24*time.Hour {
			bad("invalid nat timeouts %+v", n.Timeouts)
		}
	}
	if err := bgpInvariants(c); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// bgpInvariants re-checks the bgp section and the services' route
// attributes: the speaker relies on these.
func bgpInvariants(c *Config) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	routes := map[netip.Addr]RouteAttributes{}
	for i, s := range c.Services {
		a := s.BGP
		if c.BGP == nil && !a.IsZero() {
			bad("services[%d]: route attributes without a bgp section", i)
		}
		if first, ok := routes[s.VIP]; ok && !reflect.DeepEqual(first, a) {
			bad("services[%d]: attributes differ from another service's with the VIP %s", i, s.VIP)
		}
		routes[s.VIP] = a
		if len(a.Communities) > MaxCommunities || len(a.LargeCommunities) > MaxLargeCommunities {
			bad("services[%d]: too many communities", i)
		}
		var prev uint64
		for j, cs := range a.Communities {
			v, ok := wellKnownValue[cs]
			if !ok {
				var hi, lo uint64
				if n, err := fmt.Sscanf(cs, "%d:%d", &hi, &lo); n != 2 || err != nil || hi > 65535 || lo > 65535 || fmt.Sprintf("%d:%d", hi, lo) != cs {
					bad("services[%d]: community %q not in normal form", i, cs)
					continue
				}
				v = hi<<16 | lo
				if _, named := wellKnownName[v]; named {
					bad("services[%d]: community %q has a name", i, cs)
				}
			}
			if j > 0 && v <= prev {
				bad("services[%d]: communities not sorted and distinct: %q", i, a.Communities)
			}
			prev = v
		}
		var prevL [3]uint64
		for j, lc := range a.LargeCommunities {
			var v [3]uint64
			if n, err := fmt.Sscanf(lc, "%d:%d:%d", &v[0], &v[1], &v[2]); n != 3 || err != nil || v[0] > math.MaxUint32 || v[1] > math.MaxUint32 || v[2] > math.MaxUint32 ||
				fmt.Sprintf("%d:%d:%d", v[0], v[1], v[2]) != lc {
				bad("services[%d]: large community %q not in normal form", i, lc)
				continue
			}
			if j > 0 && slices.Compare(v[:], prevL[:]) <= 0 {
				bad("services[%d]: large communities not sorted and distinct: %q", i, a.LargeCommunities)
			}
			prevL = v
		}
	}
	b := c.BGP
	if b == nil {
		return errors.Join(errs...)
	}
	validASN := func(asn uint32) bool { return asn != 0 && asn != 23456 }
	validTimers := func(hold, ka time.Duration) bool {
		if hold == 0 {
			return ka == 0
		}
		return hold >= 3*time.Second && hold <= 65535*time.Second && hold%time.Second == 0 &&
			ka >= time.Second && ka < hold && ka%time.Second == 0
	}
	if !validASN(b.ASN) {
		bad("bgp: invalid asn %d", b.ASN)
	}
	if b.RouterID.IsValid() && (!b.RouterID.Is4() || b.RouterID.IsUnspecified()) || !b.RouterID.IsValid() && c.Node.Address.IsValid() {
		bad("bgp: invalid router ID %v (node address %v)", b.RouterID, c.Node.Address)
	}
	if !validTimers(b.HoldTime, b.Keepalive) || b.DrainTime < 0 || b.DrainTime > 10*time.Minute {
		bad("bgp: invalid timers %+v", b)
	}
	// Only a kubernetes section, whose BGPPeers add to the list, lets it
	// be empty.
	if b.ListenPort < 0 || b.ListenPort > 65535 || len(b.Peers) == 0 && c.Kubernetes == nil {
		bad("bgp: invalid listen port or no peers %+v", b)
	}
	addrs := map[netip.Addr]bool{}
	for i, p := range b.Peers {
		if !unicast(p.Address) || addrs[p.Address] || p.Address == c.Node.Address || p.Address == c.Node.Address6 {
			bad("bgp.peers[%d]: invalid or duplicate address %v", i, p.Address)
		}
		addrs[p.Address] = true
		if !validASN(p.ASN) || p.Port == 0 || !validTimers(p.HoldTime, p.Keepalive) {
			bad("bgp.peers[%d]: invalid %+v", i, p)
		}
		if len(p.Password) > 80 || strings.ContainsFunc(p.Password, func(r rune) bool { return r < ' ' || r > '~' }) {
			bad("bgp.peers[%d]: invalid password", i)
		}
		if p.Multihop > 0 && (p.ASN == b.ASN || p.BFD != nil) {
			bad("bgp.peers[%d]: multihop %d for iBGP or with BFD", i, p.Multihop)
		}
		if p.Passive && b.ListenPort == 0 {
			bad("bgp.peers[%d]: passive without a listener", i)
		}
		if f := p.BFD; f != nil && (f.MinRx < 10*time.Millisecond || f.MinRx > time.Minute || f.MinTx < 10*time.Millisecond || f.MinTx > time.Minute || f.Multiplier == 0) {
			bad("bgp.peers[%d]: invalid bfd %+v", i, *f)
		}
	}
	return errors.Join(errs...)
}

// The well-known communities, written out again for the invariants.
var (
	wellKnownValue = map[string]uint64{
		"no-export": 0xFFFFFF01, "no-advertise": 0xFFFFFF02, "no-export-subconfed": 0xFFFFFF03,
		"no-peer": 0xFFFFFF04, "blackhole": 0xFFFF029A, "graceful-shutdown": 0xFFFF0000,
	}
	wellKnownName = func() map[uint64]string {
		m := map[uint64]string{}
		for k, v := range wellKnownValue {
			m[v] = k
		}
		return m
	}()
)

// checkInvariants re-checks a resolved health check: the prober relies on
// these.
func checkInvariants(hc HealthCheck) error {
	switch hc.Type {
	case CheckNone:
		if hc != (HealthCheck{Type: CheckNone}) {
			return fmt.Errorf("type none with other fields set: %+v", hc)
		}
		return nil
	case CheckTCP:
		if hc.Path != "" || hc.StatusMin != 0 || hc.StatusMax != 0 {
			return fmt.Errorf("tcp check with http fields: %+v", hc)
		}
	case CheckHTTP:
		if !strings.HasPrefix(hc.Path, "/") || len(hc.Path) > 1024 || strings.ContainsFunc(hc.Path, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
			return fmt.Errorf("invalid http path %q", hc.Path)
		}
		if hc.StatusMin < 100 || hc.StatusMin > hc.StatusMax || hc.StatusMax > 599 {
			return fmt.Errorf("invalid status range %d-%d", hc.StatusMin, hc.StatusMax)
		}
	default:
		return fmt.Errorf("invalid check type %q", hc.Type)
	}
	if hc.Port == 0 || hc.Interval < 10*time.Millisecond || hc.Interval > time.Hour ||
		hc.Timeout <= 0 || hc.Timeout > hc.Interval || hc.Rise < 1 || hc.Rise > 100 || hc.Fall < 1 || hc.Fall > 100 {
		return fmt.Errorf("invalid check %+v", hc)
	}
	return nil
}

// unicast reports whether a can be a VIP, a backend or a peer.
func unicast(a netip.Addr) bool { return unicast4(a) || unicast6(a) }

// unicast6 re-derives the IPv6 rules: no IPv4-mapped, zoned,
// unspecified, loopback, multicast (ff00::/8) or link-local (fe80::/10)
// address.
func unicast6(a netip.Addr) bool {
	if !a.Is6() || a.Is4In6() || a.Zone() != "" {
		return false
	}
	b := a.As16()
	return a != netip.IPv6Unspecified() && a != netip.IPv6Loopback() && b[0] != 0xff && !(b[0] == 0xfe && b[1]&0xc0 == 0x80)
}

func unicast4(a netip.Addr) bool {
	if !a.Is4() {
		return false
	}
	b := a.As4()
	return b != [4]byte{} && b != [4]byte{255, 255, 255, 255} &&
		b[0] != 127 && b[0]&0xf0 != 0xe0
}
