package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
	"github.com/xlbproject/xlb/testbed/netns"
	"github.com/xlbproject/xlb/testbed/testenv"
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
// are logged, not asserted.
func TestL2Failover(t *testing.T) {
	needRoot(t)
	prefix := labPrefix + "l2"
	useLab(t, prefix)
	ctx, cancel := context.WithTimeout(interrupted, 4*time.Minute)
	defer cancel()
	e := labEnv(t, ctx, lab.Spec{Prefix: prefix, Clients: 2, Nodes: 3, Backends: 2, Binary: xlbBinary, Router: lab.RouterStatic, L2: true})
	e.services[0].Forwarding, e.services[0].Flows = config.DSRGUE, config.FlowsDaisyChain
	if err := labrun.StartAgents(ctx, e.p, e.services); err != nil {
		t.Fatal(err)
	}
	web := e.web()
	running := slices.Clone(e.p.Nodes)
	owner := waitL2Owner(t, e.p, running, web.VIP)
	t.Logf("%s answers for %s", owner.Name, web.VIP)
	for _, c := range e.p.Clients {
		tally, err := labrun.HTTPLoad(ctx, c.Namespace, web.Target(), 20, 4, nil)
		if err != nil || tally.Total() != 20 {
			t.Fatalf("%s to %s before any failover: %v, %v", c.Name, web.Target(), tally, err)
		}
	}

	for _, sig := range []syscall.Signal{syscall.SIGSTOP, syscall.SIGTERM} {
		t.Run(unix.SignalName(sig), func(t *testing.T) {
			r := l2FailoverRound(t, ctx, e, running, owner, sig)
			t.Logf("%s of %s: %s", unix.SignalName(sig), owner.Name, r)
			if r.broken != 0 {
				t.Errorf("%d of %d persistent connections broken across the failover", r.broken, l2Persistent)
			}
			if sig == syscall.SIGSTOP {
				// The hung agent resumes: it takes its VIP back once the
				// others hear it, and nothing breaks either.
				pid := e.agentPID(t, owner)
				if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
				if back := waitL2Owner(t, e.p, running, web.VIP); back.Name != owner.Name {
					t.Errorf("after SIGCONT %s answers for %s, want %s again", back.Name, web.VIP, owner.Name)
				}
				return
			}
			running = slices.DeleteFunc(running, func(h lab.Host) bool { return h.Name == owner.Name })
		})
	}
}

// l2Result is one failover as measured.
type l2Result struct {
	newOwner string
	// answering: the signal to the new owner's status saying it answers;
	// firstClient, lastClient: to the first and the last client's ARP
	// entry for the VIP holding the new owner's MAC.
	answering, firstClient, lastClient time.Duration
	broken                             int
	stream                             summary
}

func (r l2Result) String() string {
	return fmt.Sprintf("%s answers %v after the signal; the clients' ARP caches hold its MAC after %v and %v; %d of %d persistent connections broken; new connections meanwhile: %s",
		r.newOwner, r.answering.Round(time.Millisecond), r.firstClient.Round(time.Millisecond), r.lastClient.Round(time.Millisecond), r.broken, l2Persistent, r.stream)
}

