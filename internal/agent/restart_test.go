package agent

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/lb"
	"github.com/xlbproject/xlb/testbed/netns"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// realDataplane gives a test a namespace with an interface to attach to
// and a pin path, and opens data planes on them (each closed at the end).
type realDataplane struct {
	t   *testing.T
	ns  string
	pin string
}

func newRealDataplane(t *testing.T) *realDataplane {
	testenv.RequireRoot(t, "a reconciler on a real data plane (BPF, network namespaces)")
	name := fmt.Sprintf("xlbtest-agent-%d", os.Getpid())
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	_ = exec.Command("ip", "netns", "del", name).Run()
	ip("netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	ip("-n", name, "link", "add", "veth0", "type", "veth", "peer", "name", "veth1")
	ip("-n", name, "addr", "add", "10.0.1.2/24", "dev", "veth0")
	ip("-n", name, "link", "set", "veth0", "up")
	ip("-n", name, "link", "set", "veth1", "up")
	pin := filepath.Join(bpfobj.BPFFSRoot, name)
	t.Cleanup(func() { _ = bpfobj.Cleanup(pin) })
	return &realDataplane{t: t, ns: name, pin: pin}
}

func (r *realDataplane) open() *lb.Dataplane {
	r.t.Helper()
	var d *lb.Dataplane
	err := netns.Do(r.ns, func() error {
		var err error
		d, err = lb.Open(lb.Options{
			Interface: "veth0", NodeAddr: netip.MustParseAddr("10.0.1.2"), PinPath: r.pin,
			AttachMode: string(config.AttachAuto), TableSize: testSize, MaxBackends: 64,
		})
		return err
	})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { d.Close() })
	return d
}

