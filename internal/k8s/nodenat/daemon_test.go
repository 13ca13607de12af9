package nodenat

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/internal/k8s/api"
	"github.com/xlbproject/xlb/testbed/k8stest"
	"github.com/xlbproject/xlb/testbed/netns"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// TestBackendDaemon runs the real `xlb backend --source kubernetes` as the
// DaemonSet would, in a "node" network namespace whose uplink is a veth,
// against a real API server, and checks the pinned translation map
// through a change, a restart with changes made while it was down, and
// --cleanup-on-exit.
//
// The API server listens on the host's loopback, which the namespace
// cannot reach: the test listens on the namespace's loopback and relays
// each connection to the API server (TLS passes through unchanged, and
// the certificate's 127.0.0.1 still matches).
func TestBackendDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Kubernetes control plane and builds xlb")
	}
	testenv.RequireRoot(t, "the backend DaemonSet test (BPF, network namespaces)")
	bin, rm, err := testenv.BuildXLB()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rm)
	cp := k8stest.StartT(t, k8stest.Options{})
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 1000, 1000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := cluster{t: t, cs: cs}

	ns := fmt.Sprintf("xlbtest-nn-%d", os.Getpid())
	run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	run(t, "ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
	run(t, "ip", "-n", ns, "addr", "add", "10.0.2.2/24", "dev", "eth0")
	run(t, "ip", "-n", ns, "link", "set", "eth0", "up")
	run(t, "ip", "-n", ns, "link", "set", "eth1", "up")
	run(t, "ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	pin := filepath.Join(bpfobj.BPFFSRoot, ns)
	t.Cleanup(func() { os.RemoveAll(pin) })

	kubeconfig := cp.RelayT(t, ns)

	c.node(nodeA)
	c.node(nodeB)
	class := api.LoadBalancerClass
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
	if _, err := cs.CoreV1().Services("default").Create(t.Context(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.pod("a1", nodeA, "10.244.1.2", true)
	c.pod("a2", nodeA, "10.244.1.3", true)
	c.pod("b1", nodeB, "10.244.2.2", true)
	c.waitEndpoint("10.244.1.3", endpointReady)

	const metricsAddr = "127.0.0.1:9401" // the namespace's own loopback
	start := func(extra ...string) *daemon {
		// --chain-window 0: a translation goes as soon as its pod
		// leaves (with daisy chaining it lingers for the window;
		// TestLinger and the e2e TestKubernetes cover that).
		args := append([]string{"backend", "--source", "kubernetes", "--interface", "eth0", "--kubeconfig", kubeconfig,
			"--node-name", nodeA, "--pin-path", pin, "--attach-mode", "generic", "--chain-window", "0"}, extra...)
		return startDaemon(t, bin, ns, args...)
	}
	metrics := httpInNamespace(ns)

	// No address yet: healthy with nothing to translate, and nothing
	// attached.
	d := start("--metrics-addr", metricsAddr)
	waitHealthy(t, metrics, "http://"+metricsAddr+"/healthz", "ok: 0 translations")
	if _, err := os.Stat(pin); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("set up before the first translation: %v", err)
	}

	c.updateService("web", setIngress("10.99.0.1"), true)
	waitMap(t, pin, []string{"10.99.0.1:80/tcp=10.244.1.2:8080", "10.99.0.1:80/tcp=10.244.1.3:8080"})
	waitHealthy(t, metrics, "http://"+metricsAddr+"/healthz", "ok: 2 translations")
	body := get(t, metrics, "http://"+metricsAddr+"/metrics", http.StatusOK)
	for _, want := range []string{"xlb_backend_nat_entries 2", "xlb_backend_nat_synced 1", `xlb_backend_nat_syncs_total{result="error"} 0`,
		`xlb_backend_nat_packets_total{counter="nat_fwd"} 0`, `xlb_backend_decap_packets_total{counter=`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}

	// Unready, a1 keeps its translation; deleted, it loses it.
	c.setReady("a1", false)
	c.waitEndpoint("10.244.1.2", endpointNotReady)
	time.Sleep(300 * time.Millisecond) // far beyond the debounce
	assertMap(t, pin, []string{"10.99.0.1:80/tcp=10.244.1.2:8080", "10.99.0.1:80/tcp=10.244.1.3:8080"})
	c.deletePod("a1")
	waitMap(t, pin, []string{"10.99.0.1:80/tcp=10.244.1.3:8080"})

	// SIGTERM: the translations and the programs stay.
	d.stop(t)
	assertMap(t, pin, []string{"10.99.0.1:80/tcp=10.244.1.3:8080"})
	for _, f := range []string{"reply_link", "nat_svcs"} {
		if _, err := os.Stat(filepath.Join(pin, f)); err != nil {
			t.Errorf("after SIGTERM: %v", err)
		}
	}

	// Changes while no DaemonSet pod runs are caught up at the start.
	c.pod("a1", nodeA, "10.244.1.2", true)
	c.deletePod("a2")
	c.waitEndpoint("10.244.1.2", endpointReady)
	d = start()
	waitMap(t, pin, []string{"10.99.0.1:80/tcp=10.244.1.2:8080"})
	d.stop(t)

	// The Service goes while no pod runs: the next start clears its
	// translations, and --cleanup-on-exit removes everything.
	if err := cs.CoreV1().Services("default").Delete(t.Context(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	d = start("--cleanup-on-exit", "--metrics-addr", metricsAddr)
	waitMap(t, pin, nil)
	waitHealthy(t, metrics, "http://"+metricsAddr+"/healthz", "ok: 0 translations")
	d.stop(t)
	if _, err := os.Stat(pin); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("--cleanup-on-exit left %s: %v", pin, err)
	}
}

// waitHealthy polls /healthz until it answers 200 with want.
func waitHealthy(t *testing.T, c *http.Client, u, want string) {
	t.Helper()
	deadline := time.Now().Add(apiTimeout)
	for {
		var last string
		resp, err := c.Get(u)
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
			last = resp.Status + ": " + string(b)
			if resp.StatusCode == http.StatusOK && strings.Contains(string(b), want) {
				return
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: GET %s: %s, want 200 with %q", apiTimeout, u, last, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func run(t *testing.T, argv ...string) {
	t.Helper()
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(argv, " "), err, out)
	}
}

// daemon is one run of `xlb backend --source kubernetes`.
type daemon struct {
	cmd  *exec.Cmd
	log  *bytes.Buffer
	done chan error
}

func startDaemon(t *testing.T, bin, ns string, args ...string) *daemon {
	t.Helper()
	d := &daemon{log: &bytes.Buffer{}, done: make(chan error, 1)}
	d.cmd = exec.Command(bin, append([]string{netns.ExecCommand, ns, "--", bin}, args...)...)
	w := &syncWriter{b: d.log}
	d.cmd.Stdout, d.cmd.Stderr = w, w
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			d.cmd.Process.Kill()
			<-d.done
		}
		if t.Failed() {
			t.Logf("xlb %s:\n%s", strings.Join(args, " "), w.String())
		}
	})
	return d
}

