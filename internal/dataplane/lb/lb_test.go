package lb

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"slices"
	"testing"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

const fxTableSize = 251

type fxService struct {
	key     ServiceKey
	encap   Encap
	backend uint32
}

// newFixtureLB loads an unattached, unpinned LB program and installs the
// fixture services, each with a table that points at one backend.
func newFixtureLB(t testing.TB) (*Dataplane, *fixtureNS) {
	t.Helper()
	return newFixtureLBHashing(t, wire.FlowHashFmix64)
}

// newFixtureLBHashing is newFixtureLB with the program loaded with the
// given flow hash.
func newFixtureLBHashing(t testing.TB, kind wire.FlowHash) (*Dataplane, *fixtureNS) {
	t.Helper()
	requirePrivileges(t)
	f := newFixtureNS(t)
	d, err := New(Options{NodeAddr: fxNode, TableSize: fxTableSize, FlowHash: kind})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	// One backend id per (service, backend), as the agent allocates them.
	for id, addr := range []netip.Addr{fxBackend, fxRedirBE, fxNoNeighBE, fxSmallMTU, fxNoRouteBE, fxBackend, fxSmallMTU} {
		if err := d.UpsertBackend(uint32(id), apOf(addr)); err != nil {
			t.Fatal(err)
		}
	}
	svcs := []fxService{
		{ServiceKey{fxVIP, 80, ProtoTCP}, EncapIPIP, 0},
		{ServiceKey{fxVIP, 53, ProtoUDP}, EncapGUE, 5},
		{ServiceKey{netip.MustParseAddr("10.99.0.2"), 80, ProtoTCP}, EncapIPIP, 1},
		{ServiceKey{netip.MustParseAddr("10.99.0.3"), 80, ProtoTCP}, EncapIPIP, 2},
		{ServiceKey{netip.MustParseAddr("10.99.0.4"), 80, ProtoTCP}, EncapIPIP, 3},
		{ServiceKey{netip.MustParseAddr("10.99.0.5"), 80, ProtoTCP}, EncapIPIP, 4},
		{ServiceKey{netip.MustParseAddr("10.99.0.6"), 80, ProtoTCP}, EncapIPIP, 9}, // backend 9 unset
		{ServiceKey{netip.MustParseAddr("10.99.0.4"), 53, ProtoUDP}, EncapGUE, 6},
	}
	for id, s := range svcs {
		table := make([]uint32, fxTableSize)
		for i := range table {
			table[i] = s.backend
		}
		if err := d.UpsertService(Service{ID: uint32(id), Key: s.key, Encap: s.encap, Table: table}); err != nil {
			t.Fatal(err)
		}
	}
	return d, f
}

func reasonDelta(t testing.TB, d *Dataplane, fn func()) map[string]uint64 {
	t.Helper()
	before, err := d.ReasonCounters()
	if err != nil {
		t.Fatal(err)
	}
	fn()
	after, err := d.ReasonCounters()
	if err != nil {
		t.Fatal(err)
	}
	delta := map[string]uint64{}
	for k, v := range after {
		if v != before[k] {
			delta[k] = v - before[k]
		}
	}
	return delta
}

func tcpTo(dst netip.Addr, dport uint16) pkt {
	return pkt{Src: fxClient, Dst: dst, Sport: 40000, Dport: dport, Proto: 6, DF: true, Payload: []byte("GET / HTTP/1.1\r\n\r\n")}
}

// checkOuter verifies the outer IPv4 header of an encapsulated frame and
// returns the bytes after it.
func checkOuter(t *testing.T, out []byte, proto uint8, dst netip.Addr, innerLen int, df bool) []byte {
	t.Helper()
	overhead := 20
	if proto == 17 {
		overhead = 32
	}
	return checkOuterOf(t, out, proto, dst, innerLen, overhead, df)
}

