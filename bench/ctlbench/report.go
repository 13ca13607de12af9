package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Report is everything one run measured, as written to the JSON file.
type Report struct {
	Date    string  `json:"date"`
	Machine Machine `json:"machine"`
	// Command is how ctlbench was run; Commands what it ran besides.
	Command  string   `json:"command"`
	Commands []string `json:"commands,omitempty"`
	// TargetExcessMs is the target: p99 of failure → removal at
	// most this much beyond interval × fall.
	TargetExcessMs float64          `json:"target_p99_excess_ms"`
	Failover       *FailoverResult  `json:"failover,omitempty"`
	Reload         *ReloadResult    `json:"reload,omitempty"`
	Reconcile      *ReconcileResult `json:"reconcile,omitempty"`
	Prober         *ProberResult    `json:"prober,omitempty"`
	Seconds        float64          `json:"duration_s"`
}

// Machine is where the run happened.
type Machine struct {
	CPU    string  `json:"cpu"`
	CPUs   int     `json:"cpus"`
	MemMiB float64 `json:"mem_total_mib"`
	Kernel string  `json:"kernel"`
	Go     string  `json:"go"`
	// Load is /proc/loadavg's 1, 5 and 15 minute averages at the start
	// and at the end: the machine is shared, and other work skews the
	// latencies.
	LoadStart string `json:"loadavg_start"`
	LoadEnd   string `json:"loadavg_end,omitempty"`
}

func thisMachine() Machine {
	m := Machine{CPU: cpuModel(), CPUs: runtime.NumCPU(), Kernel: kernel(), Go: runtime.Version(), LoadStart: loadAvg()}
	if total, err := meminfo("MemTotal"); err == nil {
		m.MemMiB = mib(total)
	}
	return m
}

// loadAvg returns the three load averages of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func kernel() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// writeJSON writes r to dir/ctl-<stamp>.json and dir/ctl-latest.json and
// returns the first name.
func writeJSON(dir, stamp string, r *Report) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", err
	}
	name := filepath.Join(dir, "ctl-"+stamp+".json")
	for _, p := range []string{name, filepath.Join(dir, "ctl-latest.json")} {
		if err := os.WriteFile(p, append(data, '\n'), 0o644); err != nil {
			return "", err
		}
	}
	return name, nil
}

// The generated section of the benchmarks document.
const (
	docBegin = "<!-- ctlbench:begin -->"
	docEnd   = "<!-- ctlbench:end -->"
)

// replaceSection returns doc with the text from begin to end (both
// included) replaced by section, which must carry both markers itself.
// A document without either marker gets section appended. A document
// with only one, or with them out of order or repeated, is an error:
// rewriting it could destroy text someone wrote.
func replaceSection(doc, begin, end, section string) (string, error) {
	nb, ne := strings.Count(doc, begin), strings.Count(doc, end)
	if nb == 0 && ne == 0 {
		sep := "\n"
		if doc != "" && !strings.HasSuffix(doc, "\n") {
			sep = "\n\n"
		} else if doc == "" {
			sep = ""
		}
		return doc + sep + section, nil
	}
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if nb != 1 || ne != 1 || j < i {
		return "", fmt.Errorf("want one %q followed by one %q; found %d and %d%s", begin, end, nb, ne,
			map[bool]string{true: ", the end first"}[nb == 1 && ne == 1 && j < i])
	}
	return doc[:i] + section + doc[j+len(end):], nil
}

// rewriteDoc puts section into the document at path (see replaceSection).
func rewriteDoc(path, section string) error {
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	out, err := replaceSection(string(b), docBegin, docEnd, section)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, []byte(out), 0o644)
}

