package e2e

import (
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
	"github.com/xlbproject/xlb/testbed/netns"
)

// TestIPv6SessionsWithFRR runs the nodes of a dual-stack lab whose BGP
// sessions and BFD with FRR run over IPv6 (`xlb lab up --router frr
// --peer-ipv6 --bfd`):
//   - each node's one session is between its IPv6 address and the
//     router's, and carries both families: FRR installs an ECMP route of
//     the nodes' IPv6 next hops for each IPv6 VIP, and one of their IPv4
//     next hops for the IPv4 VIP;
//   - the IPv6 client reaches every backend through both nodes over every
//     IPv6 service (IPv6 and IPv4 backends, IPIP and GUE), the replies
//     bypassing the nodes;
//   - a hung node (SIGSTOP) leaves both routes through BFD over IPv6,
//     well before the hold time would take it out, and comes back when
//     it resumes;
//   - a third node without any IPv4 address (IPv6-only: no node.address,
//     a routerID) refuses IPv4 backends at --check, serves the IPv6
//     services over IPv6 backends, peers over IPv6 alone, and joins the
//     IPv6 routes, not the IPv4 one.
func TestIPv6SessionsWithFRR(t *testing.T) { testIPv6Sessions(t, lab.RouterFRR, "s6") }

// TestIPv6SessionsWithEmbedded is TestIPv6SessionsWithFRR with the lab's
// embedded router (`xlb lab router --listen6 --bfd`).
func TestIPv6SessionsWithEmbedded(t *testing.T) { testIPv6Sessions(t, lab.RouterEmbedded, "s6e") }

// TestIPv6SessionsWithBIRD is TestIPv6SessionsWithFRR with BIRD: its
// xlbv6 protocol takes the IPv6 sessions, its bfd protocol their BFD.
func TestIPv6SessionsWithBIRD(t *testing.T) { testIPv6Sessions(t, lab.RouterBIRD, "s6b") }

// controlPerSecond bounds the packets a node's interface exchanges with
// the router per second beside the traffic it forwards: BFD every 75-100
// ms each way (the interval less up to 25 % of jitter), BGP keepalives
// every 3 s and their acknowledgements.
const controlPerSecond = 16

