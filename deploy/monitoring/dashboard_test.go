package monitoring

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// The lowest schemaVersion we accept: Grafana 11's.
const minSchemaVersion = 39

func loadDashboard(t *testing.T) *Dashboard {
	t.Helper()
	d, err := LoadDashboard()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

var (
	// A template variable where the dashboard may use one: as the whole
	// regular expression of a label matcher.
	varMatcher = regexp.MustCompile(`[a-z_]+=~"\$([a-z_]+)"`)
	anyVar     = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?`)
	labelVals  = regexp.MustCompile(`^label_values\((.+), *([a-zA-Z_][a-zA-Z0-9_]*)\)$`)
)

// TestDashboard: a current Grafana imports the dashboard, its data source
// is a variable, and every panel's PromQL parses and names metrics and
// labels the agent or the controller registers.
func TestDashboard(t *testing.T) {
	set := registered(t)
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q: both are needed", d.UID, d.Title)
	}
	if d.SchemaVersion < minSchemaVersion {
		t.Errorf("schemaVersion %d, want at least %d (Grafana 11)", d.SchemaVersion, minSchemaVersion)
	}

	vars := map[string]Variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	if v, ok := vars["datasource"]; !ok || v.Type != "datasource" || string(v.Query) != `"prometheus"` {
		t.Fatalf("no variable datasource of type datasource over prometheus: %+v", v)
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		checkDatasource(t, "variable "+v.Name, v.Datasource)
		m := labelVals.FindStringSubmatch(v.QueryText())
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(SELECTOR, LABEL)", v.Name, v.QueryText())
			continue
		}
		checkQuery(t, set, vars, "variable "+v.Name, fmt.Sprintf("count by (%s) (%s)", m[2], m[1]), nil)
	}

	seen := map[string]bool{}
	for _, p := range d.AllPanels() {
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		checkDatasource(t, where, p.Datasource)
		if len(p.Targets) == 0 {
			t.Errorf("%s: no query", where)
		}
		if p.Description == "" {
			t.Errorf("%s: no description (Grafana shows it as the panel's help)", where)
		}
		for _, tg := range p.Targets {
			checkDatasource(t, fmt.Sprintf("%s, query %s", where, tg.RefID), tg.Datasource)
			for _, n := range checkQuery(t, set, vars, fmt.Sprintf("%s, query %s", where, tg.RefID), tg.Expr, LegendLabels(tg.LegendFormat)) {
				seen[n] = true
			}
		}
	}

	// What issue 26 asks the dashboard to show.
	for _, want := range []string{
		"xlb_service_packets_total", "xlb_service_bytes_total", "xlb_backend_packets_total", "xlb_backend_bytes_total",
		"xlb_backend_up", "xlb_service_up", "xlb_bgp_peer_up", "xlb_bfd_session_up", "xlb_dataplane_reason_packets_total",
		"xlb_conntrack_flows", "xlb_conntrack_flows_capacity", "xlb_nat_sessions", "xlb_nat_sessions_capacity",
		"xlb_config_last_reload_successful", "xlb_controller_pool_addresses", "xlb_controller_pool_addresses_assigned",
	} {
		if !seen[want] {
			t.Errorf("no panel shows %s", want)
		}
	}
}

func checkDatasource(t *testing.T, where string, ds *Datasource) {
	t.Helper()
	if ds == nil || ds.Type != "prometheus" || ds.UID != "${datasource}" {
		t.Errorf("%s: datasource %+v, want the variable ${datasource} of type prometheus", where, ds)
	}
}

// checkQuery checks one query of the dashboard and returns the metrics it
// names.
func checkQuery(t *testing.T, set metricSet, vars map[string]Variable, where, expr string, legend []string) []string {
	t.Helper()
	if expr == "" {
		t.Errorf("%s: empty query", where)
		return nil
	}
	// Variables only as whole matcher regexps, and only those defined.
	rest := varMatcher.ReplaceAllStringFunc(expr, func(m string) string {
		name := varMatcher.FindStringSubmatch(m)[1]
		if _, ok := vars[name]; !ok {
			t.Errorf("%s: variable $%s is not defined", where, name)
		}
		return ""
	})
	for _, m := range anyVar.FindAllStringSubmatch(rest, -1) {
		if !slices.Contains([]string{"__rate_interval", "__interval", "__range"}, m[1]) {
			t.Errorf("%s: $%s outside a label matcher (=~\"$%s\")", where, m[1], m[1])
		}
	}
	problems, names := set.checkExpr(Expand(expr, time.Minute), legend...)
	for _, p := range problems {
		t.Errorf("%s: %s\n\t%s", where, p, expr)
	}
	return names
}

// TestDashboardLayout: ids are unique and panels lie within the 24 columns
// without overlapping.
func TestDashboardLayout(t *testing.T) {
	d := loadDashboard(t)
	ids := map[int]string{}
	var all []Panel
	var walk func([]Panel)
	walk = func(ps []Panel) {
		for _, p := range ps {
			all = append(all, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for i, p := range all {
		if other, dup := ids[p.ID]; dup || p.ID == 0 {
			t.Errorf("panel %q: id %d is 0 or also %q's", p.Title, p.ID, other)
		}
		ids[p.ID] = p.Title
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24 columns", p.Title, g)
		}
		for _, q := range all[:i] {
			h := q.GridPos
			if g.X < h.X+h.W && h.X < g.X+g.W && g.Y < h.Y+h.H && h.Y < g.Y+g.H {
				t.Errorf("panels %q %+v and %q %+v overlap", q.Title, h, p.Title, g)
			}
		}
	}
}

// TestExpand: Grafana's variables become PromQL.
func TestExpand(t *testing.T) {
	got := Expand(`sum by (service) (rate(xlb_service_packets_total{job=~"$job", instance=~"${instance}"}[$__rate_interval]))`, 15*time.Second)
	want := `sum by (service) (rate(xlb_service_packets_total{job=~".*", instance=~".*"}[15s]))`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got := Legend("{{service}} {{ backend }}", map[string]string{"service": "web", "backend": "10.0.3.2:80"}); got != "web 10.0.3.2:80" {
		t.Errorf("legend %q", got)
	}
	if got := strings.Join(LegendLabels("{{instance}} {{peer}}"), ","); got != "instance,peer" {
		t.Errorf("legend labels %q", got)
	}
}
