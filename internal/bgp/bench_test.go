package bgp

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/xlbproject/xlb/testbed/testenv"
)

// BenchmarkPeerFlood measures what a peer that announces many prefixes
// costs the process that runs the speaker: its Go heap in use after a
// collection and its resident set, before the session and once every
// prefix arrived or the session was closed for its prefix limit.
// XLB_FLOOD_PREFIXES is how many (default 300000, 800 to an UPDATE),
// XLB_FLOOD_MAX the peer's maxPrefixes (default: the default). As root:
//
//	go test ./internal/bgp -run '^$' -bench PeerFlood -benchtime 1x
//
// docs/bgp.md has the figures.
func BenchmarkPeerFlood(b *testing.B) {
	requireRoot(b)
	n, limit := envInt(b, "XLB_FLOOD_PREFIXES", 300000), envInt(b, "XLB_FLOOD_MAX", 0)
	for range b.N {
		node, rtr := newNamespace(b, "node"), newNamespace(b, "rtr")
		nodeIP, floodIP := mustAddr("10.251.11.2"), mustAddr("10.251.11.1")
		connect(b, node, "eth0", []string{nodeIP.String()}, rtr, "eth0", []string{floodIP.String()})
		startFloodPeer(b, rtr, floodIP, 65000, n)
		sp := startSpeaker(b, node, helperOptions{ASN: 65001, NextHop: nodeIP, Quiet: true})
		before := sp.mem()
		start := time.Now()
		if err := sp.SetPeers([]Peer{{Address: floodIP, ASN: 65000, MaxPrefixes: uint32(limit)}}); err != nil {
			b.Fatal(err)
		}
		var closed bool
		testenv.Eventually(b, 10*time.Minute, "every prefix received, or the session closed", func() (bool, string) {
			p := sp.peer(floodIP)
			closed = p.PrefixLimit != nil
			return closed || p.Counters != nil && p.Counters.PrefixesReceived == n, fmt.Sprintf("%+v", p)
		})
		took := time.Since(start)
		after := sp.mem()
		learned, err := sp.learned()
		if err != nil {
			b.Fatal(err)
		}
		mb := func(v uint64) float64 { return float64(v) / (1 << 20) }
		b.ReportMetric(mb(before.HeapBytes), "MB-heap-before")
		b.ReportMetric(mb(after.HeapBytes), "MB-heap-after")
		b.ReportMetric(mb(before.RSSBytes), "MB-rss-before")
		b.ReportMetric(mb(after.RSSBytes), "MB-rss-after")
		b.ReportMetric(mb(after.PeakRSSBytes), "MB-rss-peak")
		b.ReportMetric(float64(learned), "routes-imported")
		what := "every prefix held"
		if closed {
			what = "the session closed for its prefix limit"
		}
		b.Logf("%d prefixes announced, maxPrefixes %d (0: the default): %s after %s", n, limit, what, took.Round(100*time.Millisecond))
	}
}

func envInt(b *testing.B, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		b.Fatalf("%s=%q: want a whole number", name, s)
	}
	return n
}
