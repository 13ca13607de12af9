package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/announce"
	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/dataplane/lb"
	"github.com/xlbproject/xlb/internal/health"
	"github.com/xlbproject/xlb/internal/source"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// warmLog records the addresses the agent warms instead of sending
// datagrams to them.
type warmLog struct {
	mu    sync.Mutex
	addrs [][]netip.Addr
}

func (w *warmLog) warm(addrs []netip.Addr, _ *slog.Logger) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.addrs = append(w.addrs, addrs)
}

func (w *warmLog) last() []netip.Addr {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.addrs) == 0 {
		return nil
	}
	return w.addrs[len(w.addrs)-1]
}

// testAgent starts an agent on a fake data plane; load answers reloads.
func testAgent(t *testing.T, cfg *config.Config, load func(string) (*config.Config, error)) (*Agent, *fakeDP, *warmLog) {
	t.Helper()
	return testAgentAt(t, "/etc/xlb/test.yaml", cfg, load)
}

func testAgentAt(t *testing.T, path string, cfg *config.Config, load func(string) (*config.Config, error)) (*Agent, *fakeDP, *warmLog) {
	t.Helper()
	a, f, w, _ := testAgentWith(t, path, cfg, load, quiet)
	return a, f, w
}

// testAgentWith also returns the agent's fake prober, and logs to log.
func testAgentWith(t *testing.T, path string, cfg *config.Config, load func(string) (*config.Config, error), log *slog.Logger) (*Agent, *fakeDP, *warmLog, *fakeProber) {
	t.Helper()
	f := newFake(testSize, config.MaxServices, config.MaxBackends)
	p := newFakeProber()
	a, err := newAgent(Options{
		ConfigPath: path,
		Config:     cfg,
		Dataplane:  f,
		NodeAddr:   netip.MustParseAddr("10.0.1.2"),
		PinPath:    "/sys/fs/bpf/xlb/test",
		Version:    "v-test",
		Logger:     log,
		Prober:     p,
	})
	if err != nil {
		t.Fatal(err)
	}
	w := &warmLog{}
	a.warm = w.warm
	if load != nil {
		loads.Store(a, load)
	}
	if err := a.start(); err != nil {
		t.Fatal(err)
	}
	return a, f, w, p
}

