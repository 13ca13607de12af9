package k8stest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestControlPlane starts the control plane and checks what xlb's tests
// rely on: the version built from test/k8s/controlplane, the real
// EndpointSlice controller deriving slices from Pod status that the test
// sets as a kubelet would, RBAC with the static tokens, and a Stop that
// leaves nothing behind.
func TestControlPlane(t *testing.T) {
	begin := time.Now()
	cp := StartT(t, Options{})
	t.Logf("control plane started in %s (binaries cached unless the build above ran)", time.Since(begin).Round(time.Millisecond))
	api := &apiClient{t: t, c: cp.HTTPClient(), server: cp.Server}

	t.Run("Version", func(t *testing.T) {
		mod, err := os.ReadFile("../../test/k8s/controlplane/go.mod")
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^\s*k8s\.io/kubernetes (v\S+)`).FindSubmatch(mod)
		if m == nil {
			t.Fatal("no k8s.io/kubernetes requirement in test/k8s/controlplane/go.mod")
		}
		var v struct{ GitVersion string }
		api.must(http.MethodGet, "/version", nil, &v)
		if v.GitVersion != string(m[1]) {
			t.Errorf("/version gitVersion = %q, want %q (go.mod)", v.GitVersion, m[1])
		}
	})

	t.Run("Kubeconfig", func(t *testing.T) {
		data, err := os.ReadFile(cp.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"server: " + cp.Server, "token: " + cp.Token, "certificate-authority-data: "} {
			if !strings.Contains(string(data), want) {
				t.Errorf("kubeconfig lacks %q:\n%s", want, data)
			}
		}
	})

	t.Run("EndpointSliceFromPodStatus", func(t *testing.T) {
		api := &apiClient{t: t, c: api.c, server: api.server}
		const ns = "default"
		api.must(http.MethodPost, "/api/v1/nodes", obj(`{"metadata":{"name":"node-a"}}`), nil)
		api.must(http.MethodPost, "/api/v1/namespaces/"+ns+"/services", obj(`{
			"metadata": {"name": "web"},
			"spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}}`), nil)
		pods := []struct {
			name, ip string
			ready    bool
		}{
			{"web-ready", "10.244.0.10", true},
			{"web-unready", "10.244.0.11", false},
		}
		for _, p := range pods {
			api.must(http.MethodPost, "/api/v1/namespaces/"+ns+"/pods", obj(`{
				"metadata": {"name": %q, "labels": {"app": "web"}},
				"spec": {"nodeName": "node-a", "containers": [{"name": "web", "image": "registry.invalid/web"}]}}`, p.name), nil)
		}
		slices := "/apis/discovery.k8s.io/v1/namespaces/" + ns + "/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dweb"

		// Before any kubelet-like status the Pods have no IP: the slice
		// exists but lists nothing.
		got := api.waitEndpoints(slices, func(eps map[string]bool, n int) bool { return n > 0 })
		if len(got) != 0 {
			t.Fatalf("endpoints before any Pod status: %v, want none", got)
		}

		for _, p := range pods {
			status := "False"
			if p.ready {
				status = "True"
			}
			api.mustPatch("/api/v1/namespaces/"+ns+"/pods/"+p.name+"/status", obj(`{"status": {
				"phase": "Running", "podIP": %q, "podIPs": [{"ip": %q}],
				"conditions": [{"type": "Ready", "status": %q}]}}`, p.ip, p.ip, status))
		}
		got = api.waitEndpoints(slices, func(eps map[string]bool, _ int) bool { return len(eps) == len(pods) })
		for _, p := range pods {
			ready, ok := got[p.ip]
			if !ok || ready != p.ready {
				t.Errorf("pod %s (%s): endpoint listed %v, ready %v; want listed, ready %v", p.name, p.ip, ok, ready, p.ready)
			}
		}
	})

	t.Run("RBAC", func(t *testing.T) {
		tests := []struct {
			name   string
			header http.Header
			want   int
		}{
			{"admin", nil, http.StatusOK},
			{"impersonated user", http.Header{"Impersonate-User": {"alice"}}, http.StatusForbidden},
			{"impersonated master", http.Header{"Impersonate-User": {"alice"}, "Impersonate-Group": {"system:masters"}}, http.StatusOK},
			{"unknown token", http.Header{"Authorization": {"Bearer not-a-token"}}, http.StatusUnauthorized},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, cp.Server+"/api/v1/namespaces/kube-system/secrets", nil)
				if err != nil {
					t.Fatal(err)
				}
				for k, v := range tt.header {
					req.Header[k] = v
				}
				resp, err := api.c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != tt.want {
					t.Errorf("GET secrets as %s: %s, want %d: %.300s", tt.name, resp.Status, tt.want, body)
				}
			})
		}
	})

	t.Run("Stop", func(t *testing.T) {
		if len(cp.procs) != 3 {
			t.Fatalf("%d processes, want 3 (etcd, kube-apiserver, kube-controller-manager)", len(cp.procs))
		}
		begin := time.Now()
		if err := cp.Stop(); err != nil {
			t.Fatal(err)
		}
		t.Logf("stopped in %s", time.Since(begin).Round(time.Millisecond))
		// Exited and reaped: a probe by PID could meet another
		// process that has taken the PID since.
		for _, p := range cp.procs {
			if !exited(p) {
				t.Errorf("%s (pid %d) after Stop: not exited", p.name, p.cmd.Process.Pid)
			}
		}
		if _, err := os.Stat(cp.Dir); !os.IsNotExist(err) {
			t.Errorf("%s after Stop: %v, want it removed", cp.Dir, err)
		}
	})
}

