package main

import (
	"fmt"
	"strings"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
	"github.com/xlbproject/xlb/internal/k8s/source"
)

// Report is everything one run measured, as written to the JSON file.
type Report struct {
	Date    string            `json:"date"`
	Machine benchutil.Machine `json:"machine"`
	// Command is how k8sbench was run; Commands what it ran besides.
	Command  string   `json:"command"`
	Commands []string `json:"commands,omitempty"`
	// Seed replays the same services, endpoints and pauses.
	Seed      uint64    `json:"seed"`
	Setup     Setup     `json:"setup"`
	Start     Start     `json:"start"`
	Changes   Changes   `json:"changes"`
	Resources []Phase   `json:"resources"`
	Samples   []Sample  `json:"samples,omitempty"`
	Seconds   float64   `json:"duration_s"`
	Final     FinalView `json:"final"`
}

// Setup is the cluster the agent serves.
type Setup struct {
	Services  int `json:"services"`
	Endpoints int `json:"endpoints_per_service"`
	// TableSize is the agent's Maglev table size (its default unless
	// -table-size set one).
	TableSize   uint32  `json:"table_size"`
	APICalls    int     `json:"api_calls"`
	Concurrency int     `json:"concurrency"`
	Seconds     float64 `json:"seconds"`
}

// Start is the agent's start with every Service in the cluster already.
type Start struct {
	// SyncedMs: exec → the source's caches hold the cluster and the first
	// configuration is built (the agent's log).
	SyncedMs float64 `json:"synced_ms"`
	// BuildMs: the build of that first configuration (the agent's log).
	BuildMs float64 `json:"first_build_ms"`
	// FirstTableMs, AllTablesMs: exec → the first and the last service's
	// table in the data plane, read from outside every PollMs.
	FirstTableMs float64 `json:"first_table_ms"`
	AllTablesMs  float64 `json:"all_tables_ms"`
	PollMs       float64 `json:"poll_ms"`
	// AppliedMs: exec → the agent logs the first configuration applied.
	AppliedMs float64 `json:"applied_ms"`
}

// Changes is the series of EndpointSlice changes.
type Changes struct {
	TargetP99Ms float64 `json:"target_p99_ms"`
	PollMs      float64 `json:"poll_ms"`
	PauseMinMs  float64 `json:"pause_min_ms"`
	PauseMaxMs  float64 `json:"pause_max_ms"`
	// QuietMs and MaxDelayMs are the source's debouncing (constants of
	// internal/k8s/source at the time of the run).
	QuietMs    float64 `json:"source_quiet_ms"`
	MaxDelayMs float64 `json:"source_max_delay_ms"`
	// Update: API call's return → table swapped; Call: the API call.
	Update benchutil.Summary `json:"update"`
	Call   benchutil.Summary `json:"call"`
	// The parts of Update, from the agent's log (changes with exactly
	// one configuration from the cluster only, Matched of them): Watch,
	// the call's return → the source sees the change (negative when the
	// watch event comes before the call's answer); Source, → the agent
	// takes the new configuration (debounce and build); Build, the build
	// alone; Agent, → the table swapped, seen from outside (the agent's
	// apply up to that table, and the poll).
	Watch   benchutil.Summary `json:"watch"`
	Source  benchutil.Summary `json:"source"`
	Build   benchutil.Summary `json:"build"`
	Agent   benchutil.Summary `json:"agent"`
	Apply   benchutil.Summary `json:"apply"`
	Matched int               `json:"matched"`
	// ApplyMeanMs is the mean of the agent's config reconciles over the
	// series (its status: reconciles, before and after).
	ApplyMeanMs float64  `json:"apply_mean_ms"`
	Reconciles  uint64   `json:"reconciles"`
	Events      []Change `json:"events"`
}

