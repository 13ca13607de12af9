package e2e

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
)

// l2Persistent is how many persistent connections the layer-2 failover
// holds across each failover, spread over the clients.
const l2Persistent = 200

// TestL2Failover is layer-2 mode on one segment: two clients and three
// xlb nodes, the clients finding the VIP by ARP. The node that answers
// for the VIP is stopped, by SIGSTOP (a hung agent) and by SIGTERM; with
// 200 persistent connections open and new ones streaming in, another
// node takes the VIP over, the clients' ARP caches move to its MAC, and
// no persistent connection breaks (the service is daisy-chained, and
// every node forwards a flow to the same backend). The failover times
// are logged, not asserted (bench/l2bench measures them).
func TestL2Failover(t *testing.T) {
	ctx, e := labEnv(t, "l2", lab.Spec{Clients: 2, Nodes: 3, Backends: 2, Router: lab.RouterStatic, L2: true}, 4*time.Minute)
	e.services[0].Forwarding, e.services[0].Flows = config.DSRGUE, config.FlowsDaisyChain
	if err := labrun.StartAgents(ctx, e.p, e.services); err != nil {
		t.Fatal(err)
	}
	web := e.web()
	running := slices.Clone(e.p.Nodes)
	owner, err := labrun.WaitL2Owner(ctx, e.p, running, web.VIP, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s answers for %s", owner.Name, web.VIP)
	for _, c := range e.p.Clients {
		tally, err := labrun.HTTPLoad(ctx, c.Namespace, web.Target(), 20, 4, nil)
		if err != nil || tally.Total() != 20 {
			t.Fatalf("%s to %s before any failover: %v, %v", c.Name, web.Target(), tally, err)
		}
	}

	for _, sig := range []syscall.Signal{syscall.SIGSTOP, syscall.SIGTERM} {
		t.Run(unix.SignalName(sig), func(t *testing.T) {
			if sig == syscall.SIGSTOP {
				// Whatever happens, a stopped agent must resume to exit.
				pid := e.agentPID(t, owner)
				t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
			}
			r, err := labrun.RunL2Failover(ctx, e.p, web, running, owner, sig, l2Persistent)
			if err != nil {
				t.Fatal(err)
			}
			t.Log(r)
			if r.Broken != 0 {
				t.Errorf("%d of %d persistent connections broken across the failover; the first: %s", r.Broken, r.Conns, r.FirstBroken)
			}
			checkNewOwner(t, ctx, e, r.NewOwner)
			if sig == syscall.SIGSTOP {
				// The hung agent resumes: it takes its VIP back once the
				// others hear it, and nothing breaks either.
				if err := syscall.Kill(e.agentPID(t, owner), syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
				if err := labrun.WaitL2OwnerIs(ctx, e.p, running, web.VIP, owner.Name, 10*time.Second); err != nil {
					t.Errorf("after SIGCONT: %v", err)
				}
				return
			}
			running = slices.DeleteFunc(running, func(h lab.Host) bool { return h.Name == owner.Name })
		})
	}
}

// checkNewOwner checks what the new owner of the web VIP shows: its data
// plane carries the traffic, and `xlb status` says it answers.
func checkNewOwner(t *testing.T, ctx context.Context, e *env, name string) {
	t.Helper()
	web, node := e.web(), labrun.NodeNamed(e.p, name)
	st, err := api.GetStatus(labrun.Socket(e.p, node))
	if err != nil {
		t.Fatal(err)
	}
	if s := serviceNamed(st, web.Name); s.Counters.Packets == 0 {
		t.Errorf("%s answers for the VIP but its data plane forwarded no packet of %s", name, web.Name)
	}
	text, err := exec.CommandContext(ctx, xlbBinary, "status", "--socket", labrun.Socket(e.p, node)).CombinedOutput()
	if err != nil {
		t.Fatalf("xlb status: %v: %s", err, text)
	}
	want := strings.Join([]string{web.VIP.String(), name, "answering", "since"}, " ")
	if !strings.Contains(string(text), "L2:       node "+name) || !strings.Contains(strings.Join(strings.Fields(string(text)), " "), want) {
		t.Errorf("xlb status on %s does not show it answering for %s:\n%s", name, web.VIP, text)
	}
	t.Logf("xlb status on %s:\n%s", name, text)
}

// TestL2FailoverIPv6 is TestL2Failover for an IPv6 VIP in a dual-stack
// layer-2 lab: the clients find the VIP by neighbour solicitation, which
// only the owner answers; its agent is stopped by SIGSTOP and SIGTERM
// with persistent connections open; another node answers, its
// unsolicited advertisements move the clients' neighbour entries (`ip -6
// neigh`), and no connection breaks.
func TestL2FailoverIPv6(t *testing.T) {
	ctx, e := labEnv(t, "l26", lab.Spec{Clients: 2, Nodes: 3, Backends: 2, Router: lab.RouterStatic, L2: true, IPv6: true}, 4*time.Minute)
	six, err := labrun.Services6(e.p)
	if err != nil {
		t.Fatal(err)
	}
	web6 := six[0]
	web6.Forwarding, web6.Flows = config.DSRGUE, config.FlowsDaisyChain
	services := append(e.services, web6)
	if err := labrun.StartAgents(ctx, e.p, services); err != nil {
		t.Fatal(err)
	}
	running := slices.Clone(e.p.Nodes)
	owner, err := labrun.WaitL2Owner(ctx, e.p, running, web6.VIP, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s answers for %s", owner.Name, web6.VIP)
	for _, c := range e.p.Clients {
		tally, err := labrun.HTTPLoad(ctx, c.Namespace, web6.Target(), 20, 4, nil)
		if err != nil || tally.Total() != 20 {
			t.Fatalf("%s to %s before any failover: %v, %v", c.Name, web6.Target(), tally, err)
		}
	}
	// The clients found the VIP through the owner's program: no kernel
	// holds it.
	st, err := api.GetStatus(labrun.Socket(e.p, owner))
	if err != nil {
		t.Fatal(err)
	}
	if st.Reasons["tx_nd_advert"] == 0 {
		t.Errorf("%s answers for %s, but its program counted no advertisement: %v", owner.Name, web6.VIP, st.Reasons)
	}
	for _, sig := range []syscall.Signal{syscall.SIGSTOP, syscall.SIGTERM} {
		t.Run(unix.SignalName(sig), func(t *testing.T) {
			pid := e.agentPID(t, owner)
			if sig == syscall.SIGSTOP {
				t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
			}
			r, err := labrun.RunL2Failover(ctx, e.p, web6, running, owner, sig, l2Persistent)
			if err != nil {
				t.Fatal(err)
			}
			t.Log(r)
			if r.Broken != 0 {
				t.Errorf("%d of %d persistent connections broken across the failover; the first: %s", r.Broken, r.Conns, r.FirstBroken)
			}
			if sig == syscall.SIGSTOP {
				if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
				// Its VIP back, for the SIGTERM case to stop its owner.
				if err := labrun.WaitL2OwnerIs(ctx, e.p, running, web6.VIP, owner.Name, 10*time.Second); err != nil {
					t.Fatalf("after SIGCONT: %v", err)
				}
			}
		})
	}
}
