package e2e

import (
	"context"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
)

// backendAddrs6 are the IPv6 addresses of the lab's backends.
func backendAddrs6(p lab.Plan) []netip.Addr {
	var out []netip.Addr
	for _, b := range p.Backends {
		out = append(out, b.Addr6)
	}
	return out
}

// TestNATForwardingIPv6 is TestNATForwarding over IPv6, in a dual-stack
// lab whose backends run nothing but nginx: an IPv6 client reaches a nat
// and a dnat service on IPv6 VIPs with IPv6 backends. Every backend
// answers; a nat backend sees the node's IPv6 address and a port of the
// nat range, a dnat backend the client's own address and port; the
// answers reach the client's socket connected to VIP:port. The node
// lists the sessions of open connections with the source the backend
// saw, and counts them.
func TestNATForwardingIPv6(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(interrupted, 3*time.Minute)
	defer cancel()
	p := natLab(t, ctx, "n6", 3, func(s *lab.Spec) { s.RepliesVia, s.IPv6 = "node1", true })
	node := p.Nodes[0]
	nat := labrun.Service{Name: "web-nat6", VIP: p.VIPs6[0], Port: 8000, Protocol: config.TCP, Forwarding: config.NAT,
		Backends: backendAddrs6(p), BackendPort: lab.HTTPPort}
	dnat := labrun.Service{Name: "web-dnat6", VIP: p.VIPs6[1], Port: lab.HTTPPort, Protocol: config.TCP, Forwarding: config.DNAT,
		Backends: backendAddrs6(p)}
	startNAT(t, ctx, p, []labrun.Service{nat, dnat}, natPorts)

	const requests = 60
	before := natCountersOf(t, p, node)
	askThroughNAT(t, ctx, p, []labrun.Service{nat, dnat}, node.Addr6, requests)
	after := natCountersOf(t, p, node)
	t.Logf("nat counters before %+v, after %+v", before, after)
	if d := after.Created - before.Created; d < 2*requests {
		t.Errorf("the node created %d sessions for %d connections", d, 2*requests)
	}
	if after.Address6 != node.Addr6 {
		t.Errorf("status: IPv6 full NAT from %v, want the node's %v", after.Address6, node.Addr6)
	}

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
		if s.Source != a.Peer || !s.Replied || s.State != "established" || s.Backend.Port() != lab.HTTPPort || !s.Backend.Addr().Is6() {
			t.Errorf("%s: session %+v; want source %s (what %s saw), replied, established, an IPv6 backend on port %d", svc.Name, s, a.Peer, a.Backend, lab.HTTPPort)
		}
		// The command line lists it too (all of them: the sample of 50
		// may leave it out among the closed connections' sessions).
		out, err := exec.Command(xlbBinary, "status", "--socket", labrun.Socket(p, node), "--sessions", svc.Target().String()+"/tcp", "--max", "10000").CombinedOutput()
		if err != nil || !strings.Contains(string(out), c.LocalAddr().String()) || !strings.Contains(string(out), a.Peer.String()) {
			t.Errorf("xlb status --sessions %s/tcp (%v) does not list the session of %s seen as %s:\n%s", svc.Target(), err, c.LocalAddr(), a.Peer, out)
		}
	}
}
