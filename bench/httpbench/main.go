// Command httpbench measures HTTP requests per second and latency
// through xlb (dsr-ipip, dsr-gue, nat, dnat) and the alternatives: nftables DNAT,
// iptables DNAT, nginx as an L4 proxy, HAProxy in TCP mode, and the
// backends directly, each (but nat and dnat) over IPv4 and IPv6 (ipv6.go);
// with 1, 2, 4 and 8 backends, keep-alive and a new
// connection per request (the dissertation's Figure 4.6), and latency at
// fixed request rates from a constant-rate client (Figure 4.7). It
// writes the results as JSON (with the machine, the kernel, every
// command and configuration), as PNG plots beside the bandwidth model of
// bench/internal/bwmodel, and as a section of docs/benchmarks.md. `make bench`
// runs it, as root. It removes the lab it creates, also after a failure
// or Ctrl-C, and what an earlier run that was killed left behind.
package main

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// options are the measurement's settings.
type options struct {
	// egressQueue is the lab's lab.Spec.EgressQueue.
	egressQueue     int
	wrk             wrkSettings
	warmup          time.Duration
	rounds          int
	backends        []int
	modes           []string
	rates           []float64
	latencyBackends int
	latencyDuration time.Duration
	latencyWarmup   time.Duration
	// extraRounds is how many rounds a path without a quiet round may
	// run beyond rounds, extraRuns how many such runs the whole run may
	// make, latencyRetries how many disturbed constant-rate runs may run
	// again.
	extraRounds, extraRuns, latencyRetries int
	// only are the paths measured (keys); nil: every path.
	only []string
	// profile says whether the NAT targets' paths run once more under
	// perf after the rounds (profileRun).
	profile bool
	// perfKeep is where profileRun leaves each path's perf.data (as
	// PATH.perf.data); "": nowhere.
	perfKeep string
}

// measured are the lab's paths that o measures.
func (o options) measured(ps []Path) []Path {
	if o.only == nil {
		return ps
	}
	var out []Path
	for _, p := range ps {
		if slices.Contains(o.only, p.Key) {
			out = append(out, p)
		}
	}
	return out
}

// quietCores is the most CPU that other processes may use during a run
// for it to count as quiet: an eighth of the machine.
const quietCores = 0.25

func main() {
	if len(os.Args) > 1 && os.Args[1] == openloopCommand {
		if err := openloopMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "httpbench openloop:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "httpbench:", err)
		os.Exit(1)
	}
}

