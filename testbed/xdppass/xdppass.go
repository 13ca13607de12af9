// Package xdppass attaches the lab's trivial XDP_PASS program
// (bpf/xlb_pass.c). A veth drops frames sent to it with XDP_TX or
// bpf_redirect unless it has an XDP program of its own (DESIGN.md, facts
// about XDP on veth): the lab and the packet benchmark put this one on the
// router-side peer of every xlb node's and backend's veth, and the lab on
// every client's too, which keeps a client's frames in the order sent
// (docs/lab.md). Physical NICs need nothing of the kind, so the product
// has no use for it.
package xdppass

import (
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/testbed/netns"
)

//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types pass ../../bpf/xlb_pass.c -- -O2 -mcpu=v3 -g -Wall -Werror -I../../bpf -I/usr/include/x86_64-linux-gnu -fdebug-prefix-map=../../bpf=bpf

// Attach attaches the XDP_PASS program to interface ifname in network
// namespace ns ("" for the caller's) and pins the link at pinFile, so the
// attachment outlives the caller. Attaching again is a no-op.
func Attach(ns, ifname, pinFile string) error {
	do := func(fn func() error) error { return fn() }
	if ns != "" {
		do = func(fn func() error) error { return netns.Do(ns, fn) }
	}
	if err := bpfobj.EnsurePinFS(pinFile); err != nil {
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
		if l, err := bpfobj.PinnedLink(pinFile, iface.Index); err != nil {
			return err
		} else if l != nil {
			return l.Close()
		}
		var objs passObjects
		if err := loadPassObjects(&objs, nil); err != nil {
			return fmt.Errorf("load pass program: %w", err)
		}
		defer objs.Close()
		l, _, err := bpfobj.AttachXDP(objs.XlbPass, iface, "auto", pinFile)
		if err != nil {
			return err
		}
		return l.Close()
	})
}