// checkOuterOf is checkOuter for outer headers of overhead bytes.
func checkOuterOf(t *testing.T, out []byte, proto uint8, dst netip.Addr, innerLen, overhead int, df bool) []byte {
	t.Helper()
	if len(out) < 34 {
		t.Fatalf("output too short: %d bytes", len(out))
	}
	if binary.BigEndian.Uint16(out[12:]) != 0x0800 {
		t.Fatalf("ethertype %#x", binary.BigEndian.Uint16(out[12:]))
	}
	ip := out[14:34]
	if ip[0] != 0x45 {
		t.Errorf("outer version/IHL %#x, want 0x45", ip[0])
	}
	if csum(ip) != 0 {
		t.Errorf("outer IPv4 checksum invalid")
	}
	if ip[8] != 64 {
		t.Errorf("outer TTL %d, want 64", ip[8])
	}
	if ip[9] != proto {
		t.Errorf("outer protocol %d, want %d", ip[9], proto)
	}
	if got := int(binary.BigEndian.Uint16(ip[2:])); got != innerLen+overhead {
		t.Errorf("outer total length %d, want %d", got, innerLen+overhead)
	}
	if len(out) != 14+innerLen+overhead {
		t.Errorf("frame length %d, want %d", len(out), 14+innerLen+overhead)
	}
	if got := netip.AddrFrom4([4]byte(ip[12:16])); got != fxNode {
		t.Errorf("outer source %v, want %v", got, fxNode)
	}
	if got := netip.AddrFrom4([4]byte(ip[16:20])); got != dst {
		t.Errorf("outer destination %v, want %v", got, dst)
	}
	if gotDF := binary.BigEndian.Uint16(ip[6:])&0x4000 != 0; gotDF != df {
		t.Errorf("outer DF %v, want %v (copied from the inner packet)", gotDF, df)
	}
	return out[34:]
}

// checkInner verifies that the inner packet is the original one with its
// TTL decremented and its checksum still valid.
func checkInner(t *testing.T, inner, orig []byte) {
	t.Helper()
	o := orig[14:]
	if len(inner) != len(o) {
		t.Fatalf("inner length %d, want %d", len(inner), len(o))
	}
	ihl := int(o[0]&0xf) * 4
	if inner[8] != o[8]-1 {
		t.Errorf("inner TTL %d, want %d", inner[8], o[8]-1)
	}
	if csum(inner[:ihl]) != 0 {
		t.Errorf("inner IPv4 checksum invalid after TTL decrement")
	}
	want := append([]byte{}, o...)
	want[8]--
	copy(want[10:12], inner[10:12])
	if !bytes.Equal(inner, want) {
		t.Errorf("inner packet changed beyond TTL and checksum:\n got %x\nwant %x", inner, want)
	}
}

func TestLBEncapIPIP(t *testing.T) {
	d, f := newFixtureLB(t)
	in := tcpTo(fxVIP, 80).Frame(f.MAC)
	var v uint32
	var out []byte
	delta := reasonDelta(t, d, func() { v, out = f.Run(t, d.objs.XlbLbProg, in) })
	if v != xdpTX {
		t.Fatalf("verdict %s, want TX", verdictNames[v])
	}
	if len(delta) != 0 {
		t.Errorf("a forward counted reasons %v", delta)
	}
	if !bytes.Equal(out[0:6], fxRouterMAC) || !bytes.Equal(out[6:12], f.MAC) {
		t.Errorf("MACs dst %x src %x, want %x %x", out[0:6], out[6:12], fxRouterMAC, f.MAC)
	}
	inner := checkOuter(t, out, 4, fxBackend, len(in)-14, true)
	checkInner(t, inner, in)

	c, err := d.ServiceCounters(0)
	if err != nil {
		t.Fatal(err)
	}
	if c.Packets != 1 || c.Bytes != uint64(len(in)-14) {
		t.Errorf("service counters %+v, want 1 packet of %d bytes", c, len(in)-14)
	}
	b, _ := d.BackendCounters(0)
	if b != c {
		t.Errorf("backend counters %+v, want %+v", b, c)
	}
}

