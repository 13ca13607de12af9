// Package decap is a backend host's data plane: it loads the XDP program
// xlb_decap (bpf/xlb_backend.c), which strips the tunnel an xlb node added
// and daisy-chains packets no local socket takes, pins it with its maps,
// adopts what an earlier set-up pinned (adopt.go), and programs its maps:
// host addresses, VIPs and the chaining sets. The same object holds the
// Kubernetes mode's translation (TC xlb_nat_reply and its maps), which
// internal/backendhost programs.
package decap

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// linkPin is the file name of the pinned XDP link inside a pin directory.
const linkPin = "link"

// Options configure the decapsulation program.
type Options struct {
	Interface  string
	HostAddrs  []netip.Addr // outer destinations that are this host, IPv4 or IPv6
	VIPs       []netip.Addr // inner destinations accepted (configured locally), IPv4 or IPv6 (CheckVIP)
	PinPath    string
	AttachMode string
	// Chain configures daisy chaining.
	Chain Chain
}

// Chain configures daisy chaining on a backend host: a TCP packet that
// carries a load balancer's hint and that no local socket takes goes on
// to the table slot's previous owner, but only when the packet comes
// from From or To and the previous owner is in To. Anything else that
// would have been chained is dropped and counted
// (chain_drop_untrusted_source, chain_drop_unknown_owner).
type Chain struct {
	// Window is how long after a table slot changed owner its hint is
	// followed; 0 turns chaining off. Whole seconds.
	Window time.Duration
	// From are the xlb nodes whose packets may be chained.
	From []netip.Prefix
	// To are the backends that may be a slot's previous owner. They
	// are sources too: a backend that chains a packet sends it on from
	// its own address, and the next hop may chain it once more.
	To []netip.Prefix
}

// On reports whether a packet can be chained at all: a window, and both
// sets. Without the sets a hint is followed nowhere; it still tells
// which packets come from a load balancer with an outdated table.
func (c Chain) On() bool { return c.Window > 0 && len(c.From) > 0 && len(c.To) > 0 }

// Limits of the chaining sets (XLB_CHAIN_MAX_NODES, XLB_CHAIN_MAX_OWNERS
// in bpf/xlb_consts.h).
const (
	MaxChainFrom = 16384
	MaxChainTo   = 65536
)

// CheckChain says why c cannot be a daisy-chaining configuration, or nil.
func CheckChain(c Chain) error {
	if err := CheckChainWindow(c.Window); err != nil {
		return err
	}
	for _, s := range []struct {
		what string
		set  []netip.Prefix
		max  int
	}{{"chain-from", c.From, MaxChainFrom}, {"chain-to", c.To, MaxChainTo}} {
		for _, p := range s.set {
			if !p.IsValid() || p.Addr().Is4In6() || p.Addr().Zone() != "" {
				return fmt.Errorf("%s: %v is not an IPv4 or IPv6 address or prefix", s.what, p)
			}
		}
		if len(s.set) > s.max {
			return fmt.Errorf("%s: %d addresses or prefixes, at most %d fit: give prefixes that cover several", s.what, len(s.set), s.max)
		}
	}
	return nil
}

// MaxChainWindow is the longest daisy-chaining window the program takes.
const MaxChainWindow = time.Duration(math.MaxUint32) * time.Second

// Setup loads (or adopts) the decapsulation program on a backend host, attaches it to opts.Interface through a pinned link, and makes
// the host-address and VIP sets exactly the given ones. It returns the
// attach mode. The program keeps running after the caller exits.
func Setup(opts Options) (string, error) {
	iface, err := net.InterfaceByName(opts.Interface)
	if err != nil {
		return "", fmt.Errorf("interface %q: %w", opts.Interface, err)
	}
	if opts.PinPath == "" {
		return "", errors.New("no pin path given")
	}
	if err := bpfobj.EnsurePinFS(opts.PinPath); err != nil {
		return "", err
	}
	if err := os.MkdirAll(opts.PinPath, 0o700); err != nil {
		return "", fmt.Errorf("create pin directory: %w", err)
	}
	spec, err := loadBackend()
	if err != nil {
		return "", fmt.Errorf("parse embedded backend object: %w", err)
	}
	bpfobj.PinMaps(spec)
	copies, entries, err := planBackendAdoption(spec, opts.PinPath)
	if err != nil {
		return "", err
	}
	var objs backendObjects
	if err := spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: opts.PinPath}}); err != nil {
		return "", fmt.Errorf("load backend program: %w", err)
	}
	defer objs.Close()
	if err := restoreCounters(&objs, copies); err != nil {
		return "", err
	}
	if err := restoreEntries(&objs, entries); err != nil {
		return "", err
	}
	if err := configureDecap(&objs.backendMaps, opts.HostAddrs, opts.VIPs, opts.Chain); err != nil {
		return "", err
	}
	l, mode, err := bpfobj.AttachXDP(objs.XlbDecap, iface, opts.AttachMode, filepath.Join(opts.PinPath, linkPin))
	if err != nil {
		return "", err
	}
	return mode, l.Close()
}

