package agent

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/dataplane/lb"
	"github.com/xlbproject/xlb/internal/maglev"
)

const testSize = 251 // a small prime keeps the tests fast

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func be(addr string, weight uint32) config.Backend {
	return config.Backend{Address: netip.MustParseAddr(addr), Weight: weight}
}

func svc(name, vip string, port uint16, proto config.Protocol, fwd config.Forwarding, backends ...config.Backend) config.Service {
	s := config.Service{Name: name, VIP: netip.MustParseAddr(vip), Port: port, Protocol: proto, Forwarding: fwd}
	for _, b := range backends {
		b.Port = port
		s.Backends = append(s.Backends, b)
	}
	return s
}

func cfgOf(svcs ...config.Service) *config.Config {
	return &config.Config{Node: config.Node{Interface: "eth0"}, API: config.API{Socket: "/x.sock"}, Services: svcs}
}

func web(backends ...config.Backend) config.Service {
	return svc("web", "10.99.0.1", 80, config.TCP, config.DSRIPIP, backends...)
}

func dns(backends ...config.Backend) config.Service {
	return svc("dns", "10.99.0.2", 53, config.UDP, config.DSRGUE, backends...)
}

func baseConfig() *config.Config {
	return cfgOf(
		web(be("10.0.3.2", 1), be("10.0.3.3", 1), be("10.0.3.4", 2)),
		// 10.0.3.2 serves both: it must get one backend ID per service.
		dns(be("10.0.3.2", 1), be("10.0.3.5", 1)),
	)
}

