package dataplane

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
)

// DecapOptions configure the backend-side decapsulation program.
type DecapOptions struct {
	Interface  string
	HostAddrs  []netip.Addr // outer destinations that are this host
	VIPs       []netip.Addr // inner destinations accepted (configured locally)
	PinPath    string
	AttachMode string
	// ChainWindow is how long after a table slot changed owner a TCP
	// packet without a local connection goes on to the slot's previous
	// owner (daisy chaining); 0 turns chaining off. Whole seconds.
	ChainWindow time.Duration
}

// DecapStatNames name the decapsulation program's counters, in the order
// of enum decap_stat in bpf/xlb_backend.c.
var DecapStatNames = []string{"decap_ipip", "decap_gue", "pass_not_ours", "drop_bad_inner", "drop_bad_gue"}

// ChainStatNames name the daisy-chaining counters, in the order of enum
// chain_stat in bpf/xlb_backend.c.
var ChainStatNames = []string{"syn", "socket", "syncookie", "chained", "stale_drop", "no_socket", "chain_no_route", "chain_no_neighbour"}

// MaxChainWindow is the longest daisy-chaining window the program takes.
const MaxChainWindow = time.Duration(math.MaxUint32) * time.Second

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
	if err := setChainConfig(objs.ChainCfg, opts.ChainWindow); err != nil {
		return "", err
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

// setChainConfig writes the chaining window and the offset of the wall
// clock from the boot clock, which the program adds to the only clock it
// has to compare the hints' unix times. The offset is taken now: a step
// of the wall clock later (NTP correcting a wrong clock) shifts the
// window until the next set-up.
func setChainConfig(m *ebpf.Map, window time.Duration) error {
	if err := CheckChainWindow(window); err != nil {
		return err
	}
	var cfg backendChainCfg
	if window > 0 {
		off, err := wallOffset()
		if err != nil {
			return err
		}
		cfg.WallOffsetNs, cfg.WindowS = off, uint32(window/time.Second)
	}
	if err := m.Put(uint32(0), cfg); err != nil {
		return fmt.Errorf("write the daisy-chaining configuration: %w", err)
	}
	return nil
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

// ChainStats reads the daisy-chaining counters of the decapsulation
// program pinned under pinPath.
func ChainStats(pinPath string) (map[string]Counters, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinPath, "chain_stats"), nil)
	if err != nil {
		return nil, fmt.Errorf("open daisy-chaining counters under %s: %w (is `xlb backend` set up there, by a version with daisy chaining?)", pinPath, err)
	}
	defer m.Close()
	out := map[string]Counters{}
	for i, name := range ChainStatNames {
		c, err := sumPerCPU(m, uint32(i))
		if err != nil {
			return nil, err
		}
		out[name] = c
	}
	return out, nil
}
