package lb

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"slices"
	"testing"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// hintOverhead is XLB_GUE_HINT_OVERHEAD: outer IPv4, UDP, GUE and the
// four hint words.
const hintOverhead = 20 + 8 + 4 + 16

// hintService is a fixture service in EncapGUEHint whose table alternates
// between two backends and whose every slot has a distinct hint; every
// third slot also names an owner before the previous one.
type hintService struct {
	svc   Service
	addrs map[uint32]netip.Addr // backend addresses by id
}

func newHintService(t *testing.T, d *Dataplane) hintService {
	t.Helper()
	addrs := map[uint32]netip.Addr{20: netip.MustParseAddr("10.0.3.20"), 21: netip.MustParseAddr("10.0.3.21")}
	for id, a := range addrs {
		if err := d.UpsertBackend(id, apOf(a)); err != nil {
			t.Fatal(err)
		}
	}
	table := make([]uint32, fxTableSize)
	chain := make([]ChainSlot, fxTableSize)
	for i := range table {
		table[i] = 20 + uint32(i%2)
		chain[i] = ChainSlot{Prev: netip.AddrFrom4([4]byte{10, 0, 9, byte(1 + i%250)}), Changed: 1_700_000_000 + uint32(i)}
		if i%3 == 0 {
			chain[i].Prev2 = netip.AddrFrom4([4]byte{10, 0, 8, byte(1 + i%250)})
		}
	}
	svc := Service{ID: 10, Key: ServiceKey{fxVIP, 81, ProtoTCP}, Encap: EncapGUEHint, Table: table, Chain: chain, Generation: 1_700_009_999}
	if err := d.UpsertService(svc); err != nil {
		t.Fatal(err)
	}
	return hintService{svc, addrs}
}

// checkHintFrame checks a GUE frame with a hint: outer headers to
// wantDst, GUE header with hlen 4, the hint words (prev, prev2, changed,
// generation), the inner packet.
func checkHintFrame(t *testing.T, out, in []byte, wantDst netip.Addr, wantHint [4]uint32) {
	t.Helper()
	rest := checkOuterOf(t, out, 17, wantDst, len(in)-14, hintOverhead, true)
	if len(rest) < 28 {
		t.Fatalf("frame too short for UDP, GUE and a hint: %d bytes after the outer IPv4 header", len(rest))
	}
	udp, gue, hint := rest[:8], rest[8:12], rest[12:28]
	if got := binary.BigEndian.Uint16(udp[2:]); got != wire.GUEPort {
		t.Errorf("UDP destination port %d, want %d", got, wire.GUEPort)
	}
	if got := int(binary.BigEndian.Uint16(udp[4:])); got != len(in)-14+8+4+16 {
		t.Errorf("UDP length %d, want %d", got, len(in)-14+8+4+16)
	}
	if binary.BigEndian.Uint16(udp[6:]) != 0 {
		t.Errorf("UDP checksum %#x, want 0", binary.BigEndian.Uint16(udp[6:]))
	}
	if !bytes.Equal(gue, []byte{4, 4, 0, 0}) {
		t.Errorf("GUE header %x, want 04040000 (variant 0, hlen 4, IPv4 inside)", gue)
	}
	var got [4]uint32
	for i := range got {
		got[i] = binary.BigEndian.Uint32(hint[4*i:])
	}
	if got != wantHint {
		t.Errorf("hint (prev, prev2, changed, generation) %#x, want %#x", got, wantHint)
	}
	checkInner(t, rest[28:], in)
}

func be32(a netip.Addr) uint32 {
	if !a.Is4() {
		return 0
	}
	b := a.As4()
	return binary.BigEndian.Uint32(b[:])
}

// TestLBGUEHint: a packet of an EncapGUEHint service carries its slot's
// hint (both previous owners) and the service's generation, in the slot
// the Go flow hash predicts.
func TestLBGUEHint(t *testing.T) {
	d, f := newFixtureLB(t)
	h := newHintService(t, d)
	seen := map[netip.Addr]bool{}
	withPrev2 := 0
	for i := range 32 {
		p := tcpTo(fxVIP, 81)
		p.Src = netip.AddrFrom4([4]byte{10, 0, 2, byte(2 + i)})
		p.Sport = uint16(30000 + 11*i)
		in := p.Frame(f.MAC)
		var v uint32
		var out []byte
		delta := reasonDelta(t, d, func() { v, out = f.Run(t, d.objs.XlbLbProg, in) })
		if v != xdpTX || len(delta) != 0 {
			t.Fatalf("verdict %s reasons %v, want TX and none", verdictNames[v], delta)
		}
		slot := Slot(FlowHash(p.Src, fxVIP, p.Sport, 81, 6), fxTableSize)
		c := h.svc.Chain[slot]
		dst := h.addrs[h.svc.Table[slot]]
		checkHintFrame(t, out, in, dst, [4]uint32{be32(c.Prev), be32(c.Prev2), c.Changed, h.svc.Generation})
		if c.Prev2.IsValid() {
			withPrev2++
		}
		wantSport := uint16(0xc000 | FlowHash(p.Src, fxVIP, p.Sport, 81, 6)&0x3fff)
		if got := binary.BigEndian.Uint16(out[34:]); got != wantSport {
			t.Errorf("UDP source port %d, want %d (from the flow hash)", got, wantSport)
		}
		seen[dst] = true
	}
	if len(seen) != 2 {
		t.Errorf("32 flows reached %d backends, want both", len(seen))
	}
	if withPrev2 == 0 || withPrev2 == 32 {
		t.Errorf("%d of 32 flows hit a slot with a second previous owner, want some but not all", withPrev2)
	}

	chain, gen, err := d.Chain(h.svc.ID)
	if err != nil || gen != h.svc.Generation || !slices.Equal(chain, h.svc.Chain) {
		t.Errorf("Chain(%d): generation %d (%v), chain equal %v; want what was upserted", h.svc.ID, gen, err, slices.Equal(chain, h.svc.Chain))
	}
}