func TestLBEncapGUE(t *testing.T) {
	d, f := newFixtureLB(t)
	p := pkt{Src: fxClient, Dst: fxVIP, Sport: 5353, Dport: 53, Proto: 17, Payload: []byte("query")}
	in := p.Frame(f.MAC)
	v, out := f.Run(t, d.objs.XlbLbProg, in)
	if v != xdpTX {
		t.Fatalf("verdict %s, want TX", verdictNames[v])
	}
	rest := checkOuter(t, out, 17, fxBackend, len(in)-14, false)
	udp, gue := rest[:8], rest[8:12]
	sport := binary.BigEndian.Uint16(udp[0:])
	if sport < 0xc000 {
		t.Errorf("GUE source port %d outside the ephemeral range", sport)
	}
	want := uint16(0xc000 | FlowHash(fxClient, fxVIP, 5353, 53, 17)&0x3fff)
	if sport != want {
		t.Errorf("GUE source port %d, want %d (from the flow hash)", sport, want)
	}
	if got := binary.BigEndian.Uint16(udp[2:]); got != 6080 {
		t.Errorf("GUE destination port %d, want 6080", got)
	}
	if got := int(binary.BigEndian.Uint16(udp[4:])); got != len(in)-14+12 {
		t.Errorf("UDP length %d, want %d", got, len(in)-14+12)
	}
	if !bytes.Equal(gue, []byte{0, 4, 0, 0}) {
		t.Errorf("GUE header %x, want 00040000 (variant 0, IPv4 inside)", gue)
	}
	checkInner(t, rest[12:], in)
}

func TestLBRedirect(t *testing.T) {
	d, f := newFixtureLB(t)
	in := tcpTo(netip.MustParseAddr("10.99.0.2"), 80).Frame(f.MAC)
	v, out := f.Run(t, d.objs.XlbLbProg, in)
	if v != xdpRedirect {
		t.Fatalf("verdict %s, want REDIRECT (backend behind another interface)", verdictNames[v])
	}
	if !bytes.Equal(out[0:6], fxOtherMAC) {
		t.Errorf("destination MAC %x, want %x", out[0:6], fxOtherMAC)
	}
	checkInner(t, checkOuter(t, out, 4, fxRedirBE, len(in)-14, true), in)
}

func TestLBNoNeighbourPassesEncapsulated(t *testing.T) {
	d, f := newFixtureLB(t)
	in := tcpTo(netip.MustParseAddr("10.99.0.3"), 80).Frame(f.MAC)
	var v uint32
	var out []byte
	delta := reasonDelta(t, d, func() { v, out = f.Run(t, d.objs.XlbLbProg, in) })
	if v != xdpPass {
		t.Fatalf("verdict %s, want PASS", verdictNames[v])
	}
	if delta["pass_no_neigh"] != 1 || len(delta) != 1 {
		t.Errorf("reasons %v, want pass_no_neigh 1", delta)
	}
	// Handed to the kernel encapsulated, still addressed to this host's MAC.
	if !bytes.Equal(out[0:6], f.MAC) {
		t.Errorf("destination MAC %x, want ours %x", out[0:6], f.MAC)
	}
	checkInner(t, checkOuter(t, out, 4, fxNoNeighBE, len(in)-14, true), in)
}

