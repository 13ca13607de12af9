package agent

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/internal/announce"
	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/dataplane/lb"
)

// dualStackConfig has an IPv6 VIP with a backend of each family, and an
// IPv4 VIP with an IPv6 backend.
func dualStackConfig() *config.Config {
	c := cfgOf(
		svc("web6", "2001:db8:99::1", 80, config.TCP, config.DSRIPIP, be("fd00:3::2", 1), be("10.0.3.3", 1)),
		svc("dns", "10.99.0.2", 53, config.UDP, config.DSRGUE, be("fd00:3::2", 1)),
	)
	c.Node.Address6 = netip.MustParseAddr("fd00:1::2")
	return c
}

// recordingRoutes keeps the last routes Sync was given.
type recordingRoutes struct {
	mu   sync.Mutex
	last []announce.Route
}

func (r *recordingRoutes) Sync(routes []announce.Route) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last = slices.Clone(routes)
	return nil
}
func (r *recordingRoutes) Status() *api.BGP                               { return nil }
func (r *recordingRoutes) Reconfigure(context.Context, *config.BGP) error { return nil }

// TestIPv6ReachesDataplane: IPv6 services and backends are programmed as
// IPv4 ones are, health-checked at their IPv6 addresses, shown by
// status with the node's IPv6 address, and an IPv6 VIP is handed to the
// announcer as its own /128.
func TestIPv6ReachesDataplane(t *testing.T) {
	cfg := dualStackConfig()
	f := newFake(testSize, config.MaxServices, config.MaxBackends)
	p := newFakeProber()
	a, err := newAgent(Options{
		ConfigPath: "/etc/xlb/test.yaml", Config: cfg, Dataplane: f,
		NodeAddr: netip.MustParseAddr("10.0.1.2"), NodeAddr6: netip.MustParseAddr("fd00:1::2"),
		PinPath: "/sys/fs/bpf/xlb/test", Logger: quiet, Prober: p,
	})
	if err != nil {
		t.Fatal(err)
	}
	w := &warmLog{}
	a.warm = w.warm
	if err := a.start(); err != nil {
		t.Fatal(err)
	}

	// The data plane has the IPv6 service, its backends of both
	// families, and the IPv6 backend of the IPv4 service.
	webID, webIDs, ok := a.rec.ids(keyOf(t, cfg.Services[0]))
	if !ok {
		t.Fatal("the IPv6 service is not installed")
	}
	f.mu.Lock()
	got := f.services[webID]
	var bes []netip.AddrPort
	for _, id := range webIDs {
		bes = append(bes, f.backends[id])
	}
	f.mu.Unlock()
	if want := (lb.ServiceKey{VIP: netip.MustParseAddr("2001:db8:99::1"), Port: 80, Proto: lb.ProtoTCP}); got.Key != want {
		t.Errorf("installed key %v, want %v", got.Key, want)
	}
	slices.SortFunc(bes, netip.AddrPort.Compare)
	if want := []netip.AddrPort{netip.MustParseAddrPort("10.0.3.3:80"), netip.MustParseAddrPort("[fd00:3::2]:80")}; !slices.Equal(bes, want) {
		t.Errorf("backends of the IPv6 service %v, want %v", bes, want)
	}
	_, dnsIDs, ok := a.rec.ids(keyOf(t, cfg.Services[1]))
	f.mu.Lock()
	id, named := dnsIDs[netip.MustParseAddrPort("[fd00:3::2]:53")]
	ap := f.backends[id]
	f.mu.Unlock()
	if !ok || !named || ap != netip.MustParseAddrPort("[fd00:3::2]:53") {
		t.Errorf("the IPv4 service's IPv6 backend is not installed: %v, data plane backend %v", dnsIDs, ap)
	}
	if got, want := w.last(), addrs("fd00:3::2", "10.0.3.3"); !slices.Equal(got, want) {
		t.Errorf("warmed %v, want %v", got, want)
	}

	// Health checks go to the IPv6 addresses.
	var probed []netip.Addr
	p.mu.Lock()
	for _, tg := range p.targets {
		probed = append(probed, tg.Addr)
	}
	p.mu.Unlock()
	slices.SortFunc(probed, netip.Addr.Compare)
	probed = slices.Compact(probed)
	if want := addrs("10.0.3.3", "fd00:3::2"); !slices.Equal(probed, want) {
		t.Errorf("probed %v, want %v", probed, want)
	}

	st := status(t, a)
	if st.Node.Address6 != netip.MustParseAddr("fd00:1::2") {
		t.Errorf("status node %+v, want address6 fd00:1::2", st.Node)
	}
	if len(st.Services) != 2 || st.Services[0].VIP != netip.MustParseAddr("2001:db8:99::1") || len(st.Services[0].Backends) != 2 {
		t.Fatalf("status services %+v", st.Services)
	}

	// An IPv6 VIP is handed to the announcer as an IPv4 one is: its own
	// host route.
	r := &recordingRoutes{}
	a.applyMu.Lock()
	a.routes, a.routesLive = r, true
	a.syncRoutes(cfg, nil)
	a.applyMu.Unlock()
	want := []netip.Prefix{netip.MustParsePrefix("2001:db8:99::1/128"), netip.MustParsePrefix("10.99.0.2/32")}
	var prefixes []netip.Prefix
	for _, rt := range r.last {
		if !rt.Serve {
			t.Errorf("route %v not served: %s", rt.Prefix, rt.Why)
		}
		prefixes = append(prefixes, rt.Prefix)
	}
	if !slices.Equal(prefixes, want) {
		t.Errorf("routes %v, want %v", prefixes, want)
	}
}

