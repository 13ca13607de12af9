package lb

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// fakeVIPMaps stands in for the vips and vip_filter maps and checks,
// after every write, what the program relies on: every VIP in vips has
// its filter bit set.
type fakeVIPMaps struct {
	t      *testing.T
	vips   map[netip.Addr]uint32
	words  map[uint32]uint64
	failAt int // fail the write with this number (1-based); 0: never
	writes int
}

// w4 is the IPv4 address whose word, as the program loads it, is v.
var w4 = wire.AddrFrom4

func newFakeVIPMaps(t *testing.T) *fakeVIPMaps {
	return &fakeVIPMaps{t: t, vips: map[netip.Addr]uint32{}, words: map[uint32]uint64{}}
}

func (f *fakeVIPMaps) maps() vipMaps { return vipMaps{vips: fakeVips{f}, filter: fakeFilter{f}} }

func (f *fakeVIPMaps) write() error {
	f.writes++
	if f.failAt == f.writes {
		return errors.New("injected failure")
	}
	return nil
}

func (f *fakeVIPMaps) check() {
	f.t.Helper()
	for vip := range f.vips {
		b := vipFilterBit(vip)
		if f.words[b/64]&(1<<(b%64)) == 0 {
			f.t.Fatalf("after write %d: VIP %v is in vips with its filter bit %d clear", f.writes, vip, b)
		}
	}
}

// apply makes one write: it may fail (write), and after it the filter
// must still cover every VIP (check).
func (f *fakeVIPMaps) apply(change func()) error {
	if err := f.write(); err != nil {
		return err
	}
	change()
	f.check()
	return nil
}

type fakeVips struct{ f *fakeVIPMaps }

func (v fakeVips) Put(key, value any) error {
	return v.f.apply(func() { v.f.vips[key.(wire.Addr).IP()] = value.(uint32) })
}

func (v fakeVips) Delete(key any) error {
	return v.f.apply(func() { delete(v.f.vips, key.(wire.Addr).IP()) })
}

type fakeFilter struct{ f *fakeVIPMaps }

func (w fakeFilter) Put(key, value any) error {
	return w.f.apply(func() { w.f.words[key.(uint32)] = value.(uint64) })
}

// exactly checks that the maps hold want and only the bits of want's
// VIPs.
func (f *fakeVIPMaps) exactly(want map[netip.Addr]uint32) error {
	if len(f.vips) != len(want) {
		return fmt.Errorf("vips holds %d VIPs, want %d", len(f.vips), len(want))
	}
	for vip, n := range want {
		if f.vips[vip] != n {
			return fmt.Errorf("vips[%v] = %d, want %d", vip, f.vips[vip], n)
		}
	}
	bits := filterWords(want, nil)
	for i, w := range bits {
		if f.words[uint32(i)] != w {
			return fmt.Errorf("filter word %d = %x, want %x", i, f.words[uint32(i)], w)
		}
	}
	return nil
}

// sharedBitVIPs returns n distinct addresses that share one filter bit.
func sharedBitVIPs(n int) []netip.Addr {
	var out []netip.Addr
	want := uint32(0)
	for a := uint32(1); len(out) < n; a++ {
		vip := wire.AddrFrom4(0x0000630a | a<<16) // 10.99.x.y
		if len(out) == 0 {
			want = vipFilterBit(vip)
		}
		if vipFilterBit(vip) == want {
			out = append(out, vip)
		}
	}
	return out
}

