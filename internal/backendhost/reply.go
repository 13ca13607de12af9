package backendhost

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/xlbproject/xlb/internal/dataplane/decap"
)

// replyLinkPin is the file name of the pinned TC link in a pin directory.
const replyLinkPin = "reply_link"

// attachReply attaches the reply-translation program to the egress of
// iface through a TCX link pinned under pinPath, sharing the maps the
// decapsulation program pinned there. An existing pinned link on iface
// gets the new program in place, without a gap.
func attachReply(pinPath string, iface *net.Interface) error {
	spec, err := decap.Spec()
	if err != nil {
		return fmt.Errorf("parse embedded backend object: %w", err)
	}
	for name, m := range spec.Maps {
		if !strings.HasPrefix(name, ".") {
			m.Pinning = ebpf.PinByName
		}
	}
	var objs struct {
		Prog *ebpf.Program `ebpf:"xlb_nat_reply"`
	}
	if err := spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: pinPath}}); err != nil {
		return fmt.Errorf("load reply program: %w", err)
	}
	defer objs.Prog.Close()

	pinFile := filepath.Join(pinPath, replyLinkPin)
	if l := adoptTCX(pinFile, iface.Index); l != nil {
		defer l.Close()
		if err := l.Update(objs.Prog); err != nil {
			return fmt.Errorf("replace reply program on %s: %w", iface.Name, err)
		}
		return nil
	}
	l, err := link.AttachTCX(link.TCXOptions{Interface: iface.Index, Program: objs.Prog, Attach: ebpf.AttachTCXEgress})
	if err != nil {
		return fmt.Errorf("attach reply program to the egress of %s: %w (TCX needs Linux 6.6 or later)", iface.Name, err)
	}
	defer l.Close()
	if err := l.Pin(pinFile); err != nil {
		return fmt.Errorf("pin reply link at %s: %w", pinFile, err)
	}
	return nil
}

// adoptTCX returns the link pinned at pinFile if it still drives the
// egress of ifindex; a stale pin (interface gone) is removed.
func adoptTCX(pinFile string, ifindex int) link.Link {
	l, err := link.LoadPinnedLink(pinFile, nil)
	if err != nil {
		return nil
	}
	if info, err := l.Info(); err == nil {
		if x := info.TCX(); x != nil && int(x.Ifindex) == ifindex {
			return l
		}
	}
	_ = l.Unpin()
	l.Close()
	return nil
}

// detachReply removes the reply program, if attached.
func detachReply(pinPath string) error {
	pinFile := filepath.Join(pinPath, replyLinkPin)
	l, err := link.LoadPinnedLink(pinFile, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("load reply link %s: %w", pinFile, err)
	}
	defer l.Close()
	if err := l.Unpin(); err != nil {
		return fmt.Errorf("unpin reply link %s: %w", pinFile, err)
	}
	return nil
}
