package e2e

import (
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/testbed/labrun"
)

// testClientIPAffinity gives the web service client-IP affinity, hot, and
// opens many connections from the lab's client: the router spreads them
// over both nodes by their source ports, and every one reaches the same
// backend. Without affinity the same load reaches every backend
// (HTTPSpreadsEvenly).
func (e *env) testClientIPAffinity(t *testing.T) {
	const n = 300
	ctx := testCtx(t)
	t.Cleanup(func() {
		if _, err := labrun.Reconfigure(interrupted, e.p, e.services); err != nil {
			t.Errorf("restore the configuration: %v", err)
		}
	})
	sticky := slices.Clone(e.services)
	sticky[0].Affinity = config.AffinityClientIP
	if _, err := labrun.Reconfigure(ctx, e.p, sticky); err != nil {
		t.Fatal(err)
	}
	e.quiet(t)
	before := e.snapshot(t)
	tally, err := labrun.HTTPLoad(ctx, e.client.Namespace, e.web().Target(), n, parallel, nil)
	if err != nil {
		t.Fatal(err)
	}
	fwd := e.forwarded(e.snapshot(t).Since(before))
	t.Logf("%d connections from %s with affinity client-ip: %v; nodes forwarded %v packets", n, e.client.Addr, tally, fwd)
	checkTally(t, tally, e.backendNames(e.web().Backends))
	if tally.Total() != n {
		t.Fatalf("%d answers, want %d", tally.Total(), n)
	}
	if len(tally) != 1 {
		t.Errorf("the client's connections reached %d backends (%v), want one", len(tally), tally)
	}
	// Each connection is 5 packets or more through its node; the router
	// hashes the ports, so each node carries about half of them.
	for i, f := range fwd {
		if f < n {
			t.Errorf("node%d forwarded %d packets of %d connections: the router did not spread the connections over both nodes, so the test shows nothing about the nodes agreeing", i+1, f, n)
		}
	}
}

// pingStats reads ping's summary: "5 packets transmitted, 5 received".
var pingStats = regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`)

// testPingVIP pings a VIP from the lab's client: the node the router
// picks answers every request from XDP (tx_ping_reply), the other node
// sees none, and the backends, where the VIP lives, never see them.
func (e *env) testPingVIP(t *testing.T) {
	const count = 5
	ctx := testCtx(t)
	if _, err := exec.LookPath("ping"); err != nil {
		t.Fatalf("no ping command (iputils-ping; scripts/deps.sh installs it): %v", err)
	}
	for _, vip := range e.p.VIPs {
		before := e.snapshot(t)
		// -w bounds the whole run; ping needs no bpffs, so ip netns
		// exec will do.
		out, err := exec.CommandContext(ctx, "ip", "netns", "exec", e.client.Namespace,
			"ping", "-n", "-c", strconv.Itoa(count), "-i", "0.2", "-w", "10", vip.String()).CombinedOutput()
		d := e.snapshot(t).Since(before)
		m := pingStats.FindSubmatch(out)
		if err != nil || m == nil || string(m[1]) != strconv.Itoa(count) || string(m[2]) != strconv.Itoa(count) {
			t.Fatalf("ping %s from %s: %v\n%s", vip, e.client.Name, err, out)
		}
		var replies []uint64
		for _, node := range d.Nodes {
			replies = append(replies, node.Reasons["tx_ping_reply"])
		}
		t.Logf("ping %s: %d of %d answered; replies by node %v", vip, count, count, replies)
		if !slices.Contains(replies, count) || slices.Max(replies) != count || sum(replies) != count {
			t.Errorf("ping %s: the nodes answered %v requests, want all %d from the one node the router picks", vip, replies, count)
		}
	}
}

func sum(v []uint64) uint64 {
	var s uint64
	for _, x := range v {
		s += x
	}
	return s
}