func run() error {
	out := flag.String("out", "bench/results", "directory for the JSON results")
	doc := flag.String("doc", "docs/benchmarks.md", "markdown file whose httpbench section to rewrite (\"\" for none)")
	img := flag.String("img", "docs/img", "directory for the PNG plots (\"\" for none)")
	quick := flag.Bool("quick", false, "a short development run: 1 and 4 backends, 1 round of 2 s (and one more for disturbed paths), latency at 2 rates")
	duration := flag.Duration("duration", 2*time.Second, "length of each wrk round (whole seconds)")
	rounds := flag.Int("rounds", 3, "rounds per path, mode and backend count; the best quiet one is reported, and the NAT targets also by the median of paired rounds")
	backends := flag.String("backends", "1,2,4,8", "backend counts, each 1 to 8")
	rates := flag.String("rates", "1000,2000,3000,4000,6000", "request rates of the constant-rate client (\"\" for none)")
	latDuration := flag.Duration("latency-duration", 4*time.Second, "length of each constant-rate run")
	xlbBin := flag.String("xlb", "", "xlb binary for the lab (default: build ./cmd/xlb)")
	budget := flag.Duration("timeout", 55*time.Minute, "give up (and clean up) after this long")
	only := flag.String("paths", "", "measure only these paths, comma-separated keys (e.g. xlb-nat,nft,haproxy,nft-v6; ipv4 or ipv6: every path of that family; \"\": all); a development run, whose document section lacks the others")
	egressQueue := flag.Int("egress-queue", 1000, "packets of the transmit queue on both ends of every veth of the lab, as a NIC's (0: none, the veth default, which drops what a full XDP ring does not take)")
	profile := flag.Bool("profile", true, "after the rounds, run the NAT targets' paths (xlb nat, xlb dnat, the NAT floor, nftables DNAT) once more with a new connection per request while perf samples every CPU, and tell where a request's CPU went")
	perfKeep := flag.String("perf-keep", "", "with -profile, keep each profiled path's perf.data in this directory (as KEY.perf.data), for perf report")
	render := flag.String("render", "", "measure nothing: write the plots and the document section from this JSON result")
	flag.Parse()

	if *render != "" {
		return renderOnly(*render, *img, *doc)
	}
	o := options{
		egressQueue: *egressQueue,
		wrk:         wrkSettings{Threads: labBackends, Conns: 20 * labBackends, Duration: *duration, Timeout: 2 * time.Second},
		warmup:      time.Second, rounds: *rounds, modes: []string{modeKeepAlive, modeClose},
		latencyBackends: 4, latencyDuration: *latDuration, latencyWarmup: time.Second,
		extraRounds: 2, extraRuns: 28, latencyRetries: 8, profile: *profile, perfKeep: *perfKeep,
	}
	var err error
	if o.backends, err = parseInts(*backends); err != nil {
		return fmt.Errorf("-backends: %w", err)
	}
	if o.rates, err = parseRates(*rates); err != nil {
		return fmt.Errorf("-rates: %w", err)
	}
	if o.only, err = parsePaths(*only, paths()); err != nil {
		return fmt.Errorf("-paths: %w", err)
	}
	if *quick {
		o.backends, o.rounds, o.wrk.Duration = []int{1, 4}, 1, 2*time.Second
		o.rates, o.latencyDuration = []float64{1000, 4000}, 2*time.Second
		o.extraRounds, o.extraRuns, o.latencyRetries = 1, 7, 2
	}
	for _, n := range o.backends {
		if n < 1 || n > labBackends || labBackends%n != 0 {
			return fmt.Errorf("-backends: %d: want divisors of %d (wrk's threads are spread evenly over the backends)", n, labBackends)
		}
	}
	if o.rounds < 1 || o.wrk.Duration < time.Second || o.latencyDuration < time.Second {
		return errors.New("-rounds must be at least 1, -duration and -latency-duration at least 1s")
	}
	if !testenv.Privileged() {
		return errors.New("needs root: it builds network namespaces and loads BPF programs (run `make bench`, or sudo)")
	}
	for _, tool := range []string{"wrk", "nginx", "haproxy", "nft", "iptables-legacy-restore", "ip6tables-legacy-restore", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s: %w (install the Debian packages with `make deps`: wrk, nginx-light, libnginx-mod-stream, haproxy, nftables, iptables)", tool, err)
		}
	}
	if _, err := exec.LookPath("perf"); err != nil && o.profile {
		return fmt.Errorf("perf: %w (install linux-perf with `make deps`, or run with -profile=false)", err)
	}
	if _, err := os.Stat("/usr/lib/nginx/modules/ngx_stream_module.so"); err != nil {
		return fmt.Errorf("nginx's stream module: %w (install libnginx-mod-stream: `make deps`)", err)
	}

	run := benchutil.Begin("httpbench", stalePrefix, *budget)
	defer run.End()
	ctx, start, progress := run.Ctx, run.Start, run.Progress
	r := &Report{
		Date: start.UTC().Format(time.RFC3339), Machine: benchutil.ThisMachine(), Quick: *quick,
		Command:           strings.Join(append([]string{"go run ./bench/httpbench"}, os.Args[1:]...), " "),
		IRQTimeAccounting: kernelConfig("CONFIG_IRQ_TIME_ACCOUNTING"),
		Wrk:               o.wrk, Warmup: o.warmup, Rounds: o.rounds, QuietCores: quietCores, BackendCounts: o.backends, Modes: o.modes,
		LatencyRates: o.rates, LatencyBackends: o.latencyBackends, LatencyDuration: o.latencyDuration, LatencyWarmup: o.latencyWarmup,
		Paths: paths(), EgressQueue: o.egressQueue, DropsRecorded: true,
	}
	xlb, cmds, remove, err := benchutil.XLB(*xlbBin, progress)
	if err != nil {
		return err
	}
	defer remove()
	r.Setup = append(r.Setup, cmds...)
	if err := measure(ctx, xlb, r, o, progress); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("stopped (%v) before the end; the lab is removed, nothing written", context.Cause(ctx))
		}
		return err
	}
	r.Seconds = round3(time.Since(start).Seconds())
	r.Machine.LoadEnd = benchutil.LoadAvg()
	path, err := benchutil.WriteJSON(*out, "http", start.UTC().Format(benchutil.StampLayout), r)
	if err != nil {
		return err
	}
	progress("wrote %s", path)
	if err := writeViews(r, path, *img, *doc, progress); err != nil {
		return err
	}
	fmt.Print(summary(r))
	return nil
}

