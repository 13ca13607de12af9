package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
	"github.com/xlbproject/xlb/internal/agent"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/lb"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/testbed/netns"
)

// ReconcileResult is the reconcile measurement: one Reconciler on a real,
// attached data plane, applying configurations of Services × Backends.
type ReconcileResult struct {
	Services int    `json:"services"`
	Layout   string `json:"layout"`
	Backends int    `json:"backends_per_service"`
	// Flows is the services' flows mode when not stateless: daisy-chain
	// services (dsr-gue) have a chain table besides their Maglev table.
	Flows       string `json:"flows,omitempty"`
	TableSize   uint32 `json:"table_size"`
	MaxBackends uint32 `json:"max_backends"`
	// TableSizeNote says why the table size is not the default, if so.
	TableSizeNote string `json:"table_size_note,omitempty"`
	// TablesMiB is what the services' Maglev tables take in the kernel
	// (services × table size × 8 bytes); AvailableMiB was free before.
	TablesMiB    float64 `json:"tables_mib"`
	AvailableMiB float64 `json:"mem_available_before_mib"`
	// KernelMiB is how much MemAvailable fell over the cold Apply: the
	// tables, backend maps and the rest of the kernel's side.
	KernelMiB float64 `json:"mem_available_drop_mib"`
	// GoHeapMiB is the process's Go heap after the cold Apply.
	GoHeapMiB float64 `json:"go_heap_mib"`
	ConfigMiB float64 `json:"config_mib"`
	ParseMs   float64 `json:"config_parse_ms"`
	Cases     []Case  `json:"cases"`
	// Swap is what one table swap costs in the kernel, measured on a
	// scratch map of the same shape: it explains the per-table cost.
	Swap SwapCost `json:"swap"`
}

// SwapCost breaks one table swap into its system calls.
type SwapCost struct {
	Runs int `json:"runs"`
	// Fill: a new inner map, written through a shared mapping of its
	// memory (lb.NewFilledTable). Put: the
	// update of the outer map's entry, which waits for an RCU grace period
	// (the kernel lets no program hold the old table once it returns).
	Fill benchutil.Summary `json:"fill"`
	Put  benchutil.Summary `json:"put"`
}

// Case is one kind of Apply, run Runs times.
type Case struct {
	Name string `json:"name"`
	What string `json:"what"`
	// WallMs and CPUMs (user + system of the whole process) per run.
	WallMs []float64 `json:"wall_ms"`
	CPUMs  []float64 `json:"cpu_ms"`
	// TablesChanged is how many services' tables the data plane swapped,
	// per run, seen from outside through the pinned maps.
	TablesChanged []int             `json:"tables_changed"`
	Wall          benchutil.Summary `json:"wall"`
}

// reconcileOpts say what to measure.
type reconcileOpts struct {
	prefix      string // names the namespace and the pin path
	services    int
	backends    int
	tableSize   uint32
	maxBackends uint32
	runs        int // of the unchanged and one-backend cases
	fullRuns    int // of the every-service case
	daisyChain  bool
}

// fallbackTableSize is the prime table size used when the default's
// tables would not fit comfortably into free memory.
const fallbackTableSize = 16381

