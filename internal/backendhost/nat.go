package backendhost

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/decap"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// NATEntry is one translation of the Kubernetes mode: a packet tunnelled
// to PodIP for VIP:Port reaches the pod as PodIP:TargetPort, and the
// pod's replies leave the node as VIP:Port.
type NATEntry struct {
	VIP        netip.Addr
	Port       uint16
	Proto      uint8 // wire.ProtoTCP or wire.ProtoUDP
	PodIP      netip.Addr
	TargetPort uint16
}

// String formats e the way ParseNATEntry reads it (IPv6 addresses in
// brackets).
func (e NATEntry) String() string {
	return fmt.Sprintf("%v/%s=%v", netip.AddrPortFrom(e.VIP, e.Port), protoName(e.Proto), netip.AddrPortFrom(e.PodIP, e.TargetPort))
}

func protoName(p uint8) string {
	switch p {
	case wire.ProtoTCP:
		return string(config.TCP)
	case wire.ProtoUDP:
		return string(config.UDP)
	}
	return strconv.Itoa(int(p))
}

// ParseNATEntry reads VIP:PORT/PROTO=PODIP:TARGETPORT, e.g.
// 10.99.0.1:80/tcp=10.244.1.2:8080 or, IPv6 in brackets,
// [fd00:99::1]:80/tcp=[fd00:244::2]:8080.
func ParseNATEntry(s string) (NATEntry, error) {
	const form = "want VIP:PORT/PROTO=PODIP:TARGETPORT, e.g. 10.99.0.1:80/tcp=10.244.1.2:8080 or [fd00:99::1]:80/tcp=[fd00:244::2]:8080"
	svc, pod, ok := strings.Cut(strings.TrimSpace(s), "=")
	if !ok {
		return NATEntry{}, fmt.Errorf("%q: no '=' between the service and the pod (%s)", s, form)
	}
	vipPort, proto, ok := strings.Cut(svc, "/")
	if !ok {
		return NATEntry{}, fmt.Errorf("%q: no protocol after the service port: add /tcp or /udp (%s)", s, form)
	}
	var e NATEntry
	switch p, err := config.ParseProtocol(strings.ToLower(proto)); {
	case err != nil:
		return NATEntry{}, fmt.Errorf("%q: protocol %q: want tcp or udp", s, proto)
	case p == config.UDP:
		e.Proto = wire.ProtoUDP
	default:
		e.Proto = wire.ProtoTCP
	}
	var err error
	if e.VIP, e.Port, err = parseAddrPort(vipPort, "VIP"); err != nil {
		return NATEntry{}, fmt.Errorf("%q: %w (%s)", s, err, form)
	}
	if e.PodIP, e.TargetPort, err = parseAddrPort(pod, "pod"); err != nil {
		return NATEntry{}, fmt.Errorf("%q: %w (%s)", s, err, form)
	}
	return e, nil
}

func parseAddrPort(s, what string) (netip.Addr, uint16, error) {
	i := strings.LastIndex(s, ":")
	if i < 0 || strings.HasPrefix(s, "[") && !strings.HasSuffix(s[:i], "]") {
		return netip.Addr{}, 0, fmt.Errorf("%s %q has no port", what, s)
	}
	host, port := s[:i], s[i+1:]
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	} else if strings.Contains(host, ":") {
		return netip.Addr{}, 0, fmt.Errorf("%s %q: write an IPv6 address in brackets, [ADDRESS]:PORT", what, s)
	}
	a, err := netip.ParseAddr(host)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, 0, fmt.Errorf("%s address %q is not an IPv4 or IPv6 address", what, host)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return netip.Addr{}, 0, fmt.Errorf("%s port %q: want 1..65535", what, port)
	}
	return a, uint16(p), nil
}