// measure brings the lab up, runs everything and takes the lab down
// whatever happens.
func measure(ctx context.Context, xlb string, r *Report, o options, progress func(string, ...any)) (err error) {
	prefix := stalePrefix + strconv.Itoa(os.Getpid())
	nodes := 0
	for _, p := range r.Paths {
		nodes = max(nodes, p.node+1)
	}
	progress("lab %s: up (1 client, static router, %d LB nodes, %d backends with nginx)", prefix, nodes, labBackends)
	defer func() {
		progress("lab %s: down", prefix)
		if derr := lab.Down(prefix); derr != nil {
			err = errors.Join(err, fmt.Errorf("%w (run `xlb lab down --prefix %s`)", derr, prefix))
		}
	}()
	l, err := upLab(ctx, prefix, xlb, o.egressQueue, progress)
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	defer func() { r.Setup = append(r.Setup, l.setup...) }()
	defer func() {
		if ferr := l.closeFloor(); ferr != nil {
			err = errors.Join(err, fmt.Errorf("NAT floor: %w", ferr))
		}
	}()
	r.Paths = l.paths
	if b, err := os.ReadFile(l.backendConf(0)); err == nil {
		r.BackendNginx = string(b)
	}
	if r.Response, err = l.measureSizes(); err != nil {
		return err
	}
	series, extraLeft := 0, o.extraRuns
	for _, n := range o.backends {
		cs, err := l.configure(ctx, n)
		if err != nil {
			return fmt.Errorf("%s: %w", backendsLabel(n), err)
		}
		r.Configs = append(r.Configs, cs)
		progress("%s: every path answers from every backend in use", backendsLabel(n))
		for _, mode := range o.modes {
			for _, p := range order(o.measured(l.paths), series) {
				run, err := l.wrkRun(ctx, o.wrk, p, mode, o.warmup, 0)
				r.Runs = append(r.Runs, run)
				if err != nil {
					return fmt.Errorf("warm-up: %w", err)
				}
			}
			// The rounds every path runs, then more rounds for the
			// paths that have no quiet one yet, while the budget for
			// them lasts.
			for round := 1; round <= o.rounds+o.extraRounds; round++ {
				series++
				var ps []Path
				for _, p := range order(o.measured(l.paths), series) {
					if round <= o.rounds || !r.hasQuiet(p.Key, mode, n) {
						ps = append(ps, p)
					}
				}
				if round > o.rounds && (len(ps) == 0 || extraLeft < len(ps)) {
					break
				}
				for _, p := range ps {
					if round > o.rounds {
						extraLeft--
					}
					run, err := l.wrkRun(ctx, o.wrk, p, mode, o.wrk.Duration, round)
					r.Runs = append(r.Runs, run)
					if err != nil {
						return err
					}
					nat := ""
					if run.NATAllocFailures > 0 {
						nat = fmt.Sprintf("; %d NAT allocation failures", run.NATAllocFailures)
					}
					if run.SYNRetrans+run.BackendPAWS+run.BackendListenDrops > 0 {
						nat += fmt.Sprintf("; SYN retransmits %d, backends' PAWS refusals %d, listen drops %d", run.SYNRetrans, run.BackendPAWS, run.BackendListenDrops)
					}
					progress("%s, %s, round %d: %-14s %7.0f req/s (p99 %s ms, %.0f%% idle, other processes %.2f cores%s%s)",
						backendsLabel(n), mode, round, p.Name, run.RPS, fmtMs(run.P99Ms), run.CPU.IdlePct, run.CPU.Other, topText(run.CPU.OtherTop), nat)
					if len(run.Drops) > 0 {
						progress("  lost: %s", dropText(run.Drops))
					}
				}
			}
		}
	}
	if o.profile {
		var ps []Path
		measured := o.measured(l.paths)
		for _, key := range profiledPaths {
			if i := slices.IndexFunc(measured, func(p Path) bool { return p.Key == key }); i >= 0 {
				ps = append(ps, measured[i])
			}
		}
		if len(ps) > 0 {
			progress("profile: %s for xlb's agent to reap the sessions of the rounds", profilePause)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(profilePause):
			}
		}
		for _, p := range ps {
			prof, run, err := l.profileRun(ctx, o.wrk, p, o.perfKeep)
			if err != nil {
				return fmt.Errorf("profile: %w", err)
			}
			r.Profiles = append(r.Profiles, prof)
			progress("profile, %s, %s: %-14s %7.0f req/s; µs per request: %s (other processes %.2f cores)",
				backendsLabel(l.n), modeClose, p.Name, run.RPS, profileText(prof), run.CPU.Other)
		}
	}
	if len(o.rates) == 0 {
		return nil
	}
	if l.n != o.latencyBackends {
		cs, err := l.configure(ctx, o.latencyBackends)
		if err != nil {
			return fmt.Errorf("%s: %w", backendsLabel(o.latencyBackends), err)
		}
		if !slices.ContainsFunc(r.Configs, func(c ConfigSet) bool { return c.Backends == cs.Backends }) {
			r.Configs = append(r.Configs, cs)
		}
	}
	var lp []Path
	for _, k := range latencyPaths {
		lp = append(lp, l.path(k))
	}
	lowest := slices.Min(o.rates)
	retriesLeft := o.latencyRetries
	for i, rate := range o.rates {
		for _, p := range order(lp, i) {
			opts := openloopOptions{Rate: rate, Warmup: o.latencyWarmup, Duration: o.latencyDuration, Timeout: 2 * time.Second, MaxInFlight: 4096}
			var kept *LatencyRun
			// A disturbed run is run once more, while the budget for
			// that lasts; the quieter of the two is reported.
			for try := 0; try < 2; try++ {
				run, err := l.latencyRun(ctx, p, opts)
				if err != nil {
					r.Latency = append(r.Latency, run)
					return err
				}
				progress("latency, %s, %.0f req/s: %-14s p50 %s ms, p99 %s ms, answered %.0f/s, %d failed (other processes %.2f cores)", backendsLabel(l.n), rate, p.Name,
					fmtMs(run.P50Ms), fmtMs(run.P99Ms), run.Achieved, run.ErrorCount(), run.CPU.Other)
				if kept == nil || run.CPU.Other < kept.CPU.Other {
					if kept != nil {
						kept.Discarded = true
						r.Latency = append(r.Latency, *kept)
					}
					kept = &run
				} else {
					run.Discarded = true
					r.Latency = append(r.Latency, run)
				}
				if r.quiet(kept.CPU) || retriesLeft == 0 {
					break
				}
				retriesLeft--
			}
			r.Latency = append(r.Latency, *kept)
			if err := checkLatency(kept.OpenloopResult, rate == lowest); err != nil {
				return fmt.Errorf("%s: %w", p.Name, err)
			}
		}
	}
	return nil
}