func TestLBTooBig(t *testing.T) {
	d, f := newFixtureLB(t)
	big := tcpTo(netip.MustParseAddr("10.99.0.4"), 80)
	big.Payload = make([]byte, 1400-40) // a 1400-byte datagram; the route MTU is 1400
	in := big.Frame(f.MAC)

	var v uint32
	var out []byte
	delta := reasonDelta(t, d, func() { v, out = f.Run(t, d.objs.XlbLbProg, in) })
	if v != xdpTX || delta["tx_icmp_too_big"] != 1 {
		t.Fatalf("DF set: verdict %s reasons %v, want TX with tx_icmp_too_big", verdictNames[v], delta)
	}
	if !bytes.Equal(out[0:6], srcMAC) || !bytes.Equal(out[6:12], f.MAC) {
		t.Errorf("ICMP MACs dst %x src %x, want back to the sender", out[0:6], out[6:12])
	}
	ip := out[14:34]
	if csum(ip) != 0 || ip[9] != 1 {
		t.Fatalf("ICMP reply IP header bad: %x", ip)
	}
	if got := netip.AddrFrom4([4]byte(ip[16:20])); got != fxClient {
		t.Errorf("ICMP to %v, want the client %v", got, fxClient)
	}
	icmp := out[34:]
	quote := 20 + 8
	if len(icmp) != 8+quote || int(binary.BigEndian.Uint16(ip[2:])) != 20+8+quote {
		t.Fatalf("ICMP length %d (IP total %d), want 8+%d", len(icmp), binary.BigEndian.Uint16(ip[2:]), quote)
	}
	if icmp[0] != 3 || icmp[1] != 4 {
		t.Errorf("ICMP type/code %d/%d, want 3/4", icmp[0], icmp[1])
	}
	if csum(icmp) != 0 {
		t.Errorf("ICMP checksum invalid")
	}
	if mtu := binary.BigEndian.Uint16(icmp[6:]); mtu != 1400-20 {
		t.Errorf("next-hop MTU %d, want %d (route MTU minus IPIP)", mtu, 1400-20)
	}
	if !bytes.Equal(icmp[8:], in[14:14+quote]) {
		t.Errorf("quoted header differs from the original")
	}

	big.DF = false
	in = big.Frame(f.MAC)
	delta = reasonDelta(t, d, func() { v, out = f.Run(t, d.objs.XlbLbProg, in) })
	if v != xdpDrop || delta["drop_too_big"] != 1 {
		t.Fatalf("DF clear: verdict %s reasons %v, want DROP with drop_too_big", verdictNames[v], delta)
	}

	// Just fitting: 1380 + 20 = 1400.
	big.DF = true
	big.Payload = big.Payload[:1380-40]
	in = big.Frame(f.MAC)
	if v, _ = f.Run(t, d.objs.XlbLbProg, in); v != xdpTX {
		t.Fatalf("a packet that fits after encapsulation: verdict %s, want TX", verdictNames[v])
	}
}

