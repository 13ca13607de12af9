package lb

import (
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// A table (an inner map of maglev_tables or chain_tables) is written
// once, before it is swapped in, and never again. The inner maps are
// created BPF_F_MMAPABLE, so that writing one is a copy into a shared
// mapping of its memory: a BatchUpdate instead makes the kernel copy
// and store every element on its own, many times slower
// (docs/decisions/0002-tables.md).

// NewFilledTable returns a new inner map for maglev_tables that holds
// entries, one per slot, as UpsertService makes one before it swaps it
// in.
func NewFilledTable(entries []wire.TableEntry) (*ebpf.Map, error) {
	inner, err := newTable("xlb_maglev", 8, uint32(len(entries)))
	if err != nil {
		return nil, fmt.Errorf("create table: %w", err)
	}
	if err := fillTable(inner, func(dst []byte, i int) {
		copy(dst, words(entries[i:i+1]))
	}); err != nil {
		inner.Close()
		return nil, fmt.Errorf("fill table: %w", err)
	}
	return inner, nil
}

// newTable creates an empty inner array map for maglev_tables or
// chain_tables: entries values of valueSize bytes, mappable.
func newTable(name string, valueSize, entries uint32) (*ebpf.Map, error) {
	return ebpf.NewMap(&ebpf.MapSpec{
		Name:       name,
		Type:       ebpf.Array,
		KeySize:    4,
		ValueSize:  valueSize,
		MaxEntries: entries,
		Flags:      unix.BPF_F_MMAPABLE,
	})
}

// fillTable writes every element of m, an array map created mappable,
// through a shared mapping of its memory: put(dst, i) writes element
// i's value into dst, which holds exactly the value's bytes.
func fillTable(m *ebpf.Map, put func(dst []byte, i int)) error {
	return eachElement(m, true, put)
}

// readTable reads every element of m, an array map created mappable, the
// same way, from a read-only mapping: get(src, i) gets element i's value.
// For a 65537-slot table it costs a fraction of a millisecond, where a
// BatchLookup makes the kernel copy every element on its own.
func readTable(m *ebpf.Map, get func(src []byte, i int)) error {
	return eachElement(m, false, get)
}

// eachElement maps m's memory, shared, writable if write, and calls fn
// with each element's value bytes and index in turn. The kernel lays
// elements out at multiples of 8 bytes.
func eachElement(m *ebpf.Map, write bool, fn func(value []byte, i int)) error {
	if m.Type() != ebpf.Array || m.Flags()&unix.BPF_F_MMAPABLE == 0 {
		return fmt.Errorf("map %v into memory: not a mappable array", m)
	}
	n, size := int(m.MaxEntries()), int(m.ValueSize())
	stride := (size + 7) &^ 7
	page := os.Getpagesize()
	length := (n*stride + page - 1) / page * page
	prot := unix.PROT_READ
	if write {
		prot |= unix.PROT_WRITE
	}
	mem, err := unix.Mmap(m.FD(), 0, length, prot, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("map %v into memory: %w", m, err)
	}
	for i := range n {
		fn(mem[i*stride:i*stride+size:i*stride+size], i)
	}
	// Unmapped here, not when the garbage collector gets to it: a
	// mapping holds the map, and so a replaced table, in the kernel.
	if err := unix.Munmap(mem); err != nil {
		return fmt.Errorf("unmap %v: %w", m, err)
	}
	return nil
}
