package deploy

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"text/template"

	"sigs.k8s.io/yaml"
)

// No helm binary is at hand (Debian has none) and the Helm module is not
// a dependency, so the tests render the chart themselves: Go's
// text/template with the few Helm and Sprig functions the templates use,
// implemented with Helm's semantics. A template using any other function
// fails to parse here, which keeps the chart inside what this renderer
// (and `helm template`) render alike.

// chart is a loaded chart: metadata, default values, templates.
type chart struct {
	meta   map[string]any // .Chart: Name, Version, AppVersion
	values map[string]any
	tmpl   *template.Template
	files  []string // templates that produce manifests, sorted
}

// release is what .Release holds.
type release struct {
	Name, Namespace string
}

func loadChart(dir string) (*chart, error) {
	var meta struct {
		Name       string `json:"name"`
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := readYAML(filepath.Join(dir, "Chart.yaml"), &meta); err != nil {
		return nil, err
	}
	c := &chart{meta: map[string]any{"Name": meta.Name, "Version": meta.Version, "AppVersion": meta.AppVersion}}
	if err := readYAML(filepath.Join(dir, "values.yaml"), &c.values); err != nil {
		return nil, err
	}
	paths, err := filepath.Glob(filepath.Join(dir, "templates", "*"))
	if err != nil {
		return nil, err
	}
	slices.Sort(paths)
	// Helm's default is missingkey=zero; an error here catches a
	// misspelt value that Helm would render as nothing.
	c.tmpl = template.New(meta.Name).Option("missingkey=error")
	c.tmpl.Funcs(helmFuncs(c.tmpl))
	for _, p := range paths {
		name := filepath.Base(p)
		if name == "NOTES.txt" {
			continue // shown after install, not a manifest
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		if _, err := c.tmpl.New(name).Parse(string(data)); err != nil {
			return nil, fmt.Errorf("chart %s: %w", dir, err)
		}
		// Helm renders no file whose name starts with "_": partials.
		if !strings.HasPrefix(name, "_") {
			c.files = append(c.files, name)
		}
	}
	return c, nil
}

func readYAML(path string, out any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// render renders every template with the chart's values overridden by
// overrides (merged as `helm --values` merges) and decodes the objects.
func (c *chart) render(rel release, overrides map[string]any) ([]object, error) {
	values := mergeValues(deepCopy(c.values).(map[string]any), overrides)
	top := map[string]any{
		"Values":  values,
		"Chart":   c.meta,
		"Release": map[string]any{"Name": rel.Name, "Namespace": rel.Namespace, "Service": "Helm"},
	}
	var objs []object
	for _, f := range c.files {
		var b strings.Builder
		if err := c.tmpl.ExecuteTemplate(&b, f, top); err != nil {
			return nil, err
		}
		got, err := decodeObjects("templates/"+f, []byte(b.String()))
		if err != nil {
			return nil, fmt.Errorf("%w\nrendered:\n%s", err, b.String())
		}
		objs = append(objs, got...)
	}
	sortForInstall(objs)
	return objs, nil
}

// helmInstallOrder is the order in which Helm installs the kinds the chart
// renders (a subset of Helm's InstallOrder); other kinds come last.
var helmInstallOrder = []string{
	"Namespace", "PodDisruptionBudget", "ServiceAccount", "Secret", "ConfigMap",
	"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
	"Service", "DaemonSet", "Pod", "ReplicaSet", "Deployment",
}

// sortForInstall orders objs as Helm installs them, so that, e.g., a
// Deployment's ServiceAccount exists before its pods are created.
func sortForInstall(objs []object) {
	rank := func(o object) int {
		if i := slices.Index(helmInstallOrder, o.GetKind()); i >= 0 {
			return i
		}
		return len(helmInstallOrder)
	}
	slices.SortStableFunc(objs, func(a, b object) int { return rank(a) - rank(b) })
}

// mergeValues merges src into dst: maps merge key by key, anything else
// in src replaces what dst has.
func mergeValues(dst, src map[string]any) map[string]any {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				dst[k] = mergeValues(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
	return dst
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

// helmFuncs are the functions the chart may use, with Helm's (Sprig's)
// argument order and results.
func helmFuncs(t *template.Template) template.FuncMap {
	return template.FuncMap{
		"include": func(name string, data any) (string, error) {
			var b strings.Builder
			err := t.ExecuteTemplate(&b, name, data)
			return b.String(), err
		},
		// Helm: sigs.k8s.io/yaml, without the final newline.
		"toYaml": func(v any) (string, error) {
			out, err := yaml.Marshal(v)
			return strings.TrimSuffix(string(out), "\n"), err
		},
		"indent":  indent,
		"nindent": func(n int, s string) string { return "\n" + indent(n, s) },
		"quote": func(args ...any) string {
			var out []string
			for _, a := range args {
				if a != nil {
					out = append(out, fmt.Sprintf("%q", fmt.Sprint(a)))
				}
			}
			return strings.Join(out, " ")
		},
		"default": func(d any, given ...any) any {
			if len(given) == 0 || empty(given[0]) {
				return d
			}
			return given[0]
		},
		"trunc": func(n int, s string) string {
			if n >= 0 && len(s) > n {
				return s[:n]
			}
			return s
		},
		// Helm: fails the rendering on nil or "", with the message.
		"required": func(msg string, v any) (any, error) {
			if v == nil || v == "" {
				return nil, errors.New(msg)
			}
			return v, nil
		},
		"trimSuffix": func(suffix, s string) string { return strings.TrimSuffix(s, suffix) },
		"contains":   func(substr, s string) bool { return strings.Contains(s, substr) },
		// Sprig: sets key in the dict and returns the dict.
		"set": func(d map[string]any, key string, v any) map[string]any {
			d[key] = v
			return d
		},
		"keys": func(dicts ...map[string]any) []string {
			var out []string
			for _, d := range dicts {
				for k := range d {
					out = append(out, k)
				}
			}
			return out
		},
		"sortAlpha": func(list any) []string {
			var out []string
			switch l := list.(type) {
			case []string:
				out = slices.Clone(l)
			case []any:
				for _, e := range l {
					out = append(out, fmt.Sprint(e))
				}
			}
			slices.Sort(out)
			return out
		},
		"dict": func(kv ...any) (map[string]any, error) {
			if len(kv)%2 != 0 {
				return nil, fmt.Errorf("dict: odd number of arguments %d", len(kv))
			}
			m := map[string]any{}
			for i := 0; i < len(kv); i += 2 {
				m[fmt.Sprint(kv[i])] = kv[i+1]
			}
			return m, nil
		},
	}
}

// indent prefixes every line of s with n spaces, as Sprig does.
func indent(n int, s string) string {
	pad := strings.Repeat(" ", n)
	return pad + strings.ReplaceAll(s, "\n", "\n"+pad)
}

// empty is Sprig's notion of an unset value, which default replaces.
func empty(v any) bool {
	if v == nil {
		return true
	}
	r := reflect.ValueOf(v)
	switch r.Kind() {
	case reflect.String, reflect.Map, reflect.Slice, reflect.Array:
		return r.Len() == 0
	case reflect.Bool:
		return !r.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return r.Int() == 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return r.Uint() == 0
	case reflect.Float32, reflect.Float64:
		return r.Float() == 0
	case reflect.Pointer, reflect.Interface:
		return r.IsNil()
	}
	return false
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
