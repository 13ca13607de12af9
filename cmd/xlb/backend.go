package main

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/xlbproject/xlb/internal/backendhost"
	"github.com/xlbproject/xlb/internal/dataplane"
)

// vipList collects repeated or comma-separated --vip flags.
type vipList []netip.Addr

func (v *vipList) String() string { return fmt.Sprint([]netip.Addr(*v)) }

func (v *vipList) Set(s string) error {
	for _, part := range strings.Split(s, ",") {
		a, err := netip.ParseAddr(strings.TrimSpace(part))
		if err != nil || !a.Is4() {
			return fmt.Errorf("%q is not an IPv4 address", part)
		}
		*v = append(*v, a)
	}
	return nil
}

func runBackend(args []string) error {
	fs := flag.NewFlagSet("xlb backend", flag.ContinueOnError)
	iface := fs.String("interface", "", "interface the tunnelled traffic arrives on (required)")
	var vips vipList
	fs.Var(&vips, "vip", "VIP to accept (repeat, or comma-separated)")
	pin := fs.String("pin-path", "", "bpffs directory for the pinned program (default /sys/fs/bpf/xlb/backend-<netns>-<interface>)")
	mode := fs.String("attach-mode", "auto", "XDP attach mode: auto, native or generic")
	cleanup := fs.Bool("cleanup", false, "remove the VIPs and the decapsulation program instead")
	stats := fs.Bool("stats", false, "print the decapsulation counters and exit")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: xlb backend --interface IF --vip VIP [--vip VIP...] [--pin-path DIR] [--cleanup | --stats]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *iface == "" || fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	if *pin == "" {
		p, err := backendhost.DefaultPinPath(*iface)
		if err != nil {
			return err
		}
		*pin = p
	}
	switch {
	case *cleanup:
		removed, err := backendhost.Cleanup(*pin)
		if err != nil {
			return err
		}
		fmt.Printf("removed the decapsulation program on %s (%s) and VIPs %v from lo\n", *iface, *pin, removed)
		return nil
	case *stats:
		st, err := dataplane.DecapStats(*pin)
		if err != nil {
			return err
		}
		for _, name := range dataplane.DecapStatNames {
			fmt.Printf("%-16s %12d packets %14d bytes\n", name, st[name].Packets, st[name].Bytes)
		}
		return nil
	}
	res, err := backendhost.Setup(backendhost.Options{Interface: *iface, VIPs: vips, PinPath: *pin, AttachMode: *mode})
	if err != nil {
		return err
	}
	fmt.Printf("backend ready: %s decapsulates IPIP and GUE (port %d) to %v (%s XDP, pinned at %s); VIPs %v on lo\n",
		*iface, dataplane.GUEPort, res.HostAddrs, res.Mode, res.PinPath, []netip.Addr(vips))
	return nil
}
