package e2e

import (
	"context"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
)

// TestBGPWithBIRD runs agents that announce the VIPs over BGP to BIRD 2
// with BFD (`xlb lab up --router bird --bfd`): BIRD merges the nodes'
// equal paths into one kernel route with a next hop per running node,
// traffic through it reaches the backends over several nodes, and a
// node that stops, hangs or dies leaves the route: at once when it says
// goodbye or its sockets close, within the BFD detection time when it
// hangs.
func TestBGPWithBIRD(t *testing.T) {
	ctx, e := labEnv(t, "i", lab.Spec{Clients: 1, Nodes: 4, Backends: 2, Router: lab.RouterBIRD, BFD: true}, 3*time.Minute)
	prefix := e.p.Spec.Prefix
	p, services := e.p, e.services
	vip := e.web().VIP
	logBIRDOnFailure(t, p)

	// 1 → 4 nodes: each agent's announcement adds its next hop.
	running := startInTurn(t, ctx, p, services, vip, 20*time.Second)
	st, err := api.GetStatus(labrun.Socket(p, p.Nodes[0]))
	if err != nil {
		t.Fatal(err)
	}
	if st.BGP == nil || len(st.BGP.Peers) != 1 || st.BGP.Peers[0].State != "established" || st.BGP.Peers[0].BFD == nil {
		t.Fatalf("status of %s: BGP %+v", p.Nodes[0].Name, st.BGP)
	}
	// The agent's BFD session comes up once BIRD answers it.
	waitBFDUp(t, ctx, p, p.Nodes, 10*time.Second)

	// New flows spread over the nodes: 50 connections, each its own
	// 5-tuple for the router's hash.
	before := e.snapshot(t)
	tally, err := labrun.HTTPLoad(ctx, e.client.Namespace, e.web().Target(), 50, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	fwd := e.forwarded(e.snapshot(t).Since(before))
	t.Logf("50 requests through BIRD: backends %v, packets forwarded per node %v", tally, fwd)
	if tally.Total() != 50 {
		t.Errorf("50 requests through BIRD: %v", tally)
	}
	carriers := 0
	for _, n := range fwd {
		if n > 0 {
			carriers++
		}
	}
	if carriers < 2 {
		t.Errorf("50 new flows went through %d of %d nodes (%v): BIRD's route does not spread them", carriers, len(p.Nodes), fwd)
	}

	// A graceful stop withdraws at once and exits after the drain time.
	leaving := p.Nodes[3]
	pid := e.agentPID(t, leaving)
	start := time.Now()
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := lab.WaitNextHops(ctx, p, vip, running[:3], 10*time.Second); err != nil {
		t.Fatal(err)
	}
	withdrawn := time.Since(start)
	waitExit(t, leaving, pid, 10*time.Second)
	t.Logf("%s stopped gracefully (SIGTERM): route without it after %s, agent gone after %s (drain %s)", leaving.Name,
		withdrawn.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), labrun.DrainTime)
	if withdrawn >= labrun.DrainTime {
		t.Errorf("the route lost the stopping node only after %s, not before its drain time of %s", withdrawn, labrun.DrainTime)
	}
	running = running[:3]

	// A hung node (SIGSTOP: its sessions stay open, nothing answers):
	// BIRD's BFD takes its next hop out within the detection time.
	hung := p.Nodes[2]
	pid = e.agentPID(t, hung)
	start = time.Now()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGCONT)
	if err := lab.WaitNextHops(ctx, p, vip, running[:2], 5*time.Second); err != nil {
		t.Fatal(err)
	}
	detect := time.Since(start)
	t.Logf("%s hung (SIGSTOP): its next hop left the route after %s (BFD %s x %d)", hung.Name, detect.Round(time.Millisecond),
		p.BGP.BFD.MinRx, p.BGP.BFD.Multiplier)
	if detect > 1500*time.Millisecond {
		t.Errorf("hung node withdrawn after %s, want within about the BFD detection time (300 ms)", detect)
	}
	start = time.Now()
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := lab.WaitNextHops(ctx, p, vip, running, 30*time.Second); err != nil {
		t.Fatalf("after the hung node resumed: %v", err)
	}
	t.Logf("%s resumed (SIGCONT): back in the route after %s", hung.Name, time.Since(start).Round(time.Millisecond))

	// A killed node: its sessions close with it.
	killed := p.Nodes[1]
	start = time.Now()
	e.stopAgent(t, killed, syscall.SIGKILL)
	if err := lab.WaitNextHops(ctx, p, vip, []netip.Addr{running[0], running[2]}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	detect = time.Since(start)
	t.Logf("%s killed (SIGKILL): its next hop left the route after %s", killed.Name, detect.Round(time.Millisecond))
	if detect > 1500*time.Millisecond {
		t.Errorf("killed node withdrawn after %s, want within about the BFD detection time (300 ms)", detect)
	}

	// The lab's status reads BIRD's sessions: the two nodes left are
	// established.
	lst, err := lab.ReadStatus(prefix)
	if err != nil {
		t.Fatal(err)
	}
	up := 0
	for _, s := range lst.Sessions {
		if s.State == "established" {
			up++
		}
	}
	if lst.SessionsError != "" || up != 2 {
		t.Errorf("BIRD's sessions in the lab status: %+v (%s); want 2 established", lst.Sessions, lst.SessionsError)
	}
}

// waitBFDUp waits until every given node's agent reports its BFD session
// with the router up.
func waitBFDUp(t *testing.T, ctx context.Context, p lab.Plan, nodes []lab.Host, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for _, n := range nodes {
		for {
			st, err := api.GetStatus(labrun.Socket(p, n))
			if err == nil && st.BGP != nil && len(st.BGP.Peers) == 1 && st.BGP.Peers[0].BFD != nil && st.BGP.Peers[0].BFD.State == "up" {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				t.Fatalf("%s: no BFD session up with the router after %s: %+v (%v)", n.Name, timeout, st, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// logBIRDOnFailure logs BIRD's sessions and the end of its log if t
// fails.
func logBIRDOnFailure(t *testing.T, p lab.Plan) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		if st, err := lab.ReadStatus(p.Spec.Prefix); err != nil {
			t.Logf("BIRD's sessions: %v", err)
		} else {
			t.Logf("BIRD's sessions: %+v %s", st.Sessions, st.SessionsError)
		}
		b, err := os.ReadFile(lab.LogFile(p.Spec.Prefix, "bird"))
		if err != nil {
			t.Logf("BIRD's log: %v", err)
			return
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		t.Logf("BIRD's log ends with:\n%s", strings.Join(lines[max(0, len(lines)-40):], "\n"))
	})
}
