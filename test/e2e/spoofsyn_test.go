package e2e

import (
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/dataplane/lb"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
)

// spoofedConns is how many live connections the forged SYNs target, and
// spoofedSYNs how many each of them gets.
const (
	spoofedConns = 24
	spoofedSYNs  = 3
)

// A SYN forged with a live client's address and port must not move its
// connection in a stateful service. Connections open to the service's
// only backend; three backends join, and the new table gives most of the
// connections' slots to them while the first stays in the service; then
// a second client, on the same segment, sends SYNs with the first
// client's address and each connection's port (no sequence numbers: it
// cannot know them). The node must keep every connection on its backend:
// the backend answers the SYNs with challenge ACKs, and every connection
// still works. A node that let a SYN re-pick from the table sent it to
// the slot's new owner, whose answer reset the client's connection.
func TestStatefulSpoofedSYN(t *testing.T) {
	ctx, p := startLab(t, "y", lab.Spec{Clients: 2, Nodes: 1, Backends: 4, Router: lab.RouterEmbedded}, 4*time.Minute)
	var err error
	logAgentsOnFailure(t, p)
	node, first := p.Nodes[0], p.Backends[0]
	svc := labrun.Service{Name: "web", VIP: p.VIPs[0], Port: lab.HTTPPort, Protocol: config.TCP, Forwarding: config.DSRIPIP,
		Flows: config.FlowsStateful, Backends: []netip.Addr{first.Addr}}
	if err := labrun.WriteConfig(p, node, []labrun.Service{svc}); err != nil {
		t.Fatal(err)
	}
	if _, err := labrun.StartAgent(ctx, p, node, []labrun.Service{svc}); err != nil {
		t.Fatal(err)
	}
	if err := lab.WaitNextHops(ctx, p, svc.VIP, []netip.Addr{node.Addr}, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	conns := make([]*labrun.HTTPConn, spoofedConns)
	flows := make([]netip.AddrPort, spoofedConns)
	for i := range conns {
		c, err := labrun.DialHTTP(ctx, p.Clients[0].Namespace, svc.Target())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if name, err := c.Get(ctx, false); err != nil || name != first.Name {
			t.Fatalf("connection %d: answered by %q (%v), want %s", i, name, err, first.Name)
		}
		conns[i], flows[i] = c, c.LocalAddr()
	}

	scaled := svc
	scaled.Backends = nil
	for _, b := range p.Backends {
		scaled.Backends = append(scaled.Backends, b.Addr)
	}
	if _, err := labrun.Reconfigure(ctx, p, []labrun.Service{scaled}); err != nil {
		t.Fatal(err)
	}
	moved := 0
	for _, be := range tableBackends(t, node, svc.Target(), flows) {
		if be != first.Addr {
			moved++
		}
	}
	if moved == 0 {
		t.Fatalf("the new table leaves all %d connections' slots to %s: forged SYNs could move none, the test shows nothing", len(flows), first.Name)
	}

	before := backendPackets(t, p, node, first.Addr)
	sent, err := labrun.ForgeSYNs(ctx, p.Clients[1].Namespace, svc.Target(), flows, spoofedSYNs)
	if err != nil {
		t.Fatal(err)
	}
	// The backends' answers (challenge ACKs, or the SYN-ACKs and resets
	// of a backend without the connection) reach the client meanwhile.
	time.Sleep(time.Second)
	got := backendPackets(t, p, node, first.Addr) - before

	broken := 0
	for i, c := range conns {
		if name, err := c.Get(ctx, false); err != nil || name != first.Name {
			broken++
			t.Logf("connection %d from %s: answered by %q (%v), want %s", i, flows[i], name, err, first.Name)
		}
	}
	t.Logf("%d SYNs forged from %s for %d live connections of %s, %d of whose slots the new table gives other backends; the node sent %s %d packets meanwhile; %d connections broken",
		sent, p.Clients[1].Name, len(conns), p.Clients[0].Name, moved, first.Name, got, broken)
	if got < uint64(sent) {
		t.Errorf("the node sent %s %d packets during the %d forged SYNs: some went elsewhere", first.Name, got, sent)
	}
	if broken != 0 {
		t.Errorf("forged SYNs broke %d of %d live connections of a stateful service, want none", broken, len(conns))
	}
}

// tableBackends returns the backend the Maglev table pinned by node names
// for each TCP flow from flows to target. The node serves one service.
func tableBackends(t *testing.T, node lab.Host, target netip.AddrPort, flows []netip.AddrPort) []netip.Addr {
	t.Helper()
	outer, err := ebpf.LoadPinnedMap(filepath.Join(node.PinDir, "maglev_tables"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Close()
	var (
		k  uint32
		id ebpf.MapID
	)
	if it := outer.Iterate(); !it.Next(&k, &id) {
		t.Fatalf("%s has no Maglev table (%v)", node.Name, it.Err())
	}
	table, err := ebpf.NewMapFromID(id)
	if err != nil {
		t.Fatal(err)
	}
	defer table.Close()
	out := make([]netip.Addr, len(flows))
	for i, f := range flows {
		h := lb.FlowHash(f.Addr(), target.Addr(), f.Port(), target.Port(), lb.ProtoTCP)
		var v wire.TableEntry
		if err := table.Lookup(lb.Slot(h, table.MaxEntries()), &v); err != nil {
			t.Fatal(err)
		}
		out[i] = wire.AddrFrom4(v.Addr())
	}
	return out
}

// backendPackets is how many packets node's agent reports it sent
// backend addr, over its services.
func backendPackets(t *testing.T, p lab.Plan, node lab.Host, addr netip.Addr) uint64 {
	t.Helper()
	st, err := api.GetStatus(labrun.Socket(p, node))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, s := range st.Services {
		for _, b := range s.Backends {
			if b.Address == addr {
				n += b.Counters.Packets
			}
		}
	}
	return n
}
