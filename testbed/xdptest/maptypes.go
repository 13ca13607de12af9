package xdptest

import (
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// MapType says which Go type writes the key or value of a map.
type MapType struct {
	Map     string
	Key     bool // the key, else the value
	Inner   bool // of the map's inner map
	GoValue any
}

// CheckMapTypes holds a program's map keys and values to the Go types that
// read and write them: the same size, members and offsets (wire.Layout).
func CheckMapTypes(t *testing.T, spec *ebpf.CollectionSpec, types []MapType) {
	t.Helper()
	for _, c := range types {
		ms := spec.Maps[c.Map]
		if ms == nil {
			t.Errorf("no map %s", c.Map)
			continue
		}
		if c.Inner {
			ms = ms.InnerMap
		}
		typ := ms.Value
		if c.Key {
			typ = ms.Key
		}
		if err := wire.Layout(c.GoValue, typ); err != nil {
			t.Errorf("map %s (key %v, inner %v): %v", c.Map, c.Key, c.Inner, err)
		}
	}
}
