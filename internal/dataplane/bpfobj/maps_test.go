package bpfobj

import (
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/testbed/testenv"
)

// TestEachInArray: every element of an array larger than a batch, each
// once, in index order, with its value; and values of the wrong size are
// an error.
func TestEachInArray(t *testing.T) {
	testenv.RequireRoot(t, "BPF maps")
	const n = 40000 // more than two batches
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: n})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	keys, vals := make([]uint32, n), make([]uint64, n)
	for i := range keys {
		keys[i], vals[i] = uint32(i), uint64(i)*3+1
	}
	if _, err := m.BatchUpdate(keys, vals, nil); err != nil {
		t.Fatal(err)
	}
	next := uint32(0)
	err = EachInArray(m, func(k uint32, v *uint64) {
		if k != next || *v != uint64(k)*3+1 {
			t.Fatalf("element %d: key %d, value %d; want key %d, value %d", next, k, *v, next, uint64(next)*3+1)
		}
		next++
	})
	if err != nil || next != n {
		t.Errorf("%d elements read, %v; want %d", next, err, n)
	}
	// Values of another size than the caller's: an error, not garbage.
	small, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	if err := EachInArray(small, func(uint32, *uint64) { t.Error("fn called") }); err == nil {
		t.Error("read 4-byte values as 8-byte ones without an error")
	}
}
