package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
	k8sapi "github.com/xlbproject/xlb/internal/k8s/api"
	"github.com/xlbproject/xlb/internal/l2/lease"
	"github.com/xlbproject/xlb/testbed/k8stest"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
)

// TestL2Kubernetes is a layer-2 pool in Kubernetes, in the layer-2 lab:
// two clients and three xlb nodes on one segment, the agents in
// Kubernetes mode against a real API server, an AddressPool with
// announce: l2 and a NAT Service of it. One node answers for the
// Service's address and its Lease records it; after SIGSTOP of that
// node's agent another node answers, the clients' ARP caches move to its
// MAC and new connections succeed. The failover times are logged, not
// asserted.
func TestL2Kubernetes(t *testing.T) {
	k := kubeLab(t, k8stest.Options{}, "lk", lab.Spec{Clients: 2, Nodes: 3, Backends: 2, PlainBackends: true,
		Router: lab.RouterStatic, L2: true}, 4*time.Minute, 60)
	ctx, p := k.ctx, k.p
	services, err := labrun.Services(p)
	if err != nil {
		t.Fatal(err)
	}
	vip := services[0].VIP // an address on the nodes' segment
	k.createNodes(nodeAddr)
	k.createCustom(k8sapi.AddressPoolResource, "AddressPool", "lan", map[string]any{
		"addresses": []any{netip.PrefixFrom(vip, 32).String()}, "announce": "l2"})
	k.startController()
	for _, n := range p.Nodes {
		cfg := fmt.Sprintf(`# Written by TestL2Kubernetes for %s.
node: {interface: %s, address: %s}
api: {socket: %s}
dataplane: {pinPath: %s}
kubernetes: {kubeconfig: %s, nodeName: %s, secretNamespace: %s}
`, n.Name, n.Interface, n.Addr, labrun.Socket(p, n), n.PinDir, k.kubeconfig(n.Namespace), n.Name, k8sNamespace)
		path := labrun.ConfigPath(p, n)
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := lab.StartProcess(p.Spec.Prefix, n.Namespace, labrun.AgentName(n), xlbBinary, "agent", "--config", path); err != nil {
			t.Fatal(err)
		}
	}

	// A NAT Service of the pool, its endpoints the lab's plain backends.
	class := k8sapi.LoadBalancerClass
	k.must(k.cs.CoreV1().Services(k8sNamespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: k8sService, Annotations: map[string]string{k8sapi.AnnotationForwarding: string(config.NAT)}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(lab.HTTPPort), Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{}))
	var eps []discoveryv1.Endpoint
	for _, b := range p.Backends {
		ready := true
		eps = append(eps, discoveryv1.Endpoint{Addresses: []string{b.Addr.String()}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
	}
	port, proto, name := int32(lab.HTTPPort), corev1.ProtocolTCP, "http"
	k.must(k.cs.DiscoveryV1().EndpointSlices(k8sNamespace).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: k8sService + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: k8sService}},
		AddressType: discoveryv1.AddressTypeIPv4, Endpoints: eps,
		Ports: []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}, metav1.CreateOptions{}))
	if got := k.waitIngress(""); got != vip {
		t.Fatalf("the Service got %s, want %s, the pool's address", got, vip)
	}

	// Every node serves the address before its owner is taken: until
	// then the owner is the rendezvous choice among fewer nodes.
	k.waitFor("every node's Lease listing "+vip.String(), 60*time.Second, func() string {
		for _, n := range p.Nodes {
			l, err := k.cs.CoordinationV1().Leases(k8sNamespace).Get(ctx, lease.NodeLease(n.Name), metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			if got := l.Annotations[lease.AnnotationVIPs]; got != vip.String() {
				return fmt.Sprintf("%s lists %q", n.Name, got)
			}
		}
		return ""
	})
	running := slices.Clone(p.Nodes)
	owner, err := labrun.WaitL2Owner(ctx, p, running, vip, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s answers for %s", owner.Name, vip)
	k.waitFor("the VIP's Lease naming "+owner.Name, 10*time.Second, func() string { return leaseHolder(k, vip, owner.Name) })
	target := netip.AddrPortFrom(vip, 80)
	for _, c := range p.Clients {
		tally, err := labrun.HTTPLoad(ctx, c.Namespace, target, 20, 4, nil)
		if err != nil || tally.Total() != 20 {
			t.Fatalf("%s to %s: %v, %v", c.Name, target, tally, err)
		}
		if mac, err := labrun.NeighMAC(c, vip); err != nil || mac != macOf(t, p, owner) {
			t.Errorf("%s holds %q for %s (%v), want %s's MAC %s", c.Name, mac, vip, err, owner.Name, macOf(t, p, owner))
		}
	}

	// The owner's agent hangs: another node answers, the clients move.
	pid, err := labrun.AgentPID(p, owner)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
	others := slices.DeleteFunc(slices.Clone(running), func(h lab.Host) bool { return h.Name == owner.Name })
	stopped := time.Now()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	next, err := labrun.WaitL2Owner(ctx, p, others, vip, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(stopped)
	nextMAC := macOf(t, p, next)
	moved := map[string]time.Duration{}
	k.waitFor("the clients' ARP caches moving to "+next.Name, 10*time.Second, func() string {
		for _, c := range p.Clients {
			if _, ok := moved[c.Name]; ok {
				continue
			}
			if mac, _ := labrun.NeighMAC(c, vip); mac == nextMAC {
				moved[c.Name] = time.Since(stopped)
			}
		}
		if len(moved) < len(p.Clients) {
			return fmt.Sprintf("moved: %v", moved)
		}
		return ""
	})
	t.Logf("SIGSTOP of %s's agent: %s answers for %s, seen in its status %s after the stop; the clients' ARP caches held its MAC %s after %v",
		owner.Name, next.Name, vip, took.Round(time.Millisecond), nextMAC, moved)
	k.waitFor("the VIP's Lease naming "+next.Name, 10*time.Second, func() string { return leaseHolder(k, vip, next.Name) })
	for _, c := range p.Clients {
		tally, err := labrun.HTTPLoad(ctx, c.Namespace, target, 20, 4, nil)
		if err != nil || tally.Total() != 20 {
			t.Fatalf("%s to %s after the failover: %v, %v", c.Name, target, tally, err)
		}
	}

	// Resumed, the hung agent's node takes its address back.
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// (the rendezvous choice among the three, once it has waited a dead
	// time for the others' Leases)
	if err := labrun.WaitL2OwnerIs(ctx, p, running, vip, owner.Name, 30*time.Second); err != nil {
		t.Errorf("after SIGCONT: %v", err)
	}
}

// leaseHolder says what is wrong with vip's Lease if it does not name
// want ("" when it does).
func leaseHolder(k *kubeEnv, vip netip.Addr, want string) string {
	l, err := k.cs.CoordinationV1().Leases(k8sNamespace).Get(k.ctx, lease.VIPLease(vip), metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	if h := l.Spec.HolderIdentity; h == nil || *h != want {
		got := "none"
		if h != nil {
			got = *h
		}
		return "holder " + got
	}
	return ""
}

// macOf is the MAC node's agent answers ARP with (its status).
func macOf(t *testing.T, p lab.Plan, node lab.Host) string {
	t.Helper()
	st, err := api.GetStatus(labrun.Socket(p, node))
	if err != nil || st.L2 == nil {
		t.Fatalf("%s: layer-2 status: %v", node.Name, err)
	}
	return st.L2.MAC
}