func keyOf(t *testing.T, s config.Service) lb.ServiceKey {
	t.Helper()
	k, err := serviceKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func setup(t *testing.T) (*fakeDP, *Reconciler) {
	t.Helper()
	f := newFake(testSize, 16, 64)
	r, err := newReconciler(f, quiet, f.maxServices, f.maxBackends)
	if err != nil {
		t.Fatal(err)
	}
	return f, r
}

func mustApply(t *testing.T, r *Reconciler, cfg *config.Config) {
	t.Helper()
	if err := r.Apply(cfg); err != nil {
		t.Fatalf("Apply: %v", err)
	}
}

// verify checks that the fake data plane serves exactly cfg: every slot of
// every table reaches the backend Maglev picks, every (service, backend)
// pair has its own ID, nothing leaked, and no ordering rule was broken.
func verify(t *testing.T, f *fakeDP, r *Reconciler, cfg *config.Config) {
	t.Helper()
	if len(f.violations) > 0 {
		t.Fatalf("data plane rules broken:\n%s", strings.Join(f.violations, "\n"))
	}
	if len(f.services) != len(cfg.Services) {
		t.Errorf("data plane has %d services, want %d", len(f.services), len(cfg.Services))
	}
	owner := make(map[uint32]string)
	pairs := 0
	for _, s := range cfg.Services {
		key := keyOf(t, s)
		ds, ok := f.serviceByKey(key)
		if !ok {
			t.Errorf("service %s not installed", s.Name)
			continue
		}
		wantEncap, _ := encapOf(s.Forwarding, s.Flows)
		if ds.Encap != wantEncap {
			t.Errorf("service %s: encap %d, want %d", s.Name, ds.Encap, wantEncap)
		}
		_, ids, _ := r.ids(key)
		if len(ids) != len(s.Backends) {
			t.Errorf("service %s owns %d backend IDs, want %d", s.Name, len(ids), len(s.Backends))
		}
		for ap, id := range ids {
			// DSR delivers to the address alone: without owners, an
			// adopted ID of another port of the same address may serve.
			if held := f.backends[id]; held != ap && (s.Forwarding.Translates() || held.Addr() != ap.Addr()) {
				t.Errorf("service %s backend %s: ID %d holds %s", s.Name, ap, id, f.backends[id])
			}
			if o, dup := owner[id]; dup {
				t.Errorf("backend ID %d used by services %s and %s", id, o, s.Name)
			}
			owner[id] = s.Name
		}
		pairs += len(s.Backends)
		want := expectedSlots(t, s)
		for i, id := range ds.Table {
			if !want[i].IsValid() {
				if id != noBackend {
					t.Fatalf("service %s slot %d: backend %d, want none", s.Name, i, id)
				}
				continue
			}
			if id != ids[want[i]] {
				t.Fatalf("service %s slot %d: backend ID %d, want %d (%s)", s.Name, i, id, ids[want[i]], want[i])
			}
		}
	}
	if len(f.backends) != pairs {
		t.Errorf("data plane has %d backends, want %d (one per service-backend pair)", len(f.backends), pairs)
	}
}

// expectedSlots is, per slot, the backend Maglev assigns (invalid: none).
func expectedSlots(t *testing.T, s config.Service) []netip.AddrPort {
	t.Helper()
	out := make([]netip.AddrPort, testSize)
	var members []maglev.Backend
	var aps []netip.AddrPort
	active := false
	for _, b := range s.Backends {
		ap := netip.AddrPortFrom(b.Address, b.Port)
		members = append(members, maglev.Backend{Key: ap.String(), Weight: b.Weight})
		aps = append(aps, ap)
		active = active || b.Weight > 0
	}
	if !active {
		return out
	}
	slots, err := maglev.Build(members, testSize)
	if err != nil {
		t.Fatal(err)
	}
	for i, idx := range slots {
		out[i] = aps[idx]
	}
	return out
}

func count(calls []string, method string) int {
	n := 0
	for _, c := range calls {
		if strings.HasPrefix(c, method+" ") {
			n++
		}
	}
	return n
}

func TestApplyInitial(t *testing.T) {
	f, r := setup(t)
	cfg := baseConfig()
	mustApply(t, r, cfg)
	verify(t, f, r, cfg)

	// Lowest free IDs, in configuration order.
	for i, s := range cfg.Services {
		id, _, _ := r.ids(keyOf(t, s))
		if id != uint32(i) {
			t.Errorf("service %s has ID %d, want %d", s.Name, id, i)
		}
	}
	calls := f.mutations(0)
	if got := count(calls, "UpsertBackend"); got != 5 {
		t.Errorf("%d UpsertBackend calls, want 5: %v", got, calls)
	}
	if got := count(calls, "UpsertService"); got != 2 {
		t.Errorf("%d UpsertService calls, want 2: %v", got, calls)
	}
}

func TestApplyUnchangedTouchesNothing(t *testing.T) {
	f, r := setup(t)
	mustApply(t, r, baseConfig())

	for _, tc := range []struct {
		name string
		cfg  func() *config.Config
	}{
		{"same config", baseConfig},
		{"backends reordered, service renamed", func() *config.Config {
			c := baseConfig()
			slices.Reverse(c.Services[0].Backends)
			c.Services[1].Name = "resolver"
			return c
		}},
		{"services reordered", func() *config.Config {
			c := baseConfig()
			slices.Reverse(c.Services)
			return c
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mark := f.mark()
			cfg := tc.cfg()
			mustApply(t, r, cfg)
			if calls := f.mutations(mark); len(calls) > 0 {
				t.Errorf("re-apply changed the data plane: %v", calls)
			}
			verify(t, f, r, cfg)
		})
	}
}

func TestApplyChangesOnlyTheChangedService(t *testing.T) {
	for _, tc := range []struct {
		name          string
		web           config.Service
		upsertBackend int
		deleteBackend int
	}{
		{"backend added", web(be("10.0.3.2", 1), be("10.0.3.3", 1), be("10.0.3.4", 2), be("10.0.3.9", 1)), 1, 0},
		{"backend removed", web(be("10.0.3.2", 1), be("10.0.3.4", 2)), 0, 1},
		{"backend replaced", web(be("10.0.3.2", 1), be("10.0.3.8", 1), be("10.0.3.4", 2)), 1, 1},
		{"weight changed", web(be("10.0.3.2", 1), be("10.0.3.3", 3), be("10.0.3.4", 2)), 0, 0},
		{"drained", web(be("10.0.3.2", 1), be("10.0.3.3", 0), be("10.0.3.4", 2)), 0, 0},
		{"forwarding changed", func() config.Service {
			s := web(be("10.0.3.2", 1), be("10.0.3.3", 1), be("10.0.3.4", 2))
			s.Forwarding = config.DSRGUE
			return s
		}(), 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, r := setup(t)
			before := baseConfig()
			mustApply(t, r, before)
			webID, oldIDs, _ := r.ids(keyOf(t, before.Services[0]))
			dnsBefore, _ := f.serviceByKey(keyOf(t, before.Services[1]))

			cfg := baseConfig()
			cfg.Services[0] = tc.web
			mark := f.mark()
			mustApply(t, r, cfg)
			verify(t, f, r, cfg)

			calls := f.mutations(mark)
			if got := count(calls, "UpsertService"); got != 1 || !slices.Contains(calls, fmt.Sprintf("UpsertService %d", webID)) {
				t.Errorf("want exactly one UpsertService, of web (ID %d); calls: %v", webID, calls)
			}
			if got := count(calls, "UpsertBackend"); got != tc.upsertBackend {
				t.Errorf("%d UpsertBackend calls, want %d: %v", got, tc.upsertBackend, calls)
			}
			if got := count(calls, "DeleteBackend"); got != tc.deleteBackend {
				t.Errorf("%d DeleteBackend calls, want %d: %v", got, tc.deleteBackend, calls)
			}
			// Order: new backends, then the table, then old backends.
			upsert := slices.Index(calls, fmt.Sprintf("UpsertService %d", webID))
			for i, c := range calls {
				if (strings.HasPrefix(c, "UpsertBackend") && i > upsert) || (strings.HasPrefix(c, "DeleteBackend") && i < upsert) {
					t.Errorf("call %q at %d is on the wrong side of the table swap at %d: %v", c, i, upsert, calls)
				}
			}
			// Kept backends keep their IDs (and so their counters).
			newID, newIDs, _ := r.ids(keyOf(t, cfg.Services[0]))
			if newID != webID {
				t.Errorf("web's ID changed from %d to %d", webID, newID)
			}
			for ap, id := range newIDs {
				if old, ok := oldIDs[ap]; ok && old != id {
					t.Errorf("backend %s changed ID from %d to %d", ap, old, id)
				}
			}
			dnsAfter, _ := f.serviceByKey(keyOf(t, cfg.Services[1]))
			if !slices.Equal(dnsAfter.Table, dnsBefore.Table) {
				t.Error("dns's table changed")
			}
		})
	}
}