// apiClient is the least of a Kubernetes client: JSON over HTTP with the
// admin token, failing the test on any error.
type apiClient struct {
	t      *testing.T
	c      *http.Client
	server string
}

func obj(format string, args ...any) []byte { return fmt.Appendf(nil, format, args...) }

func (a *apiClient) do(method, path, contentType string, body []byte) (int, []byte) {
	a.t.Helper()
	req, err := http.NewRequestWithContext(a.t.Context(), method, a.server+path, bytes.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Accept", "application/json")
	resp, err := a.c.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp.StatusCode, data
}

// must sends body (nil: none) and decodes the 2xx answer into out (nil:
// ignored).
func (a *apiClient) must(method, path string, body []byte, out any) {
	a.t.Helper()
	code, data := a.do(method, path, "application/json", body)
	if code/100 != 2 {
		a.t.Fatalf("%s %s: status %d: %s", method, path, code, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			a.t.Fatalf("%s %s: %v", method, path, err)
		}
	}
}

func (a *apiClient) mustPatch(path string, patch []byte) {
	a.t.Helper()
	if code, data := a.do(http.MethodPatch, path, "application/merge-patch+json", patch); code != http.StatusOK {
		a.t.Fatalf("PATCH %s: status %d: %s", path, code, data)
	}
}

// waitEndpoints polls the EndpointSlices at path until done(endpoints,
// number of slices) and returns the endpoints: address → ready.
func (a *apiClient) waitEndpoints(path string, done func(map[string]bool, int) bool) map[string]bool {
	a.t.Helper()
	const timeout = 60 * time.Second
	deadline := time.Now().Add(timeout)
	for {
		var list struct {
			Items []struct {
				Endpoints []struct {
					Addresses  []string
					Conditions struct{ Ready *bool }
				}
			}
		}
		a.must(http.MethodGet, path, nil, &list)
		eps := map[string]bool{}
		for _, s := range list.Items {
			for _, e := range s.Endpoints {
				for _, addr := range e.Addresses {
					eps[addr] = e.Conditions.Ready != nil && *e.Conditions.Ready
				}
			}
		}
		if done(eps, len(list.Items)) {
			return eps
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("EndpointSlices %s after %s: %d slices, endpoints %v", path, timeout, len(list.Items), eps)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
