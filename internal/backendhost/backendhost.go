// Package backendhost prepares a backend host for xlb's direct server
// return: the VIPs local on lo, ARP kept from announcing them, and the
// decapsulation program on the interface the tunnels arrive on. In
// Kubernetes mode the host is a node whose pods know nothing of the VIP:
// the same program translates VIP:port to a local pod's address and
// target port, and a TC program on the same interface translates the
// pods' replies back (nat.go, reply.go).
package backendhost

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/decap"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// Options describe one backend host set-up.
type Options struct {
	Interface string
	VIPs      []netip.Addr // served by the host itself, put on lo
	NAT       []NATEntry   // served by local pods (Kubernetes mode)
	// NATOptions apply to NAT; see SetNAT.
	NATOptions NATOptions
	PinPath    string // "" derives one from the namespace and interface
	AttachMode string
	// ChainWindow is how long after a load balancer's table slot moved
	// to this host a TCP packet for a VIP that holds no connection here
	// goes on to the slot's previous owner (daisy chaining); 0: off.
	ChainWindow time.Duration
	// ChainFrom are the xlb nodes, and ChainTo the backends that may be
	// a slot's previous owner: a packet is chained only from one of
	// either to one of ChainTo. Without both, nothing is chained
	// (decap.Chain).
	ChainFrom, ChainTo []netip.Prefix
}

// Chain is the daisy-chaining configuration o asks for.
func (o Options) Chain() decap.Chain {
	return decap.Chain{Window: o.ChainWindow, From: o.ChainFrom, To: o.ChainTo}
}

// DefaultPinPath is the bpffs directory for a backend set-up on iface:
// distinct per network namespace, so hosts simulated in namespaces never
// share state.
func DefaultPinPath(iface string) (string, error) {
	return bpfobj.DefaultPinPath("backend-", iface)
}

// Result reports what Setup did.
type Result struct {
	PinPath   string
	Mode      string
	HostAddrs []netip.Addr
	NAT       NATChange
	// ForwardingOn: Setup turned on forwarding on the interface (IPv4,
	// and IPv6 when the interface has an IPv6 address), which daisy
	// chaining needs.
	ForwardingOn bool
	// Chaining: packets can be chained (a window and both sets).
	Chaining bool
}

// sysctls keep the host from answering ARP for the VIPs on lo and from
// using them as the source of its own ARP requests: the VIP must stay
// reachable only through the load balancer.
var sysctls = map[string]string{
	"net/ipv4/conf/all/arp_ignore":   "1",
	"net/ipv4/conf/all/arp_announce": "2",
}