func TestApplyAddRemoveServicesReusesIDs(t *testing.T) {
	f, r := setup(t)
	base := baseConfig()
	mustApply(t, r, base)
	_, dnsIDs, _ := r.ids(keyOf(t, base.Services[1]))
	f.svcCounters[1] = lb.Counters{Packets: 5, Bytes: 500}

	ntp := svc("ntp", "10.99.0.3", 123, config.UDP, config.DSRIPIP, be("10.0.4.1", 1), be("10.0.4.2", 1))
	cfg := cfgOf(base.Services[0], ntp)
	mark := f.mark()
	mustApply(t, r, cfg)
	verify(t, f, r, cfg)

	calls := f.mutations(mark)
	if !slices.Contains(calls, "DeleteService 1") {
		t.Errorf("dns (ID 1) not deleted: %v", calls)
	}
	// The removed service's IDs are free again and reused lowest first.
	ntpID, ntpIDs, _ := r.ids(keyOf(t, ntp))
	if ntpID != 1 {
		t.Errorf("ntp got service ID %d, want the freed ID 1", ntpID)
	}
	var freed, got []uint32
	for _, id := range dnsIDs {
		freed = append(freed, id)
	}
	for _, id := range ntpIDs {
		got = append(got, id)
	}
	slices.Sort(freed)
	slices.Sort(got)
	if !slices.Equal(got, freed) {
		t.Errorf("ntp got backend IDs %v, want the freed %v", got, freed)
	}
	if c := f.svcCounters[1]; c != (lb.Counters{}) {
		t.Errorf("the reused service ID kept the old service's counters %+v", c)
	}
	if slices.Index(calls, "DeleteService 1") > slices.Index(calls, "UpsertService 1") {
		t.Errorf("ID 1 was reused before its old service was deleted: %v", calls)
	}

	// Removing everything leaves nothing behind.
	mustApply(t, r, cfgOf())
	verify(t, f, r, cfgOf())
}

