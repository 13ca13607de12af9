package lb

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// ipv4 is the address whose value, most significant octet first, is n.
func ipv4(n uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

// indexPattern is a set of MaxServices distinct service keys in one shape
// that configurations take.
type indexPattern struct {
	name string
	keys []ServiceKey
}

// indexPatterns returns the shapes the index must hold in full: VIPs of
// one subnet on one port, few VIPs with many ports, one VIP with every
// port on both protocols, one VIP in each of many subnets, and random
// keys drawn from seed.
func indexPatterns(seed uint64) []indexPattern {
	const base = 10<<24 | 99<<16 // 10.99.0.0
	protos := [2]uint8{ProtoTCP, ProtoUDP}
	shapes := []struct {
		name string
		key  func(i int) ServiceKey
	}{
		{fmt.Sprintf("%d VIPs of one subnet, tcp/80", MaxServices), func(i int) ServiceKey { return ServiceKey{ipv4(base + uint32(i)), 80, ProtoTCP} }},
		{fmt.Sprintf("%d VIPs x 256 ports, tcp", MaxServices/256), func(i int) ServiceKey {
			return ServiceKey{ipv4(base + 1 + uint32(i/256)), uint16(8000 + i%256), ProtoTCP}
		}},
		{fmt.Sprintf("1 VIP x %d ports, tcp and udp in turn", MaxServices), func(i int) ServiceKey { return ServiceKey{ipv4(base + 1), uint16(1 + i), protos[i%2]} }},
		{fmt.Sprintf("1 VIP x %d ports, each tcp and udp", MaxServices/2), func(i int) ServiceKey { return ServiceKey{ipv4(base + 1), uint16(1 + i/2), protos[i%2]} }},
		{fmt.Sprintf("%d VIPs x 32 ports, udp", MaxServices/32), func(i int) ServiceKey {
			return ServiceKey{ipv4(base + 1 + uint32(i/32)), uint16(5000 + i%32), ProtoUDP}
		}},
		{fmt.Sprintf("the .1 of %d /24s, tcp/443", MaxServices), func(i int) ServiceKey { return ServiceKey{ipv4(10<<24 | uint32(i)<<8 | 1), 443, ProtoTCP} }},
	}
	out := make([]indexPattern, len(shapes))
	for i, s := range shapes {
		out[i].name = s.name
		for j := range MaxServices {
			out[i].keys = append(out[i].keys, s.key(j))
		}
	}
	return append(out, indexPattern{"random", randomKeys(seed, MaxServices)})
}

// randomKeys returns n distinct random keys: unicast VIPs (not 0/8 or
// 127/8), any port, TCP or UDP.
func randomKeys(seed uint64, n int) []ServiceKey {
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	seen := map[ServiceKey]bool{}
	var out []ServiceKey
	for len(out) < n {
		vip := ipv4(uint32(1+r.IntN(223))<<24 | r.Uint32N(1<<24))
		k := ServiceKey{vip, uint16(1 + r.IntN(65535)), [2]uint8{ProtoTCP, ProtoUDP}[r.IntN(2)]}
		if vip.As4()[0] != 127 && !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

func mustSlotKey(t testing.TB, k ServiceKey) wire.SvcSlot {
	t.Helper()
	s, err := slotKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// homeOf is a key's home slot.
func homeOf(k wire.SvcSlot) int { return int(svcHash(k.Vip, k.Port, k.Proto) & (SvcSlots - 1)) }

// dist is how many slots after from slot to lies, around the table.
func dist(from, to int) int { return (to - from + SvcSlots) % SvcSlots }

func sameKeyOnly(k wire.SvcSlot) wire.SvcSlot {
	return wire.SvcSlot{Vip: k.Vip, Port: k.Port, Proto: k.Proto}
}

// programView stands in for the svc_index map. It applies every write the
// index makes and then checks, the way svc_lookup reads the map, that each
// service the test calls visible is found, with its id: a packet arriving
// between any two writes finds every service but the one being changed.
type programView struct {
	t      testing.TB
	slots  [SvcSlots]wire.SvcSlot
	byHome map[int]map[wire.SvcSlot]uint32 // visible services by home slot: key (no id or encapsulation) -> id
	writes int
}

func newProgramView(t testing.TB) *programView {
	return &programView{t: t, byHome: map[int]map[wire.SvcSlot]uint32{}}
}

// show makes k one of the services every lookup must find, with id.
func (v *programView) show(k wire.SvcSlot, id uint32) {
	h := homeOf(k)
	if v.byHome[h] == nil {
		v.byHome[h] = map[wire.SvcSlot]uint32{}
	}
	v.byHome[h][sameKeyOnly(k)] = id
}

func (v *programView) hide(k wire.SvcSlot) { delete(v.byHome[homeOf(k)], sameKeyOnly(k)) }

// lookup is svc_lookup of bpf/xlb_maps.h, written apart from svcIndex.find.
func (v *programView) lookup(k wire.SvcSlot) (wire.SvcSlot, bool) {
	h := svcHash(k.Vip, k.Port, k.Proto)
	for i := uint32(0); i < svcProbes; i++ {
		s := v.slots[(h+i)&(SvcSlots-1)]
		if s.Vip == k.Vip && s.Port == k.Port && s.Proto == k.Proto {
			return s, true
		}
		if s.Vip == 0 && s.Port == 0 && s.Proto == 0 {
			break
		}
	}
	return wire.SvcSlot{}, false
}

func (v *programView) Put(key, value any) error {
	idx, s := int(key.(uint32)), value.(wire.SvcSlot)
	v.slots[idx] = s
	v.writes++
	// A write can only change the lookups whose probe window covers it.
	for j := range svcProbes {
		for k, id := range v.byHome[(idx-j+SvcSlots)%SvcSlots] {
			if got, ok := v.lookup(k); !ok || got.Id != id {
				v.t.Fatalf("after writing slot %d: service %d (%v:%d/%d) found %v with id %d",
					idx, id, vipOf(k), wire.PortFrom(k.Port), k.Proto, ok, got.Id)
			}
		}
	}
	return nil
}

// install adds keys to x, key i as service i, checking every write, and
// returns the largest distance of a service from its home slot.
func install(t testing.TB, x *svcIndex, v *programView, keys []ServiceKey) int {
	t.Helper()
	far := 0
	for id, k := range keys {
		s := mustSlotKey(t, k)
		s.Id, s.Encap = uint32(id), uint8(EncapIPIP)
		if err := x.upsert(v, s); err != nil {
			t.Fatalf("service %d of %d (%v:%d/%d): %v", id+1, len(keys), k.VIP, k.Port, k.Proto, err)
		}
		v.show(s, uint32(id))
		at, _ := x.find(s)
		if got, ok := v.lookup(s); !ok || got != s || at < 0 {
			t.Fatalf("service %d (%v:%d/%d) not found after its upsert", id, k.VIP, k.Port, k.Proto)
		}
		far = max(far, dist(homeOf(s), at))
	}
	return far
}

// TestSvcHashAvalanche: flipping any one bit of a key's VIP, port or
// protocol flips each bit of its home slot for about half of all keys, so
// no part of the key is lost on the way to the slot. (The previous hash
// let a VIP's last octet reach three slot bits: 64 services of a /24
// filled the index.)
func TestSvcHashAvalanche(t *testing.T) {
	const samples = 4000
	slotBits := bits.TrailingZeros(SvcSlots)
	r := rand.New(rand.NewPCG(1, 2))
	flip := []struct {
		field string
		width int
		apply func(vip *uint32, port *uint16, proto *uint8, bit int)
	}{
		{"VIP", 32, func(vip *uint32, _ *uint16, _ *uint8, b int) { *vip ^= 1 << b }},
		{"port", 16, func(_ *uint32, port *uint16, _ *uint8, b int) { *port ^= 1 << b }},
		{"protocol", 8, func(_ *uint32, _ *uint16, proto *uint8, b int) { *proto ^= 1 << b }},
	}
	for _, f := range flip {
		for b := range f.width {
			changed := make([]int, slotBits)
			for range samples {
				vip, port, proto := r.Uint32(), uint16(r.Uint32()), uint8(r.Uint32())
				before := svcHash(vip, port, proto)
				f.apply(&vip, &port, &proto, b)
				diff := before ^ svcHash(vip, port, proto)
				for j := range changed {
					changed[j] += int(diff >> j & 1)
				}
			}
			for j, n := range changed {
				// 4000 samples: a fair coin stays within 0.4..0.6 by
				// more than 12 standard deviations.
				if p := float64(n) / samples; p < 0.4 || p > 0.6 {
					t.Errorf("%s bit %d (of the wire bytes as loaded) flips slot bit %d for %.0f%% of keys, want about 50%%", f.field, b, j, 100*p)
				}
			}
		}
	}
}

// TestServiceIndexFits: MaxServices services fit in every pattern and in
// many random configurations, placed by the agent's own code, each spread
// over about as many home slots as random keys would take; every write
// leaves every other service visible.
func TestServiceIndexFits(t *testing.T) {
	// n keys on m slots take m(1 - (1-1/m)^n) homes on average (15885
	// here, with a standard deviation of about 20); a hash that does not
	// spread a pattern falls far short of 97% of that.
	m, n := float64(SvcSlots), float64(MaxServices)
	minHomes := int(0.97 * m * (1 - math.Pow(1-1/m, n)))
	for _, p := range indexPatterns(1) {
		t.Run(p.name, func(t *testing.T) {
			var x svcIndex
			v := newProgramView(t)
			far := install(t, &x, v, p.keys)
			homes := map[int]bool{}
			for _, k := range p.keys {
				homes[homeOf(mustSlotKey(t, k))] = true
			}
			if len(homes) < minHomes {
				t.Errorf("%d services on %d home slots, want at least %d: the hash does not spread this pattern", len(p.keys), len(homes), minHomes)
			}
			if got := len(x.services()); got != MaxServices {
				t.Errorf("%d services installed, want %d", got, MaxServices)
			}
			t.Logf("%d home slots, farthest service %d slots from home (bound %d)", len(homes), far, svcProbes-1)
		})
	}
	t.Run("20 random configurations", func(t *testing.T) {
		far := 0
		for seed := range uint64(20) {
			var x svcIndex
			far = max(far, install(t, &x, newProgramView(t), randomKeys(100+seed, MaxServices)))
		}
		t.Logf("farthest service %d slots from home (bound %d)", far, svcProbes-1)
	})
}

// TestServiceIndexChurn: services replaced one at a time, the way
// configurations change, keep fitting although deleted slots linger as
// tombstones; every write leaves the others visible; and once all are
// deleted no tombstone is left.
func TestServiceIndexChurn(t *testing.T) {
	var x svcIndex
	v := newProgramView(t)
	live := randomKeys(7, MaxServices)
	install(t, &x, v, live)
	ids := make([]wire.SvcSlot, len(live))
	for id, k := range live {
		ids[id] = mustSlotKey(t, k)
	}
	r := rand.New(rand.NewPCG(3, 4))
	inUse := map[wire.SvcSlot]bool{}
	for _, k := range ids {
		inUse[k] = true
	}
	const rounds = 20000
	far := 0
	for range rounds {
		id := r.IntN(len(ids))
		old := ids[id]
		v.hide(old)
		if err := x.remove(v, old); err != nil {
			t.Fatal(err)
		}
		if _, ok := v.lookup(old); ok {
			t.Fatalf("deleted service %d still found", id)
		}
		delete(inUse, old)
		var k wire.SvcSlot
		for {
			k = mustSlotKey(t, ServiceKey{ipv4(10<<24 | r.Uint32N(1<<24)), uint16(1 + r.IntN(65535)), ProtoTCP})
			if !inUse[k] {
				break
			}
		}
		inUse[k] = true
		k.Id, k.Encap = uint32(id), uint8(EncapGUE)
		if err := x.upsert(v, k); err != nil {
			t.Fatalf("after replacing services: %v", err)
		}
		ids[id] = sameKeyOnly(k)
		v.show(k, uint32(id))
		at, _ := x.find(k)
		far = max(far, dist(homeOf(k), at))
	}
	tombs := 0
	for _, s := range x.slots {
		if s.Vip == 0 && s.Port == tombstonePort {
			tombs++
		}
	}
	t.Logf("%d replacements: farthest service %d slots from home (bound %d), %d tombstones", rounds, far, svcProbes-1, tombs)
	if got, want := x.services(), scanServices(&x); !slices.Equal(got, want) || len(got) != len(ids) {
		t.Errorf("after the replacements the index lists %d services, its slots hold %d (want %d)", len(got), len(want), len(ids))
	}
	for id, k := range ids {
		v.hide(k)
		if err := x.remove(v, k); err != nil {
			t.Fatalf("delete service %d: %v", id, err)
		}
	}
	if x.slots != ([SvcSlots]wire.SvcSlot{}) || v.slots != x.slots {
		t.Error("slots left behind after deleting every service")
	}
	if got := x.services(); len(got) != 0 {
		t.Errorf("after deleting every service the index lists %d", len(got))
	}
}

// scanServices is what svcIndex.services must return: the services of
// every slot, in slot order.
func scanServices(x *svcIndex) []wire.SvcSlot {
	var out []wire.SvcSlot
	for _, s := range x.slots {
		if s.Vip != 0 {
			out = append(out, s)
		}
	}
	return out
}

// TestServiceIndexUpdateInPlace: changing a service's id or encapsulation
// rewrites its slot with one write, where it is.
func TestServiceIndexUpdateInPlace(t *testing.T) {
	var x svcIndex
	v := newProgramView(t)
	keys := indexPatterns(1)[0].keys[:3]
	install(t, &x, v, keys)
	k := mustSlotKey(t, keys[1])
	before, _ := x.find(k)
	k.Id, k.Encap = 77, uint8(EncapGUE)
	writes := v.writes
	v.hide(k) // the one being changed
	if err := x.upsert(v, k); err != nil {
		t.Fatal(err)
	}
	v.show(k, k.Id)
	if at, _ := x.find(k); at != before || x.slots[at] != k || v.writes != writes+1 {
		t.Errorf("update: slot %d (was %d) holds %+v after %d writes; want %+v in one write", at, before, x.slots[at], v.writes-writes, k)
	}
	if err := x.upsert(v, k); err != nil || v.writes != writes+1 {
		t.Errorf("an unchanged service was written again (%v)", err)
	}
}

// collidingVIPs finds n VIPs whose TCP port-80 keys share one home slot,
// a slot from which the n slots on are free in x.
func collidingVIPs(t testing.TB, x *svcIndex, n int) []netip.Addr {
	t.Helper()
	var home int
	var out []netip.Addr
	// Home slots are spread evenly: n of them take about n*SvcSlots
	// addresses of 10.0.0.0/8.
	for i := uint32(1); i < 1<<24; i++ {
		vip := ipv4(10<<24 | i)
		h := homeOf(mustSlotKey(t, ServiceKey{vip, 80, ProtoTCP}))
		if len(out) == 0 {
			free := true
			for j := range n {
				free = free && x.slots[(h+j)%SvcSlots] == wire.SvcSlot{}
			}
			if !free {
				continue
			}
			home = h
		}
		if h == home {
			out = append(out, vip)
			if len(out) == n {
				return out
			}
		}
	}
	t.Fatalf("no %d VIPs of 10.0.0.0/8 share a home slot", n)
	return nil
}

// TestServiceIndexCollisions: services that share a home slot are found
// at later probes by the program (so Go and C hash alike), a deleted one
// leaves the others reachable, and its slot is reused.
func TestServiceIndexCollisions(t *testing.T) {
	d, f := newFixtureLB(t)
	vips := collidingVIPs(t, &d.svcs.index, 3)
	table := make([]uint32, fxTableSize) // backend 0
	for i, vip := range vips {
		if err := d.UpsertService(Service{ID: uint32(100 + i), Key: ServiceKey{vip, 80, ProtoTCP}, Encap: EncapIPIP, Table: table}); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(vip netip.Addr, want uint32) {
		t.Helper()
		if v, _ := f.Run(t, d.objs.XlbLbProg, tcpTo(vip, 80).Frame(f.MAC)); v != want {
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
	at, _ := d.svcs.index.find(wire.SvcKey(vips[0], 80, ProtoTCP))
	if home := int(svcHash(wire.Addr4(vips[0]), wire.Port(80), ProtoTCP) & (SvcSlots - 1)); at != home {
		t.Errorf("re-added service at slot %d, want its home slot %d", at, home)
	}
	expect(vips[0], xdpTX)
	// Deleting everything leaves no tombstones behind.
	for i, vip := range vips {
		if err := d.DeleteService(uint32(100+i), ServiceKey{vip, 80, ProtoTCP}); err != nil {
			t.Fatal(err)
		}
	}
	h := svcHash(wire.Addr4(vips[0]), wire.Port(80), ProtoTCP)
	for i := uint32(0); i < 3; i++ {
		if s := d.svcs.index.slots[(h+i)&(SvcSlots-1)]; s != (wire.SvcSlot{}) {
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
	vips := collidingVIPs(t, &d.svcs.index, svcProbes+1)
	table := make([]uint32, fxTableSize)
	for i, vip := range vips {
		err := d.UpsertService(Service{ID: uint32(200 + i), Key: ServiceKey{vip, 80, ProtoTCP}, Encap: EncapIPIP, Table: table})
		if i < svcProbes && err != nil {
			t.Fatalf("service %d: %v", i, err)
		}
		if i == svcProbes && err == nil {
			t.Fatalf("service %d of %d sharing a home slot was accepted", i+1, svcProbes+1)
		}
	}
}

// packetTo is a packet to a service key from the fixture's client.
func packetTo(k ServiceKey) pkt {
	if k.Proto == ProtoUDP {
		return pkt{Src: fxClient, Dst: k.VIP, Sport: 40000, Dport: k.Port, Proto: ProtoUDP, Payload: []byte("q")}
	}
	return tcpTo(k.VIP, k.Port)
}

// TestSvcHashMatchesProgram: for sample keys, a service written alone at
// its home slot as Go computes it is found by the program (so C computes
// the same slot: from any other one it would meet an empty slot first),
// and so is one at the last slot of its probe window; one slot further it
// is not (so both sides bound the window alike).
func TestSvcHashMatchesProgram(t *testing.T) {
	d, f := newFixtureLB(t)
	// Service 0 of the fixture forwards to a reachable backend: the
	// samples borrow its id, and so its table.
	var samples []ServiceKey
	for _, p := range indexPatterns(5) {
		samples = append(samples, p.keys[100:112]...) // past the fixture's services
	}
	samples = append(samples,
		ServiceKey{ipv4(1), 1, ProtoTCP}, ServiceKey{ipv4(0xffffffff), 65535, ProtoUDP},
		ServiceKey{ipv4(0x80000000), 0x8000, ProtoUDP}, ServiceKey{ipv4(0xdeadbeef), 0xfffe, ProtoTCP})
	tested := 0
	for _, k := range samples {
		key := mustSlotKey(t, k)
		key.Encap = uint8(EncapIPIP)
		home := homeOf(key)
		free := true
		for j := range svcProbes + 1 {
			free = free && d.svcs.index.slots[(home+j)%SvcSlots] == wire.SvcSlot{}
		}
		if !free {
			continue // near a fixture service
		}
		tested++
		for _, c := range []struct {
			at      int // slots after home
			forward bool
		}{{0, true}, {svcProbes - 1, true}, {svcProbes, false}} {
			// Other services fill the slots before it, so probing goes on.
			for j := range c.at + 1 {
				s := key
				if j < c.at {
					s.Port ^= uint16(j + 1)
				}
				if err := d.svcs.index.write(d.objs.SvcIndex, (home+j)%SvcSlots, s); err != nil {
					t.Fatal(err)
				}
			}
			v, _ := f.Run(t, d.objs.XlbLbProg, packetTo(k).Frame(f.MAC))
			if (v == xdpTX) != c.forward {
				t.Errorf("%v:%d/%d at home slot %d + %d: verdict %s, want forwarded %v", k.VIP, k.Port, k.Proto, home, c.at, verdictNames[v], c.forward)
			}
			for j := range c.at + 1 {
				if err := d.svcs.index.write(d.objs.SvcIndex, (home+j)%SvcSlots, wire.SvcSlot{}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if tested < len(samples)*9/10 {
		t.Fatalf("only %d of %d sample keys had a free probe window", tested, len(samples))
	}
}

// TestServiceIndexPatternsInProgram: for every pattern, MaxServices
// services placed by the agent's code into the svc_index map are each
// found by the program, as themselves; deleting them leaves no trace. The
// services share 8 tables (a table swap costs an RCU grace period, 10 ms):
// service i uses table i%8, whose backend is its own, and IPIP or GUE in
// turn, so the encapsulated frame tells which slot the program read.
func TestServiceIndexPatternsInProgram(t *testing.T) {
	requirePrivileges(t)
	f := newFixtureNS(t)
	d, err := New(Options{NodeAddr: fxNode, TableSize: fxTableSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	const tables = 8
	backend := func(id uint32) netip.Addr { return ipv4(10<<24 | 3<<8 | 10 + id) } // 10.0.3.10+id
	var carriers []wire.SvcSlot
	for id := range uint32(tables) {
		if err := d.UpsertBackend(id, apOf(backend(id))); err != nil {
			t.Fatal(err)
		}
		table := make([]uint32, fxTableSize)
		for i := range table {
			table[i] = id
		}
		// The table's own service, on a key no pattern uses.
		k := ServiceKey{netip.MustParseAddr("192.0.2.1"), uint16(1 + id), ProtoTCP}
		if err := d.UpsertService(Service{ID: id, Key: k, Encap: EncapIPIP, Table: table}); err != nil {
			t.Fatal(err)
		}
		s := mustSlotKey(t, k)
		s.Id, s.Encap = id, uint8(EncapIPIP)
		carriers = append(carriers, s)
	}
	for _, p := range indexPatterns(11) {
		t.Run(p.name, func(t *testing.T) {
			slots := make([]wire.SvcSlot, len(p.keys))
			for i, k := range p.keys {
				slots[i] = mustSlotKey(t, k)
				slots[i].Id, slots[i].Encap = uint32(i%tables), uint8([2]Encap{EncapIPIP, EncapGUE}[i/tables%2])
				if err := d.svcs.index.upsert(d.objs.SvcIndex, slots[i]); err != nil {
					t.Fatalf("service %d of %d (%v:%d/%d): %v", i+1, len(p.keys), k.VIP, k.Port, k.Proto, err)
				}
			}
			bad := 0
			for i, k := range p.keys {
				// Every service displaced from its home slot, and every
				// 8th of the others: the program must find each as itself.
				if at, _ := d.svcs.index.find(slots[i]); i%8 != 0 && at == homeOf(slots[i]) {
					continue
				}
				v, out := f.Run(t, d.objs.XlbLbProg, packetTo(k).Frame(f.MAC))
				wantProto := map[uint8]uint8{uint8(EncapIPIP): 4, uint8(EncapGUE): ProtoUDP}[slots[i].Encap]
				wantDst := backend(slots[i].Id)
				if v == xdpTX && len(out) >= 34 && out[14+9] == wantProto && netip.AddrFrom4([4]byte(out[14+16:14+20])) == wantDst {
					continue
				}
				if bad++; bad <= 5 {
					t.Errorf("service %d (%v:%d/%d): verdict %s; want TX, outer protocol %d to %v", i, k.VIP, k.Port, k.Proto, verdictNames[v], wantProto, wantDst)
				}
			}
			if bad > 5 {
				t.Errorf("%d services in all not found as themselves", bad)
			}
			for _, s := range slots {
				if err := d.svcs.index.remove(d.objs.SvcIndex, s); err != nil {
					t.Fatal(err)
				}
			}
			// Left: the carriers, and tombstones only before one of them
			// (a probe for it passes there).
			var read svcIndex
			if err := read.load(d.objs.SvcIndex); err != nil {
				t.Fatal(err)
			}
			m := &read.slots
			live := 0
			for i, s := range m {
				switch {
				case s == (wire.SvcSlot{}):
				case s.Vip != 0 && slices.Contains(carriers, s):
					live++
				case s == wire.SvcSlot{Port: tombstonePort}:
					if next := m[(i+1)%SvcSlots]; next == (wire.SvcSlot{}) {
						t.Errorf("slot %d: a tombstone at the end of a probe path", i)
					}
				default:
					t.Errorf("slot %d holds %+v after the pattern was deleted", i, s)
				}
			}
			if live != len(carriers) || *m != d.svcs.index.slots {
				t.Errorf("%d of %d table services left, mirror equal to the map: %v", live, len(carriers), *m == d.svcs.index.slots)
			}
		})
	}
}

// TestServiceIndexForeignHash: a pinned index whose services do not sit
// where this hash puts them (another xlb wrote it) is refused on load,
// not adopted.
func TestServiceIndexForeignHash(t *testing.T) {
	d, _ := newFixtureLB(t)
	var x svcIndex
	if err := x.load(d.objs.SvcIndex); err != nil {
		t.Fatalf("an index this xlb wrote: %v", err)
	}
	if !slices.Equal(x.services(), d.svcs.index.services()) || !slices.Equal(x.services(), scanServices(&x)) {
		t.Fatalf("loaded %d services, want %d", len(x.services()), len(d.svcs.index.services()))
	}
	k := mustSlotKey(t, ServiceKey{fxVIP, 80, ProtoTCP})
	at, _ := d.svcs.index.find(k)
	// An empty slot off its probe path.
	off := (homeOf(k) + svcProbes) % SvcSlots
	for d.svcs.index.slots[off] != (wire.SvcSlot{}) {
		off = (off + 1) % SvcSlots
	}
	moved := d.svcs.index.slots[at]
	if err := d.objs.SvcIndex.Put(uint32(off), moved); err != nil {
		t.Fatal(err)
	}
	if err := d.objs.SvcIndex.Put(uint32(at), wire.SvcSlot{}); err != nil {
		t.Fatal(err)
	}
	x = svcIndex{}
	err := x.load(d.objs.SvcIndex)
	if err == nil || !strings.Contains(err.Error(), "another service hash") {
		t.Fatalf("load of a misplaced service: %v, want a refusal", err)
	}
}