// runReconcile measures Apply for a large configuration on a data plane
// loaded and attached to a veth in a namespace of its own.
func runReconcile(ctx context.Context, o reconcileOpts, progress func(string)) (res *ReconcileResult, err error) {
	res = &ReconcileResult{Services: o.services, Layout: serviceLayout, Backends: o.backends, TableSize: o.tableSize, MaxBackends: o.maxBackends}
	if o.daisyChain {
		res.Flows = string(config.FlowsDaisyChain)
	}
	avail, err := memAvailable()
	if err != nil {
		return nil, err
	}
	res.AvailableMiB = benchutil.MiB(avail)
	need := uint64(o.services) * uint64(o.tableSize) * 8
	if 3*need > avail && o.tableSize != fallbackTableSize {
		res.TableSizeNote = fmt.Sprintf("tables of %d slots would take %.0f MiB of %.0f MiB available; using %d", o.tableSize, benchutil.MiB(need), benchutil.MiB(avail), fallbackTableSize)
		progress("reconcile: " + res.TableSizeNote)
		o.tableSize, res.TableSize = fallbackTableSize, fallbackTableSize
		need = uint64(o.services) * uint64(o.tableSize) * 8
	}
	res.TablesMiB = benchutil.MiB(need)

	ns, pin := o.prefix+"-rec", filepath.Join(bpfobj.BPFFSRoot, o.prefix+"-rec")
	if err := makeNamespace(ctx, ns); err != nil {
		return nil, err
	}
	defer func() {
		if derr := removeNamespace(ns); derr != nil && err == nil {
			err = derr
		}
	}()
	var d *lb.Dataplane
	opts := lb.Options{
		Interface: "veth0", NodeAddr: netip.MustParseAddr("10.0.1.2"), PinPath: pin,
		AttachMode: string(config.AttachAuto), TableSize: o.tableSize, MaxBackends: o.maxBackends,
	}
	// open opens d on the pinned maps (adopting them after the first
	// time), in the namespace.
	open := func() error {
		err := netns.Do(ns, func() error {
			var err error
			d, err = lb.Open(opts)
			return err
		})
		if err != nil {
			return fmt.Errorf("open the data plane: %w", err)
		}
		return nil
	}
	if err := open(); err != nil {
		return nil, err
	}
	defer func() {
		// Handles first: Cleanup needs the pin path unused. d is nil
		// when a restart failed to open it again.
		var cerr error
		if d != nil {
			cerr = d.Close()
		}
		if cerr == nil {
			cerr = bpfobj.Cleanup(pin)
		}
		if cerr != nil && err == nil {
			err = fmt.Errorf("remove the data plane: %w", cerr)
		}
	}()
	watch, err := lb.WatchTables(pin)
	if err != nil {
		return nil, err
	}
	defer watch.Close()

	gen := newBigConfig(o.services, o.backends, o.tableSize, o.maxBackends, o.daisyChain)
	text := gen.yaml()
	res.ConfigMiB = benchutil.MiB(uint64(len(text)))
	t := time.Now()
	cfg, err := config.Parse("generated", text)
	if err != nil {
		return nil, fmt.Errorf("parse the generated configuration: %w", err)
	}
	res.ParseMs = benchutil.Ms(time.Since(t))
	gen.cur = cfg
	progress(fmt.Sprintf("reconcile: %d services × %d backends, table size %d (%.0f MiB of tables), config %.1f MiB parsed in %.0f ms",
		o.services, o.backends, o.tableSize, res.TablesMiB, res.ConfigMiB, res.ParseMs))

	rec, err := agent.NewReconciler(d, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, err
	}
	// measure times run as one run of case c and checks, through the
	// pinned maps, that it swapped exactly want tables.
	measure := func(c *Case, want int, run func() error) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		before, err := tableIDs(watch)
		if err != nil {
			return err
		}
		runtime.GC() // no collection of an earlier case's garbage in the measured run
		cpu0, t0 := cpuTime(), time.Now()
		err = run()
		wall, cpu := time.Since(t0), cpuTime()-cpu0
		if err != nil {
			return fmt.Errorf("%s: %w", c.Name, err)
		}
		after, err := tableIDs(watch)
		if err != nil {
			return err
		}
		changed := 0
		for id, t := range after {
			if before[id] != t {
				changed++
			}
		}
		if len(after) != o.services || changed != want {
			return fmt.Errorf("%s: %d services installed, %d tables swapped; want %d and %d", c.Name, len(after), changed, o.services, want)
		}
		c.WallMs, c.CPUMs = append(c.WallMs, benchutil.Ms(wall)), append(c.CPUMs, benchutil.Ms(cpu))
		c.TablesChanged = append(c.TablesChanged, changed)
		progress(fmt.Sprintf("reconcile: %s: %.0f ms (CPU %.0f ms), %d tables swapped", c.Name, benchutil.Ms(wall), benchutil.Ms(cpu), changed))
		return nil
	}
	// apply runs one measured Apply that must swap exactly want tables.
	apply := func(c *Case, cfg *config.Config, want int) error {
		return measure(c, want, func() error { return rec.Apply(cfg) })
	}

	cold := Case{Name: "cold", What: "first Apply: every service, backend and table new"}
	if err := apply(&cold, cfg, o.services); err != nil {
		return nil, err
	}
	if after, err := memAvailable(); err == nil && after < avail {
		res.KernelMiB = benchutil.MiB(avail - after)
	}
	var ms1 runtime.MemStats
	runtime.ReadMemStats(&ms1)
	res.GoHeapMiB = benchutil.MiB(ms1.HeapAlloc)

	same := Case{Name: "unchanged", What: "Apply of the same configuration again: nothing to do"}
	for range o.runs {
		if err := apply(&same, cfg, 0); err != nil {
			return nil, err
		}
	}
	one := Case{Name: "one-backend", What: "one backend of one service replaced by another address"}
	for i := range o.runs {
		if err := apply(&one, gen.replaceOne(i), 1); err != nil {
			return nil, err
		}
	}
	all := Case{Name: "all-weights", What: "every service: one backend's weight flipped between 1 and 2"}
	for i := range o.fullRuns {
		if err := apply(&all, gen.flipWeights(i), o.services); err != nil {
			return nil, err
		}
	}
	// A restarted agent: the data plane closed (its program keeps
	// forwarding on the pinned maps) and opened again, a new reconciler
	// adopting what is pinned, and the configuration it last ran applied:
	// nothing to swap. Timed from Open to Apply's return, which is how
	// long a restarted agent takes before a change can reach the data
	// plane.
	restart := Case{Name: "restart", What: "a new agent on the pinned maps (Open, adopt, Apply of the same configuration): nothing to swap"}
	for range o.runs {
		if err := d.Close(); err != nil {
			return nil, fmt.Errorf("restart: close: %w", err)
		}
		d = nil
		err := measure(&restart, 0, func() error {
			if err := open(); err != nil {
				return err
			}
			var err error
			if rec, err = agent.NewReconciler(d, slog.New(slog.DiscardHandler)); err != nil {
				return err
			}
			return rec.Apply(gen.cur)
		})
		if err != nil {
			return nil, err
		}
	}
	if res.Swap, err = measureSwap(o.tableSize, 20); err != nil {
		return nil, err
	}
	progress(fmt.Sprintf("reconcile: one table swap: fill %.1f ms, outer map update %.1f ms (medians of %d)", res.Swap.Fill.P50, res.Swap.Put.P50, res.Swap.Runs))
	for _, c := range []*Case{&cold, &same, &one, &all, &restart} {
		c.Wall = benchutil.Summarize(c.WallMs)
		res.Cases = append(res.Cases, *c)
	}
	return res, nil
}

