package lab

import (
	"context"
	"fmt"
	"net/netip"
)

// RemoveIPv4 makes host h of lab p (a node, say) an IPv6-only host: its interface
// loses its IPv4 address, and with it the IPv4 default route, so that an
// agent started there finds no IPv4 node address (see
// labrun.NodeOptions.IPv6Only). The plan keeps h.Addr: the lab's router
// still has the node's port on its segment, and lab down removes the
// namespace as before. Only in a dual-stack lab: a node without either
// address could not be reached.
func RemoveIPv4(ctx context.Context, p Plan, h Host) error {
	if !h.Addr6.IsValid() {
		return fmt.Errorf("lab %q: %s has no IPv6 address; an IPv6-only node needs the dual-stack lab (--ipv6)", p.Spec.Prefix, h.Name)
	}
	bits := -1
	for _, seg := range []Segment{p.ClientSegment, p.NodeSegment, p.BackendSegment} {
		if seg.Subnet.Contains(h.Addr) {
			bits = seg.Subnet.Bits()
		}
	}
	if bits < 0 {
		return fmt.Errorf("lab %q: %s's address %s is on none of the lab's segments", p.Spec.Prefix, h.Name, h.Addr)
	}
	addr := netip.PrefixFrom(h.Addr, bits).String()
	if _, err := ip(ctx, "-n", h.Namespace, "addr", "del", addr, "dev", h.Interface); err != nil {
		return fmt.Errorf("%s: %w", h.Name, err)
	}
	return nil
}