// validateNAT checks entries on their own: the addresses, ports and
// protocols, and that no (VIP, port, protocol, pod) has two target ports.
// Repeated identical entries are fine (an EndpointSlice may list a pod
// twice).
func validateNAT(entries []NATEntry) error {
	seen := map[NATEntry]uint16{}
	for _, e := range entries {
		if err := e.valid(); err != nil {
			return fmt.Errorf("translation %v: %w", e, err)
		}
		k := e
		k.TargetPort = 0
		if tp, ok := seen[k]; ok && tp != e.TargetPort {
			return fmt.Errorf("translation %v: the same service and pod already map to target port %d", e, tp)
		}
		seen[k] = e.TargetPort
	}
	return nil
}

func (e NATEntry) valid() error {
	switch {
	case !e.VIP.IsValid() || e.VIP.IsUnspecified():
		return fmt.Errorf("VIP %v: want an IPv4 or IPv6 address", e.VIP)
	case !e.PodIP.IsValid() || e.PodIP.IsUnspecified() || e.PodIP.Is4In6() || e.PodIP.IsMulticast() || e.PodIP.Is6() && e.PodIP.IsLinkLocalUnicast():
		return fmt.Errorf("pod IP %v: want the pod's IPv4 or IPv6 address (not unspecified, IPv4-mapped, multicast or IPv6 link-local)", e.PodIP)
	case e.VIP.Is4() != e.PodIP.Is4():
		return fmt.Errorf("VIP %v and pod IP %v are of different families: a pod is translated for a VIP of its own family (give the pod's address of the VIP's family)", e.VIP, e.PodIP)
	case e.VIP == e.PodIP:
		return errors.New("the VIP and the pod IP are the same")
	case e.Port == 0 || e.TargetPort == 0:
		return errors.New("port 0: want 1..65535")
	case e.Proto != wire.ProtoTCP && e.Proto != wire.ProtoUDP:
		return fmt.Errorf("protocol %d: want tcp (6) or udp (17)", e.Proto)
	}
	if e.VIP.Is6() {
		return decap.CheckVIP(e.VIP)
	}
	return nil
}

// NATOptions tune SetNAT.
type NATOptions struct {
	// ReplyFallback lets a reply whose flow record is gone (evicted from
	// the LRU map) still leave as VIP:port when exactly one VIP:port maps
	// to its pod port. It also rewrites every other packet from that pod
	// port, such as replies to health checks or to clients that reach
	// the pod directly: enable it only where the pod port is reached
	// through the VIP alone.
	ReplyFallback bool
}

// NATChange counts what SetNAT changed.
type NATChange struct {
	Added, Updated, Removed int
	// NoNetns counts the local pods whose network namespace the node
	// does not know by an ID (see PodNetnsID): daisy chaining cannot
	// look into their sockets, so their packets are delivered as
	// without a hint.
	NoNetns int
}

// PodNetnsID returns the ID under which the current network namespace
// knows the namespace of local pod `pod`: the link-netnsid of the veth
// its host route leads to, as a CNI with host routing sets it up. The
// daisy chaining of the Kubernetes mode looks for the pod's sockets
// there. ok is false for a pod that is not behind a veth of this node
// (no such route, a route via a gateway) or whose peer namespace has no
// ID. A variable, so that tests can stand in for it.
var PodNetnsID = func(pod netip.Addr) (id uint32, ok bool) {
	routes, err := netlink.RouteGet(pod.AsSlice())
	if err != nil || len(routes) == 0 || routes[0].Gw != nil {
		return 0, false
	}
	l, err := netlink.LinkByIndex(routes[0].LinkIndex)
	if err != nil || l.Type() != "veth" || l.Attrs().NetNsID < 0 {
		return 0, false
	}
	return uint32(l.Attrs().NetNsID), true
}

// SetNAT makes the translations of the backend set-up pinned at pinPath
// exactly entries, changing only what differs: a packet of an unchanged
// translation never finds it missing. New translations are written
// before their pods are marked local; pods without translations are
// unmarked before their translations go. Flow records stay, so that
// replies of a connection still open to a pod that left a service are
// translated until they age out.
//
// Setup with translations must have run first: it attaches the programs
// that use them.
func SetNAT(pinPath string, entries []NATEntry, opts NATOptions) (NATChange, error) {
	if err := validateNAT(entries); err != nil {
		return NATChange{}, err
	}
	if len(entries) > 0 {
		// Translated flows whose replies nobody translates back would
		// fail in a way that is hard to see from the client.
		if _, err := os.Stat(filepath.Join(pinPath, replyLinkPin)); err != nil {
			return NATChange{}, fmt.Errorf("no reply program under %s (%w): set up with translations first (Setup, or xlb backend --nat)", pinPath, err)
		}
	}
	m, err := openNATMaps(pinPath)
	if err != nil {
		return NATChange{}, err
	}
	defer m.close()
	return m.apply(entries, opts)
}