// measureSwap times the two system calls of a table swap as
// lb.UpsertService makes them, runs times, on a scratch outer map
// of its own: filling a new inner map of size slots, and putting it into
// the outer map.
func measureSwap(size uint32, runs int) (SwapCost, error) {
	inner := &ebpf.MapSpec{Name: "ctlbench_tbl", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: size, Flags: unix.BPF_F_MMAPABLE}
	outer, err := ebpf.NewMap(&ebpf.MapSpec{Name: "ctlbench_out", Type: ebpf.ArrayOfMaps, KeySize: 4, ValueSize: 4, MaxEntries: 4, InnerMap: inner})
	if err != nil {
		return SwapCost{}, fmt.Errorf("scratch outer map: %w", err)
	}
	defer outer.Close()
	vals := make([]wire.TableEntry, size)
	for i := range vals {
		vals[i] = wire.NewTableEntry(uint32(i%100), wire.AddrFrom4(uint32(i)))
	}
	var fill, put []float64
	for i := range runs {
		t0 := time.Now()
		m, err := lb.NewFilledTable(vals)
		if err != nil {
			return SwapCost{}, fmt.Errorf("scratch table: %w", err)
		}
		t1 := time.Now()
		err = outer.Put(uint32(i%2), m)
		t2 := time.Now()
		m.Close()
		if err != nil {
			return SwapCost{}, fmt.Errorf("scratch swap: %w", err)
		}
		fill, put = append(fill, benchutil.Ms(t1.Sub(t0))), append(put, benchutil.Ms(t2.Sub(t1)))
	}
	return SwapCost{Runs: runs, Fill: benchutil.Summarize(fill), Put: benchutil.Summarize(put)}, nil
}

// tableIDs reads the table ID of every service that has one.
func tableIDs(w *lb.TableWatch) (map[uint32]ebpf.MapID, error) {
	out := map[uint32]ebpf.MapID{}
	for id := range uint32(lb.MaxServices) {
		t, err := w.TableID(id)
		if err != nil {
			return nil, err
		}
		if t != 0 {
			out[id] = t
		}
	}
	return out, nil
}