func TestApplyWeightZero(t *testing.T) {
	f, r := setup(t)
	cfg := cfgOf(web(be("10.0.3.2", 1), be("10.0.3.3", 0)))
	mustApply(t, r, cfg)
	verify(t, f, r, cfg)
	_, ids, _ := r.ids(keyOf(t, cfg.Services[0]))
	drained := ids[netip.MustParseAddrPort("10.0.3.3:80")]
	ds, _ := f.serviceByKey(keyOf(t, cfg.Services[0]))
	if _, ok := f.backends[drained]; !ok {
		t.Error("a drained backend must stay in the backend map")
	}
	if slices.Contains(ds.Table, drained) {
		t.Error("a drained backend must get no table slots")
	}

	// All drained: the table names no backend, the backends stay.
	cfg = cfgOf(web(be("10.0.3.2", 0), be("10.0.3.3", 0)))
	mustApply(t, r, cfg)
	verify(t, f, r, cfg)
	ds, _ = f.serviceByKey(keyOf(t, cfg.Services[0]))
	if slices.ContainsFunc(ds.Table, func(id uint32) bool { return id != noBackend }) {
		t.Error("a service without weight > 0 must have an empty table")
	}

	// Undrained: same IDs, no backend written again.
	mark := f.mark()
	cfg = cfgOf(web(be("10.0.3.2", 1), be("10.0.3.3", 1)))
	mustApply(t, r, cfg)
	verify(t, f, r, cfg)
	if calls := f.mutations(mark); count(calls, "UpsertBackend") != 0 {
		t.Errorf("undraining wrote backends again: %v", calls)
	}
	if _, ids2, _ := r.ids(keyOf(t, cfg.Services[0])); ids2[netip.MustParseAddrPort("10.0.3.3:80")] != drained {
		t.Error("undraining changed the backend's ID")
	}
}

// A restarted agent finds the pinned maps: it must keep the IDs and
// counters of what is still configured and remove the rest.
func TestAdoption(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stale bool // the data plane also holds things the new config lacks
	}{
		{"same config", false},
		{"with stale service and backends", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, r := setup(t)
			cfg := baseConfig()
			if tc.stale {
				cfg.Services = append(cfg.Services, svc("old", "10.99.0.9", 443, config.TCP, config.DSRIPIP, be("10.0.9.1", 1)))
				cfg.Services[0].Backends = append(cfg.Services[0].Backends, be("10.0.3.99", 1))
			}
			mustApply(t, r, cfg)
			idsBefore := map[string]map[netip.AddrPort]uint32{}
			svcIDs := map[string]uint32{}
			for _, s := range cfg.Services {
				svcIDs[s.Name], idsBefore[s.Name], _ = r.ids(keyOf(t, s))
			}
			for id := range f.backends {
				f.beCounters[id] = lb.Counters{Packets: uint64(id) + 1, Bytes: 100 * (uint64(id) + 1)}
			}

			// Restart: a new reconciler over the same data plane.
			r2, err := newReconciler(f, quiet, f.maxServices, f.maxBackends)
			if err != nil {
				t.Fatal(err)
			}
			want := baseConfig()
			mark := f.mark()
			mustApply(t, r2, want)
			verify(t, f, r2, want)

			calls := f.mutations(mark)
			if got := count(calls, "UpsertBackend"); got != 0 {
				t.Errorf("adoption rewrote %d backends: %v", got, calls)
			}
			// The reconciler cannot know whether an adopted table is
			// current: it hands each to the data plane once, which keeps
			// those that are (lb.TestUpsertServiceKeepsRecordedTable,
			// TestRestartKeepsTables).
			if got := count(calls, "UpsertService"); got != len(want.Services) {
				t.Errorf("%d UpsertService calls, want %d: %v", got, len(want.Services), calls)
			}
			for _, s := range want.Services {
				id, ids, _ := r2.ids(keyOf(t, s))
				if id != svcIDs[s.Name] {
					t.Errorf("service %s: ID %d after restart, was %d", s.Name, id, svcIDs[s.Name])
				}
				for ap, bid := range ids {
					if idsBefore[s.Name][ap] != bid {
						t.Errorf("service %s backend %s: ID %d after restart, was %d", s.Name, ap, bid, idsBefore[s.Name][ap])
					}
					if c := f.beCounters[bid]; c.Packets != uint64(bid)+1 {
						t.Errorf("service %s backend %s lost its counters: %+v", s.Name, ap, c)
					}
				}
			}
			if tc.stale {
				if got := count(calls, "DeleteService"); got != 1 {
					t.Errorf("%d DeleteService calls, want 1 (the stale service): %v", got, calls)
				}
				// Stale backends go only after every adopted table is rewritten.
				lastUpsert := -1
				for i, c := range calls {
					if strings.HasPrefix(c, "UpsertService") {
						lastUpsert = i
					}
				}
				for i, c := range calls {
					if strings.HasPrefix(c, "DeleteBackend") && i < lastUpsert {
						t.Errorf("%q before the last table rewrite: %v", c, calls)
					}
				}
			}

			mark = f.mark()
			mustApply(t, r2, want)
			if calls := f.mutations(mark); len(calls) > 0 {
				t.Errorf("second apply after restart changed the data plane: %v", calls)
			}
		})
	}
}

