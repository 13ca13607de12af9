package lb

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
)

// TestIPv6OnlyNode: a node with an IPv6 address alone loads, attaches and
// forwards an IPv6 VIP to IPv6 backends, and refuses, with errors that
// say what is missing, what would need an IPv4 address: an IPv4 VIP, an
// IPv4 backend of an IPv6 VIP.
func TestIPv6OnlyNode(t *testing.T) {
	requirePrivileges(t)
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{}, "no node address: give the node's IPv4 address, its IPv6 address, or both"},
		{Options{NodeAddr: fxNode6}, "node address fd00:1::2: not a usable IPv4 address"},
		{Options{NodeAddr: netip.IPv4Unspecified(), NodeAddr6: fxNode6}, "node address 0.0.0.0: not a usable IPv4 address"},
	} {
		c.opts.TableSize = fxTableSize
		if d, err := New(c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			if d != nil {
				d.Close()
			}
			t.Errorf("New(%+v): %v, want an error that says %q", c.opts, err, c.want)
		}
	}

	f := newFixtureNS(t)
	prepareFixture6(t, f)
	d, err := openIn(t, f.Name, Options{Interface: "veth0", NodeAddr6: fxNode6, PinPath: testPinPath(t), TableSize: fxTableSize})
	if err != nil {
		t.Fatalf("Open with an IPv6 node address alone: %v", err)
	}
	defer d.Close()
	if err := d.UpsertBackend(0, apOf(fxBackend6)); err != nil {
		t.Fatal(err)
	}
	if err := d.UpsertBackend(1, apOf(fxBackend)); err != nil {
		t.Fatal(err)
	}
	table := func(id uint32) []uint32 {
		tb := make([]uint32, fxTableSize)
		for i := range tb {
			tb[i] = id
		}
		return tb
	}
	for _, encap := range []Encap{EncapIPIP, EncapGUE} {
		if err := d.UpsertService(Service{ID: 1, Key: ServiceKey{fxVIP6, 80, ProtoTCP}, Encap: encap, Table: table(0)}); err != nil {
			t.Fatalf("IPv6 VIP, IPv6 backend, %v: %v", encap, err)
		}
		in := tcp6To(fxVIP6, 80).frame(f.MAC)
		v, out := f.Run(t, d.objs.XlbLbProg, in)
		if v != xdpTX {
			t.Fatalf("%v: verdict %s, want TX", encap, verdictNames[v])
		}
		want := wantEncap(t, fxRouterMAC, f.MAC, decremented(in), fxBackend6, encap, FlowHash(fxClient6, fxVIP6, 40000, 80, 6))
		if !bytes.Equal(out, want) {
			t.Fatalf("%v: frame differs\n got %x\nwant %x", encap, out, want)
		}
	}

	for _, c := range []struct {
		name string
		svc  Service
		want string
	}{
		{"IPv4 VIP", Service{ID: 2, Key: ServiceKey{fxVIP4to6, 80, ProtoTCP}, Encap: EncapIPIP, Table: table(0)},
			"service 2: VIP 10.99.1.1 is IPv4, and the node has no IPv4 address"},
		{"IPv4 backend of an IPv6 VIP", Service{ID: 3, Key: ServiceKey{netip.MustParseAddr("fd00:99::7"), 80, ProtoTCP}, Encap: EncapGUE, Table: table(1)},
			"service 3: backend 1 (10.0.3.2) is IPv4, and the node has no IPv4 address to send from"},
	} {
		if err := d.UpsertService(c.svc); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error that says %q", c.name, err, c.want)
		}
	}
	// The IPv6 service is still in place and alone.
	svcs, err := servicesOf(d)
	if err != nil {
		t.Fatal(err)
	}
	if len(svcs) != 1 || svcs[0].ID != 1 {
		t.Errorf("services %+v, want service 1 alone", svcs)
	}
}
