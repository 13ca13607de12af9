// Command dashimg draws xlb's Grafana dashboard (deploy/monitoring) as an
// image from a real run: it builds a lab of two xlb nodes (BGP and BFD to
// the lab's router) and three backends, a Kubernetes control plane with
// `xlb controller`, scrapes every agent's and the controller's /metrics
// once a second into a Prometheus TSDB while a scripted run sends traffic,
// stops a backend, breaks a node's configuration and fills an address
// pool, then evaluates each panel's queries with Prometheus's PromQL
// engine and draws the panels where the dashboard places them. Everything
// it built is taken down at the end, also on failure or interrupt.
//
//	sudo go run ./bench/dashimg            # writes docs/img/grafana-dashboard.png
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/prometheus/tsdb"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
	"github.com/xlbproject/xlb/bench/internal/pngplot"
	"github.com/xlbproject/xlb/deploy/monitoring"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
	"github.com/xlbproject/xlb/testbed/testenv"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "dashimg:", err)
		os.Exit(1)
	}
}

// event is one step of the run, at its offset from the first scrape.
type event struct {
	at   time.Duration
	what string
	do   func(context.Context) error
}

func run() (err error) {
	out := flag.String("out", "docs/img/grafana-dashboard.png", "image to write")
	length := flag.Duration("length", 32*time.Second, "how long to scrape (the events happen in the first 25 s)")
	xlbBin := flag.String("xlb", "", "xlb binary (default: build ./cmd/xlb)")
	withCluster := flag.Bool("controller", true, "run a Kubernetes control plane and `xlb controller` for the controller's panels")
	budget := flag.Duration("timeout", 5*time.Minute, "give up (and clean up) after this long")
	flag.Parse()
	if *length < 26*time.Second || *length > 5*time.Minute {
		return errors.New("-length must be 26s to 5m")
	}
	if !testenv.Privileged() {
		return errors.New("needs root: it builds network namespaces and loads BPF programs (sudo go run ./bench/dashimg)")
	}
	if _, err := os.Stat("deploy/monitoring/" + monitoring.DashboardFile); err != nil {
		return fmt.Errorf("run from the repository's root: %w", err)
	}
	d, err := monitoring.LoadDashboard()
	if err != nil {
		return err
	}

	ctx, stop := benchutil.Interruptible("dashimg")
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *budget)
	defer cancel()
	begin := time.Now()
	progress := func(msg string) { fmt.Printf("[%5.1fs] %s\n", time.Since(begin).Seconds(), msg) }

	if *xlbBin == "" {
		progress("building xlb")
		bin, remove, err := testenv.BuildXLB()
		if err != nil {
			return err
		}
		defer remove()
		*xlbBin = bin
	}

	dir, err := os.MkdirTemp("", "xlb-dashimg-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := tsdb.Open(dir, slog.New(slog.DiscardHandler), nil, tsdb.DefaultOptions(), nil)
	if err != nil {
		return err
	}
	defer db.Close()

	prefix := fmt.Sprintf("xlbdash%d", os.Getpid())
	progress("lab " + prefix + ": up (2 nodes, 3 backends, embedded router with BFD)")
	defer func() {
		progress("lab " + prefix + ": down")
		if derr := lab.Down(prefix); derr != nil {
			err = errors.Join(err, derr)
		}
	}()
	l, err := upAgentLab(ctx, prefix, *xlbBin)
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}

	s := &scraper{db: db, failures: map[string]int{}}
	var c *cluster
	if *withCluster {
		progress("kubernetes control plane and xlb controller: starting")
		if c, err = startCluster(ctx, *xlbBin, l.p.StateDir); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		defer func() {
			progress("kubernetes control plane and xlb controller: stopping")
			err = errors.Join(err, c.stop())
		}()
		s.add(tcpTarget(controllerJob, "controller", c.metricsAddr))
	}
	for _, n := range l.p.Nodes {
		s.add(unixTarget(agentJob, n.Name, labrun.Socket(l.p, n)))
	}

	scrapeCtx, stopScraping := context.WithCancel(ctx)
	defer stopScraping()
	start := time.Now()
	var scraping sync.WaitGroup
	scraping.Go(func() { s.run(scrapeCtx, time.Second) })
	progress("scraping every second; agents starting")
	if err := l.startAgents(ctx); err != nil {
		return err
	}
	progress("agents serve; traffic starts")
	trafficCtx, stopTraffic := context.WithCancel(ctx)
	defer stopTraffic()
	var traffic sync.WaitGroup
	l.traffic(trafficCtx, &traffic, progress)

	be2, node2 := l.p.Backends[1], l.p.Nodes[1]
	events := []event{
		{10 * time.Second, "stop the HTTP server of " + be2.Name, func(ctx context.Context) error { return labrun.SetHTTP(ctx, l.p, be2, lab.HTTPStop) }},
		{14 * time.Second, "break " + node2.Name + "'s configuration file", func(context.Context) error { return l.breakConfig(node2) }},
		{20 * time.Second, "start the HTTP server of " + be2.Name + " again", func(ctx context.Context) error { return labrun.SetHTTP(ctx, l.p, be2, lab.HTTPStart) }},
		{24 * time.Second, "fix " + node2.Name + "'s configuration file", func(context.Context) error { return l.fixConfig(node2) }},
	}
	if c != nil {
		for i := range poolSize + 2 {
			events = append(events, event{time.Duration(4+2*i) * time.Second, "create Service " + serviceName(i), func(ctx context.Context) error { return c.createService(ctx, i) }})
		}
		for i := range 2 {
			events = append(events, event{22 * time.Second, "delete Service " + serviceName(i), func(ctx context.Context) error { return c.deleteService(ctx, i) }})
		}
	}
	var timeline []string
	for _, at := range sortedEvents(events) {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(time.Until(start.Add(at.at))):
		}
		if err := at.do(ctx); err != nil {
			return fmt.Errorf("%s: %w", at.what, err)
		}
		timeline = append(timeline, fmt.Sprintf("%2.0fs %s", at.at.Seconds(), at.what))
		progress(at.what)
	}
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(time.Until(start.Add(*length))):
	}
	stopTraffic()
	traffic.Wait()
	stopScraping()
	scraping.Wait()
	end := time.Now()
	progress(fmt.Sprintf("%d scrapes; failed scrapes by target: %v", s.scrapes, s.failures))

	cs, err := cells(ctx, d, db, start, end, time.Second)
	if err != nil {
		return err
	}
	title := fmt.Sprintf("%s: a %.0f s lab run, scraped every second (bench/dashimg, %s)", d.Title, end.Sub(start).Seconds(), start.UTC().Format("2006-01-02"))
	if err := pngplot.Grid(*out, title, cs, 16, 0.28, 96); err != nil {
		return err
	}
	progress("wrote " + *out)
	fmt.Println("timeline:\n  " + strings.Join(timeline, "\n  "))
	return nil
}

// sortedEvents orders events by offset, keeping the order of equal ones.
func sortedEvents(events []event) []event {
	out := slices.Clone(events)
	slices.SortStableFunc(out, func(a, b event) int { return cmp.Compare(a.at, b.at) })
	return out
}
