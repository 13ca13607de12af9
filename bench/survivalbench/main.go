// Command survivalbench runs Beamer's connection-survival experiment
// (testbed/survival) for each flows mode, and for forwarding nat, in one
// lab, and writes the results as JSON (with the machine, the kernel and
// the command) and as a section of docs/connection-survival.md:
// connections broken per mode and per change, and packets the backends
// chained after each change. `make bench` runs
// it, as root. It removes the lab it creates, also after a failure or
// Ctrl-C, and what an earlier run that was killed left behind.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/survival"
	"github.com/xlbproject/xlb/testbed/testenv"
)

const (
	docBegin = "<!-- survivalbench:begin -->"
	docEnd   = "<!-- survivalbench:end -->"
	// stalePrefix starts the lab's name, followed by the run's PID.
	stalePrefix = "xlbsurv"
)

// Report is what a run writes.
type Report struct {
	Date     string              `json:"date"`
	Machine  benchutil.Machine   `json:"machine"`
	Command  string              `json:"command"`
	Commands []string            `json:"commands,omitempty"`
	Conns    int                 `json:"connections"`
	EveryMs  float64             `json:"requestEveryMs"`
	PauseMs  float64             `json:"pauseMs"`
	Results  []survival.Result   `json:"results"`
	Seconds  float64             `json:"seconds"`
	Beamer   map[string][]string `json:"beamerPublished"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "survivalbench:", err)
		os.Exit(1)
	}
}

func run() error {
	out := flag.String("out", "bench/results", "directory for the JSON results")
	doc := flag.String("doc", "docs/connection-survival.md", "document whose results section is rewritten (\"\": none)")
	xlbBin := flag.String("xlb", "", "xlb binary (default: build it)")
	conns := flag.Int("conns", survival.DefaultConns, "persistent connections per run")
	every := flag.Duration("every", survival.DefaultEvery, "time between two requests of a connection")
	pause := flag.Duration("pause", survival.DefaultPause, "time after each change")
	budget := flag.Duration("budget", 10*time.Minute, "the whole run's time limit")
	flag.Parse()
	if *conns < 3 || *every <= 0 || *pause <= 0 {
		return errors.New("-conns must be at least 3, -every and -pause above 0")
	}
	if !testenv.Privileged() {
		return errors.New("needs root: it builds network namespaces and loads BPF programs (run `make bench`, or sudo)")
	}
	run := benchutil.Begin("survivalbench", stalePrefix, *budget)
	defer run.End()
	ctx, start, progress := run.Ctx, run.Start, run.Progress
	r := &Report{
		Date: start.UTC().Format(time.RFC3339), Machine: benchutil.ThisMachine(),
		Command: strings.Join(append([]string{"go run ./bench/survivalbench"}, os.Args[1:]...), " "),
		Conns:   *conns, EveryMs: benchutil.Ms(*every), PauseMs: benchutil.Ms(*pause),
		Beamer: map[string][]string{
			"source":   {"Olteanu et al., Stateless Datacenter Load-balancing with Beamer, NSDI'18, §6"},
			"stateful": {"7-30% of connections broken"},
			"beamer":   {"no connection broken"},
		},
	}
	xlb, cmds, remove, err := benchutil.XLB(*xlbBin, progress)
	if err != nil {
		return err
	}
	defer remove()
	r.Commands = append(r.Commands, cmds...)
	if err := measure(ctx, xlb, r, survival.Options{Conns: *conns, Every: *every, Pause: *pause}, progress); err != nil {
		return err
	}
	r.Seconds = benchutil.Round3(time.Since(start).Seconds())
	r.Machine.LoadEnd = benchutil.LoadAvg()
	path, err := benchutil.WriteJSON(*out, "survival", start.UTC().Format(benchutil.StampLayout), r)
	if err != nil {
		return err
	}
	progress("wrote %s", path)
	if *doc != "" {
		if err := benchutil.RewriteDoc(*doc, docBegin, docEnd, markdown(r, path)); err != nil {
			return err
		}
		progress("rewrote the results section of %s", *doc)
	}
	fmt.Print(table(r))
	return nil
}

// measure brings the lab up, runs every mode and takes the lab down
// whatever happens.
func measure(ctx context.Context, xlb string, r *Report, opts survival.Options, progress func(string, ...any)) (err error) {
	prefix := stalePrefix + strconv.Itoa(os.Getpid())
	progress("lab %s: up (2 clients, 3 nodes, 4 backends, embedded router)", prefix)
	defer func() {
		progress("lab %s: down", prefix)
		if derr := lab.Down(prefix); derr != nil {
			err = errors.Join(err, derr)
		}
	}()
	p, err := lab.Up(ctx, survival.Spec(prefix, xlb))
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	opts.Logf = func(format string, args ...any) { progress(format, args...) }
	for _, m := range modes {
		o := opts
		o.Forwarding = m.forwarding
		res, err := survival.Run(ctx, p, m.flows, o)
		if err != nil {
			return fmt.Errorf("%s: %w", m.name(), err)
		}
		if len(res.Impossible) > 0 {
			return fmt.Errorf("%s: %s: the measurement is wrong", m.name(), res.Impossible[0])
		}
		progress("%s: %d of %d connections broken, %d requests, %d packets chained", res.Mode(), res.Broken, res.Conns, res.Requests, res.Chained)
		r.Results = append(r.Results, res)
	}
	return nil
}

// mode is one run: a flows mode with dsr-gue, or a NAT forwarding mode.
type mode struct {
	flows      config.Flows
	forwarding config.Forwarding
}

func (m mode) name() string {
	if m.forwarding != "" {
		return string(m.forwarding)
	}
	return m.flows.Name()
}

// modes are the runs: each flows mode with dsr-gue, then forwarding nat,
// whose sessions live on the node that saw a connection's first packet.
var modes = []mode{
	{flows: config.FlowsDaisyChain}, {flows: config.FlowsStateless}, {flows: config.FlowsStateful},
	{forwarding: config.NAT},
}

func pct(part, whole int) string {
	if whole == 0 {
		return "—"
	}
	return strconv.FormatFloat(100*float64(part)/float64(whole), 'f', 1, 64) + "%"
}

// table is the results as Markdown tables: broken connections per mode,
// and packets chained after each change.
func table(r *Report) string {
	var b strings.Builder
	b.WriteString("| flows (forwarding) | connections | broken | requests | packets chained |\n|---|---|---|---|---|\n")
	for _, res := range r.Results {
		mode := res.Flows + " (" + res.Forwarding + ")"
		if config.Forwarding(res.Forwarding).Translates() {
			mode = "– (" + res.Forwarding + ")"
		}
		fmt.Fprintf(&b, "| %s | %d | %d (%s) | %d | %d |\n", mode, res.Conns, res.Broken, pct(res.Broken, res.Conns), res.Requests, res.Chained)
	}
	b.WriteString("\nConnections broken, by the change that was the latest when their failed request started:\n\n| change |")
	for _, res := range r.Results {
		fmt.Fprintf(&b, " %s |", res.Mode())
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(r.Results)) + "\n")
	if len(r.Results) > 0 {
		for i, s := range r.Results[0].Steps {
			fmt.Fprintf(&b, "| %s |", s.What)
			for _, res := range r.Results {
				if i < len(res.Steps) {
					fmt.Fprintf(&b, " %d |", res.Steps[i].Broken)
				} else {
					b.WriteString(" – |")
				}
			}
			b.WriteString("\n")
		}
	}
	for _, res := range r.Results {
		if res.Chained == 0 {
			continue
		}
		fmt.Fprintf(&b, "\nPackets the backends chained (%s), by the change that was the latest:\n\n| change | packets chained |\n|---|---|\n", res.Mode())
		for _, s := range res.Steps {
			fmt.Fprintf(&b, "| %s | %d |\n", s.What, s.Chained)
		}
	}
	return b.String()
}

func markdown(r *Report, jsonPath string) string {
	var b strings.Builder
	b.WriteString(docBegin + "\n")
	fmt.Fprintf(&b, "Measured by `make bench` (`%s`) on %s, %d CPUs, kernel %s, %s; %d connections, a request every %.0f ms each, %.0f ms after each change; raw results in `%s`.\n\n",
		r.Command, r.Machine.CPU, r.Machine.CPUs, r.Machine.Kernel, r.Date, r.Conns, r.EveryMs, r.PauseMs, jsonPath)
	b.WriteString(table(r))
	b.WriteString("\nBeamer's published numbers (NSDI'18, §6): stateful muxes broke 7–30% of the connections, Beamer none.\n")
	b.WriteString(docEnd)
	return b.String()
}
