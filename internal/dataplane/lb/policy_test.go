package lb

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

func prefixes(t testing.TB, ss ...string) []netip.Prefix {
	t.Helper()
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// from is a TCP segment from src to the fixture's web service.
func from(src string) pkt {
	p := tcpTo(fxVIP, 80)
	p.Src = netip.MustParseAddr(src)
	return p
}

// verdictOf runs frame and returns its verdict and the reasons it counted.
func verdictOf(t *testing.T, d *Dataplane, f *fixtureNS, frame []byte) (uint32, map[string]uint64) {
	t.Helper()
	var v uint32
	delta := reasonDelta(t, d, func() { v, _ = f.Run(t, d.objs.XlbLbProg, frame) })
	return v, delta
}

// expect runs a packet from src to the web service and checks that it
// is forwarded (reason "") or dropped for reason.
func expect(t *testing.T, d *Dataplane, f *fixtureNS, what, src, reason string) {
	t.Helper()
	v, delta := verdictOf(t, d, f, from(src).Frame(f.MAC))
	switch {
	case reason == "" && (v != xdpTX || len(delta) != 0):
		t.Errorf("%s: from %s: verdict %s, reasons %v; want it forwarded", what, src, verdictNames[v], delta)
	case reason != "" && (v != xdpDrop || delta[reason] != 1 || len(delta) != 1):
		t.Errorf("%s: from %s: verdict %s, reasons %v; want it dropped for %s", what, src, verdictNames[v], delta, reason)
	}
}

// The deny list at the edges of its prefixes: the first and last
// address of a prefix are dropped, the addresses just outside are not.
func TestDenyListEdges(t *testing.T) {
	d, f := newFixtureLB(t)
	expect(t, d, f, "no list", "192.0.2.1", "")
	for _, tc := range []struct {
		list     []string
		in, out  []string
		describe string
	}{
		{[]string{"192.0.2.0/24"}, []string{"192.0.2.0", "192.0.2.255", "192.0.2.77"}, []string{"192.0.1.255", "192.0.3.0"}, "a /24"},
		{[]string{"192.0.2.128/25"}, []string{"192.0.2.128", "192.0.2.255"}, []string{"192.0.2.127", "192.0.3.0"}, "a /25 (a leaf)"},
		{[]string{"198.18.0.0/15"}, []string{"198.18.0.0", "198.19.255.255"}, []string{"198.17.255.255", "198.20.0.0"}, "a /15 (root entries)"},
		{[]string{"198.18.64.0/19"}, []string{"198.18.64.0", "198.18.95.255"}, []string{"198.18.63.255", "198.18.96.0"}, "a /19 (node bits)"},
		{[]string{"203.0.113.9/32"}, []string{"203.0.113.9"}, []string{"203.0.113.8", "203.0.113.10"}, "a /32"},
		{[]string{"0.0.0.0/0"}, []string{"0.0.0.1", "10.0.2.2", "255.255.255.254", "192.0.2.1"}, nil, "/0"},
		{[]string{"203.0.113.9/32", "203.0.113.11/32", "203.0.113.64/26", "203.0.0.0/24"},
			[]string{"203.0.113.9", "203.0.113.11", "203.0.113.64", "203.0.113.127", "203.0.0.255"},
			[]string{"203.0.113.10", "203.0.113.12", "203.0.113.63", "203.0.113.128", "203.0.1.0"}, "several in one node"},
	} {
		if err := d.SetDenyList(prefixes(t, tc.list...)); err != nil {
			t.Fatal(err)
		}
		for _, a := range tc.in {
			expect(t, d, f, tc.describe, a, "drop_denied")
		}
		for _, a := range tc.out {
			expect(t, d, f, tc.describe, a, "")
		}
	}
	// An empty list removes it.
	if err := d.SetDenyList(nil); err != nil {
		t.Fatal(err)
	}
	expect(t, d, f, "list removed", "203.0.113.9", "")
	// An IPv6 list leaves IPv4 sources alone (TestDenyList6Edges has
	// the IPv6 ones).
	if err := d.SetDenyList(prefixes(t, "2001:db8::/32", "::/0")); err != nil {
		t.Fatal(err)
	}
	expect(t, d, f, "an IPv6 list", "203.0.113.9", "")
}

// A denied source reaches no VIP, however it tries: another port, a
// fragment, a ping; and the rest of the node's traffic is not looked at.
func TestDenyListEveryPacketToAVIP(t *testing.T) {
	d, f := newFixtureLB(t)
	if err := d.SetDenyList(prefixes(t, "192.0.2.0/24")); err != nil {
		t.Fatal(err)
	}
	src := netip.MustParseAddr("192.0.2.1")
	otherPort := from("192.0.2.1")
	otherPort.Dport = 8080
	frag := from("192.0.2.1")
	frag.FlagsFrag = 0x2000 // more fragments
	notVIP := from("192.0.2.1")
	notVIP.Dst = netip.MustParseAddr("10.0.1.2")
	ping := icmpAbout(f.MAC, 8, 0, fxVIP, fxClient, 80, 40000)
	copy(ping[14+12:], src.AsSlice())
	for _, tc := range []struct {
		name   string
		frame  []byte
		v      uint32
		reason string
	}{
		{"another port of the VIP", otherPort.Frame(f.MAC), xdpDrop, "drop_denied"},
		{"a fragment to the VIP", frag.Frame(f.MAC), xdpDrop, "drop_denied"},
		{"an ICMP echo to the VIP", ping, xdpDrop, "drop_denied"},
		{"the node's own address", notVIP.Frame(f.MAC), xdpPass, "pass_no_service"},
	} {
		v, delta := verdictOf(t, d, f, tc.frame)
		if v != tc.v || delta[tc.reason] != 1 {
			t.Errorf("%s: verdict %s, reasons %v; want %s for %s", tc.name, verdictNames[v], delta, verdictNames[tc.v], tc.reason)
		}
	}
}

// Source ranges at the edges of their prefixes, counted per service.
func TestSourceRangesEdges(t *testing.T) {
	d, f := newFixtureLB(t)
	key := ServiceKey{fxVIP, 80, ProtoTCP}
	for _, tc := range []struct {
		ranges  []string
		in, out []string
	}{
		{[]string{"10.0.2.0/24"}, []string{"10.0.2.0", "10.0.2.255", "10.0.2.2"}, []string{"10.0.1.255", "10.0.3.0"}},
		{[]string{"10.0.2.2/32", "172.16.0.0/12"}, []string{"10.0.2.2", "172.16.0.0", "172.31.255.255"}, []string{"10.0.2.1", "10.0.2.3", "172.15.255.255", "172.32.0.0"}},
		{[]string{"0.0.0.0/0"}, []string{"0.0.0.1", "255.255.255.254", "10.0.2.2"}, nil},
		{[]string{"0.0.0.0/1", "128.0.0.0/1"}, []string{"127.255.255.255", "128.0.0.0"}, nil},
	} {
		if err := d.SetSourceRanges(0, key, prefixes(t, tc.ranges...)); err != nil {
			t.Fatal(err)
		}
		for _, a := range tc.in {
			expect(t, d, f, "ranges "+join(tc.ranges), a, "")
		}
		before, err := d.SourceRangeDrops(0)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range tc.out {
			expect(t, d, f, "ranges "+join(tc.ranges), a, "drop_source_range")
		}
		after, err := d.SourceRangeDrops(0)
		if err != nil {
			t.Fatal(err)
		}
		frame := from("10.0.2.2").Frame(f.MAC)
		if n := uint64(len(tc.out)); after.Packets-before.Packets != n || after.Bytes-before.Bytes != n*uint64(len(frame)-14) {
			t.Errorf("ranges %v: the service counted %+v more drops, want %d packets of %d bytes", tc.ranges, Counters{Packets: after.Packets - before.Packets, Bytes: after.Bytes - before.Bytes}, n, len(frame)-14)
		}
	}
	// No ranges: everyone again.
	if err := d.SetSourceRanges(0, key, nil); err != nil {
		t.Fatal(err)
	}
	expect(t, d, f, "ranges removed", "192.0.2.1", "")
	if err := d.SetSourceRanges(0, ServiceKey{fxVIP, 81, ProtoTCP}, prefixes(t, "10.0.0.0/8")); err == nil {
		t.Error("source ranges set on a service that is not installed")
	}
}

func join(ss []string) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += ","
		}
		out += s
	}
	return out
}

