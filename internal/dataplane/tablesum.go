package dataplane

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
)

// Filling a 65537-slot table and swapping it in costs about 20 ms, most
// of it in the kernel, so an agent that rewrote every table when it
// restarts on pinned maps needed half a minute for a thousand services
// before its first change could reach the data plane. Table records let
// UpsertService keep a table that already holds exactly what it is asked
// to install, without reading it back (a read costs as much as a fill).
//
// A record says which entries an inner map was filled with: (the inner
// map's ID, a digest of its entries). It is sound because an installed
// table is never written: every change fills a new inner map and swaps it
// in. So "inner map X holds entries with digest H" stays true for as long
// as X lives, and a record vouches for a service's table only while the
// outer map holds X for that service. A table swapped in without a record
// (by an xlb from before records, or a crash between the swap and the
// record) has an ID that no record names, and is rewritten once. The
// kernel hands out map IDs cyclically up to 2^31, so a dead map's ID does
// not come back for a live one. An xlb that ever writes into an installed
// table in place must delete this map.
//
// No program reads the records. They are kept in a map of their own,
// pinned beside the program's maps but not one of them: adding it changed
// no pinned map's layout, and the layout record does not cover it. A
// pinned map of another shape under its name is replaced, which costs one
// rewrite of every table.

// sumsPin is the file name of the pinned record map inside a pin directory.
const sumsPin = "xlb_table_sums"

// tableSum is one service's record, indexed by service ID. Inner 0: none.
type tableSum struct {
	Inner uint32
	Pad   uint32
	Sum   [sha256.Size]byte
}

// sumSpec is the record map's shape.
var sumSpec = ebpf.MapSpec{
	Name:       sumsPin,
	Type:       ebpf.Array,
	KeySize:    4,
	ValueSize:  uint32(binary.Size(tableSum{})),
	MaxEntries: MaxServices,
}

// openSums returns the record map pinned under pinPath, creating and
// pinning a new, empty one if there is none or the pinned one has another
// shape. With pinPath "" the map is not pinned.
func openSums(pinPath string) (*ebpf.Map, error) {
	if pinPath == "" {
		m, err := ebpf.NewMap(&sumSpec)
		if err != nil {
			return nil, fmt.Errorf("create table records: %w", err)
		}
		return m, nil
	}
	path := filepath.Join(pinPath, sumsPin)
	m, err := ebpf.LoadPinnedMap(path, nil)
	switch {
	case err == nil && m.Type() == sumSpec.Type && m.KeySize() == sumSpec.KeySize && m.ValueSize() == sumSpec.ValueSize && m.MaxEntries() >= sumSpec.MaxEntries:
		return m, nil
	case err == nil:
		m.Close()
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("open table records %s: %w", path, err)
	}
	m, err = ebpf.NewMap(&sumSpec)
	if err != nil {
		return nil, fmt.Errorf("create table records: %w", err)
	}
	if err := replacePin(m, path); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// digest identifies a table's entries, in slot order, as the program
// reads them. The label changes whenever what is hashed does.
func digest(entries []uint64) [sha256.Size]byte {
	h := sha256.New()
	h.Write([]byte("xlb maglev table v1\x00"))
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(entries)))
	h.Write(n[:])
	buf := make([]byte, 0, 8*4096)
	for i := 0; i < len(entries); i += 4096 {
		buf = buf[:0]
		for _, e := range entries[i:min(i+4096, len(entries))] {
			buf = binary.LittleEndian.AppendUint64(buf, e)
		}
		h.Write(buf)
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// installedAs reports whether service id's current table is the inner
// map its record names, filled with entries of digest sum. A record that
// cannot be read counts as none: the table is then written again. Called
// with service id's lock held.
func (d *Dataplane) installedAs(id uint32, sum [sha256.Size]byte) bool {
	if d.sums == nil {
		return false
	}
	var rec tableSum
	if err := d.sums.Lookup(id, &rec); err != nil || rec.Inner == 0 || rec.Sum != sum {
		return false
	}
	var cur ebpf.MapID
	if err := d.objs.MaglevTables.Lookup(id, &cur); err != nil {
		return false
	}
	return uint32(cur) == rec.Inner
}

// record notes that inner, now service id's table, holds entries with
// digest sum. Without it, the next agent rewrites the table once: a
// failure costs time, not correctness, so it is not reported. Called with
// service id's lock held.
func (d *Dataplane) record(id uint32, inner *ebpf.Map, sum [sha256.Size]byte) {
	if d.sums == nil {
		return
	}
	info, err := inner.Info()
	if err != nil {
		return
	}
	if mid, ok := info.ID(); ok {
		_ = d.sums.Put(id, tableSum{Inner: uint32(mid), Sum: sum})
	}
}

// forget clears service id's record. A record left behind names a map
// that is gone, which no table can be again, so a failure is not
// reported either. Called with service id's lock held.
func (d *Dataplane) forget(id uint32) {
	if d.sums != nil {
		_ = d.sums.Put(id, tableSum{})
	}
}
