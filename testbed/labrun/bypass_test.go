package labrun

import (
	"strings"
	"testing"
)

// batch makes the counters' growth of a batch: the client sends sent
// packets and receives recv; each node's XDP program forwards fwd[i], and
// its interface receives rx[i] and sends tx[i].
func batch(sent, recv uint64, fwd, rx, tx []uint64) Snapshot {
	d := Snapshot{Clients: []HostSample{{Name: "client1", Link: LinkStats{TxPackets: sent, RxPackets: recv}}}}
	for i := range fwd {
		d.Nodes = append(d.Nodes, NodeSample{
			Name:      "node" + string(rune('1'+i)),
			Forwarded: fwd[i],
			Link:      LinkStats{RxPackets: rx[i], TxPackets: tx[i]},
		})
	}
	return d
}

func TestCheckBypass(t *testing.T) {
	for _, c := range []struct {
		name     string
		d        Snapshot
		requests int
		err      string // "" for direct server return
	}{
		// Measured in the lab: 300 requests, a couple of ARP packets.
		{"direct server return", batch(1535, 1479, []uint64{777, 757}, []uint64{777, 759}, []uint64{779, 757}), 300, ""},
		{"no noise at all", batch(1200, 800, []uint64{600, 600}, []uint64{600, 600}, []uint64{600, 600}), 200, ""},
		// Replies routed back through node1: its interface receives
		// them and sends them on.
		{"replies through a node", batch(1200, 800, []uint64{600, 600}, []uint64{1400, 600}, []uint64{1400, 600}), 200, "node1: its interface received 1400"},
		// A node that sends more than it forwarded: replies leaving
		// through it (as with NAT instead of DSR).
		{"replies sent by a node", batch(1200, 800, []uint64{600, 600}, []uint64{600, 600}, []uint64{600, 1000}), 200, "node2:"},
		{"no replies", batch(1200, 0, []uint64{600, 600}, []uint64{600, 600}, []uint64{600, 600}), 200, "replies are missing"},
		// Half of the client's packets did not pass any XDP program.
		{"packets around the nodes", batch(1200, 800, []uint64{300, 300}, []uint64{300, 300}, []uint64{300, 300}), 200, "forwarded 600 packets but the clients sent 1200"},
		{"more forwarded than sent", batch(1200, 800, []uint64{900, 900}, []uint64{900, 900}, []uint64{900, 900}), 200, "forwarded 1800"},
		{"too small to tell", batch(30, 20, []uint64{15, 15}, []uint64{15, 15}, []uint64{15, 15}), 5, "too few"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := CheckBypass(c.d, c.requests)
			if c.err == "" {
				if err != nil {
					t.Fatal(err)
				}
			} else if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("error %v, want one containing %q", err, c.err)
			}
			var fwd uint64
			for _, n := range c.d.Nodes {
				fwd += n.Forwarded
			}
			if b.Forwarded != fwd || b.ClientSent != c.d.Clients[0].Link.TxPackets || len(b.Nodes) != len(c.d.Nodes) {
				t.Errorf("evidence %+v does not add up the counters", b)
			}
		})
	}
}

func TestUnexplained(t *testing.T) {
	for _, c := range []struct {
		n    NodeBypass
		want uint64
	}{
		{NodeBypass{Forwarded: 100, Received: 103, Sent: 101}, 3},
		{NodeBypass{Forwarded: 100, Received: 100, Sent: 107}, 7},
		{NodeBypass{Forwarded: 100, Received: 90, Sent: 95}, 0}, // lost before the node: nothing unexplained
	} {
		if got := c.n.Unexplained(); got != c.want {
			t.Errorf("%+v: %d, want %d", c.n, got, c.want)
		}
	}
}

// Control traffic (BFD, BGP) on a node counts against no reply: within
// the allowance it is no evidence of replies through the node; replies
// beyond it still are.
func TestCheckBypassWithin(t *testing.T) {
	bfd := batch(1200, 800, []uint64{600, 600}, []uint64{640, 640}, []uint64{640, 640})
	if _, err := CheckBypass(bfd, 200); err == nil {
		t.Error("40 control packets per node without an allowance: no error")
	}
	if _, err := CheckBypassWithin(bfd, 200, 50); err != nil {
		t.Errorf("40 control packets per node, 50 allowed: %v", err)
	}
	through := batch(1200, 800, []uint64{600, 600}, []uint64{1440, 640}, []uint64{1440, 640})
	if _, err := CheckBypassWithin(through, 200, 50); err == nil || !strings.Contains(err.Error(), "node1:") {
		t.Errorf("replies through node1 beside control traffic: %v, want node1 named", err)
	}
}