// Services that share a backend address keep their own backend IDs across
// a restart when the data plane says which service each backend counts
// for, even if the configuration order changed; without that, forwarding
// must still be right.
func TestAdoptionSharedAddress(t *testing.T) {
	for _, tc := range []struct {
		name   string
		owners bool
	}{{"owners known", true}, {"owners unknown", false}} {
		t.Run(tc.name, func(t *testing.T) {
			f, r := setup(t)
			first := cfgOf(dns(be("10.0.3.2", 1)), web(be("10.0.3.2", 1), be("10.0.3.3", 1)))
			mustApply(t, r, first)
			before := map[string]map[netip.AddrPort]uint32{}
			for _, s := range first.Services {
				_, before[s.Name], _ = r.ids(keyOf(t, s))
			}

			var dp Dataplane = f
			if tc.owners {
				dp = ownerFake{f}
			}
			r2, err := newReconciler(dp, quiet, f.maxServices, f.maxBackends)
			if err != nil {
				t.Fatal(err)
			}
			second := cfgOf(first.Services[1], first.Services[0]) // web first now
			mustApply(t, r2, second)
			verify(t, f, r2, second)
			if !tc.owners {
				return
			}
			for _, s := range second.Services {
				if _, ids, _ := r2.ids(keyOf(t, s)); !maps.Equal(ids, before[s.Name]) {
					t.Errorf("service %s: backend IDs %v after restart, were %v", s.Name, ids, before[s.Name])
				}
			}
		})
	}
}

// While an adopted table has not been rewritten (its write failed), no
// backend it might name may be deleted.
func TestAdoptionPendingTableKeepsBackends(t *testing.T) {
	f, r := setup(t)
	first := cfgOf(dns(be("10.0.3.2", 1)), web(be("10.0.3.2", 1), be("10.0.3.3", 1)))
	mustApply(t, r, first)
	dnsID, _, _ := r.ids(keyOf(t, first.Services[0]))

	r2, err := newReconciler(f, quiet, f.maxServices, f.maxBackends) // owners unknown
	if err != nil {
		t.Fatal(err)
	}
	f.failKey[dnsID] = errInjected
	// web claims 10.0.3.2 by address; it may take the ID dns's table names.
	if err := r2.Apply(cfgOf(first.Services[1], first.Services[0])); !errors.Is(err, errInjected) {
		t.Fatalf("err = %v, want the injected error", err)
	}
	// web drops 10.0.3.2 while dns's old table is still installed.
	next := cfgOf(web(be("10.0.3.3", 1)), first.Services[0])
	if err := r2.Apply(next); !errors.Is(err, errInjected) {
		t.Fatalf("err = %v, want the injected error", err)
	}
	if len(f.violations) > 0 {
		t.Fatalf("data plane rules broken:\n%s", strings.Join(f.violations, "\n"))
	}
	delete(f.failKey, dnsID)
	mustApply(t, r2, next)
	verify(t, f, r2, next)
}

func TestAdoptionFailure(t *testing.T) {
	f := newFake(testSize, 16, 64)
	f.fail["Installed"] = errInjected
	if _, err := newReconciler(f, quiet, 16, 64); !errors.Is(err, errInjected) {
		t.Fatalf("err = %v, want the data plane's error", err)
	}
}

func TestApplyErrorsAreRetried(t *testing.T) {
	t.Run("table write fails for one service", func(t *testing.T) {
		f, r := setup(t)
		cfg := baseConfig()
		f.failKey[1] = errInjected // dns gets ID 1
		err := r.Apply(cfg)
		if !errors.Is(err, errInjected) || !strings.Contains(err.Error(), `"dns"`) {
			t.Fatalf("err = %v, want the injected error naming dns", err)
		}
		if _, ok := f.serviceByKey(keyOf(t, cfg.Services[0])); !ok {
			t.Error("web must be installed although dns failed")
		}
		delete(f.failKey, 1)
		mustApply(t, r, cfg)
		verify(t, f, r, cfg)
	})
	t.Run("backend delete fails", func(t *testing.T) {
		f, r := setup(t)
		mustApply(t, r, baseConfig())
		cfg := cfgOf(web(be("10.0.3.2", 1)))
		f.fail["DeleteBackend"] = errInjected
		if err := r.Apply(cfg); !errors.Is(err, errInjected) {
			t.Fatalf("err = %v, want the injected error", err)
		}
		delete(f.fail, "DeleteBackend")
		mustApply(t, r, cfg)
		verify(t, f, r, cfg)
	})
	t.Run("service delete fails", func(t *testing.T) {
		f, r := setup(t)
		mustApply(t, r, baseConfig())
		cfg := cfgOf(baseConfig().Services[0])
		f.fail["DeleteService"] = errInjected
		if err := r.Apply(cfg); !errors.Is(err, errInjected) {
			t.Fatalf("err = %v, want the injected error", err)
		}
		delete(f.fail, "DeleteService")
		mustApply(t, r, cfg)
		verify(t, f, r, cfg)
	})
	t.Run("backend write fails", func(t *testing.T) {
		f, r := setup(t)
		f.fail["UpsertBackend"] = errInjected
		if err := r.Apply(baseConfig()); !errors.Is(err, errInjected) {
			t.Fatalf("err = %v, want the injected error", err)
		}
		if len(f.services) != 0 {
			t.Error("a service was installed without its backends")
		}
		delete(f.fail, "UpsertBackend")
		mustApply(t, r, baseConfig())
		verify(t, f, r, baseConfig())
	})
}

