package lb

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// Monotonic is the clock the program's bpf_ktime_get_ns reads
// (CLOCK_MONOTONIC), as a duration since boot.
func Monotonic() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, fmt.Errorf("read the monotonic clock: %w", err)
	}
	return time.Duration(ts.Nano()), nil
}

// SetL2Owned makes the program answer ARP requests (IPv4) and neighbour
// solicitations (IPv6) for exactly the VIPs in owned, with mac, until
// expires (Monotonic's clock); requests for other addresses go to the
// kernel, which has no VIP and answers none.
// Layer-2 mode calls it at every heartbeat with a later expires, so that
// a hung agent's node stops answering by itself once expires passes.
func (d *Dataplane) SetL2Owned(owned []netip.Addr, mac net.HardwareAddr, expires time.Duration) error {
	if len(mac) != 6 {
		return fmt.Errorf("layer-2 ownership: %v is not an Ethernet address", mac)
	}
	m := d.objs.L2Owned
	want := make(map[wire.Addr]bool, len(owned))
	v := wire.L2Owner{Expires: uint64(expires)}
	copy(v.Mac[:], mac)
	var errs []error
	for _, a := range owned {
		k := wire.AddrOf(a)
		want[k] = true
		if err := m.Put(k, v); err != nil {
			errs = append(errs, fmt.Errorf("layer-2 ownership of %s: %w", a, err))
		}
	}
	var k wire.Addr
	var stale []wire.Addr
	it := m.Iterate()
	for it.Next(&k, &v) {
		if !want[k] {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		errs = append(errs, fmt.Errorf("layer-2 ownership: list the owned VIPs: %w", err))
	}
	for _, k := range stale {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("layer-2 ownership: give up %s: %w", k.IP(), err))
		}
	}
	return errors.Join(errs...)
}

// L2Owned lists the VIPs the program answers ARP for, with the time each
// entry expires (Monotonic's clock).
func (d *Dataplane) L2Owned() (map[netip.Addr]time.Duration, error) {
	out := map[netip.Addr]time.Duration{}
	var k wire.Addr
	var v wire.L2Owner
	it := d.objs.L2Owned.Iterate()
	for it.Next(&k, &v) {
		out[k.IP()] = time.Duration(v.Expires)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("layer-2 ownership: list the owned VIPs: %w", err)
	}
	return out, nil
}
