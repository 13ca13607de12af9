// Package xdptest holds what the tests of xlb's XDP programs share and the
// product has no use for.
package xdptest

import (
	"github.com/vishvananda/netlink"

	"github.com/xlbproject/xlb/testbed/netns"
)

// AttachedProgram returns the ID of the XDP program attached to ifname in
// network namespace ns, 0 if none.
func AttachedProgram(ns, ifname string) (uint32, error) {
	var id uint32
	err := netns.Do(ns, func() error {
		l, err := netlink.LinkByName(ifname)
		if err != nil {
			return err
		}
		if x := l.Attrs().Xdp; x != nil && x.Attached {
			id = x.ProgId
		}
		return nil
	})
	return id, err
}
