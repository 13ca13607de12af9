package decap

import (
	"net/netip"
	"testing"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/testbed/netns"
)

func TestSetupDecap(t *testing.T) {
	requirePrivileges(t)
	f := newFixtureNS(t)
	pin := testPinPath(t)
	var mode string
	err := netns.Do(f.Name, func() error {
		var err error
		mode, err = Setup(Options{Interface: "veth0", HostAddrs: []netip.Addr{fxNode}, VIPs: []netip.Addr{fxVIP}, PinPath: pin})
		if err != nil {
			return err
		}
		// Again, with another VIP set: adopts and replaces the sets.
		_, err = Setup(Options{Interface: "veth0", HostAddrs: []netip.Addr{fxNode}, VIPs: []netip.Addr{netip.MustParseAddr("10.99.0.7")}, PinPath: pin})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if mode != bpfobj.ModeNative || xdpProgID(t, f.Name, "veth0") == 0 {
		t.Fatalf("mode %q, program %d", mode, xdpProgID(t, f.Name, "veth0"))
	}
	stats, err := Stats(pin)
	if err != nil || len(stats) != len(wire.DecapStatNames) {
		t.Fatalf("stats %v, %v", stats, err)
	}
}
