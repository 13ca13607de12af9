package deploy

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// allowedCaps are the capabilities each component's containers may add,
// each with what the component does with it; everything else is
// dropped. The manifests say the same in their comments (checked below).
// Measured with capsh on a veth in a network namespace: without any one
// of these, the agent or the backend fails to start.
var allowedCaps = map[string]map[string]string{
	"controller": {},
	"agent": {
		"BPF":              "bpf(): maps, the XDP program, pins, the XDP link",
		"PERFMON":          "the verifier refuses the XDP program without it",
		"NET_ADMIN":        "loading a program of type XDP",
		"NET_BIND_SERVICE": "listening on port 179 for passive BGP peers",
		"NET_RAW":          "gratuitous ARP of layer-2 mode (an AF_PACKET socket)",
	},
	"backend": {
		"BPF":       "bpf(): maps, the decapsulation and reply programs, pins, links",
		"PERFMON":   "the verifier refuses the decapsulation program without it",
		"NET_ADMIN": "loading XDP and TC programs, adding the VIPs to lo",
	},
}

// podTemplates returns every pod template of objs (Deployments,
// DaemonSets, …) with the component it runs.
func podTemplates(t *testing.T, objs []object) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, o := range objs {
		spec, ok, _ := unstructured.NestedMap(o.Object, "spec", "template", "spec")
		if !ok {
			continue
		}
		out[o.from+" "+o.key()] = spec
	}
	if len(out) < 3 {
		t.Fatalf("found %d pod templates, want the controller's, the agent's and the backend's", len(out))
	}
	return out
}

// checkPodSecurity checks every pod template of objs: seccomp
// RuntimeDefault, no privilege, every capability dropped but the allowed
// ones of its component, and, on the host network, metrics on a named
// address rather than every address of the node.
func checkPodSecurity(t *testing.T, objs []object) {
	t.Helper()
	for _, o := range objs {
		spec, ok, _ := unstructured.NestedMap(o.Object, "spec", "template", "spec")
		if !ok {
			continue
		}
		where := o.from + " " + o.key()
		component, _, _ := unstructured.NestedString(o.Object, "spec", "template", "metadata", "labels", "app.kubernetes.io/component")
		allowed, known := allowedCaps[component]
		if !known {
			t.Errorf("%s: pod template of component %q, which has no list of allowed capabilities", where, component)
			continue
		}
		if typ, _, _ := unstructured.NestedString(spec, "securityContext", "seccompProfile", "type"); typ != "RuntimeDefault" {
			t.Errorf("%s: pod securityContext.seccompProfile.type %q, want RuntimeDefault", where, typ)
		}
		hostNetwork, _, _ := unstructured.NestedBool(spec, "hostNetwork")
		for _, field := range []string{"initContainers", "containers"} {
			list, _, _ := unstructured.NestedSlice(spec, field)
			for _, c := range list {
				c, _ := c.(map[string]any)
				name, _ := c["name"].(string)
				cw := where + " container " + name
				if typ, ok, _ := unstructured.NestedString(c, "securityContext", "seccompProfile", "type"); ok && typ != "RuntimeDefault" {
					t.Errorf("%s: seccompProfile.type %q overrides the pod's RuntimeDefault", cw, typ)
				}
				if p, _, _ := unstructured.NestedBool(c, "securityContext", "privileged"); p {
					t.Errorf("%s: privileged", cw)
				}
				if esc, ok, _ := unstructured.NestedBool(c, "securityContext", "allowPrivilegeEscalation"); !ok || esc {
					t.Errorf("%s: allowPrivilegeEscalation is not false", cw)
				}
				if drop, _, _ := unstructured.NestedStringSlice(c, "securityContext", "capabilities", "drop"); !slices.Equal(drop, []string{"ALL"}) {
					t.Errorf("%s: capabilities.drop %v, want [ALL]", cw, drop)
				}
				add, _, _ := unstructured.NestedStringSlice(c, "securityContext", "capabilities", "add")
				for _, cap := range add {
					if _, ok := allowed[strings.TrimPrefix(cap, "CAP_")]; !ok {
						t.Errorf("%s: adds capability %s, which %s does not need (allowed: %v)", cw, cap, component, slices.Sorted(maps.Keys(allowed)))
					}
				}
				if hostNetwork {
					checkHostPorts(t, cw, c)
				}
			}
		}
	}
}

// listenFlags are the flags of xlb's commands that open a TCP listener:
// the backend's and the controller's --metrics-addr, the agent's
// --metrics.
var listenFlags = []string{"--metrics-addr=", "--metrics="}

