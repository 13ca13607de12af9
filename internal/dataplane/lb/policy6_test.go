package lb

import (
	"bytes"
	"net/netip"
	"testing"
)

// from6 is a TCP segment from src to the IPv6 fixture's first service
// (fxVIP6 port 80, IPv6 in IPv6).
func from6(src string) pkt6 {
	p := tcp6To(fxVIP6, 80)
	p.Src = netip.MustParseAddr(src)
	return p
}

// expect6 runs a packet from src to the IPv6 web service and checks that
// it is forwarded (reason "") or dropped for reason, and nothing else
// counted.
func expect6(t *testing.T, d *Dataplane, f *fixtureNS, what, src, reason string) {
	t.Helper()
	v, delta := verdictOf(t, d, f, from6(src).frame(f.MAC))
	switch {
	case reason == "" && (v != xdpTX || len(delta) != 0):
		t.Errorf("%s: from %s: verdict %s, reasons %v; want it forwarded", what, src, verdictNames[v], delta)
	case reason != "" && (v != xdpDrop || delta[reason] != 1 || len(delta) != 1):
		t.Errorf("%s: from %s: verdict %s, reasons %v; want it dropped for %s", what, src, verdictNames[v], delta, reason)
	}
}

// The IPv6 deny list at the edges of its prefixes: the first and last
// address of a prefix are dropped, the ones just outside are not, for
// prefixes that end on a byte, within one, at /128 and at /0; and a
// list of both families enforces each on its own family.
func TestDenyList6Edges(t *testing.T) {
	d, f := newFixtureLB6(t)
	expect6(t, d, f, "no list", "2001:db8::1", "")
	for _, tc := range []struct {
		list     []string
		in, out  []string
		describe string
	}{
		{[]string{"2001:db8::/32"}, []string{"2001:db8::", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", "2001:db8:5::7"}, []string{"2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", "2001:db9::", fxClient6.String()}, "a /32"},
		{[]string{"2001:db8:ab00::/44"}, []string{"2001:db8:ab00::", "2001:db8:ab0f:ffff:ffff:ffff:ffff:ffff"}, []string{"2001:db8:aaff:ffff:ffff:ffff:ffff:ffff", "2001:db8:ab10::"}, "a /44 (within a byte)"},
		{[]string{"fd00:2::2/128"}, []string{"fd00:2::2"}, []string{"fd00:2::1", "fd00:2::3", "fd01:2::2", "fd00:2:0:1::2", "fd00:3::2"}, "a /128 (a compressed path)"},
		{[]string{"fd00:2::2/128", "fd00:2::102/128"}, []string{"fd00:2::2", "fd00:2::102"}, []string{"fd00:2::202", "fd00:2::103", "fd00:2:1::2", "fd00:2::1:2"}, "a branch below a compressed path"},
		{[]string{"fd00:2::/127", "2001:db8:1::/48", "2001:db8:2::/48"}, []string{"fd00:2::1", "fd00:2::", "2001:db8:1:ffff::1", "2001:db8:2::"}, []string{"fd00:2::2", "2001:db8:3::", "2001:db8::ffff"}, "several sharing nodes"},
		{[]string{"::/0"}, []string{"::1", "2001:db8::1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe", fxClient6.String()}, nil, "/0"},
		{[]string{"10.0.0.0/8", "2001:db8::/32"}, []string{"2001:db8::1"}, []string{fxClient6.String(), "fd00:2::9"}, "both families"},
	} {
		if err := d.SetDenyList(prefixes(t, tc.list...)); err != nil {
			t.Fatal(err)
		}
		for _, a := range tc.in {
			expect6(t, d, f, tc.describe, a, "drop_denied")
		}
		for _, a := range tc.out {
			expect6(t, d, f, tc.describe, a, "")
		}
	}
	// The IPv4 half of the last list still denies IPv4 sources.
	d4 := tcpTo(fxVIP4to6, 80)
	d4.Src = netip.MustParseAddr("10.9.9.9")
	if v, delta := verdictOf(t, d, f, d4.Frame(f.MAC)); v != xdpDrop || delta["drop_denied"] != 1 {
		t.Errorf("both families, an IPv4 source in the list: verdict %s, reasons %v; want drop_denied", verdictNames[v], delta)
	}
	// A list without IPv6 prefixes removes the IPv6 table.
	if err := d.SetDenyList(prefixes(t, "10.0.0.0/8")); err != nil {
		t.Fatal(err)
	}
	expect6(t, d, f, "IPv4 list only", "2001:db8::1", "")
	if err := d.SetDenyList(prefixes(t, "2001:db8::/32")); err != nil {
		t.Fatal(err)
	}
	if err := d.SetDenyList(nil); err != nil {
		t.Fatal(err)
	}
	expect6(t, d, f, "list removed", "2001:db8::1", "")
}

// A denied IPv6 source reaches no VIP, however it tries: another port, a
// fragment, an unknown extension header, an echo request, an ICMPv6
// error; the node's deny list beats a service's source ranges; and
// neighbour discovery and traffic that is not to a VIP are not looked
// at.
func TestDenyList6EveryPacketToAVIP(t *testing.T) {
	d, f := newFixtureLB6(t)
	denied := "2001:db8::7"
	if err := d.SetDenyList(prefixes(t, "2001:db8::/32")); err != nil {
		t.Fatal(err)
	}
	// The web service's ranges let the denied source in: deny wins.
	if err := d.SetSourceRanges(0, fx6Services[0].key, prefixes(t, "2001:db8::/32")); err != nil {
		t.Fatal(err)
	}
	src := netip.MustParseAddr(denied)
	with := func(mod func(*pkt6)) []byte {
		p := from6(denied)
		mod(&p)
		return p.frame(f.MAC)
	}
	errFrame := icmp6About(f.MAC, 2, fxVIP6, fxClient6, 80, 40000)
	copy(errFrame[14+8:], src.AsSlice())
	ns := pkt6{Src: src, Dst: fxVIP6, Proto: 58, HopLimit: 255, Payload: append([]byte{135, 0, 0, 0, 0, 0, 0, 0}, fxVIP6.AsSlice()...)}
	for _, tc := range []struct {
		name      string
		frame     []byte
		v         uint32
		reason    string
		unchanged bool
	}{
		{"the service, in its ranges", with(func(*pkt6) {}), xdpDrop, "drop_denied", false},
		{"another port of the VIP", with(func(p *pkt6) { p.Dport = 8080 }), xdpDrop, "drop_denied", false},
		{"a fragment to the VIP", with(func(p *pkt6) { p.Ext = []ext6{{44, make([]byte, 6)}} }), xdpDrop, "drop_denied", false},
		{"a routing header with segments left", with(func(p *pkt6) { p.Ext = []ext6{{43, []byte{0, 1, 0, 0, 0, 0}}} }), xdpDrop, "drop_denied", false},
		{"an echo request to the VIP", with(func(p *pkt6) { p.Proto, p.Payload = 58, []byte{128, 0, 0, 0, 0, 1, 0, 1} }), xdpDrop, "drop_denied", false},
		{"an ICMPv6 error from it to the VIP", errFrame, xdpDrop, "drop_denied", false},
		{"hop limit 1", with(func(p *pkt6) { p.HopLimit = 1 }), xdpDrop, "drop_denied", false},
		{"a neighbour solicitation for the VIP", ns.frame(f.MAC), xdpPass, "pass_not_tcp_udp", true},
		{"another address", with(func(p *pkt6) { p.Dst = netip.MustParseAddr("fd00:55::1") }), xdpPass, "pass_no_service", true},
	} {
		v, delta := verdictOf(t, d, f, tc.frame)
		if v != tc.v || delta[tc.reason] != 1 || len(delta) != 1 {
			t.Errorf("%s: verdict %s, reasons %v; want %s for %s alone", tc.name, verdictNames[v], delta, verdictNames[tc.v], tc.reason)
		}
		if tc.unchanged {
			if _, out := f.Run(t, d.objs.XlbLbProg, tc.frame); !bytes.Equal(out, tc.frame) {
				t.Errorf("%s: passed frame modified", tc.name)
			}
		}
	}
	if drops, err := d.SourceRangeDrops(0); err != nil || drops.Packets != 0 {
		t.Errorf("the service counted %+v (%v) dropped for its ranges, want none: the deny list comes first", drops, err)
	}
}