// Each service has its own ranges, and the node's deny list beats them
// all.
func TestSourceRangesPerServiceAndDenyFirst(t *testing.T) {
	d, f := newFixtureLB(t)
	web := ServiceKey{fxVIP, 80, ProtoTCP}
	other := ServiceKey{netip.MustParseAddr("10.99.0.4"), 80, ProtoTCP} // service 4, backend 3: TX
	if err := d.SetSourceRanges(0, web, prefixes(t, "10.0.2.0/24")); err != nil {
		t.Fatal(err)
	}
	if err := d.SetSourceRanges(4, other, prefixes(t, "192.0.2.0/24")); err != nil {
		t.Fatal(err)
	}
	to := func(dst netip.Addr, src string) []byte {
		p := from(src)
		p.Dst = dst
		return p.Frame(f.MAC)
	}
	for _, tc := range []struct {
		dst    netip.Addr
		src    string
		reason string
	}{
		{fxVIP, "10.0.2.7", ""},
		{fxVIP, "192.0.2.7", "drop_source_range"},
		{other.VIP, "192.0.2.7", ""},
		{other.VIP, "10.0.2.7", "drop_source_range"},
		// A service without ranges takes both.
		{netip.MustParseAddr("10.99.0.5"), "10.0.2.7", "drop_no_route"},
		{netip.MustParseAddr("10.99.0.5"), "192.0.2.7", "drop_no_route"},
	} {
		v, delta := verdictOf(t, d, f, to(tc.dst, tc.src))
		if tc.reason == "" && v != xdpTX || tc.reason != "" && (v != xdpDrop || delta[tc.reason] != 1) {
			t.Errorf("%s -> %v: verdict %s, reasons %v; want %q", tc.src, tc.dst, verdictNames[v], delta, tc.reason)
		}
	}
	web4, _ := d.SourceRangeDrops(0)
	other4, _ := d.SourceRangeDrops(4)
	if web4.Packets != 1 || other4.Packets != 1 {
		t.Errorf("per service: web dropped %d, the other %d; want 1 each", web4.Packets, other4.Packets)
	}
	// Deny beats allow: in the web service's ranges, and denied.
	if err := d.SetDenyList(prefixes(t, "10.0.2.7/32")); err != nil {
		t.Fatal(err)
	}
	expect(t, d, f, "in the ranges and the deny list", "10.0.2.7", "drop_denied")
	expect(t, d, f, "in the ranges, not the deny list", "10.0.2.8", "")
	if c, _ := d.SourceRangeDrops(0); c.Packets != 1 {
		t.Errorf("a denied packet counted for the service's ranges: %d", c.Packets)
	}
}

