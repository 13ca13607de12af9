package monitoring

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	promqlengine "github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
)

// parseRules parses the rules file as Prometheus loads it: unknown fields
// refused, every expression and template checked.
func parseRules(t *testing.T) []rulefmt.RuleGroup {
	t.Helper()
	groups, errs := rulefmt.Parse(Rules(), false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("%s: %v", RulesFile, err)
	}
	if t.Failed() {
		t.FailNow()
	}
	return groups.Groups
}

func alertRules(t *testing.T) map[string]rulefmt.Rule {
	t.Helper()
	out := map[string]rulefmt.Rule{}
	for _, g := range parseRules(t) {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if _, dup := out[r.Alert]; dup {
				t.Errorf("alert %s is defined twice", r.Alert)
			}
			out[r.Alert] = r
		}
	}
	return out
}

// TestRules: every rule parses, says how bad it is and what to do, and
// names only metrics and labels that the agent or the controller
// registers.
func TestRules(t *testing.T) {
	set := registered(t)
	for name, r := range alertRules(t) {
		if !strings.HasPrefix(name, "Xlb") {
			t.Errorf("alert %s: names start with Xlb", name)
		}
		if s := r.Labels["severity"]; s != "critical" && s != "warning" {
			t.Errorf("alert %s: severity %q, want critical or warning", name, s)
		}
		if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
			t.Errorf("alert %s: needs a summary and a description", name)
		}
		if r.For == 0 {
			t.Errorf("alert %s: no for:, a single scrape would fire it", name)
		}
		problems, _ := set.checkExpr(r.Expr)
		for _, p := range problems {
			t.Errorf("alert %s: %s", name, p)
		}
		if _, tested := alertCases[name]; !tested {
			t.Errorf("alert %s has no evaluation case in alertCases", name)
		}
	}
}

// TestRulesCoverTheIssue: the alerts issue 26 asks for exist.
func TestRulesCoverTheIssue(t *testing.T) {
	have := alertRules(t)
	for _, want := range []string{
		"XlbServiceNoHealthyBackend", "XlbBackendDown", "XlbBGPSessionDown", "XlbBFDSessionDown",
		"XlbFlowHashMismatch", "XlbTableSizeMismatch", "XlbConntrackTableFilling", "XlbNATSessionTableFilling",
		"XlbConfigReloadFailing", "XlbPacketDropsRising", "XlbAddressPoolExhausted",
	} {
		if _, ok := have[want]; !ok {
			t.Errorf("no alert %s", want)
		}
	}
}

// alertCase is a rule's evaluation: series in promqltest's load notation
// (one sample a minute from minute 0) on which the alert fires, the labels
// of the alerts expected, and series of a healthy system on which it must
// not fire, not even pending.
type alertCase struct {
	// fire: the condition holds from minute onset on; each map in want is
	// a subset of the labels of one alert that must fire at onset + for.
	fire  string
	onset int
	want  []map[string]string
	// healthy: nothing fires.
	healthy string
}

