// Package backendhost prepares a backend host for xlb's direct server
// return: the VIPs local on lo, ARP kept from announcing them, and the
// decapsulation program on the interface the tunnels arrive on.
package backendhost

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/xlbproject/xlb/internal/dataplane"
)

// Options describe one backend host set-up.
type Options struct {
	Interface  string
	VIPs       []netip.Addr
	PinPath    string // "" derives one from the namespace and interface
	AttachMode string
}

// DefaultPinPath is the bpffs directory for a backend set-up on iface:
// distinct per network namespace, so hosts simulated in namespaces never
// share state.
func DefaultPinPath(iface string) (string, error) {
	return dataplane.DefaultPinPath("backend-", iface)
}

// Result reports what Setup did.
type Result struct {
	PinPath   string
	Mode      string
	HostAddrs []netip.Addr
}

// sysctls keep the host from answering ARP for the VIPs on lo and from
// using them as the source of its own ARP requests: the VIP must stay
// reachable only through the load balancer.
var sysctls = map[string]string{
	"net/ipv4/conf/all/arp_ignore":   "1",
	"net/ipv4/conf/all/arp_announce": "2",
}

// Setup makes the host accept tunnelled traffic for opts.VIPs. It is
// idempotent: running it again with another VIP list replaces the list.
func Setup(opts Options) (Result, error) {
	if len(opts.VIPs) == 0 {
		return Result{}, errors.New("no VIP given: pass --vip ADDR (one or more)")
	}
	for _, v := range opts.VIPs {
		if !v.Is4() {
			return Result{}, fmt.Errorf("VIP %v: only IPv4 is supported", v)
		}
	}
	iface, err := net.InterfaceByName(opts.Interface)
	if err != nil {
		return Result{}, fmt.Errorf("interface %q: %w", opts.Interface, err)
	}
	hostAddrs, err := ipv4Addrs(iface)
	if err != nil {
		return Result{}, err
	}
	if len(hostAddrs) == 0 {
		return Result{}, fmt.Errorf("interface %s has no IPv4 address: tunnels are addressed to one", opts.Interface)
	}
	pin := opts.PinPath
	if pin == "" {
		if pin, err = DefaultPinPath(opts.Interface); err != nil {
			return Result{}, err
		}
	}
	for k, v := range sysctls {
		if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v+"\n"), 0o644); err != nil {
			return Result{}, fmt.Errorf("set %s=%s: %w", strings.ReplaceAll(k, "/", "."), v, err)
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
	mode, err := dataplane.SetupDecap(dataplane.DecapOptions{
		Interface: opts.Interface, HostAddrs: hostAddrs, VIPs: opts.VIPs, PinPath: pin, AttachMode: opts.AttachMode,
	})
	if err != nil {
		return Result{}, err
	}
	return Result{PinPath: pin, Mode: mode, HostAddrs: hostAddrs}, nil
}

// Cleanup removes the VIPs Setup added to lo (as recorded in the pinned
// state) and the decapsulation program. The ARP sysctls stay: other
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
	return vips, dataplane.Cleanup(pinPath)
}

func vipAddr(v netip.Addr) *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{IP: v.AsSlice(), Mask: net.CIDRMask(32, 32)}, Scope: int(netlink.SCOPE_HOST)}
}

func ipv4Addrs(iface *net.Interface) ([]netip.Addr, error) {
	addrs, err := iface.Addrs()
	if err != nil {
		return nil, fmt.Errorf("addresses of %s: %w", iface.Name, err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP.To4()); ok && n.IP.To4() != nil {
				out = append(out, ip)
			}
		}
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
	var k [4]byte
	var v uint8
	it := m.Iterate()
	for it.Next(&k, &v) {
		out = append(out, netip.AddrFrom4(k))
	}
	return out, it.Err()
}
