// Command bgpbench measures how fast the upstream router's kernel FIB
// follows xlb nodes over BGP, and what 1 → 4 nodes carry. It writes the
// results as JSON (with the machine, the kernel and every sample), as a
// plot and as a section of docs/benchmarks.md. `make bench` runs it, as
// root. In a lab (testbed/lab) of four xlb nodes behind a router (the
// embedded one, then FRR) it measures:
//
//   - convergence: random scale events, each starting a stopped node's
//     agent or stopping a running one with SIGTERM, timed from the exec
//     or the signal to the router's kernel route for the VIP gaining or
//     losing that node's next hop;
//   - failure detection: SIGKILL and SIGSTOP (a hang) of an agent, to its
//     next hop leaving the route, with BFD and without;
//   - throughput: wrk from the client through 1, 2, 3, 4 nodes, with the
//     CPU use of each part of the machine.
//
// It removes everything it creates, also after a failure or Ctrl-C, and
// what an earlier run that was killed left behind.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
	"github.com/xlbproject/xlb/testbed/netns"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// The routers bgpbench knows, in the order it runs them.
var allRouters = []string{lab.RouterEmbedded, lab.RouterFRR}

// minEvents is what the issue asks for: at least 100 scale events.
const minEvents = 100

// options are the measurement's settings.
type options struct {
	routers    []string
	events     map[string]int // scale events per router
	failures   int            // per kind and mode
	throughput time.Duration  // per wrk run; 0: none
	rounds     int            // of the throughput runs
	seed       uint64
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bgpbench:", err)
		os.Exit(1)
	}
}

func run() error {
	out := flag.String("out", "bench/results", "directory for the JSON results")
	svg := flag.String("svg", "docs/img/bench-bgp.svg", "plot to write (\"\" for none)")
	doc := flag.String("doc", "", "markdown file whose bgpbench section to rewrite (\"\" for none)")
	routers := flag.String("routers", strings.Join(allRouters, ","), "routers to measure, in turn: "+strings.Join(allRouters, ", "))
	events := flag.Int("events", minEvents, "random scale events with the embedded router")
	frrEvents := flag.Int("frr-events", 24, "random scale events with FRR")
	failures := flag.Int("failures", 8, "failures of each kind (SIGKILL, SIGSTOP) with and without BFD, per router")
	throughput := flag.Duration("throughput", 3*time.Second, "length of each throughput run, with the first router (0: none)")
	rounds := flag.Int("rounds", 2, "rounds of throughput runs (1 → 4 nodes, then 4 → 1, ...)")
	seed := flag.Uint64("seed", 0, "random seed of the scale events and pauses (0: from the clock)")
	quick := flag.Bool("quick", false, "a short smoke run: 12 scale events and 3 failures of each kind per router, one round of 2 s throughput runs")
	xlbBin := flag.String("xlb", "", "xlb binary for the lab (default: build ./cmd/xlb)")
	budget := flag.Duration("timeout", 10*time.Minute, "give up (and clean up) after this long")
	render := flag.String("render", "", "measure nothing: write the plot and the document section from this JSON result")
	flag.Parse()

	results := benchutil.Results[Report]{Name: "bgp", Views: func(r *Report) benchutil.Views { return views(r, *svg, *doc) }}
	if *render != "" {
		return results.Render(*render)
	}
	o := options{events: map[string]int{lab.RouterEmbedded: *events, lab.RouterFRR: *frrEvents},
		failures: *failures, throughput: *throughput, rounds: *rounds, seed: *seed}
	if *quick {
		o.events = map[string]int{lab.RouterEmbedded: 12, lab.RouterFRR: 12}
		o.failures, o.throughput, o.rounds = 3, 2*time.Second, 1
	}
	for _, r := range strings.Split(*routers, ",") {
		if r = strings.TrimSpace(r); r == "" {
			continue
		}
		if !slices.Contains(allRouters, r) {
			return fmt.Errorf("-routers: unknown router %q (want some of %s)", r, strings.Join(allRouters, ", "))
		}
		if !slices.Contains(o.routers, r) {
			o.routers = append(o.routers, r)
		}
	}
	if len(o.routers) == 0 {
		return errors.New("-routers: name at least one router")
	}
	if *events < 0 || *frrEvents < 0 || o.failures < 0 || o.rounds < 1 || o.throughput < 0 || (o.throughput > 0 && o.throughput < time.Second) {
		return errors.New("-events, -frr-events and -failures must be 0 or more, -rounds at least 1, -throughput 0 or at least 1s")
	}
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())
	}
	if !testenv.Privileged() {
		return errors.New("needs root: it builds network namespaces and loads BPF programs (run `make bench`, or sudo)")
	}

	ctx, stop := benchutil.Interruptible("bgpbench")
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *budget)
	defer cancel()

	start := time.Now()
	progress := func(msg string) { fmt.Printf("[%5.1fs] %s\n", time.Since(start).Seconds(), msg) }
	removeStale(progress)

	r := &Report{
		Date: start.UTC().Format(time.RFC3339), Machine: benchutil.ThisMachine(),
		Command:         strings.Join(append([]string{"go run ./bench/bgpbench"}, os.Args[1:]...), " "),
		TargetP99Ms:     targetP99Ms,
		TargetBFDMs:     targetBFDMs,
		DrainMs:         benchutil.Ms(labrun.DrainTime),
		FailuresPerKind: o.failures,
		Seed:            o.seed,
	}
	xlb, cmds, remove, err := benchutil.XLB(*xlbBin, func(f string, a ...any) { progress(fmt.Sprintf(f, a...)) })
	if err != nil {
		return err
	}
	defer remove()
	r.Commands = append(r.Commands, cmds...)
	rng := rand.New(rand.NewPCG(o.seed, o.seed>>1|1))
	for k, kind := range o.routers {
		withThroughput := k == 0 && o.throughput > 0
		res, tp, err := measureRouter(ctx, kind, xlb, o, withThroughput, rng, progress)
		if err != nil {
			return fmt.Errorf("%s router: %w", kind, err)
		}
		r.Routers = append(r.Routers, *res)
		if tp != nil {
			r.Throughput = tp
			r.Commands = append(r.Commands, tp.Command)
		}
	}
	r.Seconds = benchutil.Round3(time.Since(start).Seconds())
	r.Machine.LoadEnd = benchutil.LoadAvg()
	return results.Save(*out, start, r, progress)
}