var alertCases = map[string]alertCase{
	"XlbServiceNoHealthyBackend": {
		fire: `
xlb_service_up{job="xlb",instance="n1",service="web"} 1 1 1 0 0 0 0 0 0 0
xlb_service_up{job="xlb",instance="n2",service="web"} 1 1 1 0 0 0 0 0 0 0
xlb_service_up{job="xlb",instance="n1",service="dns"} 1x10`,
		onset: 3, want: []map[string]string{{"service": "web", "severity": "critical"}},
		healthy: `
xlb_service_up{job="xlb",instance="n1",service="web"} 1x10
xlb_service_up{job="xlb",instance="n2",service="web"} 1 1 1 0 1 1 1 1 1 1`,
	},
	"XlbBackendDown": {
		fire: `
xlb_backend_up{job="xlb",instance="n1",service="web",backend="10.0.3.2:80"} 1 1 0 0 0 0 0 0 0 0
xlb_backend_up{job="xlb",instance="n1",service="web",backend="10.0.3.3:80"} 1x10`,
		onset: 2, want: []map[string]string{{"service": "web", "backend": "10.0.3.2:80"}},
		healthy: `
xlb_backend_up{job="xlb",instance="n1",service="web",backend="10.0.3.2:80"} 1 1 0 1 1 0 1 1 1 1`,
	},
	"XlbBGPSessionDown": {
		fire: `
xlb_bgp_peer_up{job="xlb",instance="n1",peer="10.0.1.1"} 1 1 1 1 0 0 0 0 0 0
xlb_bgp_peer_up{job="xlb",instance="n2",peer="10.0.1.1"} 1x10`,
		onset: 4, want: []map[string]string{{"instance": "n1", "peer": "10.0.1.1"}},
		// A session re-established within a minute (a peer restart).
		healthy: `
xlb_bgp_peer_up{job="xlb",instance="n1",peer="10.0.1.1"} 0 1 1 1 0 1 1 1 1 1`,
	},
	"XlbBFDSessionDown": {
		fire: `
xlb_bfd_session_up{job="xlb",instance="n2",peer="10.0.1.1"} 1 0 0 0 0 0`,
		onset: 1, want: []map[string]string{{"instance": "n2", "peer": "10.0.1.1"}},
		healthy: `
xlb_bfd_session_up{job="xlb",instance="n2",peer="10.0.1.1"} 1x6`,
	},
	"XlbFlowHashMismatch": {
		// n3 restarted with another flow hash at minute 2.
		fire: `
xlb_dataplane_info{job="xlb",instance="n1",flow_hash="fmix64",table_size="65537"} 1x15
xlb_dataplane_info{job="xlb",instance="n2",flow_hash="fmix64",table_size="65537"} 1x15
xlb_dataplane_info{job="xlb",instance="n3",flow_hash="fmix64",table_size="65537"} 1 1 _x13
xlb_dataplane_info{job="xlb",instance="n3",flow_hash="lookup3",table_size="65537"} _ _ 1x13`,
		onset: 2, want: []map[string]string{{"job": "xlb", "severity": "critical"}},
		// Two clusters (jobs), each consistent, with different hashes.
		healthy: `
xlb_dataplane_info{job="xlb",instance="n1",flow_hash="fmix64",table_size="65537"} 1x15
xlb_dataplane_info{job="xlb",instance="n2",flow_hash="fmix64",table_size="65537"} 1x15
xlb_dataplane_info{job="xlb-edge",instance="e1",flow_hash="lookup3",table_size="2039"} 1x15
xlb_dataplane_info{job="xlb-edge",instance="e2",flow_hash="lookup3",table_size="2039"} 1x15`,
	},
	"XlbTableSizeMismatch": {
		fire: `
xlb_dataplane_info{job="xlb",instance="n1",flow_hash="fmix64",table_size="65537"} 1x15
xlb_dataplane_info{job="xlb",instance="n2",flow_hash="fmix64",table_size="2039"} 1x15`,
		onset: 0, want: []map[string]string{{"job": "xlb"}},
		healthy: `
xlb_dataplane_info{job="xlb",instance="n1",flow_hash="fmix64",table_size="65537"} 1x15
xlb_dataplane_info{job="xlb",instance="n2",flow_hash="fmix64",table_size="65537"} 1x15`,
	},
	"XlbConntrackTableFilling": {
		// 262144 flows at most; n1 passes 80 % (209715) at minute 3.
		fire: `
xlb_conntrack_flows{job="xlb",instance="n1"} 100000 150000 200000 220000 240000 250000 250000 250000 250000 250000 250000 250000 250000 250000 250000
xlb_conntrack_flows_capacity{job="xlb",instance="n1"} 262144x15
xlb_conntrack_flows{job="xlb",instance="n2"} 1000x15
xlb_conntrack_flows_capacity{job="xlb",instance="n2"} 262144x15`,
		onset: 3, want: []map[string]string{{"instance": "n1"}},
		// No stateful service: an empty table.
		healthy: `
xlb_conntrack_flows{job="xlb",instance="n1"} 0x15
xlb_conntrack_flows_capacity{job="xlb",instance="n1"} 262144x15`,
	},
	"XlbNATSessionTableFilling": {
		fire: `
xlb_nat_sessions{job="xlb",instance="n1"} 1000 900000 900000 900000 900000 900000 900000
xlb_nat_sessions_capacity{job="xlb",instance="n1"} 1048576x7`,
		onset: 1, want: []map[string]string{{"instance": "n1"}},
		healthy: `
xlb_nat_sessions{job="xlb",instance="n1"} 1000 500000 800000 500000 1000 1000 1000
xlb_nat_sessions_capacity{job="xlb",instance="n1"} 1048576x7`,
	},
	"XlbNATAllocationFailing": {
		// Failures from minute 3 on.
		fire: `
xlb_nat_allocation_failures_total{job="xlb",instance="n1"} 0 0 0+60x12`,
		onset: 3, want: []map[string]string{{"instance": "n1"}},
		healthy: `
xlb_nat_allocation_failures_total{job="xlb",instance="n1"} 7x14`,
	},
	"XlbConfigReloadFailing": {
		fire: `
xlb_config_last_reload_successful{job="xlb",instance="n1"} 1 1 0 0 0 0 0 0 0 0
xlb_config_last_reload_successful{job="xlb",instance="n2"} 1x10`,
		onset: 2, want: []map[string]string{{"instance": "n1"}},
		// A broken edit fixed within minutes.
		healthy: `
xlb_config_last_reload_successful{job="xlb",instance="n1"} 1 1 0 0 0 1 1 1 1 1`,
	},
	"XlbPacketDropsRising": {
		// drop_no_route from minute 3 at 10/s; the deny list drops far
		// more, as it should, and does not count.
		fire: `
xlb_dataplane_reason_packets_total{job="xlb",instance="n1",reason="drop_no_route"} 0 0 0 0+600x16
xlb_dataplane_reason_packets_total{job="xlb",instance="n1",reason="drop_denied"} 0+60000x19
xlb_dataplane_reason_packets_total{job="xlb",instance="n1",reason="pass_not_vip"} 0+60000x19`,
		onset: 4, want: []map[string]string{{"instance": "n1", "reason": "drop_no_route"}},
		healthy: `
xlb_dataplane_reason_packets_total{job="xlb",instance="n1",reason="drop_no_route"} 0 0 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5
xlb_dataplane_reason_packets_total{job="xlb",instance="n1",reason="drop_denied"} 0+60000x19
xlb_dataplane_reason_packets_total{job="xlb",instance="n1",reason="drop_source_range"} 0+60000x19
xlb_dataplane_reason_packets_total{job="xlb",instance="n1",reason="drop_vip_no_service"} 0+6000x19`,
	},
	"XlbAddressPoolExhausted": {
		// The leader and a standby both export the gauges.
		fire: `
xlb_controller_pool_addresses{job="xlb-controller",instance="c1",pool="default"} 16x10
xlb_controller_pool_addresses_assigned{job="xlb-controller",instance="c1",pool="default"} 14 15 16 16 16 16 16 16 16 16
xlb_controller_pool_addresses{job="xlb-controller",instance="c2",pool="default"} 16x10
xlb_controller_pool_addresses_assigned{job="xlb-controller",instance="c2",pool="default"} 14x10
xlb_controller_pool_addresses{job="xlb-controller",instance="c1",pool="edge"} 4x10
xlb_controller_pool_addresses_assigned{job="xlb-controller",instance="c1",pool="edge"} 1x10`,
		onset: 2, want: []map[string]string{{"pool": "default"}},
		// Nearly full, and an empty pool that holds no address at all.
		healthy: `
xlb_controller_pool_addresses{job="xlb-controller",instance="c1",pool="default"} 16x10
xlb_controller_pool_addresses_assigned{job="xlb-controller",instance="c1",pool="default"} 15x10
xlb_controller_pool_addresses{job="xlb-controller",instance="c1",pool="none"} 0x10
xlb_controller_pool_addresses_assigned{job="xlb-controller",instance="c1",pool="none"} 0x10`,
	},
}

