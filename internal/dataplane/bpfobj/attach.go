package bpfobj

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
)

// Attach modes as reported to the operator.
const (
	ModeNative  = "native"
	ModeGeneric = "generic"
)

// AttachXDP makes prog the XDP program of iface through a link pinned at
// pinFile. An existing pinned link on the same interface is kept and its
// program replaced atomically: not one packet goes unprocessed. mode is
// auto (native, falling back to generic), native or generic.
func AttachXDP(prog *ebpf.Program, iface *net.Interface, mode, pinFile string) (link.Link, string, error) {
	if l, err := PinnedLink(pinFile, iface.Index); err != nil {
		return nil, "", err
	} else if l != nil {
		if err := l.Update(prog); err != nil {
			l.Close()
			return nil, "", fmt.Errorf("replace XDP program on %s: %w", iface.Name, err)
		}
		return l, attachedMode(iface.Index), nil
	}

	var flags []link.XDPAttachFlags
	switch mode {
	case "", "auto":
		flags = []link.XDPAttachFlags{link.XDPDriverMode, link.XDPGenericMode}
	case ModeNative:
		flags = []link.XDPAttachFlags{link.XDPDriverMode}
	case ModeGeneric:
		flags = []link.XDPAttachFlags{link.XDPGenericMode}
	default:
		return nil, "", fmt.Errorf("attach mode %q: want auto, native or generic", mode)
	}
	var errs []error
	for _, f := range flags {
		l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: iface.Index, Flags: f})
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", modeName(f), err))
			continue
		}
		if err := l.Pin(pinFile); err != nil {
			l.Close()
			return nil, "", fmt.Errorf("pin XDP link at %s: %w", pinFile, err)
		}
		return l, modeName(f), nil
	}
	return nil, "", fmt.Errorf("attach XDP to %s: %w (another XDP program may be attached: see `ip link show %s`)", iface.Name, errors.Join(errs...), iface.Name)
}

// PinnedLink returns the XDP link pinned at pinFile when it still drives
// ifindex, nil when there is none. A stale pin (interface gone or
// replaced) is removed.
func PinnedLink(pinFile string, ifindex int) (link.Link, error) {
	l, err := link.LoadPinnedLink(pinFile, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load pinned link %s: %w", pinFile, err)
	}
	info, err := l.Info()
	if err == nil {
		if x := info.XDP(); x != nil && int(x.Ifindex) == ifindex {
			return l, nil
		}
	}
	// Defunct (its interface vanished) or attached elsewhere: let go.
	_ = l.Unpin()
	l.Close()
	return nil, nil
}

func modeName(f link.XDPAttachFlags) string {
	if f == link.XDPGenericMode {
		return ModeGeneric
	}
	return ModeNative
}

// attachedMode asks the kernel how XDP is attached to ifindex.
func attachedMode(ifindex int) string {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil || l.Attrs().Xdp == nil {
		return "unknown"
	}
	switch l.Attrs().Xdp.AttachMode {
	case 1: // XDP_ATTACHED_DRV
		return ModeNative
	case 2: // XDP_ATTACHED_SKB
		return ModeGeneric
	case 3:
		return "offload"
	}
	return "unknown"
}
