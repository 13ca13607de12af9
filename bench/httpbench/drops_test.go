package main

import (
	"testing"
)

// TestLossStats: only the loss counters of `ethtool -S` are kept, named
// after their interface.
func TestLossStats(t *testing.T) {
	out := []byte(`NIC statistics:
     peer_ifindex: 6
     rx_queue_0_xdp_packets: 446797
     rx_queue_0_drops: 3
     rx_queue_0_xdp_tx_errors: 2
     tx_queue_0_xdp_xmit_errors: 0
`)
	got := lossStats("ns/eth0/", out)
	want := map[string]uint64{"ns/eth0/rx_queue_0_drops": 3, "ns/eth0/rx_queue_0_xdp_tx_errors": 2, "ns/eth0/tx_queue_0_xdp_xmit_errors": 0}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %d, want %d", k, got[k], v)
		}
	}
}

// TestDropDelta: the counters that grew, sorted, with their growth;
// those new in the second read count from zero.
func TestDropDelta(t *testing.T) {
	a := map[string]uint64{"r/n1/tx_dropped": 10, "r/n2/tx_dropped": 4}
	b := map[string]uint64{"r/n1/tx_dropped": 445, "r/n2/tx_dropped": 4, "n1/xlb/drop_ttl": 2}
	got := dropDelta(a, b)
	if s, want := dropText(got), "n1/xlb/drop_ttl +2, r/n1/tx_dropped +435"; s != want {
		t.Fatalf("got %q, want %q", s, want)
	}
	if n := lost(got); n != 435 {
		t.Errorf("lost %d, want 435 (the node's drop reasons are not losses)", n)
	}
	if d := dropDelta(a, a); d != nil {
		t.Errorf("no growth: got %v, want nil", d)
	}
}
