package lb

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// TestLBStatefulIPv4ToIPv6: a stateful service on an IPv4 VIP reaches
// IPv6 backends too (IPv4-in-IPv6), its flows kept on their backend
// whatever the table says later, across the families: a flow that began
// on an IPv6 backend stays there when the table moves to an IPv4 one and
// back; a new flow takes the table's; an ICMP error follows the flow
// without making an entry; a backend that left gets its flow's packets
// as an orphan, until the flow's SYN re-picks. Each frame is the one
// wantEncap builds from the family matrix.
func TestLBStatefulIPv4ToIPv6(t *testing.T) {
	d, f := newFixtureLB6(t)
	addrs := map[uint32]netip.Addr{20: netip.MustParseAddr("fd00:3::20"), 21: netip.MustParseAddr("fd00:3::21"), 22: netip.MustParseAddr("10.0.3.22")}
	for id, a := range addrs {
		if err := d.UpsertBackend(id, apOf(a)); err != nil {
			t.Fatal(err)
		}
	}
	vip := netip.MustParseAddr("10.99.1.12")
	svc := Service{ID: 13, Key: ServiceKey{vip, 80, ProtoTCP}, Encap: EncapIPIP, Stateful: true}
	point := func(id uint32) {
		svc.Table = make([]uint32, fxTableSize)
		for i := range svc.Table {
			svc.Table[i] = id
		}
		if err := d.UpsertService(svc); err != nil {
			t.Fatal(err)
		}
	}
	segment := func(sport uint16, flags uint8) []byte {
		p := tcpTo(vip, 80)
		p.Sport, p.TCPFlags, p.DF = sport, flags, true
		return p.Frame(f.MAC)
	}
	// send runs fr and checks that it went to want, as the matrix says,
	// returning the reasons counted.
	send := func(what string, fr []byte, want netip.Addr) map[string]uint64 {
		t.Helper()
		var v uint32
		var out []byte
		delta := reasonDelta(t, d, func() { v, out = f.Run(t, d.objs.XlbLbProg, fr) })
		if v != xdpTX {
			t.Fatalf("%s: verdict %s reasons %v, want TX to %v", what, verdictNames[v], delta, want)
		}
		src := netip.AddrFrom4([4]byte(fr[14+12 : 14+16]))
		sport := uint16(fr[14+20])<<8 | uint16(fr[14+21])
		hash := FlowHash(src, vip, sport, 80, 6)
		if fr[14+9] == 1 { // an ICMP error: the quoted flow's hash
			hash = FlowHash(fxClient, vip, 41000, 80, 6)
		}
		if exp := wantEncap(t, fxRouterMAC, f.MAC, decremented(fr), want, EncapIPIP, hash); !bytes.Equal(out, exp) {
			t.Fatalf("%s: frame\n got %x\nwant %x (to %v)", what, out, exp, want)
		}
		return delta
	}
	entries := func() int {
		n, err := d.ConntrackEntries()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	point(20)
	if r := send("SYN", segment(41000, tcpSYN), addrs[20]); r["note_ct_new"] != 1 {
		t.Fatalf("SYN: reasons %v, want note_ct_new", r)
	}
	point(22) // the table moves to an IPv4 backend
	if r := send("the flow's ACK after the table moved", segment(41000, tcpACK), addrs[20]); len(r) != 0 {
		t.Fatalf("ACK: reasons %v, want none", r)
	}
	send("an ICMP error about the flow", icmpAbout(f.MAC, 3, 4, vip, fxClient, 80, 41000), addrs[20])
	if n := entries(); n != 1 {
		t.Fatalf("%d flow entries, want 1 (an ICMP error makes none)", n)
	}
	if r := send("a new flow's SYN", segment(41001, tcpSYN), addrs[22]); r["note_ct_new"] != 1 {
		t.Fatalf("new SYN to the IPv4 backend: reasons %v, want note_ct_new", r)
	}
	point(21) // and to another IPv6 one
	if r := send("the IPv4 backend's flow", segment(41001, tcpACK), addrs[22]); len(r) != 0 {
		t.Fatalf("reasons %v, want none", r)
	}
	if r := send("an ACK without an entry", segment(41002, tcpACK), addrs[21]); r["note_ct_midflow_miss"] != 1 || r["note_ct_new"] != 1 {
		t.Fatalf("reasons %v, want note_ct_midflow_miss and note_ct_new", r)
	}
	if r := send("the first flow, again", segment(41000, tcpACK), addrs[20]); len(r) != 0 {
		t.Fatalf("reasons %v, want none", r)
	}

	// Backend 20 leaves: its flow goes on to it as an orphan, past the
	// counters; the flow's SYN re-picks the table's.
	before, err := d.BackendCounters(21)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.DeleteBackend(20); err != nil {
		t.Fatal(err)
	}
	send("the orphan's ACK", segment(41000, tcpACK), addrs[20])
	if r := send("the orphan's SYN", segment(41000, tcpSYN), addrs[21]); r["note_ct_new"] != 1 {
		t.Fatalf("the orphan's SYN: reasons %v, want note_ct_new", r)
	}
	after, err := d.BackendCounters(21)
	if err != nil {
		t.Fatal(err)
	}
	if after.Packets != before.Packets+1 {
		t.Errorf("backend 21 counted %d packets, want 1 (only the re-picked SYN)", after.Packets-before.Packets)
	}
}

// TestLBStatefulIPv4ToIPv6Affinity: with client-IP affinity the flow
// hash leaves the source port out, and the outer headers of a stateful
// IPv4 flow to an IPv6 backend (GUE over IPv6) mix it back in, as on
// every other path: each of a client's connections keeps its own GUE
// source port and flow label, all on the client's backend.
func TestLBStatefulIPv4ToIPv6Affinity(t *testing.T) {
	d, f := newFixtureLB6(t)
	addrs := map[uint32]netip.Addr{20: netip.MustParseAddr("fd00:3::20"), 21: netip.MustParseAddr("fd00:3::21")}
	for id, a := range addrs {
		if err := d.UpsertBackend(id, apOf(a)); err != nil {
			t.Fatal(err)
		}
	}
	vip := netip.MustParseAddr("10.99.1.13")
	table := make([]uint32, fxTableSize)
	for i := range table {
		table[i] = 20 + uint32(i%2)
	}
	svc := Service{ID: 14, Key: ServiceKey{vip, 80, ProtoTCP}, Encap: EncapGUE, Stateful: true, ClientIP: true, Table: table}
	if err := d.UpsertService(svc); err != nil {
		t.Fatal(err)
	}
	ports := map[uint16]bool{}
	for i := range 8 {
		p := tcpTo(vip, 80)
		p.Sport, p.TCPFlags = uint16(2000+977*i), tcpSYN
		in := p.Frame(f.MAC)
		v, out := f.Run(t, d.objs.XlbLbProg, in)
		hash := FlowHash(p.Src, vip, HashedPort(p.Sport, true), 80, 6)
		be := addrs[table[Slot(hash, fxTableSize)]]
		th := hash ^ uint32(wire.Port(p.Sport))
		if want := wantEncap(t, fxRouterMAC, f.MAC, decremented(in), be, EncapGUE, th); v != xdpTX || !bytes.Equal(out, want) {
			t.Fatalf("port %d: verdict %s, frame\n got %x\nwant %x", p.Sport, verdictNames[v], out, want)
		}
		ports[TunnelPort(hash, p.Sport, true)] = true
	}
	if len(ports) < 4 {
		t.Errorf("8 connections of one client had %d GUE source ports, want their own each (mostly)", len(ports))
	}
}
