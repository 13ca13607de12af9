package decap

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// A backend host set up by an older xlb has its maps pinned with that
// version's layout, and the new program adopts them by name. A map whose
// layout changed cannot be adopted: the load fails. The counter arrays
// grow when a version adds counters (chain_stats gained the chaining
// drops), and that is migrated: the old array's pin is removed before
// the load, which pins a new one, and the old counts are copied into it
// before the new program replaces the old one (what the old program
// counts in between is lost). Any other change is refused with what to
// run: its maps hold state (translations, flows) that cannot be carried
// over by this code.

// backendCounterMaps are the per-CPU counter arrays of the backend
// program, which may grow from one version to the next.
var backendCounterMaps = []string{"decap_stats", "chain_stats", "nat_stats"}

// counterCopy is an old counter array's per-CPU values, to be written
// into its successor.
type counterCopy struct {
	name   string
	values [][]wire.Counter // by key, then CPU
}

// planBackendAdoption checks every map spec pins under pinPath against
// the pinned one. A counter array of another size is read and its pin
// removed, for restoreCounters to copy into the new array after the
// load; any other difference is an error.
func planBackendAdoption(spec *ebpf.CollectionSpec, pinPath string) ([]counterCopy, error) {
	var copies []counterCopy
	names := make([]string, 0, len(spec.Maps))
	for name, ms := range spec.Maps {
		if ms.Pinning == ebpf.PinByName {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		ms := spec.Maps[name]
		path := filepath.Join(pinPath, name)
		m, err := ebpf.LoadPinnedMap(path, nil)
		if errors.Is(err, os.ErrNotExist) {
			continue // new in this version: the load creates it
		}
		if err != nil {
			return nil, fmt.Errorf("open pinned map %s: %w", path, err)
		}
		info, err := m.Info()
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("pinned map %s: %w", path, err)
		}
		same := info.Type == ms.Type && info.KeySize == ms.KeySize && info.ValueSize == ms.ValueSize &&
			info.Flags == ms.Flags
		if same && info.MaxEntries == ms.MaxEntries {
			m.Close()
			continue
		}
		if !same || !slices.Contains(backendCounterMaps, name) {
			m.Close()
			return nil, fmt.Errorf("the backend state pinned under %s was set up by another xlb version: its map %s differs from this version's (%v with %d entries of %d bytes, want %v with %d of %d); "+
				"remove it with `xlb backend --interface IF --pin-path %s --cleanup`, then set the backend up again (its VIPs leave lo and come back, so packets arriving in between are lost)",
				pinPath, name, info.Type, info.MaxEntries, info.ValueSize, ms.Type, ms.MaxEntries, ms.ValueSize, pinPath)
		}
		c := counterCopy{name: name}
		for k := uint32(0); k < min(info.MaxEntries, ms.MaxEntries); k++ {
			var per []wire.Counter
			if err := m.Lookup(k, &per); err != nil {
				m.Close()
				return nil, fmt.Errorf("read the counters of %s: %w", path, err)
			}
			c.values = append(c.values, per)
		}
		m.Close()
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("replace %s, of an older layout: %w", path, err)
		}
		copies = append(copies, c)
	}
	return copies, nil
}

// restoreCounters writes the counts of the replaced arrays into their
// successors in objs.
func restoreCounters(objs *backendObjects, copies []counterCopy) error {
	byName := map[string]*ebpf.Map{
		"decap_stats": objs.DecapStats, "chain_stats": objs.ChainStats, "nat_stats": objs.NatStats,
	}
	for _, c := range copies {
		m := byName[c.name]
		if m == nil {
			return fmt.Errorf("no map %s to carry its counters over to", c.name)
		}
		for k, per := range c.values {
			if err := m.Put(uint32(k), per); err != nil {
				return fmt.Errorf("carry the counters of %s over: %w", c.name, err)
			}
		}
	}
	return nil
}
