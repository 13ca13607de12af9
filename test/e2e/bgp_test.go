package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
)

// TestBGPWithFRR runs agents that announce the VIPs over BGP to FRR with
// BFD: the router's kernel route has one next hop per running node as
// nodes come and go, long-lived connections survive nodes leaving and
// joining gracefully, and a node that dies or hangs leaves the route
// within the BFD detection time.
func TestBGPWithFRR(t *testing.T) {
	ctx, e := labEnv(t, "b", lab.Spec{Clients: 1, Nodes: 4, Backends: 2, Router: lab.RouterFRR, BFD: true}, 4*time.Minute)
	p, services := e.p, e.services
	vip := e.web().VIP

	// 1 → 4 nodes: each agent's announcement adds its next hop.
	running := startInTurn(t, ctx, p, services, vip, 20*time.Second)
	// The session is up within a few hundred milliseconds of the start;
	// FRR's bfdd starts BFD towards a dynamic neighbour only once the
	// BGP session is established, and its first packets go out at its
	// slow start rate (1 s), so BFD follows within seconds.
	var st *api.Status
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		if st, err = api.GetStatus(labrun.Socket(p, p.Nodes[0])); err != nil {
			t.Fatal(err)
		}
		if st.BGP != nil && len(st.BGP.Peers) == 1 && st.BGP.Peers[0].State == "established" &&
			st.BGP.Peers[0].BFD != nil && st.BGP.Peers[0].BFD.State == "up" && len(st.BGP.Routes) > 0 && st.BGP.Routes[0].Announced {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status of %s after 10s: BGP %+v, BFD %+v", p.Nodes[0].Name, st.BGP, bfdOf(st))
		}
		time.Sleep(100 * time.Millisecond)
	}

	// A peer that cannot be reached, added to node1 by a reload: its
	// status says why, and the router's session is not touched.
	cfgPath := labrun.ConfigPath(p, p.Nodes[0])
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	const peersLine = "\n  peers:\n"
	if !strings.Contains(string(b), peersLine) {
		t.Fatalf("%s has no bgp peers list:\n%s", cfgPath, b)
	}
	bad := strings.Replace(string(b), peersLine, peersLine+"    - address: 10.0.1.250\n      asn: 65000\n", 1)
	if err := writeFile(cfgPath, []byte(bad)); err != nil {
		t.Fatal(err)
	}
	var good, unreachable api.Peer
	deadline = time.Now().Add(15 * time.Second)
	for ; time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		st, err := api.GetStatus(labrun.Socket(p, p.Nodes[0]))
		if err != nil || st.BGP == nil || len(st.BGP.Peers) != 2 {
			continue
		}
		for _, peer := range st.BGP.Peers {
			if peer.Address == p.BGP.PeerAddr {
				good = peer
			} else {
				unreachable = peer
			}
		}
		if unreachable.LastError != "" {
			break
		}
	}
	t.Logf("unreachable peer: state %s, last error %q; the router's session: %s, %d flaps", unreachable.State, unreachable.LastError, good.State, good.Flaps)
	if unreachable.State == "established" || unreachable.LastError == "" {
		t.Errorf("unreachable peer: %+v, want it down with the reason", unreachable)
	}
	if good.State != "established" || good.Flaps != 0 {
		t.Errorf("the router's session after adding a bad peer: %+v, want it untouched", good)
	}
	if err := lab.WaitNextHops(ctx, p, vip, running, time.Second); err != nil {
		t.Error(err)
	}
	if err := writeFile(cfgPath, b); err != nil {
		t.Fatal(err)
	}

	// A wrong ASN and a TCP MD5 password the router does not have, each
	// set on node1's one peer by a reload: the session stays down, the
	// status says why, and the other nodes keep their sessions and
	// their next hops.
	badPeer(t, ctx, p, vip, running, b)

	// Long-lived connections while a node leaves gracefully and comes
	// back: every node has the same Maglev table, so a flow that ECMP
	// moves to another node stays on its backend.
	const conns = 200
	stopLive := e.liveConns(t, ctx, conns, 250*time.Millisecond)
	leaving := p.Nodes[3]
	leavingPID := e.agentPID(t, leaving)
	start := time.Now()
	if err := syscall.Kill(leavingPID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The agent withdraws at once, then drains before it exits.
	if err := lab.WaitNextHops(ctx, p, vip, running[:3], 10*time.Second); err != nil {
		t.Fatal(err)
	}
	withdrawn := time.Since(start)
	waitExit(t, leaving, leavingPID, 10*time.Second)
	t.Logf("%s stopped gracefully: route without it after %s, agent gone after %s (drain %s)", leaving.Name,
		withdrawn.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), labrun.DrainTime)
	if withdrawn >= labrun.DrainTime {
		t.Errorf("the route lost the stopping node only after %s, not before its drain time of %s", withdrawn, labrun.DrainTime)
	}
	if _, err := labrun.StartAgent(ctx, p, leaving, services); err != nil {
		t.Fatal(err)
	}
	if err := lab.WaitNextHops(ctx, p, vip, running, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	counts, errs := stopLive()
	for _, err := range errs {
		t.Errorf("long-lived connection broken while a node left and came back: %v", err)
	}
	if len(counts) != conns || slices.Min(counts) == 0 {
		t.Errorf("long-lived connections made %v requests", counts)
	}

	// A VIP whose backends are all down is withdrawn by every node, and
	// announced again when one comes back.
	checked := labrun.WithCheck(services, e.web().Name, &labrun.Check{Type: config.CheckHTTP, Port: 80, Path: "/",
		Interval: 200 * time.Millisecond, Timeout: 150 * time.Millisecond, Rise: 2, Fall: 2})
	if _, err := labrun.Reconfigure(ctx, p, checked); err != nil {
		t.Fatal(err)
	}
	// Probed and found up first: the first result decides at once, later
	// ones need fall failures in a row.
	for _, be := range p.Backends {
		if _, err := labrun.WaitHealth(ctx, p, e.web().Name, be.Addr, api.StateUp, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(500 * time.Millisecond)
	start = time.Now()
	for _, be := range p.Backends {
		if err := labrun.SetHTTP(ctx, p, be, lab.HTTPStop); err != nil {
			t.Fatal(err)
		}
	}
	if err := lab.WaitNextHops(ctx, p, vip, nil, 10*time.Second); err != nil {
		t.Fatalf("all web backends down: %v", err)
	}
	t.Logf("all web backends stopped: the VIP left the router after %s (check 200ms x fall 2)", time.Since(start).Round(time.Millisecond))
	if st, err := api.GetStatus(labrun.Socket(p, p.Nodes[0])); err != nil || st.BGP == nil || len(st.BGP.Routes) == 0 ||
		st.BGP.Routes[0].Announced || st.BGP.Routes[0].Reason != "every backend is down" {
		t.Errorf("status after the backends died: %+v (%v)", st.BGP, err)
	}
	start = time.Now()
	if err := labrun.SetHTTP(ctx, p, p.Backends[0], lab.HTTPStart); err != nil {
		t.Fatal(err)
	}
	if err := lab.WaitNextHops(ctx, p, vip, running, 10*time.Second); err != nil {
		t.Fatalf("a web backend back: %v", err)
	}
	t.Logf("one web backend back: the VIP is announced by every node again after %s", time.Since(start).Round(time.Millisecond))
	if err := labrun.SetHTTP(ctx, p, p.Backends[1], lab.HTTPStart); err != nil {
		t.Fatal(err)
	}

	// A hung node (SIGSTOP: its sessions stay open, nothing answers):
	// BFD on the router withdraws its routes within the detection time.
	hung := p.Nodes[2]
	pid := e.agentPID(t, hung)
	start = time.Now()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGCONT)
	others := []netip.Addr{running[0], running[1], running[3]}
	if err := lab.WaitNextHops(ctx, p, vip, others, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	detect := time.Since(start)
	t.Logf("%s hung: its next hop left the route after %s (BFD 100ms x 3)", hung.Name, detect.Round(time.Millisecond))
	if detect > 1500*time.Millisecond {
		t.Errorf("hung node withdrawn after %s, want within about the BFD detection time (300 ms)", detect)
	}
	syscall.Kill(pid, syscall.SIGCONT)
	if err := lab.WaitNextHops(ctx, p, vip, running, 30*time.Second); err != nil {
		t.Fatalf("after the hung node resumed: %v", err)
	}

	// A killed node: its sessions close with it, well within the BFD
	// detection time.
	killed := p.Nodes[1]
	start = time.Now()
	e.stopAgent(t, killed, syscall.SIGKILL)
	if err := lab.WaitNextHops(ctx, p, vip, []netip.Addr{running[0], running[2], running[3]}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	detect = time.Since(start)
	t.Logf("%s killed: its next hop left the route after %s", killed.Name, detect.Round(time.Millisecond))
	if detect > 1500*time.Millisecond {
		t.Errorf("killed node withdrawn after %s, want within about the BFD detection time (300 ms)", detect)
	}
}

// badPeer rewrites node1's configuration (original: its file as written
// by the lab) twice, once with a wrong peer ASN and once with a TCP MD5
// password the router does not have. Each time node1's session must go
// down with the reason in its status while the other nodes' sessions
// stay up and their next hops stay in the route; then the original file
// brings node1 back.
func badPeer(t *testing.T, ctx context.Context, p lab.Plan, vip netip.Addr, running []netip.Addr, original []byte) {
	t.Helper()
	node, other := p.Nodes[0], p.Nodes[1]
	asn := fmt.Sprintf("      asn: %d\n", p.BGP.PeerASN)
	if strings.Count(string(original), asn) != 1 {
		t.Fatalf("%s: want one peer with %q in:\n%s", labrun.ConfigPath(p, node), asn, original)
	}
	before, err := api.GetStatus(labrun.Socket(p, other))
	if err != nil || before.BGP == nil || len(before.BGP.Peers) != 1 {
		t.Fatalf("status of %s: %+v, %v", other.Name, before, err)
	}
	for _, bc := range []struct {
		name, replace, want string
	}{
		// We expect AS 65099; the router's OPEN says 65000.
		{"wrong ASN", "      asn: 65099\n", "bad peer AS"},
		// The router's listening socket has no key: the kernel drops
		// our signed SYNs and nothing answers.
		{"MD5 password the router lacks", asn + "      password: not-the-routers\n", "TCP MD5"},
	} {
		start := time.Now()
		if err := writeFile(labrun.ConfigPath(p, node), []byte(strings.Replace(string(original), asn, bc.replace, 1))); err != nil {
			t.Fatal(err)
		}
		if err := lab.WaitNextHops(ctx, p, vip, running[1:], 15*time.Second); err != nil {
			t.Fatalf("%s: %v", bc.name, err)
		}
		var peer api.Peer
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			st, err := api.GetStatus(labrun.Socket(p, node))
			if err == nil && st.BGP != nil && len(st.BGP.Peers) == 1 {
				peer = st.BGP.Peers[0]
				if peer.State != "established" && strings.Contains(peer.LastError, bc.want) {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: node1's peer %+v (%v), want it down with %q in its last error", bc.name, peer, err, bc.want)
			}
		}
		t.Logf("%s: %s's session %s after %s: %q", bc.name, node.Name, peer.State, time.Since(start).Round(time.Millisecond), peer.LastError)
		after, err := api.GetStatus(labrun.Socket(p, other))
		if err != nil || after.BGP == nil || len(after.BGP.Peers) != 1 {
			t.Fatalf("status of %s: %+v, %v", other.Name, after, err)
		}
		if a, b := after.BGP.Peers[0], before.BGP.Peers[0]; a.State != "established" || a.Flaps != b.Flaps {
			t.Errorf("%s: %s's session went from %+v to %+v, want it untouched", bc.name, other.Name, b, a)
		}
		start = time.Now()
		if err := writeFile(labrun.ConfigPath(p, node), original); err != nil {
			t.Fatal(err)
		}
		if err := lab.WaitNextHops(ctx, p, vip, running, 30*time.Second); err != nil {
			t.Fatalf("after fixing the %s: %v", bc.name, err)
		}
		t.Logf("%s fixed: %s back in the route after %s", bc.name, node.Name, time.Since(start).Round(time.Millisecond))
	}
}

// TestBGPTopologies: with the embedded router, and with FRR behind the
// gobgpd route reflector (the dissertation's topology), the router's route
// follows the agents as they start, two services share the nodes with
// different numbers of instances (the dissertation's Table 4.6(c)), and
// without BFD a node that stops gracefully, dies or hangs leaves the
// route within the hold time.
func TestBGPTopologies(t *testing.T) {
	needRoot(t)
	for i, tc := range []struct {
		name      string
		router    string
		reflector bool
		nodes     int
		// dead is how the third node dies without a goodbye.
		dead syscall.Signal
	}{
		{"Embedded", lab.RouterEmbedded, false, 3, syscall.SIGSTOP},
		{"FRRViaReflector", lab.RouterFRR, true, 4, syscall.SIGKILL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := fmt.Sprintf("%st%d", labPrefix, i)
			useLab(t, prefix)
			ctx, cancel := context.WithTimeout(interrupted, 3*time.Minute)
			defer cancel()
			p, err := lab.Up(ctx, lab.Spec{Prefix: prefix, Clients: 1, Nodes: tc.nodes, Backends: 2, Binary: xlbBinary,
				Router: tc.router, Reflector: tc.reflector})
			if err != nil {
				t.Fatal(err)
			}
			services, err := labrun.Services(p)
			if err != nil {
				t.Fatal(err)
			}
			e := &env{p: p, services: services, client: p.Clients[0]}
			logAgentsOnFailure(t, p)
			vip := e.web().VIP
			running := startInTurn(t, ctx, p, services, vip, 30*time.Second)
			// Traffic through the router reaches the backends.
			tally, err := labrun.HTTPLoad(ctx, e.client.Namespace, e.web().Target(), 50, 4, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("50 requests through the %s router: %v", tc.name, tally)

			e.sharedNodes(t, ctx, running)

			// A graceful stop withdraws first and exits after the drain
			// time.
			leaving := p.Nodes[1]
			pid := e.agentPID(t, leaving)
			start := time.Now()
			if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			running = slices.Delete(slices.Clone(running), 1, 2)
			if err := lab.WaitNextHops(ctx, p, vip, running, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s stopping: route without it %s after the signal", leaving.Name, time.Since(start).Round(time.Millisecond))
			waitExit(t, leaving, pid, 10*time.Second)

			// No BFD here: a killed agent's sessions close with it; a
			// hung one is only noticed when the hold time runs out.
			dead := p.Nodes[2]
			pid = e.agentPID(t, dead)
			start = time.Now()
			if err := syscall.Kill(pid, tc.dead); err != nil {
				t.Fatal(err)
			}
			defer syscall.Kill(pid, syscall.SIGCONT)
			running = slices.Delete(running, 1, 2)
			hold := p.BGP.HoldTime
			if err := lab.WaitNextHops(ctx, p, vip, running, hold+5*time.Second); err != nil {
				t.Fatal(err)
			}
			detect := time.Since(start)
			t.Logf("%s got %v: its next hop left the route after %s (hold time %s, no BFD)", dead.Name, tc.dead, detect.Round(time.Millisecond), hold)
			if detect > hold+time.Second {
				t.Errorf("%s left the route after %s, want within the hold time of %s", dead.Name, detect, hold)
			}
		})
	}
}

// sharedNodes reproduces the dissertation's Table 4.6(c): two services on
// the same nodes, one with an instance on every node and one with an
// instance on all nodes but the second. The router must have a route per
// VIP with exactly those next hops, both must carry traffic, and the
// second node taking the service back must add itself to that route
// only.
func (e *env) sharedNodes(t *testing.T, ctx context.Context, running []netip.Addr) {
	t.Helper()
	p, web, echo := e.p, e.web().VIP, e.echo().VIP
	without := slices.Delete(slices.Clone(running), 1, 2)
	start := time.Now()
	if err := labrun.WriteConfig(p, p.Nodes[1], e.services[:1]); err != nil {
		t.Fatal(err)
	}
	if err := lab.WaitNextHops(ctx, p, echo, without, 10*time.Second); err != nil {
		t.Fatalf("echo dropped by %s: %v", p.Nodes[1].Name, err)
	}
	t.Logf("echo dropped from %s's configuration: its route has %d next hops after %s", p.Nodes[1].Name, len(without), time.Since(start).Round(time.Millisecond))
	for _, c := range []struct {
		vip  netip.Addr
		want []netip.Addr
	}{{web, running}, {echo, without}} {
		got, err := lab.RouteNextHops(ctx, p, c.vip)
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(got, netip.Addr.Compare)
		if want := slices.SortedFunc(slices.Values(c.want), netip.Addr.Compare); !slices.Equal(got, want) {
			t.Errorf("route to %s: next hops %v, want %v", c.vip, got, want)
		}
		t.Logf("route to %s: %d next hops %v", c.vip, len(got), got)
	}
	if tally, err := labrun.HTTPLoad(ctx, e.client.Namespace, e.web().Target(), 40, 4, nil); err != nil {
		t.Error(err)
	} else if tally.Total() != 40 {
		t.Errorf("web over %d nodes: %v", len(running), tally)
	}
	if tally, err := labrun.UDPLoad(ctx, e.client.Namespace, e.echo().Target(), 40, 4, nil); err != nil {
		t.Error(err)
	} else if tally.Total() != 40 {
		t.Errorf("echo over %d nodes: %v", len(without), tally)
	}
	if err := labrun.WriteConfig(p, p.Nodes[1], e.services); err != nil {
		t.Fatal(err)
	}
	if err := lab.WaitNextHops(ctx, p, echo, running, 10*time.Second); err != nil {
		t.Fatalf("echo back on %s: %v", p.Nodes[1].Name, err)
	}
	if err := lab.WaitNextHops(ctx, p, web, running, time.Second); err != nil {
		t.Error(err)
	}
}

// startInTurn starts the agent of each node in turn and waits, each time,
// until the router's route to vip has one next hop per running node. It
// returns the nodes' addresses.
func startInTurn(t *testing.T, ctx context.Context, p lab.Plan, services []labrun.Service, vip netip.Addr, timeout time.Duration) []netip.Addr {
	t.Helper()
	var running []netip.Addr
	for _, n := range p.Nodes {
		if err := labrun.WriteConfig(p, n, services); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := labrun.StartAgent(ctx, p, n, services); err != nil {
			t.Fatal(err)
		}
		running = append(running, n.Addr)
		if err := lab.WaitNextHops(ctx, p, vip, running, timeout); err != nil {
			t.Fatalf("after starting %s: %v", n.Name, err)
		}
		t.Logf("%s started: %d next hops after %s", n.Name, len(running), time.Since(start).Round(time.Millisecond))
	}
	return running
}

// logAgentsOnFailure logs the end of every agent's log if t fails.
func logAgentsOnFailure(t *testing.T, p lab.Plan) {
	t.Cleanup(func() {
		if t.Failed() {
			for name, l := range labrun.AgentLogs(p) {
				t.Logf("%s: %s", name, l)
			}
		}
	})
}

// bfdOf is the BFD state of a status's first peer, for messages.
func bfdOf(st *api.Status) any {
	if st == nil || st.BGP == nil || len(st.BGP.Peers) == 0 {
		return nil
	}
	return st.BGP.Peers[0].BFD
}