// fmtMs formats milliseconds: whole ones from 10 ms on, tenths below.
func fmtMs(v float64) string {
	if v < 10 && v > -10 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

// summaryRow formats a Summary as table cells: n | p50 | p90 | p99 | max.
func summaryRow(s Summary) string {
	return fmt.Sprintf("%d | %s | %s | %s | %s", s.N, fmtMs(s.P50), fmtMs(s.P90), fmtMs(s.P99), fmtMs(s.Max))
}

// markdown renders the report as the document's generated section. img
// is the plot's path relative to the document ("" for none); jsonName
// the raw data's path as the reader should see it.
func markdown(r *Report, jsonName, img string) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("%s\n\n## Control plane\n\n", docBegin)
	p("Generated by `make bench` (`bench/ctlbench`, as root) on %s: %s (%d CPUs, %.0f GiB), kernel %s, %s; the run took %.0f s, with load averages %s at its start and %s at its end (the machine is shared). ",
		r.Date, r.Machine.CPU, r.Machine.CPUs, r.Machine.MemMiB/1024, r.Machine.Kernel, r.Machine.Go, r.Seconds, r.Machine.LoadStart, r.Machine.LoadEnd)
	p("Every sample is in `%s`. Percentiles are nearest-rank: each is a measured sample, and with fewer than 100 samples p99 is the maximum.\n", jsonName)

	if f := r.Failover; f != nil {
		p("\n### Backend failure → out of the data plane\n\n")
		p("A lab (`internal/lab`) with one xlb node and %d backends running `xlb lab serve`; the agent serves one service with an HTTP check every %s ms, timeout %s ms, fall %d, rise %d (table size %d). ",
			f.Backends, fmtMs(f.Check.IntervalMs), fmtMs(f.Check.TimeoutMs), f.Check.Fall, f.Check.Rise, f.TableSize)
		p("Each event stops one backend's HTTP server through its control socket (T0; the next connection is refused) and takes T1 when the service's entry in the node's pinned outer map `maglev_tables` names a new table without that backend. ")
		p("The entry is read every %s ms from outside the agent (`dataplane.TableWatch`): every table change swaps in a new inner map, so its ID changes exactly when the data plane does. ", fmtMs(f.PollMs))
		p("Then the server starts again and its return is timed the same way. The victims take turns; the next event starts at a random phase of the probe schedule.\n\n")
		p("| ms | n | p50 | p90 | p99 | max |\n|---|---:|---:|---:|---:|---:|\n")
		p("| failure → removed (T1 − T0) | %s |\n", summaryRow(f.Removal))
		p("| … beyond interval × fall = %s ms | %s |\n", fmtMs(f.DetectMs), summaryRow(f.RemovalExcess))
		p("| back → in the table again | %s |\n", summaryRow(f.Return))
		p("| … beyond interval × rise = %s ms | %s |\n", fmtMs(f.RecoverMs), summaryRow(f.ReturnExcess))
		verdict := "meets"
		if f.RemovalExcess.P99 > r.TargetExcessMs {
			verdict = "misses"
		}
		p("\nTarget: p99 of failure → removal within %s ms beyond interval × fall. This run **%s** it: p99 is %s ms beyond. ",
			fmtMs(r.TargetExcessMs), verdict, fmtMs(f.RemovalExcess.P99))
		p("The first failing probe comes anywhere from 0 to one interval after the failure, so detection alone takes between (fall − 1) and fall intervals, plus the probe itself; the excess over interval × fall is therefore mostly negative, and what is left above it is the prober's scheduling, the agent's reaction and the table rewrite.\n")
	}

	if rl := r.Reload; rl != nil {
		p("\n### Configuration write → data plane\n\n")
		p("Same lab. Each event flips one backend's weight between 1 and 2 and replaces the agent's configuration file by renaming a complete new file over it (T0, taken just before the rename); T1 is when the service's table changes to one that gives that backend more (or fewer) slots, read as above. ")
		p("*File* writes the file alone and leaves it to the agent to notice; *SIGHUP* signals the agent right after the rename. The agent's log says what triggered each reload: ")
		p("`file written` is its inotify watch on the file's directory, `file changed` its stat poll (mtime, size, inode) every %s ms, `SIGHUP` the signal (`internal/agent`, `Agent.Run`).\n\n", fmtMs(rl.FilePollMs))
		p("| ms | n | p50 | p90 | p99 | max | agent's reloads by trigger |\n|---|---:|---:|---:|---:|---:|---|\n")
		for _, m := range rl.Modes {
			p("| %s | %s | %s |\n", modeLabel(m.Mode), summaryRow(m.Update), triggerList(m.Triggers))
		}
		for _, m := range rl.Modes {
			if m.Mode == modeFile && m.Triggers[triggerPoll] > m.Update.N/2 {
				p("\nThe file writes were picked up by the stat poll, so each waited for the next poll: up to %s ms, uniform over the poll period; its p99 is the poll's, not the work's. ", fmtMs(rl.FilePollMs))
			}
		}
		p("\nSIGHUP shows what the reload itself costs: read and parse the file, build the Maglev table, write a new inner map and swap it in.")
		for _, m := range rl.Modes {
			if m.Mode == modeSIGHUP && m.Triggers[triggerWatch] > 0 {
				p(" With the inotify watch in place a write followed by SIGHUP reloads twice, once for each; whichever comes first updates the table, and the second finds nothing to change.")
			}
		}
		p("\n")
	}

	if rc := r.Reconcile; rc != nil {
		p("\n### Reconcile: %d services × %d backends\n\n", rc.Services, rc.Backends)
		p("In-process: `agent.NewReconciler` on a real data plane (`dataplane.Open`, attached to a veth in a namespace of its own) with `maxBackends: %d`, table size %d; services on %s. ", rc.MaxBackends, rc.TableSize, rc.Layout)
		if rc.TableSizeNote != "" {
			p("**Not the default table size:** %s. ", rc.TableSizeNote)
		}
		p("The configuration (%.1f MiB of YAML) parses in %s ms. Wall and CPU time (user + system of the process) of `Apply`; the tables swapped are counted from outside through the pinned maps.\n\n", rc.ConfigMiB, fmtMs(rc.ParseMs))
		p("| Apply | runs | wall ms (median) | wall ms (max) | CPU ms (median) | tables swapped | wall ms per table |\n|---|---:|---:|---:|---:|---:|---:|\n")
		for _, c := range rc.Cases {
			cpu := summarize(c.CPUMs)
			tables, per := slices.Max(c.TablesChanged), "–"
			if tables >= 10 { // below, the fixed cost of the pass over every service dominates
				per = fmtMs(c.Wall.P50 / float64(tables))
			}
			p("| %s: %s | %d | %s | %s | %s | %d | %s |\n", c.Name, c.What, c.Wall.N, fmtMs(c.Wall.P50), fmtMs(c.Wall.Max), fmtMs(cpu.P50), tables, per)
		}
		if sw := rc.Swap; sw.Runs > 0 {
			p("\nOne table swap, timed alone %d times on a scratch outer map of the same shape: filling a new %d-slot inner map with one `BatchUpdate` takes %s ms (median; p90 %s), and putting it into the outer map %s ms (p90 %s), most of which is the kernel waiting for an RCU grace period: a map-in-map update returns only once no program can still hold the old table. ",
				sw.Runs, rc.TableSize, fmtMs(sw.Fill.P50), fmtMs(sw.Fill.P90), fmtMs(sw.Put.P50), fmtMs(sw.Put.P90))
			p("The data plane swaps tables one after the other, so an Apply that rewrites every table costs at least services × (fill + put).\n")
		}
		p("\nMemory: the %d tables take %.0f MiB of kernel memory (%d × %d slots × 8 bytes); MemAvailable, a machine-wide figure that other work moves too, fell by %.0f MiB over the cold Apply (of %.0f MiB available before). The reconciler's Go heap afterwards: %.0f MiB.\n",
			rc.Services, rc.TablesMiB, rc.Services, rc.TableSize, rc.KernelMiB, rc.AvailableMiB, rc.GoHeapMiB)
	}

	if pr := r.Prober; pr != nil {
		p("\n### Health prober CPU: 1000 backends every second\n\n")
		p("`%s` (`BenchmarkProber1000`): the prober alone, against listeners in another process, over 10 one-second iterations. cpu-ms/s is CPU milliseconds per wall second (1000 = one core).\n\n", pr.Command)
		p("| check | cpu-ms/s | of it system | probes/s | failures |\n|---|---:|---:|---:|---:|\n")
		for _, typ := range []string{"tcp", "http"} {
			m := pr.Metrics[typ]
			p("| %s | %.1f | %.1f | %.0f | %.0f |\n", typ, m[cpuUnit], m["sys-ms/s"], m["probes/s"], m["failures"])
		}
	}
	if img != "" {
		p("\n![CDFs of the control-plane latencies](%s)\n", img)
	}
	p("\n%s", docEnd)
	return b.String()
}