// measureRouter builds a lab with the router of the given kind, runs the
// measurements in it and takes it down whatever happens.
func measureRouter(ctx context.Context, kind, xlb string, o options, withThroughput bool, rng *rand.Rand, progress func(string)) (res *RouterResult, tp *ThroughputResult, err error) {
	prefix := labPrefix(os.Getpid(), kind)
	progress(fmt.Sprintf("lab %s: up (%s router with BFD, %d nodes, 2 backends)", prefix, kind, labNodes))
	defer func() {
		progress("lab " + prefix + ": down")
		if derr := lab.Down(prefix); derr != nil {
			err = errors.Join(err, derr)
		}
	}()
	l, err := upLab(ctx, prefix, kind, xlb)
	if err != nil {
		return nil, nil, fmt.Errorf("lab: %w", err)
	}
	defer l.close()
	if err := l.configure(l.defaultMode()); err != nil {
		return nil, nil, err
	}
	// The first starts: every agent, one after the other.
	t := time.Now()
	if err := l.startAll(ctx, startTimeout); err != nil {
		return nil, nil, err
	}
	progress(fmt.Sprintf("%s: %d agents announce the VIP %s after %.1f s", kind, labNodes, l.vip, time.Since(t).Seconds()))

	res = &RouterResult{Router: kind}
	if n := o.events[kind]; n > 0 {
		if n < minEvents {
			progress(fmt.Sprintf("note: %d scale events with %s, below the %d the issue asks for", n, kind, minEvents))
		}
		if res.Scale, err = runScale(ctx, l, n, rng.Uint64(), progress); err != nil {
			return nil, nil, fmt.Errorf("scale events: %w", err)
		}
		progress(fmt.Sprintf("%s: start → route p50 %s ms, p99 %s ms; stop → route p50 %s ms, p99 %s ms", kind,
			benchutil.FmtMs(res.Scale.Start.P50), benchutil.FmtMs(res.Scale.Start.P99),
			benchutil.FmtMs(res.Scale.Stop.P50), benchutil.FmtMs(res.Scale.Stop.P99)))
	}
	if o.failures > 0 {
		if res.Failures, err = runFailures(ctx, l, o.failures, rng, progress); err != nil {
			return nil, nil, fmt.Errorf("failures: %w", err)
		}
	}
	if withThroughput {
		if tp, err = runThroughput(ctx, l, xlb, o.throughput, o.rounds, progress); err != nil {
			return nil, nil, fmt.Errorf("throughput: %w", err)
		}
		tp.Router = kind
	}
	return res, tp, nil
}

// views are the plots and the document section of r. The throughput
// plot goes next to svg, as <svg>-throughput.svg.
func views(r *Report, svg, doc string) benchutil.Views {
	tp := ""
	if svg != "" && r.Throughput != nil {
		tp = strings.TrimSuffix(svg, ".svg") + "-throughput.svg"
	}
	return benchutil.Views{
		Plots: []benchutil.Plot{
			{Path: svg, Draw: func() string { return plot(r) }},
			{Path: tp, Draw: func() string { return plotThroughput(r) }},
		},
		Doc: doc, Begin: docBegin, End: docEnd,
		Section: func(jsonName string, img []string) string { return markdown(r, jsonName, img[0], img[1]) },
	}
}

// stalePrefix starts the name of every lab a run creates, followed by
// the run's PID and the router: xlbbgp<PID>-embedded.
const stalePrefix = "xlbbgp"

func labPrefix(pid int, router string) string {
	return stalePrefix + strconv.Itoa(pid) + "-" + router
}

// removeStale takes down the labs of earlier runs that were killed
// before they could clean up.
func removeStale(progress func(string)) {
	for _, pid := range benchutil.StaleRuns(stalePrefix, lab.StateDir(""), lab.PinDir(""), netns.Dir) {
		progress("removing what run " + strconv.Itoa(pid) + " left behind")
		for _, kind := range allRouters {
			if err := lab.Down(labPrefix(pid, kind)); err != nil {
				progress("  " + err.Error())
			}
		}
	}
}