func TestApplyLimits(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		maxServices, maxBackends uint32
		want                     string
	}{
		{"services", 1, 64, "no free service ID"},
		{"backends", 16, 4, "no free backend ID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(testSize, tc.maxServices, tc.maxBackends)
			r, err := newReconciler(f, quiet, tc.maxServices, tc.maxBackends)
			if err != nil {
				t.Fatal(err)
			}
			err = r.Apply(baseConfig())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if len(f.violations) > 0 {
				t.Fatal(f.violations)
			}
			// The first service fits and is served.
			if _, ok := f.serviceByKey(keyOf(t, baseConfig().Services[0])); !ok {
				t.Error("web must be installed")
			}
		})
	}
}

// TestApplyReplaceAtLimit: with every backend ID in use, replacing
// backends of a service still works (in two table changes), and no table
// ever names a deleted backend; adding one more backend still fails.
func TestApplyReplaceAtLimit(t *testing.T) {
	const maxBackends = 5 // baseConfig's 3 + 2
	f := newFake(testSize, 16, maxBackends)
	r, err := newReconciler(f, quiet, 16, maxBackends)
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, r, baseConfig())
	for _, cfg := range []*config.Config{
		// One backend replaced.
		cfgOf(web(be("10.0.3.2", 1), be("10.0.3.3", 1), be("10.0.3.9", 2)), dns(be("10.0.3.2", 1), be("10.0.3.5", 1))),
		// Every backend of a service replaced.
		cfgOf(web(be("10.0.3.6", 1), be("10.0.3.7", 1), be("10.0.3.8", 2)), dns(be("10.0.3.2", 1), be("10.0.3.5", 1))),
	} {
		mustApply(t, r, cfg)
		verify(t, f, r, cfg)
	}
	over := cfgOf(web(be("10.0.3.6", 1), be("10.0.3.7", 1), be("10.0.3.8", 2), be("10.0.3.10", 1)), dns(be("10.0.3.2", 1), be("10.0.3.5", 1)))
	if err := r.Apply(over); err == nil || !strings.Contains(err.Error(), "no free backend ID") {
		t.Fatalf("a sixth backend with room for %d: err = %v", maxBackends, err)
	}
	if len(f.violations) > 0 {
		t.Fatal(f.violations)
	}
}

// TestApplyAfterFailedTwoStepReplace: a service whose replacement at the
// backend limit failed after its first step holds a partial table, so
// the configuration it had before must be written again, not taken for
// the one installed.
func TestApplyAfterFailedTwoStepReplace(t *testing.T) {
	const maxBackends = 5 // baseConfig's backends
	f := newFake(testSize, 16, maxBackends)
	r, err := newReconciler(f, quiet, 16, maxBackends)
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, r, baseConfig())
	webID, _, ok := r.ids(keyOf(t, baseConfig().Services[0]))
	if !ok {
		t.Fatal("web has no ID")
	}
	swaps := 0
	f.swapHook = func(id uint32) {
		if id != webID {
			return
		}
		if swaps++; swaps == 2 { // the second step
			f.mu.Lock()
			f.failKey[id] = errors.New("injected")
			f.mu.Unlock()
		}
	}
	replaced := cfgOf(web(be("10.0.3.6", 1), be("10.0.3.7", 1), be("10.0.3.8", 2)), dns(be("10.0.3.2", 1), be("10.0.3.5", 1)))
	if err := r.Apply(replaced); err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("Apply with the second step failing: err = %v", err)
	}
	if swaps != 2 {
		t.Fatalf("%d swaps of web, want 2 (a replacement in two steps)", swaps)
	}
	f.swapHook = nil
	f.mu.Lock()
	delete(f.failKey, webID)
	f.mu.Unlock()
	mustApply(t, r, baseConfig())
	verify(t, f, r, baseConfig())
}