// NAT map names, as in bpf/xlb_nat.h.
const (
	natPodsMap  = "nat_pods"
	natNetnsMap = "nat_pod_netns"
	natSvcsMap  = "nat_svcs"
	natRevMap   = "nat_rev_ports"
	natStatsMap = "nat_stats"
)

type natMaps struct {
	pods, svcs, rev *ebpf.Map
	// netns is nil in a set-up pinned before daisy chaining for pods.
	netns *ebpf.Map
}

func openNATMaps(pinPath string) (*natMaps, error) {
	var m natMaps
	for _, x := range []struct {
		name string
		dst  **ebpf.Map
	}{{natPodsMap, &m.pods}, {natSvcsMap, &m.svcs}, {natRevMap, &m.rev}} {
		mp, err := ebpf.LoadPinnedMap(filepath.Join(pinPath, x.name), nil)
		if err != nil {
			m.close()
			return nil, fmt.Errorf("open %s under %s: %w (run `xlb backend --interface IF --nat ...` first)", x.name, pinPath, err)
		}
		*x.dst = mp
	}
	if mp, err := ebpf.LoadPinnedMap(filepath.Join(pinPath, natNetnsMap), nil); err == nil {
		m.netns = mp
	}
	return &m, nil
}

func (m *natMaps) close() {
	for _, mp := range []*ebpf.Map{m.pods, m.svcs, m.rev, m.netns} {
		if mp != nil {
			mp.Close()
		}
	}
}

// apply writes the difference between the maps and entries (validated).
func (m *natMaps) apply(entries []NATEntry, opts NATOptions) (NATChange, error) {
	svcs := map[wire.NATSvcKey]uint16{}
	pods := map[wire.Addr]bool{}
	rev := map[wire.NATRevKey]wire.NATVIP{}
	ambiguous := map[wire.NATRevKey]bool{}
	for _, e := range entries {
		k := wire.NATSvcKey{Vip: wire.AddrOf(e.VIP), Pod: wire.AddrOf(e.PodIP), Port: wire.Port(e.Port), Proto: e.Proto}
		svcs[k] = wire.Port(e.TargetPort)
		pods[k.Pod] = true
		rk := wire.NATRevKey{Pod: k.Pod, PodPort: wire.Port(e.TargetPort), Proto: e.Proto}
		v := wire.NATVIP{Vip: k.Vip, Port: k.Port}
		if old, ok := rev[rk]; ok && old != v {
			ambiguous[rk] = true
		}
		rev[rk] = v
	}
	for rk := range ambiguous {
		delete(rev, rk)
	}
	if !opts.ReplyFallback {
		clear(rev)
	}
	if n := int(m.svcs.MaxEntries()); len(svcs) > n {
		return NATChange{}, fmt.Errorf("%d translations: the data plane holds at most %d", len(svcs), n)
	}
	if n := int(m.pods.MaxEntries()); len(pods) > n {
		return NATChange{}, fmt.Errorf("translations to %d pods: the data plane holds at most %d", len(pods), n)
	}

	curSvcs, err := readMap[wire.NATSvcKey, uint16](m.svcs)
	if err != nil {
		return NATChange{}, fmt.Errorf("read %s: %w", natSvcsMap, err)
	}
	curPods, err := readMap[wire.Addr, uint8](m.pods)
	if err != nil {
		return NATChange{}, fmt.Errorf("read %s: %w", natPodsMap, err)
	}
	curRev, err := readMap[wire.NATRevKey, wire.NATVIP](m.rev)
	if err != nil {
		return NATChange{}, fmt.Errorf("read %s: %w", natRevMap, err)
	}

	var ch NATChange
	for k, v := range svcs {
		old, ok := curSvcs[k]
		if ok && old == v {
			continue
		}
		if err := m.svcs.Put(k, v); err != nil {
			return ch, fmt.Errorf("write translation: %w", err)
		}
		if ok {
			ch.Updated++
		} else {
			ch.Added++
		}
	}
	if err := syncMap(m.rev, curRev, rev); err != nil {
		return ch, fmt.Errorf("write reply fallback: %w", err)
	}
	podSet := map[wire.Addr]uint8{}
	for p := range pods {
		podSet[p] = 1
	}
	// A pod's network namespace ID is there before the pod is local.
	if m.netns != nil {
		netns := map[wire.Addr]uint32{}
		for p := range pods {
			if id, ok := PodNetnsID(p.IP()); ok {
				netns[p] = id
			} else {
				ch.NoNetns++
			}
		}
		curNetns, err := readMap[wire.Addr, uint32](m.netns)
		if err != nil {
			return ch, fmt.Errorf("read %s: %w", natNetnsMap, err)
		}
		if err := syncMap(m.netns, curNetns, netns); err != nil {
			return ch, fmt.Errorf("write pods' network namespaces: %w", err)
		}
	}
	if err := syncMap(m.pods, curPods, podSet); err != nil {
		return ch, fmt.Errorf("write local pods: %w", err)
	}
	for k := range curSvcs {
		if _, ok := svcs[k]; ok {
			continue
		}
		if err := m.svcs.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return ch, fmt.Errorf("delete translation: %w", err)
		}
		ch.Removed++
	}
	return ch, nil
}