// healthyMinutes is how long the healthy cases are evaluated: past every
// rule's for:.
const healthyMinutes = 20

// evaluate runs rule r over series as a rule group with interval 1m
// would, from minute 0 to minute until, and returns the alerts active at
// the end and the minutes at which one was firing.
func evaluate(t *testing.T, r rulefmt.Rule, series string, until int) (active []*rules.Alert, firing []int) {
	t.Helper()
	storage := promqltest.LoadedStorage(t, "load 1m\n"+strings.TrimSpace(series))
	engine := promqlengine.NewEngine(promqlengine.EngineOpts{
		MaxSamples: 1_000_000, Timeout: 10 * time.Second, LookbackDelta: 5 * time.Minute, Parser: promql,
	})
	t.Cleanup(func() { engine.Close() })
	expr, err := promql.ParseExpr(r.Expr)
	if err != nil {
		t.Fatal(err)
	}
	rule := rules.NewAlertingRule(r.Alert, expr, time.Duration(r.For), time.Duration(r.KeepFiringFor),
		labels.FromMap(r.Labels), labels.FromMap(r.Annotations), labels.EmptyLabels(), "", true, slog.New(slog.DiscardHandler))
	query := rules.EngineQueryFunc(engine, storage)
	for m := 0; m <= until; m++ {
		if _, err := rule.Eval(context.Background(), 0, minute(m), query, nil, 0); err != nil {
			t.Fatalf("minute %d: %v", m, err)
		}
		for _, a := range rule.ActiveAlerts() {
			if a.State == rules.StateFiring {
				firing = append(firing, m)
				break
			}
		}
	}
	return rule.ActiveAlerts(), firing
}

