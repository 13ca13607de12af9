package lb

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// TestLB6GUEHint: a packet to a daisy-chained IPv6 VIP goes to its slot's
// IPv4 backend in GUE over IPv4 (protocol 41 inside) with the slot's hint
// (both previous owners, when the slot changed, the service's
// generation), in the slot the Go flow hash predicts, the inner IPv6
// packet whole but for its hop limit; an ICMPv6 error about a flow's
// reply goes the flow's way; and an IPv4 VIP's hinted packets go on as
// before beside it.
func TestLB6GUEHint(t *testing.T) {
	d, f := newFixtureLB6(t)
	h := newHintService(t, d) // IPv4 backends 10.0.3.20 and .21, every slot hinted
	vip6 := netip.MustParseAddr("fd00:99::10")
	svc := h.svc
	svc.ID, svc.Key = 30, ServiceKey{vip6, 81, ProtoTCP}
	if err := d.UpsertService(svc); err != nil {
		t.Fatal(err)
	}
	seen := map[netip.Addr]bool{}
	withPrev2 := 0
	for i := range 32 {
		p := tcp6To(vip6, 81)
		p.Src = netip.AddrFrom16([16]byte{0xfd, 0, 0, 2, 15: byte(2 + i)})
		p.Sport = uint16(30000 + 11*i)
		in := p.frame(f.MAC)
		var v uint32
		var out []byte
		delta := reasonDelta(t, d, func() { v, out = f.Run(t, d.objs.XlbLbProg, in) })
		if v != xdpTX || len(delta) != 0 {
			t.Fatalf("flow %d: verdict %s reasons %v, want TX and none", i, verdictNames[v], delta)
		}
		hash := FlowHash(p.Src, vip6, p.Sport, 81, 6)
		slot := Slot(hash, fxTableSize)
		c := svc.Chain[slot]
		dst := h.addrs[svc.Table[slot]]
		rest := checkOuterOf(t, out, 17, dst, len(in)-14, hintOverhead, true)
		if len(rest) < 28 {
			t.Fatalf("flow %d: %d bytes after the outer IPv4 header, too short for UDP, GUE and a hint", i, len(rest))
		}
		udp, gue, hint, inner := rest[:8], rest[8:12], rest[12:28], rest[28:]
		if got := binary.BigEndian.Uint16(udp[0:]); got != uint16(0xc000|hash&0x3fff) {
			t.Errorf("flow %d: UDP source port %d, want %d (from the flow hash)", i, got, 0xc000|hash&0x3fff)
		}
		if binary.BigEndian.Uint16(udp[2:]) != wire.GUEPort || int(binary.BigEndian.Uint16(udp[4:])) != len(in)-14+8+4+16 || binary.BigEndian.Uint16(udp[6:]) != 0 {
			t.Errorf("flow %d: UDP header %x, want port %d, length %d, checksum 0", i, udp, wire.GUEPort, len(in)-14+8+4+16)
		}
		if !bytes.Equal(gue, []byte{4, 41, 0, 0}) {
			t.Errorf("flow %d: GUE header %x, want 04290000 (variant 0, hlen 4, IPv6 inside)", i, gue)
		}
		var got [4]uint32
		for j := range got {
			got[j] = binary.BigEndian.Uint32(hint[4*j:])
		}
		if want := [4]uint32{be32(c.Prev), be32(c.Prev2), c.Changed, svc.Generation}; got != want {
			t.Errorf("flow %d: hint (prev, prev2, changed, generation) %#x, want %#x", i, got, want)
		}
		if !bytes.Equal(inner, decremented(in)) {
			t.Errorf("flow %d: inner packet\n got %x\nwant %x", i, inner, decremented(in))
		}
		if c.Prev2.IsValid() {
			withPrev2++
		}
		seen[dst] = true
	}
	if len(seen) != 2 || withPrev2 == 0 || withPrev2 == 32 {
		t.Errorf("32 flows reached %d backends, %d with a second previous owner; want both backends, and some but not all", len(seen), withPrev2)
	}

	// An ICMPv6 error about a reply of one of those flows goes to the
	// flow's backend, with its slot's hint.
	for i := range 4 {
		client := netip.AddrFrom16([16]byte{0xfd, 0, 0, 2, 15: byte(2 + i)})
		cport := uint16(30000 + 11*i)
		in := icmp6About(f.MAC, 2, vip6, client, 81, cport)
		v, out := f.Run(t, d.objs.XlbLbProg, in)
		slot := Slot(FlowHash(client, vip6, cport, 81, 6), fxTableSize)
		c := svc.Chain[slot]
		rest := checkOuterOf(t, out, 17, h.addrs[svc.Table[slot]], len(in)-14, hintOverhead, true)
		if v != xdpTX || len(rest) < 28 || !bytes.Equal(rest[28:], decremented(in)) {
			t.Fatalf("ICMPv6 error about flow %d: verdict %s; want it to the flow's backend, whole", i, verdictNames[v])
		}
		if got := [2]uint32{binary.BigEndian.Uint32(rest[12:]), binary.BigEndian.Uint32(rest[16:])}; got != [2]uint32{be32(c.Prev), be32(c.Prev2)} {
			t.Errorf("ICMPv6 error about flow %d: hint owners %#x, want the slot's %#x", i, got, [2]uint32{be32(c.Prev), be32(c.Prev2)})
		}
	}

	// The IPv4 VIP of the same table and chain, beside it.
	p4 := tcpTo(fxVIP, 81)
	in := p4.Frame(f.MAC)
	v, out := f.Run(t, d.objs.XlbLbProg, in)
	if v != xdpTX {
		t.Fatalf("IPv4 VIP: verdict %s, want TX", verdictNames[v])
	}
	slot := Slot(FlowHash(p4.Src, fxVIP, p4.Sport, 81, 6), fxTableSize)
	c := svc.Chain[slot]
	checkHintFrame(t, out, in, h.addrs[svc.Table[slot]], [4]uint32{be32(c.Prev), be32(c.Prev2), c.Changed, svc.Generation})

	// Without a chain the hint is zero but for the generation, as for
	// IPv4.
	svc.Chain = nil
	if err := d.UpsertService(svc); err != nil {
		t.Fatal(err)
	}
	p := tcp6To(vip6, 81)
	in = p.frame(f.MAC)
	if v, out = f.Run(t, d.objs.XlbLbProg, in); v != xdpTX || len(out) < 14+hintOverhead {
		t.Fatalf("without a chain: verdict %s, %d bytes; want TX with a hint", verdictNames[v], len(out))
	}
	if hint := out[14+20+12 : 14+20+28]; !bytes.Equal(hint[:12], make([]byte, 12)) || binary.BigEndian.Uint32(hint[12:]) != svc.Generation {
		t.Errorf("without a chain: hint %x, want zero owners and change, generation %d", hint, svc.Generation)
	}
}

