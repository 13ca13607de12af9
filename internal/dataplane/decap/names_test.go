package decap

import (
	"testing"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/testbed/xdptest"
)

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

func TestBackendMapTypesAreWire(t *testing.T) {
	spec, err := loadBackend()
	if err != nil {
		t.Fatal(err)
	}
	xdptest.CheckMapTypes(t, spec, []xdptest.MapType{
		{Map: "decap_stats", GoValue: wire.Counter{}},
		{Map: "chain_stats", GoValue: wire.Counter{}},
		{Map: "nat_stats", GoValue: wire.Counter{}},
		{Map: "chain_cfg", GoValue: wire.ChainCfg{}},
		{Map: "host_addrs", Key: true, GoValue: wire.Addr{}},
		{Map: "decap_vips", Key: true, GoValue: wire.Addr{}},
		{Map: "nat_pods", Key: true, GoValue: wire.Addr{}},
		{Map: "nat_pod_netns", Key: true, GoValue: wire.Addr{}},
		{Map: "chain_from", Key: true, GoValue: wire.ChainPeerKey{}},
		{Map: "chain_to", Key: true, GoValue: wire.ChainPeerKey{}},
		{Map: "chain_gens", Key: true, GoValue: wire.ChainSvcKey{}},
		{Map: "nat_svcs", Key: true, GoValue: wire.NATSvcKey{}},
		{Map: "nat_flows", Key: true, GoValue: wire.NATFlowKey{}},
		{Map: "nat_flows", GoValue: wire.NATVIP{}},
		{Map: "nat_rev_ports", Key: true, GoValue: wire.NATRevKey{}},
		{Map: "nat_rev_ports", GoValue: wire.NATVIP{}},
	})
}
