package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	k8sapi "github.com/xlbproject/xlb/internal/k8s/api"
	"github.com/xlbproject/xlb/testbed/k8stest"
	"github.com/xlbproject/xlb/testbed/netns"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// TestAgentKubernetes runs `xlb agent` with a file that has a kubernetes
// section, in a network namespace of its own, against a real API server:
// the Service's pods become backends in the data plane (seen through the
// agent's API), a BGPPeer becomes a BGP peer, an edit of the file adds its
// service to the cluster's, and SIGTERM ends the agent cleanly. Then an
// agent without a file, as the DaemonSet runs it, serves /metrics on the
// Node's address (--metrics), where Prometheus scrapes it.
func TestAgentKubernetes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Kubernetes control plane and an agent; skipped with -short")
	}
	testenv.RequireRoot(t, "the agent's Kubernetes test")
	cp := k8stest.StartT(t, k8stest.Options{})
	cs, dyn, err := cp.Clients(5, 10)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	patch := func(do func(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (*corev1.Pod, error), name, p string) {
		t.Helper()
		must(do(ctx, name, types.MergePatchType, []byte(p), metav1.PatchOptions{}, "status"))
	}

	// The CRDs the agent reads, as deploy/crds has them.
	if err := k8stest.InstallCRDs(ctx, dyn, 30*time.Second, filepath.Join("..", "..", "deploy", "crds", "xlb.io_bgppeers.yaml"),
		filepath.Join("..", "..", "deploy", "crds", "xlb.io_denylists.yaml"), filepath.Join("..", "..", "deploy", "crds", "xlb.io_addresspools.yaml")); err != nil {
		t.Fatal(err)
	}

	for _, n := range []string{"lb-1", "node-a"} {
		must(cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"xlb.io/lb-node": "true"}}}, metav1.CreateOptions{}))
	}
	class := k8sapi.LoadBalancerClass
	must(cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{}))
	must(cs.CoreV1().Services("default").Patch(ctx, "web", types.MergePatchType, []byte(`{"status":{"loadBalancer":{"ingress":[{"ip":"10.99.0.1"}]}}}`), metav1.PatchOptions{}, "status"))
	for i := range 3 {
		name, ip := fmt.Sprintf("web-%d", i), fmt.Sprintf("10.244.0.%d", 10+i)
		must(cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "web"}},
			Spec:       corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "web", Image: "registry.invalid/web"}}},
		}, metav1.CreateOptions{}))
		patch(cs.CoreV1().Pods("default").Patch, name, fmt.Sprintf(`{"status":{"phase":"Running","podIP":%q,"podIPs":[{"ip":%q}],"conditions":[{"type":"Ready","status":"True"}]}}`, ip, ip))
	}

	// The agent's namespace: one veth pair, XDP on one end.
	ns := fmt.Sprintf("xlbsrc%d", os.Getpid())
	run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	run(t, "ip", "-n", ns, "link", "add", "v0", "type", "veth", "peer", "name", "v1")
	run(t, "ip", "-n", ns, "addr", "add", "10.0.0.10/24", "dev", "v0")
	for _, l := range []string{"lo", "v0", "v1"} {
		run(t, "ip", "-n", ns, "link", "set", l, "up")
	}

	kubeconfig := cp.RelayT(t, ns)

	bin, remove, err := testenv.BuildXLB()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
	dir := t.TempDir()
	socket, pinPath, cfgPath := filepath.Join(dir, "xlb.sock"), "/sys/fs/bpf/"+ns, filepath.Join(dir, "agent.yaml")
	t.Cleanup(func() { _ = exec.Command(bin, "cleanup", "--pin-path", pinPath).Run() })
	file := fmt.Sprintf("node: {interface: v0, address: 10.0.0.10}\napi: {socket: %s}\ndataplane: {pinPath: %s, attachMode: generic}\n"+
		"bgp: {asn: 65001, drainTime: 0}\nkubernetes: {kubeconfig: %s, nodeName: lb-1}\n", socket, pinPath, kubeconfig)
	if err := os.WriteFile(cfgPath, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	// Through xlb's own netns-exec, which keeps the host's bpffs.
	agent := exec.Command(bin, netns.ExecCommand, ns, "--", bin, "agent", "--config", cfgPath)
	agent.Stdout, agent.Stderr = t.Output(), t.Output()
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- agent.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = agent.Process.Kill()
			<-exited
		}
	})

	status := func() (*api.Status, string) {
		select {
		case err := <-exited:
			stopped = true
			t.Fatalf("the agent exited: %v", err)
		default:
		}
		st, err := api.GetStatus(socket)
		if err != nil {
			return nil, err.Error()
		}
		return st, ""
	}
	backends := func(want ...string) func() string {
		return func() string {
			st, why := status()
			if st == nil {
				return why
			}
			for _, s := range st.Services {
				if s.Name != "default/web:80/tcp" {
					continue
				}
				var got []string
				for _, b := range s.Backends {
					got = append(got, fmt.Sprintf("%s:%d/%d", b.Address, b.Port, b.Weight))
				}
				if !s.Installed || !slices.Equal(got, want) {
					return fmt.Sprintf("installed %v, backends %v", s.Installed, got)
				}
				return ""
			}
			out, _ := json.Marshal(st.Services)
			return "not served: " + string(out)
		}
	}
	waitUntil(t, "the Service's pods in the data plane", backends("10.244.0.10:8080/1", "10.244.0.11:8080/1", "10.244.0.12:8080/1"))
	patch(cs.CoreV1().Pods("default").Patch, "web-1", `{"status":{"conditions":[{"type":"Ready","status":"False"}]}}`)
	waitUntil(t, "an unready pod out", backends("10.244.0.10:8080/1", "10.244.0.12:8080/1"))

	peer := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": k8sapi.Group + "/" + k8sapi.Version, "kind": "BGPPeer", "metadata": map[string]any{"name": "router"},
		"spec": map[string]any{"myASN": int64(65001), "peerASN": int64(65000), "peerAddress": "10.0.0.1"},
	}}
	must(dyn.Resource(k8sapi.BGPPeerResource).Create(ctx, peer, metav1.CreateOptions{}))
	waitUntil(t, "the BGPPeer as a peer", func() string {
		st, why := status()
		if st == nil {
			return why
		}
		if st.BGP == nil || len(st.BGP.Peers) != 1 || st.BGP.Peers[0].Address.String() != "10.0.0.1" {
			return fmt.Sprintf("bgp %+v", st.BGP)
		}
		return ""
	})

	// The agent writes its session's state into the BGPPeer's status
	// (no router answers at 10.0.0.1: not established).
	peerNodes := func() string {
		u, err := dyn.Resource(k8sapi.BGPPeerResource).Get(ctx, "router", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		var p k8sapi.BGPPeer
		if err := k8sapi.FromUnstructured(u, &p); err != nil {
			return err.Error()
		}
		var out []string
		for _, n := range p.Status.Nodes {
			out = append(out, n.Node+" "+n.State)
		}
		return strings.Join(out, ", ")
	}
	waitUntil(t, "the session's state in the BGPPeer's status", func() string {
		if got := peerNodes(); !strings.HasPrefix(got, "lb-1 ") || strings.Contains(got, ",") || got == "lb-1 established" {
			return "status.nodes: " + got
		}
		return ""
	})

	// The file is the base: an added service joins the cluster's.
	edited := file + "services:\n  - {name: static, vip: 10.99.0.9, port: 80, backends: [{address: 10.0.0.20}]}\n"
	if err := os.WriteFile(cfgPath+".new", []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(cfgPath+".new", cfgPath); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the file's new service next to the cluster's", func() string {
		st, why := status()
		if st == nil {
			return why
		}
		var names []string
		for _, s := range st.Services {
			names = append(names, s.Name)
		}
		if !slices.Equal(names, []string{"static", "default/web:80/tcp"}) {
			return fmt.Sprint(names)
		}
		return ""
	})

	if err := agent.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Errorf("the agent's exit: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not exit within 30s of SIGTERM")
	}
	// A clean stop removes the node's entry.
	if got := peerNodes(); got != "" {
		t.Errorf("status.nodes after the agent stopped: %s; want none", got)
	}

	daemonSetMetrics(t, cs, bin, ns, kubeconfig, pinPath)
}

