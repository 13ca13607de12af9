package lb

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

// ReasonCounters returns the pass/drop counters by reason name.
func (d *Dataplane) ReasonCounters() (map[string]uint64, error) {
	out := make(map[string]uint64, len(wire.ReasonNames))
	for i, name := range wire.ReasonNames {
		var per []uint64
		if err := d.objs.Reasons.Lookup(uint32(i), &per); err != nil {
			return nil, fmt.Errorf("read reason %s: %w", name, err)
		}
		var sum uint64
		for _, n := range per {
			sum += n
		}
		out[name] = sum
	}
	return out, nil
}
