package agent

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/chain"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/dataplane/lb"
	"github.com/xlbproject/xlb/internal/maglev"
)

func chainedConfig(history []config.Generation, addrs ...string) *config.Config {
	var bs []config.Backend
	for _, a := range addrs {
		bs = append(bs, config.Backend{Address: netip.MustParseAddr(a), Port: 80, Weight: 1})
	}
	return &config.Config{Services: []config.Service{{
		Name: "web", VIP: netip.MustParseAddr("10.99.0.1"), Port: 80, Protocol: config.TCP,
		Forwarding: config.DSRGUE, Flows: config.FlowsDaisyChain, History: history, Backends: bs,
	}}}
}

// installed returns the only service of f.
func installed(t *testing.T, f *fakeDP) lb.Service {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.services) != 1 {
		t.Fatalf("%d services installed, want 1", len(f.services))
	}
	for _, s := range f.services {
		return s
	}
	panic("unreachable")
}

func newChainReconciler(t *testing.T, now time.Time) (*Reconciler, *fakeDP) {
	t.Helper()
	f := newFake(testSize, 16, 64)
	r, err := newReconciler(f, quiet, f.maxServices, f.maxBackends)
	if err != nil {
		t.Fatal(err)
	}
	r.now = func() time.Time { return now }
	return r, f
}

// Every instance writes the same hints for the same slots: one that saw
// the change itself, one given the history in its configuration from the
// start, and one started after the change with only the configuration.
func TestChainHintsAgree(t *testing.T) {
	changed := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	before := []string{"10.0.3.2", "10.0.3.3", "10.0.3.4"}
	after := []string{"10.0.3.3", "10.0.3.4"}
	history := []config.Generation{{Until: changed, Backends: chainedConfig(nil, before...).Services[0].Backends}}

	// Saw the change: no history in the file, the agent records it.
	saw, sawDP := newChainReconciler(t, changed)
	mustApply(t, saw, chainedConfig(nil, before...))
	first := installed(t, sawDP)
	if first.Encap != lb.EncapGUEHint || first.Generation != 0 || slices.ContainsFunc(first.Chain, func(c lb.ChainSlot) bool { return c.Prev.IsValid() }) {
		t.Fatalf("first table: encap %d, generation %d; want %d, 0 and no previous owners", first.Encap, first.Generation, lb.EncapGUEHint)
	}
	owners := tableAddrs(sawDP, first)
	mustApply(t, saw, chainedConfig(nil, after...))
	want := installed(t, sawDP)
	now := tableAddrs(sawDP, want)

	// Given the history by the file, before and after.
	told, toldDP := newChainReconciler(t, changed.Add(time.Hour))
	mustApply(t, told, chainedConfig(nil, before...))
	mustApply(t, told, chainedConfig(history, after...))
	// Started after the change.
	late, lateDP := newChainReconciler(t, changed.Add(time.Hour))
	mustApply(t, late, chainedConfig(history, after...))

	if want.Generation != uint32(changed.Unix()) {
		t.Errorf("generation %d, want the change's time %d", want.Generation, changed.Unix())
	}
	moved := 0
	for i, c := range want.Chain {
		if owners[i] == now[i] {
			if c != (lb.ChainSlot{}) {
				t.Fatalf("slot %d kept its owner %s but hints %+v", i, now[i], c)
			}
			continue
		}
		moved++
		if c.Prev != owners[i] || c.Changed != uint32(changed.Unix()) {
			t.Fatalf("slot %d moved from %s at %d, hint %+v", i, owners[i], changed.Unix(), c)
		}
	}
	if moved < testSize/4 {
		t.Errorf("%d of %d slots name a previous owner, want at least the removed backend's third", moved, testSize)
	}
	for name, dp := range map[string]*fakeDP{"given the history": toldDP, "started late": lateDP} {
		got := installed(t, dp)
		if got.Generation != want.Generation || !slices.Equal(got.Chain, want.Chain) {
			t.Errorf("an instance %s writes other hints than one that saw the change", name)
		}
	}

	// The same backends again: nothing is recorded twice, nothing written.
	calls := len(sawDP.calls)
	mustApply(t, saw, chainedConfig(nil, after...))
	if len(sawDP.calls) != calls {
		t.Errorf("an unchanged configuration wrote to the data plane: %v", sawDP.calls[calls:])
	}
}

