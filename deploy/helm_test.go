package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	ri "helm.sh/helm/v4/pkg/release"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// The tests load, lint, render and install the chart with Helm's own
// packages (helm.sh/helm/v4): what `helm lint`, `helm template`,
// `helm install` and `helm upgrade` run, so the chart may use any
// function Helm has and renders here as it does for an operator.

// kubeVersion is the cluster version the chart is rendered for offline.
// Helm's default, in a test binary, is a fixed old one (1.20) that the
// chart's kubeVersion constraint refuses.
const kubeVersion = "v1.36.0"

// helmChart is the chart as Helm loads it.
type helmChart struct{ *chart.Chart }

// release is the release's name and namespace.
type release struct {
	Name, Namespace string
}

func loadChart(dir string) (*helmChart, error) {
	c, err := loader.LoadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("helm: load chart %s: %w", dir, err)
	}
	return &helmChart{c}, nil
}

// render is `helm template NAME CHART -n NAMESPACE --values overrides`:
// Helm coalesces the chart's values with overrides, checks them against
// values.schema.json, renders the templates and orders the objects as
// it installs them.
func (c *helmChart) render(rel release, overrides map[string]any) ([]object, error) {
	kv, err := common.ParseKubeVersion(kubeVersion)
	if err != nil {
		return nil, err
	}
	inst := action.NewInstall(action.NewConfiguration())
	inst.DryRunStrategy = action.DryRunClient
	inst.ReleaseName, inst.Namespace = rel.Name, rel.Namespace
	inst.Replace = true // no release storage to look names up in
	inst.KubeVersion = kv
	r, err := inst.Run(c.Chart, values(overrides))
	if err != nil {
		return nil, err
	}
	return releaseObjects(r)
}

// values is a copy of v that Helm may change: it coalesces into the
// map it is given.
func values(v map[string]any) map[string]any {
	if v == nil {
		return map[string]any{}
	}
	return deepCopy(v).(map[string]any)
}

// releaseObjects decodes a release's manifest, each object named by the
// template it came from.
func releaseObjects(r ri.Releaser) ([]object, error) {
	acc, err := ri.NewAccessor(r)
	if err != nil {
		return nil, err
	}
	var objs []object
	rd := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(acc.Manifest())))
	for {
		doc, err := rd.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		// Helm heads every document with "# Source: CHART/templates/FILE".
		from := "the chart's manifest"
		if line, _, _ := bytes.Cut(bytes.TrimSpace(doc), []byte("\n")); bytes.HasPrefix(line, []byte("# Source: ")) {
			from = string(bytes.TrimPrefix(line, []byte("# Source: ")))
		}
		got, err := decodeObjects(from, doc)
		if err != nil {
			return nil, err
		}
		objs = append(objs, got...)
	}
}

func deepCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		s := make([]any, len(v))
		for i, e := range v {
			s[i] = deepCopy(e)
		}
		return s
	}
	return v
}

// helmLabels are the labels only the chart sets; the comparison with
// deploy/ leaves them out.
var helmLabels = []string{"app.kubernetes.io/managed-by", "helm.sh/chart"}

// withoutHelmLabels returns a copy of o's content without helmLabels.
func withoutHelmLabels(o object) map[string]any {
	m := deepCopy(o.Object).(map[string]any)
	meta, _ := m["metadata"].(map[string]any)
	if labels, ok := meta["labels"].(map[string]any); ok {
		for _, l := range helmLabels {
			delete(labels, l)
		}
		if len(labels) == 0 {
			delete(meta, "labels")
		}
	}
	return m
}

// diff lists where a and b differ, as field paths.
func diff(path string, a, b any) []string {
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			break
		}
		var out []string
		keys := slices.Sorted(maps.Keys(av))
		for k := range bv {
			if _, ok := av[k]; !ok {
				keys = append(keys, k)
			}
		}
		for _, k := range keys {
			out = append(out, diff(path+"."+k, av[k], bv[k])...)
		}
		return out
	case []any:
		bv, ok := b.([]any)
		if !ok || len(av) != len(bv) {
			break
		}
		var out []string
		for i := range av {
			out = append(out, diff(fmt.Sprintf("%s[%d]", path, i), av[i], bv[i])...)
		}
		return out
	}
	if reflect.DeepEqual(a, b) {
		return nil
	}
	return []string{fmt.Sprintf("%s: %s vs %s", strings.TrimPrefix(path, "."), show(a), show(b))}
}

func show(v any) string {
	if v == nil {
		return "(absent)"
	}
	out, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(out)
}
