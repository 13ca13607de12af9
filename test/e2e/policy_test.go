package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
)

// persistentConns is how many connections the hot list changes run
// under.
const persistentConns = 100

// TestPolicy runs a node whose web service admits one of the lab's two
// clients (its source ranges hold client1's address alone): client1 is
// served, client2 is dropped at the node and counted for the service;
// a deny list that holds client1 turns it away too, as the deny list
// beats a service's ranges. Then both lists change again and again, hot,
// while 100 connections of client1 run requests: none breaks, and the
// node drops none of their packets.
func TestPolicy(t *testing.T) {
	ctx, p := startLab(t, "p", lab.Spec{Clients: 2, Nodes: 1, Backends: 2, Router: lab.RouterEmbedded}, 5*time.Minute)
	logAgentsOnFailure(t, p)
	node, inside, outside := p.Nodes[0], p.Clients[0], p.Clients[1]
	var backends []netip.Addr
	for _, b := range p.Backends {
		backends = append(backends, b.Addr)
	}
	svc := labrun.Service{Name: "web", VIP: p.VIPs[0], Port: lab.HTTPPort, Protocol: config.TCP, Forwarding: config.DSRIPIP,
		Backends: backends, SourceRanges: []netip.Prefix{netip.PrefixFrom(inside.Addr, 32)}}
	if err := labrun.WriteConfig(p, node, []labrun.Service{svc}); err != nil {
		t.Fatal(err)
	}
	if _, err := labrun.StartAgent(ctx, p, node, []labrun.Service{svc}); err != nil {
		t.Fatal(err)
	}
	if err := lab.WaitNextHops(ctx, p, svc.VIP, []netip.Addr{node.Addr}, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	e := &policyEnv{p: p, node: node, svc: svc}

	t.Run("SourceRanges", func(t *testing.T) {
		before := e.snapshot(t)
		drops := e.rangeDrops(t)
		tally, err := labrun.HTTPLoad(ctx, inside.Namespace, svc.Target(), 50, 4, nil)
		if err != nil || tally.Total() != 50 {
			t.Fatalf("client1, inside the ranges: %v answers (%v), want 50", tally, err)
		}
		refused := e.refused(ctx, t, outside, 3)
		d := e.snapshot(t).Since(before).Nodes[0].Reasons
		got := e.rangeDrops(t) - drops
		t.Logf("client1: %d answers; client2: %d of 3 connections refused; the node dropped %d packets for web's ranges (%d in all), %d denied",
			tally.Total(), refused, got, d["drop_source_range"], d["drop_denied"])
		if refused != 3 {
			t.Errorf("client2, outside the ranges, connected %d times of 3", 3-refused)
		}
		if got < 3 || d["drop_source_range"] != got || d["drop_denied"] != 0 {
			t.Errorf("the node counted %d drops for web's ranges (reason drop_source_range %d, drop_denied %d), want at least one per refused connection",
				got, d["drop_source_range"], d["drop_denied"])
		}
	})

	t.Run("DenyBeatsAllow", func(t *testing.T) {
		deny := labrun.NodeOptions{Deny: []netip.Prefix{netip.PrefixFrom(inside.Addr, 32), netip.MustParsePrefix("192.0.2.0/24")}}
		if _, err := labrun.ReconfigureWith(ctx, p, []labrun.Service{svc}, deny); err != nil {
			t.Fatal(err)
		}
		before := e.snapshot(t)
		if n := e.refused(ctx, t, inside, 2); n != 2 {
			t.Errorf("client1, in web's ranges and in the deny list, connected %d times of 2", 2-n)
		}
		d := e.snapshot(t).Since(before).Nodes[0].Reasons
		if d["drop_denied"] < 2 || d["drop_source_range"] != 0 {
			t.Errorf("reasons drop_denied %d, drop_source_range %d; want client1's packets denied, none dropped for the ranges", d["drop_denied"], d["drop_source_range"])
		}
		st, err := api.GetStatus(labrun.Socket(p, node))
		if err != nil || st.Policy.DenyPrefixes != 2 || st.Policy.Denied < 2 {
			t.Errorf("status policy %+v (%v), want 2 prefixes and client1's packets denied", st.Policy, err)
		}
		if _, err := labrun.Reconfigure(ctx, p, []labrun.Service{svc}); err != nil {
			t.Fatal(err)
		}
		if tally, err := labrun.HTTPLoad(ctx, inside.Namespace, svc.Target(), 10, 2, nil); err != nil || tally.Total() != 10 {
			t.Errorf("client1 once the deny list is gone: %v (%v), want 10 answers", tally, err)
		}
	})

	t.Run("HotChangesLoseNothing", func(t *testing.T) { e.hotChanges(ctx, t, inside) })
}

type policyEnv struct {
	p    lab.Plan
	node lab.Host
	svc  labrun.Service
}

func (e *policyEnv) snapshot(t *testing.T) labrun.Snapshot {
	t.Helper()
	s, err := labrun.TakeSnapshot(e.p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// rangeDrops is what the node dropped for web's source ranges (its
// status).
func (e *policyEnv) rangeDrops(t *testing.T) uint64 {
	t.Helper()
	st, err := api.GetStatus(labrun.Socket(e.p, e.node))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st.Services {
		if s.Name == e.svc.Name {
			return s.SourceRangeDrops.Packets
		}
	}
	t.Fatalf("no service %s in the status", e.svc.Name)
	return 0
}

// refused tries n connections from client c, each given a second, and
// says how many failed to connect.
func (e *policyEnv) refused(ctx context.Context, t *testing.T, c lab.Host, n int) int {
	t.Helper()
	failed := 0
	for range n {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := labrun.DialHTTP(dctx, c.Namespace, e.svc.Target())
		cancel()
		if err != nil {
			// A timeout is the drop; anything else is worth a line.
			if ne, ok := errors.AsType[net.Error](err); !ok || !ne.Timeout() {
				t.Logf("%s: %v", c.Name, err)
			}
			failed++
			continue
		}
		conn.Close()
	}
	return failed
}

// hotChanges changes the deny list and web's source ranges again and
// again while persistentConns connections of client c, which every one
// of those lists admits, run requests; none may break, and the node may
// drop none of their packets for either list.
func (e *policyEnv) hotChanges(ctx context.Context, t *testing.T, c lab.Host) {
	conns := make([]*labrun.HTTPConn, persistentConns)
	for i := range conns {
		conn, err := labrun.DialHTTP(ctx, c.Namespace, e.svc.Target())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		if _, err := conn.Get(ctx, false); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns[i] = conn
	}
	// The lists: each admits c, and each differs from the one before.
	mine := netip.PrefixFrom(c.Addr, 32)
	others := denyPrefixes(10_000)
	denies := [][]netip.Prefix{others, {netip.MustParsePrefix("192.0.2.0/24")}, nil, append(others[:5000:5000], netip.MustParsePrefix("198.51.100.0/24"))}
	ranges := [][]netip.Prefix{{netip.MustParsePrefix("10.0.2.0/24")}, {mine, netip.MustParsePrefix("192.0.2.0/24")}, {mine}, {netip.MustParsePrefix("10.0.0.0/8")}}

	before := e.snapshot(t)
	var requests, broken atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const workers = 4
	for w := range workers {
		wg.Go(func() {
			for {
				for i := w; i < len(conns); i += workers {
					select {
					case <-stop:
						return
					default:
					}
					if conns[i] == nil {
						continue
					}
					if _, err := conns[i].Get(ctx, false); err != nil {
						t.Logf("connection %d from %s broke: %v", i, conns[i].LocalAddr(), err)
						broken.Add(1)
						conns[i] = nil
						continue
					}
					requests.Add(1)
				}
			}
		})
	}
	const changes = 20
	start := time.Now()
	var errs []error
	for i := range changes {
		svc := e.svc
		svc.SourceRanges = ranges[i%len(ranges)]
		if _, err := labrun.ReconfigureWith(ctx, e.p, []labrun.Service{svc}, labrun.NodeOptions{Deny: denies[i%len(denies)]}); err != nil {
			errs = append(errs, fmt.Errorf("change %d: %w", i, err))
			break
		}
	}
	took := time.Since(start)
	// Requests on every connection after the last change, too.
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatal(errors.Join(errs...))
	}
	d := e.snapshot(t).Since(before)
	reasons := d.Nodes[0].Reasons
	var retrans uint64
	for _, h := range d.Clients {
		if h.Name == c.Name {
			retrans = h.IP.TCPRetransSegs
		}
	}
	t.Logf("%d hot changes of the deny list (up to %d prefixes) and web's source ranges in %s, under %d connections: %d requests, %d connections broken; the node denied %d packets, dropped %d for the ranges; %s retransmitted %d segments",
		changes, len(others), took.Round(time.Millisecond), len(conns), requests.Load(), broken.Load(), reasons["drop_denied"], reasons["drop_source_range"], c.Name, retrans)
	if broken.Load() != 0 {
		t.Errorf("%d of %d connections broke while the lists changed, want none", broken.Load(), len(conns))
	}
	if reasons["drop_denied"] != 0 || reasons["drop_source_range"] != 0 {
		t.Errorf("the node dropped %d packets as denied and %d for the ranges while the lists changed: packets of allowed flows lost", reasons["drop_denied"], reasons["drop_source_range"])
	}
	if requests.Load() < int64(len(conns)) {
		t.Errorf("only %d requests ran during the changes: the test measured too little", requests.Load())
	}
	for i, conn := range conns {
		if conn == nil {
			continue
		}
		if _, err := conn.Get(ctx, true); err != nil {
			t.Errorf("connection %d after the changes: %v", i, err)
		}
	}
}

// denyPrefixes returns n prefixes, /24 to /32, none in 10.0.0.0/8 (the
// lab's addresses).
func denyPrefixes(n int) []netip.Prefix {
	rng := rand.New(rand.NewPCG(22, uint64(n)))
	lab := netip.MustParsePrefix("10.0.0.0/8")
	var out []netip.Prefix
	for len(out) < n {
		v := rng.Uint32()
		a := netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
		p := netip.PrefixFrom(a, 24+rng.IntN(9)).Masked()
		if !p.Overlaps(lab) {
			out = append(out, p)
		}
	}
	return out
}
