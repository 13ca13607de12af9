package lb

import (
	"bytes"
	"encoding/binary"
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

// An IPv6 backend cannot be daisy-chained (the hint names IPv4 owners
// and travels over IPv4), whatever the VIP's family; an IPv6 VIP can.
func TestUpsertGUEHintFamilies(t *testing.T) {
	d, _ := newFixtureLB6(t)
	table := make([]uint32, fxTableSize)
	for i := range table {
		table[i] = 0 // fx6Services[0]'s backend: fxBackend6
	}
	for _, vip := range []netip.Addr{netip.MustParseAddr("fd00:99::11"), netip.MustParseAddr("10.99.1.11")} {
		err := d.UpsertService(Service{ID: 31, Key: ServiceKey{vip, 80, ProtoTCP}, Encap: EncapGUEHint, Table: table})
		if err == nil || !strings.Contains(err.Error(), "reaches IPv4 backends only") {
			t.Errorf("VIP %v, IPv6 backend, hints: error %v, want one that says it reaches IPv4 backends only", vip, err)
		}
	}
}