// topText is ": a 0.50, b 0.20" for the busiest other commands.
func topText(top []CommandCPU) string {
	var parts []string
	for _, c := range top {
		parts = append(parts, fmt.Sprintf("%s %.2f", c.Command, c.Cores))
	}
	if len(parts) == 0 {
		return ""
	}
	return ": " + strings.Join(parts, ", ")
}

// renderOnly writes the plots and the document from a saved result.
func renderOnly(path, img, doc string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	// Name the run's dated file rather than http-latest.json, which the
	// next run overwrites.
	if t, err := time.Parse(time.RFC3339, r.Date); err == nil {
		dated := strings.TrimSuffix(path, "http-latest.json") + "http-" + t.UTC().Format(benchutil.StampLayout) + ".json"
		if _, err := os.Stat(dated); err == nil {
			path = dated
		}
	}
	return writeViews(&r, path, img, doc, func(format string, args ...any) { fmt.Printf(format+"\n", args...) })
}

// summary is the tables printed at the end.
func summary(r *Report) string {
	var b strings.Builder
	for _, mode := range r.Modes {
		fmt.Fprintf(&b, "\nrequests/s, %s:\n%s", modeTitle(mode), r.rpsTable(mode))
	}
	fmt.Fprintf(&b, "\n%s\n%s", r.ratioTable(), r.targetSummary())
	fmt.Fprintf(&b, "\n%s\n%s", r.natRatioTable(), r.natTargetSummary())
	if len(r.Latency) > 0 {
		fmt.Fprintf(&b, "\n%s", r.latencyTable())
	}
	return b.String()
}

func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

func parseRates(s string) ([]float64, error) {
	var out []float64
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v <= 0 || v > 50000 {
			return nil, fmt.Errorf("%q: want a rate from 1 to 50000 requests/s", f)
		}
		out = append(out, v)
	}
	slices.Sort(out)
	return out, nil
}

// kernelConfig reads an option of the running kernel's configuration
// from /proc/config.gz or /boot/config-RELEASE: "y", "m", "n" (not set)
// or "" (unknown).
func kernelConfig(option string) string {
	if f, err := os.Open("/proc/config.gz"); err == nil {
		defer f.Close()
		if z, err := gzip.NewReader(f); err == nil {
			if b, err := io.ReadAll(io.LimitReader(z, 16<<20)); err == nil {
				return configValue(string(b), option)
			}
		}
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		if b, err := os.ReadFile("/boot/config-" + unix.ByteSliceToString(u.Release[:])); err == nil {
			return configValue(string(b), option)
		}
	}
	return ""
}

// configValue finds option in a kernel configuration: its value, or "n"
// if it is not set.
func configValue(cfg, option string) string {
	for line := range strings.Lines(cfg) {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, option+"="); ok {
			return v
		}
	}
	return "n"
}