// tableAddrs is the address of the backend each slot of s names.
func tableAddrs(f *fakeDP, s lb.Service) []netip.Addr {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]netip.Addr, len(s.Table))
	for i, id := range s.Table {
		out[i] = f.backends[id].Addr()
	}
	return out
}

// A stateful service says so to the data plane; daisy chaining over IPIP
// is refused.
func TestFlowsModes(t *testing.T) {
	r, f := newChainReconciler(t, time.Now())
	cfg := chainedConfig(nil, "10.0.3.2")
	cfg.Services[0].Flows = config.FlowsStateful
	mustApply(t, r, cfg)
	if s := installed(t, f); !s.Stateful || s.Encap != lb.EncapGUE || s.Chain != nil {
		t.Errorf("stateful service installed as %+v", s)
	}
	cfg.Services[0].Flows, cfg.Services[0].Forwarding = config.FlowsDaisyChain, config.DSRIPIP
	if err := r.Apply(cfg); err == nil {
		t.Error("daisy chaining over dsr-ipip was accepted")
	}
}

// A source may write the history after the backends (the Kubernetes
// controller annotates a Service after its endpoints changed): until it
// does, an agent that saw the change hints with its own record; once it
// has, the agent writes exactly what a late starter given that history
// writes, though it saw the change at another time; and a later change
// the source does not show yet is hinted from the agent's record again.
func TestChainHistoryLags(t *testing.T) {
	seen := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	written := seen.Add(-400 * time.Millisecond).Truncate(time.Second) // the controller's second
	before := []string{"10.0.3.2", "10.0.3.3", "10.0.3.4"}
	after := []string{"10.0.3.3", "10.0.3.4"}
	later := []string{"10.0.3.3", "10.0.3.4", "10.0.3.5"}
	history := []config.Generation{{Until: written, Backends: chainedConfig(nil, before...).Services[0].Backends}}

	saw, sawDP := newChainReconciler(t, seen)
	mustApply(t, saw, chainedConfig(nil, before...))
	owners := tableAddrs(sawDP, installed(t, sawDP))
	mustApply(t, saw, chainedConfig(nil, after...)) // the annotation lags
	own := installed(t, sawDP)
	if own.Generation != uint32(seen.Unix()) {
		t.Errorf("before the source's history: generation %d, want the agent's own record %d", own.Generation, seen.Unix())
	}
	now := tableAddrs(sawDP, own)
	for i, c := range own.Chain {
		if owners[i] != now[i] && c.Prev != owners[i] {
			t.Fatalf("before the source's history, slot %d moved from %s but hints %+v", i, owners[i], c)
		}
	}
	mustApply(t, saw, chainedConfig(history, after...)) // the annotation arrives
	caught := installed(t, sawDP)

	late, lateDP := newChainReconciler(t, seen.Add(time.Hour))
	mustApply(t, late, chainedConfig(history, after...))
	want := installed(t, lateDP)
	if caught.Generation != want.Generation || !slices.Equal(caught.Chain, want.Chain) || want.Generation != uint32(written.Unix()) {
		t.Errorf("once the history arrived: generation %d, a late starter's %d (want %d); same hints: %v",
			caught.Generation, want.Generation, written.Unix(), slices.Equal(caught.Chain, want.Chain))
	}

	// The next change, before the source shows it: the agent's record
	// (a later time) counts beside the source's history.
	saw.now = func() time.Time { return seen.Add(time.Minute) }
	mustApply(t, saw, chainedConfig(history, later...))
	if g := installed(t, sawDP).Generation; g != uint32(seen.Add(time.Minute).Unix()) {
		t.Errorf("a change the source does not show yet: generation %d, want the agent's record %d", g, seen.Add(time.Minute).Unix())
	}
}