// TestLBVerdicts covers everything that is not a plain forward: each case
// gets its verdict, exactly one reason counted, and for PASS the frame
// untouched.
func TestLBVerdicts(t *testing.T) {
	d, f := newFixtureLB(t)
	vip := fxVIP
	other := netip.MustParseAddr("10.0.2.99")

	withOptions := tcpTo(vip, 80)
	withOptions.Options = []byte{0x01, 0x01, 0x01, 0x00} // NOP NOP NOP EOL

	arp := make([]byte, 42)
	copy(arp, f.MAC)
	binary.BigEndian.PutUint16(arp[12:], 0x0806)
	ipv6 := make([]byte, 14+40+20)
	binary.BigEndian.PutUint16(ipv6[12:], 0x86dd)
	ipv6[14] = 0x60
	ipv6[19], ipv6[20] = 20, 6 // TCP, to :: (no VIP)

	ethOnly := tcpTo(vip, 80).Frame(f.MAC)[:14]
	ihl4 := tcpTo(vip, 80).Frame(f.MAC)
	ihl4[14] = 0x44
	v6inv4 := tcpTo(vip, 80).Frame(f.MAC)
	v6inv4[14] = 0x65
	longLen := tcpTo(vip, 80).Frame(f.MAC)
	binary.BigEndian.PutUint16(longLen[16:], uint16(len(longLen)-14+1))
	shortLen := tcpTo(vip, 80).Frame(f.MAC)
	binary.BigEndian.PutUint16(shortLen[16:], 19)
	truncL4 := tcpTo(vip, 80).Frame(f.MAC)[:14+20+2]
	binary.BigEndian.PutUint16(truncL4[16:], 22)
	truncIP := tcpTo(vip, 80).Frame(f.MAC)[:14+10]

	firstFrag := tcpTo(vip, 80)
	firstFrag.DF, firstFrag.FlagsFrag = false, 0x2000
	laterFrag := tcpTo(vip, 80)
	laterFrag.DF, laterFrag.FlagsFrag = false, 100
	fragOther := tcpTo(other, 80)
	fragOther.DF, fragOther.FlagsFrag = false, 0x2000
	ttl1 := tcpTo(vip, 80)
	ttl1.TTL = 1
	icmp := tcpTo(vip, 80)
	icmp.Proto = 1

	cases := []struct {
		name      string
		frame     []byte
		verdict   uint32
		reason    string
		unchanged bool
	}{
		{"ARP", arp, xdpPass, "pass_not_ipv4", true},
		{"IPv6 not to a VIP", ipv6, xdpPass, "pass_no_service", true},
		{"TCP to a non-VIP", tcpTo(other, 80).Frame(f.MAC), xdpPass, "pass_no_service", true},
		{"TCP to the VIP, other port", tcpTo(vip, 22).Frame(f.MAC), xdpDrop, "drop_vip_no_service", false},
		{"UDP to the TCP-only port", pkt{Src: fxClient, Dst: vip, Sport: 1, Dport: 80, Proto: 17}.Frame(f.MAC), xdpDrop, "drop_vip_no_service", false},
		{"ICMP to the VIP", icmp.Frame(f.MAC), xdpDrop, "drop_vip_no_service", false},
		{"ICMP to a non-VIP", func() []byte { p := icmp; p.Dst = other; return p.Frame(f.MAC) }(), xdpPass, "pass_not_tcp_udp", true},
		{"TTL 1", ttl1.Frame(f.MAC), xdpPass, "pass_ttl_exceeded", true},
		{"Ethernet header only", ethOnly, xdpDrop, "drop_malformed_ip", false},
		{"truncated IPv4 header", truncIP, xdpDrop, "drop_malformed_ip", false},
		{"IHL 4", ihl4, xdpDrop, "drop_malformed_ip", false},
		{"version 6 in an IPv4 frame", v6inv4, xdpDrop, "drop_malformed_ip", false},
		{"total length beyond the frame", longLen, xdpDrop, "drop_malformed_ip", false},
		{"total length below the header", shortLen, xdpDrop, "drop_malformed_ip", false},
		{"L4 shorter than the ports", truncL4, xdpDrop, "drop_malformed_l4", false},
		{"first fragment to a VIP", firstFrag.Frame(f.MAC), xdpDrop, "drop_fragment", false},
		{"later fragment to a VIP", laterFrag.Frame(f.MAC), xdpDrop, "drop_fragment", false},
		{"fragment to a non-VIP", fragOther.Frame(f.MAC), xdpPass, "pass_no_service", true},
		{"unreachable backend", tcpTo(netip.MustParseAddr("10.99.0.5"), 80).Frame(f.MAC), xdpDrop, "drop_no_route", false},
		{"table points at an empty backend", tcpTo(netip.MustParseAddr("10.99.0.6"), 80).Frame(f.MAC), xdpDrop, "drop_no_backend", false},
		{"IP options to a VIP", withOptions.Frame(f.MAC), xdpTX, "note_ip_options", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var v uint32
			var out []byte
			delta := reasonDelta(t, d, func() { v, out = f.Run(t, d.objs.XlbLbProg, c.frame) })
			if v != c.verdict {
				t.Errorf("verdict %s, want %s", verdictNames[v], verdictNames[c.verdict])
			}
			if delta[c.reason] != 1 || len(delta) != 1 {
				t.Errorf("reasons %v, want exactly %s 1", delta, c.reason)
			}
			if c.unchanged && !bytes.Equal(out, c.frame) {
				t.Errorf("frame changed:\n got %x\nwant %x", out, c.frame)
			}
		})
	}
	t.Run("IP options are forwarded intact", func(t *testing.T) {
		in := withOptions.Frame(f.MAC)
		_, out := f.Run(t, d.objs.XlbLbProg, in)
		checkInner(t, checkOuter(t, out, 4, fxBackend, len(in)-14, true), in)
	})
}

