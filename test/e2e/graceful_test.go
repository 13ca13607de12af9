package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// TestBGPGracefulRestartWithFRR runs an agent whose peer, FRR, helps
// graceful restart: when the agent is killed (SIGKILL) or stopped with
// SIGTERM, FRR keeps its route to the VIP, stale, and in the kernel; the
// next agent makes it fresh. SIGUSR1 still withdraws it.
func TestBGPGracefulRestartWithFRR(t *testing.T) {
	ctx, e := labEnv(t, "gr", lab.Spec{Clients: 1, Nodes: 1, Backends: 1, Router: lab.RouterFRR, GracefulRestart: true}, 3*time.Minute)
	prefix := e.p.Spec.Prefix
	p, services := e.p, e.services
	vip := e.web().VIP
	node := p.Nodes[0]
	running := startInTurn(t, ctx, p, services, vip, 20*time.Second)

	want := func(what string, present, stale bool) {
		t.Helper()
		wantFRRRoute(t, ctx, prefix, vip, what, present, stale)
	}
	restart := func(after string) {
		t.Helper()
		if _, err := labrun.StartAgent(ctx, p, node, services); err != nil {
			t.Fatal(err)
		}
		want("route fresh again after "+after, true, false)
		if err := lab.WaitNextHops(ctx, p, vip, running, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	want("route announced", true, false)
	wantNegotiated(t, labrun.Socket(p, node))

	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		e.stopAgent(t, node, sig)
		want(fmt.Sprintf("route kept, stale, after %v", sig), true, true)
		// Still in the router's kernel table: traffic keeps coming.
		if err := lab.WaitNextHops(ctx, p, vip, running, time.Second); err != nil {
			t.Fatalf("after %v: %v", sig, err)
		}
		restart(sig.String())
	}

	// SIGUSR1: the node leaves; the route goes before the agent does.
	pid := e.agentPID(t, node)
	if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if err := lab.WaitNextHops(ctx, p, vip, nil, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	want("route withdrawn by SIGUSR1", false, false)
	waitExit(t, node, pid, labrun.DrainTime+10*time.Second)
}

// wantFRRRoute waits until frrRoute is (present, stale).
func wantFRRRoute(t *testing.T, ctx context.Context, prefix string, vip netip.Addr, what string, present, stale bool) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, what, func() (bool, string) {
		p, s := frrRoute(t, ctx, prefix, vip)
		return p == present && s == stale, fmt.Sprintf("FRR's path: present %v, stale %v", p, s)
	})
}

// wantNegotiated waits until the agent behind socket reports graceful
// restart negotiated with its one peer.
func wantNegotiated(t *testing.T, socket string) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, "graceful restart negotiated in xlb status", func() (bool, string) {
		st, err := api.GetStatus(socket)
		if err != nil {
			return false, err.Error()
		}
		if st.BGP == nil || len(st.BGP.Peers) != 1 {
			return false, fmt.Sprintf("BGP status %+v", st.BGP)
		}
		g := st.BGP.Peers[0].GracefulRestart
		if g == nil || g.Negotiated == nil || !*g.Negotiated || g.RestartTimeSeconds != 120 {
			return false, fmt.Sprintf("peer %+v, graceful restart %+v", st.BGP.Peers[0], g)
		}
		return true, ""
	})
}