// daemonSetMetrics runs the agent in namespace ns as the DaemonSet of
// deploy/ does: no file, the Node's InternalIP (10.0.0.10 on v0) as its
// address, and --metrics=[NODE ADDRESS]:9400 as the DaemonSet passes it
// from status.hostIP. Prometheus must find the agent's series there, the
// cluster's Service among them. The agent before it (whose pins are at
// pinPath) has stopped.
func daemonSetMetrics(t *testing.T, cs kubernetes.Interface, bin, ns, kubeconfig, pinPath string) {
	ctx := t.Context()
	// The previous agent's program leaves v0.
	run(t, bin, "cleanup", "--pin-path", pinPath)
	if _, err := cs.CoreV1().Nodes().Patch(ctx, "lb-1", types.MergePatchType,
		[]byte(`{"status":{"addresses":[{"type":"InternalIP","address":"10.0.0.10"}]}}`), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	var defaultPins string
	if err := netns.Do(ns, func() (err error) {
		defaultPins, err = bpfobj.DefaultPinPath("", "v0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// The agent makes the default pin path's parent if missing: remove it
	// then too, if nothing else is in it by the end.
	_, statErr := os.Stat(filepath.Dir(defaultPins))
	t.Cleanup(func() {
		_ = exec.Command(bin, "cleanup", "--pin-path", defaultPins).Run()
		if errors.Is(statErr, fs.ErrNotExist) {
			_ = os.Remove(filepath.Dir(defaultPins))
		}
	})

	// Without a file the API socket is /run/xlb/xlb.sock: a mount
	// namespace of the agent's own, with a tmpfs on /run/xlb, keeps it
	// (and its lock) off the host's. bpffs stays the host's.
	// The mount point is made only if missing, and then removed.
	if _, err := os.Stat("/run/xlb"); errors.Is(err, fs.ErrNotExist) {
		if err := os.Mkdir("/run/xlb", 0o700); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Remove("/run/xlb") })
	} else if err != nil {
		t.Fatal(err)
	}
	const metricsAddr = "10.0.0.10:9400"
	agent := exec.Command(bin, netns.ExecCommand, ns, "--", "unshare", "--mount", "--propagation", "private", "--",
		"sh", "-c", `mount -t tmpfs -o mode=0700 xlb-test /run/xlb && exec "$@"`, "sh",
		bin, "agent", "--source=kubernetes", "--kubeconfig="+kubeconfig, "--metrics=[10.0.0.10]:9400")
	agent.Env = append(os.Environ(), "NODE_NAME=lb-1", "POD_NAMESPACE=default")
	agent.Stdout, agent.Stderr = t.Output(), t.Output()
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- agent.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = agent.Process.Kill()
			<-exited
		}
	})

	// Connections are made inside ns, as from a Prometheus on another
	// node.
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (conn net.Conn, err error) {
			err = netns.Do(ns, func() error {
				conn, err = (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, network, addr)
				return err
			})
			return conn, err
		},
	}}
	t.Cleanup(client.CloseIdleConnections)
	want := []string{`xlb_build_info{version="`, `xlb_service_up{service="default/web:80/tcp"} 1`}
	waitUntil(t, "the agent's metrics on "+metricsAddr, func() string {
		select {
		case err := <-exited:
			stopped = true
			t.Fatalf("the agent exited: %v", err)
		default:
		}
		resp, err := client.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			return fmt.Sprintf("GET /metrics: %s, %v", resp.Status, err)
		}
		for _, w := range want {
			if !slices.ContainsFunc(strings.Split(string(body), "\n"), func(l string) bool { return strings.HasPrefix(l, w) }) {
				return "no series " + w
			}
		}
		return ""
	})
	// Killed by the cleanup: SIGTERM was the first agent's to show, and
	// it would add the default BGP drain time here.
}

func run(t *testing.T, argv ...string) {
	t.Helper()
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
}

// waitUntil waits up to 30 s for cond, which says what is still missing
// ("" when nothing is).
func waitUntil(t *testing.T, what string, cond func() string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, what, func() (bool, string) {
		why := cond()
		return why == "", why
	})
}