// TestLBGUEHintWithoutChain: a service in EncapGUEHint without hints
// forwards with zero words, and a generation alone is carried. Its chain
// table is its table: without it, its packets are dropped.
func TestLBGUEHintWithoutChain(t *testing.T) {
	d, f := newFixtureLB(t)
	h := newHintService(t, d)
	in := tcpTo(fxVIP, 81).Frame(f.MAC)
	slot := Slot(FlowHash(fxClient, fxVIP, 40000, 81, 6), fxTableSize)
	dst := h.addrs[h.svc.Table[slot]]
	send := func(name string, want [4]uint32) {
		t.Helper()
		v, out := f.Run(t, d.objs.XlbLbProg, in)
		if v != xdpTX {
			t.Fatalf("%s: verdict %s, want TX", name, verdictNames[v])
		}
		checkHintFrame(t, out, in, dst, want)
	}

	// The chain map lost the service's entry (as an xlb that crashed
	// mid-change could leave it): no backend.
	if err := d.objs.ChainTables.Delete(h.svc.ID); err != nil {
		t.Fatal(err)
	}
	if v, _ := f.Run(t, d.objs.XlbLbProg, in); v != xdpDrop {
		t.Fatalf("chain entry gone: verdict %s, want DROP", verdictNames[v])
	}

	// The record said the chain was installed; it is not, so the same
	// upsert writes it again.
	if err := d.UpsertService(h.svc); err != nil {
		t.Fatal(err)
	}
	c := h.svc.Chain[slot]
	send("chain rewritten", [4]uint32{be32(c.Prev), be32(c.Prev2), c.Changed, h.svc.Generation})

	noChain := h.svc
	noChain.Chain, noChain.Generation = nil, 0
	if err := d.UpsertService(noChain); err != nil {
		t.Fatal(err)
	}
	if chain, gen, err := d.Chain(h.svc.ID); err != nil || chain != nil || gen != 0 {
		t.Errorf("a service without hints has a chain: %d slots, generation %d (%v)", len(chain), gen, err)
	}
	send("no hints", [4]uint32{})

	genOnly := noChain
	genOnly.Generation = 42
	if err := d.UpsertService(genOnly); err != nil {
		t.Fatal(err)
	}
	send("generation only", [4]uint32{0, 0, 0, 42})
}

// TestLBGUEHintChainFollowsMode: only EncapGUEHint services keep hints. A
// chain is kept while unchanged, replaced when it changes, and goes when
// the service leaves the mode or goes itself; other modes' frames are
// those of before.
func TestLBGUEHintChainFollowsMode(t *testing.T) {
	d, f := newFixtureLB(t)
	h := newHintService(t, d)
	chainID := func() uint32 {
		t.Helper()
		var id uint32
		if err := d.objs.ChainTables.Lookup(h.svc.ID, &id); err != nil {
			return 0
		}
		return id
	}
	first := chainID()
	if first == 0 {
		t.Fatal("no chain installed")
	}
	if err := d.UpsertService(h.svc); err != nil {
		t.Fatal(err)
	}
	if got := chainID(); got != first {
		t.Errorf("the same chain again: inner map %d replaced by %d, want it kept", first, got)
	}
	changed := h.svc
	changed.Chain = slices.Clone(h.svc.Chain)
	changed.Chain[7].Changed++
	if err := d.UpsertService(changed); err != nil {
		t.Fatal(err)
	}
	if got := chainID(); got == first || got == 0 {
		t.Errorf("a changed chain: inner map %d, want a new one", got)
	}
	if chain, _, _ := d.Chain(h.svc.ID); !slices.Equal(chain, changed.Chain) {
		t.Error("Chain does not return the changed chain")
	}
	// A second previous owner alone is a change too.
	second := chainID()
	changed.Chain = slices.Clone(changed.Chain)
	changed.Chain[8].Prev2 = netip.MustParseAddr("10.0.8.200")
	if err := d.UpsertService(changed); err != nil {
		t.Fatal(err)
	}
	if got := chainID(); got == second || got == 0 {
		t.Errorf("a chain with another second previous owner: inner map %d, want a new one", got)
	}
	if chain, _, _ := d.Chain(h.svc.ID); !slices.Equal(chain, changed.Chain) {
		t.Error("Chain does not return the chain with the new second previous owner")
	}

	gue := changed
	gue.Encap = EncapGUE
	if err := d.UpsertService(gue); err != nil {
		t.Fatal(err)
	}
	if got := chainID(); got != 0 {
		t.Errorf("service left EncapGUEHint, chain %d stays", got)
	}
	in := tcpTo(fxVIP, 81).Frame(f.MAC)
	v, out := f.Run(t, d.objs.XlbLbProg, in)
	if v != xdpTX {
		t.Fatalf("verdict %s", verdictNames[v])
	}
	slot := Slot(FlowHash(fxClient, fxVIP, 40000, 81, 6), fxTableSize)
	rest := checkOuter(t, out, 17, h.addrs[h.svc.Table[slot]], len(in)-14, true)
	if !bytes.Equal(rest[8:12], []byte{0, 4, 0, 0}) {
		t.Errorf("GUE header %x after leaving the hint mode, want 00040000", rest[8:12])
	}
	checkInner(t, rest[12:], in)

	if err := d.UpsertService(changed); err != nil {
		t.Fatal(err)
	}
	if chainID() == 0 {
		t.Fatal("back in EncapGUEHint without a chain")
	}
	if err := d.DeleteService(h.svc.ID, h.svc.Key); err != nil {
		t.Fatal(err)
	}
	if got := chainID(); got != 0 {
		t.Errorf("deleted service's chain %d stays", got)
	}
}

