package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
)

// parallel is the number of requests in flight in the load tests.
const parallel = 8

// env is the lab that TestXLB's subtests share, with agents on both
// nodes serving labrun.Services. A subtest that changes the route or the
// configuration restores it before it ends, and no two subtests run at
// once, so each sees only its own traffic.
type env struct {
	p        lab.Plan
	services []labrun.Service
	client   lab.Host
}

// startLab brings spec's lab up for t (its Prefix: labPrefix+suffix, its
// Binary: xlbBinary), removed when t ends, and returns it with a context
// that ends after d.
func startLab(t *testing.T, suffix string, spec lab.Spec, d time.Duration) (context.Context, lab.Plan) {
	t.Helper()
	needRoot(t)
	spec.Prefix, spec.Binary = labPrefix+suffix, xlbBinary
	useLab(t, spec.Prefix)
	ctx, cancel := context.WithTimeout(interrupted, d)
	t.Cleanup(cancel)
	p, err := lab.Up(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, p
}

// labEnv is startLab with the agents' logs shown if t fails, the lab
// returned as an env: its services and its first client.
func labEnv(t *testing.T, suffix string, spec lab.Spec, d time.Duration) (context.Context, *env) {
	t.Helper()
	ctx, p := startLab(t, suffix, spec, d)
	services, err := labrun.Services(p)
	if err != nil {
		t.Fatal(err)
	}
	logAgentsOnFailure(t, p)
	return ctx, &env{p: p, services: services, client: p.Clients[0]}
}

func (e *env) web() labrun.Service  { return e.services[0] }
func (e *env) echo() labrun.Service { return e.services[1] }

// TestXLB builds one lab with 1 client, 2 xlb nodes and 4 backends,
// starts an agent on each node and runs the end-to-end checks on it.
func TestXLB(t *testing.T) {
	needRoot(t)
	useLab(t, labPrefix)
	ctx, cancel := context.WithTimeout(interrupted, time.Minute)
	defer cancel()
	p, err := lab.Up(ctx, lab.Spec{Prefix: labPrefix, Clients: 1, Nodes: 2, Backends: 4, Binary: xlbBinary})
	if err != nil {
		t.Fatal(err)
	}
	services, err := labrun.Services(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := labrun.StartAgents(ctx, p, services); err != nil {
		t.Fatal(err)
	}
	e := &env{p: p, services: services, client: p.Clients[0]}

	t.Run("HTTPSpreadsEvenly", e.testHTTPSpreadsEvenly)
	t.Run("UDPOverGUE", e.testUDPOverGUE)
	t.Run("RepliesBypassNodes", e.testRepliesBypassNodes)
	t.Run("ConnectionSurvivesNodeLoss", e.testConnectionSurvivesNodeLoss)
	t.Run("HotBackendRemoval", e.testHotBackendRemoval)
	t.Run("HealthChecks", e.testHealthChecks)
	t.Run("Lossless", e.testLossless)
	t.Run("Metrics", e.testMetrics)
	t.Run("ClientIPAffinity", e.testClientIPAffinity)
	t.Run("PingVIP", e.testPingVIP)
}

// testCtx bounds a subtest: generous, but below the test binary's
// timeout, so that a hang fails with a message and still cleans up.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(interrupted, 45*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// backendNames lists the names of the backends with the given addresses.
func (e *env) backendNames(addrs []netip.Addr) []string {
	var names []string
	for _, b := range e.p.Backends {
		if slices.Contains(addrs, b.Addr) {
			names = append(names, b.Name)
		}
	}
	return names
}

// checkTally fails t unless every answer came from one of want.
func checkTally(t *testing.T, tally labrun.Tally, want []string) {
	t.Helper()
	for _, name := range tally.Backends() {
		if !slices.Contains(want, name) {
			t.Errorf("%d answers from %q, which is not one of the backends %v", tally[name], name, want)
		}
	}
}

func (e *env) testHTTPSpreadsEvenly(t *testing.T) {
	const n = 2000
	start := time.Now()
	tally, err := labrun.HTTPLoad(testCtx(t), e.client.Namespace, e.web().Target(), n, parallel, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d new connections in %s: %v", n, time.Since(start).Round(time.Millisecond), tally)
	all := e.backendNames(e.web().Backends)
	checkTally(t, tally, all)
	if tally.Total() != n {
		t.Fatalf("%d answers, want %d", tally.Total(), n)
	}
	// Maglev gives each backend an equal share of the table, so each
	// gets 1/4 of the flows, binomially spread: σ ≈ 19 for a mean of
	// 500, and ±25% is more than 6σ.
	mean := float64(n) / float64(len(all))
	for _, name := range all {
		if c := float64(tally[name]); c < 0.75*mean || c > 1.25*mean {
			t.Errorf("%s: %d answers, want within ±25%% of the mean %.0f", name, tally[name], mean)
		}
	}
}

func (e *env) testUDPOverGUE(t *testing.T) {
	const n = 200
	ctx := testCtx(t)
	before, err := labrun.TakeSnapshot(e.p)
	if err != nil {
		t.Fatal(err)
	}
	target := e.echo().Target()
	tally := labrun.Tally{}
	ports := map[uint16]bool{}
	for i := range n {
		payload := fmt.Sprintf("e2e %d", i)
		r, err := labrun.UDPEcho(ctx, e.client.Namespace, target, payload)
		if err != nil {
			t.Fatal(err)
		}
		if r.From != target {
			t.Fatalf("answer from %s (backend %s), want it from the VIP %s", r.From, r.Backend, target)
		}
		tally[r.Backend]++
		ports[r.Local.Port()] = true
	}
	after, err := labrun.TakeSnapshot(e.p)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d requests from %d distinct source ports: %v", n, len(ports), tally)
	// Each request has a socket of its own; the kernel picks its port at
	// random, so a few may repeat, but hardly more than a few.
	if len(ports) < n*9/10 {
		t.Fatalf("only %d distinct source ports in %d requests: too few flows to test", len(ports), n)
	}
	all := e.backendNames(e.echo().Backends)
	checkTally(t, tally, all)
	for _, name := range all {
		if tally[name] == 0 {
			t.Errorf("%s answered none of %d requests", name, n)
		}
	}
	// The datagrams went through the nodes' XDP programs, as the echo
	// service: not around them.
	var forwarded uint64
	for _, node := range after.Since(before).Nodes {
		forwarded += node.Services[e.echo().Name]
	}
	if forwarded < n {
		t.Errorf("the nodes forwarded %d datagrams of service %q, want at least %d", forwarded, e.echo().Name, n)
	}
}

func (e *env) testRepliesBypassNodes(t *testing.T) {
	const n = 300
	before, err := labrun.TakeSnapshot(e.p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := labrun.HTTPLoad(testCtx(t), e.client.Namespace, e.web().Target(), n, parallel, nil); err != nil {
		t.Fatal(err)
	}
	after, err := labrun.TakeSnapshot(e.p)
	if err != nil {
		t.Fatal(err)
	}
	d := after.Since(before)
	b, err := labrun.CheckBypass(d, n)
	t.Logf("client sent %d, received %d packets; nodes forwarded %d; per node %+v; slack %d",
		b.ClientSent, b.ClientReceived, b.Forwarded, b.Nodes, b.Slack)
	if err != nil {
		t.Fatal(err)
	}
	// The same from the client's TCP stack: every segment it sent was
	// forwarded by a node, and it received the replies (at least a
	// SYN-ACK and an answer per request), which no node forwarded.
	c := d.Clients[0].IP
	sent := c.TCPOutSegs + c.TCPRetransSegs
	if b.Forwarded+b.Slack < sent || b.Forwarded > sent+b.Slack {
		t.Errorf("the client sent %d TCP segments, the nodes forwarded %d packets", sent, b.Forwarded)
	}
	if c.TCPInSegs < 2*n {
		t.Errorf("the client received %d TCP segments for %d requests, want at least %d", c.TCPInSegs, n, 2*n)
	}
	for _, node := range b.Nodes {
		if node.Sent > node.Forwarded+b.Slack || node.Received > node.Forwarded+b.Slack {
			t.Errorf("%s: eth0 received %d and sent %d packets, its XDP program forwarded %d: it saw more than the client's requests",
				node.Name, node.Received, node.Sent, node.Forwarded)
		}
	}
}

// testConnectionSurvivesNodeLoss moves a long-lived TCP connection from
// one node to the other by taking its node out of the router's
// multipath route, once for each node. Every node builds the same Maglev
// table, so the other node sends the connection's packets to the same
// backend and the connection goes on.
func (e *env) testConnectionSurvivesNodeLoss(t *testing.T) {
	for i := range e.p.Nodes {
		carrier := i + 1
		other := 2 - i
		t.Run(fmt.Sprintf("node%dRemoved", carrier), func(t *testing.T) {
			e.moveConnection(t, carrier, other)
		})
	}
}

func (e *env) moveConnection(t *testing.T, carrier, other int) {
	ctx := testCtx(t)
	all := []int{1, 2}
	t.Cleanup(func() {
		if err := lab.SetNodes(e.p.Spec.Prefix, all); err != nil {
			t.Errorf("restore the route over both nodes: %v", err)
		}
	})
	conn, backend := e.connectionOn(t, ctx, carrier)

	// send makes k requests on conn and returns what each node's XDP
	// program forwarded of the web service meanwhile.
	send := func(k int) []uint64 {
		t.Helper()
		before := e.snapshot(t)
		for j := range k {
			name, err := conn.Get(ctx, false)
			if err != nil {
				t.Fatalf("request %d of %d on the connection from %s: %v", j+1, k, conn.LocalAddr(), err)
			}
			if name != backend {
				t.Fatalf("request %d of %d: answered by %s, want %s, the connection's backend", j+1, k, name, backend)
			}
		}
		return e.forwarded(e.snapshot(t).Since(before))
	}
	// check fails t unless node on forwarded at least k packets, the
	// request of each, and the other node next to none: at most a
	// delayed ACK that left just before the route changed.
	check := func(when string, fwd []uint64, on, k int) {
		t.Helper()
		off := 3 - on
		if fwd[on-1] < uint64(k) || fwd[off-1] > 1 {
			t.Fatalf("%s, %d requests: nodes forwarded %v packets; want them on node%d", when, k, fwd, on)
		}
	}

	check("on the connection's node", send(10), carrier, 10)

	if err := lab.SetNodes(e.p.Spec.Prefix, []int{other}); err != nil {
		t.Fatal(err)
	}
	hops, err := lab.Nexthops(e.p.Spec.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	if want := []netip.Addr{e.p.Nodes[other-1].Addr}; !slices.Equal(hops, want) {
		t.Fatalf("route next hops %v, want %v", hops, want)
	}
	check(fmt.Sprintf("node%d removed from the route", carrier), send(20), other, 20)

	// Back to both nodes: the router's hash sends the flow to its first
	// node again, and the connection still goes on.
	if err := lab.SetNodes(e.p.Spec.Prefix, all); err != nil {
		t.Fatal(err)
	}
	check("route over both nodes again", send(10), carrier, 10)
	t.Logf("connection %s -> %s (backend %s): node%d, then node%d, then node%d again; 40 requests, none failed",
		conn.LocalAddr(), e.web().Target(), backend, carrier, other, carrier)
}

func (e *env) snapshot(t *testing.T) labrun.Snapshot {
	t.Helper()
	s, err := labrun.TakeSnapshot(e.p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// forwarded lists what each node forwarded of the web service in d.
func (e *env) forwarded(d labrun.Snapshot) []uint64 {
	var fwd []uint64
	for _, n := range d.Nodes {
		fwd = append(fwd, n.Services[e.web().Name])
	}
	return fwd
}

// quiet waits until the nodes forward nothing, so that the packets of
// earlier subtests' last connections (a FIN, an ACK) are not counted as
// the next measurement's.
func (e *env) quiet(t *testing.T) {
	t.Helper()
	prev := e.forwarded(e.snapshot(t))
	for range 40 {
		time.Sleep(50 * time.Millisecond)
		cur := e.forwarded(e.snapshot(t))
		if slices.Equal(cur, prev) {
			return
		}
		prev = cur
	}
	t.Fatalf("the nodes keep forwarding web traffic (%v) although no test sends any", prev)
}

// connectionOn opens keep-alive connections to the web service until the
// router sends one through node carrier, and returns it with the backend
// that answers on it. The router hashes each flow to one node, so about
// half of all connections qualify; 20 tries fail with a chance of 2⁻²⁰.
// The connections stay open until t ends: closing one would send packets
// into the next measurement.
func (e *env) connectionOn(t *testing.T, ctx context.Context, carrier int) (*labrun.HTTPConn, string) {
	t.Helper()
	e.quiet(t)
	for range 20 {
		before := e.snapshot(t)
		conn, err := labrun.DialHTTP(ctx, e.client.Namespace, e.web().Target())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		backend, err := conn.Get(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		// The connection's handshake and request (3 packets or more)
		// went through one node; the other node may have forwarded a
		// late ACK of the previous, still open connection, no more.
		fwd := e.forwarded(e.snapshot(t).Since(before))
		on := 1
		if fwd[1] > fwd[0] {
			on = 2
		}
		if fwd[on-1] < 3 || fwd[2-on] > 1 {
			t.Fatalf("one new connection with one request: nodes forwarded %v packets, want 3 or more on one node, at most 1 on the other", fwd)
		}
		if on == carrier {
			return conn, backend
		}
	}
	t.Fatalf("20 connections, none through node%d: does the router spread flows?", carrier)
	return nil, ""
}

// testHotBackendRemoval removes a backend from the running agents'
// configuration and adds it back, both without restarting them.
func (e *env) testHotBackendRemoval(t *testing.T) {
	const n = 400
	ctx := testCtx(t)
	gone := e.p.Backends[len(e.p.Backends)-1]
	t.Cleanup(func() {
		if _, err := labrun.Reconfigure(interrupted, e.p, e.services); err != nil {
			t.Errorf("restore the configuration: %v", err)
		}
	})
	for _, c := range []struct {
		name     string
		services []labrun.Service
	}{
		{"without " + gone.Name, labrun.Without(e.services, gone.Addr)},
		{"with " + gone.Name + " again", e.services},
	} {
		gens, err := labrun.Reconfigure(ctx, e.p, c.services)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		tally, err := labrun.HTTPLoad(ctx, e.client.Namespace, e.web().Target(), n, parallel, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		t.Logf("%s: generations %v: %v", c.name, gens, tally)
		want := e.backendNames(c.services[0].Backends)
		checkTally(t, tally, want)
		for _, name := range want {
			if tally[name] == 0 {
				t.Errorf("%s: %s answered none of %d requests", c.name, name, n)
			}
		}
	}
}