// wantHintFrame is the frame the program must send for inner (hop limit
// or TTL already decremented) to daisy-chained backend be with the slot's
// hint c and generation gen: wantEncap's GUE frame with the hint in the
// backend's family after the GUE header (hlen 4 and 16-byte hint over
// IPv4, hlen 10 and 40-byte hint over IPv6), the lengths grown by it.
func wantHintFrame(t *testing.T, dstMAC, srcMAC net.HardwareAddr, inner []byte, be netip.Addr, c ChainSlot, gen uint32, hash uint32) []byte {
	t.Helper()
	plain := wantEncap(t, dstMAC, srcMAC, inner, be, EncapGUE, hash)
	var hint []byte
	if be.Is6() {
		hint = make([]byte, 40)
		for i, p := range []netip.Addr{c.Prev, c.Prev2} {
			if p.IsValid() {
				a := p.As16()
				copy(hint[16*i:], a[:])
			}
		}
		binary.BigEndian.PutUint32(hint[32:], c.Changed)
		binary.BigEndian.PutUint32(hint[36:], gen)
	} else {
		hint = make([]byte, 16)
		binary.BigEndian.PutUint32(hint[0:], be32(c.Prev))
		binary.BigEndian.PutUint32(hint[4:], be32(c.Prev2))
		binary.BigEndian.PutUint32(hint[8:], c.Changed)
		binary.BigEndian.PutUint32(hint[12:], gen)
	}
	outer := 20
	if be.Is6() {
		outer = 40
	}
	udp := 14 + outer
	out := append(append(append([]byte{}, plain[:udp+12]...), hint...), plain[udp+12:]...)
	binary.BigEndian.PutUint16(out[udp+4:], binary.BigEndian.Uint16(out[udp+4:])+uint16(len(hint)))
	out[udp+8] = byte(len(hint) / 4)
	if be.Is6() {
		binary.BigEndian.PutUint16(out[14+4:], binary.BigEndian.Uint16(out[14+4:])+uint16(len(hint)))
	} else {
		binary.BigEndian.PutUint16(out[14+2:], binary.BigEndian.Uint16(out[14+2:])+uint16(len(hint)))
		out[14+10], out[14+11] = 0, 0
		binary.BigEndian.PutUint16(out[14+10:], csum(out[14:14+20]))
	}
	return out
}