// Services come and go on VIPs, some of which share a filter bit: the
// maps follow exactly, a shared bit stays set while any of its VIPs
// remains, and no VIP is ever in vips with its bit clear.
func TestVIPSetIncremental(t *testing.T) {
	f := newFakeVIPMaps(t)
	var v vipSet
	vips := append(sharedBitVIPs(3), w4(0x0100630a), w4(0x0200630a))
	want := map[netip.Addr]uint32{}
	rng := rand.New(rand.NewPCG(1, 2))
	for step := 0; step < 2000; step++ {
		vip := vips[rng.IntN(len(vips))]
		if rng.IntN(2) == 0 || want[vip] == 0 {
			if err := v.add(f.maps(), vip); err != nil {
				t.Fatal(err)
			}
			want[vip]++
		} else {
			if err := v.remove(f.maps(), vip); err != nil {
				t.Fatal(err)
			}
			if want[vip]--; want[vip] == 0 {
				delete(want, vip)
			}
		}
		if err := f.exactly(want); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
	// Removing a service of a VIP that has none changes nothing.
	before := f.writes
	if err := v.remove(f.maps(), w4(0x0900630a)); err != nil || f.writes != before {
		t.Errorf("remove of an unknown VIP: %v, %d writes", err, f.writes-before)
	}
}

// reset brings maps that hold something else (an earlier agent's, or
// what a failed write left) to exactly what is wanted, without a moment
// where a VIP in vips has its bit clear.
func TestVIPSetReset(t *testing.T) {
	f := newFakeVIPMaps(t)
	stale := sharedBitVIPs(2)
	f.vips[stale[0]] = 3
	f.vips[w4(0x0500630a)] = 1
	f.words = map[uint32]uint64{}
	for i, w := range filterWords(map[netip.Addr]uint32{stale[0]: 3, w4(0x0500630a): 1}, nil) {
		if w != 0 {
			f.words[uint32(i)] = w
		}
	}
	want := map[netip.Addr]uint32{stale[1]: 2, w4(0x0600630a): 1}
	var v vipSet
	if err := v.reset(f.maps(), want, []netip.Addr{stale[0], w4(0x0500630a)}); err != nil {
		t.Fatal(err)
	}
	if err := f.exactly(want); err != nil {
		t.Fatal(err)
	}
	if v.dirty {
		t.Error("dirty after a reset that succeeded")
	}
	// The mirror continues from there.
	if err := v.remove(f.maps(), stale[1]); err != nil {
		t.Fatal(err)
	}
	if err := v.remove(f.maps(), stale[1]); err != nil {
		t.Fatal(err)
	}
	if err := f.exactly(map[netip.Addr]uint32{w4(0x0600630a): 1}); err != nil {
		t.Fatal(err)
	}
}

// A failed write marks the set dirty, and the data plane rewrites it from
// the service index at its next change.
func TestVIPSetWriteFailure(t *testing.T) {
	f := newFakeVIPMaps(t)
	var v vipSet
	f.failAt = 2 // the filter word goes in, the VIP does not
	if err := v.add(f.maps(), w4(0x0100630a)); err == nil {
		t.Fatal("no error from a failed write")
	}
	if !v.dirty {
		t.Error("not dirty after a failed write")
	}
}

// The program's filter bit is the Go one, and a VIP is recognised on
// every port and protocol whatever the other VIPs: 100 services on random
// VIPs, then for each VIP a packet to a port it does not serve is dropped
// as a VIP's, and packets to addresses that are no VIP (past the filter,
// or through a bit a VIP set) are passed. Removing the services clears
// what they set.
func TestVIPFilterInProgram(t *testing.T) {
	d, f := newFixtureLB(t)
	rng := rand.New(rand.NewPCG(3, 4))
	isVIP := map[netip.Addr]bool{}
	var keys []ServiceKey
	table := make([]uint32, fxTableSize)
	for len(keys) < 100 {
		a := netip.AddrFrom4([4]byte{10, byte(100 + rng.IntN(20)), byte(rng.IntN(256)), byte(1 + rng.IntN(254))})
		if isVIP[a] {
			continue
		}
		isVIP[a] = true
		k := ServiceKey{a, 80, ProtoTCP}
		keys = append(keys, k)
		if err := d.UpsertService(Service{ID: uint32(100 + len(keys)), Key: k, Encap: EncapIPIP, Table: table}); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range keys {
		var v uint32
		delta := reasonDelta(t, d, func() { v, _ = f.Run(t, d.objs.XlbLbProg, tcpTo(k.VIP, 22).Frame(f.MAC)) })
		if v != xdpDrop || delta["drop_vip_no_service"] != 1 {
			t.Fatalf("VIP %v, port 22: verdict %s reasons %v, want DROP drop_vip_no_service", k.VIP, verdictNames[v], delta)
		}
	}
	// Addresses that are no VIP, with their filter bit clear (almost
	// every address) and set by a VIP (searched for).
	var others []netip.Addr
	for len(others) < 50 {
		a := netip.AddrFrom4([4]byte{10, byte(100 + rng.IntN(20)), byte(rng.IntN(256)), byte(1 + rng.IntN(254))})
		if b := vipFilterBit(a); !isVIP[a] && d.svcs.vips.words[b/64]&(1<<(b%64)) == 0 {
			others = append(others, a)
		}
	}
	set := 0
	for n := uint32(0); n < 1<<20 && set < 5; n++ {
		a := netip.AddrFrom4([4]byte{10, byte(100 + n>>16), byte(n >> 8), byte(n)})
		if b := vipFilterBit(a); !isVIP[a] && d.svcs.vips.words[b/64]&(1<<(b%64)) != 0 {
			others = append(others, a)
			set++
		}
	}
	if set < 5 {
		t.Fatalf("found %d addresses that share a VIP's filter bit, want 5", set)
	}
	for _, a := range others {
		var v uint32
		delta := reasonDelta(t, d, func() { v, _ = f.Run(t, d.objs.XlbLbProg, tcpTo(a, 80).Frame(f.MAC)) })
		if v != xdpPass || delta["pass_no_service"] != 1 {
			t.Fatalf("%v (no VIP): verdict %s reasons %v, want PASS pass_no_service", a, verdictNames[v], delta)
		}
	}
	for i, k := range keys {
		if err := d.DeleteService(uint32(101+i), k); err != nil {
			t.Fatal(err)
		}
	}
	// What the fixture's own services set is all that is left.
	want := map[netip.Addr]uint32{}
	for _, s := range d.svcs.index.services() {
		want[vipOf(s)]++
	}
	bits := filterWords(want, nil)
	for i, w := range bits {
		var got uint64
		if err := d.objs.VipFilter.Lookup(uint32(i), &got); err != nil {
			t.Fatal(err)
		}
		if got != w {
			t.Fatalf("filter word %d after the deletes: %x, want %x", i, got, w)
		}
	}
}
