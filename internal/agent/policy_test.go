package agent

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/dataplane/lb"
)

func pfx(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// The deny list goes to the data plane with the first apply and then
// only when it changes; a failed write is an error the next apply
// retries.
func TestApplyDenyList(t *testing.T) {
	f, r := setup(t)
	cfg := baseConfig()
	mustApply(t, r, cfg)
	if n := count(f.calls, "SetDenyList"); n != 1 || f.deny != nil {
		t.Fatalf("first apply without a list: %d SetDenyList calls, list %v; want one, empty (whatever an earlier agent left goes)", n, f.deny)
	}
	cfg.Policy.Deny = pfx("192.0.2.0/24", "198.51.100.0/24")
	mark := f.mark()
	mustApply(t, r, cfg)
	if got := f.mutations(mark); !slices.Equal(got, []string{"SetDenyList 2"}) || !slices.Equal(f.deny, cfg.Policy.Deny) {
		t.Fatalf("a new deny list: calls %v, list %v; want SetDenyList alone", got, f.deny)
	}
	mark = f.mark()
	mustApply(t, r, cfg)
	if got := f.mutations(mark); len(got) != 0 {
		t.Errorf("the same list again: calls %v", got)
	}
	next := *cfg
	next.Policy.Deny = pfx("192.0.2.0/24")
	f.fail["SetDenyList"] = errInjected
	if err := r.Apply(&next); err == nil {
		t.Fatal("a failed deny list write is no error")
	}
	delete(f.fail, "SetDenyList")
	mustApply(t, r, &next)
	if !slices.Equal(f.deny, next.Policy.Deny) {
		t.Errorf("after the retry: list %v, want %v", f.deny, next.Policy.Deny)
	}
	verify(t, f, r, &next)
}

// A service's source ranges travel with its table when the table
// changes, and alone when only they change.
func TestApplySourceRanges(t *testing.T) {
	f, r := setup(t)
	cfg := baseConfig()
	cfg.Services[0].SourceRanges = pfx("10.0.0.0/8")
	mustApply(t, r, cfg)
	web, _ := f.serviceByKey(keyOf(t, cfg.Services[0]))
	if !slices.Equal(web.SourceRanges, cfg.Services[0].SourceRanges) {
		t.Fatalf("web upserted with ranges %v, want %v", web.SourceRanges, cfg.Services[0].SourceRanges)
	}
	if dns, _ := f.serviceByKey(keyOf(t, cfg.Services[1])); dns.SourceRanges != nil {
		t.Errorf("dns has ranges %v", dns.SourceRanges)
	}

	// Only the ranges change: no table is written.
	cfg.Services[0].SourceRanges = pfx("10.0.0.0/8", "172.16.0.0/12")
	mark := f.mark()
	mustApply(t, r, cfg)
	if got := f.mutations(mark); !slices.Equal(got, []string{fmt.Sprintf("SetSourceRanges %d", web.ID)}) {
		t.Errorf("a change of ranges alone: calls %v, want SetSourceRanges %d alone", got, web.ID)
	}
	web, _ = f.serviceByKey(keyOf(t, cfg.Services[0]))
	if !slices.Equal(web.SourceRanges, cfg.Services[0].SourceRanges) {
		t.Errorf("web's ranges %v, want %v", web.SourceRanges, cfg.Services[0].SourceRanges)
	}
	mark = f.mark()
	mustApply(t, r, cfg)
	if got := f.mutations(mark); len(got) != 0 {
		t.Errorf("the same ranges again: calls %v", got)
	}

	// Ranges and backends change together: one upsert carries both.
	cfg.Services[0].SourceRanges = pfx("192.0.2.0/24")
	cfg.Services[0].Backends = cfg.Services[0].Backends[:2]
	mark = f.mark()
	mustApply(t, r, cfg)
	if got := f.mutations(mark); count(got, "SetSourceRanges") != 0 || count(got, "UpsertService") != 1 {
		t.Errorf("ranges and backends: calls %v, want one UpsertService", got)
	}
	web, _ = f.serviceByKey(keyOf(t, cfg.Services[0]))
	if !slices.Equal(web.SourceRanges, cfg.Services[0].SourceRanges) {
		t.Errorf("web's ranges %v, want %v", web.SourceRanges, cfg.Services[0].SourceRanges)
	}

	// Removed: every source again.
	cfg.Services[0].SourceRanges = nil
	mustApply(t, r, cfg)
	if web, _ = f.serviceByKey(keyOf(t, cfg.Services[0])); web.SourceRanges != nil {
		t.Errorf("ranges removed, the data plane still has %v", web.SourceRanges)
	}

	// A failed write is retried.
	cfg.Services[0].SourceRanges = pfx("10.0.0.0/8")
	f.fail["SetSourceRanges"] = errInjected
	if err := r.Apply(cfg); err == nil {
		t.Fatal("a failed write of ranges is no error")
	}
	delete(f.fail, "SetSourceRanges")
	mustApply(t, r, cfg)
	if web, _ = f.serviceByKey(keyOf(t, cfg.Services[0])); !slices.Equal(web.SourceRanges, cfg.Services[0].SourceRanges) {
		t.Errorf("after the retry: %v", web.SourceRanges)
	}
	verify(t, f, r, cfg)
}

// An adopted service's ranges are unknown: the first apply writes them,
// even when its table is kept.
func TestAdoptedServiceGetsItsRanges(t *testing.T) {
	f, r := setup(t)
	cfg := baseConfig()
	cfg.Services[0].SourceRanges = pfx("10.0.0.0/8")
	mustApply(t, r, cfg)
	r2, err := newReconciler(f, quiet, f.maxServices, f.maxBackends)
	if err != nil {
		t.Fatal(err)
	}
	// What the earlier agent set is gone from the fake's view, as the
	// real data plane's Installed does not report ranges.
	id, _, _ := r.ids(keyOf(t, cfg.Services[0]))
	s := f.services[id]
	s.SourceRanges = nil
	f.services[id] = s
	mustApply(t, r2, cfg)
	if web, _ := f.serviceByKey(keyOf(t, cfg.Services[0])); !slices.Equal(web.SourceRanges, cfg.Services[0].SourceRanges) {
		t.Errorf("adopted web: ranges %v, want %v", web.SourceRanges, cfg.Services[0].SourceRanges)
	}
}

// xlb status shows each service's ranges and what they turned away, and
// the deny list.
func TestAgentStatusPolicy(t *testing.T) {
	cfg := baseConfig()
	cfg.Services[0].SourceRanges = pfx("10.0.0.0/8", "192.0.2.7/32")
	cfg.Policy.Deny = pfx("198.51.100.0/24")
	a, f, _ := testAgent(t, cfg, nil)
	id, _, _ := a.rec.ids(keyOf(t, cfg.Services[0]))
	f.rangeDrops[id] = lb.Counters{Packets: 3, Bytes: 180}
	f.reasons["drop_denied"] = 5
	st := status(t, a)
	web := st.Services[0]
	if !slices.Equal(web.SourceRanges, []string{"10.0.0.0/8", "192.0.2.7/32"}) || web.SourceRangeDrops != (api.Counters{Packets: 3, Bytes: 180}) {
		t.Errorf("web: ranges %v, drops %+v", web.SourceRanges, web.SourceRangeDrops)
	}
	if dns := st.Services[1]; dns.SourceRanges != nil || dns.SourceRangeDrops != (api.Counters{}) {
		t.Errorf("dns: ranges %v, drops %+v", dns.SourceRanges, dns.SourceRangeDrops)
	}
	if st.Policy != (api.Policy{DenyPrefixes: 1, Denied: 5}) {
		t.Errorf("policy %+v", st.Policy)
	}
}

// What a reload would change in the lists, in --check's words.
func TestDiffPolicy(t *testing.T) {
	old := parse(t, `node: {interface: eth0}
policy: {deny: [192.0.2.0/24]}
services:
  - {name: web, vip: 10.99.0.1, port: 80, sourceRanges: [10.0.0.0/8], backends: [{address: 10.0.3.2}]}
  - {name: dns, vip: 10.99.0.2, port: 53, backends: [{address: 10.0.3.2}]}
`)
	cfg := parse(t, `node: {interface: eth0}
policy: {deny: [192.0.2.0/24, 198.51.100.0/24]}
services:
  - {name: web, vip: 10.99.0.1, port: 80, backends: [{address: 10.0.3.2}]}
  - {name: dns, vip: 10.99.0.2, port: 53, sourceRanges: [10.1.0.0/16], backends: [{address: 10.0.3.2}]}
`)
	c := diffConfigs(old, cfg)
	if want := []string{"deny: 1 → 2 prefixes: added 198.51.100.0/24"}; !slices.Equal(c.Policy, want) {
		t.Errorf("policy %q, want %q", c.Policy, want)
	}
	want := []api.ServiceChange{
		{Name: "web", Changes: []string{"sourceRanges: 1 → 0 prefixes: removed 10.0.0.0/8 (now: every source)"}},
		{Name: "dns", Changes: []string{"sourceRanges: 0 → 1 prefixes: added 10.1.0.0/16 (was: every source)"}},
	}
	if !slices.EqualFunc(c.Changed, want, func(a, b api.ServiceChange) bool { return a.Name == b.Name && slices.Equal(a.Changes, b.Changes) }) {
		t.Errorf("changed %+v, want %+v", c.Changed, want)
	}
	if c.Unchanged() {
		t.Error("a change of the lists alone counts as unchanged")
	}
	var many []string
	for i := range 7 {
		many = append(many, netip.PrefixFrom(netip.AddrFrom4([4]byte{203, 0, 113, byte(i)}), 32).String())
	}
	next := *cfg
	next.Policy.Deny = nil
	for _, s := range many {
		next.Policy.Deny = append(next.Policy.Deny, netip.MustParsePrefix(s))
	}
	if got := diffConfigs(cfg, &next).Policy; !slices.Equal(got, []string{"deny: 2 → 7 prefixes: 7 added; removed 192.0.2.0/24, 198.51.100.0/24"}) {
		t.Errorf("many: %q", got)
	}
}
