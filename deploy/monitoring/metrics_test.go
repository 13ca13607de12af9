package monitoring

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/k8s/controller"
)

// scrapeLabels are the labels Prometheus adds to every scraped series.
var scrapeLabels = []string{"job", "instance"}

// metricSet maps each metric name the agent and the controller register
// to its labels.
type metricSet map[string][]string

// registered collects the metrics from the code that serves them: the
// agent's collector (what api.Serve serves on /metrics) and the
// controller's metrics as `xlb controller` registers them, each through
// its collectors' Describe.
func registered(t *testing.T) metricSet {
	t.Helper()
	var cs []prometheus.Collector
	cs = append(cs, api.Collector(func() (*api.Status, error) { return nil, errors.New("not collected") }))
	rec := &recorder{}
	if _, err := controller.NewMetrics(rec); err != nil {
		t.Fatal(err)
	}
	cs = append(cs, rec.collectors...)

	set := metricSet{}
	ch := make(chan *prometheus.Desc)
	go func() {
		for _, c := range cs {
			c.Describe(ch)
		}
		close(ch)
	}()
	for d := range ch {
		name, labels, err := descName(d)
		if err != nil {
			t.Fatal(err)
		}
		set[name] = labels
	}
	if len(set) < 20 {
		t.Fatalf("found only %d metrics (%v): is the description format still understood?", len(set), set)
	}
	return set
}

// recorder is a Registerer that keeps what is registered.
type recorder struct{ collectors []prometheus.Collector }

func (r *recorder) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	r.collectors = append(r.collectors, cs...)
}

func (r *recorder) Unregister(prometheus.Collector) bool { return false }

// descString is how client_golang prints a Desc; it has no accessor for
// the name.
var descString = regexp.MustCompile(`^Desc\{fqName: "([^"]+)", .*variableLabels: \{([^}]*)\}\}$`)

func descName(d *prometheus.Desc) (string, []string, error) {
	if err := d.Err(); err != nil {
		return "", nil, err
	}
	m := descString.FindStringSubmatch(d.String())
	if m == nil {
		return "", nil, fmt.Errorf("cannot read the metric name from %s", d)
	}
	var labels []string
	for l := range strings.SplitSeq(m[2], ",") {
		if l = strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"); l != "" {
			labels = append(labels, l)
		}
	}
	return m[1], labels, nil
}

// lookup returns the labels of the series name, which may be a histogram's
// _bucket, _sum or _count.
func (s metricSet) lookup(name string) ([]string, bool) {
	if l, ok := s[name]; ok {
		return l, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if l, ok := s[base]; ok {
				if suffix == "_bucket" {
					l = append(slices.Clone(l), "le")
				}
				return l, true
			}
		}
	}
	return nil, false
}

// promql parses as a stock Prometheus does (no experimental functions).
var promql = parser.NewParser(parser.Options{})

// checkExpr parses expr and returns what is wrong with its references:
// metrics that are not registered (nor pending), label names in
// selectors, by (...) clauses and legends that its metrics do not have.
func (s metricSet) checkExpr(expr string, legendLabels ...string) (problems []string, names []string) {
	e, err := promql.ParseExpr(expr)
	if err != nil {
		return []string{fmt.Sprintf("does not parse: %v", err)}, nil
	}
	// The labels of every metric below n.
	exprLabels := func(n parser.Node) map[string]bool {
		out := map[string]bool{}
		parser.Inspect(n, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				if l, ok := s.lookup(vs.Name); ok {
					for _, x := range append(l, scrapeLabels...) {
						out[x] = true
					}
				}
			}
			return nil
		})
		return out
	}
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			if n.Name == "" {
				problems = append(problems, fmt.Sprintf("selector %s names no metric", n))
				return nil
			}
			names = append(names, n.Name)
			l, ok := s.lookup(n.Name)
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("metric %s is not registered by the agent or the controller", n.Name))
				return nil
			}
			for _, m := range n.LabelMatchers {
				if m.Name != model.MetricNameLabel && !slices.Contains(l, m.Name) && !slices.Contains(scrapeLabels, m.Name) {
					problems = append(problems, fmt.Sprintf("%s has no label %q", n.Name, m.Name))
				}
			}
		case *parser.AggregateExpr:
			if n.Without {
				return nil
			}
			have := exprLabels(n.Expr)
			if len(have) == 0 { // only pending metrics below
				return nil
			}
			for _, g := range n.Grouping {
				if !have[g] {
					problems = append(problems, fmt.Sprintf("%s groups by %q, which none of its metrics has", n.Op, g))
				}
			}
		}
		return nil
	})
	if have, known := s.outputLabels(e); known {
		for _, l := range legendLabels {
			if !have[l] {
				problems = append(problems, fmt.Sprintf("the legend names label %q, which the query's series do not have (they have %v)", l, sortedKeys(have)))
			}
		}
	}
	return problems, names
}

