package wire

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/cilium/ebpf/btf"
)

// Layout says how the Go value v differs from the C type t in memory:
// size, and for a struct the name and offset of every member,
// recursively. nil if the program and Go read the same bytes the same
// way. Tests hold the
// programs' maps to the Go types that write them with it.
func Layout(v any, t btf.Type) error {
	return layout(reflect.TypeOf(v), t)
}

func layout(g reflect.Type, t btf.Type) error {
	size, err := btf.Sizeof(t)
	if err != nil {
		return err
	}
	if int(g.Size()) != size {
		return fmt.Errorf("%v has %d bytes in Go, C %v %d", g, g.Size(), t, size)
	}
	st, ok := btf.UnderlyingType(t).(*btf.Struct)
	if !ok {
		return nil
	}
	if g.Kind() != reflect.Struct {
		return fmt.Errorf("%v is no struct in Go, C %v is", g, t)
	}
	var fields []reflect.StructField
	for i := range g.NumField() {
		if f := g.Field(i); f.Name != "_" || f.Type.Size() != 0 {
			fields = append(fields, f)
		}
	}
	if len(fields) != len(st.Members) {
		return fmt.Errorf("%v has %d fields in Go, C %v %d members", g, len(fields), t, len(st.Members))
	}
	for i, m := range st.Members {
		f := fields[i]
		if !strings.EqualFold(f.Name, strings.ReplaceAll(m.Name, "_", "")) {
			return fmt.Errorf("%v.%s is C member %s", g, f.Name, m.Name)
		}
		if uint32(f.Offset) != m.Offset.Bytes() || m.BitfieldSize != 0 {
			return fmt.Errorf("%v.%s at %d, C %s at %d", g, f.Name, f.Offset, m.Name, m.Offset.Bytes())
		}
		if err := layout(f.Type, m.Type); err != nil {
			return fmt.Errorf("%v.%s: %w", g, f.Name, err)
		}
	}
	return nil
}