// hintedIPv6Backends are two daisy-chained services with IPv6 backends
// (and one IPv4 one), behind an IPv6 and an IPv4 VIP, port 82: their
// backends by id, the table and chain slots, the VIPs.
type hintedIPv6Backends struct {
	addrs      map[uint32]netip.Addr
	table      []uint32
	chain      []ChainSlot
	vip6, vip4 netip.Addr
}

// installHintedIPv6Backends installs hintedIPv6Backends as services 32
// and 33 of d (the IPv6 fixture's).
func installHintedIPv6Backends(t testing.TB, d *Dataplane) hintedIPv6Backends {
	t.Helper()
	addrs := map[uint32]netip.Addr{
		40: netip.MustParseAddr("fd00:3::20"), 41: netip.MustParseAddr("fd00:3::21"),
		42: netip.MustParseAddr("10.0.3.20"),
	}
	for id, a := range addrs {
		if err := d.UpsertBackend(id, apOf(a)); err != nil {
			t.Fatal(err)
		}
	}
	table := make([]uint32, fxTableSize)
	chain := make([]ChainSlot, fxTableSize)
	for i := range table {
		table[i] = 40 + uint32(i%3)
		chain[i].Changed = 1_700_000_000 + uint32(i)
		if table[i] == 42 {
			chain[i].Prev = netip.AddrFrom4([4]byte{10, 0, 9, byte(1 + i%250)})
			continue
		}
		chain[i].Prev = netip.AddrFrom16([16]byte{0xfd, 0, 0, 9, 15: byte(1 + i%250)})
		if i%2 == 0 {
			chain[i].Prev2 = netip.AddrFrom16([16]byte{0xfd, 0, 0, 8, 14: byte(i >> 8), 15: byte(i)})
		}
	}
	vip6, vip4 := netip.MustParseAddr("fd00:99::20"), netip.MustParseAddr("10.99.1.20")
	for id, vip := range map[uint32]netip.Addr{32: vip6, 33: vip4} {
		svc := Service{ID: id, Key: ServiceKey{vip, 82, ProtoTCP}, Encap: EncapGUEHint, Table: table, Chain: chain, Generation: 1_700_009_999}
		if err := d.UpsertService(svc); err != nil {
			t.Fatalf("a daisy-chained service on %v with IPv6 backends: %v", vip, err)
		}
	}
	return hintedIPv6Backends{addrs, table, chain, vip6, vip4}
}

// TestLBGUEHintIPv6Backends: a daisy-chained table of IPv6 and IPv4
// backends, behind an IPv6 VIP and an IPv4 VIP. A slot of an IPv6
// backend goes in GUE over IPv6 with the 40-byte hint (hlen 10) naming
// its IPv6 owners, one of an IPv4 backend in GUE over IPv4 with the
// 16-byte hint, each byte for byte as the Go side predicts the slot,
// owners, change and generation; ICMPv6 errors about replies follow
// their flows.
func TestLBGUEHintIPv6Backends(t *testing.T) {
	d, f := newFixtureLB6(t)
	h := installHintedIPv6Backends(t, d)
	addrs, table, chain, vip6, vip4 := h.addrs, h.table, h.chain, h.vip6, h.vip4
	forms := map[string]int{}
	check := func(name string, in []byte, flowHash uint32) {
		t.Helper()
		var v uint32
		var out []byte
		delta := reasonDelta(t, d, func() { v, out = f.Run(t, d.objs.XlbLbProg, in) })
		slot := Slot(flowHash, fxTableSize)
		be := addrs[table[slot]]
		want := wantHintFrame(t, fxRouterMAC, f.MAC, decremented(in), be, chain[slot], 1_700_009_999, flowHash)
		icmp := strings.HasPrefix(name, "ICMPv6")
		if v != xdpTX || len(delta) != 0 && !(icmp && len(delta) == 1 && delta["note_icmp_to_backend"] == 1) {
			t.Fatalf("%s: verdict %s reasons %v, want TX and none (an ICMPv6 error: note_icmp_to_backend)", name, verdictNames[v], delta)
		}
		if !bytes.Equal(out, want) {
			t.Fatalf("%s (slot %d, backend %v):\n got %x\nwant %x", name, slot, be, out, want)
		}
		forms[family(be)]++
	}
	for i := range 48 {
		p := tcp6To(vip6, 82)
		p.Src = netip.AddrFrom16([16]byte{0xfd, 0, 0, 2, 15: byte(2 + i)})
		p.Sport = uint16(30000 + 7*i)
		check(fmt.Sprintf("IPv6 flow %d", i), p.frame(f.MAC), FlowHash(p.Src, vip6, p.Sport, 82, 6))

		p4 := tcpTo(vip4, 82)
		p4.Src = netip.AddrFrom4([4]byte{10, 0, 2, byte(2 + i)})
		p4.Sport = uint16(30000 + 7*i)
		check(fmt.Sprintf("IPv4 flow %d", i), p4.Frame(f.MAC), FlowHash(p4.Src, vip4, p4.Sport, 82, 6))
	}
	for i := range 8 {
		client := netip.AddrFrom16([16]byte{0xfd, 0, 0, 2, 15: byte(2 + i)})
		cport := uint16(30000 + 7*i)
		check(fmt.Sprintf("ICMPv6 error about flow %d", i), icmp6About(f.MAC, 2, vip6, client, 82, cport), FlowHash(client, vip6, cport, 82, 6))
	}
	if forms["IPv6"] == 0 || forms["IPv4"] == 0 {
		t.Errorf("frames per backend family %v, want both", forms)
	}
}

