package bpfobj

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

	"github.com/xlbproject/xlb/internal/dataplane/wire"
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

// LayoutPin is the file name of the pinned hash map holding the layout
// record, inside a pin directory. No program uses it.
const LayoutPin = "xlb_layout"

// LayoutFormat is the record's own format. The key formatKey holds it.
// Format 2 added the flow hash entry; a format 1 record was written by an
// xlb that hashed flows with lookup3.
const LayoutFormat = 2

// formatKey names the record's format entry; map names cannot be empty.
var formatKey = LayoutKey("")

// flowHashKey names the record's flow hash entry (format 2 on): the
// wire.FlowHash of the program that wrote it, in its first four bytes. No
// map name has a '/'.
var flowHashKey = LayoutKey("/flow_hash")

// Record is a layout record as read back.
type Record struct {
	Maps     Layout
	Format   uint32
	FlowHash wire.FlowHash
}

// Layout maps each pinned map's name to its fingerprint.
type Layout map[string][sha256.Size]byte

// LayoutKey is the record's key of the entry named name (a map's name):
// BPF object names fit in 16 bytes with their terminating NUL.
func LayoutKey(name string) [16]byte {
	var k [16]byte
	copy(k[:15], name)
	return k
}

// SpecLayout fingerprints the maps spec pins (every map whose name does
// not start with '.').
func SpecLayout(spec *ebpf.CollectionSpec) Layout {
	l := Layout{}
	for name, m := range spec.Maps {
		if strings.HasPrefix(name, ".") {
			continue
		}
		l[name] = Fingerprint(m)
	}
	return l
}

// Fingerprint is map spec m's entry in a layout record.
func Fingerprint(m *ebpf.MapSpec) [sha256.Size]byte {
	return sha256.Sum256([]byte(describeMap(m)))
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

// Migration is what adopting the pinned state needs.
type Migration struct {
	Migrate bool   // create fresh maps; move the pins after the swap
	Reason  string // why, for the log
}

// PlanAdoption compares the pinned layout record under pinPath with want.
// Nothing pinned: nothing to migrate. A record of an unknown format, or
// of a program that hashed flows otherwise than flowHash: refused.
func PlanAdoption(pinPath string, want Layout, flowHash wire.FlowHash) (Migration, error) {
	pinned := false
	for name := range want {
		if _, err := os.Stat(filepath.Join(pinPath, name)); err == nil {
			pinned = true
			break
		}
	}
	if !pinned {
		return Migration{}, nil
	}
	rec, err := ReadLayout(pinPath)
	if errors.Is(err, os.ErrNotExist) {
		// Which flow hash the pinned program computes is unknown here:
		// an xlb from before layout records (it hashed with lookup3), or
		// a crash between the record's unpin and pin.
		return Migration{true, "the pinned maps carry no layout record (an xlb from before layout records made them, or one stopped while it wrote the record)"}, nil
	}
	if err != nil {
		return Migration{}, err
	}
	if rec.Format > LayoutFormat {
		return Migration{}, fmt.Errorf("pinned state under %s has a layout record of format %d, and this xlb only reads formats up to %d: it was written by a newer xlb. Run that version, or stop it and run `xlb cleanup` (drops established flows)", pinPath, rec.Format, LayoutFormat)
	}
	if rec.FlowHash != wire.FlowHashFmix64 && rec.FlowHash != wire.FlowHashLookup3 {
		return Migration{}, fmt.Errorf("the program pinned under %s hashes flows with a hash this xlb does not know (%d): a newer xlb wrote it. Run that version, or stop it and run `xlb cleanup` (drops established flows)", pinPath, uint32(rec.FlowHash))
	}
	if rec.FlowHash != flowHash {
		older := ""
		if rec.Format < 2 {
			older = " (an xlb from before dataplane.flowHash, which always hashed with lookup3)"
		}
		return Migration{}, fmt.Errorf("the program pinned under %s hashes flows with %s%s, and the configuration asks for %s: established connections through this node would move to other backends. Set dataplane.flowHash: %s, on every node (all must hash alike), or stop the agent and run `xlb cleanup` to start afresh (drops established flows)",
			pinPath, rec.FlowHash, older, flowHash, rec.FlowHash)
	}
	got := rec.Maps
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
		return Migration{}, nil
	}
	slices.Sort(changed)
	return Migration{true, "map layouts changed: " + strings.Join(changed, ", ")}, nil
}

