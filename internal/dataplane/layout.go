package dataplane

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// Pinned maps outlive the program that made them: an agent of another
// version adopts them. That is only sound while both programs agree on
// every map's layout. A layout record, pinned beside the maps, holds a
// fingerprint of each: type, key and value sizes, entries, flags and the
// BTF description of key and value (so a reordered struct of the same
// size counts as a change). It is derived from the compiled objects, so
// no one has to remember to bump a version number.
//
// On a mismatch the agent migrates: it creates fresh maps, programs them
// from its configuration while the old program keeps forwarding on the
// old maps, swaps the program (the new one uses the new maps), and only
// then moves the pins and writes the new record. Everything in the maps is
// derived from the configuration except counters, which restart at zero.
// A record this version cannot read is refused: the state was written by
// a newer xlb.

// layoutPin is the pinned hash map holding the layout record. No program
// uses it.
const layoutPin = "xlb_layout"

// layoutFormat is the record's own format. The key formatKey holds it.
// Format 2 added the flow hash entry; a format 1 record was written by an
// xlb that hashed flows with lookup3.
const layoutFormat = 2

// formatKey names the record's format entry; map names cannot be empty.
var formatKey = layoutKey("")

// flowHashKey names the record's flow hash entry (format 2 on): the
// FlowHashKind of the program that wrote it, in its first four bytes. No
// map name has a '/'.
var flowHashKey = layoutKey("/flow_hash")

// record is a layout record as read back.
type record struct {
	maps     layout
	format   uint32
	flowHash FlowHashKind
}

// layout maps each pinned map's name to its fingerprint.
type layout map[string][sha256.Size]byte

// layoutKey is a map name as the record's key: BPF object names fit in 16
// bytes with their terminating NUL.
func layoutKey(name string) [16]byte {
	var k [16]byte
	copy(k[:15], name)
	return k
}

// specLayout fingerprints the maps spec pins (every map whose name does
// not start with '.').
func specLayout(spec *ebpf.CollectionSpec) layout {
	l := layout{}
	for name, m := range spec.Maps {
		if strings.HasPrefix(name, ".") {
			continue
		}
		l[name] = sha256.Sum256([]byte(describeMap(m)))
	}
	return l
}

func describeMap(m *ebpf.MapSpec) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v key=%d value=%d entries=%d flags=%#x key{%s} value{%s}",
		m.Type, m.KeySize, m.ValueSize, m.MaxEntries, m.Flags, describeType(m.Key, 0), describeType(m.Value, 0))
	if m.InnerMap != nil {
		fmt.Fprintf(&b, " inner{%s}", describeMap(m.InnerMap))
	}
	return b.String()
}

// describeType writes a BTF type as text: names, sizes, member offsets and
// element counts, which is what decides how bytes are read.
func describeType(t btf.Type, depth int) string {
	if t == nil {
		return ""
	}
	if depth > 8 {
		return "…"
	}
	switch t := t.(type) {
	case *btf.Typedef:
		return describeType(t.Type, depth+1)
	case *btf.Volatile:
		return describeType(t.Type, depth+1)
	case *btf.Const:
		return describeType(t.Type, depth+1)
	case *btf.Int:
		return fmt.Sprintf("int%d/%v", t.Size*8, t.Encoding)
	case *btf.Array:
		return fmt.Sprintf("[%d]%s", t.Nelems, describeType(t.Type, depth+1))
	case *btf.Struct:
		return "struct " + describeMembers(t.Size, t.Members, depth)
	case *btf.Union:
		return "union " + describeMembers(t.Size, t.Members, depth)
	case *btf.Pointer:
		return "ptr"
	case *btf.Enum:
		return fmt.Sprintf("enum%d", t.Size*8)
	}
	size, _ := btf.Sizeof(t)
	return fmt.Sprintf("%T/%d", t, size)
}

func describeMembers(size uint32, ms []btf.Member, depth int) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = fmt.Sprintf("%s@%d:%d %s", m.Name, m.Offset, m.BitfieldSize, describeType(m.Type, depth+1))
	}
	return fmt.Sprintf("%d{%s}", size, strings.Join(parts, ", "))
}

// migration is what adopting the pinned state needs.
type migration struct {
	migrate bool   // create fresh maps; move the pins after the swap
	reason  string // why, for the log
}

