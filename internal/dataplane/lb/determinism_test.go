package lb

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/xlbproject/xlb/internal/maglev"
)

// instance programs one independently loaded LB program with the backend
// set in the given order, with its own backend IDs, as a separate xlb
// node would.
func instance(t *testing.T, addrs []netip.Addr, idBase uint32) *Dataplane {
	t.Helper()
	return instanceWith(t, addrs, idBase, false)
}

// instanceWith is instance with the service's client-IP affinity set to
// clientIP.
func instanceWith(t *testing.T, addrs []netip.Addr, idBase uint32, clientIP bool) *Dataplane {
	t.Helper()
	d, err := New(Options{NodeAddr: fxNode, TableSize: maglev.DefaultSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	bs := make([]maglev.Backend, len(addrs))
	for i, a := range addrs {
		bs[i] = maglev.Backend{Key: netip.AddrPortFrom(a, 80).String(), Weight: 1}
		if err := d.UpsertBackend(idBase+uint32(i), apOf(a)); err != nil {
			t.Fatal(err)
		}
	}
	slots, err := maglev.Build(bs, maglev.DefaultSize)
	if err != nil {
		t.Fatal(err)
	}
	table := make([]uint32, len(slots))
	for i, s := range slots {
		table[i] = idBase + uint32(s)
	}
	if err := d.UpsertService(Service{ID: idBase % MaxServices, Key: ServiceKey{fxVIP, 80, ProtoTCP}, Encap: EncapIPIP, Table: table, ClientIP: clientIP}); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestInstancesAgree: ECMP may send any packet of a flow to any xlb
// node; two nodes with the same backend set must choose the same backend
// for every flow, whatever order they learned the backends in.
func TestInstancesAgree(t *testing.T) {
	requirePrivileges(t)
	f := newFixtureNS(t)
	var addrs []netip.Addr
	for i := 0; i < 16; i++ {
		addrs = append(addrs, netip.AddrFrom4([4]byte{10, 0, 3, byte(10 + i)}))
	}
	reversed := make([]netip.Addr, len(addrs))
	for i, a := range addrs {
		reversed[len(addrs)-1-i] = a
	}
	a := instance(t, addrs, 0)
	b := instance(t, reversed, 100)

	rng := rand.New(rand.NewPCG(1, 2))
	flows := 5000
	if testing.Short() {
		flows = 500
	}
	hits := map[netip.Addr]int{}
	for i := 0; i < flows; i++ {
		p := tcpTo(fxVIP, 80)
		p.Src = netip.AddrFrom4([4]byte{byte(1 + rng.IntN(223)), byte(rng.IntN(256)), byte(rng.IntN(256)), byte(1 + rng.IntN(254))})
		p.Sport = uint16(1024 + rng.IntN(64000))
		frame := p.Frame(f.MAC)
		va, oa := f.Run(t, a.objs.XlbLbProg, frame)
		vb, ob := f.Run(t, b.objs.XlbLbProg, frame)
		if va != xdpTX || vb != xdpTX {
			t.Fatalf("verdicts %s %s", verdictNames[va], verdictNames[vb])
		}
		ba, bb := netip.AddrFrom4([4]byte(oa[30:34])), netip.AddrFrom4([4]byte(ob[30:34]))
		if ba != bb {
			t.Fatalf("flow %v:%d: instance A chose %v, instance B %v", p.Src, p.Sport, ba, bb)
		}
		hits[ba]++
	}
	if len(hits) != len(addrs) {
		t.Errorf("%d flows reached %d of %d backends: %v", flows, len(hits), len(addrs), fmt.Sprint(hits))
	}
}
