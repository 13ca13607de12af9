package lb

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// TableWatch reads the Maglev tables of a pinned data plane from outside
// the agent that programs it. Every table change writes a new inner map
// and swaps it into the outer map (see UpsertService), so the inner map's
// ID changes exactly when a service's table does: benchmarks poll TableID
// to timestamp data-plane updates without instrumenting the agent.
type TableWatch struct {
	outer *ebpf.Map
}

// WatchTables opens the pinned outer table map under pinPath, read-only.
func WatchTables(pinPath string) (*TableWatch, error) {
	path := filepath.Join(pinPath, "maglev_tables")
	m, err := ebpf.LoadPinnedMap(path, &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("open pinned tables %s: %w (is an agent running on this pin path?)", path, err)
	}
	return &TableWatch{outer: m}, nil
}

// Close releases the watch's handle; the tables stay.
func (w *TableWatch) Close() error { return w.outer.Close() }

// Services lists the IDs of the services that have a table.
func (w *TableWatch) Services() ([]uint32, error) {
	var out []uint32
	for id := uint32(0); id < w.outer.MaxEntries(); id++ {
		t, err := w.TableID(id)
		if err != nil {
			return nil, err
		}
		if t != 0 {
			out = append(out, id)
		}
	}
	return out, nil
}

// TableID returns the ID of the inner map holding service's table, 0 if
// the service has none. One syscall: cheap enough to poll every
// millisecond.
func (w *TableWatch) TableID(service uint32) (ebpf.MapID, error) {
	var id ebpf.MapID
	err := w.outer.Lookup(service, &id)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("table of service %d: %w", service, err)
	}
	return id, nil
}

// Slots reads service's current table and counts its slots per backend
// address (slots naming no backend are left out). It returns the table's
// ID with the counts, both of the same table: one the agent replaces
// while it is being opened is read again.
func (w *TableWatch) Slots(service uint32) (ebpf.MapID, map[netip.Addr]int, error) {
	for range 3 {
		id, err := w.TableID(service)
		if err != nil {
			return 0, nil, err
		}
		if id == 0 {
			return 0, nil, fmt.Errorf("service %d has no table", service)
		}
		inner, err := ebpf.NewMapFromID(id)
		if errors.Is(err, os.ErrNotExist) {
			continue // replaced and freed in between
		}
		if err != nil {
			return 0, nil, fmt.Errorf("table of service %d: %w", service, err)
		}
		counts, err := countSlots(inner)
		inner.Close()
		if err != nil {
			return 0, nil, fmt.Errorf("table of service %d: %w", service, err)
		}
		return id, counts, nil
	}
	return 0, nil, fmt.Errorf("table of service %d: replaced faster than it can be read", service)
}

// countSlots counts the entries of an inner table per backend address.
func countSlots(inner *ebpf.Map) (map[netip.Addr]int, error) {
	n := inner.MaxEntries()
	keys := make([]uint32, n)
	vals := make([]wire.TableEntry, n)
	var cursor ebpf.MapBatchCursor
	got, err := inner.BatchLookup(&cursor, keys, vals, nil)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil, err
	}
	counts := make(map[netip.Addr]int)
	for _, v := range vals[:got] {
		if a := v.Addr(); a != 0 {
			counts[wire.AddrFrom4(a)]++
		}
	}
	return counts, nil
}