// PinnedNAT returns the translations of the set-up pinned at pinPath, in
// no particular order: what an earlier run left in place.
func PinnedNAT(pinPath string) ([]NATEntry, error) {
	m, err := openNATMaps(pinPath)
	if err != nil {
		return nil, err
	}
	defer m.close()
	svcs, err := readMap[wire.NATSvcKey, uint16](m.svcs)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", natSvcsMap, err)
	}
	out := make([]NATEntry, 0, len(svcs))
	for k, tp := range svcs {
		out = append(out, NATEntry{VIP: k.Vip.IP(), Port: wire.PortFrom(k.Port), Proto: k.Proto,
			PodIP: k.Pod.IP(), TargetPort: wire.PortFrom(tp)})
	}
	return out, nil
}

// readMap returns the content of a (small) hash map.
func readMap[K comparable, V any](m *ebpf.Map) (map[K]V, error) {
	out := map[K]V{}
	var k K
	var v V
	it := m.Iterate()
	for it.Next(&k, &v) {
		out[k] = v
	}
	return out, it.Err()
}

// syncMap makes m (whose content is cur) hold want: writes first, then
// deletes.
func syncMap[K, V comparable](m *ebpf.Map, cur, want map[K]V) error {
	for k, v := range want {
		if old, ok := cur[k]; ok && old == v {
			continue
		}
		if err := m.Put(k, v); err != nil {
			return err
		}
	}
	for k := range cur {
		if _, ok := want[k]; ok {
			continue
		}
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	return nil
}

// NATStats reads the translation counters of the set-up pinned at
// pinPath, summed over CPUs.
func NATStats(pinPath string) (map[string]bpfobj.Counters, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinPath, natStatsMap), nil)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("no translation counters under %s: run `xlb backend --interface IF ...` first", pinPath)
		}
		return nil, fmt.Errorf("open translation counters under %s: %w", pinPath, err)
	}
	defer m.Close()
	return natStats(m)
}

func natStats(m *ebpf.Map) (map[string]bpfobj.Counters, error) {
	out := map[string]bpfobj.Counters{}
	for i, name := range wire.NATStatNames {
		var per []wire.Counter
		if err := m.Lookup(uint32(i), &per); err != nil {
			return nil, fmt.Errorf("read counter %s: %w", name, err)
		}
		var c bpfobj.Counters
		for _, p := range per {
			c.Packets += p.Packets
			c.Bytes += p.Bytes
		}
		out[name] = c
	}
	return out, nil
}