// tableIDs reads which inner map holds each service's table: a new one
// means the table was written.
func tableIDs(t *testing.T, pin string) map[uint32]ebpf.MapID {
	t.Helper()
	w, err := lb.WatchTables(pin)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ids, err := w.Services()
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint32]ebpf.MapID{}
	for _, id := range ids {
		if out[id], err = w.TableID(id); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// keeping is the real data plane, counting the tables it keeps for an
// agent that would otherwise build them (KeepService), and the tables the
// agent built and upserted.
type keeping struct {
	*lb.Dataplane
	n, upserts atomic.Int32
}

func (k *keeping) UpsertService(s lb.Service) error {
	k.upserts.Add(1)
	return k.Dataplane.UpsertService(s)
}

func (k *keeping) KeepService(s lb.Service, names []uint32) error {
	err := k.Dataplane.KeepService(s, names)
	if err == nil {
		k.n.Add(1)
	}
	return err
}

// TestRestartKeepsTables: an agent restarted on the pinned state of one
// with the same configuration writes no table and keeps every service's
// and backend's ID (and so its counters), and builds no table either: it
// keeps each as it is; one restarted with a changed configuration writes
// only the changed service's table, and keeps the others unbuilt.
func TestRestartKeepsTables(t *testing.T) {
	env := newRealDataplane(t)
	cfg := cfgOf(
		web(be("10.0.3.2", 1), be("10.0.3.3", 1), be("10.0.3.4", 2)),
		// 10.0.3.2 serves three services: each keeps its own ID.
		dns(be("10.0.3.2", 1), be("10.0.3.5", 1)),
		svc("api", "10.99.0.1", 443, config.TCP, config.DSRGUE, be("10.0.3.2", 1), be("10.0.3.6", 0)),
		chained("chained", "10.99.0.3", 80, be("10.0.3.3", 1), be("10.0.3.7", 1)),
	)
	var dp *keeping
	start := func() (*lb.Dataplane, *Reconciler) {
		t.Helper()
		dp = &keeping{Dataplane: env.open()}
		r, err := NewReconciler(dp, quiet)
		if err != nil {
			t.Fatal(err)
		}
		return dp.Dataplane, r
	}
	backendIDs := func(r *Reconciler, cfg *config.Config) map[string]map[netip.AddrPort]uint32 {
		out := map[string]map[netip.AddrPort]uint32{}
		for _, s := range cfg.Services {
			var id uint32
			var ok bool
			id, out[s.Name], ok = r.ids(keyOf(t, s))
			if !ok {
				t.Fatalf("service %s not installed", s.Name)
			}
			out[s.Name][netip.AddrPortFrom(netip.IPv4Unspecified(), 0)] = id // the service's own
		}
		return out
	}

	d, r := start()
	mustApply(t, r, cfg)
	tables, ids := tableIDs(t, env.pin), backendIDs(r, cfg)
	chainedID, _, _ := r.ids(keyOf(t, cfg.Services[3]))
	chainTable := chainTableID(t, env.pin, chainedID)
	if chainTable == 0 {
		t.Fatal("the daisy-chained service has no chain table")
	}
	if len(tables) != len(cfg.Services) {
		t.Fatalf("%d tables, want %d", len(tables), len(cfg.Services))
	}
	if n := dp.n.Load(); n != 0 {
		t.Errorf("the first agent kept %d tables unbuilt, want none: there were none", n)
	}
	d.Close()

	d, r = start()
	mustApply(t, r, cfg)
	if got := tableIDs(t, env.pin); !maps.Equal(got, tables) {
		t.Errorf("restart with the same configuration: tables %v, were %v: want none written", got, tables)
	}
	if n, u := dp.n.Load(), dp.upserts.Load(); n != int32(len(cfg.Services)) || u != 0 {
		t.Errorf("restart with the same configuration: %d tables kept unbuilt and %d built, want all %d kept", n, u, len(cfg.Services))
	}
	if built, kept := r.TableCounts(); built != 0 || kept != uint64(len(cfg.Services)) {
		t.Errorf("restart with the same configuration: the reconciler counts %d tables built and %d kept, want 0 and %d", built, kept, len(cfg.Services))
	}
	if got := chainTableID(t, env.pin, chainedID); got != chainTable {
		t.Errorf("restart with the same configuration: chain table %d, was %d: want it kept", got, chainTable)
	}
	if got := backendIDs(r, cfg); !maps.EqualFunc(got, ids, maps.Equal) {
		t.Errorf("restart: IDs %v, were %v", got, ids)
	}
	in, _ := d.Installed()
	if len(in.Backends) != 9 {
		t.Errorf("%d backends after the restart, want 9 (one per service and backend)", len(in.Backends))
	}
	d.Close()

	// Changed while no agent ran: web loses a backend.
	changed := cfgOf(web(be("10.0.3.2", 1), be("10.0.3.4", 2)), cfg.Services[1], cfg.Services[2], cfg.Services[3])
	d, r = start()
	mustApply(t, r, changed)
	webID, _, _ := r.ids(keyOf(t, changed.Services[0]))
	if n, u := dp.n.Load(), dp.upserts.Load(); n != int32(len(changed.Services)-1) || u != 1 {
		t.Errorf("restart with web changed: %d tables kept unbuilt and %d built, want %d kept (all but web's) and 1", n, u, len(changed.Services)-1)
	}
	got := tableIDs(t, env.pin)
	for id, table := range tables {
		if (got[id] != table) != (id == webID) {
			t.Errorf("service ID %d: table %d, was %d; want only web's (ID %d) written", id, got[id], table, webID)
		}
	}
	if in, _ := d.Installed(); len(in.Backends) != 8 {
		t.Errorf("%d backends after web lost one, want 8", len(in.Backends))
	}
	if got := chainTableID(t, env.pin, chainedID); got != chainTable {
		t.Errorf("restart with web changed: chain table %d, was %d: want it kept", got, chainTable)
	}
	d.Close()

	// The daisy-chained service's history changed while no agent ran: its
	// hints change, with the same backends and the same Maglev table.
	hist := cfg.Services[3]
	hist.History = []config.Generation{{Until: time.Unix(1_800_000_000, 0), Backends: []config.Backend{be("10.0.3.3", 1)}}}
	hist.History[0].Backends[0].Port = hist.Port
	withHistory := cfgOf(changed.Services[0], cfg.Services[1], cfg.Services[2], hist)
	d, r = start()
	mustApply(t, r, withHistory)
	if n, u := dp.n.Load(), dp.upserts.Load(); n != 3 || u != 1 {
		t.Errorf("restart with a history added: %d tables kept unbuilt and %d built, want 3 and 1 (the daisy-chained service's)", n, u)
	}
	if got := chainTableID(t, env.pin, chainedID); got == chainTable || got == 0 {
		t.Errorf("restart with a history added: chain table %d, was %d: want a new one", got, chainTable)
	}
	if _, gen, err := d.Chain(chainedID); err != nil || gen != 1_800_000_000 {
		t.Errorf("restart with a history added: chain generation %d (%v), want the history's", gen, err)
	}
}

// chained is a daisy-chained service.
func chained(name, vip string, port uint16, backends ...config.Backend) config.Service {
	s := svc(name, vip, port, config.TCP, config.DSRGUE, backends...)
	s.Flows = config.FlowsDaisyChain
	return s
}

// chainTableID reads which inner map holds service id's chain table, from
// the pinned maps (0: none): a new one means the chain was written.
func chainTableID(t *testing.T, pin string, id uint32) ebpf.MapID {
	t.Helper()
	outer, err := ebpf.LoadPinnedMap(filepath.Join(pin, "chain_tables"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Close()
	var inner ebpf.MapID
	if err := outer.Lookup(id, &inner); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Fatal(err)
	}
	return inner
}

// TestRestartKeepsRecordedHints: the hints of a daisy-chained service
// whose configuration carries no history come from the changes the agent
// saw itself. An agent restarted on an unchanged configuration no longer
// knows them, and keeps the chain table the earlier one installed, hints
// and all, instead of writing one without hints; the next change builds
// hints again.
func TestRestartKeepsRecordedHints(t *testing.T) {
	env := newRealDataplane(t)
	before := cfgOf(chained("chained", "10.99.0.3", 80, be("10.0.3.3", 1), be("10.0.3.7", 1)))
	after := cfgOf(chained("chained", "10.99.0.3", 80, be("10.0.3.3", 1), be("10.0.3.7", 1), be("10.0.3.8", 1)))
	start := func() (*keeping, *Reconciler) {
		t.Helper()
		dp := &keeping{Dataplane: env.open()}
		r, err := NewReconciler(dp, quiet)
		if err != nil {
			t.Fatal(err)
		}
		return dp, r
	}
	// hinted counts the slots whose hint names a previous owner.
	hinted := func(d *lb.Dataplane, id uint32) int {
		t.Helper()
		slots, _, err := d.Chain(id)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, s := range slots {
			if s.Prev.IsValid() && !s.Prev.IsUnspecified() {
				n++
			}
		}
		return n
	}

	dp, r := start()
	mustApply(t, r, before)
	mustApply(t, r, after) // 10.0.3.8 takes slots: their hints name who had them
	id, _, _ := r.ids(keyOf(t, after.Services[0]))
	chainTable, hints := chainTableID(t, env.pin, id), hinted(dp.Dataplane, id)
	if chainTable == 0 || hints == 0 {
		t.Fatalf("chain table %d with %d hinted slots: want one with hints after a backend joined", chainTable, hints)
	}
	dp.Close()

	dp, r = start()
	mustApply(t, r, after)
	if n, u := dp.n.Load(), dp.upserts.Load(); n != 1 || u != 0 {
		t.Errorf("restart: %d services kept and %d upserted, want 1 and 0", n, u)
	}
	if got := chainTableID(t, env.pin, id); got != chainTable {
		t.Errorf("restart: chain table %d, was %d: want it kept", got, chainTable)
	}
	if got := hinted(dp.Dataplane, id); got != hints {
		t.Errorf("restart: %d slots hinted, were %d: want the earlier agent's hints kept", got, hints)
	}

	// The next change: hints from what this agent saw.
	mustApply(t, r, before)
	if got := chainTableID(t, env.pin, id); got == chainTable || got == 0 {
		t.Errorf("a change after the restart: chain table %d, was %d: want a new one", got, chainTable)
	}
	if got := hinted(dp.Dataplane, id); got == 0 {
		t.Error("a change after the restart: no slot hinted, want those 10.0.3.8 gave up")
	}
}