// splitWebService points the fixture's web service (VIP:80/tcp) at two
// backends, slot by slot in turn, and returns the table and the backends'
// addresses by id.
func splitWebService(t *testing.T, d *Dataplane) ([]uint32, []netip.Addr) {
	t.Helper()
	table := make([]uint32, fxTableSize)
	for i := range table {
		table[i] = uint32(i % 2) // backends 0 (10.0.3.2) and 1 (10.0.4.2)
	}
	if err := d.UpsertService(Service{ID: 0, Key: ServiceKey{fxVIP, 80, ProtoTCP}, Encap: EncapIPIP, Table: table}); err != nil {
		t.Fatal(err)
	}
	return table, []netip.Addr{fxBackend, fxRedirBE}
}

// TestLBFlowHashMatchesGo checks, for each flow hash and many flows, that
// the program computes what FlowHashOf does: the Go mirror is what tools
// and tests rely on. A GUE tunnel's source port carries 14 bits of the
// hash itself; a table of two backends that alternate by slot shows its
// range reduction.
func TestLBFlowHashMatchesGo(t *testing.T) {
	for _, kind := range []wire.FlowHash{wire.FlowHashFmix64, wire.FlowHashLookup3} {
		t.Run(kind.String(), func(t *testing.T) {
			d, f := newFixtureLBHashing(t, kind)
			const n = 64
			table, backends := splitWebService(t, d)
			for i := 0; i < n; i++ {
				src := netip.AddrFrom4([4]byte{10, 0, 2, byte(2 + i)})
				sport := uint16(30000 + 7*i)
				p := tcpTo(fxVIP, 80)
				p.Src, p.Sport = src, sport
				_, out := f.Run(t, d.objs.XlbLbProg, p.Frame(f.MAC))
				got := netip.AddrFrom4([4]byte(out[30:34]))
				want := backends[table[Slot(FlowHashOf(kind, src, fxVIP, sport, 80, 6), fxTableSize)]]
				if got != want {
					t.Fatalf("flow %v:%d went to %v, FlowHashOf predicts %v", src, sport, got, want)
				}

				u := pkt{Src: src, Dst: fxVIP, Sport: sport, Dport: 53, Proto: 17, Payload: []byte("query")}
				_, out = f.Run(t, d.objs.XlbLbProg, u.Frame(f.MAC))
				gotPort := binary.BigEndian.Uint16(out[34:36])
				wantPort := uint16(0xc000 | FlowHashOf(kind, src, fxVIP, sport, 53, 17)&0x3fff)
				if gotPort != wantPort {
					t.Fatalf("UDP flow %v:%d: GUE source port %#x, FlowHashOf predicts %#x", src, sport, gotPort, wantPort)
				}
			}
		})
	}
}

// icmpAbout builds an ICMP error from a router on the return path to the
// VIP, quoting a reply the backend sent from vip:vport to client:cport.
func icmpAbout(mac []byte, typ, code uint8, vip, client netip.Addr, vport, cport uint16) []byte {
	reply := tcpTo(client, cport)
	reply.Src, reply.Sport = vip, vport
	quoted := reply.Frame(mac)[14 : 14+20+8]
	icmp := append([]byte{typ, code, 0, 0, 0, 0, 0x05, 0x78}, quoted...) // next-hop MTU 1400
	binary.BigEndian.PutUint16(icmp[2:], csum(icmp))
	p := pkt{Src: netip.MustParseAddr("10.0.9.1"), Dst: vip, Proto: 1}
	f := p.Frame(mac)
	// frame() wrote a TCP header for protocol 1; put the ICMP message there.
	f = append(f[:14+20], icmp...)
	binary.BigEndian.PutUint16(f[16:], uint16(20+len(icmp)))
	f[24], f[25] = 0, 0
	binary.BigEndian.PutUint16(f[24:], csum(f[14:34]))
	return f
}

