package dataplane

import (
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/xlbproject/xlb/testbed/netns"
)

// AttachPass attaches the trivial XDP_PASS program to interface ifname in
// network namespace ns ("" for the caller's) and pins the link at
// pinFile, so the attachment outlives the caller. A veth drops frames
// sent to it with XDP_TX or bpf_redirect unless it has an XDP program of
// its own (DESIGN.md, facts about XDP on veth). Attaching again is a
// no-op.
func AttachPass(ns, ifname, pinFile string) error {
	do := func(fn func() error) error { return fn() }
	if ns != "" {
		do = func(fn func() error) error { return netns.Do(ns, fn) }
	}
	if err := ensureBPFFS(pinFile); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(pinFile), 0o700); err != nil {
		return err
	}
	return do(func() error {
		iface, err := net.InterfaceByName(ifname)
		if err != nil {
			return fmt.Errorf("interface %q: %w", ifname, err)
		}
		if l, err := adoptLink(pinFile, iface.Index); err != nil {
			return err
		} else if l != nil {
			return l.Close()
		}
		var objs passObjects
		if err := loadPassObjects(&objs, nil); err != nil {
			return fmt.Errorf("load pass program: %w", err)
		}
		defer objs.Close()
		l, _, err := attach(objs.XlbPass, iface, "auto", pinFile)
		if err != nil {
			return err
		}
		return l.Close()
	})
}