// An ICMP error about a reply is let through by the client of the flow
// it quotes, whatever router sent it: path MTU discovery keeps working
// for the clients the ranges admit, and only for them.
func TestSourceRangesICMPErrorsByTheirFlow(t *testing.T) {
	d, f := newFixtureLB(t)
	if err := d.SetSourceRanges(0, ServiceKey{fxVIP, 80, ProtoTCP}, prefixes(t, "10.0.2.0/24")); err != nil {
		t.Fatal(err)
	}
	in := icmpAbout(f.MAC, 3, 4, fxVIP, fxClient, 80, 40000) // from router 10.0.9.1
	if v, delta := verdictOf(t, d, f, in); v != xdpTX || delta["note_icmp_to_backend"] != 1 {
		t.Errorf("an error about an admitted client's flow: verdict %s, reasons %v", verdictNames[v], delta)
	}
	out := icmpAbout(f.MAC, 3, 4, fxVIP, netip.MustParseAddr("192.0.2.1"), 80, 40000)
	if v, delta := verdictOf(t, d, f, out); v != xdpDrop || delta["drop_source_range"] != 1 {
		t.Errorf("an error about another client's flow: verdict %s, reasons %v", verdictNames[v], delta)
	}
}

// A service whose slot says it has ranges and whose ranges are gone lets
// nobody in, and deleting a service takes its ranges and counters with
// it, so that the next service with its ID starts from nothing.
func TestSourceRangesFailClosedAndDeleted(t *testing.T) {
	d, f := newFixtureLB(t)
	key := ServiceKey{fxVIP, 80, ProtoTCP}
	if err := d.SetSourceRanges(0, key, prefixes(t, "10.0.2.0/24")); err != nil {
		t.Fatal(err)
	}
	expect(t, d, f, "outside", "192.0.2.1", "drop_source_range")
	if err := d.objs.SvcRanges4.Delete(uint32(0)); err != nil {
		t.Fatal(err)
	}
	expect(t, d, f, "ranges missing", "10.0.2.2", "drop_source_range")

	if err := d.DeleteService(0, key); err != nil {
		t.Fatal(err)
	}
	if c, err := d.SourceRangeDrops(0); err != nil || c.Packets != 0 {
		t.Errorf("after the delete: %+v, %v; want no drops", c, err)
	}
	table := make([]uint32, fxTableSize)
	if err := d.UpsertService(Service{ID: 0, Key: key, Encap: EncapIPIP, Table: table, SourceRanges: prefixes(t, "192.0.2.0/24")}); err != nil {
		t.Fatal(err)
	}
	expect(t, d, f, "upserted with ranges", "192.0.2.1", "")
	expect(t, d, f, "upserted with ranges", "10.0.2.2", "drop_source_range")
	if err := d.UpsertService(Service{ID: 0, Key: key, Encap: EncapIPIP, Table: table}); err != nil {
		t.Fatal(err)
	}
	expect(t, d, f, "upserted without ranges", "10.0.2.2", "")
}