func status(t *testing.T, a *Agent) *api.Status {
	t.Helper()
	st, err := a.Status()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func TestAgentStatus(t *testing.T) {
	a, f, w := testAgent(t, baseConfig(), nil)
	if got, want := w.last(), addrs("10.0.3.2", "10.0.3.3", "10.0.3.4", "10.0.3.5"); !slices.Equal(got, want) {
		t.Errorf("warmed %v at start, want every backend once: %v", got, want)
	}
	webID, webIDs, _ := a.rec.ids(keyOf(t, baseConfig().Services[0]))
	f.svcCounters[webID] = lb.Counters{Packets: 10, Bytes: 1000}
	b2 := webIDs[netip.MustParseAddrPort("10.0.3.2:80")]
	f.beCounters[b2] = lb.Counters{Packets: 4, Bytes: 400}

	st := status(t, a)
	if st.Version != "v-test" || st.Node.Interface != "eth0" || st.Node.Address != netip.MustParseAddr("10.0.1.2") ||
		st.Node.AttachMode != "generic" || st.Node.PinPath != "/sys/fs/bpf/xlb/test" {
		t.Errorf("node/version: %+v %q", st.Node, st.Version)
	}
	if st.Config.Generation != 1 || st.Config.Result != api.ResultOK || st.Config.Error != "" || st.Config.LastReload.IsZero() {
		t.Errorf("config: %+v", st.Config)
	}
	if len(st.Services) != 2 {
		t.Fatalf("%d services, want 2", len(st.Services))
	}
	web := st.Services[0]
	if web.Name != "web" || web.VIP != netip.MustParseAddr("10.99.0.1") || web.Port != 80 || web.Protocol != "tcp" ||
		web.Forwarding != "dsr-ipip" || !web.Installed || web.Counters != (api.Counters{Packets: 10, Bytes: 1000}) {
		t.Errorf("web: %+v", web)
	}
	if len(web.Backends) != 3 || web.Backends[0].Counters != (api.Counters{Packets: 4, Bytes: 400}) || web.Backends[2].Weight != 2 {
		t.Errorf("web backends: %+v", web.Backends)
	}
	// The same address under dns has its own counters.
	if c := st.Services[1].Backends[0].Counters; c != (api.Counters{}) {
		t.Errorf("dns's 10.0.3.2 shows web's counters: %+v", c)
	}
	if st.Reasons["pass_not_vip"] != 7 {
		t.Errorf("reasons: %v", st.Reasons)
	}

	f.fail["ServiceCounters"] = errInjected
	if _, err := a.Status(); !errors.Is(err, errInjected) {
		t.Errorf("Status with a failing data plane: err = %v", err)
	}
}

func TestAgentReload(t *testing.T) {
	next := baseConfig()
	var loadErr error
	load := func(string) (*config.Config, error) { return next, loadErr }
	a, f, w := testAgent(t, baseConfig(), load)

	// A changed file: applied, generation 2, only new backends warmed.
	next = baseConfig()
	next.Services[1].Backends = append(next.Services[1].Backends, be("10.0.3.3", 1), be("10.0.3.7", 1))
	if err := reload(a); err != nil {
		t.Fatal(err)
	}
	st := status(t, a)
	if st.Config.Generation != 2 || st.Config.Result != api.ResultOK || st.Config.Reloads[api.ResultOK] != 1 {
		t.Errorf("after a good reload: %+v", st.Config)
	}
	if n := len(st.Services[1].Backends); n != 4 {
		t.Errorf("dns has %d backends after reload, want 4", n)
	}
	if got, want := w.last(), addrs("10.0.3.7"); !slices.Equal(got, want) {
		t.Errorf("warmed %v, want only the new address %v", got, want)
	}

	// A broken file: the running configuration stays, the error is shown.
	loadErr = errors.New("test.yaml:3: services[0].port: must be 1-65535")
	mark := f.mark()
	if err := reload(a); err == nil {
		t.Fatal("Reload of a broken file succeeded")
	}
	st = status(t, a)
	if st.Config.Generation != 2 || st.Config.Result != api.ResultError || !strings.Contains(st.Config.Error, "must be 1-65535") ||
		st.Config.Reloads[api.ResultError] != 1 {
		t.Errorf("after a bad reload: %+v", st.Config)
	}
	if n := len(st.Services[1].Backends); n != 4 {
		t.Errorf("the running config was replaced by a failed reload")
	}
	if calls := f.mutations(mark); len(calls) > 0 {
		t.Errorf("a failed reload changed the data plane: %v", calls)
	}

	// Fixed again.
	loadErr = nil
	next = baseConfig()
	if err := reload(a); err != nil {
		t.Fatal(err)
	}
	st = status(t, a)
	if st.Config.Generation != 3 || st.Config.Result != api.ResultOK || st.Config.Error != "" {
		t.Errorf("after fixing the file: %+v", st.Config)
	}
	verify(t, f, a.rec, baseConfig())
}

// TestAgentRunAppliesUpdates: a configuration from Options.Source (the
// Kubernetes source) is applied like a reloaded file; a source error
// keeps the running configuration and shows in status.
func TestAgentRunAppliesUpdates(t *testing.T) {
	updates := make(chan source.Update)
	a, f, _ := testAgent(t, baseConfig(), nil)
	a.updates = updates
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()

	next := baseConfig()
	next.Services = next.Services[:1]
	updates <- source.Update{Config: next, Source: "test source"}
	testenv.EventuallyTrue(t, 5*time.Second, "generation 2", func() bool { return status(t, a).Config.Generation == 2 })
	st := status(t, a)
	if len(st.Services) != 1 || st.Config.Result != api.ResultOK {
		t.Errorf("after an update with one service: %d services, %+v", len(st.Services), st.Config)
	}
	verify(t, f, a.rec, next)

	mark := f.mark()
	updates <- source.Update{Err: errors.New("watch failed"), Source: "test source"}
	testenv.EventuallyTrue(t, 5*time.Second, "the source error", func() bool { return status(t, a).Config.Result == api.ResultError })
	st = status(t, a)
	if !strings.Contains(st.Config.Error, "test source: watch failed") || len(st.Services) != 1 || st.Config.Generation != 2 {
		t.Errorf("after a source error: %d services, %+v", len(st.Services), st.Config)
	}
	if calls := f.mutations(mark); len(calls) > 0 {
		t.Errorf("a source error changed the data plane: %v", calls)
	}
}

// fakeRoutes records the bgp sections it is given.
type fakeRoutes struct {
	mu       sync.Mutex
	sections []*config.BGP
	fail     error // Reconfigure's answer while set
}

func (r *fakeRoutes) Sync([]announce.Route) error { return nil }
func (r *fakeRoutes) Status() *api.BGP            { return nil }
func (r *fakeRoutes) Reconfigure(_ context.Context, b *config.BGP) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sections = append(r.sections, b)
	return r.fail
}