// BenchmarkChainSlots is the agent's work for one daisy-chained port
// beside its Maglev table: hints over a history of five sets, for six
// backends in a table of the default size. "history kept": the tables of
// the history's sets and the current one's are kept from before, as after
// a change (buildTable has just built the current one); "none kept":
// every table is built, as at an agent's start.
func BenchmarkChainSlots(b *testing.B) {
	const m = 65537
	var members []maglev.Backend
	for i := range 7 {
		members = append(members, maglev.Backend{Key: fmt.Sprintf("10.0.3.%d:80", i+2), Weight: 1})
	}
	var past []chain.Past
	until := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	for i := range 5 {
		set := slices.Clone(members)
		set = slices.Delete(set, i, i+1)
		past = append(past, chain.Past{Until: until.Add(time.Duration(i) * time.Minute), Backends: set})
	}
	current := members[1:]
	b.Run("history kept", func(b *testing.B) {
		tables := chain.NewTables(chainTablesBytes / (4 * m))
		if _, _, err := chainSlots(tables, current, past, m); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := chainSlots(tables, current, past, m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("none kept", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := chainSlots(nil, current, past, m); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Affinity reaches the data plane, and a change of affinity alone is
// applied: the service is installed again with the flag, and back.
func TestAffinityApplied(t *testing.T) {
	r, f := newChainReconciler(t, time.Now())
	cfg := chainedConfig(nil, "10.0.3.2", "10.0.3.3")
	cfg.Services[0].Flows = ""
	mustApply(t, r, cfg)
	if s := installed(t, f); s.ClientIP {
		t.Fatalf("a service without affinity installed as %+v", s)
	}
	for _, a := range []config.Affinity{config.AffinityClientIP, ""} {
		cfg.Services[0].Affinity = a
		mustApply(t, r, cfg)
		if s := installed(t, f); s.ClientIP != (a == config.AffinityClientIP) {
			t.Errorf("affinity %q: installed with ClientIP %v", a, s.ClientIP)
		}
	}
}

// dropOtherFamily leaves out the previous owners of the other family
// than each slot's backend, keeping the order of those that stay, and
// counts the slots that lost one.
func TestDropOtherFamily(t *testing.T) {
	a4, b4 := netip.MustParseAddr("10.0.3.2"), netip.MustParseAddr("10.0.3.3")
	a6, b6 := netip.MustParseAddr("fd00:3::2"), netip.MustParseAddr("fd00:3::3")
	members := []maglev.Backend{{Key: "10.0.3.9:80", Weight: 1}, {Key: "[fd00:3::9]:80", Weight: 1}}
	ids := []uint32{7, 8}
	table := []uint32{7, 7, 8, 8, 8, 7}
	chain := []lb.ChainSlot{
		{Prev: a4, Prev2: b4, Changed: 1}, // IPv4 backend, IPv4 owners: kept
		{Prev: a6, Prev2: b4, Changed: 2}, // IPv4 backend: prev goes, prev2 moves up
		{Prev: a6, Prev2: b6, Changed: 3}, // IPv6 backend, IPv6 owners: kept
		{Prev: a6, Prev2: a4, Changed: 4}, // IPv6 backend: prev2 goes
		{Prev: a4, Changed: 5},            // IPv6 backend: its only owner goes
		{},                                // no hint
	}
	want := []lb.ChainSlot{
		{Prev: a4, Prev2: b4, Changed: 1},
		{Prev: b4, Changed: 2},
		{Prev: a6, Prev2: b6, Changed: 3},
		{Prev: a6, Changed: 4},
		{Changed: 5},
		{},
	}
	if n := dropOtherFamily(chain, table, members, ids); n != 3 {
		t.Errorf("%d slots lost an owner, want 3", n)
	}
	if !slices.Equal(chain, want) {
		t.Errorf("chain %v, want %v", chain, want)
	}
}
