package lb

import (
	"encoding/binary"
	"testing"

	"github.com/cilium/ebpf"
)

// fillTable puts every element where the kernel reads it, and readTable
// reads every element from there: each of the two table shapes, checked
// through the map for every slot; and both refuse a map they cannot map.
func TestFillTable(t *testing.T) {
	requirePrivileges(t)
	const n = 65537
	t.Run("maglev", func(t *testing.T) {
		m, err := newTable("t_maglev", 8, n)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		want := func(i int) uint64 { return uint64(i)*0x9e3779b97f4a7c15 | 1 }
		if err := fillTable(m, func(dst []byte, i int) { binary.NativeEndian.PutUint64(dst, want(i)) }); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			var v uint64
			if err := m.Lookup(uint32(i), &v); err != nil || v != want(i) {
				t.Fatalf("slot %d: %#x, %v; want %#x", i, v, err, want(i))
			}
		}
		if err := m.Put(uint32(n-1), uint64(7)); err != nil {
			t.Fatal(err)
		}
		read := 0
		if err := readTable(m, func(src []byte, i int) {
			w := want(i)
			if i == n-1 {
				w = 7 // written through the map: read from where the kernel keeps it
			}
			if v := binary.NativeEndian.Uint64(src); v != w && read < 5 {
				t.Errorf("readTable: slot %d: %#x, want %#x", i, v, w)
			}
			read++
		}); err != nil || read != n {
			t.Fatalf("readTable: %d slots read, %v; want %d", read, err, n)
		}
	})
	t.Run("20-byte values", func(t *testing.T) {
		// 20-byte values (as chain entries had): the kernel keeps them 24
		// bytes apart.
		m, err := newTable("t_chain", 20, n+1)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		want := func(i int) [5]uint32 {
			u := uint32(i)
			return [5]uint32{u, u ^ 0x0a000000, u + 1, u + 2, ^u}
		}
		if err := fillTable(m, func(dst []byte, i int) {
			for k, f := range want(i) {
				binary.NativeEndian.PutUint32(dst[4*k:], f)
			}
		}); err != nil {
			t.Fatal(err)
		}
		for i := range n + 1 {
			var v [5]uint32
			if err := m.Lookup(uint32(i), &v); err != nil || v != want(i) {
				t.Fatalf("entry %d: %+v, %v; want %+v", i, v, err, want(i))
			}
		}
		read := 0
		if err := readTable(m, func(src []byte, i int) {
			var e [5]uint32
			for k := range e {
				e[k] = binary.NativeEndian.Uint32(src[4*k:])
			}
			if len(src) != 20 || e != want(i) && read < 5 {
				t.Errorf("readTable: entry %d: %+v (%d bytes), want %+v (20 bytes)", i, e, len(src), want(i))
			}
			read++
		}); err != nil || read != n+1 {
			t.Fatalf("readTable: %d entries read, %v; want %d", read, err, n+1)
		}
	})
	t.Run("not mappable", func(t *testing.T) {
		m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 4})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if err := fillTable(m, func([]byte, int) { t.Error("put called") }); err == nil {
			t.Error("filled a map created without BPF_F_MMAPABLE")
		}
		if err := readTable(m, func([]byte, int) { t.Error("get called") }); err == nil {
			t.Error("read a map created without BPF_F_MMAPABLE")
		}
	})
}