func (r *fakeRoutes) failWith(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail = err
}

func (r *fakeRoutes) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sections)
}

// TestAgentRunLeavesFileToSource: the file is its source's (here one
// that builds on it): the agent does not reload it when it changes. A bgp section that a source adds and removes again reaches
// Routes both times.
func TestAgentRunLeavesFileToSource(t *testing.T) {
	path := filepath.Join(t.TempDir(), "xlb.yaml")
	writeConfig(t, path, "10.0.3.2")
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	a, _, _ := testAgentAt(t, path, cfg, nil)
	a.pollEvery = 10 * time.Millisecond
	updates := make(chan source.Update)
	a.updates = updates
	routes := &fakeRoutes{}
	a.routes = routes
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()

	writeConfig(t, path, "10.0.3.2", "10.0.3.3")
	// Ten polls and the inotify event: a reload would have happened.
	time.Sleep(100 * time.Millisecond)
	if st := status(t, a); st.Config.Generation != 1 || len(st.Services[0].Backends) != 1 {
		t.Errorf("the agent reloaded the source's file: generation %d, %+v", st.Config.Generation, st.Services[0])
	}

	withBGP := mustLoad(t, path)
	withBGP.BGP = &config.BGP{ASN: 65001, HoldTime: config.DefaultHoldTime, Peers: []config.Peer{{Address: netip.MustParseAddr("10.0.1.1"), ASN: 65000, Port: 179}}}
	updates <- source.Update{Config: withBGP, Source: "test source"}
	updates <- source.Update{Config: mustLoad(t, path), Source: "test source"}
	testenv.EventuallyTrue(t, 5*time.Second, "generation 3", func() bool { return status(t, a).Config.Generation == 3 })
	if st := status(t, a); st.Config.Result != api.ResultOK || routes.count() != 2 {
		t.Errorf("after a bgp section came and went: %+v, %d reconfigurations, want 2", st.Config, routes.count())
	}
	routes.mu.Lock()
	defer routes.mu.Unlock()
	if routes.sections[0] != withBGP.BGP || routes.sections[1] != nil {
		t.Errorf("Routes got %v, want the section, then nil", routes.sections)
	}
}

func TestAgentRetriesFailedApply(t *testing.T) {
	next := baseConfig()
	a, f, _ := testAgent(t, cfgOf(baseConfig().Services[0]), func(string) (*config.Config, error) { return next, nil })
	f.failKey[1] = errInjected // dns will get service ID 1
	if err := reload(a); !errors.Is(err, errInjected) {
		t.Fatalf("err = %v, want the injected error", err)
	}
	st := status(t, a)
	if st.Config.Result != api.ResultError || !strings.HasPrefix(st.Config.Error, "apply:") || st.Services[1].Installed {
		t.Errorf("after a failed apply: %+v, dns installed %v", st.Config, st.Services[1].Installed)
	}

	a.retryEvery = time.Hour
	a.retry() // not due yet
	if _, ok := f.serviceByKey(keyOf(t, next.Services[1])); ok {
		t.Fatal("retried before retryEvery passed")
	}
	delete(f.failKey, 1)
	a.retryEvery = 0
	a.retry()
	st = status(t, a)
	if st.Config.Result != api.ResultOK || !st.Services[1].Installed {
		t.Errorf("after a successful retry: %+v, dns installed %v", st.Config, st.Services[1].Installed)
	}
	verify(t, f, a.rec, next)
}