// Setup makes the host accept tunnelled traffic for opts.VIPs and
// opts.NAT. It is idempotent: running it again replaces both lists (an
// empty NAT list detaches the reply program).
func Setup(opts Options) (Result, error) {
	if len(opts.VIPs) == 0 && len(opts.NAT) == 0 {
		return Result{}, errors.New("no VIP and no translation given: pass --vip ADDR or --nat VIP:PORT/PROTO=PODIP:TARGETPORT (one or more)")
	}
	for _, v := range opts.VIPs {
		if err := decap.CheckVIP(v); err != nil {
			return Result{}, err
		}
	}
	if err := validateNAT(opts.NAT); err != nil {
		return Result{}, err
	}
	if err := decap.CheckChain(opts.Chain()); err != nil {
		return Result{}, err
	}
	iface, err := net.InterfaceByName(opts.Interface)
	if err != nil {
		return Result{}, fmt.Errorf("interface %q: %w", opts.Interface, err)
	}
	hostAddrs, err := hostAddrs(iface)
	if err != nil {
		return Result{}, err
	}
	if len(hostAddrs) == 0 {
		return Result{}, fmt.Errorf("interface %s has no IPv4 address and no global IPv6 address: tunnels are addressed to one; add one, or give the interface the load balancers send to", opts.Interface)
	}
	for _, e := range opts.NAT {
		// The program takes a tunnel to a host address for the VIP-on-lo
		// mode, so a pod cannot have one.
		if slices.Contains(hostAddrs, e.PodIP) {
			return Result{}, fmt.Errorf("translation %v: the pod IP is an address of %s", e, opts.Interface)
		}
	}
	if len(opts.NAT) > 0 {
		if err := requireForwarding(slices.ContainsFunc(opts.NAT, func(e NATEntry) bool { return e.PodIP.Is6() })); err != nil {
			return Result{}, err
		}
	}
	pin := opts.PinPath
	if pin == "" {
		if pin, err = DefaultPinPath(opts.Interface); err != nil {
			return Result{}, err
		}
	}
	// Before the host is touched: a program pinned where it would not
	// outlive this command would leave VIPs on lo that nothing serves.
	if err := bpfobj.EnsurePinFS(pin); err != nil {
		return Result{}, err
	}
	// Nothing on lo to keep quiet about otherwise. IPv6 needs nothing:
	// the host answers neighbour solicitations only for addresses of the
	// interface they arrive on.
	if slices.ContainsFunc(opts.VIPs, netip.Addr.Is4) {
		if err := setSysctls(); err != nil {
			return Result{}, err
		}
	}
	// Chained packets are routed out of the interface they came in on,
	// which needs forwarding there; only when chaining can happen. (The
	// Kubernetes mode routes to its pods, so the node forwards anyway.)
	forwardingOn := false
	if len(opts.VIPs) > 0 && opts.Chain().On() {
		if forwardingOn, err = enableForwarding(opts.Interface); err != nil {
			return Result{}, err
		}
		// An IPv6 backend chains over IPv6 (its tunnels come over IPv6).
		if slices.ContainsFunc(hostAddrs, netip.Addr.Is6) {
			on6, err := enableForwarding6(opts.Interface)
			if err != nil {
				return Result{}, err
			}
			forwardingOn = forwardingOn || on6
		}
	}
	// The previous VIP set (if any) tells which lo addresses to retire.
	old, _ := pinnedVIPs(pin)
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return Result{}, fmt.Errorf("loopback: %w", err)
	}
	want := map[netip.Addr]bool{}
	for _, v := range opts.VIPs {
		want[v] = true
		if err := netlink.AddrReplace(lo, vipAddr(v)); err != nil {
			return Result{}, fmt.Errorf("add VIP %v to lo: %w", v, err)
		}
	}
	for _, v := range old {
		if !want[v] {
			_ = netlink.AddrDel(lo, vipAddr(v))
		}
	}
	mode, err := decap.Setup(decap.Options{
		Interface: opts.Interface, HostAddrs: hostAddrs, VIPs: opts.VIPs, PinPath: pin, AttachMode: opts.AttachMode,
		Chain: opts.Chain(),
	})
	if err != nil {
		return Result{}, err
	}
	res := Result{PinPath: pin, Mode: mode, HostAddrs: hostAddrs, ForwardingOn: forwardingOn, Chaining: opts.Chain().On()}
	// The reply program is attached before the first translation and
	// detached after the last: a translated flow always has it.
	if len(opts.NAT) > 0 {
		if err := attachReply(pin, iface); err != nil {
			return res, err
		}
	}
	if res.NAT, err = SetNAT(pin, opts.NAT, opts.NATOptions); err != nil {
		return res, err
	}
	if len(opts.NAT) == 0 {
		return res, detachReply(pin)
	}
	return res, nil
}

// requireForwarding refuses the Kubernetes mode on a host that does not
// route: translated packets could never reach the pods. IPv6 pods need
// IPv6 forwarding too.
func requireForwarding(ipv6 bool) error {
	const p = "/proc/sys/net/ipv4/ip_forward"
	b, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("read %s: %w", p, err)
	}
	if strings.TrimSpace(string(b)) != "1" {
		return errors.New("IPv4 forwarding is off (net.ipv4.ip_forward=0): the node could not route translated packets to its pods; enable it, as a CNI with host routing does")
	}
	if !ipv6 {
		return nil
	}
	const p6 = "/proc/sys/net/ipv6/conf/all/forwarding"
	if b, err = os.ReadFile(p6); err != nil {
		return fmt.Errorf("read %s: %w", p6, err)
	}
	if strings.TrimSpace(string(b)) != "1" {
		return errors.New("IPv6 forwarding is off (net.ipv6.conf.all.forwarding=0) and a translation is for an IPv6 pod: the node could not route translated packets to it; enable it, as a dual-stack CNI with host routing does")
	}
	return nil
}

