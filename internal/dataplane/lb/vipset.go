package lb

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// VIP filter geometry (XLB_VIP_FILTER_BITS in bpf/xlb_consts.h).
const (
	vipFilterBits  = 20
	vipFilterWords = 1 << (vipFilterBits - 6)
)

// vipFilterBit is vip_filter_bit in bpf/xlb_svc.h: the filter bit of an
// IPv4 address, from the word the program loads; of an IPv6 address,
// from its four words folded into one (is_vip6).
func vipFilterBit(vip netip.Addr) uint32 {
	var w uint32
	if vip.Is4() {
		w = wire.Addr4(vip)
	} else {
		b := vip.As16()
		for i := 0; i < 16; i += 4 {
			w ^= binary.LittleEndian.Uint32(b[i:])
		}
	}
	h := w ^ w>>16
	return (h * 0x9e3779b1) >> (32 - vipFilterBits)
}

// vipSet mirrors the vips map (every VIP with the number of services on
// it) and the vip_filter bitmap in front of it. The program takes a clear
// bit for "not a VIP" without looking further, so a VIP's bit is set
// before the VIP enters vips, and cleared only after the last VIP that
// has it left. Changes are incremental: one service added or removed
// writes one or two entries, whatever the number of services.
type vipSet struct {
	count map[netip.Addr]uint32 // VIP -> services on it, as vips holds it
	onBit map[uint32]uint32     // filter bit -> VIPs that have it
	words []uint64              // what vip_filter holds
	// dirty says a write failed, so the maps may differ from the mirror:
	// the next change rewrites both from the service index instead.
	dirty bool
}

// vipMaps are the two maps a vipSet writes (or a test's stand-ins).
type vipMaps struct {
	vips   vipWriter
	filter slotWriter
}

type vipWriter interface {
	Put(key, value any) error
	Delete(key any) error
}

func (v *vipSet) init() {
	if v.count == nil {
		v.count, v.onBit = map[netip.Addr]uint32{}, map[uint32]uint32{}
		v.words = make([]uint64, vipFilterWords)
	}
}

// add records one more service on vip.
func (v *vipSet) add(m vipMaps, vip netip.Addr) error {
	v.init()
	v.count[vip]++
	if v.count[vip] == 1 {
		if err := v.setBit(m, vipFilterBit(vip)); err != nil {
			return v.failed(err)
		}
	}
	if err := m.vips.Put(wire.AddrOf(vip), v.count[vip]); err != nil {
		return v.failed(fmt.Errorf("write VIP set: %w", err))
	}
	return nil
}

// remove records one service fewer on vip.
func (v *vipSet) remove(m vipMaps, vip netip.Addr) error {
	v.init()
	n := v.count[vip]
	if n == 0 {
		return nil
	}
	if n > 1 {
		v.count[vip] = n - 1
		if err := m.vips.Put(wire.AddrOf(vip), n-1); err != nil {
			return v.failed(fmt.Errorf("write VIP set: %w", err))
		}
		return nil
	}
	delete(v.count, vip)
	if err := m.vips.Delete(wire.AddrOf(vip)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return v.failed(fmt.Errorf("write VIP set: %w", err))
	}
	if err := v.clearBit(m, vipFilterBit(vip)); err != nil {
		return v.failed(err)
	}
	return nil
}

func (v *vipSet) failed(err error) error {
	v.dirty = true
	return err
}

func (v *vipSet) setBit(m vipMaps, bit uint32) error {
	v.onBit[bit]++
	if v.onBit[bit] > 1 {
		return nil
	}
	return v.writeWord(m, bit/64, v.words[bit/64]|1<<(bit%64))
}

func (v *vipSet) clearBit(m vipMaps, bit uint32) error {
	if v.onBit[bit] > 1 {
		v.onBit[bit]--
		return nil
	}
	delete(v.onBit, bit)
	return v.writeWord(m, bit/64, v.words[bit/64]&^(1<<(bit%64)))
}

func (v *vipSet) writeWord(m vipMaps, word uint32, w uint64) error {
	if err := m.filter.Put(word, w); err != nil {
		return fmt.Errorf("write VIP filter word %d: %w", word, err)
	}
	v.words[word] = w
	return nil
}

// reset makes the maps hold exactly want (VIP -> services), whatever they
// held: an earlier agent's pinned maps, or maps a failed write left apart
// from the mirror. inMap lists the VIPs the vips map holds now.
func (v *vipSet) reset(m vipMaps, want map[netip.Addr]uint32, inMap []netip.Addr) error {
	v.count, v.onBit = map[netip.Addr]uint32{}, map[uint32]uint32{}
	v.words = make([]uint64, vipFilterWords)
	v.dirty = true
	// First the bits of every VIP that is or will be in vips, so none is
	// clear while its VIP is there; then vips; then only want's bits.
	union := filterWords(want, inMap)
	if err := putWords(m.filter, union); err != nil {
		return err
	}
	for vip, n := range want {
		if err := m.vips.Put(wire.AddrOf(vip), n); err != nil {
			return fmt.Errorf("write VIP set: %w", err)
		}
	}
	for _, vip := range inMap {
		if _, ok := want[vip]; ok {
			continue
		}
		if err := m.vips.Delete(wire.AddrOf(vip)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("write VIP set: %w", err)
		}
	}
	final := filterWords(want, nil)
	for i, w := range final {
		if w != union[i] {
			if err := m.filter.Put(uint32(i), w); err != nil {
				return fmt.Errorf("write VIP filter word %d: %w", i, err)
			}
		}
	}
	for vip, n := range want {
		v.count[vip] = n
		v.onBit[vipFilterBit(vip)]++
	}
	v.words = final
	v.dirty = false
	return nil
}

// putWords writes the whole filter: in one call to a real map.
func putWords(m slotWriter, words []uint64) error {
	if bm, ok := m.(*ebpf.Map); ok {
		keys := make([]uint32, len(words))
		for i := range keys {
			keys[i] = uint32(i)
		}
		if _, err := bm.BatchUpdate(keys, words, nil); err != nil {
			return fmt.Errorf("write VIP filter: %w", err)
		}
		return nil
	}
	for i, w := range words {
		if err := m.Put(uint32(i), w); err != nil {
			return fmt.Errorf("write VIP filter word %d: %w", i, err)
		}
	}
	return nil
}

// filterWords is the bitmap with the bits of want's VIPs and of extra.
func filterWords(want map[netip.Addr]uint32, extra []netip.Addr) []uint64 {
	w := make([]uint64, vipFilterWords)
	set := func(vip netip.Addr) {
		b := vipFilterBit(vip)
		w[b/64] |= 1 << (b % 64)
	}
	for vip := range want {
		set(vip)
	}
	for _, vip := range extra {
		set(vip)
	}
	return w
}