// outputLabels are the labels of the series e returns; known is false
// where a pending metric leaves them open.
func (s metricSet) outputLabels(e parser.Expr) (out map[string]bool, known bool) {
	switch e := e.(type) {
	case *parser.VectorSelector:
		l, ok := s.lookup(e.Name)
		if !ok {
			return nil, false
		}
		out = map[string]bool{}
		for _, x := range append(slices.Clone(l), scrapeLabels...) {
			out[x] = true
		}
		return out, true
	case *parser.MatrixSelector:
		return s.outputLabels(e.VectorSelector)
	case *parser.ParenExpr:
		return s.outputLabels(e.Expr)
	case *parser.UnaryExpr:
		return s.outputLabels(e.Expr)
	case *parser.SubqueryExpr:
		return s.outputLabels(e.Expr)
	case *parser.NumberLiteral, *parser.StringLiteral:
		return map[string]bool{}, true
	case *parser.AggregateExpr:
		in, known := s.outputLabels(e.Expr)
		switch {
		case e.Op == parser.TOPK || e.Op == parser.BOTTOMK || e.Op == parser.LIMITK:
			return in, known
		case e.Without:
			for _, g := range e.Grouping {
				delete(in, g)
			}
			return in, known
		}
		out = map[string]bool{}
		for _, g := range e.Grouping {
			out[g] = true
		}
		return out, true
	case *parser.BinaryExpr:
		l, lk := s.outputLabels(e.LHS)
		r, rk := s.outputLabels(e.RHS)
		switch {
		case e.Op == parser.LOR:
			maps.Copy(l, r)
			return l, lk && rk
		case e.LHS.Type() != parser.ValueTypeVector:
			return r, rk
		case e.VectorMatching != nil && e.VectorMatching.Card == parser.CardOneToOne && e.VectorMatching.On && !e.Op.IsComparisonOperator():
			out = map[string]bool{}
			for _, x := range e.VectorMatching.MatchingLabels {
				out[x] = true
			}
			return out, lk
		}
		return l, lk
	case *parser.Call:
		var in map[string]bool
		known := true
		for _, a := range e.Args {
			if a.Type() == parser.ValueTypeVector || a.Type() == parser.ValueTypeMatrix {
				in, known = s.outputLabels(a)
			}
		}
		if in == nil {
			return map[string]bool{}, known
		}
		if e.Func.Name == "histogram_quantile" {
			delete(in, "le")
		}
		return in, known
	}
	return nil, false
}

// TestCheckExprCatchesMistakes: the reference check is not vacuous.
func TestCheckExprCatchesMistakes(t *testing.T) {
	set := registered(t)
	for _, c := range []struct {
		expr, legend string
		want         string
	}{
		{`xlb_service_up == 0`, "", ""},
		{`xlb_servce_up == 0`, "", "metric xlb_servce_up is not registered"},
		{`xlb_backend_up{svc="web"}`, "", `xlb_backend_up has no label "svc"`},
		{`sum by (svc) (xlb_backend_up)`, "", `groups by "svc"`},
		{`sum by (service) (xlb_backend_up)`, "{{backend}}", `legend names label "backend"`},
		{`histogram_quantile(0.9, sum by (le) (rate(xlb_reconcile_duration_seconds_bucket[5m])))`, "", ""},
		{`xlb_nat_sessions / xlb_nat_sessions_capacity`, "{{instance}}", ""},
		{`rate(xlb_service_up[5m]`, "", "does not parse"},
	} {
		problems, _ := set.checkExpr(c.expr, LegendLabels(c.legend)...)
		got := strings.Join(problems, "; ")
		if c.want == "" && got != "" || !strings.Contains(got, c.want) {
			t.Errorf("%s: problems %q, want %q", c.expr, got, c.want)
		}
	}
}

// sortedKeys is for messages.
func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