func testIPv6Sessions(t *testing.T, router, suffix string) {
	ctx, p := startLab(t, suffix, lab.Spec{Clients: 1, Nodes: 3, Backends: 4, Router: router, IPv6: true, PeerIPv6: true, BFD: true}, 4*time.Minute)
	var err error
	if !p.BGP.PeerAddr.Is6() {
		t.Fatalf("the nodes' peer is %s, want the router's IPv6 address", p.BGP.PeerAddr)
	}
	v4, err := labrun.Services(p)
	if err != nil {
		t.Fatal(err)
	}
	v6, err := labrun.Services6(p)
	if err != nil {
		t.Fatal(err)
	}
	web6, echo6 := v6[0], v6[1]
	logAgentsOnFailure(t, p)

	// The dual-stack nodes first; node3 becomes IPv6-only later.
	dual := p
	dual.Nodes = p.Nodes[:2]
	only6 := p.Nodes[2]
	var nodes4, nodes6 []netip.Addr
	for _, n := range p.Nodes {
		nodes4 = append(nodes4, n.Addr)
		nodes6 = append(nodes6, n.Addr6)
	}
	e := &env{p: dual, services: slices.Concat(v6, v4), client: p.Clients[0]}
	start := time.Now()
	if err := labrun.StartAgents(ctx, dual, e.services); err != nil {
		t.Fatal(err)
	}
	// One IPv6 session per node carries both families: the IPv4 VIP
	// arrives over it with the node's IPv4 address as next hop.
	for _, vip := range p.VIPs6 {
		if err := lab.WaitNextHops(ctx, p, vip, nodes6[:2], 20*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if err := lab.WaitNextHops(ctx, p, p.VIPs[0], nodes4[:2], 5*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("agents started; %s routes %v via %v and %s via %v, over IPv6 sessions, after %s", router, p.VIPs6, nodes6[:2],
		p.VIPs[0], nodes4[:2], time.Since(start).Round(time.Millisecond))
	waitBFDUp(t, ctx, dual, dual.Nodes, 15*time.Second)
	for _, n := range dual.Nodes {
		st, err := api.GetStatus(labrun.Socket(p, n))
		if err != nil {
			t.Fatal(err)
		}
		peer := st.BGP.Peers[0]
		if peer.Address != p.BGP.PeerAddr || peer.State != "established" {
			t.Errorf("%s: peer %s %s, want %s established", n.Name, peer.Address, peer.State, p.BGP.PeerAddr)
		}
		t.Logf("%s: peer %s %s, BFD %s", n.Name, peer.Address, peer.State, peer.BFD.State)
	}
	checkRouterSessions(t, p, nodes6[:2])

	rounds := []ipv6Round{{web6, 800}, {echo6, 200}, {v6[2], 400}, {v6[3], 200}}
	e.ipv6Rounds(t, ctx, rounds, controlPerSecond)

	// A hung node: its sessions stay open, nothing answers. BFD over
	// IPv6 takes it out of both routes within its detection time (300
	// ms); the hold time (9 s, after a keepalive up to 3 s old) could
	// not before 6 s.
	hung := p.Nodes[1]
	pid := e.agentPID(t, hung)
	start = time.Now()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGCONT)
	if err := lab.WaitNextHops(ctx, p, web6.VIP, nodes6[:1], 5*time.Second); err != nil {
		t.Fatalf("%s hung: %v (BFD over IPv6 did not take it out)", hung.Name, err)
	}
	detect := time.Since(start)
	if err := lab.WaitNextHops(ctx, p, p.VIPs[0], nodes4[:1], 5*time.Second-detect); err != nil {
		t.Fatalf("%s hung: %v", hung.Name, err)
	}
	t.Logf("%s hung: its IPv6 next hop left the route after %s, and its IPv4 one by %s (BFD over IPv6, 100ms x 3)", hung.Name,
		detect.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	syscall.Kill(pid, syscall.SIGCONT)
	start = time.Now()
	for _, vip := range p.VIPs6 {
		if err := lab.WaitNextHops(ctx, p, vip, nodes6[:2], 30*time.Second); err != nil {
			t.Fatalf("after %s resumed: %v", hung.Name, err)
		}
	}
	t.Logf("%s resumed: back in the IPv6 routes after %s", hung.Name, time.Since(start).Round(time.Millisecond))
	waitBFDUp(t, ctx, dual, dual.Nodes, 15*time.Second)

	// node3 without IPv4. The services it can serve are the IPv6 ones
	// over IPv6 backends; a VIP is served alike on every node that
	// announces it, so the dual-stack nodes serve the same IPv6 ones.
	if err := lab.RemoveIPv4(ctx, p, only6); err != nil {
		t.Fatal(err)
	}
	opts := labrun.NodeOptions{IPv6Only: true}
	if err := labrun.WriteConfigWith(p, only6, v6, opts); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, xlbBinary, netns.ExecCommand, only6.Namespace, "--",
		xlbBinary, "agent", "--check", "--config", labrun.ConfigPath(p, only6)).CombinedOutput()
	const refusal = "is IPv4, and the node has no IPv4 address"
	if err == nil || !strings.Contains(string(out), refusal) {
		t.Errorf("xlb agent --check on the IPv6-only node with IPv4 backends: %v, %s; want it refused with %q", err, out, refusal)
	} else {
		t.Logf("IPv6-only node, IPv4 backends: xlb agent --check says: %s", firstLine(string(out), refusal))
	}
	served6 := []labrun.Service{web6, echo6}
	if _, err := labrun.Reconfigure(ctx, dual, slices.Concat(served6, v4)); err != nil {
		t.Fatal(err)
	}
	if err := labrun.WriteConfigWith(p, only6, served6, opts); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	st, err := labrun.StartAgent(ctx, p, only6, served6)
	if err != nil {
		t.Fatal(err)
	}
	for _, vip := range p.VIPs6 {
		if err := lab.WaitNextHops(ctx, p, vip, nodes6, 20*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("IPv6-only %s (node address6 %s, IPv4 node address: %v) in the IPv6 routes after %s", only6.Name, st.Node.Address6, st.Node.Address.IsValid(),
		time.Since(start).Round(time.Millisecond))
	if st.Node.Address.IsValid() {
		t.Errorf("%s has node address %s, want none", only6.Name, st.Node.Address)
	}
	if err := lab.WaitNextHops(ctx, p, p.VIPs[0], nodes4[:2], time.Second); err != nil {
		t.Errorf("the IPv4 VIP with an IPv6-only node: %v", err)
	}
	checkRouterSessions(t, p, nodes6)
	e3 := &env{p: p, services: slices.Concat(served6, v4), client: p.Clients[0]}
	e3.ipv6Rounds(t, ctx, []ipv6Round{{web6, 900}, {echo6, 300}}, controlPerSecond)
}

// checkRouterSessions checks that the lab's router has an established
// session with each of want (the nodes' IPv6 addresses) and none with
// another address.
func checkRouterSessions(t *testing.T, p lab.Plan, want []netip.Addr) {
	t.Helper()
	st, err := lab.ReadStatus(p.Spec.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	var got []netip.Addr
	for _, s := range st.Sessions {
		if s.Speaker != "router" {
			continue
		}
		if s.State != "established" {
			t.Errorf("the router's session with %s is %s", s.Peer, s.State)
		}
		got = append(got, s.Peer)
	}
	slices.SortFunc(got, netip.Addr.Compare)
	if !slices.Equal(got, want) {
		t.Errorf("the router's sessions are with %v, want %v", got, want)
	}
	t.Logf("the router's sessions: %v", got)
}

// firstLine is the first line of s that contains sub, else s.
func firstLine(s, sub string) string {
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return s
}