// stop sends SIGTERM and wants a clean exit.
func (d *daemon) stop(t *testing.T) {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-d.done:
		if err != nil {
			t.Errorf("xlb backend exited after SIGTERM: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("xlb backend did not exit within 15s of SIGTERM")
	}
}

type syncWriter struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// readNATMap reads the pinned nat_svcs map (bpf/xlb_nat.h: struct
// nat_svc_key {__be32 vip; __be32 pod; __be16 port; u8 proto; u8 pad} →
// __be16 target port) as sorted NATEntry strings.
func readNATMap(pin string) ([]string, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pin, "nat_svcs"), nil)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	var (
		k   wire.NATSvcKey
		v   [2]byte
		out []string
	)
	it := m.Iterate()
	for it.Next(&k, &v) {
		proto := "tcp"
		if k.Proto == wire.ProtoUDP {
			proto = "udp"
		}
		out = append(out, fmt.Sprintf("%v:%d/%s=%v:%d", k.Vip.IP(), wire.PortFrom(k.Port), proto, k.Pod.IP(), binary.BigEndian.Uint16(v[:])))
	}
	slices.Sort(out)
	return out, it.Err()
}

func waitMap(t *testing.T, pin string, want []string) {
	t.Helper()
	deadline := time.Now().Add(apiTimeout)
	for {
		got, err := readNATMap(pin)
		if err == nil && slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: nat_svcs holds %q (%v), want %q", apiTimeout, got, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func assertMap(t *testing.T, pin string, want []string) {
	t.Helper()
	got, err := readNATMap(pin)
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("nat_svcs holds %q (%v), want %q", got, err, want)
	}
}

// httpInNamespace returns a client whose connections start in namespace
// ns.
func httpInNamespace(ns string) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := netns.Do(ns, func() (err error) {
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}}
}

func get(t *testing.T, c *http.Client, u string, wantStatus int) string {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != wantStatus {
		t.Errorf("GET %s: %s, want %d: %s", u, resp.Status, wantStatus, b)
	}
	return string(b)
}