// Change is one EndpointSlice change.
type Change struct {
	Service  int     `json:"service"`
	Endpoint int     `json:"endpoint"`
	Ready    bool    `json:"ready"`
	CallMs   float64 `json:"call_ms"`
	UpdateMs float64 `json:"update_ms"`
	// Others counts table changes of the service seen before the one
	// that has the change (none expected).
	Others int `json:"others,omitempty"`
	// From the agent's log; Matched false when the change did not give
	// exactly one new configuration.
	Matched  bool    `json:"matched"`
	Events   int     `json:"events,omitempty"` // changes the source's burst counted
	WatchMs  float64 `json:"watch_ms,omitempty"`
	SourceMs float64 `json:"source_ms,omitempty"`
	BuildMs  float64 `json:"build_ms,omitempty"`
	AgentMs  float64 `json:"agent_ms,omitempty"`
	ApplyMs  float64 `json:"apply_ms,omitempty"` // took the configuration → logged it applied
	PauseMs  float64 `json:"pause_ms"`
}

// Phase is the agent's resource use over one part of the run.
type Phase struct {
	Name       string  `json:"name"`
	FromS      float64 `json:"from_s"` // seconds after the agent's exec
	Seconds    float64 `json:"seconds"`
	CPUSeconds float64 `json:"cpu_s"` // utime + stime
	Cores      float64 `json:"cores"` // CPU seconds per second
	RSSMiB     float64 `json:"rss_end_mib"`
	RSSMaxMiB  float64 `json:"rss_max_mib"`
	HWMMiB     float64 `json:"hwm_mib"` // VmHWM at the end: the peak since the start
	// PerChangeMs is CPU ms per change (the changes phase only), and
	// NetPerChangeMs the same less the idle rate.
	PerChangeMs    float64 `json:"cpu_per_change_ms,omitempty"`
	NetPerChangeMs float64 `json:"net_cpu_per_change_ms,omitempty"`
}

// Sample is the agent's memory and CPU time at T seconds after its exec.
type Sample struct {
	T      float64 `json:"t_s"`
	RSSMiB float64 `json:"rss_mib"`
	CPUS   float64 `json:"cpu_s"`
}

// FinalView is what the agent's status said at the end.
type FinalView struct {
	Services  int `json:"services"`
	Installed int `json:"installed"`
	Backends  int `json:"backends"`
}

// Phase names.
const (
	phaseStart   = "start"
	phaseIdle    = "idle"
	phaseChanges = "changes"
)

// The generated section of the benchmarks document.
const (
	docBegin = "<!-- k8sbench:begin -->"
	docEnd   = "<!-- k8sbench:end -->"
)

// verdict says whether p99 meets the target.
func verdict(c Changes) string {
	if c.Update.N > 0 && c.Update.P99 <= c.TargetP99Ms {
		return "meets"
	}
	return "misses"
}

// phase returns the named phase, and whether the report has it.
func (r *Report) phase(name string) (Phase, bool) {
	for _, p := range r.Resources {
		if p.Name == name {
			return p, true
		}
	}
	return Phase{}, false
}

// largestPart names the part of the update latency with the largest
// median, from the agent's log.
func largestPart(c Changes) (string, float64) {
	parts := []struct {
		name string
		v    float64
	}{
		{"the watch (API call → the agent's informer)", c.Watch.P50},
		{"the source (debounce and build)", c.Source.P50},
		{"the agent (apply up to the table swap)", c.Agent.P50},
	}
	best := parts[0]
	for _, p := range parts[1:] {
		if p.v > best.v {
			best = p
		}
	}
	return best.name, best.v
}

