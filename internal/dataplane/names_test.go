package dataplane

import (
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// The names are held to the C enums in package wire; the counter maps
// must have one entry per name.
func TestReasonsMapMatchesNames(t *testing.T) {
	spec, err := loadLb()
	if err != nil {
		t.Fatal(err)
	}
	if n := spec.Maps["reasons"].MaxEntries; int(n) != len(wire.ReasonNames) {
		t.Fatalf("reasons map has %d entries, Go names %d", n, len(wire.ReasonNames))
	}
}

func TestDecapMapsMatchNames(t *testing.T) {
	spec, err := loadBackend()
	if err != nil {
		t.Fatal(err)
	}
	if n := spec.Maps["decap_stats"].MaxEntries; int(n) != len(wire.DecapStatNames) {
		t.Fatalf("decap_stats map has %d entries, Go names %d", n, len(wire.DecapStatNames))
	}
	if n := spec.Maps["chain_stats"].MaxEntries; int(n) != len(wire.ChainStatNames) {
		t.Fatalf("chain_stats map has %d entries, Go names %d", n, len(wire.ChainStatNames))
	}
}

func TestLimitsMatchC(t *testing.T) {
	spec, err := loadLb()
	if err != nil {
		t.Fatal(err)
	}
	if n := spec.Maps["svc_index"].MaxEntries; n != SvcSlots || SvcSlots < 4*MaxServices {
		t.Errorf("svc_index map %d entries, SvcSlots %d, MaxServices %d", n, SvcSlots, MaxServices)
	}
	if n := spec.Maps["backends"].MaxEntries; n != DefaultMaxBackends {
		t.Errorf("backends map %d entries, DefaultMaxBackends %d", n, DefaultMaxBackends)
	}
	if n := spec.Maps["conntrack"].MaxEntries; n != DefaultConntrackSize {
		t.Errorf("conntrack map %d entries, DefaultConntrackSize %d", n, DefaultConntrackSize)
	}
	if n := spec.Maps["chain_tables"].MaxEntries; n != MaxServices {
		t.Errorf("chain_tables map %d entries, MaxServices %d", n, MaxServices)
	}
	for _, name := range []string{"maglev_tables", "svc_retired", "vips"} {
		if n := spec.Maps[name].MaxEntries; n != MaxServices {
			t.Errorf("%s map %d entries, MaxServices %d", name, n, MaxServices)
		}
	}
	if n := spec.Maps["vip_filter"].MaxEntries; n != vipFilterWords {
		t.Errorf("vip_filter map %d entries, vipFilterWords %d", n, vipFilterWords)
	}
	if config.MaxServices != MaxServices {
		t.Errorf("config.MaxServices %d, dataplane.MaxServices %d", config.MaxServices, MaxServices)
	}
}

// mapTypes says which Go type writes the key or value of a map.
type mapTypes struct {
	mapName string
	key     bool
	inner   bool // the key or value of the map's inner map
	goValue any
}

// checkMapTypes holds the programs' map keys and values to the Go types
// that read and write them: the same size, members and offsets.
func checkMapTypes(t *testing.T, spec *ebpf.CollectionSpec, cases []mapTypes) {
	t.Helper()
	for _, c := range cases {
		ms := spec.Maps[c.mapName]
		if ms == nil {
			t.Errorf("no map %s", c.mapName)
			continue
		}
		if c.inner {
			ms = ms.InnerMap
		}
		typ := ms.Value
		if c.key {
			typ = ms.Key
		}
		if err := wire.Layout(c.goValue, typ); err != nil {
			t.Errorf("map %s (key %v, inner %v): %v", c.mapName, c.key, c.inner, err)
		}
	}
}

func TestLBMapTypesAreWire(t *testing.T) {
	spec, err := loadLb()
	if err != nil {
		t.Fatal(err)
	}
	checkMapTypes(t, spec, []mapTypes{
		{"svc_index", false, false, wire.SvcSlot{}},
		{"backends", false, false, wire.Backend{}},
		{"maglev_tables", false, true, wire.TableEntry(0)},
		{"chain_tables", false, true, wire.ChainEntry{}},
		{"conntrack", true, false, wire.CtKey{}},
		{"conntrack", false, false, wire.CtEntry{}},
		{"backend_stats", false, false, wire.BackendState{}},
		{"svc_retired", false, false, wire.Counter{}},
	})
}

func TestBackendMapTypesAreWire(t *testing.T) {
	spec, err := loadBackend()
	if err != nil {
		t.Fatal(err)
	}
	checkMapTypes(t, spec, []mapTypes{
		{"decap_stats", false, false, wire.Counter{}},
		{"chain_stats", false, false, wire.Counter{}},
		{"nat_stats", false, false, wire.Counter{}},
		{"chain_cfg", false, false, wire.ChainCfg{}},
		{"chain_from", true, false, wire.ChainPeerKey{}},
		{"chain_to", true, false, wire.ChainPeerKey{}},
		{"chain_gens", true, false, wire.ChainSvcKey{}},
		{"nat_svcs", true, false, wire.NATSvcKey{}},
		{"nat_flows", true, false, wire.NATFlowKey{}},
		{"nat_flows", false, false, wire.NATVIP{}},
		{"nat_rev_ports", true, false, wire.NATRevKey{}},
		{"nat_rev_ports", false, false, wire.NATVIP{}},
	})
}