// TestLBICMPErrorsReachTheFlowsBackend: path MTU discovery for direct
// server return. A router between a backend and a client answers a too
// big reply with "fragmentation needed" to the reply's source, the VIP;
// the LB must hand it to the backend that owns the flow.
func TestLBICMPErrorsReachTheFlowsBackend(t *testing.T) {
	d, f := newFixtureLB(t)
	table, backends := splitWebService(t, d)
	seen := map[netip.Addr]bool{}
	for i := 0; i < 32; i++ {
		client := netip.AddrFrom4([4]byte{10, 0, 2, byte(2 + i)})
		cport := uint16(30000 + 13*i)
		// Where the flow's own packets go:
		fwd := tcpTo(fxVIP, 80)
		fwd.Src, fwd.Sport = client, cport
		_, out := f.Run(t, d.objs.XlbLbProg, fwd.Frame(f.MAC))
		flowBackend := netip.AddrFrom4([4]byte(out[30:34]))
		if want := backends[table[Slot(FlowHash(client, fxVIP, cport, 80, 6), fxTableSize)]]; flowBackend != want {
			t.Fatalf("flow went to %v, want %v", flowBackend, want)
		}

		in := icmpAbout(f.MAC, 3, 4, fxVIP, client, 80, cport)
		var v uint32
		delta := reasonDelta(t, d, func() { v, out = f.Run(t, d.objs.XlbLbProg, in) })
		if v != xdpTX && v != xdpRedirect {
			t.Fatalf("ICMP error: verdict %s, want a forward", verdictNames[v])
		}
		if delta["note_icmp_to_backend"] != 1 {
			t.Errorf("reasons %v, want note_icmp_to_backend 1", delta)
		}
		got := netip.AddrFrom4([4]byte(out[30:34]))
		if got != flowBackend {
			t.Fatalf("ICMP error about flow %v:%d went to %v, the flow's backend is %v", client, cport, got, flowBackend)
		}
		checkInner(t, checkOuter(t, out, 4, got, len(in)-14, false), in)
		seen[got] = true
	}
	if len(seen) != 2 {
		t.Errorf("32 flows' ICMP errors reached %d backends, want both", len(seen))
	}

	// Not an error, or about a flow of another VIP: dropped, never looped.
	echo := icmpAbout(f.MAC, 8, 0, fxVIP, fxClient, 80, 40000)
	other := icmpAbout(f.MAC, 3, 4, fxVIP, fxClient, 80, 40000)
	copy(other[14+20+8+12:], []byte{10, 99, 0, 9}) // quoted source is not this VIP
	for name, in := range map[string][]byte{"echo request": echo, "error quoting another source": other} {
		var v uint32
		delta := reasonDelta(t, d, func() { v, _ = f.Run(t, d.objs.XlbLbProg, in) })
		if v != xdpDrop || delta["drop_vip_no_service"] != 1 {
			t.Errorf("%s: verdict %s reasons %v, want DROP drop_vip_no_service", name, verdictNames[v], delta)
		}
	}
}

