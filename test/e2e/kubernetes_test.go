package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
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
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/backendhost"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/dataplane/decap"
	k8sapi "github.com/xlbproject/xlb/internal/k8s/api"
	"github.com/xlbproject/xlb/internal/k8s/history"
	"github.com/xlbproject/xlb/testbed/k8stest"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
	"github.com/xlbproject/xlb/testbed/survival"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// The Kubernetes objects of TestKubernetes.
const (
	k8sNamespace = "default"
	k8sService   = "web"
	k8sPool      = "lab"
	// The pool: 16 addresses of the lab's VIP prefix, which the router
	// learns per /32 from the agents.
	k8sPoolRange = "10.99.0.16/28"
	// The Service that shares the first one's address, and its port.
	k8sAdmin     = "admin"
	k8sAdminPort = 8080
	k8sSharing   = "web"
)

// TestKubernetes runs xlb as a Kubernetes load balancer end to end,
// against a real API server and controller manager (testbed/k8stest):
// `xlb controller` allocates the Service's address from an AddressPool;
// `xlb agent` on two lab nodes takes the Service, its EndpointSlices and a
// BGPPeer from the cluster, programs the data plane and announces the VIP
// to the lab's router; `xlb backend --source kubernetes` on two Kubernetes
// nodes translates VIP:port to the pods' addresses and target ports. The
// pods are plain network namespaces that serve on their own address only
// (lab.Spec.Pods): nothing in them knows the VIP. The test plays the
// kubelet, setting each Pod's IP and readiness.
func TestKubernetes(t *testing.T) {
	// The agents' logs over the whole test: a failure late in it needs
	// what they did during the changes.
	k := kubeLab(t, k8stest.Options{}, "k", lab.Spec{Clients: 1, Nodes: 2, Backends: 2, Pods: 3,
		Router: lab.RouterEmbedded, BFD: true}, 6*time.Minute, 100)
	ctx, p := k.ctx, k.p

	// The cluster: the lab's xlb nodes and Kubernetes nodes as Nodes,
	// an AddressPool, the router as a BGPPeer with BFD.
	// Each reports its address as a kubelet would: the backends chain
	// only packets from the Nodes' addresses.
	k.createNodes(nodeAddr)
	k.createCustom(k8sapi.AddressPoolResource, "AddressPool", k8sPool, map[string]any{"addresses": []any{k8sPoolRange}})
	b := p.BGP
	k.createCustom(k8sapi.BGPPeerResource, "BGPPeer", "router", map[string]any{
		"myASN": int64(b.NodeASN), "peerASN": int64(b.PeerASN), "peerAddress": b.PeerAddr.String(),
		"holdTime": b.HoldTime.String(),
		"bfd":      map[string]any{"minRx": b.BFD.MinRx.String(), "minTx": b.BFD.MinTx.String(), "multiplier": int64(b.BFD.Multiplier)},
	})

	k.startController()
	for _, n := range p.Nodes {
		k.startAgent(n)
	}
	for _, be := range p.Backends {
		k.startBackend(be)
	}

	// Pods, then the Service: an address from the pool, the agents'
	// routes on the router, traffic to every pod. One pod is left out
	// until the cluster scales up.
	fresh := p.Pods[len(p.Pods)-1]
	for _, pod := range p.Pods[:len(p.Pods)-1] {
		k.createPod(pod, true)
	}
	k.createService()
	vip := k.waitIngress("")
	t.Logf("the Service got %s from pool %s", vip, k8sPool)
	if !netip.MustParsePrefix(k8sPoolRange).Contains(vip) {
		t.Fatalf("address %s is outside the pool %s", vip, k8sPoolRange)
	}
	nodes := []netip.Addr{p.Nodes[0].Addr, p.Nodes[1].Addr}
	if err := lab.WaitNextHops(ctx, p, vip, nodes, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	allPods := podNames(p.Pods)
	firstPods := without(allPods, fresh.Name)
	k.waitBackends(firstPods...)
	web := netip.AddrPortFrom(vip, 80)
	tally, err := labrun.HTTPLoad(ctx, p.Clients[0].Namespace, web, 400, 8, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("400 new connections to %s: %v", web, tally)
	if got := tally.Backends(); !slices.Equal(got, firstPods) {
		t.Fatalf("answered by %v, want every pod %v", got, firstPods)
	}
	dns := netip.AddrPortFrom(vip, 53)
	udp, err := labrun.UDPLoad(ctx, p.Clients[0].Namespace, dns, 200, 8, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("200 datagrams to %s: %v", dns, udp)
	if got := udp.Backends(); !slices.Equal(got, firstPods) {
		t.Fatalf("UDP answered by %v, want every pod %v", got, firstPods)
	}
	reply, err := labrun.UDPEcho(ctx, p.Clients[0].Namespace, dns, "ping")
	if err != nil {
		t.Fatal(err)
	}
	if reply.From != dns {
		t.Errorf("UDP reply from %s, want the VIP %s: the node did not translate the pod's reply", reply.From, dns)
	}

	// Scale up, as a kubelet brings a pod up: an address first, ready
	// later. Its node translates for it as soon as the cluster lists it,
	// before it is ready, so the first SYNs the agents send it find
	// their translation: none is dropped for want of one, and no
	// request fails. (A pod that was listed before would still have a
	// lingering translation: this one never was.)
	stop := k.stream(web)
	k.change("a new pod, not ready yet (scale up)", func() {
		k.createPod(fresh, false)
		k.waitTranslated(fresh)
	}, firstPods...)
	noEntry := k.natNoEntry()
	k.change("the new pod turns ready", func() { k.setReady(fresh, true) }, allPods...)
	if n := k.natNoEntry() - noEntry; n != 0 {
		t.Errorf("the new pod's node dropped %d packets for want of a translation while the pod turned ready", n)
	}
	attempts := stop()
	checkStream(t, attempts, allPods)
	k.checkPhases(attempts)
	k.phases = nil

	// Pods change while new connections stream in and persistent ones
	// stay busy: each change reaches both agents' data planes, traffic
	// follows without a failure, and daisy chaining keeps every open
	// connection on its pod (through pods on other nodes and on the
	// same node, to pods that turned unready or were deleted).
	chainedBefore, err := survival.ChainedPackets(p)
	if err != nil {
		t.Fatal(err)
	}
	countersBefore := k.counters()
	load := survival.NewLoad(ctx, p, web, 100*time.Millisecond)
	load.OnBroken = func(from netip.AddrPort) { k.logSockets([]netip.AddrPort{from}) }
	// A test that ends early stops the load before it ends: OnBroken logs.
	t.Cleanup(func() { load.Stop() })
	if err := load.Open(40); err != nil {
		t.Fatal(err)
	}
	stop = k.stream(web)
	unready, deleted := p.Pods[1], p.Pods[3]
	k.change("a pod turns unready", func() { k.setReady(unready, false) }, without(allPods, unready.Name)...)
	k.change("a pod is deleted (scale down)", func() { k.deletePod(deleted) }, without(allPods, unready.Name, deleted.Name)...)
	// Connections opened now sit on slots that move back when the pods
	// return: they need the hints of those changes until the end.
	if err := load.Open(20); err != nil {
		t.Fatal(err)
	}
	k.change("the pod is back (scale up)", func() { k.createPod(deleted, true) }, without(allPods, unready.Name)...)
	k.change("the unready pod is ready again", func() { k.setReady(unready, true) }, allPods...)
	attempts = stop()
	checkStream(t, attempts, allPods)
	k.checkPhases(attempts)
	tally, err = labrun.HTTPLoad(ctx, p.Clients[0].Namespace, web, 200, 8, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := tally.Backends(); !slices.Equal(got, allPods) {
		t.Errorf("after the changes answered by %v, want every pod %v", got, allPods)
	}

	// The leader recorded each change in the Service's endpoint history.
	k.waitHistory(5)

	// Restarts: the controller, then each agent in turn, while new
	// connections stream in and the persistent ones stay busy. No
	// address changes hands, nothing fails. A restarted agent saw none
	// of the changes, which are still within the chain window: it takes
	// them from the endpoint history, so it hints as before and the
	// persistent connections on moved slots stay on their pods.
	stop = k.stream(web)
	k.restartController()
	for _, be := range p.Backends {
		k.restartBackend(be)
	}
	for _, n := range p.Nodes {
		k.restartAgent(n)
		if err := lab.WaitNextHops(ctx, p, vip, nodes, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Second)
	attempts = stop()
	checkStream(t, attempts, allPods)
	held := load.Stop()
	chained, err := survival.ChainedPackets(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d persistent connections, %d requests: %d broken; %d packets chained", held.Conns, held.Requests, held.Broken, chained-chainedBefore)
	if held.Broken > 0 || len(held.Impossible) > 0 {
		t.Errorf("daisy chaining lost %d of %d persistent connections: %v %v", held.Broken, held.Conns, held.Errors, held.Impossible)
		// What the next look at such a loss needs: when each change
		// reached the data planes, and what the LB programs and the
		// backends' chaining decisions counted meanwhile.
		for _, ph := range k.phases {
			t.Logf("%s: API call at %s, in both data planes at %s", ph.what, ph.changed.Format("15:04:05.000"), ph.from.Format("15:04:05.000"))
		}
		t.Logf("counters before the persistent load:\n%s\nafter it:\n%s", countersBefore, k.counters())
	}
	if chained == chainedBefore {
		t.Errorf("no packet was chained: the connections on the pods that left would have broken without luck")
	}
	if got := k.waitIngress(vip.String()); got != vip {
		t.Errorf("after the restarts the Service has %s, want %s", got, vip)
	}
	k.waitPoolAssigned(1)

	// Deleting the Service withdraws the route and frees the address:
	// the next Service gets it.
	k.must(nil, k.cs.CoreV1().Services(k8sNamespace).Delete(ctx, k8sService, metav1.DeleteOptions{}))
	if err := lab.WaitNextHops(ctx, p, vip, nil, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	k.waitPoolAssigned(0)
	k.createService()
	if got := k.waitIngress(""); got != vip {
		t.Errorf("a new Service got %s, want the freed %s", got, vip)
	}
	if err := lab.WaitNextHops(ctx, p, vip, nodes, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	// A second Service of the pods shares the address on another port
	// (the sharing key of both), with externalTrafficPolicy Local: it
	// reaches every pod, on both Kubernetes nodes, through the one VIP.
	// The first Service goes and the address stays, announced, with the
	// second; the last one goes and the route with it.
	k.createAdmin()
	if got := k.waitIngressOf(k8sAdmin, vip.String()); got != vip {
		t.Fatalf("the sharing Service got %s, want %s", got, vip)
	}
	admin := netip.AddrPortFrom(vip, k8sAdminPort)
	k.waitAdmin(admin)
	for _, target := range []netip.AddrPort{web, admin} {
		tally, err := labrun.HTTPLoad(ctx, p.Clients[0].Namespace, target, 200, 8, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("200 new connections to %s: %v", target, tally)
		if got := tally.Backends(); !slices.Equal(got, allPods) {
			t.Errorf("%s answered by %v, want every pod %v", target, got, allPods)
		}
	}
	k.waitPoolAssigned(1)
	k.must(nil, k.cs.CoreV1().Services(k8sNamespace).Delete(ctx, k8sService, metav1.DeleteOptions{}))
	k.waitFor("the first Service's port gone from the agents", 30*time.Second, func() string {
		for _, n := range p.Nodes {
			st, err := api.GetStatus(labrun.Socket(p, n))
			if err != nil {
				return err.Error()
			}
			if _, ok := servedBackends(st); ok {
				return n.Name + " still serves " + serviceName(80, "tcp")
			}
		}
		return ""
	})
	tally, err = labrun.HTTPLoad(ctx, p.Clients[0].Namespace, admin, 200, 8, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := tally.Backends(); !slices.Equal(got, allPods) {
		t.Errorf("with the first Service gone, %s answered by %v, want every pod %v", admin, got, allPods)
	}
	if err := lab.WaitNextHops(ctx, p, vip, nodes, time.Second); err != nil {
		t.Errorf("with the first Service gone: %v", err)
	}
	k.waitPoolAssigned(1)
	k.must(nil, k.cs.CoreV1().Services(k8sNamespace).Delete(ctx, k8sAdmin, metav1.DeleteOptions{}))
	if err := lab.WaitNextHops(ctx, p, vip, nil, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	k.waitPoolAssigned(0)
}

// kubeEnv is TestKubernetes' cluster and lab.
type kubeEnv struct {
	t     *testing.T
	ctx   context.Context
	cp    *k8stest.ControlPlane
	p     lab.Plan
	cs    kubernetes.Interface
	dyn   dynamic.Interface
	relay map[string]string // namespace → kubeconfig through a relay into it
	ctl   *exec.Cmd
	ctlN  int
	// phases are the pod sets that change() brought into the data
	// planes, with when.
	phases []phase
}

// phase is a time in which the data planes had a set of pods.
type phase struct {
	what     string
	changed  time.Time // the API call
	from, to time.Time
	pods     []string
}

// kubeLab starts a Kubernetes control plane (cpOpts) and the lab spec
// (its Prefix: labPrefix+suffix, its Binary: xlbBinary), with xlb's
// CRDs installed; the kubeEnv's context ends after d, and the last
// logLines of each agent's log are logged if the test fails.
func kubeLab(t *testing.T, cpOpts k8stest.Options, suffix string, spec lab.Spec, d time.Duration, logLines int) *kubeEnv {
	t.Helper()
	needRoot(t)
	if testing.Short() {
		t.Skip("starts a Kubernetes control plane and a lab; skipped with -short")
	}
	cp := k8stest.StartT(t, cpOpts)
	ctx, p := startLab(t, suffix, spec, d)
	k := newKubeEnv(t, ctx, cp, p)
	t.Cleanup(func() {
		if t.Failed() {
			k.logAgents(logLines)
		}
	})
	k.applyCRDs()
	return k
}

// createNodes creates a Node for each xlb node and Kubernetes node of the
// lab, with the addresses addrs gives it as InternalIPs (patched through
// the status subresource, as a kubelet reports them; none when addrs is
// nil).
func (k *kubeEnv) createNodes(addrs func(lab.Host) []netip.Addr) {
	k.t.Helper()
	for _, h := range append(slices.Clone(k.p.Nodes), k.p.Backends...) {
		k.must(k.cs.CoreV1().Nodes().Create(k.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: h.Name}}, metav1.CreateOptions{}))
		if addrs == nil {
			continue
		}
		var as []string
		for _, a := range addrs(h) {
			as = append(as, fmt.Sprintf(`{"type":"InternalIP","address":%q}`, a))
		}
		// A patch: the controllers update a new Node too.
		patch := `{"status":{"addresses":[` + strings.Join(as, ",") + `]}}`
		k.must(k.cs.CoreV1().Nodes().Patch(k.ctx, h.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status"))
	}
}

// nodeAddr is createNodes' addresses of a single-stack lab.
func nodeAddr(h lab.Host) []netip.Addr { return []netip.Addr{h.Addr} }

func newKubeEnv(t *testing.T, ctx context.Context, cp *k8stest.ControlPlane, p lab.Plan) *kubeEnv {
	t.Helper()
	cs, dyn, err := cp.Clients(100, 200)
	if err != nil {
		t.Fatal(err)
	}
	return &kubeEnv{t: t, ctx: ctx, cp: cp, p: p, cs: cs, dyn: dyn, relay: map[string]string{}}
}

func (k *kubeEnv) must(_ any, err error) {
	k.t.Helper()
	if err != nil {
		k.t.Fatal(err)
	}
}

// kubeconfig returns a kubeconfig that reaches the API server from inside
// namespace ns.
func (k *kubeEnv) kubeconfig(ns string) string {
	if kc, ok := k.relay[ns]; ok {
		return kc
	}
	kc := k.cp.RelayT(k.t, ns)
	k.relay[ns] = kc
	return kc
}

// applyCRDs creates xlb's CustomResourceDefinitions from deploy/crds and
// waits until they are served.
func (k *kubeEnv) applyCRDs() {
	k.t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "deploy", "crds", "*.yaml"))
	if err != nil || len(files) == 0 {
		k.t.Fatalf("deploy/crds: %v (%d files)", err, len(files))
	}
	if err := k8stest.InstallCRDs(k.ctx, k.dyn, 30*time.Second, files...); err != nil {
		k.t.Fatal(err)
	}
}

func (k *kubeEnv) createCustom(r schema.GroupVersionResource, kind, name string, spec map[string]any) {
	k.t.Helper()
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": k8sapi.Group + "/" + k8sapi.Version, "kind": kind,
		"metadata": map[string]any{"name": name}, "spec": spec,
	}}
	k.must(k.dyn.Resource(r).Create(k.ctx, obj, metav1.CreateOptions{}))
}

// startController runs `xlb controller` on the host, where the API server
// listens, with short leader-election timers.
func (k *kubeEnv) startController() {
	k.t.Helper()
	k.ctlN++
	logPath := filepath.Join(k.p.StateDir, fmt.Sprintf("controller-%d.log", k.ctlN))
	logf, err := os.Create(logPath)
	if err != nil {
		k.t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(xlbBinary, "controller", "--kubeconfig", k.cp.Kubeconfig, "--namespace", k8sNamespace,
		"--identity", fmt.Sprintf("e2e-%d", k.ctlN), "--metrics-addr", "",
		"--lease-duration", "4s", "--renew-deadline", "3s", "--retry-period", "500ms")
	cmd.Stdout, cmd.Stderr = logf, logf
	// The controller dies with the test binary, whatever ends it.
	waited, err := testenv.StartTied(cmd)
	if err != nil {
		k.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		<-waited
		close(done)
	}()
	k.ctl = cmd
	k.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if k.t.Failed() {
			b, _ := os.ReadFile(logPath)
			k.t.Logf("controller log %s:\n%s", logPath, tailLines(string(b), 30))
		}
	})
}

// restartController stops the controller with SIGTERM and starts
// another.
func (k *kubeEnv) restartController() {
	k.t.Helper()
	old := k.ctl
	if err := old.Process.Signal(syscall.SIGTERM); err != nil {
		k.t.Fatal(err)
	}
	if err := labrun.WaitExit(k.ctx, old.Process.Pid, 15*time.Second); err != nil {
		k.t.Fatal(err)
	}
	k.startController()
}

// agentConfig is the base configuration of node's agent: the node, the
// API and the data plane from the file, services and peers from the
// cluster.
func (k *kubeEnv) agentConfig(n lab.Host) string {
	b := k.p.BGP
	return fmt.Sprintf(`# Written by TestKubernetes for %s.
node: {interface: %s, address: %s}
api: {socket: %s}
dataplane: {pinPath: %s}
bgp: {asn: %d, holdTime: %s, drainTime: %s}
kubernetes: {kubeconfig: %s, nodeName: %s}
`, n.Name, n.Interface, n.Addr, labrun.Socket(k.p, n), n.PinDir, b.NodeASN, b.HoldTime, labrun.DrainTime, k.kubeconfig(n.Namespace), n.Name)
}

func (k *kubeEnv) startAgent(n lab.Host) {
	k.t.Helper()
	path := labrun.ConfigPath(k.p, n)
	if err := os.WriteFile(path, []byte(k.agentConfig(n)), 0o644); err != nil {
		k.t.Fatal(err)
	}
	if _, err := lab.StartProcess(k.p.Spec.Prefix, n.Namespace, labrun.AgentName(n), xlbBinary, "agent", "--config", path); err != nil {
		k.t.Fatal(err)
	}
}

// restartAgent stops node n's agent with SIGTERM (it withdraws its
// routes and drains), starts it again and waits until it serves the
// Service.
func (k *kubeEnv) restartAgent(n lab.Host) {
	k.t.Helper()
	if err := lab.StopProcess(k.p.Spec.Prefix, labrun.AgentName(n)); err != nil {
		k.t.Fatal(err)
	}
	k.startAgent(n)
	k.waitFor(n.Name+"'s agent serving the Service again", 30*time.Second, func() string {
		st, err := api.GetStatus(labrun.Socket(k.p, n))
		if err != nil {
			return err.Error()
		}
		if _, ok := servedBackends(st); !ok {
			return "not serving " + serviceName(80, "tcp")
		}
		return ""
	})
}

// waitHistory waits until the Service's endpoint history, which the
// leader controller writes, holds at least n earlier sets.
func (k *kubeEnv) waitHistory(n int) {
	k.t.Helper()
	k.waitFor(fmt.Sprintf("%d changes in the endpoint history", n), 10*time.Second, func() string {
		s, err := k.cs.CoreV1().Services(k8sNamespace).Get(k.ctx, k8sService, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		v, ok := s.Annotations[k8sapi.AnnotationEndpointHistory]
		if !ok {
			return "no annotation " + k8sapi.AnnotationEndpointHistory
		}
		h, err := history.Parse(v)
		if err != nil {
			k.t.Fatalf("the controller wrote %s: %q: %v", k8sapi.AnnotationEndpointHistory, v, err)
		}
		if len(h.Past) < n {
			return fmt.Sprintf("%d earlier sets: %s", len(h.Past), v)
		}
		return ""
	})
}

// startBackend runs the backend DaemonSet's command on Kubernetes node h.
func (k *kubeEnv) startBackend(h lab.Host) {
	k.t.Helper()
	_, err := lab.StartProcess(k.p.Spec.Prefix, h.Namespace, "backend-"+h.Name, xlbBinary, "backend", "--source", "kubernetes",
		"--interface", h.Interface, "--kubeconfig", k.kubeconfig(h.Namespace), "--node-name", h.Name, "--pin-path", h.PinDir)
	if err != nil {
		k.t.Fatal(err)
	}
	k.t.Cleanup(func() {
		if k.t.Failed() {
			path := lab.LogFile(k.p.Spec.Prefix, "backend-"+h.Name)
			b, _ := os.ReadFile(path)
			k.t.Logf("%s:\n%s", path, tailLines(string(b), 20))
		}
	})
}

// restartBackend stops node h's backend daemon with SIGTERM (its
// translations stay pinned and keep working) and starts it again.
func (k *kubeEnv) restartBackend(h lab.Host) {
	k.t.Helper()
	if err := lab.StopProcess(k.p.Spec.Prefix, "backend-"+h.Name); err != nil {
		k.t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	k.startBackend(h)
}

// logSockets logs, for each client end of a broken connection, the TCP
// sockets of that client port in the client and in every pod, with
// their counters: which pod holds the connection, what it received and
// what of it the client saw.
func (k *kubeEnv) logSockets(clients []netip.AddrPort) {
	hosts := []lab.Host{k.p.Clients[0]}
	for _, pod := range k.p.Pods {
		hosts = append(hosts, pod.Host)
	}
	for _, c := range clients {
		var b strings.Builder
		for _, h := range hosts {
			out, err := exec.Command("ip", "netns", "exec", h.Namespace, "ss", "-Htanoi").CombinedOutput()
			if err != nil {
				fmt.Fprintf(&b, "  %s: %v: %s\n", h.Name, err, out)
				continue
			}
			for _, line := range strings.Split(string(out), "\n") {
				if strings.Contains(line, c.String()) {
					fmt.Fprintf(&b, "  %s: %s\n", h.Name, strings.Join(strings.Fields(line), " "))
				}
			}
		}
		k.t.Logf("%s: sockets of %s:\n%s", time.Now().Format("15:04:05.000"), c, b.String())
	}
}

// logAgents logs the last n lines of every agent's log.
func (k *kubeEnv) logAgents(n int) {
	for _, node := range k.p.Nodes {
		path := lab.LogFile(k.p.Spec.Prefix, labrun.AgentName(node))
		b, err := os.ReadFile(path)
		if err != nil {
			k.t.Logf("%s: %v", node.Name, err)
			continue
		}
		k.t.Logf("%s:\n%s", path, tailLines(string(b), n))
	}
}

// counters lists, one host a line, the non-zero pass and drop reasons
// of every xlb node's LB program and the chaining decisions and
// translation counters of every backend's program; a host it cannot read
// says why.
func (k *kubeEnv) counters() string {
	var b strings.Builder
	for _, n := range k.p.Nodes {
		fmt.Fprintf(&b, "  %s:", n.Name)
		st, err := api.GetStatus(labrun.Socket(k.p, n))
		if err != nil {
			fmt.Fprintf(&b, " %v\n", err)
			continue
		}
		for _, r := range slices.Sorted(maps.Keys(st.Reasons)) {
			if st.Reasons[r] != 0 {
				fmt.Fprintf(&b, " %s=%d", r, st.Reasons[r])
			}
		}
		b.WriteString("\n")
	}
	for _, be := range k.p.Backends {
		fmt.Fprintf(&b, "  %s:", be.Name)
		st, err := decap.ChainStats(be.PinDir)
		if err != nil {
			fmt.Fprintf(&b, " %v\n", err)
			continue
		}
		nat, err := backendhost.NATStats(be.PinDir)
		if err != nil {
			fmt.Fprintf(&b, " %v", err)
		}
		maps.Copy(st, nat)
		for _, name := range slices.Sorted(maps.Keys(st)) {
			if st[name].Packets != 0 {
				fmt.Fprintf(&b, " %s=%d", name, st[name].Packets)
			}
		}
		b.WriteString("\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// waitTranslated waits until the backend daemon on pod's node translates
// the Service's two ports to the pod's address.
func (k *kubeEnv) waitTranslated(pod lab.Pod) {
	k.t.Helper()
	h := k.p.Backends[pod.Node]
	start := time.Now()
	k.waitFor(fmt.Sprintf("translations to %s on %s", pod.Name, h.Name), 10*time.Second, func() string {
		nat, err := backendhost.PinnedNAT(h.PinDir)
		if err != nil {
			return err.Error()
		}
		n := 0
		for _, e := range nat {
			if e.PodIP == pod.Addr {
				n++
			}
		}
		if n != 2 { // HTTP and DNS
			return fmt.Sprintf("%d of 2 translations: %v", n, nat)
		}
		return ""
	})
	k.t.Logf("%s translated on %s %s after the API call", pod.Name, h.Name, time.Since(start).Round(time.Millisecond))
}

// natNoEntry sums the packets that the Kubernetes nodes' programs
// dropped for want of a translation (nat_drop_no_entry).
func (k *kubeEnv) natNoEntry() uint64 {
	k.t.Helper()
	var n uint64
	for _, h := range k.p.Backends {
		st, err := backendhost.NATStats(h.PinDir)
		if err != nil {
			k.t.Fatal(err)
		}
		n += st["nat_drop_no_entry"].Packets
	}
	return n
}

// createPod creates the Pod of lab pod pod on its node and, as the
// kubelet would, gives it its IP and readiness.
func (k *kubeEnv) createPod(pod lab.Pod, ready bool) {
	k.t.Helper()
	k.must(k.cs.CoreV1().Pods(k8sNamespace).Create(k.ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Labels: map[string]string{"app": k8sService}},
		Spec: corev1.PodSpec{NodeName: k.p.Backends[pod.Node].Name,
			Containers: []corev1.Container{{Name: "web", Image: "registry.invalid/web",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: lab.PodHTTPPort}, {Name: "dns", ContainerPort: lab.PodUDPPort, Protocol: corev1.ProtocolUDP}}}}},
	}, metav1.CreateOptions{}))
	ip := pod.Addr.String()
	k.patchPodStatus(pod, fmt.Sprintf(`{"status":{"phase":"Running","podIP":%q,"podIPs":[{"ip":%q}],"conditions":[{"type":"Ready","status":%q}]}}`,
		ip, ip, conditionStatus(ready)))
}

func (k *kubeEnv) setReady(pod lab.Pod, ready bool) {
	k.t.Helper()
	k.patchPodStatus(pod, fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":%q}]}}`, conditionStatus(ready)))
}

func (k *kubeEnv) patchPodStatus(pod lab.Pod, patch string) {
	k.t.Helper()
	k.must(k.cs.CoreV1().Pods(k8sNamespace).Patch(k.ctx, pod.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"))
}

// deletePod deletes a Pod at once, as a finished scale-down does.
func (k *kubeEnv) deletePod(pod lab.Pod) {
	k.t.Helper()
	zero := int64(0)
	k.must(nil, k.cs.CoreV1().Pods(k8sNamespace).Delete(k.ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}))
}

func conditionStatus(ready bool) string {
	if ready {
		return "True"
	}
	return "False"
}

// createService creates the Service: HTTP on 80 and UDP on 53, to the
// pods' target ports, of xlb's load-balancer class.
func (k *kubeEnv) createService() {
	k.t.Helper()
	class := k8sapi.LoadBalancerClass
	k.must(k.cs.CoreV1().Services(k8sNamespace).Create(k.ctx, &corev1.Service{
		// Daisy chaining keeps every connection on its pod while
		// the pods change below.
		ObjectMeta: metav1.ObjectMeta{Name: k8sService, Annotations: map[string]string{
			k8sapi.AnnotationFlows: string(config.FlowsDaisyChain), k8sapi.AnnotationSharingKey: k8sSharing}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class,
			Selector: map[string]string{"app": k8sService},
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP},
				{Name: "dns", Port: 53, TargetPort: intstr.FromInt32(lab.PodUDPPort), Protocol: corev1.ProtocolUDP},
			}},
	}, metav1.CreateOptions{}))
}

// createAdmin creates a Service of the same pods on another port, with
// the first Service's sharing key and externalTrafficPolicy Local.
func (k *kubeEnv) createAdmin() {
	k.t.Helper()
	class := k8sapi.LoadBalancerClass
	k.must(k.cs.CoreV1().Services(k8sNamespace).Create(k.ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: k8sAdmin, Annotations: map[string]string{k8sapi.AnnotationSharingKey: k8sSharing}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class,
			Selector:              map[string]string{"app": k8sService},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports:                 []corev1.ServicePort{{Name: "admin", Port: k8sAdminPort, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{}))
}

// waitAdmin waits until both agents serve the sharing Service's port
// with every pod and each pod's node translates it.
func (k *kubeEnv) waitAdmin(target netip.AddrPort) {
	k.t.Helper()
	name := fmt.Sprintf("%s/%s:%d/tcp", k8sNamespace, k8sAdmin, target.Port())
	k.waitFor(name+" in every agent and node", 30*time.Second, func() string {
		for _, n := range k.p.Nodes {
			st, err := api.GetStatus(labrun.Socket(k.p, n))
			if err != nil {
				return err.Error()
			}
			i := slices.IndexFunc(st.Services, func(s api.Service) bool { return s.Name == name })
			if i < 0 || !st.Services[i].Installed || len(st.Services[i].Backends) != len(k.p.Pods) {
				return n.Name + " does not serve " + name + " with every pod"
			}
			if st.Services[i].VIP != target.Addr() {
				return fmt.Sprintf("%s serves %s at %s", n.Name, name, st.Services[i].VIP)
			}
		}
		for _, pod := range k.p.Pods {
			h := k.p.Backends[pod.Node]
			nat, err := backendhost.PinnedNAT(h.PinDir)
			if err != nil {
				return err.Error()
			}
			if !slices.ContainsFunc(nat, func(e backendhost.NATEntry) bool {
				return e.VIP == target.Addr() && e.Port == target.Port() && e.PodIP == pod.Addr
			}) {
				return fmt.Sprintf("%s does not translate %s to %s", h.Name, target, pod.Name)
			}
		}
		return ""
	})
}

// waitIngress waits until the Service's status has an address (want,
// if not empty) and returns it.
func (k *kubeEnv) waitIngress(want string) netip.Addr {
	k.t.Helper()
	return k.waitIngressOf(k8sService, want)
}

// waitIngressOf is waitIngress for the Service name.
func (k *kubeEnv) waitIngressOf(name, want string) netip.Addr {
	k.t.Helper()
	var got netip.Addr
	k.waitFor(name+"'s address", 30*time.Second, func() string {
		s, err := k.cs.CoreV1().Services(k8sNamespace).Get(k.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		ing := s.Status.LoadBalancer.Ingress
		if len(ing) != 1 || (want != "" && ing[0].IP != want) {
			return fmt.Sprintf("ingress %+v", ing)
		}
		got, err = netip.ParseAddr(ing[0].IP)
		if err != nil {
			return err.Error()
		}
		return ""
	})
	return got
}

// waitPoolAssigned waits until the pool's status counts n addresses held.
func (k *kubeEnv) waitPoolAssigned(n int64) {
	k.t.Helper()
	k.waitFor(fmt.Sprintf("pool %s with %d assigned", k8sPool, n), 30*time.Second, func() string {
		u, err := k.dyn.Resource(k8sapi.AddressPoolResource).Get(k.ctx, k8sPool, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		var pool k8sapi.AddressPool
		if err := k8sapi.FromUnstructured(u, &pool); err != nil {
			return err.Error()
		}
		if pool.Status.Assigned != n {
			return fmt.Sprintf("status %+v", pool.Status)
		}
		return ""
	})
}

func serviceName(port int, proto string) string {
	return fmt.Sprintf("%s/%s:%d/%s", k8sNamespace, k8sService, port, proto)
}

// servedBackends returns the pod addresses an agent's data plane has for
// the Service's HTTP port (backends with weight 0 drain and count as
// gone), and whether it serves that port at all.
func servedBackends(st *api.Status) ([]string, bool) {
	for _, s := range st.Services {
		if s.Name != serviceName(80, "tcp") {
			continue
		}
		var addrs []string
		for _, b := range s.Backends {
			if b.Weight > 0 {
				addrs = append(addrs, b.Address.String())
			}
		}
		slices.Sort(addrs)
		return addrs, s.Installed
	}
	return nil, false
}

// waitBackends waits until both agents' data planes have exactly the
// named pods as the Service's backends.
func (k *kubeEnv) waitBackends(pods ...string) {
	k.t.Helper()
	var want []string
	for _, pod := range k.p.Pods {
		if slices.Contains(pods, pod.Name) {
			want = append(want, pod.Addr.String())
		}
	}
	slices.Sort(want)
	k.waitFor(fmt.Sprintf("backends %v in every agent", pods), 30*time.Second, func() string {
		for _, n := range k.p.Nodes {
			st, err := api.GetStatus(labrun.Socket(k.p, n))
			if err != nil {
				return err.Error()
			}
			got, ok := servedBackends(st)
			if !ok || !slices.Equal(got, want) {
				return fmt.Sprintf("%s: installed %v, backends %v", n.Name, ok, got)
			}
		}
		return ""
	})
}

// change makes a change to the cluster and waits until every agent's
// data plane has the pods want; it logs the time from the API call's
// return to then.
func (k *kubeEnv) change(what string, do func(), want ...string) {
	k.t.Helper()
	start := time.Now()
	if n := len(k.phases); n > 0 {
		k.phases[n-1].to = start
	}
	do()
	called := time.Now()
	k.waitBackends(want...)
	// From here on, and not from the API call's return plus the wait:
	// under load the call itself can take long enough for the requests
	// started meanwhile to meet the old set.
	applied := time.Now()
	k.t.Logf("%s: in both data planes %s after the API call", what, applied.Sub(called).Round(time.Millisecond))
	k.phases = append(k.phases, phase{what: what, changed: start, from: applied, to: time.Now().Add(time.Hour), pods: want})
	// Let the stream run a while on the new set.
	time.Sleep(time.Second)
}

// checkPhases wants every request that started while the data planes
// had a phase's pods to be answered by one of them: traffic follows the
// cluster.
func (k *kubeEnv) checkPhases(attempts []labrun.Attempt) {
	k.t.Helper()
	for _, ph := range k.phases {
		n := 0
		for _, a := range window(attempts, ph.from, ph.to) {
			n++
			if a.Err == nil && !slices.Contains(ph.pods, a.Backend) {
				k.t.Errorf("%s: a request at %s reached %s, not one of %v", ph.what, a.Start.Format("15:04:05.000"), a.Backend, ph.pods)
			}
		}
		if n < 20 {
			k.t.Errorf("%s: only %d requests to check", ph.what, n)
		}
	}
}

// stream sends a request on a new connection to target every 20 ms
// until the returned stop.
func (k *kubeEnv) stream(target netip.AddrPort) (stop func() []labrun.Attempt) {
	return streamTo(k.t, k.ctx, k.p.Clients[0].Namespace, target, 20*time.Millisecond, 5*time.Second)
}

// checkStream wants every attempt answered, by the pods only.
func checkStream(t *testing.T, attempts []labrun.Attempt, pods []string) {
	t.Helper()
	by := map[string]int{}
	failed := 0
	for _, a := range attempts {
		if a.Err != nil {
			if failed < 5 {
				t.Errorf("request at %s failed: %v", a.Start.Format("15:04:05.000"), a.Err)
			}
			failed++
			continue
		}
		by[a.Backend]++
	}
	t.Logf("%d requests, %d failed; answered by %v", len(attempts), failed, by)
	if failed > 0 {
		t.Errorf("%d of %d requests failed", failed, len(attempts))
	}
	if len(attempts) < 100 {
		t.Errorf("only %d requests were made", len(attempts))
	}
	for name := range maps.Keys(by) {
		if !slices.Contains(pods, name) {
			t.Errorf("answered by %q, not a pod", name)
		}
	}
}

func (k *kubeEnv) waitFor(what string, timeout time.Duration, cond func() string) {
	k.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		why := cond()
		if why == "" {
			return
		}
		if time.Now().After(deadline) || k.ctx.Err() != nil {
			k.t.Fatalf("%s: not within %s: %s", what, timeout, why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func podNames(pods []lab.Pod) []string {
	var names []string
	for _, p := range pods {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	return names
}

func without(names []string, drop ...string) []string {
	return slices.DeleteFunc(slices.Clone(names), func(n string) bool { return slices.Contains(drop, n) })
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
