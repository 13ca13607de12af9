package main

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/prometheus/tsdb"

	"github.com/xlbproject/xlb/bench/internal/pngplot"
	"github.com/xlbproject/xlb/deploy/monitoring"
	"github.com/xlbproject/xlb/internal/api"
)

// fakeAgent serves the agent's collector over a status whose counters
// grow by 100 packets a scrape.
func fakeAgent(t *testing.T) string {
	var n atomic.Uint64
	status := func() (*api.Status, error) {
		k := n.Add(1)
		return &api.Status{
			Version: "test", Node: api.Node{FlowHash: "fmix64", TableSize: 65537},
			Config: api.Config{Generation: 1, Result: api.ResultOK, Reloads: map[string]uint64{api.ResultOK: 0, api.ResultError: 0}},
			Services: []api.Service{{Name: "web", State: api.StateUp, Counters: api.Counters{Packets: 100 * k, Bytes: 6400 * k},
				Backends: []api.Backend{
					{Address: netip.MustParseAddr("10.0.3.2"), Port: 80, Health: api.Health{State: api.StateUp}, Counters: api.Counters{Packets: 60 * k}},
					{Address: netip.MustParseAddr("10.0.3.3"), Port: 80, Health: api.Health{State: api.StateDown}, Counters: api.Counters{Packets: 40 * k}},
				}}},
			Reasons:   map[string]uint64{"drop_no_route": 3 * k, "pass_not_vip": 10 * k},
			Conntrack: api.Conntrack{Flows: int(10 * k), Size: 1024},
			BGP: &api.BGP{Peers: []api.Peer{{Address: netip.MustParseAddr("10.0.1.1"), State: "established", BFD: &api.BFDSession{State: "up"}}},
				Routes: []api.Route{{Prefix: netip.MustParsePrefix("10.99.0.1/32"), Announced: true}}},
			Reconciles: map[string]api.Reconcile{"config": {Count: k, SumSeconds: 0.01 * float64(k),
				Buckets: []api.Bucket{{Le: 0.005, Count: 0}, {Le: 0.05, Count: k}}}},
		}, nil
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(api.Collector(status))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// TestCells scrapes a fake agent as a run would and evaluates every panel
// of the dashboard: the queries run in the PromQL engine without error
// and the panels show what the agent exported.
func TestCells(t *testing.T) {
	db, err := tsdb.Open(t.TempDir(), slog.New(slog.DiscardHandler), nil, tsdb.DefaultOptions(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := &scraper{db: db, failures: map[string]int{}}
	s.add(tcpTarget(agentJob, "node1", fakeAgent(t)))
	start := time.Now().Add(-time.Minute).Truncate(time.Second)
	for i := range 20 {
		s.scrapeAll(context.Background(), start.Add(time.Duration(i)*time.Second))
	}
	if s.scrapes != 20 || len(s.failures) > 0 {
		t.Fatalf("%d scrapes, failures %v", s.scrapes, s.failures)
	}
	d, err := monitoring.LoadDashboard()
	if err != nil {
		t.Fatal(err)
	}
	cs, err := cells(context.Background(), d, db, start, start.Add(19*time.Second), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	byTitle := map[string]pngplot.Cell{}
	for _, c := range cs {
		byTitle[strings.SplitN(c.Title, " (", 2)[0]] = c
	}
	if v := byTitle["Agents"].Value; v != "1" {
		t.Errorf("Agents: %q, want 1", v)
	}
	if v := byTitle["Backends down"].Value; v != "1" {
		t.Errorf("Backends down: %q, want 1", v)
	}
	// 100 packets a second.
	web := byTitle["Packets per service"]
	if len(web.Lines) != 1 || web.Lines[0].Name != "web" {
		t.Fatalf("Packets per service: %+v", web.Lines)
	}
	if y := web.Lines[0].Y[len(web.Lines[0].Y)-1]; y < 99 || y > 101 {
		t.Errorf("web: %g packets/s at the end, want 100", y)
	}
	if ls := byTitle["Flow table fill"].Lines; len(ls) != 1 {
		t.Errorf("Flow table fill: %+v", ls)
	}
	if c := byTitle["NAT session fill"]; c.Message == "" || len(c.Lines) > 0 {
		t.Errorf("NAT session fill drew something without NAT metrics: %+v", c)
	}
	if err := pngplot.Grid(filepath.Join(t.TempDir(), "d.png"), d.Title, cs, 16, 0.28, 48); err != nil {
		t.Fatal(err)
	}
}