// triggerPoll is the agent's log trigger of a reload found by its stat
// poll.
const triggerPoll = "file changed"

// triggerWatch is the agent's log trigger of a reload found by its
// inotify watch.
const triggerWatch = "file written"

func modeLabel(mode string) string {
	switch mode {
	case modeFile:
		return "file write"
	case modeSIGHUP:
		return "file write + SIGHUP"
	}
	return mode
}

func triggerList(t map[string]int) string {
	if len(t) == 0 {
		return "none logged"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(t)) {
		parts = append(parts, fmt.Sprintf("%s: %d", k, t[k]))
	}
	return strings.Join(parts, ", ")
}

// plot draws the latency CDFs of the report.
func plot(r *Report) string {
	var panels []panel
	if f := r.Failover; f != nil {
		var removal, ret []float64
		for _, e := range f.Events {
			removal, ret = append(removal, e.RemovalMs), append(ret, e.ReturnMs)
		}
		panels = append(panels, panel{
			title: "backend failure / return → table",
			series: []series{
				{label: "failure → removed", color: "#3a7bd5", samples: removal},
				{label: "start → back", color: "#e08a1e", samples: ret},
			},
			markers: []marker{
				{label: "interval × fall", color: "#888", at: f.DetectMs},
				{label: fmt.Sprintf("+ %s ms target", fmtMs(r.TargetExcessMs)), color: "#c0392b", at: f.DetectMs + r.TargetExcessMs},
			},
		})
	}
	if rl := r.Reload; rl != nil {
		pn := panel{title: "config write → table", log: true}
		colors := map[string]string{modeFile: "#2e9e5b", modeSIGHUP: "#8e44ad"}
		for _, m := range rl.Modes {
			pn.series = append(pn.series, series{label: modeLabel(m.Mode), color: colors[m.Mode], samples: m.SamplesMs})
		}
		pn.markers = []marker{{label: "agent's stat poll", color: "#888", at: rl.FilePollMs}}
		panels = append(panels, pn)
	}
	sub := fmt.Sprintf("%s, kernel %s; table change seen through the pinned outer map", r.Machine.CPU, r.Machine.Kernel)
	if f := r.Failover; f != nil {
		sub = fmt.Sprintf("HTTP check every %s ms, fall %d, rise %d; %s", fmtMs(f.Check.IntervalMs), f.Check.Fall, f.Check.Rise, sub)
	}
	return plotSVG("xlb control plane: time until the data plane is updated (CDF)", sub, panels)
}
