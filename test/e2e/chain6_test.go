package e2e

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/dataplane/decap"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
	"github.com/xlbproject/xlb/testbed/survival"
)

// TestDaisyChainIPv6Backends runs daisy chaining to IPv6 backends end to
// end, in a dual-stack lab: an IPv6 VIP and an IPv4 VIP, each
// daisy-chained to be1's IPv6 address (GUE over IPv6, the hint naming
// IPv6 owners), and persistent connections open to both. Then be2's IPv6
// address joins the services and takes about half of the table's slots:
// the moved connections' packets reach be2, which holds no socket for
// them and chains them over IPv6 back to be1. None may break, and be2
// counts what it chained. A third service on the other IPv6 VIP, without
// daisy chaining, takes the same change and loses its moved connections:
// the change did move them.
func TestDaisyChainIPv6Backends(t *testing.T) {
	ctx, p := startLab(t, "c6", lab.Spec{Clients: 1, Nodes: 1, Backends: 2, Router: lab.RouterStatic, IPv6: true}, 3*time.Minute)
	var err error
	be1, be2 := p.Backends[0], p.Backends[1]
	svc := func(name string, vip netip.Addr, flows config.Flows) labrun.Service {
		return labrun.Service{Name: name, VIP: vip, Port: lab.HTTPPort, Protocol: config.TCP, Forwarding: config.DSRGUE, Flows: flows,
			Backends: []netip.Addr{be1.Addr6}}
	}
	chained6, chained4, plain := svc("chain6", p.VIPs6[0], config.FlowsDaisyChain), svc("chain4", p.VIPs[0], config.FlowsDaisyChain), svc("plain6", p.VIPs6[1], "")
	svcs := []*labrun.Service{&chained6, &chained4, &plain}
	current := func() []labrun.Service {
		var out []labrun.Service
		for _, s := range svcs {
			out = append(out, *s)
		}
		return out
	}
	if err := labrun.WriteConfig(p, p.Nodes[0], current()); err != nil {
		t.Fatal(err)
	}
	if _, err := labrun.StartAgent(ctx, p, p.Nodes[0], current()); err != nil {
		t.Fatal(err)
	}

	const conns = 16
	loads := map[string]*survival.Load{}
	for _, s := range svcs {
		l := survival.NewLoad(ctx, p, s.Target(), 200*time.Millisecond)
		defer l.Stop()
		if err := l.Open(conns); err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		loads[s.Name] = l
	}
	time.Sleep(time.Second) // every connection has had an answer from be1

	now := time.Now()
	for _, s := range svcs {
		if s.Flows == config.FlowsDaisyChain {
			s.History = append(s.History, labrun.Generation{Until: now, Backends: s.Backends})
		}
		s.Backends = []netip.Addr{be1.Addr6, be2.Addr6}
	}
	if _, err := labrun.Reconfigure(ctx, p, current()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // some 15 requests on every connection

	for _, s := range svcs {
		r := loads[s.Name].Stop()
		t.Logf("%s (%s, flows %q): %d connections, %d broken, %d requests; %v", s.Name, s.VIP, s.Flows, r.Conns, r.Broken, r.Requests, r.Errors)
		if len(r.Impossible) > 0 {
			t.Errorf("%s: answers from two backends on one connection: %v", s.Name, r.Impossible)
		}
		if r.Requests < 2*conns {
			t.Errorf("%s: %d requests over %d connections: the load did not run", s.Name, r.Requests, conns)
		}
		switch {
		case s.Flows == config.FlowsDaisyChain && r.Broken > 0:
			t.Errorf("%s: %d of %d connections broke when be2 joined: the ones it took were not chained back to be1", s.Name, r.Broken, conns)
		case s.Flows != config.FlowsDaisyChain && r.Broken == 0:
			t.Errorf("%s: no connection broke without daisy chaining: be2 took none of the %d, so the test shows nothing", s.Name, conns)
		}
	}
	st, err := decap.ChainStats(be2.PinDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s chain counters: %v", be2.Name, st)
	if st["chained"].Packets == 0 {
		t.Errorf("%s chained no packet to %s", be2.Name, be1.Name)
	}
	for _, reason := range []string{"chain_drop_untrusted_source", "chain_drop_unknown_owner"} {
		if n := st[reason].Packets; n > 0 {
			t.Errorf("%s dropped %d packets as %s: the lab's IPv6 addresses are not in its sets", be2.Name, n, reason)
		}
	}

	// New connections spread over both backends.
	for _, s := range []labrun.Service{chained6, chained4} {
		tally, err := labrun.HTTPLoad(ctx, p.Clients[0].Namespace, s.Target(), 40, 4, nil)
		if err != nil {
			t.Fatalf("%s: new connections: %v", s.Name, err)
		}
		if tally[be1.Name] == 0 || tally[be2.Name] == 0 {
			t.Errorf("%s: 40 new connections answered by %v, want both backends", s.Name, tally)
		}
	}
}
