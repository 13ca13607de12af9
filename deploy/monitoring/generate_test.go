package monitoring

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "write "+ManifestFile+" and the chart's "+chartTemplate+" from "+RulesFile)

const (
	chartDir      = "../helm/xlb"
	chartTemplate = "templates/prometheusrule.yaml"
)

// groupsBody is the rules file from its groups: line on, without the
// comments before it.
func groupsBody(t *testing.T) string {
	t.Helper()
	s := string(Rules())
	i := strings.Index(s, "\ngroups:\n")
	if i < 0 {
		t.Fatalf("%s: no top-level groups:", RulesFile)
	}
	return s[i+1:]
}

func indent(s, by string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) != "" {
			lines[i] = by + l
		}
	}
	return strings.Join(lines, "")
}

const generated = "Generated from deploy/monitoring/" + RulesFile + " by `go test ./deploy/monitoring/ -update`: edit that file, not this one."

// manifest is the PrometheusRule of deploy/monitoring.
func manifest(t *testing.T) []byte {
	return []byte(`# ` + generated + `
# xlb's alerting rules for the Prometheus Operator. Its Prometheus picks up
# PrometheusRules by label (its ruleSelector, e.g. release: NAME with
# kube-prometheus-stack): add that label here, or with kubectl label.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: xlb
  namespace: xlb-system
  labels:
    app.kubernetes.io/name: xlb
    app.kubernetes.io/instance: xlb
spec:
` + indent(groupsBody(t), "  "))
}

// templateAction is one {{ ... }} of an alert's annotations, which Helm
// must leave for Prometheus.
var templateAction = regexp.MustCompile(`\{\{.*?\}\}`)

// chartRules is the chart's template: the same PrometheusRule, off unless
// monitoring.prometheusRule.enabled, with the annotations' templates
// quoted for Helm.
func chartRules(t *testing.T) []byte {
	body := groupsBody(t)
	if strings.Contains(body, "`") {
		t.Fatalf("%s: a backquote cannot be quoted for Helm", RulesFile)
	}
	body = templateAction.ReplaceAllStringFunc(body, func(a string) string { return "{{`" + a + "`}}" })
	return []byte(`{{- /* ` + generated + `
xlb's alerting rules for the Prometheus Operator. */ -}}
{{- if .Values.monitoring.prometheusRule.enabled }}
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: {{ include "xlb.fullname" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "xlb.labels" (dict "root" $ "component" "") | nindent 4 }}
    {{- with .Values.monitoring.prometheusRule.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
` + indent(body, "  ") + `{{- end }}
`)
}

// TestGeneratedFiles: the PrometheusRule and the chart's template are what
// the rules file gives; -update writes them.
func TestGeneratedFiles(t *testing.T) {
	for _, f := range []struct {
		path string
		want []byte
	}{
		{ManifestFile, manifest(t)},
		{filepath.Join(chartDir, chartTemplate), chartRules(t)},
	} {
		if *update {
			if err := os.WriteFile(f.path, f.want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatalf("%v (run go test ./deploy/monitoring/ -update)", err)
		}
		if !bytes.Equal(got, f.want) {
			t.Errorf("%s is stale: run go test ./deploy/monitoring/ -update", f.path)
		}
	}
}

// rulesGroups decodes the rules file as data.
func rulesGroups(t *testing.T) any {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal(Rules(), &doc); err != nil {
		t.Fatal(err)
	}
	return doc["groups"]
}

// TestManifestHoldsTheRules: the PrometheusRule's spec.groups are the rules
// file's groups, decoded.
func TestManifestHoldsTheRules(t *testing.T) {
	b, err := os.ReadFile(ManifestFile)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["apiVersion"] != "monitoring.coreos.com/v1" || m["kind"] != "PrometheusRule" {
		t.Errorf("%s: %v %v, want a monitoring.coreos.com/v1 PrometheusRule", ManifestFile, m["apiVersion"], m["kind"])
	}
	spec, _ := m["spec"].(map[string]any)
	if !reflect.DeepEqual(spec["groups"], rulesGroups(t)) {
		t.Errorf("%s: spec.groups differ from %s", ManifestFile, RulesFile)
	}
}

// renderChart renders the chart with Helm's engine as release "xlb" in
// xlb-system, with values over the chart's own.
func renderChart(t *testing.T, values map[string]any) map[string]string {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := util.ToRenderValues(c, values, common.ReleaseOptions{Name: "xlb", Namespace: "xlb-system", IsInstall: true}, common.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	out, err := engine.Render(c, vals)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestChartPrometheusRule: Helm renders no PrometheusRule by default, and
// with monitoring.prometheusRule.enabled one whose groups are the rules
// file's, annotations' templates intact, with the labels asked for.
func TestChartPrometheusRule(t *testing.T) {
	key := "xlb/" + chartTemplate
	if s := strings.TrimSpace(renderChart(t, nil)[key]); s != "" {
		t.Errorf("rendered by default:\n%s", s)
	}
	out := renderChart(t, map[string]any{"monitoring": map[string]any{"prometheusRule": map[string]any{
		"enabled": true, "labels": map[string]any{"release": "kube-prometheus-stack"}}}})
	var m struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name      string            `json:"name"`
			Namespace string            `json:"namespace"`
			Labels    map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec map[string]any `json:"spec"`
	}
	if err := yaml.Unmarshal([]byte(out[key]), &m); err != nil {
		t.Fatalf("%v in:\n%s", err, out[key])
	}
	if m.Kind != "PrometheusRule" || m.Metadata.Name != "xlb" || m.Metadata.Namespace != "xlb-system" ||
		m.Metadata.Labels["release"] != "kube-prometheus-stack" || m.Metadata.Labels["app.kubernetes.io/name"] != "xlb" {
		t.Errorf("rendered %s %s/%s labels %v", m.Kind, m.Metadata.Namespace, m.Metadata.Name, m.Metadata.Labels)
	}
	if !reflect.DeepEqual(m.Spec["groups"], rulesGroups(t)) {
		t.Errorf("the rendered groups differ from %s:\n%s", RulesFile, out[key])
	}
	if !strings.Contains(out[key], "{{ $labels.service }}") {
		t.Errorf("the annotations' templates are gone:\n%s", out[key])
	}
}