const yamlTemplate = `node:
  interface: eth0
api:
  socket: /run/xlb/test.sock
services:
  - name: web
    vip: 10.99.0.1
    port: 80
    protocol: tcp
    forwarding: dsr-ipip
    backends:
BACKENDS`

func writeConfig(t *testing.T, path string, backends ...string) {
	t.Helper()
	var b strings.Builder
	for _, a := range backends {
		b.WriteString("      - address: " + a + "\n")
	}
	// Write and rename, as editors and config management do.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Replace(yamlTemplate, "BACKENDS", b.String(), 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestAgentRunReloadsOnChangeAndSIGHUP(t *testing.T) {
	path := filepath.Join(t.TempDir(), "xlb.yaml")
	writeConfig(t, path, "10.0.3.2")
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	a, f, _ := testAgentAt(t, path, cfg, nil)
	a.pollEvery = 10 * time.Millisecond
	src := followFile(a, 10*time.Millisecond, 20*time.Millisecond)

	// Keep SIGHUP from killing the test binary should it arrive before
	// the source subscribes to it.
	hup := make(chan os.Signal, 16)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go src.Run(ctx)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Run did not return after cancel")
		}
	}()
	gen := func() uint64 { return status(t, a).Config.Generation }

	writeConfig(t, path, "10.0.3.2", "10.0.3.3")
	testenv.EventuallyTrue(t, 5*time.Second, "the changed file to be applied", func() bool { return gen() == 2 })
	if st := status(t, a); len(st.Services[0].Backends) != 2 {
		t.Errorf("after the change: %+v", st.Services[0])
	}
	verify(t, f, a.rec, mustLoad(t, path))

	if err := os.WriteFile(path, []byte("services: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyTrue(t, 5*time.Second, "the broken file to be reported", func() bool { return status(t, a).Config.Result == api.ResultError })
	if st := status(t, a); st.Config.Generation != 2 || len(st.Services[0].Backends) != 2 {
		t.Errorf("a broken file changed the running config: %+v", st)
	}

	writeConfig(t, path, "10.0.3.2", "10.0.3.3")
	testenv.EventuallyTrue(t, 5*time.Second, "the fixed file to be applied", func() bool { return gen() == 3 })

	// SIGHUP reloads an unchanged file. Resend until seen: Run may not
	// have subscribed yet when the first one arrives.
	testenv.EventuallyTrue(t, 5*time.Second, "SIGHUP to reload", func() bool {
		syscall.Kill(os.Getpid(), syscall.SIGHUP)
		time.Sleep(20 * time.Millisecond)
		return gen() >= 4
	})
}

// With polling out of the picture, a written file (in place, or renamed
// over the old one) still applies: inotify reports it.
func TestAgentRunReloadsOnInotify(t *testing.T) {
	path := filepath.Join(t.TempDir(), "xlb.yaml")
	writeConfig(t, path, "10.0.3.2")
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	a, _, _ := testAgentAt(t, path, cfg, nil)
	a.pollEvery = time.Hour
	src := followFile(a, time.Hour, 20*time.Millisecond) // rewritten every 500 ms below

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go src.Run(ctx)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("Run did not return after cancel")
		}
	}()
	gen := func() uint64 { return status(t, a).Config.Generation }

	// The source sets up its watch as it starts, and nothing tells when
	// it is done: a write before it goes unnoticed (polling is off), so
	// write again until one is applied.
	deadline := time.Now().Add(5 * time.Second)
	for gen() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for the written file to be applied")
		}
		start := time.Now()
		writeConfig(t, path, "10.0.3.2", "10.0.3.3")
		for time.Since(start) < 500*time.Millisecond && gen() < 2 {
			time.Sleep(10 * time.Millisecond)
		}
		if gen() >= 2 {
			t.Logf("applied %s after the write", time.Since(start).Round(time.Millisecond))
		}
	}
	base := gen()

	tmp := path + ".new"
	writeConfig(t, tmp, "10.0.3.4")
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyTrue(t, 5*time.Second, "the renamed file to be applied", func() bool { return gen() > base })
	if st := status(t, a); len(st.Services[0].Backends) != 1 || st.Services[0].Backends[0].Address.String() != "10.0.3.4" {
		t.Errorf("after the rename: %+v", st.Services[0])
	}
}