// TestLBGUEHintInvalid: the chain must fit the table and name owners of
// each slot's backend's family (IPv4 here); other modes ignore it.
func TestLBGUEHintInvalid(t *testing.T) {
	d, _ := newFixtureLB(t)
	h := newHintService(t, d)
	short := h.svc
	short.Chain = h.svc.Chain[:10]
	v6 := h.svc
	v6.Chain = slices.Clone(h.svc.Chain)
	v6.Chain[3].Prev = netip.MustParseAddr("2001:db8::1")
	v6Prev2 := h.svc
	v6Prev2.Chain = slices.Clone(h.svc.Chain)
	v6Prev2.Chain[4].Prev2 = netip.MustParseAddr("2001:db8::2")
	for name, s := range map[string]Service{"short chain": short, "IPv6 previous owner": v6, "IPv6 second previous owner": v6Prev2} {
		if err := d.UpsertService(s); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	ipip := short
	ipip.Encap = EncapIPIP
	if err := d.UpsertService(ipip); err != nil {
		t.Errorf("an IPIP service with a chain it ignores: %v", err)
	}
}

// TestLBGUEHintTooBig: the MTU check counts the 48 bytes of GUE with a
// hint, and the ICMP reply announces the MTU less those.
func TestLBGUEHintTooBig(t *testing.T) {
	d, f := newFixtureLB(t)
	if err := d.UpsertBackend(22, apOf(fxSmallMTU)); err != nil { // route MTU 1400
		t.Fatal(err)
	}
	table := make([]uint32, fxTableSize)
	for i := range table {
		table[i] = 22
	}
	key := ServiceKey{netip.MustParseAddr("10.99.0.4"), 81, ProtoTCP}
	if err := d.UpsertService(Service{ID: 11, Key: key, Encap: EncapGUEHint, Table: table, Generation: 7}); err != nil {
		t.Fatal(err)
	}
	big := tcpTo(key.VIP, 81)
	big.Payload = make([]byte, 1400-hintOverhead+1-40) // one byte too many
	in := big.Frame(f.MAC)
	var v uint32
	var out []byte
	delta := reasonDelta(t, d, func() { v, out = f.Run(t, d.objs.XlbLbProg, in) })
	if v != xdpTX || delta["tx_icmp_too_big"] != 1 {
		t.Fatalf("DF set: verdict %s reasons %v, want TX with tx_icmp_too_big", verdictNames[v], delta)
	}
	if out[14+9] != 1 || out[34] != 3 || out[35] != 4 {
		t.Fatalf("not an ICMP fragmentation-needed: %x", out[14:38])
	}
	if mtu := binary.BigEndian.Uint16(out[34+6:]); mtu != 1400-hintOverhead {
		t.Errorf("next-hop MTU %d, want %d (route MTU minus GUE with a hint)", mtu, 1400-hintOverhead)
	}

	big.DF = false
	delta = reasonDelta(t, d, func() { v, _ = f.Run(t, d.objs.XlbLbProg, big.Frame(f.MAC)) })
	if v != xdpDrop || delta["drop_too_big"] != 1 {
		t.Fatalf("DF clear: verdict %s reasons %v, want DROP with drop_too_big", verdictNames[v], delta)
	}

	big.DF = true
	big.Payload = big.Payload[:len(big.Payload)-1] // 1352 + 48 = 1400
	in = big.Frame(f.MAC)
	if v, out = f.Run(t, d.objs.XlbLbProg, in); v != xdpTX {
		t.Fatalf("a packet that just fits: verdict %s, want TX", verdictNames[v])
	}
	checkHintFrame(t, out, in, fxSmallMTU, [4]uint32{0, 0, 0, 7})
}