func TestApplyRejectsBadServices(t *testing.T) {
	for _, tc := range []struct {
		name string
		svc  config.Service
		want string
	}{
		{"duplicate key", svc("web2", "10.99.0.1", 80, config.TCP, config.DSRIPIP, be("10.0.3.7", 1)), "already used"},
		{"duplicate backend", svc("x", "10.99.0.7", 80, config.TCP, config.DSRIPIP, be("10.0.3.7", 1), be("10.0.3.7", 2)), "listed twice"},
		{"bad protocol", svc("x", "10.99.0.7", 80, "sctp", config.DSRIPIP, be("10.0.3.7", 1)), "unknown protocol"},
		{"bad forwarding", svc("x", "10.99.0.7", 80, config.TCP, "snat", be("10.0.3.7", 1)), "unknown forwarding"},
		{"nat with flows", withFlows(svc("x", "10.99.0.7", 80, config.TCP, config.NAT, be("10.0.3.7", 1)), config.FlowsStateful), "takes no flows mode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, r := setup(t)
			cfg := baseConfig()
			cfg.Services = append(cfg.Services, tc.svc)
			err := r.Apply(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			verify(t, f, r, baseConfig()) // the good services are served
		})
	}
}

// A random walk over configurations: after every Apply the data plane must
// serve exactly the configuration, without leaks or ordering violations,
// also across simulated restarts.
func TestApplyRandomWalk(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	f, r := setup(t)
	vips := []string{"10.99.0.1", "10.99.0.2", "10.99.0.3", "10.99.0.4"}
	addrs := []string{"10.0.3.1", "10.0.3.2", "10.0.3.3", "10.0.3.4", "10.0.3.5", "10.0.3.6"}
	for step := range 300 {
		var svcs []config.Service
		for i, vip := range vips {
			if rng.IntN(3) == 0 {
				continue
			}
			fwd := config.DSRIPIP
			if rng.IntN(2) == 0 {
				fwd = config.DSRGUE
			}
			var bes []config.Backend
			for _, a := range addrs {
				if rng.IntN(2) == 0 {
					bes = append(bes, be(a, uint32(rng.IntN(3))))
				}
			}
			svcs = append(svcs, svc(fmt.Sprint("s", i), vip, 80, config.TCP, fwd, bes...))
		}
		cfg := cfgOf(svcs...)
		if step%50 == 49 {
			var err error
			var dp Dataplane = f
			if step%100 == 49 {
				dp = ownerFake{f}
			}
			if r, err = newReconciler(dp, quiet, f.maxServices, f.maxBackends); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.Apply(cfg); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		verify(t, f, r, cfg)
		if t.Failed() {
			t.Fatalf("step %d failed", step)
		}
	}
}

// manyServices is a configuration of n services on one VIP with the
// given backends each (the last octets; every service its own /24).
func manyServices(n int, hosts ...int) *config.Config {
	var svcs []config.Service
	for i := range n {
		var bes []config.Backend
		for _, h := range hosts {
			bes = append(bes, be(fmt.Sprintf("10.0.%d.%d", 10+i, h), 1))
		}
		svcs = append(svcs, svc(fmt.Sprint("s", i), "10.99.0.1", uint16(8000+i), config.TCP, config.DSRIPIP, bes...))
	}
	return cfgOf(svcs...)
}

// TestApplyWritesTablesInParallel: an Apply that changes many services
// writes up to r.workers tables at once, never two of one service, and
// deletes a service's leaving backends only once its new table is in
// place (the fake flags a delete during a swap that names the backend).
func TestApplyWritesTablesInParallel(t *testing.T) {
	const workers = 3
	f, r := setup(t)
	r.workers = workers
	// The first `workers` swaps wait for each other: with fewer at once
	// they time out and maxInflight tells.
	var mu sync.Mutex
	arrived, together := 0, make(chan struct{})
	f.swapHook = func(uint32) {
		mu.Lock()
		arrived++
		if arrived == workers {
			close(together)
		}
		first := arrived <= workers
		mu.Unlock()
		if first {
			select {
			case <-together:
			case <-time.After(5 * time.Second):
			}
		}
	}
	cfg := manyServices(10, 1, 2, 3)
	mustApply(t, r, cfg)
	verify(t, f, r, cfg)
	if f.maxInflight != workers {
		t.Errorf("at most %d tables written at once, want %d", f.maxInflight, workers)
	}

	// Every service replaces a backend and drains another.
	f.swapHook = func(uint32) { time.Sleep(time.Millisecond) }
	next := manyServices(10, 1, 2, 4)
	for i := range next.Services {
		next.Services[i].Backends[1].Weight = 0
	}
	mark := f.mark()
	mustApply(t, r, next)
	verify(t, f, r, next)
	calls := f.mutations(mark)
	if got := count(calls, "UpsertService"); got != 10 {
		t.Errorf("%d UpsertService calls, want 10: %v", got, calls)
	}
	if got := count(calls, "DeleteBackend"); got != 10 {
		t.Errorf("%d DeleteBackend calls, want 10: %v", got, calls)
	}
	if f.maxInflight > workers {
		t.Errorf("%d tables written at once, want at most %d", f.maxInflight, workers)
	}
}

// TestApplyWavesAtBackendLimit: when the backend IDs run out in the
// middle of an Apply, the services planned so far are installed and
// release their leaving backends first, as one by one they would: an
// Apply that replaces every backend of every service needs no more IDs
// than the largest service's new backends, and no two-step replacement.
func TestApplyWavesAtBackendLimit(t *testing.T) {
	const maxBackends = 3*2 + 2
	f := newFake(testSize, 16, maxBackends)
	r, err := newReconciler(f, quiet, 16, maxBackends)
	if err != nil {
		t.Fatal(err)
	}
	r.workers = 4
	mustApply(t, r, manyServices(3, 1, 2))
	next := manyServices(3, 3, 4)
	mark := f.mark()
	mustApply(t, r, next)
	verify(t, f, r, next)
	if got := count(f.mutations(mark), "UpsertService"); got != 3 {
		t.Errorf("%d UpsertService calls, want 3 (one per service): %v", got, f.mutations(mark))
	}
}

// TestApplyRemovesServicesInParallel: removing many services (and adding
// others on their freed IDs in the same Apply) leaves nothing behind.
func TestApplyRemovesServicesInParallel(t *testing.T) {
	f, r := setup(t)
	r.workers = 4
	mustApply(t, r, manyServices(12, 1, 2))
	cfg := cfgOf(web(be("10.0.3.2", 1)), dns(be("10.0.3.5", 1)))
	mustApply(t, r, cfg)
	verify(t, f, r, cfg)
	for _, s := range cfg.Services {
		if id, _, _ := r.ids(keyOf(t, s)); id > 1 {
			t.Errorf("service %s got ID %d, want a freed one of 0 and 1", s.Name, id)
		}
	}
}

// benchConfig is services services on port 80 of VIPs 10.99.x.y, each
// with backends backends of weight 1 on hosts of their own.
func benchConfig(services, backends int) *config.Config {
	cfg := &config.Config{}
	for i := range services {
		s := config.Service{Name: fmt.Sprintf("svc%d", i), VIP: netip.AddrFrom4([4]byte{10, 99, byte(i / 250), byte(1 + i%250)}), Port: 80,
			Protocol: config.TCP, Forwarding: config.DSRIPIP}
		for j := range backends {
			s.Backends = append(s.Backends, config.Backend{Address: netip.AddrFrom4([4]byte{10, byte(2 + j), byte(i / 250), byte(1 + i%250)}), Port: 80, Weight: 1})
		}
		cfg.Services = append(cfg.Services, s)
	}
	return cfg
}

// BenchmarkApplyOneChange is the reconciler's work when one backend of
// one of 1000 services (10 backends each) changes, as a cluster's
// EndpointSlice change comes: the pass over every service, and one table.
func BenchmarkApplyOneChange(b *testing.B) {
	const services, backends = 1000, 10
	f := newFake(testSize, config.MaxServices, config.MaxBackends)
	r, err := newReconciler(f, quiet, f.maxServices, f.maxBackends)
	if err != nil {
		b.Fatal(err)
	}
	cfg := benchConfig(services, backends)
	if err := r.Apply(cfg); err != nil {
		b.Fatal(err)
	}
	for i := 0; b.Loop(); i++ {
		// Service i%services's first backend toggles its weight.
		s := &cfg.Services[i%services]
		s.Backends[0].Weight = 3 - s.Backends[0].Weight
		if err := r.Apply(cfg); err != nil {
			b.Fatal(err)
		}
	}
}