func mustLoad(t *testing.T, path string) *config.Config {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestNewBackendAddrs(t *testing.T) {
	old := cfgOf(web(be("10.0.3.2", 1)))
	cfg := cfgOf(web(be("10.0.3.2", 1), be("10.0.3.3", 0)), dns(be("10.0.3.3", 1), be("10.0.3.4", 1)))
	for _, tc := range []struct {
		name string
		old  *config.Config
		want []netip.Addr
	}{
		{"at start", nil, addrs("10.0.3.2", "10.0.3.3", "10.0.3.4")},
		{"on reload", old, addrs("10.0.3.3", "10.0.3.4")},
		{"unchanged", cfg, nil},
		// dns is new, and lists an address that web had: only 10.0.3.4
		// is new to the node.
		{"on reload, an address moved", cfgOf(web(be("10.0.3.3", 1), be("10.0.3.2", 1))), addrs("10.0.3.4")},
		// An address that a changed service adds but an unchanged one
		// had already.
		{"from one service to another", cfgOf(web(be("10.0.3.2", 1), be("10.0.3.3", 0)), dns(be("10.0.3.3", 1))), addrs("10.0.3.4")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := newBackendAddrs(tc.old, cfg); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestNewBackendAddrsAgainstReference: random pairs of configurations
// against the plain definition (every address of cfg that no backend of
// old has, each once, in cfg's order).
func TestNewBackendAddrsAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	random := func() *config.Config {
		var svcs []config.Service
		for i := range 4 {
			if rng.IntN(4) == 0 {
				continue
			}
			var bes []config.Backend
			for range rng.IntN(4) {
				bes = append(bes, be(fmt.Sprint("10.0.3.", 1+rng.IntN(8)), 1))
			}
			svcs = append(svcs, svc(fmt.Sprint("s", i), fmt.Sprint("10.99.0.", i+1), 80, config.TCP, config.DSRIPIP, bes...))
		}
		return cfgOf(svcs...)
	}
	for range 2000 {
		old, cfg := random(), random()
		if rng.IntN(10) == 0 {
			old = nil
		}
		had := map[netip.Addr]bool{}
		if old != nil {
			for _, s := range old.Services {
				for _, b := range s.Backends {
					had[b.Address] = true
				}
			}
		}
		var want []netip.Addr
		for _, s := range cfg.Services {
			for _, b := range s.Backends {
				if !had[b.Address] {
					had[b.Address] = true
					want = append(want, b.Address)
				}
			}
		}
		if got := newBackendAddrs(old, cfg); !slices.Equal(got, want) {
			t.Fatalf("old %+v\ncfg %+v\ngot %v, want %v", old, cfg, got, want)
		}
	}
}

func TestNodeAddress(t *testing.T) {
	for _, tc := range []struct {
		name    string
		node    config.Node
		want    string
		wantErr string
	}{
		{"configured", config.Node{Interface: "lo", Address: netip.MustParseAddr("10.0.1.2")}, "10.0.1.2", ""},
		{"from the interface", config.Node{Interface: "lo"}, "127.0.0.1", ""},
		{"no such interface", config.Node{Interface: "nosuch0"}, "", `"nosuch0"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NodeAddress(tc.node)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one mentioning %s", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != netip.MustParseAddr(tc.want) {
				t.Fatalf("got %v, %v; want %s", got, err, tc.want)
			}
		})
	}
}

func TestPinPath(t *testing.T) {
	fi, err := os.Stat("/proc/self/ns/net")
	if err != nil {
		t.Skip("no /proc/self/ns/net:", err)
	}
	ino := fi.Sys().(*syscall.Stat_t).Ino
	for _, tc := range []struct {
		name    string
		cfg     config.Config
		want    string
		wantErr bool
	}{
		{"explicit", config.Config{Node: config.Node{Interface: "eth0"}, Dataplane: config.Dataplane{PinPath: "/sys/fs/bpf/mine"}}, "/sys/fs/bpf/mine", false},
		{"derived", config.Config{Node: config.Node{Interface: "eth0"}}, "/sys/fs/bpf/xlb/" + strconv.FormatUint(ino, 10) + "-eth0", false},
		{"bad interface", config.Config{Node: config.Node{Interface: "../x"}}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PinPath(&tc.cfg)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("got %q, %v; want %q (error %v)", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestAgentRetriesFailedBGP: a bgp section that Routes refused is handed
// over again by the retry, also when the data plane took its part at
// once, and the error stays until Routes takes it.
func TestAgentRetriesFailedBGP(t *testing.T) {
	next := baseConfig()
	next.BGP = &config.BGP{ASN: 65001, HoldTime: config.DefaultHoldTime, Peers: []config.Peer{{Address: netip.MustParseAddr("10.0.1.1"), ASN: 65000, Port: 179}}}
	a, _, _ := testAgent(t, baseConfig(), func(string) (*config.Config, error) { return next, nil })
	routes := &fakeRoutes{}
	a.routes = routes
	routes.failWith(errInjected)
	if err := reload(a); !errors.Is(err, errInjected) {
		t.Fatalf("err = %v, want the injected error", err)
	}
	a.retryEvery = 0
	a.retry() // Routes still refuses
	if st := status(t, a); st.Config.Result != api.ResultError || !strings.Contains(st.Config.Error, "bgp") || routes.count() != 2 {
		t.Errorf("after a retry that Routes refused: %+v, %d reconfigurations, want 2", st.Config, routes.count())
	}
	routes.failWith(nil)
	a.retry()
	if st := status(t, a); st.Config.Result != api.ResultOK || routes.count() != 3 {
		t.Errorf("after a retry that Routes took: %+v, %d reconfigurations, want 3", st.Config, routes.count())
	}
	a.retry() // nothing left to do
	if routes.count() != 3 {
		t.Errorf("a retry with nothing failed reconfigured again: %d", routes.count())
	}
	// The same section again by reload: nothing to hand over.
	if err := reload(a); err != nil {
		t.Fatal(err)
	}
	if routes.count() != 3 {
		t.Errorf("a reload of the same section reconfigured: %d", routes.count())
	}
}

// BenchmarkReplaceOneChange: the agent's whole apply of a configuration
// that differs from the running one in one service or two, with 1000
// services of 10 backends each on a fake data plane and the real prober
// (targets, health, tables, warming): what every EndpointSlice change
// costs an agent besides the table write itself.
func BenchmarkReplaceOneChange(b *testing.B) {
	const services, backends = 1000, 10
	mk := func() *config.Config { return benchConfig(services, backends) }
	f := newFake(testSize, config.MaxServices, config.MaxBackends)
	a, err := newAgent(Options{ConfigPath: "/etc/xlb/bench.yaml", Config: mk(), Dataplane: f, NodeAddr: netip.MustParseAddr("10.0.1.2"),
		PinPath: "/sys/fs/bpf/xlb/bench", Version: "v-bench", Logger: quiet, Prober: health.New(quiet)})
	if err != nil {
		b.Fatal(err)
	}
	a.warm = (&warmLog{}).warm
	if err := a.start(); err != nil {
		b.Fatal(err)
	}
	// Configuration i has service i's first backend at weight 2: each
	// differs from the one before in two services. A source builds a new
	// configuration for every change, so each is a distinct value.
	var cfgs []*config.Config
	for i := range 20 {
		cfg := mk()
		cfg.Services[i].Backends[0].Weight = 2
		cfgs = append(cfgs, cfg)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		a.applyMu.Lock()
		err := a.replace(cfgs[i%len(cfgs)], "bench")
		a.applyMu.Unlock()
		if err != nil {
			b.Fatal(err)
		}
	}
}
