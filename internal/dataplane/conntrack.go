package dataplane

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// svcStateful is XLB_SVC_STATEFUL, struct svc_slot's flag for
// Service.Stateful.
const svcStateful = 1

// ConntrackEntries counts the flows of stateful services the LB
// remembers. Entries outlive their flows until the table is full and
// evicts the oldest, so this counts recent flows, not open connections.
func (d *Dataplane) ConntrackEntries() (int, error) {
	const chunk = 4096
	keys := make([]lbCtKey, chunk)
	vals := make([]lbCtEntry, chunk)
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