// markdown renders the report as the document's generated section. img
// is the plot's path relative to the document ("" for none); jsonName
// the raw data's path as the reader should see it.
func markdown(r *Report, jsonName, img string) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	ms := benchutil.FmtMs
	s, c := r.Setup, r.Changes
	p("%s\n\n## Kubernetes: EndpointSlice change → data plane, agent resources\n\n", docBegin)
	p("Generated by `make bench` (`bench/k8sbench`, as root) on %s: %s (%d CPUs, %.0f GiB), kernel %s, %s; the run took %.0f s, with load averages %s at its start and %s at its end (the machine is shared: other jobs ran beside it). ",
		r.Date, r.Machine.CPU, r.Machine.CPUs, r.Machine.MemMiB/1024, r.Machine.Kernel, r.Machine.Go, r.Seconds, r.Machine.LoadStart, r.Machine.LoadEnd)
	p("Every sample is in `%s` (`-seed %d` replays the same changes and pauses). Percentiles are nearest-rank: each is a measured sample, and with fewer than 100 samples p99 is the maximum.\n\n", jsonName, r.Seed)

	p("A real control plane (`testbed/k8stest`: etcd, kube-apiserver and kube-controller-manager) holds %d Services of type LoadBalancer with class `xlb.io/lb`, each with an address in `status.loadBalancer.ingress` (a status patch, as the xlb controller writes it) and one EndpointSlice of %d ready endpoints, %d in all. ", s.Services, s.Endpoints, s.Services*s.Endpoints)
	p("The Services have no selector and k8sbench writes their EndpointSlices itself (label `kubernetes.io/service-name`, its own `managed-by`): to the agent they are what the EndpointSlice controller writes for pods, without %d Pods to create. ", s.Services*s.Endpoints)
	p("Creating them took %.0f s (%d API calls, %d at a time). ", s.Seconds, s.APICalls, s.Concurrency)
	p("The real `xlb agent --config FILE` runs in a network namespace of its own (XDP in generic mode on a veth, Maglev table size %d), through xlb's `netns-exec`; its file's `kubernetes` section points at the API server through a relay into the namespace (`k8stest.Relay`). ", s.TableSize)
	p("Every data-plane time is read from outside the agent, in the maps it pins: the service index gives each Service's ID, and the entry of the outer map `maglev_tables` names the service's current table, a new inner map on every change.\n\n")

	p("### EndpointSlice change → data plane\n\n")
	p("%d changes, one at a time: each flips the `ready` condition of one endpoint of a random Service's EndpointSlice (a JSON patch of `/endpoints/N/conditions/ready`), to false (the backend leaves) or back to true. ", c.Update.N)
	p("T0 is the patch's return; T1 the first read of the service's table entry that names a new table, read every %s ms; the new table is then checked to hold exactly the expected backends. After each change a random pause of %s–%s ms.\n\n", ms(c.PollMs), ms(c.PauseMinMs), ms(c.PauseMaxMs))
	p("| ms | n | p50 | p90 | p99 | max |\n|---|---:|---:|---:|---:|---:|\n")
	p("| **patch returned → table swapped** | %s |\n", benchutil.SummaryRow(c.Update))
	p("| the patch itself (sent → returned) | %s |\n", benchutil.SummaryRow(c.Call))
	if c.Matched > 0 {
		p("| … returned → the agent's informer has it | %s |\n", benchutil.SummaryRow(c.Watch))
		p("| … → the source hands the agent a configuration | %s |\n", benchutil.SummaryRow(c.Source))
		p("| … of it, building the configuration | %s |\n", benchutil.SummaryRow(c.Build))
		p("| … → the table swapped, seen from outside | %s |\n", benchutil.SummaryRow(c.Agent))
		p("| the agent's whole apply (took the configuration → logged it applied) | %s |\n", benchutil.SummaryRow(c.Apply))
	}
	v := verdict(c)
	p("\nTarget: p99 ≤ %s ms. This run **%s** it: p99 is %s ms over %d changes (p50 %s ms). ", ms(c.TargetP99Ms), v, ms(c.Update.P99), c.Update.N, ms(c.Update.P50))
	p("The dissertation's agent polled the API every second, so its changes took up to a second, and more with keepalived's reload.\n\n")
	if c.Matched > 0 {
		name, val := largestPart(c)
		p("Where the time goes (%d of %d changes matched to exactly one new configuration in the agent's JSON log, whose `latency` is the time from the first change the source saw to the agent taking the configuration): the largest share at the median is %s, %s ms. ", c.Matched, c.Update.N, name, ms(val))
		p("The source waits until the cluster has been quiet for %s ms (never more than %s ms after a burst's first change) so that a rollout's many slice updates cost one reconcile; it then builds the configuration of all %d Services, and the agent compares every service with the data plane and rewrites the one table that changed", ms(c.QuietMs), ms(c.MaxDelayMs), s.Services)
		if c.Reconciles > 0 {
			p(" (the agent's status: %d config reconciles over the series, %s ms on average)", c.Reconciles, ms(c.ApplyMeanMs))
		}
		p(". The watch itself, from the patch's return through the API server and the relay to the agent's informer, takes %s ms at the median.\n\n", ms(c.Watch.P50))
	}

	p("### Start, and the agent's memory and CPU\n\n")
	st := r.Start
	p("The agent starts with all %d Services in the cluster. From its exec, its caches held the cluster and the first configuration was built after %s ms (the build itself %s ms); the first service's table was in the data plane after %s ms and all %d after **%s ms** (read every %s ms",
		s.Services, ms(st.SyncedMs), ms(st.BuildMs), ms(st.FirstTableMs), s.Services, ms(st.AllTablesMs), ms(st.PollMs))
	if st.AppliedMs > 0 {
		p("; the agent logged the configuration applied at %s ms", ms(st.AppliedMs))
	}
	p("). ")
	if s.Services > 0 && st.AllTablesMs > st.SyncedMs {
		p("After the sync the agent writes %d Maglev tables of %d slots into new inner maps, one after the other: %s ms per table on average.", s.Services, s.TableSize, ms((st.AllTablesMs-st.SyncedMs)/float64(s.Services)))
	}
	p("\n\n")
	p("The agent's process alone, from `/proc/PID/status` (VmRSS, and VmHWM, the peak since its start) and `/proc/PID/stat` (utime + stime, in %d ms ticks); cores are CPU seconds per wall second.\n\n", 1000/userHZ)
	p("| phase | seconds | CPU s | cores | RSS MiB at the end | RSS MiB max | VmHWM MiB |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, ph := range r.Resources {
		p("| %s | %.1f | %.2f | %.3f | %.1f | %.1f | %.1f |\n", phaseLabel(ph.Name, s), ph.Seconds, ph.CPUSeconds, ph.Cores, ph.RSSMiB, ph.RSSMaxMiB, ph.HWMMiB)
	}
	if ch, ok := r.phase(phaseChanges); ok && ch.PerChangeMs > 0 {
		p("\nDuring the changes the agent used %.1f ms of CPU per change (%.1f ms above its idle rate). ", ch.PerChangeMs, ch.NetPerChangeMs)
	} else {
		p("\n")
	}
	kernelMiB := float64(s.Services) * float64(s.TableSize) * 8 / (1 << 20)
	p("Not in these figures: the kernel memory of the BPF maps, about %.0f MiB for the %d tables (%d × %d slots × 8 bytes), and the API server's and etcd's own work.\n", kernelMiB, s.Services, s.Services, s.TableSize)
	if img != "" {
		p("\n![EndpointSlice change → data plane (CDF), and the agent's memory and CPU over the run](%s)\n", img)
	}
	p("\n%s", docEnd)
	return b.String()
}

func phaseLabel(name string, s Setup) string {
	switch name {
	case phaseStart:
		return fmt.Sprintf("start: exec → all %d tables in the data plane", s.Services)
	case phaseIdle:
		return fmt.Sprintf("idle, holding %d Services × %d endpoints", s.Services, s.Endpoints)
	case phaseChanges:
		return "the EndpointSlice changes"
	}
	return name
}

// sourceDebounce returns the source's debouncing constants in ms.
func sourceDebounce() (quiet, maxDelay float64) {
	return benchutil.Ms(source.DefaultQuiet), benchutil.Ms(source.DefaultMaxDelay)
}
