// Command ctlbench measures xlb's control plane and writes the results as
// JSON (with the machine, the kernel and every sample), as a plot and as
// a section of docs/benchmarks.md. `make bench` runs it, as root:
//
//   - failover: in a lab, the time from a backend's failure to its removal
//     from the node's data plane, and from its return to its re-entry;
//   - reload: the time from a configuration write to the data plane
//     updated, with the agent polling the file and with SIGHUP;
//   - reconcile: Apply of 1000 services × 100 backends on a real data
//     plane, cold, unchanged, one backend changed, every service changed,
//     and an agent restarted on its pinned maps;
//   - prober: the health prober's CPU use for 1000 backends at 1 s.
//
// It removes everything it creates (lab, namespaces, processes, pins),
// also after a failure or Ctrl-C, and what an earlier run that was
// killed left behind.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// The parts of a run, in the order they run.
var allParts = []string{"failover", "reload", "reconcile", "prober"}

// minEvents is what the issue asks for per latency distribution.
const minEvents = 50

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ctlbench:", err)
		os.Exit(1)
	}
}

func run() error {
	out := flag.String("out", "bench/results", "directory for the JSON results")
	svg := flag.String("svg", "docs/img/bench-ctl.svg", "plot to write (\"\" for none)")
	doc := flag.String("doc", "", "markdown file whose ctlbench section to rewrite (\"\" for none)")
	partsFlag := flag.String("parts", strings.Join(allParts, ","), "parts to run, comma-separated: "+strings.Join(allParts, ", "))
	events := flag.Int("events", 60, "events per latency distribution (failover, and each reload trigger)")
	xlbBin := flag.String("xlb", "", "xlb binary for the lab (default: build ./cmd/xlb)")
	services := flag.Int("services", 1000, "services of the reconcile measurement")
	backends := flag.Int("backends", 100, "backends per service of the reconcile measurement")
	tableSize := flag.Uint("table-size", 65537, "Maglev table size of the reconcile measurement (prime)")
	runs := flag.Int("runs", 5, "runs of the reconcile cases that change little")
	fullRuns := flag.Int("full-runs", 2, "runs of the reconcile case that changes every service")
	daisyChain := flag.Bool("daisy-chain", false, "reconcile daisy-chained services (dsr-gue, flows: daisy-chain), which have a chain table each besides their Maglev table")
	budget := flag.Duration("timeout", 10*time.Minute, "give up (and clean up) after this long")
	render := flag.String("render", "", "measure nothing: write the plot and the document section from this JSON result")
	flag.Parse()

	results := benchutil.Results[Report]{Name: "ctl", Views: func(r *Report) benchutil.Views { return views(r, *svg, *doc) }}
	if *render != "" {
		return results.Render(*render)
	}

	parts := map[string]bool{}
	for _, p := range strings.Split(*partsFlag, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if !slices.Contains(allParts, p) {
			return fmt.Errorf("-parts: unknown part %q (want some of %s)", p, strings.Join(allParts, ", "))
		}
		parts[p] = true
	}
	if *events < 1 || *runs < 1 || *fullRuns < 1 || *services < 1 || *services > 1024 || *backends < 1 || *tableSize > 1<<20 {
		return errors.New("-events, -runs and -full-runs must be at least 1, -services 1 to 1024, -backends at least 1, -table-size a prime up to 1048573")
	}
	if *events < minEvents {
		fmt.Printf("note: -events %d is below the %d the report asks for\n", *events, minEvents)
	}
	if !testenv.Privileged() {
		return errors.New("needs root: it builds network namespaces and loads BPF programs (run `make bench`, or sudo)")
	}

	ctx, stop := benchutil.Interruptible("ctlbench")
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *budget)
	defer cancel()

	start := time.Now()
	progress := func(msg string) { fmt.Printf("[%5.1fs] %s\n", time.Since(start).Seconds(), msg) }
	removeStale(progress)
	prefix := fmt.Sprintf("%s%d", stalePrefix, os.Getpid())

	r := &Report{
		Date: start.UTC().Format(time.RFC3339), Machine: benchutil.ThisMachine(),
		Command: strings.Join(append([]string{"go run ./bench/ctlbench"}, os.Args[1:]...), " "), TargetExcessMs: 100,
	}
	if parts["failover"] || parts["reload"] {
		if *xlbBin == "" {
			r.Commands = append(r.Commands, "go build -o TMPDIR/xlb github.com/xlbproject/xlb/cmd/xlb")
		}
		if err := runLab(ctx, prefix, *xlbBin, *events, parts, r, progress); err != nil {
			return err
		}
	}
	if parts["reconcile"] {
		res, err := runReconcile(ctx, reconcileOpts{
			prefix: prefix, services: *services, backends: *backends, tableSize: uint32(*tableSize),
			// Above services × backends: replacing a backend takes a
			// new ID before the old one is freed.
			maxBackends: uint32(*services**backends) + 1024, runs: *runs, fullRuns: *fullRuns, daisyChain: *daisyChain,
		}, progress)
		if err != nil {
			return fmt.Errorf("reconcile: %w", err)
		}
		r.Reconcile = res
	}
	if parts["prober"] {
		progress("prober: " + "go " + strings.Join(quoteArgs(proberArgs), " ") + " (about 30 s)")
		res, err := runProber(ctx, "go", ".")
		if err != nil {
			return fmt.Errorf("prober: %w", err)
		}
		r.Prober, r.Commands = res, append(r.Commands, res.Command)
		progress(fmt.Sprintf("prober: tcp %.1f cpu-ms/s, http %.1f cpu-ms/s", res.Metrics["tcp"][cpuUnit], res.Metrics["http"][cpuUnit]))
	}
	r.Seconds = benchutil.Round3(time.Since(start).Seconds())
	r.Machine.LoadEnd = benchutil.LoadAvg()
	return results.Save(*out, start, r, progress)
}

// runLab runs the failover and reload parts in one lab, and takes the
// lab down whatever happens.
func runLab(ctx context.Context, prefix, xlb string, events int, parts map[string]bool, r *Report, progress func(string)) (err error) {
	if xlb == "" {
		progress("building xlb")
		bin, remove, err := testenv.BuildXLB()
		if err != nil {
			return err
		}
		defer remove()
		xlb = bin
	}
	progress("lab " + prefix + ": up (1 node, 3 backends), agent starting")
	defer func() {
		progress("lab " + prefix + ": down")
		if derr := lab.Down(prefix); derr != nil {
			err = errors.Join(err, derr)
		}
	}()
	l, err := upLab(ctx, prefix, xlb)
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	defer l.close()
	progress(fmt.Sprintf("lab %s: agent (PID %d) serves %s with backends %v, all healthy", prefix, l.agent, l.svc.Name, l.svc.Backends))
	if parts["failover"] {
		if r.Failover, err = runFailover(ctx, l, events, progress); err != nil {
			return fmt.Errorf("failover: %w", err)
		}
	}
	if parts["reload"] {
		if r.Reload, err = runReload(ctx, l, events, progress); err != nil {
			return fmt.Errorf("reload: %w", err)
		}
	}
	return nil
}

// views are the plot and the document section of r.
func views(r *Report, svg, doc string) benchutil.Views {
	if r.Failover == nil && r.Reload == nil {
		svg = "" // nothing to plot
	}
	return benchutil.Views{
		Plots: []benchutil.Plot{{Path: svg, Draw: func() string { return plot(r) }}},
		Doc:   doc, Begin: docBegin, End: docEnd,
		Section: func(jsonName string, img []string) string { return markdown(r, jsonName, img[0]) },
	}
}
