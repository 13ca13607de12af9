package lb

import (
	"testing"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/testbed/xdptest"
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
	for _, name := range []string{"nat_fwd", "nat_rev"} {
		if n := spec.Maps[name].MaxEntries; n != DefaultNATSessions {
			t.Errorf("%s map %d entries, DefaultNATSessions %d", name, n, DefaultNATSessions)
		}
	}
	for _, name := range []string{"nat_fwd_syn", "nat_rev_syn"} {
		if n := spec.Maps[name].MaxEntries; n != embryonicSessions(DefaultNATSessions) {
			t.Errorf("%s map %d entries, embryonicSessions %d", name, n, embryonicSessions(DefaultNATSessions))
		}
	}
	for _, name := range []string{"nat_counters", "nat_swept"} {
		if n := spec.Maps[name].MaxEntries; int(n) != len(wire.LBNATStatNames) {
			t.Errorf("%s map %d entries, LBNATStatNames %d", name, n, len(wire.LBNATStatNames))
		}
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
		t.Errorf("config.MaxServices %d, lb.MaxServices %d", config.MaxServices, MaxServices)
	}
}

func TestLBMapTypesAreWire(t *testing.T) {
	spec, err := loadLb()
	if err != nil {
		t.Fatal(err)
	}
	xdptest.CheckMapTypes(t, spec, []xdptest.MapType{
		{Map: "svc_index", GoValue: wire.SvcSlot{}},
		{Map: "backends", GoValue: wire.Backend{}},
		{Map: "vips", Key: true, GoValue: wire.Addr{}},
		{Map: "maglev_tables", Inner: true, GoValue: wire.TableEntry(0)},
		{Map: "chain_tables", Inner: true, GoValue: wire.ChainEntry{}},
		{Map: "conntrack", Key: true, GoValue: wire.CtKey{}},
		{Map: "conntrack", GoValue: wire.CtEntry{}},
		{Map: "backend_stats", GoValue: wire.BackendState{}},
		{Map: "svc_retired", GoValue: wire.Counter{}},
		{Map: "nat_fwd", Key: true, GoValue: wire.SessionKey{}},
		{Map: "nat_fwd", GoValue: wire.SessionFwd{}},
		{Map: "nat_rev", Key: true, GoValue: wire.SessionKey{}},
		{Map: "nat_rev", GoValue: wire.Session{}},
		{Map: "nat_fwd_syn", Key: true, GoValue: wire.SessionKey{}},
		{Map: "nat_fwd_syn", GoValue: wire.SessionKey{}},
		{Map: "nat_rev_syn", Key: true, GoValue: wire.SessionKey{}},
		{Map: "nat_rev_syn", GoValue: wire.Session{}},
		{Map: "nat_cfg", GoValue: wire.NATCfg{}},
		{Map: "nat_dnat_be", Key: true, GoValue: wire.NATBackendKey{}},
	})
}