// minute m of the series (promqltest loads them from the Unix epoch).
func minute(m int) time.Time { return time.Unix(0, 0).Add(time.Duration(m) * time.Minute) }

// TestAlertsFire evaluates each alert with Prometheus's rule engine: on
// its case's series it becomes pending at the onset and fires once its
// for: has passed, not before, with the labels wanted and annotations that
// expand; on healthy series it never fires.
func TestAlertsFire(t *testing.T) {
	all := alertRules(t)
	for _, name := range slices.Sorted(maps.Keys(alertCases)) {
		c := alertCases[name]
		t.Run(name, func(t *testing.T) {
			r, ok := all[name]
			if !ok {
				t.Fatalf("no alert %s in %s", name, RulesFile)
			}
			hold := int(time.Duration(r.For) / time.Minute)
			alerts, firing := evaluate(t, r, c.fire, c.onset+hold)
			if len(alerts) != len(c.want) {
				t.Fatalf("%d alerts active at minute %d, want %d: %v", len(alerts), c.onset+hold, len(c.want), describe(alerts))
			}
			if len(firing) == 0 || firing[0] != c.onset+hold {
				t.Errorf("firing at minutes %v, want from minute %d (onset %d + for %s)", firing, c.onset+hold, c.onset, r.For)
			}
			for _, want := range c.want {
				a := find(alerts, want)
				if a == nil {
					t.Errorf("no alert with labels %v among %v", want, describe(alerts))
					continue
				}
				if a.State != rules.StateFiring || !a.ActiveAt.Equal(minute(c.onset)) {
					t.Errorf("%v: %s since %s, want firing since minute %d", want, a.State, a.ActiveAt.Sub(minute(0)), c.onset)
				}
				a.Annotations.Range(func(l labels.Label) {
					if strings.Contains(l.Value, "error expanding") || strings.Contains(l.Value, "<no value>") || strings.Contains(l.Value, "{{") {
						t.Errorf("%v: annotation %s did not expand: %s", want, l.Name, l.Value)
					}
				})
			}
			if _, firing := evaluate(t, r, c.healthy, healthyMinutes); len(firing) > 0 {
				t.Errorf("healthy series: firing at minutes %v", firing)
			}
		})
	}
}

func find(alerts []*rules.Alert, want map[string]string) *rules.Alert {
	for _, a := range alerts {
		match := true
		for k, v := range want {
			if a.Labels.Get(k) != v {
				match = false
			}
		}
		if match {
			return a
		}
	}
	return nil
}

func describe(alerts []*rules.Alert) []string {
	var out []string
	for _, a := range alerts {
		out = append(out, a.State.String()+" "+a.Labels.String()+" "+a.Annotations.Get("summary"))
	}
	return out
}