// A daisy-chained service takes IPv6 backends, behind either VIP
// family; a slot's hint names owners of its backend's family only, and
// one of the other family is refused at its slot.
func TestUpsertGUEHintFamilies(t *testing.T) {
	d, _ := newFixtureLB6(t)
	table := make([]uint32, fxTableSize)
	for i := range table {
		table[i] = 0 // fx6Services[0]'s backend: fxBackend6
	}
	for i, vip := range []netip.Addr{netip.MustParseAddr("fd00:99::11"), netip.MustParseAddr("10.99.1.11")} {
		svc := Service{ID: 31 + uint32(i), Key: ServiceKey{vip, 80, ProtoTCP}, Encap: EncapGUEHint, Table: table}
		if err := d.UpsertService(svc); err != nil {
			t.Errorf("VIP %v, IPv6 backend, hints: %v", vip, err)
		}
		svc.Chain = make([]ChainSlot, fxTableSize)
		svc.Chain[7].Prev = netip.MustParseAddr("10.0.9.1")
		err := d.UpsertService(svc)
		want := "chain slot 7: previous owner 10.0.9.1 is IPv4 and the slot's backend 0 (fd00:3::2) is IPv6: a hint names owners of its backend's family only"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("VIP %v, an IPv4 owner of an IPv6 backend's slot: error %v, want %q", vip, err, want)
		}
	}
}

// A daisy-chained service's first packet to an IPv6 backend whose
// neighbour is not resolved yet goes to the kernel encapsulated, hint
// and all, as any service's does: the kernel forwards it and resolves
// the neighbour (pass_no_neigh), from an IPv6 VIP and from an IPv4 one.
// Service 0 among them: xlb_lb6's answer for a daisy-chained service
// packs the service's ID, and once made service 0's a number the
// kernel took for a verdict (0xfd, an unknown one: dropped).
func TestLBGUEHintIPv6NoNeighbour(t *testing.T) {
	d, f := newFixtureLB6(t)
	if err := d.UpsertBackend(50, apOf(fxNoNeighBE6)); err != nil {
		t.Fatal(err)
	}
	table := make([]uint32, fxTableSize)
	chain := make([]ChainSlot, fxTableSize)
	for i := range table {
		table[i] = 50
		chain[i].Changed = 1_700_000_000
		chain[i].Prev = netip.MustParseAddr("fd00:9::1")
	}
	vip4 := netip.MustParseAddr("10.99.1.21")
	svcs := map[uint32]ServiceKey{0: fx6Services[0].key, 34: {netip.MustParseAddr("fd00:99::21"), 82, ProtoTCP}, 35: {vip4, 82, ProtoTCP}}
	for id, key := range svcs {
		svc := Service{ID: id, Key: key, Encap: EncapGUEHint, Table: table, Chain: chain, Generation: 1_700_009_999}
		if err := d.UpsertService(svc); err != nil {
			t.Fatal(err)
		}
	}
	for id, key := range svcs {
		var in []byte
		if key.VIP.Is4() {
			in = tcpTo(key.VIP, key.Port).Frame(f.MAC)
		} else {
			in = tcp6To(key.VIP, key.Port).frame(f.MAC)
		}
		var v uint32
		var out []byte
		delta := reasonDelta(t, d, func() { v, out = f.Run(t, d.objs.XlbLbProg, in) })
		if v != xdpPass || len(delta) != 1 || delta["pass_no_neigh"] != 1 {
			t.Errorf("service %d on %v: verdict %d (%s) reasons %v, want PASS and pass_no_neigh", id, key.VIP, v, verdictNames[v], delta)
			continue
		}
		// IPv6, UDP and GUE headers and the 40-byte hint.
		if want := len(in) + 40 + 8 + 4 + 40; len(out) != want {
			t.Errorf("service %d on %v: %d bytes out of %d in, want %d", id, key.VIP, len(out), len(in), want)
		}
	}
}