// Configure makes the maps of coll, a collection loaded from Spec, hold
// the given host addresses, VIPs and daisy-chaining configuration, as
// Setup does for the program it pins. For tools
// that load the program themselves, such as benchmarks that wrap it for
// BPF_PROG_TEST_RUN.
func Configure(coll *ebpf.Collection, hostAddrs, vips []netip.Addr, c Chain) error {
	maps := backendMaps{HostAddrs: coll.Maps["host_addrs"], DecapVips: coll.Maps["decap_vips"],
		ChainCfg: coll.Maps["chain_cfg"], ChainFrom: coll.Maps["chain_from"], ChainTo: coll.Maps["chain_to"]}
	return configureDecap(&maps, hostAddrs, vips, c)
}

// configureDecap writes the host addresses, the VIPs and the chaining
// configuration into maps.
func configureDecap(maps *backendMaps, hostAddrs, vips []netip.Addr, c Chain) error {
	for _, m := range []*ebpf.Map{maps.HostAddrs, maps.DecapVips, maps.ChainCfg, maps.ChainFrom, maps.ChainTo} {
		if m == nil {
			return errors.New("configure the backend program: a map is missing")
		}
	}
	for _, v := range vips {
		if err := CheckVIP(v); err != nil {
			return err
		}
	}
	if err := setAddrs(maps.HostAddrs, hostAddrs); err != nil {
		return fmt.Errorf("host addresses: %w", err)
	}
	if err := setAddrs(maps.DecapVips, vips); err != nil {
		return fmt.Errorf("VIPs: %w", err)
	}
	return setChain(maps, c)
}

// setAddrs makes the set map m hold exactly addrs, of either family.
func setAddrs(m *ebpf.Map, addrs []netip.Addr) error {
	want := map[wire.Addr]bool{}
	for _, a := range addrs {
		switch {
		case !a.IsValid():
			return errors.New("an empty address")
		case a.Is4In6():
			// The maps hold IPv4 addresses in this form: it would
			// stand for the IPv4 address, which no IPv6 packet has.
			return fmt.Errorf("%v is an IPv4-mapped IPv6 address: give the IPv4 address %v", a, a.Unmap())
		}
		want[wire.AddrOf(a)] = true
	}
	return syncSet(m, want)
}

// CheckVIP says why a cannot be a VIP of a backend host, or nil. An IPv4
// VIP is taken as it comes; an IPv6 one must be an address a client can
// reach the host at through a load balancer: not IPv4-mapped (give the
// IPv4 address), not link-local, multicast, loopback or unspecified.
func CheckVIP(a netip.Addr) error {
	switch {
	case !a.IsValid():
		return errors.New("no address: give an IPv4 or IPv6 address")
	case a.Is4():
		return nil
	case a.Is4In6():
		return fmt.Errorf("VIP %v is an IPv4-mapped IPv6 address: give the IPv4 address %v instead", a, a.Unmap())
	case a.IsUnspecified():
		return fmt.Errorf("VIP %v is the unspecified address: give the address clients connect to", a)
	case a.IsMulticast():
		return fmt.Errorf("VIP %v is a multicast address: a VIP is a unicast address", a)
	case a.IsLoopback():
		return fmt.Errorf("VIP %v is the loopback address, which no packet from outside the host may carry: give the address clients connect to", a)
	case a.IsLinkLocalUnicast():
		return fmt.Errorf("VIP %v is link-local (fe80::/10), which no load balancer forwards to: give a global or unique local (fd00::/8) address", a)
	case a.Zone() != "":
		return fmt.Errorf("VIP %v has a zone: give the address without %%%s", a, a.Zone())
	}
	return nil
}

// CheckChainWindow says why w cannot be a daisy-chaining window, or nil.
func CheckChainWindow(w time.Duration) error {
	switch {
	case w < 0:
		return fmt.Errorf("chain window %v is negative: give a duration such as 2m, or 0 to turn daisy chaining off", w)
	case w%time.Second != 0:
		return fmt.Errorf("chain window %v is not a whole number of seconds: the hints carry seconds; round it, or give 0 to turn daisy chaining off", w)
	case w > MaxChainWindow:
		return fmt.Errorf("chain window %v exceeds %v: give a shorter one (minutes are typical)", w, MaxChainWindow)
	}
	return nil
}