// TestFirstGlobal6: the node's IPv6 address is the interface's first
// global one (unique local included), never a link-local one or one that
// failed duplicate address detection.
func TestFirstGlobal6(t *testing.T) {
	addr := func(s string, flags int) netlink.Addr {
		p := netip.MustParsePrefix(s)
		return netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 128)}, Flags: flags}
	}
	got := firstGlobal6([]netlink.Addr{addr("fe80::1/64", 0), addr("fd00:1::7/64", unix.IFA_F_DADFAILED), addr("fd00:1::2/64", 0), addr("2001:db8::2/64", 0)})
	if got != netip.MustParseAddr("fd00:1::2") {
		t.Errorf("got %v, want fd00:1::2", got)
	}
	if got := firstGlobal6([]netlink.Addr{addr("fe80::1/64", 0)}); got.IsValid() {
		t.Errorf("link-local only: got %v, want none", got)
	}
}

// TestPickNodeAddress: the first IPv4 address is the node address; a
// node with a global IPv6 address (or node.address6) and no IPv4 has
// none, which is no error; a node with neither is told what to do.
func TestPickNodeAddress(t *testing.T) {
	ipn := func(s string) net.Addr {
		p := netip.MustParsePrefix(s)
		return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
	}
	n := config.Node{Interface: "eth0"}
	if a, err := pickNodeAddress(n, []net.Addr{ipn("fe80::1/64"), ipn("fd00:1::2/64"), ipn("10.0.1.2/24")}); err != nil || a != netip.MustParseAddr("10.0.1.2") {
		t.Errorf("dual stack: %v, %v; want 10.0.1.2", a, err)
	}
	if a, err := pickNodeAddress(n, []net.Addr{ipn("fe80::1/64"), ipn("fd00:1::2/64")}); err != nil || a.IsValid() {
		t.Errorf("IPv6 only: %v, %v; want none and no error", a, err)
	}
	if _, err := pickNodeAddress(n, []net.Addr{ipn("fe80::1/64")}); err == nil || !strings.Contains(err.Error(), `node.interface "eth0" has neither an IPv4 nor a global IPv6 address`) {
		t.Errorf("link-local only: %v", err)
	}
	n.Address6 = netip.MustParseAddr("fd00:1::5")
	if a, err := pickNodeAddress(n, nil); err != nil || a.IsValid() {
		t.Errorf("node.address6 and no address on the interface: %v, %v", a, err)
	}
}