// Cleanup removes the VIPs Setup added to lo (as recorded in the pinned
// state), both programs and their maps. The ARP sysctls stay: other
// software may rely on them. Safe to run twice.
func Cleanup(pinPath string) ([]netip.Addr, error) {
	vips, err := pinnedVIPs(pinPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if lo, lerr := netlink.LinkByName("lo"); lerr == nil {
		for _, v := range vips {
			_ = netlink.AddrDel(lo, vipAddr(v))
		}
	}
	if _, err := os.Stat(pinPath); errors.Is(err, os.ErrNotExist) {
		return vips, nil
	}
	return vips, bpfobj.Cleanup(pinPath)
}

// enableForwarding turns on IPv4 forwarding on the interface the tunnels
// arrive on, and reports whether it was off: the program chains a packet
// with bpf_fib_lookup, which answers "forwarding disabled" on an ingress
// interface that does not forward. Only that interface changes; it then
// also routes what arrives on it for other hosts, as a router would.
func enableForwarding(ifname string) (bool, error) {
	p := filepath.Join("/proc/sys/net/ipv4/conf", ifname, "forwarding")
	cur, err := os.ReadFile(p)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", p, err)
	}
	if strings.TrimSpace(string(cur)) == "1" {
		return false, nil
	}
	if err := os.WriteFile(p, []byte("1\n"), 0o644); err != nil {
		return false, fmt.Errorf("set net.ipv4.conf.%s.forwarding=1 for daisy chaining: %w (or turn chaining off: --chain-window 0, or no --chain-from/--chain-to)", ifname, err)
	}
	return true, nil
}

// enableForwarding6 is enableForwarding for IPv6
// (net.ipv6.conf.IF.forwarding, which bpf_fib_lookup checks on the
// ingress interface too). An interface that forwards IPv6 stops taking
// router advertisements unless accept_ra is 2: one that took them (1)
// is given 2, so that the host keeps its routes.
func enableForwarding6(ifname string) (bool, error) {
	dir := filepath.Join("/proc/sys/net/ipv6/conf", ifname)
	cur, err := os.ReadFile(filepath.Join(dir, "forwarding"))
	if err != nil {
		return false, fmt.Errorf("read %s: %w", filepath.Join(dir, "forwarding"), err)
	}
	if strings.TrimSpace(string(cur)) == "1" {
		return false, nil
	}
	if ra, err := os.ReadFile(filepath.Join(dir, "accept_ra")); err == nil && strings.TrimSpace(string(ra)) == "1" {
		if err := os.WriteFile(filepath.Join(dir, "accept_ra"), []byte("2\n"), 0o644); err != nil {
			return false, fmt.Errorf("set net.ipv6.conf.%s.accept_ra=2 (to keep router advertisements once it forwards) for daisy chaining: %w", ifname, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "forwarding"), []byte("1\n"), 0o644); err != nil {
		return false, fmt.Errorf("set net.ipv6.conf.%s.forwarding=1 for daisy chaining: %w (or turn chaining off: --chain-window 0, or no --chain-from/--chain-to)", ifname, err)
	}
	return true, nil
}

func setSysctls() error {
	for k, v := range sysctls {
		if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v+"\n"), 0o644); err != nil {
			return fmt.Errorf("set %s=%s: %w", strings.ReplaceAll(k, "/", "."), v, err)
		}
	}
	return nil
}

// vipAddr is VIP v as an address of lo: a /32 or /128 of host scope.
// IPv6 has no duplicate address detection on lo to wait for.
func vipAddr(v netip.Addr) *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{IP: v.AsSlice(), Mask: net.CIDRMask(v.BitLen(), v.BitLen())}, Scope: int(netlink.SCOPE_HOST)}
}

// hostAddrs are the addresses of iface a tunnel may be sent to: its IPv4
// addresses and its IPv6 ones but the link-local ones, which no load
// balancer's backend has.
func hostAddrs(iface *net.Interface) ([]netip.Addr, error) {
	addrs, err := iface.Addrs()
	if err != nil {
		return nil, fmt.Errorf("addresses of %s: %w", iface.Name, err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if ip.Is6() && (ip.IsLinkLocalUnicast() || ip.IsMulticast()) {
			continue
		}
		out = append(out, ip)
	}
	return out, nil
}

// pinnedVIPs reads the VIP set of an existing set-up.
func pinnedVIPs(pinPath string) ([]netip.Addr, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinPath, "decap_vips"), nil)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	var out []netip.Addr
	var k wire.Addr
	var v uint8
	it := m.Iterate()
	for it.Next(&k, &v) {
		out = append(out, k.IP())
	}
	return out, it.Err()
}
