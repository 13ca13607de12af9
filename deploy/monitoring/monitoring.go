// Package monitoring holds xlb's Grafana dashboard (xlb-dashboard.json) and
// Prometheus alerting rules (xlb-rules.yaml, and the same rules as a
// PrometheusRule in prometheusrule.yaml and in the Helm chart), and reads
// the dashboard for the tools that draw it (bench/dashimg). Its tests parse
// and evaluate every rule and panel query with Prometheus's own packages
// against the metrics the agent and the controller register.
package monitoring

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// Files of this directory.
const (
	RulesFile     = "xlb-rules.yaml"
	DashboardFile = "xlb-dashboard.json"
	ManifestFile  = "prometheusrule.yaml"
)

//go:embed xlb-dashboard.json
var dashboardJSON []byte

//go:embed xlb-rules.yaml
var rulesYAML []byte

// Rules returns the alerting rules file.
func Rules() []byte { return rulesYAML }

// Dashboard is the part of a Grafana dashboard the tests and tools read.
type Dashboard struct {
	UID           string `json:"uid"`
	Title         string `json:"title"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []Variable `json:"list"`
	} `json:"templating"`
	Panels []Panel `json:"panels"`
}

// Variable is a template variable.
type Variable struct {
	Type       string          `json:"type"` // datasource, query, ...
	Name       string          `json:"name"`
	Query      json.RawMessage `json:"query"`
	Datasource *Datasource     `json:"datasource"`
}

// Datasource is a panel's, target's or variable's data source.
type Datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Panel is one panel, or a row with the panels it holds when collapsed.
type Panel struct {
	ID          int         `json:"id"`
	Type        string      `json:"type"`
	Title       string      `json:"title"`
	Description string      `json:"description"`
	GridPos     GridPos     `json:"gridPos"`
	Datasource  *Datasource `json:"datasource"`
	Targets     []Target    `json:"targets"`
	FieldConfig struct {
		Defaults struct {
			Unit string   `json:"unit"`
			Min  *float64 `json:"min"`
			Max  *float64 `json:"max"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Panels []Panel `json:"panels"`
}

// GridPos is where a panel sits: 24 columns wide, rows of 30 pixels.
type GridPos struct {
	H int `json:"h"`
	W int `json:"w"`
	X int `json:"x"`
	Y int `json:"y"`
}

// Target is one query of a panel.
type Target struct {
	RefID        string      `json:"refId"`
	Expr         string      `json:"expr"`
	LegendFormat string      `json:"legendFormat"`
	Instant      bool        `json:"instant"`
	Datasource   *Datasource `json:"datasource"`
}

// LoadDashboard decodes the dashboard.
func LoadDashboard() (*Dashboard, error) {
	var d Dashboard
	if err := json.Unmarshal(dashboardJSON, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", DashboardFile, err)
	}
	return &d, nil
}

// AllPanels returns the panels that show data, those inside collapsed rows
// included, in the dashboard's order.
func (d *Dashboard) AllPanels() []Panel {
	var out []Panel
	var walk func([]Panel)
	walk = func(ps []Panel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			out = append(out, p)
		}
	}
	walk(d.Panels)
	return out
}

// QueryText returns a query variable's PromQL-ish text (e.g.
// label_values(xlb_build_info, job)); "" for other variables.
func (v Variable) QueryText() string {
	var q struct {
		Query string `json:"query"`
	}
	if v.Type != "query" || json.Unmarshal(v.Query, &q) != nil {
		return ""
	}
	return q.Query
}

var (
	builtinVar = regexp.MustCompile(`\$(__rate_interval|__interval|__range)\b`)
	userVar    = regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*\}?`)
)

// Expand makes a panel's query PromQL as Grafana would send it: its
// interval variables become rateInterval, and the template variables,
// which the dashboard uses only as regular expressions (label=~"$job"),
// select everything.
func Expand(expr string, rateInterval time.Duration) string {
	expr = builtinVar.ReplaceAllString(expr, model.Duration(rateInterval).String())
	return userVar.ReplaceAllString(expr, ".*")
}

// Legend fills a target's legend format ({{label}}) with a series' labels.
func Legend(format string, labels map[string]string) string {
	if format == "" {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(labels)) {
			parts = append(parts, k+"="+labels[k])
		}
		return strings.Join(parts, " ")
	}
	return legendLabel.ReplaceAllStringFunc(format, func(m string) string {
		return labels[legendLabel.FindStringSubmatch(m)[1]]
	})
}

// LegendLabels are the labels a legend format names.
func LegendLabels(format string) []string {
	var out []string
	for _, m := range legendLabel.FindAllStringSubmatch(format, -1) {
		out = append(out, m[1])
	}
	return out
}

var legendLabel = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)