// l2FailoverRound stops owner's agent with sig while l2Persistent
// connections stay open and new ones stream in from the first client,
// and measures how the VIP moves.
func l2FailoverRound(t *testing.T, ctx context.Context, e *env, running []lab.Host, owner lab.Host, sig syscall.Signal) l2Result {
	web := e.web()
	var conns []*labrun.HTTPConn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := range l2Persistent {
		client := e.p.Clients[i%len(e.p.Clients)]
		c, err := labrun.DialHTTP(ctx, client.Namespace, web.Target())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Get(ctx, false); err != nil {
			t.Fatalf("persistent connection %d from %s, before the failover: %v", i, client.Name, err)
		}
		conns = append(conns, c)
	}
	stop := streamTo(t, ctx, e.p.Clients[0].Namespace, web.Target(), 10*time.Millisecond, 2*time.Second)
	time.Sleep(200 * time.Millisecond)

	others := slices.DeleteFunc(slices.Clone(running), func(h lab.Host) bool { return h.Name == owner.Name })
	pid := e.agentPID(t, owner)
	if sig == syscall.SIGSTOP {
		// Whatever happens, a stopped agent must resume to exit.
		t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
	}
	start := time.Now()
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatal(err)
	}
	var r l2Result
	var newMAC string
	clientAt := make([]time.Duration, len(e.p.Clients))
	testenv.Eventually(t, 10*time.Second, "another node answers for the VIP and both clients' ARP caches hold its MAC", func() (bool, string) {
		if newMAC == "" {
			for _, n := range others {
				st, err := api.GetStatus(labrun.Socket(e.p, n))
				if err != nil {
					return false, err.Error()
				}
				if v, ok := l2VIP(st, web.VIP); ok && v.Answering {
					r.newOwner, r.answering, newMAC = n.Name, time.Since(start), st.L2.MAC
				}
			}
			if newMAC == "" {
				return false, "no other node answers yet"
			}
		}
		var state []string
		done := true
		for i, c := range e.p.Clients {
			mac := neighMAC(t, c, web.VIP)
			if mac == newMAC && clientAt[i] == 0 {
				clientAt[i] = time.Since(start)
			}
			done = done && clientAt[i] != 0
			state = append(state, fmt.Sprintf("%s: %s", c.Name, mac))
		}
		return done, fmt.Sprintf("new owner %s (%s); %s", r.newOwner, newMAC, strings.Join(state, ", "))
	})
	r.firstClient, r.lastClient = slices.Min(clientAt), slices.Max(clientAt)
	if sig == syscall.SIGTERM {
		waitExit(t, owner, pid, 5*time.Second)
	}
	// Traffic for a while through the new owner, then every persistent
	// connection asks once more.
	time.Sleep(500 * time.Millisecond)
	r.stream = summarize(stop())
	for i, c := range conns {
		if _, err := c.Get(ctx, true); err != nil {
			r.broken++
			if r.broken <= 3 {
				t.Logf("persistent connection %d (%v) broken: %v", i, c.LocalAddr(), err)
			}
		}
	}
	// The new owner's data plane carries the traffic now.
	st, err := api.GetStatus(labrun.Socket(e.p, hostNamed(e.p, r.newOwner)))
	if err != nil {
		t.Fatal(err)
	}
	if webSt := serviceNamed(st, web.Name); webSt.Counters.Packets == 0 {
		t.Errorf("%s answers for the VIP but its data plane forwarded no packet of %s", r.newOwner, web.Name)
	}
	// What an operator reads on the new owner.
	text, err := exec.CommandContext(ctx, xlbBinary, "status", "--socket", labrun.Socket(e.p, hostNamed(e.p, r.newOwner))).CombinedOutput()
	if err != nil {
		t.Fatalf("xlb status: %v: %s", err, text)
	}
	want := fmt.Sprintf("%s  %s  answering since", web.VIP, r.newOwner)
	if !strings.Contains(string(text), "L2:       node "+r.newOwner) || !strings.Contains(strings.Join(strings.Fields(string(text)), "  "), strings.Join(strings.Fields(want), "  ")) {
		t.Errorf("xlb status on %s does not show it answering for %s:\n%s", r.newOwner, web.VIP, text)
	}
	t.Logf("xlb status on %s:\n%s", r.newOwner, text)
	return r
}

// waitL2Owner waits until the running nodes agree on who answers for vip
// and exactly that one does; it returns that node.
func waitL2Owner(t *testing.T, p lab.Plan, running []lab.Host, vip netip.Addr) lab.Host {
	t.Helper()
	var owner string
	testenv.Eventually(t, 10*time.Second, fmt.Sprintf("the nodes agree on one owner of %s, which alone answers", vip), func() (bool, string) {
		owners, answering := map[string]bool{}, []string{}
		var state []string
		for _, n := range running {
			st, err := api.GetStatus(labrun.Socket(p, n))
			if err != nil {
				return false, err.Error()
			}
			v, ok := l2VIP(st, vip)
			if !ok {
				return false, n.Name + ": no layer-2 status for the VIP"
			}
			owners[v.Owner] = true
			if v.Answering {
				answering = append(answering, n.Name)
			}
			state = append(state, fmt.Sprintf("%s: alive %v, owner %s, answering %v", n.Name, st.L2.Alive, v.Owner, v.Answering))
		}
		ok := len(owners) == 1 && len(answering) == 1 && owners[answering[0]]
		if ok {
			owner = answering[0]
		}
		return ok, strings.Join(state, "; ")
	})
	return hostNamed(p, owner)
}

func l2VIP(st *api.Status, vip netip.Addr) (api.L2VIP, bool) {
	if st.L2 == nil {
		return api.L2VIP{}, false
	}
	i := slices.IndexFunc(st.L2.VIPs, func(v api.L2VIP) bool { return v.VIP == vip })
	if i < 0 {
		return api.L2VIP{}, false
	}
	return st.L2.VIPs[i], true
}

func hostNamed(p lab.Plan, name string) lab.Host {
	i := slices.IndexFunc(p.Nodes, func(h lab.Host) bool { return h.Name == name })
	if i < 0 {
		return lab.Host{Name: name}
	}
	return p.Nodes[i]
}

// neighMAC is the MAC address client h's neighbour table holds for addr
// ("" without an entry): what `ip neigh` shows in its namespace.
func neighMAC(t *testing.T, h lab.Host, addr netip.Addr) string {
	t.Helper()
	var mac string
	err := netns.Do(h.Namespace, func() error {
		l, err := netlink.LinkByName(h.Interface)
		if err != nil {
			return err
		}
		ns, err := netlink.NeighList(l.Attrs().Index, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		for _, n := range ns {
			if a, ok := netip.AddrFromSlice(n.IP.To4()); ok && a == addr && len(n.HardwareAddr) == 6 {
				mac = net.HardwareAddr(n.HardwareAddr).String()
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: neighbour table: %v", h.Name, err)
	}
	return mac
}
