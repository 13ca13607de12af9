package e2e

import (
	"context"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
)

// TestIPv6WithFRR runs agents on two nodes of a dual-stack lab that
// announce the IPv4 and the IPv6 VIPs to FRR: FRR installs an ECMP route
// over both nodes' IPv6 next hops, and an IPv6 client reaches every
// backend through both nodes over IPv6-in-IPv6 (web6), GUE over IPv6
// (echo6), and to IPv4 backends over IPv6-in-IPv4 (web6to4) and GUE over
// IPv4 (echo6to4), with the replies of every service going straight from
// the backends to the client; long-lived IPv6
// connections survive a node leaving gracefully and coming back.
func TestIPv6WithFRR(t *testing.T) { testIPv6(t, lab.RouterFRR, "v6") }

// TestIPv6WithBIRD is TestIPv6WithFRR with BIRD as the router: its
// kernel protocol for IPv6 merges the nodes' paths into one route.
func TestIPv6WithBIRD(t *testing.T) { testIPv6(t, lab.RouterBIRD, "v6b") }

func testIPv6(t *testing.T, router, suffix string) {
	ctx, p := startLab(t, suffix, lab.Spec{Clients: 1, Nodes: 2, Backends: 4, Router: router, IPv6: true}, 3*time.Minute)
	var err error
	v4, err := labrun.Services(p)
	if err != nil {
		t.Fatal(err)
	}
	v6, err := labrun.Services6(p)
	if err != nil {
		t.Fatal(err)
	}
	// web6 first: env.web() and liveConns use it.
	e := &env{p: p, services: slices.Concat(v6, v4), client: p.Clients[0]}
	web6, echo6, web6to4, echo6to4 := v6[0], v6[1], v6[2], v6[3]
	logAgentsOnFailure(t, p)

	var nodes4, nodes6 []netip.Addr
	for _, n := range p.Nodes {
		nodes4 = append(nodes4, n.Addr)
		nodes6 = append(nodes6, n.Addr6)
	}
	start := time.Now()
	if err := labrun.StartAgents(ctx, p, e.services); err != nil {
		t.Fatal(err)
	}
	// One IPv4 session per node carries both families: the IPv6 VIPs
	// arrive with the nodes' IPv6 addresses as next hops.
	for _, vip := range p.VIPs6 {
		if err := lab.WaitNextHops(ctx, p, vip, nodes6, 20*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if err := lab.WaitNextHops(ctx, p, p.VIPs[0], nodes4, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("agents started; %s routes %s and %s via %v, %s via %v after %s", router, p.VIPs6[0], p.VIPs6[1], nodes6,
		p.VIPs[0], nodes4, time.Since(start).Round(time.Millisecond))

	e.ipv6Rounds(t, ctx, []ipv6Round{{web6, 800}, {echo6, 200}, {web6to4, 400}, {echo6to4, 200}}, 0)

	// Long-lived IPv6 connections while a node leaves gracefully and
	// comes back: both nodes have the same Maglev table and IPv6 flow
	// hash, so a flow ECMP moves stays on its backend.
	const conns = 100
	stopLive := e.liveConns(t, ctx, conns, 250*time.Millisecond)
	leaving := p.Nodes[1]
	pid := e.agentPID(t, leaving)
	start = time.Now()
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := lab.WaitNextHops(ctx, p, web6.VIP, nodes6[:1], 10*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s stopped gracefully: the IPv6 route lost it after %s", leaving.Name, time.Since(start).Round(time.Millisecond))
	waitExit(t, leaving, pid, 10*time.Second)
	time.Sleep(time.Second) // the live connections all ride node1 now
	if _, err := labrun.StartAgent(ctx, p, leaving, e.services); err != nil {
		t.Fatal(err)
	}
	if err := lab.WaitNextHops(ctx, p, web6.VIP, nodes6, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	counts, errs := stopLive()
	for _, err := range errs {
		t.Errorf("long-lived IPv6 connection broken while a node left and came back: %v", err)
	}
	if len(counts) != conns || slices.Min(counts) == 0 {
		t.Errorf("long-lived IPv6 connections made %v requests", counts)
	}
	t.Logf("%d long-lived IPv6 connections to %s: %d to %d requests each, none broken", conns, web6.Target(), slices.Min(counts), slices.Max(counts))
}

// ipv6Round is one batch of requests to a service.
type ipv6Round struct {
	svc labrun.Service
	n   int
}

// ipv6Rounds sends each round's requests from the client, one round after
// the other, and checks that every backend of the service answered, that
// every node forwarded some of them (the router's ECMP route spreads the
// flows), and that the replies went straight from the backends to the
// client: each node's interface saw no more packets than its XDP program
// forwarded, beyond the neighbour protocols and control packets per
// second of the round (BFD and BGP with the router; 0 without BFD).
func (e *env) ipv6Rounds(t *testing.T, ctx context.Context, rounds []ipv6Round, controlPerSecond float64) {
	t.Helper()
	for _, c := range rounds {
		before := e.snapshot(t)
		start := time.Now()
		var tally labrun.Tally
		var err error
		if c.svc.Protocol == config.UDP {
			tally, err = labrun.UDPLoad(ctx, e.client.Namespace, c.svc.Target(), c.n, parallel, nil)
		} else {
			tally, err = labrun.HTTPLoad(ctx, e.client.Namespace, c.svc.Target(), c.n, parallel, nil)
		}
		if err != nil {
			t.Fatalf("%s (%s): %v", c.svc.Name, c.svc.Target(), err)
		}
		d := e.snapshot(t).Since(before)
		elapsed := time.Since(start)
		var perNode []uint64
		for _, n := range d.Nodes {
			perNode = append(perNode, n.Services[c.svc.Name])
		}
		t.Logf("%s %s %s: %d answers %v; packets forwarded per node %v", c.svc.Name, c.svc.Target(), c.svc.Forwarding, tally.Total(), tally, perNode)
		var all []string
		for _, b := range e.p.Backends {
			if slices.Contains(c.svc.Backends, b.Addr) || slices.Contains(c.svc.Backends, b.Addr6) {
				all = append(all, b.Name)
			}
		}
		checkTally(t, tally, all)
		if tally.Total() != c.n {
			t.Errorf("%s: %d answers, want %d", c.svc.Name, tally.Total(), c.n)
		}
		for _, name := range all {
			if tally[name] == 0 {
				t.Errorf("%s: backend %s got none of %d flows", c.svc.Name, name, c.n)
			}
		}
		for i, f := range perNode {
			if f == 0 {
				t.Errorf("%s: %s forwarded none of its packets: the router's IPv6 ECMP route does not spread flows", c.svc.Name, e.p.Nodes[i].Name)
			}
		}
		control := uint64(controlPerSecond*elapsed.Seconds()) + 2
		if controlPerSecond == 0 {
			control = 0
		}
		b, err := labrun.CheckBypassWithin(d, c.n, control)
		t.Logf("%s: client sent %d, received %d packets; nodes forwarded %d; per node %+v; slack %d (+%d control)",
			c.svc.Name, b.ClientSent, b.ClientReceived, b.Forwarded, b.Nodes, b.Slack, control)
		if err != nil {
			t.Errorf("%s: replies did not bypass the nodes: %v", c.svc.Name, err)
		}
	}
}
