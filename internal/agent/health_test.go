package agent

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/health"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// httpCheck is a check as the configuration resolves it.
var httpCheck = config.HealthCheck{Type: config.CheckHTTP, Port: 80, Path: "/", StatusMin: 200, StatusMax: 399,
	Interval: time.Second, Timeout: 500 * time.Millisecond, Rise: 2, Fall: 2}

// checkedConfig is baseConfig with an http check on every web backend and
// none on dns.
func checkedConfig() *config.Config {
	cfg := baseConfig()
	for i := range cfg.Services[0].Backends {
		cfg.Services[0].Backends[i].HealthCheck = httpCheck
	}
	return cfg
}

// drained returns cfg with the given backends of service name at weight 0:
// what the tables must look like when those backends are down.
func drained(cfg *config.Config, name string, addrs ...string) *config.Config {
	out := *cfg
	out.Services = slices.Clone(cfg.Services)
	for i, s := range out.Services {
		if s.Name != name {
			continue
		}
		out.Services[i].Backends = slices.Clone(s.Backends)
		for j, b := range out.Services[i].Backends {
			if slices.Contains(addrs, b.Address.String()) {
				out.Services[i].Backends[j].Weight = 0
			}
		}
	}
	return &out
}

func TestTargets(t *testing.T) {
	cfg := checkedConfig()
	cfg.Services[1].Backends[0].Weight = 0 // drained backends are probed too
	got, remove, _ := targetChanges(cfg, nil)
	if remove != nil {
		t.Errorf("from nothing, targetChanges removes %v", remove)
	}
	want := []health.Target{
		{Key: "web/10.0.3.2:80", Addr: netip.MustParseAddr("10.0.3.2"), Check: health.Check{Type: "http", Port: 80, Path: "/", StatusMin: 200, StatusMax: 399, Interval: time.Second, Timeout: 500 * time.Millisecond, Rise: 2, Fall: 2}},
		{Key: "web/10.0.3.3:80", Addr: netip.MustParseAddr("10.0.3.3"), Check: health.Check{Type: "http", Port: 80, Path: "/", StatusMin: 200, StatusMax: 399, Interval: time.Second, Timeout: 500 * time.Millisecond, Rise: 2, Fall: 2}},
		{Key: "web/10.0.3.4:80", Addr: netip.MustParseAddr("10.0.3.4"), Check: health.Check{Type: "http", Port: 80, Path: "/", StatusMin: 200, StatusMax: 399, Interval: time.Second, Timeout: 500 * time.Millisecond, Rise: 2, Fall: 2}},
		// A configuration built in code has no type: none.
		{Key: "dns/10.0.3.2:53", Addr: netip.MustParseAddr("10.0.3.2"), Check: health.Check{Type: "none"}},
		{Key: "dns/10.0.3.5:53", Addr: netip.MustParseAddr("10.0.3.5"), Check: health.Check{Type: "none"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("targets:\n got %+v\nwant %+v", got, want)
	}
}

func TestWithHealth(t *testing.T) {
	cfg := checkedConfig()
	before := checkedConfig()
	if got := withHealth(cfg, nil); got != cfg {
		t.Error("without down backends the configuration must be used as it is")
	}
	down := map[string]bool{"web/10.0.3.3:80": true, "dns/10.0.3.9:53": true}
	got := withHealth(cfg, down)
	if !reflect.DeepEqual(cfg, before) {
		t.Fatal("withHealth changed its input")
	}
	if want := drained(cfg, "web", "10.0.3.3"); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

func TestServicesDown(t *testing.T) {
	cfg := cfgOf(web(be("10.0.3.2", 1), be("10.0.3.3", 1), be("10.0.3.4", 0)), dns(be("10.0.3.2", 1)))
	for _, tc := range []struct {
		name string
		down []string
		want []string
	}{
		{"all up", nil, nil},
		{"one of two down", []string{"web/10.0.3.2:80"}, nil},
		{"every active backend down", []string{"web/10.0.3.2:80", "web/10.0.3.3:80"}, []string{"web"}},
		// A drained backend that is up serves no new flows: it cannot
		// keep the service up.
		{"only a drained backend up", []string{"web/10.0.3.2:80", "web/10.0.3.3:80", "dns/10.0.3.2:53"}, []string{"dns", "web"}},
		{"a drained backend down", []string{"web/10.0.3.4:80"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			down := map[string]bool{}
			for _, k := range tc.down {
				down[k] = true
			}
			var got []string
			for name := range servicesDown(cfg, down) {
				got = append(got, name)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// backendStatus finds a backend in a status.
func backendStatus(t *testing.T, st *api.Status, service, addr string) api.Backend {
	t.Helper()
	for _, s := range st.Services {
		if s.Name != service {
			continue
		}
		for _, b := range s.Backends {
			if b.Address.String() == addr {
				return b
			}
		}
	}
	t.Fatalf("no backend %s of %s in the status", addr, service)
	return api.Backend{}
}

func serviceState(t *testing.T, st *api.Status, name string) string {
	t.Helper()
	for _, s := range st.Services {
		if s.Name == name {
			return s.State
		}
	}
	t.Fatalf("no service %s in the status", name)
	return ""
}

func TestHealthChangesTheTables(t *testing.T) {
	cfg := checkedConfig()
	a, f, _, p := testAgentWith(t, "/etc/xlb/test.yaml", cfg, nil, quiet)
	if got, want := p.keys(), []string{"dns/10.0.3.2:53", "dns/10.0.3.5:53", "web/10.0.3.2:80", "web/10.0.3.3:80", "web/10.0.3.4:80"}; !slices.Equal(got, want) {
		t.Fatalf("prober targets %v, want %v", got, want)
	}
	verify(t, f, a.rec, cfg)
	st := status(t, a)
	if h := backendStatus(t, st, "web", "10.0.3.3").Health; h.State != api.StateUnknown || h.Check != "http" || !h.LastCheck.IsZero() {
		t.Errorf("before any probe: %+v, want unknown http without a last check", h)
	}
	webID, _, _ := a.rec.ids(keyOf(t, cfg.Services[0]))

	// First probes: up. Nothing to program.
	for _, b := range []string{"10.0.3.2", "10.0.3.3", "10.0.3.4"} {
		p.set("web/"+b+":80", health.Up, "")
	}
	mark := f.mark()
	a.syncHealth()
	if calls := f.mutations(mark); len(calls) > 0 {
		t.Errorf("backends coming up from unknown changed the data plane: %v", calls)
	}

	// One backend down: its slots go to the others, it keeps its ID; only
	// web's table is rewritten.
	p.set("web/10.0.3.3:80", health.Down, "connect: connection refused")
	mark = f.mark()
	a.syncHealth()
	if calls := f.mutations(mark); !slices.Equal(calls, []string{fmt.Sprintf("UpsertService %d", webID)}) {
		t.Errorf("a backend going down made the calls %v, want one rewrite of web's table", calls)
	}
	verify(t, f, a.rec, drained(cfg, "web", "10.0.3.3"))
	st = status(t, a)
	h := backendStatus(t, st, "web", "10.0.3.3").Health
	if h.State != api.StateDown || h.LastError != "connect: connection refused" || h.LastCheck.IsZero() || h.Since.IsZero() || h.LatencyMs != 1.5 {
		t.Errorf("down backend's health: %+v", h)
	}
	if w := backendStatus(t, st, "web", "10.0.3.3").Weight; w != 1 {
		t.Errorf("status shows weight %d, want the configured 1", w)
	}
	if s := serviceState(t, st, "web"); s != api.StateUp {
		t.Errorf("web with two healthy backends is %s", s)
	}
	// Nothing changed: nothing is programmed again.
	mark = f.mark()
	a.syncHealth()
	if calls := f.mutations(mark); len(calls) > 0 {
		t.Errorf("an unchanged health made the calls %v", calls)
	}

	// Every backend down: web's table names none, web is down; dns
	// (no checks) is untouched.
	p.set("web/10.0.3.2:80", health.Down, "timeout")
	p.set("web/10.0.3.4:80", health.Down, "timeout")
	a.syncHealth()
	verify(t, f, a.rec, drained(cfg, "web", "10.0.3.2", "10.0.3.3", "10.0.3.4"))
	st = status(t, a)
	if s := serviceState(t, st, "web"); s != api.StateDown {
		t.Errorf("web without a healthy backend is %s, want down", s)
	}
	if s := serviceState(t, st, "dns"); s != api.StateUp {
		t.Errorf("dns is %s, want up", s)
	}

	// All back: the original tables, same IDs.
	_, idsBefore, _ := a.rec.ids(keyOf(t, cfg.Services[0]))
	for _, b := range []string{"10.0.3.2", "10.0.3.3", "10.0.3.4"} {
		p.set("web/"+b+":80", health.Up, "")
	}
	a.syncHealth()
	verify(t, f, a.rec, cfg)
	if _, ids, _ := a.rec.ids(keyOf(t, cfg.Services[0])); !reflect.DeepEqual(ids, idsBefore) {
		t.Errorf("backend IDs changed over down and up: %v, then %v", idsBefore, ids)
	}
	if s := serviceState(t, status(t, a), "web"); s != api.StateUp {
		t.Errorf("web is %s after its backends came back", s)
	}
}

// A drained backend is probed and shown, but its health changes nothing.
func TestHealthOfDrainedBackend(t *testing.T) {
	cfg := checkedConfig()
	cfg.Services[0].Backends[2].Weight = 0
	a, f, _, p := testAgentWith(t, "/etc/xlb/test.yaml", cfg, nil, quiet)
	p.set("web/10.0.3.4:80", health.Down, "status 503")
	mark := f.mark()
	a.syncHealth()
	if calls := f.mutations(mark); len(calls) > 0 {
		t.Errorf("a drained backend going down made the calls %v", calls)
	}
	if h := backendStatus(t, status(t, a), "web", "10.0.3.4").Health; h.State != api.StateDown || h.LastError != "status 503" {
		t.Errorf("drained backend's health: %+v", h)
	}
}

// A reload hands the new backends to the prober and keeps the health of
// the others: a down backend stays out of the table.
func TestHealthAcrossReload(t *testing.T) {
	next := checkedConfig()
	a, f, _, p := testAgentWith(t, "/etc/xlb/test.yaml", checkedConfig(), func(string) (*config.Config, error) { return next, nil }, quiet)
	p.set("web/10.0.3.3:80", health.Down, "refused")
	a.syncHealth()

	next = checkedConfig()
	next.Services[0].Backends = append(next.Services[0].Backends, config.Backend{Address: netip.MustParseAddr("10.0.3.6"), Port: 80, Weight: 1, HealthCheck: httpCheck})
	next.Services = next.Services[:1] // dns removed
	if err := reload(a); err != nil {
		t.Fatal(err)
	}
	if got, want := p.keys(), []string{"web/10.0.3.2:80", "web/10.0.3.3:80", "web/10.0.3.4:80", "web/10.0.3.6:80"}; !slices.Equal(got, want) {
		t.Errorf("prober targets after reload %v, want %v", got, want)
	}
	verify(t, f, a.rec, drained(next, "web", "10.0.3.3"))
}

// A failed apply of a health change is recorded and retried like a failed
// reload.
func TestHealthApplyFailure(t *testing.T) {
	cfg := checkedConfig()
	a, f, _, p := testAgentWith(t, "/etc/xlb/test.yaml", cfg, nil, quiet)
	webID, _, _ := a.rec.ids(keyOf(t, cfg.Services[0]))
	f.failKey[webID] = errInjected
	p.set("web/10.0.3.3:80", health.Down, "refused")
	a.syncHealth()
	if st := status(t, a); st.Config.Result != api.ResultError || !strings.Contains(st.Config.Error, errInjected.Error()) {
		t.Errorf("after a failed apply: %+v", st.Config)
	}
	delete(f.failKey, webID)
	a.retryEvery = 0
	a.retry()
	if st := status(t, a); st.Config.Result != api.ResultOK {
		t.Errorf("after the retry: %+v", st.Config)
	}
	verify(t, f, a.rec, drained(cfg, "web", "10.0.3.3"))
}

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Run follows the prober's Changes: a backend that goes down leaves the
// table without any other trigger, and the change is logged.
func TestRunFollowsHealth(t *testing.T) {
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg := checkedConfig()
	a, f, _, p := testAgentWith(t, "/etc/xlb/test.yaml", cfg, nil, log)
	a.pollEvery = time.Hour // only Changes can trigger

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	select {
	case <-p.running:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not start the prober")
	}

	p.set("web/10.0.3.2:80", health.Up, "")
	p.set("web/10.0.3.4:80", health.Down, "GET http://10.0.3.4:80/: status 500")
	testenv.EventuallyTrue(t, 5*time.Second, "the down backend to leave the table", func() bool {
		ds, _ := f.serviceByKey(keyOf(t, cfg.Services[0]))
		_, ids, _ := a.rec.ids(keyOf(t, cfg.Services[0]))
		return !slices.Contains(ds.Table, ids[netip.MustParseAddrPort("10.0.3.4:80")])
	})
	p.set("web/10.0.3.2:80", health.Down, "timeout")
	p.set("web/10.0.3.3:80", health.Down, "timeout")
	testenv.EventuallyTrue(t, 5*time.Second, "web to be down", func() bool { return serviceState(t, status(t, a), "web") == api.StateDown })
	p.set("web/10.0.3.3:80", health.Up, "")
	testenv.EventuallyTrue(t, 5*time.Second, "web to be up", func() bool { return serviceState(t, status(t, a), "web") == api.StateUp })

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	select {
	case <-p.stopped:
	default:
		t.Error("Run returned before the prober stopped")
	}

	out := logs.String()
	for _, want := range []string{
		`level=WARN msg="backend failed its health checks: it gets no new flows, and its open connections break" service=web backend=10.0.3.4:80 from=unknown to=down check=http error="GET http://10.0.3.4:80/: status 500" fix="check the server at 10.0.3.4:80 (GET http://10.0.3.4:80/ must answer 200-399 within 500ms); it gets new flows again after 2 successful checks in a row"`,
		`level=ERROR msg="service has no healthy backend: the node drops its packets (drop_no_backend)" service=web`,
		`level=INFO msg="backend passes its health checks again: it gets new flows" service=web backend=10.0.3.3:80 from=down to=up`,
		`level=INFO msg="service has a healthy backend again" service=web`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks\n%s\nin:\n%s", want, out)
		}
	}
	// Unknown to up is routine: not logged at info.
	if strings.Contains(out, "backend=10.0.3.2:80 from=unknown to=up") {
		t.Errorf("a first successful probe was logged at info:\n%s", out)
	}
}

// TestTargetKeyAndDownSet: keys name the service and the backend's address
// and port, service names with a '/' (a cluster's) included, and downSet
// finds the down backends of the configuration from them alone,
// ignoring healthy results and keys of backends the configuration lacks.
func TestTargetKeyAndDownSet(t *testing.T) {
	cfg := cfgOf(
		svc("default/web:http", "10.99.0.1", 80, config.TCP, config.DSRIPIP, be("10.0.3.2", 1), be("10.0.3.3", 1)),
		svc("dns", "10.99.0.2", 53, config.UDP, config.DSRGUE, be("10.0.3.2", 1)),
	)
	web, dns := cfg.Services[0], cfg.Services[1]
	if k := TargetKey(web, web.Backends[1]); k != "default/web:http/10.0.3.3:80" {
		t.Fatalf("TargetKey = %q", k)
	}
	if k := TargetKey(dns, dns.Backends[0]); k != "dns/10.0.3.2:53" {
		t.Fatalf("TargetKey = %q", k)
	}
	down := health.Result{State: health.Down}
	snap := map[string]health.Result{
		"default/web:http/10.0.3.3:80": down,
		"default/web:http/10.0.3.2:80": {State: health.Up},
		"dns/10.0.3.2:53":              {State: health.Unknown},
		"dns/10.0.3.9:53":              down, // not a backend of dns
		"dns/10.0.3.2:54":              down, // another port
		"gone/10.0.3.2:80":             down, // no such service
		"default/10.0.3.3:80":          down, // a prefix of a name
		"garbage":                      down,
	}
	got := downSet(cfg, snap)
	if want := map[string]bool{"default/web:http/10.0.3.3:80": true}; !maps.Equal(got, want) {
		t.Fatalf("downSet = %v, want %v", got, want)
	}
	if got := downSet(cfg, nil); len(got) != 0 {
		t.Fatalf("downSet of nothing = %v", got)
	}
}

// TestHealthAgainstReference: over random configurations and random down
// sets, withHealth and servicesDown answer as the plain definitions do
// (every backend's key looked up in down), service names with a '/'
// included.
func TestHealthAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := range 500 {
		var svcs []config.Service
		for i := range 1 + rng.IntN(5) {
			var bes []config.Backend
			for j := range 1 + rng.IntN(4) {
				bes = append(bes, be(fmt.Sprint("10.0.3.", 2+j), uint32(rng.IntN(3))))
			}
			svcs = append(svcs, svc(fmt.Sprintf("ns/s%d", i), fmt.Sprint("10.99.0.", i+1), uint16(80+rng.IntN(2)), config.TCP, config.DSRIPIP, bes...))
		}
		cfg := cfgOf(svcs...)
		down := map[string]bool{}
		for _, s := range cfg.Services {
			for _, b := range s.Backends {
				if rng.IntN(3) == 0 {
					down[TargetKey(s, b)] = true
				}
			}
		}
		if rng.IntN(4) == 0 {
			down["ns/s9/10.0.3.2:80"] = true // a service the configuration lacks
		}
		// The references.
		want := *cfg
		want.Services = nil
		wantDown := map[string]bool{}
		for _, s := range cfg.Services {
			s.Backends = slices.Clone(s.Backends)
			active, up := false, false
			for j, b := range s.Backends {
				if b.Weight > 0 && down[TargetKey(s, b)] {
					s.Backends[j].Weight = 0
				}
				if b.Weight > 0 {
					active = true
					up = up || !down[TargetKey(s, b)]
				}
			}
			if active && !up {
				wantDown[s.Name] = true
			}
			want.Services = append(want.Services, s)
		}
		if got := withHealth(cfg, down); !reflect.DeepEqual(got, &want) && !(len(down) == 0 && got == cfg) {
			t.Fatalf("trial %d: withHealth = %+v, want %+v", trial, got.Services, want.Services)
		}
		if got := servicesDown(cfg, down); !maps.Equal(got, wantDown) {
			t.Fatalf("trial %d: servicesDown = %v, want %v", trial, got, wantDown)
		}
	}
}

// TestTargetsKept: targets given the last call's services answers as
// targets from scratch, over random sequences of configurations
// (services added, removed, renamed, their backends and checks changed),
// and reuses the targets of the services that did not change.
// TestTargetsKept walks random configurations through targetChanges,
// applying each result to a set of targets as the prober does, and
// checks that set against every target of the configuration built from
// scratch: a change of a backend's address, port, weight or check, a
// service that comes or goes, and one that keeps its backends (whose
// targets must be reused, not built again).
func TestTargetsKept(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	var before map[string]probed
	held := map[string]health.Target{} // what the prober holds
	reused, removed := 0, 0
	for step := range 500 {
		var svcs []config.Service
		for i := range 6 {
			if rng.IntN(4) == 0 {
				continue
			}
			var bes []config.Backend
			for j := range 1 + rng.IntN(3) {
				b := be(fmt.Sprint("10.0.3.", 2+j+rng.IntN(2)), uint32(rng.IntN(2)))
				if rng.IntN(8) == 0 {
					b.HealthCheck = httpCheck
				}
				bes = append(bes, b)
			}
			svcs = append(svcs, svc(fmt.Sprint("s", i), fmt.Sprint("10.99.0.", i+1), uint16(80+rng.IntN(2)), config.TCP, config.DSRIPIP, bes...))
		}
		cfg := cfgOf(svcs...)
		all, _, _ := targetChanges(cfg, nil)
		want := map[string]health.Target{}
		for _, tg := range all {
			want[tg.Key] = tg
		}
		add, remove, now := targetChanges(cfg, before)
		for _, key := range remove {
			delete(held, key)
		}
		removed += len(remove)
		for _, tg := range add {
			held[tg.Key] = tg
		}
		if !maps.Equal(held, want) {
			t.Fatalf("step %d: the changes lead to\n%+v\nfrom scratch\n%+v", step, held, want)
		}
		for name, p := range now {
			if q, ok := before[name]; ok && len(p.targets) > 0 && &p.targets[0] == &q.targets[0] {
				reused++
			}
		}
		before = now
	}
	if reused == 0 || removed == 0 {
		t.Errorf("%d services' targets reused, %d targets removed: the walk missed a case", reused, removed)
	}
}
