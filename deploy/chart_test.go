package deploy

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/template"
)

var updateChartCRDs = flag.Bool("update-chart-crds", false, "copy deploy/crds/*.yaml into the chart's crds/ before comparing")

const chartDir = "helm/xlb"

// The chart with its default values, as release "xlb" in xlb-system, must
// render exactly the objects of deploy/, less the Namespace (Helm's
// --create-namespace makes it) and Helm's own labels.
func TestChartRendersDeploy(t *testing.T) {
	files, err := manifestFiles(".")
	if err != nil {
		t.Fatal(err)
	}
	want, err := readObjects(files...)
	if err != nil {
		t.Fatal(err)
	}
	c, err := loadChart(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.render(release{Name: "xlb", Namespace: "xlb-system"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rendered := map[string]object{}
	for _, o := range got {
		if _, dup := rendered[o.key()]; dup {
			t.Errorf("%s: the chart renders %s twice", o.from, o.key())
		}
		rendered[o.key()] = o
	}
	seen := map[string]bool{}
	for _, w := range want {
		seen[w.key()] = true
		g, ok := rendered[w.key()]
		switch {
		case w.GetKind() == "Namespace":
			if ok {
				t.Errorf("the chart renders %s; Helm creates the release namespace (--create-namespace)", w.key())
			}
			continue
		case !ok:
			t.Errorf("%s: %s is missing from the chart's rendering", w.from, w.key())
			continue
		}
		for _, d := range diff("", withoutHelmLabels(w), withoutHelmLabels(g)) {
			t.Errorf("%s: %s differs in the chart (%s): %s (deploy vs chart)", w.from, w.key(), g.from, d)
		}
		labels := g.GetLabels()
		for _, l := range helmLabels {
			if labels[l] == "" {
				t.Errorf("%s: %s has no label %s", g.from, g.key(), l)
			}
		}
	}
	for k, g := range rendered {
		if !seen[k] {
			t.Errorf("%s: the chart renders %s, which deploy/ does not have", g.from, k)
		}
	}
}

// Values change what they should; these are the knobs docs/kubernetes.md
// documents.
func TestChartValues(t *testing.T) {
	c, err := loadChart(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := c.render(release{Name: "edge", Namespace: "lb"}, map[string]any{
		"image":          map[string]any{"repository": "registry.example/xlb", "tag": "v9"},
		"serveClassless": true,
		"controller":     map[string]any{"replicas": 3, "leaseName": "edge-lease", "metricsPort": 9999},
		"agent": map[string]any{"interface": "bond0", "nodeSelector": map[string]any{"role": "lb"},
			"bgpPasswordSecrets": []any{"tor-password", "other-peer"},
			"nat":                map[string]any{"ports": "40000-49999", "sessions": 4096, "timeouts": map[string]any{"udp": "30s", "tcpEstablished": "2h"}}},
		"addressPools": []any{map[string]any{"name": "p1", "spec": map[string]any{"addresses": []any{"10.99.0.0/28"}}}},
		"bgpPeers": []any{
			map[string]any{"name": "tor", "spec": map[string]any{"myASN": 65001, "peerASN": 65000, "peerAddress": "10.0.1.1"}},
			map[string]any{"name": "tor2", "spec": map[string]any{"myASN": 65001, "peerASN": 65000, "peerAddress": "10.0.1.2",
				"passwordSecret": map[string]any{"name": "tor2-password"}}},
			map[string]any{"name": "tor3", "spec": map[string]any{"myASN": 65001, "peerASN": 65000, "peerAddress": "10.0.1.3",
				"passwordSecret": map[string]any{"name": "tor-password", "namespace": "lb"}}},
			// Another namespace's Secret needs a Role there.
			map[string]any{"name": "tor4", "spec": map[string]any{"myASN": 65001, "peerASN": 65000, "peerAddress": "10.0.1.4",
				"passwordSecret": map[string]any{"name": "elsewhere", "namespace": "other"}}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]object{}
	for _, o := range objs {
		byKey[o.key()] = o
	}
	get := func(key string, fields ...string) any {
		t.Helper()
		o, ok := byKey[key]
		if !ok {
			t.Fatalf("no %s in the rendering", key)
		}
		var v any = o.Object
		for _, f := range fields {
			switch x := v.(type) {
			case map[string]any:
				v = x[f]
			case []any:
				i, err := strconv.Atoi(f)
				if err != nil || i >= len(x) {
					t.Fatalf("%s: no item %q in %s", key, f, strings.Join(fields, "."))
				}
				v = x[i]
			}
		}
		return v
	}
	for _, tc := range []struct {
		key    string
		fields []string
		want   any
	}{
		{"Deployment lb/edge-xlb-controller", []string{"spec", "replicas"}, 3.0},
		{"Deployment lb/edge-xlb-controller", []string{"spec", "template", "spec", "containers", "0", "image"}, "registry.example/xlb:v9"},
		{"Deployment lb/edge-xlb-controller", []string{"spec", "template", "spec", "containers", "0", "args"},
			[]any{"controller", "--namespace=$(POD_NAMESPACE)", "--lease-name=edge-lease", "--serve-classless=true", "--metrics-addr=:9999"}},
		{"Role lb/edge-xlb-controller", []string{"rules"}, []any{
			map[string]any{"apiGroups": []any{"coordination.k8s.io"}, "resources": []any{"leases"}, "verbs": []any{"create"}},
			map[string]any{"apiGroups": []any{"coordination.k8s.io"}, "resources": []any{"leases"}, "resourceNames": []any{"edge-lease"}, "verbs": []any{"get", "update"}},
		}},
		{"DaemonSet lb/edge-xlb-agent", []string{"spec", "template", "spec", "containers", "0", "args"},
			[]any{"agent", "--source=kubernetes", "--serve-classless=true", "--interface=bond0",
				"--nat-ports=40000-49999", "--nat-sessions=4096", "--nat-timeouts=tcpEstablished=2h,udp=30s"}},
		{"DaemonSet lb/edge-xlb-backend", []string{"spec", "template", "spec", "containers", "0", "args"},
			[]any{"backend", "--source=kubernetes", "--interface=eth0", "--serve-classless=true", "--metrics-addr=[$(POD_IP)]:9402"}},
		// Helm merges maps: the default selector stays unless set to null.
		{"DaemonSet lb/edge-xlb-agent", []string{"spec", "template", "spec", "nodeSelector"}, map[string]any{"role": "lb", "xlb.io/lb-node": "true"}},
		// The agent reads the password Secrets by name: the listed ones
		// and the bgpPeers', in the release's namespace, each once.
		{"Role lb/edge-xlb-agent", []string{"rules"}, []any{
			map[string]any{"apiGroups": []any{""}, "resources": []any{"secrets"},
				"resourceNames": []any{"other-peer", "tor-password", "tor2-password"}, "verbs": []any{"get", "list", "watch"}},
		}},
		{"RoleBinding lb/edge-xlb-agent", []string{"subjects"}, []any{
			map[string]any{"kind": "ServiceAccount", "name": "edge-xlb-agent", "namespace": "lb"},
		}},
		{"AddressPool /p1", []string{"spec", "addresses"}, []any{"10.99.0.0/28"}},
		{"BGPPeer /tor", []string{"spec", "peerAddress"}, "10.0.1.1"},
	} {
		got := get(tc.key, tc.fields...)
		if d := diff("", tc.want, got); len(d) > 0 {
			t.Errorf("%s %s: %v (want vs got)", tc.key, strings.Join(tc.fields, "."), d)
		}
	}
}

// A value the chart cannot do without fails the rendering with its name,
// as Helm's required does.
func TestChartRequiredValues(t *testing.T) {
	c, err := loadChart(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.render(release{Name: "xlb", Namespace: "xlb-system"}, map[string]any{
		"backend": map[string]any{"interface": ""},
	})
	if err == nil || !strings.Contains(err.Error(), "backend.interface") {
		t.Errorf("rendering without backend.interface: got %v, want an error naming it", err)
	}
}

// The chart's crds/ must be byte for byte deploy/crds/: Helm installs CRDs
// only from a chart's own crds/ directory, so they are copies, and this
// keeps them in step. Update them with
//
//	go test ./deploy -run TestChartCRDs -update-chart-crds
func TestChartCRDs(t *testing.T) {
	src, err := filepath.Glob("crds/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(src) == 0 {
		t.Fatal("deploy/crds has no *.yaml")
	}
	if *updateChartCRDs {
		old, _ := filepath.Glob(filepath.Join(chartDir, "crds", "*.yaml"))
		for _, f := range old {
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
		}
		for _, f := range src {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(chartDir, "crds", filepath.Base(f)), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	copies, err := filepath.Glob(filepath.Join(chartDir, "crds", "*"))
	if err != nil {
		t.Fatal(err)
	}
	base := func(paths []string) []string {
		var out []string
		for _, p := range paths {
			out = append(out, filepath.Base(p))
		}
		return out
	}
	const fix = "; run: go test ./deploy -run TestChartCRDs -update-chart-crds"
	if !slices.Equal(base(src), base(copies)) {
		t.Fatalf("deploy/crds has %v, the chart's crds/ %v%s", base(src), base(copies), fix)
	}
	for _, f := range src {
		a, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(chartDir, "crds", filepath.Base(f)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s/crds/%s differs from deploy/%s%s", chartDir, filepath.Base(f), f, fix)
		}
	}
}

// deploy/Kustomization (named so that `kubectl apply -f deploy/` skips it:
// kubectl reads only *.yaml, *.yml and *.json from a directory) must list
// every manifest of the install, in its order.
func TestKustomization(t *testing.T) {
	var k struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
	}
	if err := readYAML("Kustomization", &k); err != nil {
		t.Fatal(err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("Kustomization: apiVersion %q, kind %q", k.APIVersion, k.Kind)
	}
	files, err := installFiles()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(k.Resources, files) {
		t.Errorf("Kustomization resources\n  %v\nwant the install's files\n  %v", k.Resources, files)
	}
}

// The renderer follows Helm's (Sprig's) definitions of the functions the
// chart uses; these are the cases where a naive version differs.
func TestHelmFuncs(t *testing.T) {
	for _, tc := range []struct {
		tmpl string
		data any
		want string
	}{
		{`{{ "a\nb" | nindent 2 }}`, nil, "\n  a\n  b"},
		{`{{ "a\nb" | indent 2 }}`, nil, "  a\n  b"},
		{`{{ .x | default "d" }}`, map[string]any{"x": ""}, "d"},
		{`{{ .x | default "d" }}`, map[string]any{"x": false}, "d"},
		{`{{ .x | default "d" }}`, map[string]any{"x": 0.0}, "d"},
		{`{{ .x | default "d" }}`, map[string]any{"x": "v"}, "v"},
		{`{{ .x | quote }}`, map[string]any{"x": 1.0}, `"1"`},
		{`{{ .x | quote }}`, map[string]any{"x": `a"b`}, `"a\"b"`},
		{`{{ .x | toYaml }}`, map[string]any{"x": map[string]any{"b": "true", "a": 1.0}}, "a: 1\nb: \"true\""},
		{`{{ "abcdef" | trunc 3 }}`, nil, "abc"},
		{`{{ "ab-" | trimSuffix "-" }}`, nil, "ab"},
		{`{{ contains "xlb" "my-xlb" }}`, nil, "true"},
		{`{{ (dict "a" 1).a }}`, nil, "1"},
		{`{{ $d := dict }}{{ $_ := set $d "b" 1 }}{{ $_ := set $d "a" 2 }}{{ keys $d | sortAlpha }}`, nil, "[a b]"},
		{`{{ required "set x" .x }}`, map[string]any{"x": "v"}, "v"},
		{`{{ define "p" }}[{{ . }}]{{ end }}{{ include "p" "v" | quote }}`, nil, `"[v]"`},
	} {
		tmpl := template.New("t")
		tmpl.Funcs(helmFuncs(tmpl))
		if _, err := tmpl.Parse(tc.tmpl); err != nil {
			t.Errorf("%s: %v", tc.tmpl, err)
			continue
		}
		var b strings.Builder
		if err := tmpl.Execute(&b, tc.data); err != nil {
			t.Errorf("%s: %v", tc.tmpl, err)
			continue
		}
		if b.String() != tc.want {
			t.Errorf("%s = %q, want %q", tc.tmpl, b.String(), tc.want)
		}
	}
}
