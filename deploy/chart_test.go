package deploy

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/engine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

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
		"agent": map[string]any{"interface": "bond0", "nodeSelector": map[string]any{"role": "lb"}, "metricsPort": 9500,
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
		"bgpAdvertisements": []any{map[string]any{"name": "to-tor", "spec": map[string]any{"peers": []any{"tor"}, "aggregationLength": 24}}},
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
		{"BGPAdvertisement /to-tor", []string{"spec"}, map[string]any{"peers": []any{"tor"}, "aggregationLength": 24.0}},
		{"Deployment lb/edge-xlb-controller", []string{"spec", "template", "spec", "containers", "0", "image"}, "registry.example/xlb:v9"},
		{"Deployment lb/edge-xlb-controller", []string{"spec", "template", "spec", "containers", "0", "args"},
			[]any{"controller", "--namespace=$(POD_NAMESPACE)", "--lease-name=edge-lease", "--serve-classless=true", "--metrics-addr=:9999"}},
		{"Role lb/edge-xlb-controller", []string{"rules"}, []any{
			map[string]any{"apiGroups": []any{"coordination.k8s.io"}, "resources": []any{"leases"}, "verbs": []any{"create"}},
			map[string]any{"apiGroups": []any{"coordination.k8s.io"}, "resources": []any{"leases"}, "resourceNames": []any{"edge-lease"}, "verbs": []any{"get", "update"}},
		}},
		{"DaemonSet lb/edge-xlb-agent", []string{"spec", "template", "spec", "containers", "0", "args"},
			[]any{"agent", "--source=kubernetes", "--serve-classless=true", "--interface=bond0", "--metrics=[$(HOST_IP)]:9500",
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

// agent.metricsPort passes --metrics on the node's address (the host IP
// from the downward API) and declares the port for Prometheus; 0 or ""
// passes neither, nor the HOST_IP it would need.
func TestChartAgentMetricsPort(t *testing.T) {
	c, err := loadChart(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	hostIP := map[string]any{"name": "HOST_IP", "valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "status.hostIP"}}}
	for _, tc := range []struct {
		name  string
		port  any // nil: the default
		arg   string
		ports []any
	}{
		{"default", nil, "--metrics=[$(HOST_IP)]:9400", []any{map[string]any{"name": "metrics", "containerPort": 9400.0, "protocol": "TCP"}}},
		{"another port", 9500, "--metrics=[$(HOST_IP)]:9500", []any{map[string]any{"name": "metrics", "containerPort": 9500.0, "protocol": "TCP"}}},
		{"zero", 0, "", nil},
		{"empty", "", "", nil},
	} {
		var vals map[string]any
		if tc.port != nil {
			vals = map[string]any{"agent": map[string]any{"metricsPort": tc.port}}
		}
		objs, err := c.render(release{Name: "xlb", Namespace: "xlb-system"}, vals)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		i := slices.IndexFunc(objs, func(o object) bool { return o.key() == "DaemonSet xlb-system/xlb-agent" })
		if i < 0 {
			t.Fatal("no agent DaemonSet")
		}
		containers, _, _ := unstructured.NestedSlice(objs[i].Object, "spec", "template", "spec", "containers")
		ctr := containers[0].(map[string]any)
		args := stringList(ctr["args"])
		metrics := slices.IndexFunc(args, func(a string) bool { return strings.HasPrefix(a, "--metrics") })
		switch {
		case tc.arg == "" && metrics >= 0:
			t.Errorf("%s: args %v, want no --metrics", tc.name, args)
		case tc.arg != "" && (metrics < 0 || args[metrics] != tc.arg):
			t.Errorf("%s: args %v, want %s", tc.name, args, tc.arg)
		}
		if got, ok := ctr["ports"]; tc.ports == nil && ok {
			t.Errorf("%s: ports %v, want none", tc.name, got)
		} else if d := diff("", tc.ports, got); tc.ports != nil && len(d) > 0 {
			t.Errorf("%s: ports: %v (want vs got)", tc.name, d)
		}
		env, _ := ctr["env"].([]any)
		if has := slices.ContainsFunc(env, func(e any) bool { return len(diff("", hostIP, e)) == 0 }); has != (tc.arg != "") {
			t.Errorf("%s: env %v: HOST_IP from status.hostIP %v, want %v", tc.name, env, has, tc.arg != "")
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
// only from a chart's own crds/ directory, so they are copies, which
// `make generate` writes with the CRDs; this keeps them in step.
func TestChartCRDs(t *testing.T) {
	src, err := filepath.Glob("crds/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(src) == 0 {
		t.Fatal("deploy/crds has no *.yaml")
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
	const fix = "; run make generate (or make generate-api) and commit"
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

// richValues sets every knob of values.yaml to something other than its
// default; the lint and strict tests render with them.
var richValues = map[string]any{
	"image":            map[string]any{"repository": "registry.example/xlb", "tag": "v9", "pullPolicy": "Always"},
	"imagePullSecrets": []any{map[string]any{"name": "registry"}},
	"serveClassless":   true,
	"controller": map[string]any{"replicas": 3, "leaseName": "edge-lease", "metricsPort": 9999,
		"priorityClassName": "system-cluster-critical", "nodeSelector": map[string]any{"role": "control"},
		"tolerations": []any{map[string]any{"key": "role", "operator": "Equal", "value": "control", "effect": "NoSchedule"}}},
	"agent": map[string]any{"interface": "bond0", "nodeSelector": map[string]any{"xlb.io/lb-node": nil, "role": "lb"}, "metricsPort": 9500,
		"bgpPasswordSecrets": []any{"tor-password"}, "terminationGracePeriodSeconds": 60,
		"resources": map[string]any{"requests": map[string]any{"cpu": "200m", "memory": "256Mi"}, "limits": map[string]any{"memory": "1Gi"}}},
	"backend":      map[string]any{"interface": "ens5", "metricsPort": 9500, "metricsHost": "127.0.0.1"},
	"addressPools": []any{map[string]any{"name": "p1", "spec": map[string]any{"addresses": []any{"10.99.0.0/28"}}}},
	"bgpPeers": []any{map[string]any{"name": "tor", "spec": map[string]any{"myASN": 65001, "peerASN": 65000, "peerAddress": "10.0.1.1",
		"passwordSecret": map[string]any{"name": "tor2-password"}}}},
}

// `helm lint` finds nothing to warn about, with the default values and
// with every knob set; and it does find a wrong value.
func TestChartLint(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   string // an error lint must report; "" for none
	}{
		{"defaults", nil, ""},
		{"every knob", richValues, ""},
		{"wrong type", map[string]any{"controller": map[string]any{"replicas": "two"}}, "at '/controller/replicas': got string, want integer"},
	} {
		l := lint.RunAll(chartDir, values(tc.values), "xlb-system", lint.WithKubeVersion(mustKubeVersion(t)))
		var problems []string
		for _, m := range l.Messages {
			if m.Severity >= support.WarningSev {
				problems = append(problems, m.Error())
			}
		}
		switch {
		case tc.want == "" && len(problems) > 0:
			t.Errorf("%s: helm lint:\n%s", tc.name, strings.Join(problems, "\n"))
		case tc.want != "" && !strings.Contains(strings.Join(problems, "\n"), tc.want):
			t.Errorf("%s: helm lint reports %q, want an error saying %q", tc.name, problems, tc.want)
		}
	}
}

func mustKubeVersion(t *testing.T) *common.KubeVersion {
	t.Helper()
	kv, err := common.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// values.schema.json refuses a wrong value before anything is rendered,
// with a message that names it and says what is wanted.
func TestChartValuesSchema(t *testing.T) {
	c, err := loadChart(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"wrong type", map[string]any{"controller": map[string]any{"replicas": "two"}},
			"at '/controller/replicas': got string, want integer"},
		{"fraction", map[string]any{"controller": map[string]any{"replicas": 1.5}},
			"at '/controller/replicas': got number, want integer"},
		{"misspelt key", map[string]any{"controler": map[string]any{"replicas": 2}},
			"additional properties 'controler' not allowed"},
		{"misspelt nested key", map[string]any{"agent": map[string]any{"interfaces": "bond0"}},
			"at '/agent': additional properties 'interfaces' not allowed"},
		{"port out of range", map[string]any{"backend": map[string]any{"metricsPort": 70000}},
			"at '/backend/metricsPort': maximum: got 70,000, want 65,535"},
		{"port zero", map[string]any{"controller": map[string]any{"metricsPort": 0}},
			"at '/controller/metricsPort': minimum: got 0, want 1"},
		{"agent port out of range", map[string]any{"agent": map[string]any{"metricsPort": 70000}},
			"at '/agent/metricsPort': maximum: got 70,000, want 65,535"},
		{"agent port as a string", map[string]any{"agent": map[string]any{"metricsPort": "9400"}},
			"at '/agent/metricsPort': got string, want integer"},
		{"bad enum", map[string]any{"image": map[string]any{"pullPolicy": "Sometimes"}},
			"at '/image/pullPolicy': value must be one of 'Always', 'IfNotPresent', 'Never'"},
		{"host name for an address", map[string]any{"backend": map[string]any{"metricsHost": "metrics.example"}},
			"'metrics.example' is not valid ipv4"},
		{"interface name too long", map[string]any{"agent": map[string]any{"interface": "a-very-long-interface-name"}},
			"at '/agent/interface': maxLength: got 26, want 15"},
		{"object name", map[string]any{"bgpPeers": []any{map[string]any{"name": "Tor_1", "spec": map[string]any{}}}},
			"at '/bgpPeers/0/name': 'Tor_1' does not match pattern"},
		{"resource without spec", map[string]any{"addressPools": []any{map[string]any{"name": "p1"}}},
			"at '/addressPools/0': missing property 'spec'"},
		{"nat timeout without unit", map[string]any{"agent": map[string]any{"nat": map[string]any{"timeouts": map[string]any{"udp": "30"}}}},
			"at '/agent/nat/timeouts/udp': '30' does not match pattern"},
		{"nat sessions too few", map[string]any{"agent": map[string]any{"nat": map[string]any{"sessions": 100}}},
			"at '/agent/nat/sessions'"},
		{"monitoring misspelt", map[string]any{"monitoring": map[string]any{"prometheusRules": map[string]any{"enabled": true}}},
			"at '/monitoring': additional properties 'prometheusRules' not allowed"},
	} {
		_, err := c.render(release{Name: "xlb", Namespace: "xlb-system"}, tc.values)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: rendering with %v: got %v, want an error saying %q", tc.name, tc.values, err, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), "values don't meet the specifications of the schema") {
			t.Errorf("%s: %v: not values.schema.json's error", tc.name, err)
		}
	}
}

// The templates read no value that values.yaml lacks: Helm's engine in
// strict mode (which fails on a missing key, where the default renders
// nothing) renders the chart with the default values and with every
// knob set, and fails on a template with a misspelt value.
func TestChartStrict(t *testing.T) {
	c, err := loadChart(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	caps := common.DefaultCapabilities.Copy()
	caps.KubeVersion = *mustKubeVersion(t)
	render := func(ch *chart.Chart, vals map[string]any) error {
		rv, err := util.ToRenderValuesWithSchemaValidation(ch, values(vals),
			common.ReleaseOptions{Name: "xlb", Namespace: "xlb-system", Revision: 1, IsInstall: true}, caps, false)
		if err != nil {
			return err
		}
		_, err = engine.Engine{Strict: true}.RenderWithContext(t.Context(), ch, rv)
		return err
	}
	for name, vals := range map[string]map[string]any{"defaults": nil, "every knob": richValues} {
		if err := render(c.Chart, vals); err != nil {
			t.Errorf("%s: strict rendering: %v", name, err)
		}
	}
	typo := *c.Chart
	typo.Templates = append(slices.Clone(c.Templates), &common.File{Name: "templates/typo.yaml",
		Data: []byte("# {{ .Values.controller.replica }}\n")})
	if err := render(&typo, nil); err == nil || !strings.Contains(err.Error(), "replica") {
		t.Errorf("strict rendering of a template reading .Values.controller.replica: got %v, want an error naming it", err)
	}
}
