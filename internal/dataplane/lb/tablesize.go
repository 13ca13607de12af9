package lb

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
)

// tableSizePin is the file name, inside a pin directory, of the record
// of the pinned Maglev tables' size: a one-entry array no program reads,
// pinned beside the maps like the table records (the layout record does
// not cover it). A restart checks dataplane.tableSize against it. Reading
// the size off an inner table instead means opening the table by its ID
// (BPF_MAP_GET_FD_BY_ID), which the kernel allows with CAP_SYS_ADMIN
// only; the record lets the agent run without that capability.
const tableSizePin = "xlb_table_size"

// writeTableSize records size under pinPath, in place of an older record.
func writeTableSize(pinPath string, size uint32) error {
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: tableSizePin, Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		return fmt.Errorf("create the table size record: %w", err)
	}
	defer m.Close()
	if err := m.Put(uint32(0), size); err != nil {
		return fmt.Errorf("write the table size record: %w", err)
	}
	return bpfobj.ReplacePin(m, filepath.Join(pinPath, tableSizePin))
}

// pinnedTableSize reads the record under pinPath; ok is false when there
// is none (state pinned by an xlb from before the record).
func pinnedTableSize(pinPath string) (size uint32, ok bool, err error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinPath, tableSizePin), nil)
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read the table size record: %w", err)
	}
	defer m.Close()
	if m.Type() != ebpf.Array || m.KeySize() != 4 || m.ValueSize() != 4 {
		return 0, false, nil // not ours: fall back to the tables themselves
	}
	if err := m.Lookup(uint32(0), &size); err != nil {
		return 0, false, fmt.Errorf("read the table size record: %w", err)
	}
	return size, true, nil
}

// checkPinnedTableSize refuses to adopt tables of another size: the
// program's range reduction and the inner maps must agree.
func checkPinnedTableSize(pinPath string, want uint32) error {
	size, ok, err := pinnedTableSize(pinPath)
	if err != nil {
		return err
	}
	if ok {
		if size != want {
			return fmt.Errorf("pinned state under %s has Maglev tables of size %d but the config asks for %d: keep tableSize %d, or stop the agent and run `xlb cleanup` (drops established flows)", pinPath, size, want, size)
		}
		return nil
	}
	// No record (pinned by an older xlb): look at a table itself, which
	// needs CAP_SYS_ADMIN; without it, nothing can be checked.
	outer, err := ebpf.LoadPinnedMap(filepath.Join(pinPath, "maglev_tables"), nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("inspect pinned tables: %w", err)
	}
	defer outer.Close()
	var id ebpf.MapID
	it := outer.Iterate()
	var k uint32
	for it.Next(&k, &id) {
		inner, err := ebpf.NewMapFromID(id)
		if err != nil {
			continue
		}
		size := inner.MaxEntries()
		inner.Close()
		if size != want {
			return fmt.Errorf("pinned state under %s has Maglev tables of size %d but the config asks for %d: keep tableSize %d, or stop the agent and run `xlb cleanup` (drops established flows)", pinPath, size, want, size)
		}
		return nil
	}
	return nil
}