// planAdoption compares the pinned layout record under pinPath with want.
// Nothing pinned: nothing to migrate. A record of an unknown format, or
// of a program that hashed flows otherwise than flowHash: refused.
func planAdoption(pinPath string, want layout, flowHash FlowHashKind) (migration, error) {
	pinned := false
	for name := range want {
		if _, err := os.Stat(filepath.Join(pinPath, name)); err == nil {
			pinned = true
			break
		}
	}
	if !pinned {
		return migration{}, nil
	}
	rec, err := readLayout(pinPath)
	if errors.Is(err, os.ErrNotExist) {
		// Which flow hash the pinned program computes is unknown here:
		// an xlb from before layout records (it hashed with lookup3), or
		// a crash between the record's unpin and pin.
		return migration{true, "the pinned maps carry no layout record (an xlb from before layout records made them, or one stopped while it wrote the record)"}, nil
	}
	if err != nil {
		return migration{}, err
	}
	if rec.format > layoutFormat {
		return migration{}, fmt.Errorf("pinned state under %s has a layout record of format %d, and this xlb only reads formats up to %d: it was written by a newer xlb. Run that version, or stop it and run `xlb cleanup` (drops established flows)", pinPath, rec.format, layoutFormat)
	}
	if rec.flowHash != FlowHashFmix64 && rec.flowHash != FlowHashLookup3 {
		return migration{}, fmt.Errorf("the program pinned under %s hashes flows with a hash this xlb does not know (%d): a newer xlb wrote it. Run that version, or stop it and run `xlb cleanup` (drops established flows)", pinPath, uint32(rec.flowHash))
	}
	if rec.flowHash != flowHash {
		older := ""
		if rec.format < 2 {
			older = " (an xlb from before dataplane.flowHash, which always hashed with lookup3)"
		}
		return migration{}, fmt.Errorf("the program pinned under %s hashes flows with %s%s, and the configuration asks for %s: established connections through this node would move to other backends. Set dataplane.flowHash: %s, on every node (all must hash alike), or stop the agent and run `xlb cleanup` to start afresh (drops established flows)",
			pinPath, rec.flowHash, older, flowHash, rec.flowHash)
	}
	got := rec.maps
	var changed []string
	for name, fp := range want {
		if got[name] != fp {
			changed = append(changed, name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			changed = append(changed, name+" (gone)")
		}
	}
	if len(changed) == 0 {
		return migration{}, nil
	}
	slices.Sort(changed)
	return migration{true, "map layouts changed: " + strings.Join(changed, ", ")}, nil
}

// readLayout reads the pinned layout record. A record of a format before
// 2 names no flow hash: its writer hashed with lookup3.
func readLayout(pinPath string) (record, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinPath, layoutPin), nil)
	if err != nil {
		return record{}, err
	}
	defer m.Close()
	if m.KeySize() != 16 || m.ValueSize() != sha256.Size {
		return record{}, fmt.Errorf("pinned %s under %s is not an xlb layout record (key %d, value %d bytes): stop whatever made it and run `xlb cleanup`", layoutPin, pinPath, m.KeySize(), m.ValueSize())
	}
	rec := record{maps: layout{}}
	hasHash := false
	var k [16]byte
	var v [sha256.Size]byte
	it := m.Iterate()
	for it.Next(&k, &v) {
		switch k {
		case formatKey:
			rec.format = binary.LittleEndian.Uint32(v[:])
		case flowHashKey:
			rec.flowHash, hasHash = FlowHashKind(binary.LittleEndian.Uint32(v[:])), true
		default:
			rec.maps[strings.TrimRight(string(k[:]), "\x00")] = v
		}
	}
	if err := it.Err(); err != nil {
		return record{}, fmt.Errorf("read %s: %w", layoutPin, err)
	}
	switch {
	case rec.format == 0:
		return record{}, fmt.Errorf("pinned %s under %s has no format entry: stop whatever wrote it and run `xlb cleanup` (drops established flows)", layoutPin, pinPath)
	case rec.format < 2:
		rec.flowHash = FlowHashLookup3
	case rec.format <= layoutFormat && !hasHash:
		return record{}, fmt.Errorf("pinned %s under %s names no flow hash although its format %d has one: stop whatever wrote it and run `xlb cleanup` (drops established flows)", layoutPin, pinPath, rec.format)
	}
	return rec, nil
}

// writeLayout replaces the pinned layout record with l and the program's
// flow hash: a new map, pinned in place of the old one, so a reader never
// sees half of each.
func writeLayout(pinPath string, l layout, flowHash FlowHashKind) error {
	m, err := ebpf.NewMap(&ebpf.MapSpec{
		Name:       layoutPin,
		Type:       ebpf.Hash,
		KeySize:    16,
		ValueSize:  sha256.Size,
		MaxEntries: uint32(len(l) + 2),
	})
	if err != nil {
		return fmt.Errorf("create layout record: %w", err)
	}
	defer m.Close()
	var f, h [sha256.Size]byte
	binary.LittleEndian.PutUint32(f[:], layoutFormat)
	binary.LittleEndian.PutUint32(h[:], uint32(flowHash))
	if err := m.Put(formatKey, f); err != nil {
		return fmt.Errorf("write layout record: %w", err)
	}
	if err := m.Put(flowHashKey, h); err != nil {
		return fmt.Errorf("write layout record: %w", err)
	}
	for name, fp := range l {
		if err := m.Put(layoutKey(name), fp); err != nil {
			return fmt.Errorf("write layout record: %w", err)
		}
	}
	return replacePin(m, filepath.Join(pinPath, layoutPin))
}

// replacePin pins m at path in place of whatever is pinned there. bpffs
// has no rename over an existing pin: remove, then pin. A crash between
// the two leaves nothing at path, which the next agent treats like any
// other state that needs migrating.
func replacePin(m *ebpf.Map, path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("unpin %s: %w", path, err)
	}
	if err := m.Pin(path); err != nil {
		return fmt.Errorf("pin %s: %w", path, err)
	}
	return nil
}

// namedMaps lists the pinnable maps of the loaded objects by name, from
// the struct tags bpf2go generates.
func (o *lbObjects) namedMaps() map[string]*ebpf.Map {
	out := map[string]*ebpf.Map{}
	v := reflect.ValueOf(&o.lbMaps).Elem()
	for i := range v.NumField() {
		name := v.Type().Field(i).Tag.Get("ebpf")
		m, ok := v.Field(i).Interface().(*ebpf.Map)
		if name == "" || strings.HasPrefix(name, ".") || !ok || m == nil {
			continue
		}
		out[name] = m
	}
	return out
}
