package dataplane

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// ConntrackEntries counts the flows of stateful services the LB
// remembers. Entries outlive their flows until the table is full and
// evicts the oldest, so this counts recent flows, not open connections.
func (d *Dataplane) ConntrackEntries() (int, error) {
	const chunk = 4096
	keys := make([]wire.CtKey, chunk)
	vals := make([]wire.CtEntry, chunk)
	var cursor ebpf.MapBatchCursor
	total := 0
	for {
		n, err := d.objs.Conntrack.BatchLookup(&cursor, keys, vals, nil)
		total += n
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return total, nil
		}
		if err != nil {
			return 0, fmt.Errorf("count conntrack entries: %w", err)
		}
	}
}