// TestLBICMPErrorQuoteWithinDatagram: the quote of an ICMP error is read
// within the datagram its IPv4 total length gives, never from the bytes
// after it (Ethernet padding, whatever a sender put there). An error
// whose ICMP header or quote lies past its datagram, even if the frame
// holds the bytes, is no error about a reply: dropped as any other ICMP
// to a VIP. The same error with its full quote in the datagram is
// forwarded.
func TestLBICMPErrorQuoteWithinDatagram(t *testing.T) {
	d, f := newFixtureLB(t)
	splitWebService(t, d)
	full := icmpAbout(f.MAC, 3, 4, fxVIP, fxClient, 80, 40000)
	// The outer datagram is 20 + 8 + 28 bytes: IP, ICMP, quote.
	cut := func(totLen int) []byte {
		fr := slices.Clone(full)
		binary.BigEndian.PutUint16(fr[16:], uint16(totLen))
		fr[24], fr[25] = 0, 0
		binary.BigEndian.PutUint16(fr[24:], csum(fr[14:34]))
		return fr
	}
	for _, tc := range []struct {
		name   string
		totLen int
	}{
		{"ICMP header partly past the datagram", 20 + 4},
		{"quoted IP header partly past the datagram", 20 + 8 + 12},
		{"quoted ports past the datagram", 20 + 8 + 20},
		{"quoted ports partly past the datagram", 20 + 8 + 20 + 2},
	} {
		in := cut(tc.totLen)
		var v uint32
		delta := reasonDelta(t, d, func() { v, _ = f.Run(t, d.objs.XlbLbProg, in) })
		if v != xdpDrop || delta["drop_vip_no_service"] != 1 || len(delta) != 1 {
			t.Errorf("%s (total length %d, frame %d bytes): verdict %s reasons %v, want DROP drop_vip_no_service",
				tc.name, tc.totLen, len(in), verdictNames[v], delta)
		}
	}
	var v uint32
	var out []byte
	delta := reasonDelta(t, d, func() { v, out = f.Run(t, d.objs.XlbLbProg, full) })
	if (v != xdpTX && v != xdpRedirect) || delta["note_icmp_to_backend"] != 1 {
		t.Fatalf("the whole error: verdict %s reasons %v, want a forward and note_icmp_to_backend", verdictNames[v], delta)
	}
	checkInner(t, checkOuter(t, out, 4, netip.AddrFrom4([4]byte(out[30:34])), len(full)-14, false), full)
}

// TestServiceCountersOutliveBackends: a service's counters are the sum of
// its backends' and keep what departed backends counted, until the
// service itself goes.
func TestServiceCountersOutliveBackends(t *testing.T) {
	d, f := newFixtureLB(t)
	for id, a := range map[uint32]string{20: "10.0.3.20", 21: "10.0.3.21"} {
		if err := d.UpsertBackend(id, apOf(netip.MustParseAddr(a))); err != nil {
			t.Fatal(err)
		}
	}
	key := ServiceKey{netip.MustParseAddr("10.99.0.9"), 80, ProtoTCP}
	table := func(ids ...uint32) []uint32 {
		tb := make([]uint32, fxTableSize)
		for i := range tb {
			tb[i] = ids[i%len(ids)]
		}
		return tb
	}
	if err := d.UpsertService(Service{ID: 9, Key: key, Encap: EncapIPIP, Table: table(20, 21)}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		p := tcpTo(key.VIP, 80)
		p.Sport = uint16(20000 + i)
		if v, _ := f.Run(t, d.objs.XlbLbProg, p.Frame(f.MAC)); v != xdpTX {
			t.Fatalf("verdict %s", verdictNames[v])
		}
	}
	svc, _ := d.ServiceCounters(9)
	b20, _ := d.BackendCounters(20)
	b21, _ := d.BackendCounters(21)
	if svc.Packets != 40 || b20.Packets+b21.Packets != 40 || b20.Packets == 0 || b21.Packets == 0 {
		t.Fatalf("service %d packets, backends %d + %d, want 40 in all, both used", svc.Packets, b20.Packets, b21.Packets)
	}
	// Backend 21 leaves the table, then is deleted: the service keeps its
	// packets.
	if err := d.UpsertService(Service{ID: 9, Key: key, Encap: EncapIPIP, Table: table(20)}); err != nil {
		t.Fatal(err)
	}
	if err := d.DeleteBackend(21); err != nil {
		t.Fatal(err)
	}
	if got, _ := d.ServiceCounters(9); got != svc {
		t.Fatalf("after a backend left: %+v, want %+v", got, svc)
	}
	// The service goes: nothing of it stays for a later one with its id,
	// even on a backend id the agent has not deleted yet.
	if err := d.DeleteService(9, key); err != nil {
		t.Fatal(err)
	}
	if err := d.UpsertService(Service{ID: 9, Key: key, Encap: EncapIPIP, Table: table(20)}); err != nil {
		t.Fatal(err)
	}
	if got, _ := d.ServiceCounters(9); got.Packets != 0 {
		t.Errorf("a new service with a reused id starts at %d packets, want 0", got.Packets)
	}
}