// bigConfig generates the configurations of the reconcile measurement.
// Service i listens on 10.100.0.(1+i/100), port 8000+i%100 (see
// serviceLayout), and has backends 10.(128+i/250).(i%250).(j+1).
// The cases edit copies of the parsed configuration, as a reload hands
// the reconciler a new one; edits accumulate in cur.
type bigConfig struct {
	services, backends     int
	tableSize, maxBackends uint32
	daisyChain             bool // every service dsr-gue with flows: daisy-chain
	cur                    *config.Config
}

func newBigConfig(services, backends int, tableSize, maxBackends uint32, daisyChain bool) *bigConfig {
	return &bigConfig{services: services, backends: backends, tableSize: tableSize, maxBackends: maxBackends, daisyChain: daisyChain}
}

// serviceLayout describes the services' keys. A layout of one VIP per
// service in one /22 or /24 does not fit: the data plane's service index
// then places at most 64 services (see the report).
const serviceLayout = "VIPs 10.100.0.1, .2, … with 100 services (ports 8000-8099) each"

func (g *bigConfig) vip(i int) string { return fmt.Sprintf("10.100.0.%d", i/100+1) }

func (g *bigConfig) port(i int) int { return 8000 + i%100 }

func (g *bigConfig) backend(i, j int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(128 + i/250), byte(i % 250), byte(j + 1)})
}

func (g *bigConfig) yaml() []byte {
	var b strings.Builder
	b.WriteString("# Generated by bench/ctlbench: the reconcile measurement.\n")
	b.WriteString("node: {interface: veth0, address: 10.0.1.2}\n")
	fmt.Fprintf(&b, "dataplane: {tableSize: %d, maxBackends: %d}\n", g.tableSize, g.maxBackends)
	b.WriteString("services:\n")
	for i := range g.services {
		fmt.Fprintf(&b, "  - name: svc%04d\n    vip: %s\n    port: %d\n", i, g.vip(i), g.port(i))
		if g.daisyChain {
			b.WriteString("    forwarding: dsr-gue\n    flows: daisy-chain\n")
		}
		b.WriteString("    backends:\n")
		for j := range g.backends {
			fmt.Fprintf(&b, "      - {address: %s}\n", g.backend(i, j))
		}
	}
	return []byte(b.String())
}

// edit returns a copy of cur, now also the new cur, in which fn has
// changed service i; only that service's backends are copied.
func (g *bigConfig) edit(i int, fn func(*config.Service)) {
	out := *g.cur
	out.Services = slices.Clone(g.cur.Services)
	s := out.Services[i]
	s.Backends = slices.Clone(s.Backends)
	fn(&s)
	out.Services[i] = s
	g.cur = &out
}

// replaceOne moves the first backend of one service (another one each
// run) to an unused address.
func (g *bigConfig) replaceOne(run int) *config.Config {
	i := (run*397 + 11) % len(g.cur.Services)
	g.edit(i, func(s *config.Service) { s.Backends[0].Address = g.backend(i, g.backends+run%100) })
	return g.cur
}

// flipWeights sets the weight of every service's first backend to 2 on
// even runs and to 1 on odd ones.
func (g *bigConfig) flipWeights(run int) *config.Config {
	w := uint32(2 - run%2)
	out := *g.cur
	out.Services = slices.Clone(g.cur.Services)
	for i := range out.Services {
		s := &out.Services[i]
		s.Backends = slices.Clone(s.Backends)
		s.Backends[0].Weight = w
	}
	g.cur = &out
	return g.cur
}

// makeNamespace creates ns with a veth pair whose end veth0 carries the
// node's address: enough for the data plane to attach.
func makeNamespace(ctx context.Context, ns string) error {
	for _, args := range [][]string{
		{"netns", "add", ns},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "link", "add", "veth0", "type", "veth", "peer", "name", "veth1"},
		{"-n", ns, "addr", "add", "10.0.1.2/24", "dev", "veth0"},
		{"-n", ns, "link", "set", "veth0", "up"},
		{"-n", ns, "link", "set", "veth1", "up"},
	} {
		if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
			rerr := removeNamespace(ns)
			return fmt.Errorf("ip %s: %v: %s%v", strings.Join(args, " "), err, strings.TrimSpace(string(out)), errSuffix(rerr))
		}
	}
	return nil
}

func removeNamespace(ns string) error {
	if !netns.Exists(ns) {
		return nil
	}
	if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns del %s: %v: %s", ns, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return "; " + err.Error()
}

// memAvailable reads MemAvailable from /proc/meminfo, in bytes.
func memAvailable() (uint64, error) { return benchutil.MemInfo("MemAvailable") }

// cpuTime is the user and system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