// ReadLayout reads the layout record pinned under pinPath. A record of a
// format before 2 names no flow hash: its writer hashed with lookup3.
func ReadLayout(pinPath string) (Record, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinPath, LayoutPin), nil)
	if err != nil {
		return Record{}, err
	}
	defer m.Close()
	if m.KeySize() != 16 || m.ValueSize() != sha256.Size {
		return Record{}, fmt.Errorf("pinned %s under %s is not an xlb layout record (key %d, value %d bytes): stop whatever made it and run `xlb cleanup`", LayoutPin, pinPath, m.KeySize(), m.ValueSize())
	}
	rec := Record{Maps: Layout{}}
	hasHash := false
	var k [16]byte
	var v [sha256.Size]byte
	it := m.Iterate()
	for it.Next(&k, &v) {
		switch k {
		case formatKey:
			rec.Format = binary.LittleEndian.Uint32(v[:])
		case flowHashKey:
			rec.FlowHash, hasHash = wire.FlowHash(binary.LittleEndian.Uint32(v[:])), true
		default:
			rec.Maps[strings.TrimRight(string(k[:]), "\x00")] = v
		}
	}
	if err := it.Err(); err != nil {
		return Record{}, fmt.Errorf("read %s: %w", LayoutPin, err)
	}
	switch {
	case rec.Format == 0:
		return Record{}, fmt.Errorf("pinned %s under %s has no format entry: stop whatever wrote it and run `xlb cleanup` (drops established flows)", LayoutPin, pinPath)
	case rec.Format < 2:
		rec.FlowHash = wire.FlowHashLookup3
	case rec.Format <= LayoutFormat && !hasHash:
		return Record{}, fmt.Errorf("pinned %s under %s names no flow hash although its format %d has one: stop whatever wrote it and run `xlb cleanup` (drops established flows)", LayoutPin, pinPath, rec.Format)
	}
	return rec, nil
}

// WriteLayout replaces the layout record pinned under pinPath with l and
// the program's flow hash: a new map, pinned in place of the old one, so a
// reader never sees half of each.
func WriteLayout(pinPath string, l Layout, flowHash wire.FlowHash) error {
	m, err := ebpf.NewMap(&ebpf.MapSpec{
		Name:       LayoutPin,
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
	binary.LittleEndian.PutUint32(f[:], LayoutFormat)
	binary.LittleEndian.PutUint32(h[:], uint32(flowHash))
	if err := m.Put(formatKey, f); err != nil {
		return fmt.Errorf("write layout record: %w", err)
	}
	if err := m.Put(flowHashKey, h); err != nil {
		return fmt.Errorf("write layout record: %w", err)
	}
	for name, fp := range l {
		if err := m.Put(LayoutKey(name), fp); err != nil {
			return fmt.Errorf("write layout record: %w", err)
		}
	}
	return ReplacePin(m, filepath.Join(pinPath, LayoutPin))
}

// ReplacePin pins m at path in place of whatever is pinned there. bpffs
// has no rename over an existing pin: remove, then pin. A crash between
// the two leaves nothing at path, which the next agent treats like any
// other state that needs migrating.
func ReplacePin(m *ebpf.Map, path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("unpin %s: %w", path, err)
	}
	if err := m.Pin(path); err != nil {
		return fmt.Errorf("pin %s: %w", path, err)
	}
	return nil
}

// MapsOf lists the pinnable maps of maps, a pointer to a struct of maps
// that bpf2go generates (its xxxMaps), by name, from the struct tags.
func MapsOf(maps any) map[string]*ebpf.Map {
	out := map[string]*ebpf.Map{}
	v := reflect.ValueOf(maps).Elem()
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

// PinMaps marks the collection's state maps for pinning by name; the
// global-variable maps (.rodata, .bss) belong to one program version.
func PinMaps(spec *ebpf.CollectionSpec) {
	for name, m := range spec.Maps {
		if !strings.HasPrefix(name, ".") {
			m.Pinning = ebpf.PinByName
		}
	}
}