// setChain makes the chaining sets exactly c's and writes the window and
// the offset of the wall clock from the boot clock, which the program
// adds to the only clock it has to compare the hints' unix times. The
// offset is taken now: a step of the wall clock later (NTP correcting a
// wrong clock) shifts the window until the next set-up. The window is
// written as 0 unless c.On(). Turning chaining on, the sets are written
// before the window; turning it off, after: a packet never sees a window
// with sets that are not yet, or no longer, the configured ones.
func setChain(maps *backendMaps, c Chain) error {
	if err := CheckChain(c); err != nil {
		return err
	}
	var cfg wire.ChainCfg
	if c.On() {
		off, err := wallOffset()
		if err != nil {
			return err
		}
		cfg.WallOffsetNs, cfg.WindowS = off, uint32(c.Window/time.Second)
	}
	if len(c.From) > 0 || len(c.To) > 0 {
		cfg.Flags = wire.ChainCfgSets
	}
	writeCfg := func() error {
		if err := maps.ChainCfg.Put(uint32(0), cfg); err != nil {
			return fmt.Errorf("write the daisy-chaining configuration: %w", err)
		}
		return nil
	}
	if !c.On() {
		if err := writeCfg(); err != nil {
			return err
		}
	}
	if err := setPrefixes(maps.ChainFrom, c.From); err != nil {
		return fmt.Errorf("daisy chaining, xlb nodes (chain-from): %w", err)
	}
	if err := setPrefixes(maps.ChainTo, c.To); err != nil {
		return fmt.Errorf("daisy chaining, previous owners (chain-to): %w", err)
	}
	if c.On() {
		return writeCfg()
	}
	return nil
}

// syncSet makes the set map m (keys to the value 1) hold exactly the keys
// of want. New keys go in before stale ones go out, so a key that stays is
// never missing meanwhile.
func syncSet[K comparable](m *ebpf.Map, want map[K]bool) error {
	var stale []K
	var k K
	var v uint8
	it := m.Iterate()
	for it.Next(&k, &v) {
		if !want[k] {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return err
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

// setPrefixes makes the LPM trie m hold exactly prefixes.
func setPrefixes(m *ebpf.Map, prefixes []netip.Prefix) error {
	want := map[wire.ChainPeerKey]bool{}
	for _, p := range prefixes {
		want[wire.PrefixKey(p)] = true
	}
	return syncSet(m, want)
}

// SetChain rewrites the daisy-chaining configuration of the backend
// program pinned under pinPath (Setup's), as the Kubernetes mode
// does whenever the cluster's nodes or endpoints change.
func SetChain(pinPath string, c Chain) error {
	var maps backendMaps
	for _, x := range []struct {
		name string
		m    **ebpf.Map
	}{{"chain_cfg", &maps.ChainCfg}, {"chain_from", &maps.ChainFrom}, {"chain_to", &maps.ChainTo}} {
		m, err := ebpf.LoadPinnedMap(filepath.Join(pinPath, x.name), nil)
		if err != nil {
			maps.Close()
			return fmt.Errorf("open %s under %s: %w (set the backend up again with this xlb: `xlb backend` adds the maps daisy chaining needs)", x.name, pinPath, err)
		}
		*x.m = m
	}
	defer maps.Close()
	return setChain(&maps, c)
}

// wallOffset returns CLOCK_REALTIME - CLOCK_BOOTTIME in nanoseconds: the
// wall clock time is bpf_ktime_get_boot_ns() plus it.
func wallOffset() (uint64, error) {
	var boot, wall unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot); err != nil {
		return 0, fmt.Errorf("read CLOCK_BOOTTIME: %w", err)
	}
	if err := unix.ClockGettime(unix.CLOCK_REALTIME, &wall); err != nil {
		return 0, fmt.Errorf("read CLOCK_REALTIME: %w", err)
	}
	off := wall.Nano() - boot.Nano()
	if off <= 0 {
		return 0, errors.New("the wall clock is behind the time since boot: set the system clock (daisy chaining compares it with the load balancers' timestamps)")
	}
	return uint64(off), nil
}

// Stats reads the counters of the decapsulation program pinned under
// pinPath.
func Stats(pinPath string) (map[string]bpfobj.Counters, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinPath, "decap_stats"), nil)
	if err != nil {
		return nil, fmt.Errorf("open decap counters under %s: %w (is `xlb backend` set up there?)", pinPath, err)
	}
	defer m.Close()
	out := map[string]bpfobj.Counters{}
	for i, name := range wire.DecapStatNames {
		c, err := bpfobj.SumPerCPU(m, uint32(i))
		if err != nil {
			return nil, err
		}
		out[name] = c
	}
	return out, nil
}

// ChainStats reads the daisy-chaining counters of the decapsulation
// program pinned under pinPath.
func ChainStats(pinPath string) (map[string]bpfobj.Counters, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinPath, "chain_stats"), nil)
	if err != nil {
		return nil, fmt.Errorf("open daisy-chaining counters under %s: %w (is `xlb backend` set up there, by a version with daisy chaining?)", pinPath, err)
	}
	defer m.Close()
	out := map[string]bpfobj.Counters{}
	for i, name := range wire.ChainStatNames {
		// A program of an older xlb that still runs has fewer
		// counters: the newer ones are 0 until the next set-up.
		if uint32(i) >= m.MaxEntries() {
			out[name] = bpfobj.Counters{}
			continue
		}
		c, err := bpfobj.SumPerCPU(m, uint32(i))
		if err != nil {
			return nil, err
		}
		out[name] = c
	}
	return out, nil
}
