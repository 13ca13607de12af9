package dataplane

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
)

// DecapOptions configure the backend-side decapsulation program.
type DecapOptions struct {
	Interface  string
	HostAddrs  []netip.Addr // outer destinations that are this host
	VIPs       []netip.Addr // inner destinations accepted (configured locally)
	PinPath    string
	AttachMode string
}

// DecapStatNames name the decapsulation program's counters, in the order
// of enum decap_stat in bpf/xlb_backend.c.
var DecapStatNames = []string{"decap_ipip", "decap_gue", "pass_not_ours", "drop_bad_inner", "drop_bad_gue"}

// SetupDecap loads (or adopts) the decapsulation program on a backend
// host, attaches it to opts.Interface through a pinned link, and makes
// the host-address and VIP sets exactly the given ones. It returns the
// attach mode. The program keeps running after the caller exits.
func SetupDecap(opts DecapOptions) (string, error) {
	iface, err := net.InterfaceByName(opts.Interface)
	if err != nil {
		return "", fmt.Errorf("interface %q: %w", opts.Interface, err)
	}
	if opts.PinPath == "" {
		return "", errors.New("no pin path given")
	}
	if err := ensureBPFFS(opts.PinPath); err != nil {
		return "", err
	}
	if err := os.MkdirAll(opts.PinPath, 0o700); err != nil {
		return "", fmt.Errorf("create pin directory: %w", err)
	}
	spec, err := loadBackend()
	if err != nil {
		return "", fmt.Errorf("parse embedded backend object: %w", err)
	}
	pinMaps(spec)
	var objs backendObjects
	if err := spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: opts.PinPath}}); err != nil {
		return "", fmt.Errorf("load backend program: %w", err)
	}
	defer objs.Close()
	if err := setAddrs(objs.HostAddrs, opts.HostAddrs); err != nil {
		return "", fmt.Errorf("host addresses: %w", err)
	}
	if err := setAddrs(objs.DecapVips, opts.VIPs); err != nil {
		return "", fmt.Errorf("VIPs: %w", err)
	}
	l, mode, err := attach(objs.XlbDecap, iface, opts.AttachMode, filepath.Join(opts.PinPath, linkPin))
	if err != nil {
		return "", err
	}
	return mode, l.Close()
}

// setAddrs makes the set map m hold exactly addrs.
func setAddrs(m *ebpf.Map, addrs []netip.Addr) error {
	want := map[uint32]bool{}
	for _, a := range addrs {
		if !a.Is4() {
			return fmt.Errorf("%v is not an IPv4 address", a)
		}
		want[wire32(a)] = true
	}
	var stale []uint32
	var k uint32
	var v uint8
	it := m.Iterate()
	for it.Next(&k, &v) {
		if !want[k] {
			stale = append(stale, k)
		}
	}
	for k := range want {
		if err := m.Put(k, uint8(1)); err != nil {
			return err
		}
	}
	for _, k := range stale {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	return nil
}

// DecapStats reads the counters of the decapsulation program pinned under
// pinPath.
func DecapStats(pinPath string) (map[string]Counters, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinPath, "decap_stats"), nil)
	if err != nil {
		return nil, fmt.Errorf("open decap counters under %s: %w (is `xlb backend` set up there?)", pinPath, err)
	}
	defer m.Close()
	out := map[string]Counters{}
	for i, name := range DecapStatNames {
		c, err := sumPerCPU(m, uint32(i))
		if err != nil {
			return nil, err
		}
		out[name] = c
	}
	return out, nil
}