// The deny table's map has room for the limit the configuration sets,
// and a service's ranges for its.
func TestDenyListLimit(t *testing.T) {
	if config.MaxSourceRanges != wire.MaxRanges {
		t.Errorf("the configuration allows %d source ranges, the data plane holds %d", config.MaxSourceRanges, wire.MaxRanges)
	}
	requirePrivileges(t)
	d, err := New(Options{NodeAddr: fxNode, TableSize: fxTableSize})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if got := d.MaxDenyPrefixes(); got != config.MaxDenyPrefixes {
		t.Fatalf("the data plane holds %d deny prefixes, the configuration allows %d", got, config.MaxDenyPrefixes)
	}
	// The worst list of that size: every prefix a /32 of its own /18.
	ps := make([]netip.Prefix, config.MaxDenyPrefixes)
	for i := range ps {
		ps[i] = netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(i >> 10), byte(i >> 2), byte(i<<6) | 1, 1}), 32)
	}
	if err := d.SetDenyList(ps); err != nil {
		t.Fatal(err)
	}
}

// No packet of an allowed flow is lost while the lists change: packets
// from allowed sources run through the program without pause while the
// deny list and the service's ranges are swapped again and again, each
// time for lists that deny other sources.
func TestPolicySwapLosesNothing(t *testing.T) {
	d, f := newFixtureLB(t)
	key := ServiceKey{fxVIP, 80, ProtoTCP}
	allowed := []string{"10.0.2.2", "10.0.2.200", "172.16.5.5"}
	frames := make([][]byte, len(allowed))
	for i, a := range allowed {
		frames[i] = from(a).Frame(f.MAC)
	}
	denied := from("192.0.2.1").Frame(f.MAC)
	lists := [][]netip.Prefix{
		prefixes(t, "192.0.2.0/24"),
		prefixes(t, "192.0.2.0/25", "198.51.100.0/24", "10.0.3.0/24"),
		prefixes(t, "192.0.0.0/8"),
	}
	ranges := [][]netip.Prefix{
		prefixes(t, "10.0.2.0/24", "172.16.0.0/12"),
		prefixes(t, "10.0.0.0/8", "172.16.5.0/24"),
		prefixes(t, "0.0.0.0/1", "128.0.0.0/2", "172.16.0.0/12"),
	}
	if err := d.SetDenyList(lists[0]); err != nil {
		t.Fatal(err)
	}
	if err := d.SetSourceRanges(0, key, ranges[0]); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var swaps atomic.Int64
	var swapErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 1; !stop.Load(); i++ {
			if err := d.SetDenyList(lists[i%len(lists)]); err != nil {
				swapErr = err
				return
			}
			if err := d.SetSourceRanges(0, key, ranges[i%len(ranges)]); err != nil {
				swapErr = err
				return
			}
			swaps.Add(1)
		}
	})
	lost, sent, deniedPassed := 0, 0, 0
	for sent < 200_000 && swaps.Load() < 200 {
		for _, fr := range frames {
			if v, _ := f.Run(t, d.objs.XlbLbProg, fr); v != xdpTX {
				lost++
			}
			sent++
		}
		if v, _ := f.Run(t, d.objs.XlbLbProg, denied); v != xdpDrop {
			deniedPassed++
		}
	}
	stop.Store(true)
	wg.Wait()
	if swapErr != nil {
		t.Fatal(swapErr)
	}
	t.Logf("%d packets of allowed flows during %d swaps of both lists", sent, swaps.Load())
	if swaps.Load() < 10 {
		t.Fatalf("only %d swaps during the traffic: the test measured too little", swaps.Load())
	}
	if lost != 0 || deniedPassed != 0 {
		t.Errorf("%d of %d packets of allowed flows lost, %d denied packets passed", lost, sent, deniedPassed)
	}
}
