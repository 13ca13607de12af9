package dataplane

import (
	"net/netip"
	"testing"
)

// collidingVIPs finds n VIPs whose TCP port-80 keys share one home slot.
func collidingVIPs(n int) []netip.Addr {
	byHome := map[uint32][]netip.Addr{}
	for i := 0; ; i++ {
		vip := netip.AddrFrom4([4]byte{10, 99, byte(1 + i/250), byte(1 + i%250)})
		h := svcHash(wire32(vip), port16(80), ProtoTCP) & (SvcSlots - 1)
		byHome[h] = append(byHome[h], vip)
		if len(byHome[h]) == n {
			return byHome[h]
		}
	}
}

// TestServiceIndexCollisions: services that share a home slot are found
// at later probes by the program (so Go and C hash alike), a deleted one
// leaves the others reachable, and its slot is reused.
func TestServiceIndexCollisions(t *testing.T) {
	d, f := newFixtureLB(t)
	vips := collidingVIPs(3)
	table := make([]uint32, fxTableSize) // backend 0
	for i, vip := range vips {
		if err := d.UpsertService(Service{ID: uint32(100 + i), Key: ServiceKey{vip, 80, ProtoTCP}, Encap: EncapIPIP, Table: table}); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(vip netip.Addr, want uint32) {
		t.Helper()
		if v, _ := f.run(t, d.objs.XlbLbProg, tcpTo(vip, 80).frame(f.mac)); v != want {
			t.Errorf("%v: verdict %s, want %s", vip, verdictNames[v], verdictNames[want])
		}
	}
	for _, vip := range vips {
		expect(vip, xdpTX)
	}
	if err := d.DeleteService(100, ServiceKey{vips[0], 80, ProtoTCP}); err != nil {
		t.Fatal(err)
	}
	expect(vips[0], xdpPass)
	expect(vips[1], xdpTX)
	expect(vips[2], xdpTX)
	// Re-adding takes the tombstone at the head of the path.
	if err := d.UpsertService(Service{ID: 100, Key: ServiceKey{vips[0], 80, ProtoTCP}, Encap: EncapGUE, Table: table}); err != nil {
		t.Fatal(err)
	}
	at, _ := d.index.find(lbSvcSlot{Vip: wire32(vips[0]), Port: port16(80), Proto: ProtoTCP})
	if home := int(svcHash(wire32(vips[0]), port16(80), ProtoTCP) & (SvcSlots - 1)); at != home {
		t.Errorf("re-added service at slot %d, want its home slot %d", at, home)
	}
	expect(vips[0], xdpTX)
	// Deleting everything leaves no tombstones behind.
	for i, vip := range vips {
		if err := d.DeleteService(uint32(100+i), ServiceKey{vip, 80, ProtoTCP}); err != nil {
			t.Fatal(err)
		}
	}
	h := svcHash(wire32(vips[0]), port16(80), ProtoTCP)
	for i := uint32(0); i < 3; i++ {
		if s := d.index.slots[(h+i)&(SvcSlots-1)]; s != (lbSvcSlot{}) {
			t.Errorf("slot %d not empty after deleting all: %+v", (h+i)&(SvcSlots-1), s)
		}
	}
	for _, vip := range vips {
		expect(vip, xdpPass)
	}
}

// TestServiceIndexFull: a key whose whole probe path is taken is refused
// with an error, not placed where the program would never look.
func TestServiceIndexFull(t *testing.T) {
	d, _ := newFixtureLB(t)
	vips := collidingVIPs(svcProbes + 1)
	table := make([]uint32, fxTableSize)
	for i, vip := range vips {
		err := d.UpsertService(Service{ID: uint32(200 + i), Key: ServiceKey{vip, 80, ProtoTCP}, Encap: EncapIPIP, Table: table})
		if i < svcProbes && err != nil {
			t.Fatalf("service %d: %v", i, err)
		}
		if i == svcProbes && err == nil {
			t.Fatal("a ninth colliding service was accepted")
		}
	}
}
