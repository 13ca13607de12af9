package decap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
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
// over by this code, except where an address widened: the maps whose
// keys or values held IPv4 addresses as __be32 before they held union
// xlb_addr (widened) are read, and their entries written into the new
// maps in the new layout before the new program replaces the old one.

// backendCounterMaps are the per-CPU counter arrays of the backend
// program, which may grow from one version to the next.
var backendCounterMaps = []string{"decap_stats", "chain_stats", "nat_stats"}

// counterCopy is an old counter array's per-CPU values, to be written
// into its successor.
type counterCopy struct {
	name   string
	values [][]wire.Counter // by key, then CPU
}

// widened says how an entry of a map whose addresses were IPv4 only
// (__be32) becomes an entry of the map of union xlb_addr: its key's and
// value's fields in order, 'a' an address (4 bytes, then 16: IPv4 mapped
// into IPv6), 'p' an LPM prefix length (counted over 32 bits, then 128),
// a digit that many bytes copied as they are.
var widened = map[string][2]string{
	"host_addrs": {"a", "1"}, "decap_vips": {"a", "1"}, "nat_pods": {"a", "1"}, "nat_pod_netns": {"a", "4"},
	"chain_from": {"pa", "1"}, "chain_to": {"pa", "1"}, "chain_gens": {"a4", "4"},
	"nat_svcs": {"aa4", "2"}, "nat_flows": {"aa8", "a4"}, "nat_rev_ports": {"a4", "a4"},
}

// widenedSize is the size of fields before (4-byte addresses) or after.
func widenedSize(fields string, after bool) uint32 {
	n := uint32(0)
	for _, f := range fields {
		switch {
		case f == 'a' && after:
			n += 16
		case f == 'a' || f == 'p':
			n += 4
		default:
			n += uint32(f - '0')
		}
	}
	return n
}

// widen is old (of fields, addresses 4 bytes) in the new layout.
func widen(fields string, old []byte) []byte {
	var out []byte
	for _, f := range fields {
		switch f {
		case 'a':
			a := wire.AddrOf(netip.AddrFrom4([4]byte(old[:4])))
			out = append(out, a.Bytes[:]...)
			old = old[4:]
		case 'p':
			out = binary.NativeEndian.AppendUint32(out, binary.NativeEndian.Uint32(old)+96)
			old = old[4:]
		default:
			n := int(f - '0')
			out = append(out, old[:n]...)
			old = old[n:]
		}
	}
	return out
}

// entryCopy is a widened map's entries in the new layout, to be written
// into its successor.
type entryCopy struct {
	name         string
	keys, values [][]byte
}

// readWidened reads m's entries into the new layout of fields.
func readWidened(name string, m *ebpf.Map, fields [2]string) (entryCopy, error) {
	c := entryCopy{name: name}
	k, v := make([]byte, m.KeySize()), make([]byte, m.ValueSize())
	it := m.Iterate()
	for it.Next(&k, &v) {
		c.keys = append(c.keys, widen(fields[0], k))
		c.values = append(c.values, widen(fields[1], v))
	}
	return c, it.Err()
}

// planBackendAdoption checks every map spec pins under pinPath against
// the pinned one. A counter array of another size, or a map whose
// addresses widened, is read and its pin removed, for restoreCounters and
// restoreEntries to copy into the new map after the load; any other
// difference is an error.
func planBackendAdoption(spec *ebpf.CollectionSpec, pinPath string) ([]counterCopy, []entryCopy, error) {
	var copies []counterCopy
	var entries []entryCopy
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
			return nil, nil, fmt.Errorf("open pinned map %s: %w", path, err)
		}
		info, err := m.Info()
		if err != nil {
			m.Close()
			return nil, nil, fmt.Errorf("pinned map %s: %w", path, err)
		}
		same := info.Type == ms.Type && info.KeySize == ms.KeySize && info.ValueSize == ms.ValueSize &&
			info.Flags == ms.Flags
		if same && info.MaxEntries == ms.MaxEntries {
			m.Close()
			continue
		}
		if w, ok := widened[name]; ok && info.Type == ms.Type && info.Flags == ms.Flags &&
			info.KeySize == widenedSize(w[0], false) && info.ValueSize == widenedSize(w[1], false) &&
			ms.KeySize == widenedSize(w[0], true) && ms.ValueSize == widenedSize(w[1], true) {
			c, err := readWidened(name, m, w)
			m.Close()
			if err != nil {
				return nil, nil, fmt.Errorf("read %s, of IPv4 addresses only: %w", path, err)
			}
			if err := os.Remove(path); err != nil {
				return nil, nil, fmt.Errorf("replace %s, of IPv4 addresses only: %w", path, err)
			}
			entries = append(entries, c)
			continue
		}
		if !same || !slices.Contains(backendCounterMaps, name) {
			m.Close()
			return nil, nil, fmt.Errorf("the backend state pinned under %s was set up by another xlb version: its map %s differs from this version's (%v with %d entries of %d bytes, want %v with %d of %d); "+
				"remove it with `xlb backend --interface IF --pin-path %s --cleanup`, then set the backend up again (its VIPs leave lo and come back, so packets arriving in between are lost)",
				pinPath, name, info.Type, info.MaxEntries, info.ValueSize, ms.Type, ms.MaxEntries, ms.ValueSize, pinPath)
		}
		c := counterCopy{name: name}
		for k := uint32(0); k < min(info.MaxEntries, ms.MaxEntries); k++ {
			var per []wire.Counter
			if err := m.Lookup(k, &per); err != nil {
				m.Close()
				return nil, nil, fmt.Errorf("read the counters of %s: %w", path, err)
			}
			c.values = append(c.values, per)
		}
		m.Close()
		if err := os.Remove(path); err != nil {
			return nil, nil, fmt.Errorf("replace %s, of an older layout: %w", path, err)
		}
		copies = append(copies, c)
	}
	return copies, entries, nil
}

// restoreEntries writes the entries of the replaced maps whose addresses
// widened into their successors in objs.
func restoreEntries(objs *backendObjects, copies []entryCopy) error {
	maps := bpfobj.MapsOf(&objs.backendMaps)
	for _, c := range copies {
		m := maps[c.name]
		if m == nil {
			return fmt.Errorf("no map %s to carry its entries over to", c.name)
		}
		for i := range c.keys {
			if err := m.Put(c.keys[i], c.values[i]); err != nil {
				return fmt.Errorf("carry the entries of %s over: %w", c.name, err)
			}
		}
	}
	return nil
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