// checkHostPorts checks a container on the host network: each listener
// its args open is on a named address, not every address of the node
// (the VIPs on lo included), and each port it declares is one of them.
func checkHostPorts(t *testing.T, where string, c map[string]any) {
	t.Helper()
	listens := map[string]bool{}
	for _, a := range stringList(c["args"]) {
		for _, f := range listenFlags {
			v, ok := strings.CutPrefix(a, f)
			if !ok {
				continue
			}
			if err := namedHost(v); err != nil {
				t.Errorf("%s: %s%s: %v (host network: that is every address of the node)", where, f, v, err)
			}
			if _, port, err := net.SplitHostPort(v); err == nil {
				listens[port] = true
			}
		}
	}
	ports, _, _ := unstructured.NestedSlice(c, "ports")
	for _, p := range ports {
		p, _ := p.(map[string]any)
		port := fmt.Sprint(p["containerPort"])
		if !listens[port] {
			t.Errorf("%s: declares port %s, which none of its listeners (%v) opens", where, port, listenFlags)
		}
	}
}

// namedHost refuses a listen address without a host or with an
// unspecified one (0.0.0.0, ::).
func namedHost(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "" {
		return errEveryAddress
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return errEveryAddress
	}
	return nil
}

var errEveryAddress = errors.New("listens on every address")

// The plain manifests and the chart, with its defaults and with other
// values, give every Pod seccomp RuntimeDefault, only the capabilities
// its component needs, and (on the host network) metrics on one address.
func TestPodSecurity(t *testing.T) {
	files, err := manifestFiles(".")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := readObjects(files...)
	if err != nil {
		t.Fatal(err)
	}
	podTemplates(t, objs)
	checkPodSecurity(t, objs)

	c, err := loadChart(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, values := range []map[string]any{
		nil,
		{"backend": map[string]any{"metricsHost": "127.0.0.1", "metricsPort": 9999}, "agent": map[string]any{"interface": "bond0", "metricsPort": 9500}},
		{"agent": map[string]any{"metricsPort": 0}},
	} {
		rendered, err := c.render(release{Name: "xlb", Namespace: "xlb-system"}, values)
		if err != nil {
			t.Fatal(err)
		}
		checkPodSecurity(t, rendered)
	}
}

// The manifests say why each capability they add is needed: a comment
// line that names it and goes on to say what for.
func TestCapabilitiesJustified(t *testing.T) {
	files, err := manifestFiles(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		objs, err := readObjects(f)
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			list, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			for _, c := range list {
				c, _ := c.(map[string]any)
				add, _, _ := unstructured.NestedStringSlice(c, "securityContext", "capabilities", "add")
				for _, cap := range add {
					why := regexp.MustCompile(`(?m)^#\s+` + regexp.QuoteMeta(cap) + `\s+\S.*$`)
					if !why.Match(data) {
						t.Errorf("%s: %s adds %s without a comment line \"#   %s  what for\"", f, o.key(), cap, cap)
					}
				}
			}
		}
	}
}

// With metricsHost set, the backend listens there and its probes ask
// there: a probe of the pod IP would find nothing listening.
func TestBackendMetricsHost(t *testing.T) {
	c, err := loadChart(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host, arg, probeHost string
	}{
		{"", "--metrics-addr=[$(POD_IP)]:9402", ""},
		{"127.0.0.1", "--metrics-addr=[127.0.0.1]:9402", "127.0.0.1"},
		{"fd00::2", "--metrics-addr=[fd00::2]:9402", "fd00::2"},
	} {
		objs, err := c.render(release{Name: "xlb", Namespace: "xlb-system"}, map[string]any{"backend": map[string]any{"metricsHost": tc.host}})
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(objs, func(o object) bool { return o.key() == "DaemonSet xlb-system/xlb-backend" })
		if i < 0 {
			t.Fatal("no backend DaemonSet")
		}
		containers, _, _ := unstructured.NestedSlice(objs[i].Object, "spec", "template", "spec", "containers")
		ctr := containers[0].(map[string]any)
		if args := stringList(ctr["args"]); !slices.Contains(args, tc.arg) {
			t.Errorf("metricsHost %q: args %v, want %s", tc.host, args, tc.arg)
		}
		for _, probe := range [][]string{{"readinessProbe", "httpGet", "host"}, {"livenessProbe", "tcpSocket", "host"}} {
			if got, _, _ := unstructured.NestedString(ctr, probe...); got != tc.probeHost {
				t.Errorf("metricsHost %q: %s %q, want %q", tc.host, strings.Join(probe, "."), got, tc.probeHost)
			}
		}
	}
}
