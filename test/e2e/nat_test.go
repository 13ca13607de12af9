package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
	k8sapi "github.com/xlbproject/xlb/internal/k8s/api"
	"github.com/xlbproject/xlb/testbed/k8stest"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
	"github.com/xlbproject/xlb/testbed/survival"
)

// The NAT tests run against backends that run nothing but nginx
// (lab.Spec.PlainBackends): no `xlb backend`, no VIP, no decapsulation.
// Only a node that translates reaches them, and nginx's X-Peer header
// tells what source each connection had when it arrived.

// natPorts is the nat section's port range in these tests: a small one,
// so that a SYN flood exhausts it.
var natPorts = labrun.NAT{PortMin: 20000, PortMax: 29999}

// natLab brings up a lab of one client, one node behind the static
// router and n plain backends, spec changed by more, and registers it for
// removal.
func natLab(t *testing.T, ctx context.Context, suffix string, n int, more func(*lab.Spec)) lab.Plan {
	t.Helper()
	prefix := labPrefix + suffix
	useLab(t, prefix)
	s := lab.Spec{Prefix: prefix, Clients: 1, Nodes: 1, Backends: n, Binary: xlbBinary, Router: lab.RouterStatic, PlainBackends: true}
	if more != nil {
		more(&s)
	}
	p, err := lab.Up(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	logAgentsOnFailure(t, p)
	return p
}

// natService is a nat service on the lab's first VIP, port 8000, to
// port 80 of every backend: the answer proves both rewrites.
func natService(p lab.Plan) labrun.Service {
	return labrun.Service{Name: "web-nat", VIP: p.VIPs[0], Port: 8000, Protocol: config.TCP, Forwarding: config.NAT,
		Backends: backendAddrs(p), BackendPort: lab.HTTPPort}
}

// dnatService is a dnat service on the lab's second VIP, port 80.
func dnatService(p lab.Plan) labrun.Service {
	return labrun.Service{Name: "web-dnat", VIP: p.VIPs[1], Port: lab.HTTPPort, Protocol: config.TCP, Forwarding: config.DNAT,
		Backends: backendAddrs(p)}
}

func backendAddrs(p lab.Plan) []netip.Addr {
	var out []netip.Addr
	for _, b := range p.Backends {
		out = append(out, b.Addr)
	}
	return out
}

// startNAT writes node1's configuration with services and the nat
// section and starts its agent.
func startNAT(t *testing.T, ctx context.Context, p lab.Plan, services []labrun.Service, nat labrun.NAT) {
	t.Helper()
	node := p.Nodes[0]
	if err := labrun.WriteConfigWith(p, node, services, labrun.NodeOptions{NAT: &nat}); err != nil {
		t.Fatal(err)
	}
	if _, err := labrun.StartAgent(ctx, p, node, services); err != nil {
		t.Fatal(err)
	}
}

// ask makes one request on a new connection to target and returns the
// answer with the client's end of the connection.
func ask(ctx context.Context, p lab.Plan, target netip.AddrPort) (labrun.Answer, netip.AddrPort, error) {
	c, err := labrun.DialHTTP(ctx, p.Clients[0].Namespace, target)
	if err != nil {
		return labrun.Answer{}, netip.AddrPort{}, err
	}
	defer c.Close()
	a, err := c.Ask(ctx, true)
	return a, c.LocalAddr(), err
}

// askThroughNAT opens requests new connections to each of svcs (nat or
// dnat services of one family) from the lab's client and checks what the
// backends saw: for nat, natFrom (the node's address of that family) and
// a port from the nat range, for dnat the client's own address and port;
// and that every backend answered.
func askThroughNAT(t *testing.T, ctx context.Context, p lab.Plan, svcs []labrun.Service, natFrom netip.Addr, requests int) {
	t.Helper()
	for _, svc := range svcs {
		seen := labrun.Tally{}
		for i := range requests {
			a, local, err := ask(ctx, p, svc.Target())
			if err != nil {
				t.Fatalf("%s: request %d to %s: %v", svc.Name, i, svc.Target(), err)
			}
			seen[a.Backend]++
			if local.Addr().Is6() != svc.VIP.Is6() {
				t.Fatalf("%s: the client's end %s is not of the VIP's family", svc.Name, local)
			}
			switch svc.Forwarding {
			case config.NAT:
				if a.Peer.Addr() != natFrom || a.Peer.Port() < natPorts.PortMin || a.Peer.Port() > natPorts.PortMax {
					t.Errorf("%s: %s saw the connection from %s, want %s and a port in %d-%d (the client is %s)",
						svc.Name, a.Backend, a.Peer, natFrom, natPorts.PortMin, natPorts.PortMax, local)
				}
			case config.DNAT:
				if a.Peer != local {
					t.Errorf("%s: %s saw the connection from %s, want the client's %s", svc.Name, a.Backend, a.Peer, local)
				}
			}
		}
		t.Logf("%s: %d requests on new connections to %s: %v", svc.Name, requests, svc.Target(), seen)
		if got, want := seen.Backends(), labBackendNames(p); !slices.Equal(got, want) {
			t.Errorf("%s: answered by %v, want every backend %v", svc.Name, got, want)
		}
	}
}

// TestNATForwarding: a nat and a dnat service reach backends that run
// nothing but nginx. Every backend answers; a nat backend sees the node's
// address and a port from the nat range, a dnat backend the client's own
// address and port; the answers reach the client's socket, which is
// connected to VIP:port, so they came back from the VIP. The node lists
// the sessions with the source the backend saw, and counts them.
func TestNATForwarding(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(interrupted, 3*time.Minute)
	defer cancel()
	p := natLab(t, ctx, "na", 3, func(s *lab.Spec) { s.RepliesVia = "node1" })
	node := p.Nodes[0]
	nat, dnat := natService(p), dnatService(p)
	startNAT(t, ctx, p, []labrun.Service{nat, dnat}, natPorts)

	const requests = 60
	before := natCountersOf(t, p, node)
	askThroughNAT(t, ctx, p, []labrun.Service{nat, dnat}, node.Addr, requests)
	after := natCountersOf(t, p, node)
	t.Logf("nat counters before %+v, after %+v", before, after)
	if d := after.Created - before.Created; d < 2*requests {
		t.Errorf("the node created %d sessions for %d connections", d, 2*requests)
	}

	// Sessions of open connections: listed with the source the backend
	// saw, the node's address for nat and the client's for dnat.
	for _, svc := range []labrun.Service{nat, dnat} {
		c, err := labrun.DialHTTP(ctx, p.Clients[0].Namespace, svc.Target())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		a, err := c.Ask(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		ss := natSessionsOf(t, p, node, svc)
		i := slices.IndexFunc(ss, func(s natSession) bool { return s.Client == c.LocalAddr() })
		if i < 0 {
			t.Errorf("%s: no session of %s among the %d listed: %+v", svc.Name, c.LocalAddr(), len(ss), ss)
			continue
		}
		s := ss[i]
		t.Logf("%s: session %+v", svc.Name, s)
		if s.Source != a.Peer || !s.Replied || s.State != "established" || s.Backend.Port() != lab.HTTPPort {
			t.Errorf("%s: session %+v; want source %s (what %s saw), replied, established, backend port %d", svc.Name, s, a.Peer, a.Backend, lab.HTTPPort)
		}
	}
}

// labBackendNames lists the names of the lab's backends, sorted.
func labBackendNames(p lab.Plan) []string {
	var names []string
	for _, b := range p.Backends {
		names = append(names, b.Name)
	}
	slices.Sort(names)
	return names
}

// TestNATAgentRestart: the agent is killed (SIGKILL) and started again
// while 100 persistent connections through a nat service stay busy. The
// program and its session table stay pinned, so the connections go on
// through the gap and after it: none breaks.
func TestNATAgentRestart(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(interrupted, 3*time.Minute)
	defer cancel()
	p := natLab(t, ctx, "nr", 3, nil)
	node := p.Nodes[0]
	nat := natService(p)
	startNAT(t, ctx, p, []labrun.Service{nat}, natPorts)

	const (
		conns = 100
		every = 100 * time.Millisecond
		gap   = 2 * time.Second
	)
	load := survival.NewLoad(ctx, p, nat.Target(), every)
	t.Cleanup(func() { load.Stop() })
	if err := load.Open(conns); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	sessions := natCountersOf(t, p, node).Sessions
	pid, err := labrun.AgentPID(p, node)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := labrun.WaitExit(ctx, pid, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(gap)
	t1 := time.Now()
	if _, err := labrun.StartAgent(ctx, p, node, []labrun.Service{nat}); err != nil {
		t.Fatal(err)
	}
	t2 := time.Now()
	time.Sleep(2 * time.Second)
	after := natCountersOf(t, p, node)
	r := load.Stop()
	t.Logf("%d connections, %d broken, %d requests; agent killed, down %s, serving again after %s; sessions %d before, %d after",
		r.Conns, r.Broken, r.Requests, t1.Sub(t0).Round(time.Millisecond), t2.Sub(t1).Round(time.Millisecond), sessions, after.Sessions)
	for _, e := range r.Errors {
		t.Log(e)
	}
	if r.Broken != 0 {
		t.Errorf("%d of %d connections broke across the agent's SIGKILL and restart", r.Broken, r.Conns)
	}
	if sessions < conns || after.Sessions < conns {
		t.Errorf("%d sessions before the restart and %d after it, with %d connections open", sessions, after.Sessions, conns)
	}
	// Each connection asked every `every` from before the kill to the
	// end: at least half of that.
	if minimum := conns * int(time.Since(t0)/every) / 2; r.Requests < minimum {
		t.Errorf("%d requests, want at least %d: the connections stalled", r.Requests, minimum)
	}
}

// TestNATDrainAndHealth: a backend that leaves the configuration keeps
// its open connections (their sessions stay) while new connections go to
// the others; a backend that fails its health check loses its sessions at
// once, so its open connections break although it still serves them, and
// the others' do not.
func TestNATDrainAndHealth(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(interrupted, 4*time.Minute)
	defer cancel()
	p := natLab(t, ctx, "nd", 3, nil)
	node := p.Nodes[0]
	nat := natService(p)
	nat.Check = &labrun.Check{Type: config.CheckHTTP, Port: lab.HTTPPort, Path: lab.HealthPath,
		Interval: 200 * time.Millisecond, Timeout: 150 * time.Millisecond, Rise: 2, Fall: 2}
	opts := labrun.NodeOptions{NAT: &labrun.NAT{PortMin: natPorts.PortMin, PortMax: natPorts.PortMax, TCPClosing: 2 * time.Second}}
	if err := labrun.WriteConfigWith(p, node, []labrun.Service{nat}, opts); err != nil {
		t.Fatal(err)
	}
	if _, err := labrun.StartAgent(ctx, p, node, []labrun.Service{nat}); err != nil {
		t.Fatal(err)
	}
	be1 := p.Backends[0]
	if _, err := labrun.WaitHealth(ctx, p, nat.Name, be1.Addr, api.StateUp, 10*time.Second); err != nil {
		t.Fatal(err)
	}

	// A backend leaves two ways: out of the configuration, or kept
	// with weight 0.
	without := nat
	without.Backends = slices.DeleteFunc(slices.Clone(nat.Backends), func(a netip.Addr) bool { return a == be1.Addr })
	weight0 := without
	weight0.Drained = []netip.Addr{be1.Addr}
	for _, drain := range []struct {
		name string
		svc  labrun.Service
	}{{"DrainRemoved", without}, {"DrainWeight0", weight0}} {
		t.Run(drain.name, func(t *testing.T) {
			conns := openOn(t, ctx, p, nat.Target(), 30)
			defer closeAll(conns)
			on := onBackend(conns, be1.Name)
			if len(on) == 0 {
				t.Fatalf("none of %d connections reached %s", len(conns), be1.Name)
			}
			if _, err := labrun.ReconfigureWith(ctx, p, []labrun.Service{drain.svc}, opts); err != nil {
				t.Fatal(err)
			}
			// Open connections keep their backend, be1's included,
			// for a few rounds.
			for round := range 3 {
				for _, c := range conns {
					if name, err := c.conn.Get(ctx, false); err != nil || name != c.backend {
						t.Errorf("round %d after be1 left: connection on %s: answered by %q, %v", round, c.backend, name, err)
					}
				}
				time.Sleep(300 * time.Millisecond)
			}
			if n := sessionsTo(t, p, node, nat, be1.Addr); n < len(on) {
				t.Errorf("%d sessions to %s, want its %d open connections'", n, be1.Name, len(on))
			}
			tally, err := labrun.HTTPLoad(ctx, p.Clients[0].Namespace, nat.Target(), 60, 4, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d of %d open connections on %s kept working after it left; 60 new connections: %v", len(on), len(conns), be1.Name, tally)
			if tally[be1.Name] > 0 {
				t.Errorf("%d new connections reached %s after it left", tally[be1.Name], be1.Name)
			}
			// Once they end, their sessions go (after tcpClosing).
			closeAll(on)
			waitFor(t, ctx, "be1's sessions to end after its connections closed", 15*time.Second, func() string {
				if n := sessionsTo(t, p, node, nat, be1.Addr); n > 0 {
					return fmt.Sprintf("%d sessions left", n)
				}
				return ""
			})
			if _, err := labrun.ReconfigureWith(ctx, p, []labrun.Service{nat}, opts); err != nil {
				t.Fatal(err)
			}
		})
	}

	t.Run("HealthCheckFails", func(t *testing.T) {
		if _, err := labrun.WaitHealth(ctx, p, nat.Name, be1.Addr, api.StateUp, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		conns := openOn(t, ctx, p, nat.Target(), 30)
		defer closeAll(conns)
		on := onBackend(conns, be1.Name)
		if len(on) == 0 {
			t.Fatalf("none of %d connections reached %s", len(conns), be1.Name)
		}
		if err := lab.SetHealthy(p, be1, false); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = lab.SetHealthy(p, be1, true) }()
		if _, err := labrun.WaitHealth(ctx, p, nat.Name, be1.Addr, api.StateDown, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, "be1's sessions to end after it failed its health check", 5*time.Second, func() string {
			if n := sessionsTo(t, p, node, nat, be1.Addr); n > 0 {
				return fmt.Sprintf("%d sessions left", n)
			}
			return ""
		})
		// Every connection asks once more, at the same time: those on
		// be1 fail (reset, or no answer), the others answer.
		var wg sync.WaitGroup
		errs := make([]error, len(conns))
		names := make([]string, len(conns))
		for i, c := range conns {
			wg.Go(func() { names[i], errs[i] = c.conn.Get(ctx, false) })
		}
		wg.Wait()
		broken := 0
		for i, c := range conns {
			switch {
			case c.backend == be1.Name && errs[i] == nil:
				t.Errorf("a connection on %s still answered (%s) after it failed its health check: its session lives", be1.Name, names[i])
			case c.backend == be1.Name:
				broken++
			case errs[i] != nil || names[i] != c.backend:
				t.Errorf("a connection on %s: %q, %v", c.backend, names[i], errs[i])
			}
		}
		t.Logf("%s failed its health check: %d of its %d connections broken, the other %d answered", be1.Name, broken, len(on), len(conns)-len(on))
	})
}

// natConn is an open connection and the backend that answered it first.
type natConn struct {
	conn    *labrun.HTTPConn
	backend string
}

// openOn opens n connections to target and asks once on each.
func openOn(t *testing.T, ctx context.Context, p lab.Plan, target netip.AddrPort, n int) []natConn {
	t.Helper()
	var out []natConn
	for range n {
		c, err := labrun.DialHTTP(ctx, p.Clients[0].Namespace, target)
		if err != nil {
			closeAll(out)
			t.Fatal(err)
		}
		name, err := c.Get(ctx, false)
		if err != nil {
			c.Close()
			closeAll(out)
			t.Fatal(err)
		}
		out = append(out, natConn{c, name})
	}
	return out
}

func onBackend(cs []natConn, name string) []natConn {
	return slices.DeleteFunc(slices.Clone(cs), func(c natConn) bool { return c.backend != name })
}

func closeAll(cs []natConn) {
	for _, c := range cs {
		c.conn.Close()
	}
}

// waitFor polls cond, which says what it still waits for ("" when done),
// for at most timeout.
func waitFor(t *testing.T, ctx context.Context, what string, timeout time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		why := cond()
		if why == "" {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("%s: not within %s: %s", what, timeout, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// natFloodTime is how long hping3 floods.
const natFloodTime = 10 * time.Second

// TestNATSYNFlood: hping3 floods a nat service with SYNs from random
// sources at the highest rate it reaches here, while 200 persistent
// connections stay busy. The flood's sessions fill the port range and
// fail to allocate beyond it, but no established session is evicted:
// every connection that breaks must still have its session, and may
// only break if packets were dropped on the way (at 250,000
// SYNs a second the node's veth ring overflows, and the connections'
// packets are dropped with the flood's). The flood's sessions, which no
// client ever acknowledged, end after tcpSyn, and new connections work
// again.
func TestNATSYNFlood(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(interrupted, 4*time.Minute)
	defer cancel()
	p := natLab(t, ctx, "nf", 2, nil)
	node := p.Nodes[0]
	nat := natService(p)
	nat.Port = lab.HTTPPort
	natOpts := labrun.NAT{PortMin: natPorts.PortMin, PortMax: natPorts.PortMax, TCPSyn: 2 * time.Second}
	startNAT(t, ctx, p, []labrun.Service{nat}, natOpts)

	fwd, err := ebpf.LoadPinnedMap(filepath.Join(node.PinDir, "nat_fwd"), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer fwd.Close()
	load := survival.NewLoad(ctx, p, nat.Target(), survival.DefaultEvery)
	// A connection that breaks: is its established session still
	// there? (Looked up before the load closes it.)
	var mu sync.Mutex
	var lost []netip.AddrPort
	load.OnBroken = func(from netip.AddrPort) {
		k := wire.SessionKey{Src: wire.AddrOf(from.Addr()), Dst: wire.AddrOf(nat.VIP), Sport: wire.Port(from.Port()), Dport: wire.Port(nat.Port), Proto: syscall.IPPROTO_TCP}
		var v wire.SessionFwd
		if err := fwd.Lookup(&k, &v); err != nil {
			mu.Lock()
			lost = append(lost, from)
			mu.Unlock()
		}
	}
	t.Cleanup(func() { load.Stop() })
	if err := load.Open(200); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	before := natCountersOf(t, p, node)
	drops0 := backlogDrops(t)
	links0, err := labrun.Drops(p)
	if err != nil {
		t.Fatal(err)
	}
	flood, err := labrun.HPingFlood(ctx, p.Clients[0], nat.Target(), natFloodTime)
	if err != nil {
		t.Fatal(err)
	}
	during := natCountersOf(t, p, node)
	drops := backlogDrops(t) - drops0
	links1, err := labrun.Drops(p)
	if err != nil {
		t.Fatal(err)
	}
	linkDrops := map[string]uint64{}
	var dropped uint64
	for k, v := range links1 {
		if d := v - links0[k]; d > 0 {
			linkDrops[k], dropped = d, dropped+d
		}
	}
	time.Sleep(2 * time.Second)
	r := load.Stop()
	created, failed := during.Created-before.Created, during.AllocFailures-before.AllocFailures
	t.Logf("`%s` in %s: %d packets, %.0f/s (hping3: %s); killed by PID: %v", flood.Command, flood.Took.Round(time.Millisecond), flood.Packets, flood.Rate(), flood.Output, flood.Unstopped)
	t.Logf("the node created %d sessions and failed to allocate %d (%.0f%% of the SYNs sent reached it; dropped on the way: %d by the per-CPU backlogs, %d by interfaces %v); after the flood %d sessions, %d of them embryonic; states of a sample: %v",
		created, failed, 100*float64(created+failed)/float64(max(flood.Packets, 1)), drops, dropped, linkDrops, during.Sessions, during.Embryonic, sessionStates(t, p, node, nat))
	t.Logf("%d persistent connections, %d broken (%d of them without their session when they broke), %d requests", r.Conns, r.Broken, len(lost), r.Requests)
	for _, e := range r.Errors {
		t.Log(e)
	}
	// No established session may go: a connection that broke while its
	// session stayed lost its packets on the way (the lab's two cores
	// cannot carry the flood, and the backlogs that every namespace
	// shares overflow), which the session table cannot help.
	if len(lost) > 0 {
		t.Errorf("the SYN flood took the sessions of %d established connections: %v", len(lost), lost)
	}
	if r.Broken > len(lost) && drops+dropped == 0 {
		t.Errorf("%d connections broke with their sessions in place and no packet dropped by the backlogs", r.Broken-len(lost))
	}
	// The flood must have filled the port range, or it showed nothing.
	ports := uint64(natOpts.PortMax-natOpts.PortMin+1) * uint64(len(p.Backends))
	if flood.Packets < 10*ports || failed == 0 || created+200 < ports {
		t.Errorf("%d SYNs sent, %d sessions created, %d allocation failures, %d ports: the flood did not fill the port range, so it shows nothing",
			flood.Packets, created, failed, ports)
	}
	// The flood's sessions never see the clients' ACK: they should end
	// after tcpSyn, and their ports be free again for new connections.
	// (docs/connection-survival.md, "A SYN flood against a NAT
	// service").
	const requirePortsBack = true
	report := t.Logf
	if requirePortsBack {
		report = t.Errorf
	}
	// The load's own connections may still be closing (those that broke
	// lose packets and go on being retransmitted): only the flood's
	// sessions, of sources other than the lab's client, must be gone.
	client := p.Clients[0].Addr
	floodLeft := func() (int, uint64) {
		c := natCountersOf(t, p, node)
		if c.Sessions > uint64(r.Conns) {
			return int(c.Sessions), c.Sessions
		}
		n := 0
		for _, x := range natSessionsOf(t, p, node, nat) {
			if x.Client.Addr() != client {
				n++
			}
		}
		return n, c.Sessions
	}
	deadline := time.Now().Add(15 * time.Second)
	left, all := floodLeft()
	for left > 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		left, all = floodLeft()
	}
	if left > 0 {
		report("the flood's sessions to end: not within 15s: %d of %d sessions left are the flood's (states of a sample: %v)", left, all, sessionStates(t, p, node, nat))
	}
	ctx20, cancel20 := context.WithTimeout(ctx, 10*time.Second)
	defer cancel20()
	if tally, err := labrun.HTTPLoad(ctx20, p.Clients[0].Namespace, nat.Target(), 20, 4, nil); err != nil {
		report("new connections after the flood: %v", err)
	} else {
		t.Logf("20 new connections after the flood: %v", tally)
	}
}

// backlogDrops sums the packets the kernel dropped from its per-CPU
// input backlogs (/proc/net/softnet_stat, the second column), which every
// namespace's veths share: where a flood that the CPUs cannot keep up
// with loses packets, the lab's legitimate ones among them.
func backlogDrops(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/net/softnet_stat")
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseUint(f[1], 16, 64)
		if err != nil {
			t.Fatalf("/proc/net/softnet_stat: %q: %v", line, err)
		}
		n += v
	}
	return n
}

// sessionStates counts a sample of up to 10000 sessions of svc by state
// and whether the backend replied.
func sessionStates(t *testing.T, p lab.Plan, node lab.Host, svc labrun.Service) map[string]int {
	t.Helper()
	ss, err := api.GetSessions(labrun.Socket(p, node), api.SessionQuery{VIP: svc.VIP, Port: svc.Port, Protocol: string(svc.Protocol), Max: api.MaxSessionSample})
	if err != nil {
		t.Fatalf("%s: sessions of %s: %v", node.Name, svc.Target(), err)
	}
	out := map[string]int{}
	for _, s := range ss.Services {
		for _, x := range s.Sessions {
			out[fmt.Sprintf("%s replied=%v", x.State, x.Replied)]++
		}
	}
	return out
}

// TestDNATNoReply: a dnat service whose second backend's replies do not
// go back through the node (its route to the clients goes straight to
// them). Connections to it fail, as the client gets answers from the
// backend's own address; the node lists their sessions as not replied,
// and counts each once it expires, in `xlb status`. The first backend's
// replies are routed through the node: its connections work and are not
// counted.
func TestDNATNoReply(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(interrupted, 3*time.Minute)
	defer cancel()
	p := natLab(t, ctx, "nn", 2, nil)
	node := p.Nodes[0]
	be1, be2 := p.Backends[0], p.Backends[1]
	if err := lab.RouteReplies(ctx, p, be1, node); err != nil {
		t.Fatal(err)
	}
	dnat := dnatService(p)
	startNAT(t, ctx, p, []labrun.Service{dnat}, labrun.NAT{})

	before := natCountersOf(t, p, node)
	const attempts = 24
	var wg sync.WaitGroup
	results := make([]error, attempts)
	backends := make([]string, attempts)
	for i := range attempts {
		wg.Go(func() {
			// Two SYNs at most (at 0 and 1 s): each attempt is one
			// session, however it ends.
			actx, cancel := context.WithTimeout(ctx, 2500*time.Millisecond)
			defer cancel()
			a, _, err := ask(actx, p, dnat.Target())
			backends[i], results[i] = a.Backend, err
		})
	}
	wg.Wait()
	failed := 0
	for i, err := range results {
		switch {
		case err != nil:
			failed++
		case backends[i] != be1.Name:
			t.Errorf("attempt %d answered by %s, want only %s", i, backends[i], be1.Name)
		}
	}
	t.Logf("%d of %d connection attempts failed", failed, attempts)
	if failed == 0 || failed == attempts {
		t.Fatalf("%d of %d attempts failed: want those to %s only", failed, attempts, be2.Name)
	}
	// While they live, the sessions to be2 are listed as not replied.
	ss := natSessionsOf(t, p, node, dnat)
	notReplied := 0
	for _, s := range ss {
		if s.Backend.Addr() == be2.Addr && !s.Replied {
			notReplied++
		}
		if s.Backend.Addr() == be1.Addr && !s.Replied {
			t.Errorf("session %+v to %s: not replied, but its replies go through the node", s, be1.Name)
		}
	}
	t.Logf("%d sessions listed, %d to %s without a reply", len(ss), notReplied, be2.Name)
	if notReplied == 0 {
		t.Errorf("no session to %s listed without a reply: %+v", be2.Name, ss)
	}
	// Once they expire (tcpSyn), each is counted.
	waitFor(t, ctx, "the unanswered sessions to be counted", 20*time.Second, func() string {
		if got := natCountersOf(t, p, node).NoReply - before.NoReply; got < uint64(failed) {
			return fmt.Sprintf("%d counted, want %d", got, failed)
		}
		return ""
	})
	if got := natCountersOf(t, p, node).NoReply - before.NoReply; got != uint64(failed) {
		t.Errorf("%d sessions counted without a reply, want the %d failed connections'", got, failed)
	}
	checkStatusShowsNoReply(t, p, node)
}

// TestNATKubernetes: a Service of xlb's class with the annotation
// xlb.io/forwarding: nat, against a real API server, reaches pods that
// run nothing but nginx on their target port, on Kubernetes nodes that
// run nothing of xlb (no `xlb backend`): the agents translate VIP:80 to
// pod:8080 and their own address, which is what every pod sees.
func TestNATKubernetes(t *testing.T) {
	k := kubeLab(t, k8stest.Options{}, "nk", lab.Spec{Clients: 1, Nodes: 2, Backends: 2, Pods: 2, PlainBackends: true,
		Router: lab.RouterEmbedded}, 4*time.Minute, 60)
	ctx, p := k.ctx, k.p
	k.createNodes(nil)
	k.createCustom(k8sapi.AddressPoolResource, "AddressPool", k8sPool, map[string]any{"addresses": []any{k8sPoolRange}})
	b := p.BGP
	k.createCustom(k8sapi.BGPPeerResource, "BGPPeer", "router", map[string]any{
		"myASN": int64(b.NodeASN), "peerASN": int64(b.PeerASN), "peerAddress": b.PeerAddr.String(), "holdTime": b.HoldTime.String()})
	k.startController()
	for _, n := range p.Nodes {
		k.startAgent(n)
	}
	for _, pod := range p.Pods {
		k.createPod(pod, true)
	}
	class := k8sapi.LoadBalancerClass
	k.must(k.cs.CoreV1().Services(k8sNamespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: k8sService, Annotations: map[string]string{k8sapi.AnnotationForwarding: string(config.NAT)}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class,
			Selector: map[string]string{"app": k8sService},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{}))
	vip := k.waitIngress("")
	if err := lab.WaitNextHops(ctx, p, vip, []netip.Addr{p.Nodes[0].Addr, p.Nodes[1].Addr}, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	pods := podNames(p.Pods)
	k.waitBackends(pods...)
	for _, n := range p.Nodes {
		st := status(t, p, n)
		s := serviceNamed(st, serviceName(80, "tcp"))
		if s.Forwarding != string(config.NAT) {
			t.Errorf("%s serves %s with forwarding %q, want nat (the annotation)", n.Name, s.Name, s.Forwarding)
		}
		for _, be := range s.Backends {
			if be.Port != lab.PodHTTPPort {
				t.Errorf("%s: backend %s on port %d, want the target port %d", n.Name, be.Address, be.Port, lab.PodHTTPPort)
			}
		}
	}
	target := netip.AddrPortFrom(vip, 80)
	seen := labrun.Tally{}
	peers := map[netip.Addr]int{}
	for i := range 80 {
		a, _, err := ask(ctx, p, target)
		if err != nil {
			t.Fatalf("request %d to %s: %v", i, target, err)
		}
		seen[a.Backend]++
		peers[a.Peer.Addr()]++
	}
	t.Logf("80 new connections to %s: %v; the pods saw them from %v", target, seen, peers)
	if got := seen.Backends(); !slices.Equal(got, pods) {
		t.Errorf("answered by %v, want every pod %v", got, pods)
	}
	for a := range peers {
		if a != p.Nodes[0].Addr && a != p.Nodes[1].Addr {
			t.Errorf("a pod saw a connection from %s, want an xlb node's address", a)
		}
	}
}

// status reads node's agent status.
func status(t *testing.T, p lab.Plan, node lab.Host) *api.Status {
	t.Helper()
	st, err := api.GetStatus(labrun.Socket(p, node))
	if err != nil {
		t.Fatalf("%s: %v", node.Name, err)
	}
	return st
}

// natCountersOf is the NAT part of node's status.
func natCountersOf(t *testing.T, p lab.Plan, node lab.Host) api.NAT {
	t.Helper()
	st := status(t, p, node)
	if st.NAT == nil {
		t.Fatalf("%s: the status has no nat section although a NAT service runs", node.Name)
	}
	return *st.NAT
}

// natSession is one listed session.
type natSession = api.Session

// natSessionsOf lists the sessions of svc on node (at most 10000).
func natSessionsOf(t *testing.T, p lab.Plan, node lab.Host, svc labrun.Service) []natSession {
	t.Helper()
	ss, err := api.GetSessions(labrun.Socket(p, node), api.SessionQuery{VIP: svc.VIP, Port: svc.Port, Protocol: string(svc.Protocol), Max: api.MaxSessionSample})
	if err != nil {
		t.Fatalf("%s: sessions of %s: %v", node.Name, svc.Target(), err)
	}
	var out []natSession
	for _, s := range ss.Services {
		if s.More {
			t.Fatalf("%s: %s has more than %d sessions", node.Name, svc.Target(), api.MaxSessionSample)
		}
		out = append(out, s.Sessions...)
	}
	return out
}

// sessionsTo counts svc's sessions on node to backend address a.
func sessionsTo(t *testing.T, p lab.Plan, node lab.Host, svc labrun.Service, a netip.Addr) int {
	t.Helper()
	n := 0
	for _, s := range natSessionsOf(t, p, node, svc) {
		if s.Backend.Addr() == a {
			n++
		}
	}
	return n
}

// checkStatusShowsNoReply runs `xlb status` against node's agent and
// wants its text to count the sessions without a reply and say what to
// check.
func checkStatusShowsNoReply(t *testing.T, p lab.Plan, node lab.Host) {
	t.Helper()
	out, err := exec.Command(xlbBinary, "status", "--socket", labrun.Socket(p, node)).CombinedOutput()
	if err != nil {
		t.Fatalf("xlb status: %v: %s", err, out)
	}
	n := natCountersOf(t, p, node).NoReply
	if want := fmt.Sprintf("(%d without a reply)", n); !strings.Contains(string(out), want) || !strings.Contains(string(out), "route") {
		t.Errorf("xlb status does not show %q and what to check:\n%s", want, out)
	}
}

// TestNATConnectionSurvival runs the connection-survival sequence
// (testbed/survival) with a nat service. Backends that leave keep their
// sessions (drain) and those that come back take only new connections:
// none of those changes breaks a connection. A node that leaves the
// ECMP route, comes back or joins moves connections to a node that has
// no session for them: those break, and the test wants some to (or the
// sequence moved nothing). docs/connection-survival.md has the figures.
func TestNATConnectionSurvival(t *testing.T) {
	needRoot(t)
	prefix := labPrefix + "ns"
	useLab(t, prefix)
	ctx, cancel := context.WithTimeout(interrupted, 5*time.Minute)
	defer cancel()
	p, err := lab.Up(ctx, survival.Spec(prefix, xlbBinary))
	if err != nil {
		t.Fatal(err)
	}
	logAgentsOnFailure(t, p)
	r, err := survival.Run(ctx, p, "", survival.Options{Logf: t.Logf, Forwarding: config.NAT})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d connections, %d broken, %d requests", r.Mode(), r.Conns, r.Broken, r.Requests)
	byNodes := 0
	for _, s := range r.Steps {
		t.Logf("  %-32s %d broken", s.What, s.Broken)
		if strings.HasPrefix(s.What, "node") {
			byNodes += s.Broken
		} else if s.Broken > 0 {
			t.Errorf("%s: %d connections broke; a backend change must break none with nat", s.What, s.Broken)
		}
	}
	for _, e := range r.Errors {
		t.Logf("  %s", e)
	}
	for _, e := range r.Impossible {
		t.Errorf("%s: TCP cannot do that, the measurement is wrong", e)
	}
	if byNodes == 0 {
		t.Errorf("no connection broke when nodes left, came back or joined: the sequence moved no connection between nodes, so it shows nothing")
	}
}
