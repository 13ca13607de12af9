package e2e

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

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
)

// The dual-stack Service of TestKubernetesDualStack and its pool: one
// address of each family, both in the lab's VIP prefixes.
const (
	k8sDualService  = "web6"
	k8sChainService = "web6-chained"
	k8sDualPool     = "lab6"
)

var k8sDualRanges = []any{"10.99.0.32/28", "fd00:99::20/124"}

// TestKubernetesDualStack runs xlb as the load balancer of a dual-stack
// Service (spec.ipFamilyPolicy RequireDualStack) against a dual-stack API
// server, in a lab whose pods have an IPv6 address beside their IPv4 one
// (lab.Spec.Pods with IPv6): `xlb controller` gives the Service an
// address of each family from a dual-stack AddressPool; the agents serve
// the IPv6 address with the pods' IPv6 addresses from the IPv6
// EndpointSlices and announce it with their IPv6 next hops; `xlb backend
// --source kubernetes` on the Kubernetes nodes translates it to the
// pods' IPv6 addresses and target ports. The IPv6 client reaches every
// pod over HTTP and UDP at the IPv6 address, and the IPv4 one still
// works beside it. A second, daisy-chained Service (xlb.io/flows:
// daisy-chain) keeps every persistent IPv6 connection when a pod turns
// unready and its slots move to pods on its own node and the other
// one, which hand the connections back to it; the first Service, not
// daisy-chained, loses the moved ones in the same change.
func TestKubernetesDualStack(t *testing.T) {
	k := kubeLab(t, k8stest.Options{ServiceCIDR: "10.96.0.0/16,fd00:96::/108"}, "kd", lab.Spec{Clients: 1, Nodes: 2, Backends: 2, Pods: 2,
		Router: lab.RouterEmbedded, IPv6: true}, 6*time.Minute, 60)
	ctx, p := k.ctx, k.p
	k.createNodes(func(h lab.Host) []netip.Addr { return []netip.Addr{h.Addr, h.Addr6} })
	k.createCustom(k8sapi.AddressPoolResource, "AddressPool", k8sDualPool, map[string]any{"addresses": k8sDualRanges})
	b := p.BGP
	k.createCustom(k8sapi.BGPPeerResource, "BGPPeer", "router", map[string]any{
		"myASN": int64(b.NodeASN), "peerASN": int64(b.PeerASN), "peerAddress": b.PeerAddr.String(), "holdTime": b.HoldTime.String()})
	k.startController()
	for _, n := range p.Nodes {
		k.startAgent(n)
	}
	for _, be := range p.Backends {
		k.startBackend(be)
	}

	// The pods, each with both addresses as a dual-stack kubelet
	// reports them; then the Service.
	for _, pod := range p.Pods {
		k.must(k.cs.CoreV1().Pods(k8sNamespace).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Labels: map[string]string{"app": k8sDualService}},
			Spec: corev1.PodSpec{NodeName: p.Backends[pod.Node].Name,
				Containers: []corev1.Container{{Name: "web", Image: "registry.invalid/web",
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: lab.PodHTTPPort}, {Name: "dns", ContainerPort: lab.PodUDPPort, Protocol: corev1.ProtocolUDP}}}}},
		}, metav1.CreateOptions{}))
		k.patchPodStatus(pod, fmt.Sprintf(`{"status":{"phase":"Running","podIP":%q,"podIPs":[{"ip":%q},{"ip":%q}],"conditions":[{"type":"Ready","status":"True"}]}}`,
			pod.Addr, pod.Addr, pod.Addr6))
	}
	// createService creates a RequireDualStack Service of the pods.
	createService := func(name string, annotations map[string]string) {
		class := k8sapi.LoadBalancerClass
		policy := corev1.IPFamilyPolicyRequireDualStack
		k.must(k.cs.CoreV1().Services(k8sNamespace).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class,
				IPFamilyPolicy: &policy, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
				Selector: map[string]string{"app": k8sDualService},
				Ports: []corev1.ServicePort{
					{Name: "http", Port: 80, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP},
					{Name: "dns", Port: 53, TargetPort: intstr.FromInt32(lab.PodUDPPort), Protocol: corev1.ProtocolUDP},
				}},
		}, metav1.CreateOptions{}))
	}
	// addresses waits for the two addresses of Service name.
	addresses := func(name string) (vip4, vip6 netip.Addr) {
		k.waitFor("the two addresses of "+name, 30*time.Second, func() string {
			s, err := k.cs.CoreV1().Services(k8sNamespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			ing := s.Status.LoadBalancer.Ingress
			if len(ing) != 2 {
				return fmt.Sprintf("ingress %+v", ing)
			}
			vip4, err = netip.ParseAddr(ing[0].IP)
			if err != nil {
				return err.Error()
			}
			if vip6, err = netip.ParseAddr(ing[1].IP); err != nil || !vip4.Is4() || !vip6.Is6() {
				return fmt.Sprintf("ingress %+v", ing)
			}
			return ""
		})
		t.Logf("Service %s has %s and %s", name, vip4, vip6)
		return vip4, vip6
	}
	// served waits until every agent serves port 80 of vip6 with the
	// IPv6 addresses of pods exactly, and (translated) every pod's node
	// translates vip6's two ports to it.
	served := func(vip6 netip.Addr, pods, translated []lab.Pod) {
		var pods6 []string
		for _, pod := range pods {
			pods6 = append(pods6, pod.Addr6.String())
		}
		slices.Sort(pods6)
		k.waitFor(fmt.Sprintf("%s served with %v", vip6, pods6), 30*time.Second, func() string {
			for _, n := range p.Nodes {
				st, err := api.GetStatus(labrun.Socket(p, n))
				if err != nil {
					return err.Error()
				}
				i := slices.IndexFunc(st.Services, func(s api.Service) bool { return s.VIP == vip6 && s.Port == 80 })
				if i < 0 {
					return n.Name + " does not serve " + vip6.String()
				}
				var got []string
				for _, be := range st.Services[i].Backends {
					got = append(got, be.Address.String())
				}
				slices.Sort(got)
				if !st.Services[i].Installed || !slices.Equal(got, pods6) {
					return fmt.Sprintf("%s serves %s with %v, installed %v", n.Name, st.Services[i].Name, got, st.Services[i].Installed)
				}
			}
			for _, pod := range translated {
				h := p.Backends[pod.Node]
				nat, err := backendhost.PinnedNAT(h.PinDir)
				if err != nil {
					return err.Error()
				}
				for _, port := range []uint16{80, 53} {
					if !slices.ContainsFunc(nat, func(e backendhost.NATEntry) bool { return e.VIP == vip6 && e.Port == port && e.PodIP == pod.Addr6 }) {
						return fmt.Sprintf("%s does not translate [%s]:%d to %s: %v", h.Name, vip6, port, pod.Name, nat)
					}
				}
			}
			return ""
		})
	}

	createService(k8sDualService, nil)
	vip4, vip6 := addresses(k8sDualService)

	// Every agent serves the IPv6 address with every pod's IPv6 address;
	// every pod's node translates it to the pod.
	served(vip6, p.Pods, p.Pods)
	var nodes4, nodes6 []netip.Addr
	for _, n := range p.Nodes {
		nodes4 = append(nodes4, n.Addr)
		nodes6 = append(nodes6, n.Addr6)
	}
	if err := lab.WaitNextHops(ctx, p, vip6, nodes6, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := lab.WaitNextHops(ctx, p, vip4, nodes4, 20*time.Second); err != nil {
		t.Fatal(err)
	}

	all := podNames(p.Pods)
	client := p.Clients[0].Namespace
	for _, c := range []struct {
		target netip.AddrPort
		udp    bool
		n      int
	}{
		{netip.AddrPortFrom(vip6, 80), false, 200},
		{netip.AddrPortFrom(vip6, 53), true, 100},
		{netip.AddrPortFrom(vip4, 80), false, 100},
	} {
		var tally labrun.Tally
		var err error
		if c.udp {
			tally, err = labrun.UDPLoad(ctx, client, c.target, c.n, parallel, nil)
		} else {
			tally, err = labrun.HTTPLoad(ctx, client, c.target, c.n, parallel, nil)
		}
		if err != nil {
			t.Fatalf("%s: %v", c.target, err)
		}
		t.Logf("%s: %d answers %v", c.target, tally.Total(), tally)
		checkTally(t, tally, all)
		if tally.Total() != c.n {
			t.Errorf("%s: %d answers, want %d", c.target, tally.Total(), c.n)
		}
		for _, name := range all {
			if tally[name] == 0 {
				t.Errorf("%s: pod %s got none of %d requests", c.target, name, c.n)
			}
		}
	}

	// Daisy chaining to the IPv6 pods: a second Service of the pods,
	// daisy-chained, and persistent IPv6 connections to it and to the
	// first one, which is not. A pod turns unready and its table slots
	// move to the other pods: on its own node, whose program hands the
	// moved connections back to it (translating for it), and on the
	// other node, whose program chains them over IPv6 to it. None of
	// the daisy-chained Service's connections may break; the first
	// Service's moved ones break, which shows that the change moved
	// connections.
	createService(k8sChainService, map[string]string{k8sapi.AnnotationFlows: "daisy-chain"})
	_, chain6 := addresses(k8sChainService)
	served(chain6, p.Pods, p.Pods)
	if err := lab.WaitNextHops(ctx, p, chain6, nodes6, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	chainedBefore, err := survival.ChainedPackets(p)
	if err != nil {
		t.Fatal(err)
	}
	const conns = 24
	loads := map[netip.Addr]*survival.Load{}
	for _, vip := range []netip.Addr{chain6, vip6} {
		l := survival.NewLoad(ctx, p, netip.AddrPortFrom(vip, 80), 200*time.Millisecond)
		t.Cleanup(func() { l.Stop() })
		if err := l.Open(conns); err != nil {
			t.Fatalf("[%s]:80: %v", vip, err)
		}
		loads[vip] = l
	}
	time.Sleep(time.Second) // every connection has had an answer
	unready := p.Pods[0]
	k.setReady(unready, false)
	rest := slices.DeleteFunc(slices.Clone(p.Pods), func(pod lab.Pod) bool { return pod.Name == unready.Name })
	served(chain6, rest, nil)
	served(vip6, rest, nil)
	time.Sleep(3 * time.Second) // some 15 requests on every connection
	for _, vip := range []netip.Addr{chain6, vip6} {
		r := loads[vip].Stop()
		chained := vip == chain6
		t.Logf("[%s]:80 (daisy-chained %v): %d connections, %d broken, %d requests; %v", vip, chained, r.Conns, r.Broken, r.Requests, r.Errors)
		if len(r.Impossible) > 0 {
			t.Errorf("[%s]:80: answers from two pods on one connection: %v", vip, r.Impossible)
		}
		if r.Requests < 2*conns {
			t.Errorf("[%s]:80: %d requests over %d connections: the load did not run", vip, r.Requests, conns)
		}
		switch {
		case chained && r.Broken > 0:
			t.Errorf("[%s]:80: %d of %d connections broke when %s turned unready: its connections were not chained back to it", vip, r.Broken, conns, unready.Name)
		case !chained && r.Broken == 0:
			t.Errorf("[%s]:80: no connection broke without daisy chaining: none was on %s, so the test shows nothing", vip, unready.Name)
		}
	}
	chained, err := survival.ChainedPackets(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d packets chained", chained-chainedBefore)
	if chained == chainedBefore {
		t.Errorf("no packet was chained: the daisy-chained Service's connections on %s survived without it", unready.Name)
	}
	for _, h := range p.Backends {
		st, err := decap.ChainStats(h.PinDir)
		if err != nil {
			t.Fatal(err)
		}
		for _, reason := range []string{"chain_drop_untrusted_source", "chain_drop_unknown_owner"} {
			if n := st[reason].Packets; n > 0 {
				t.Errorf("%s dropped %d packets as %s: the cluster's IPv6 addresses are not in its chaining sets", h.Name, n, reason)
			}
		}
	}
	// The leader recorded the IPv6 endpoints' change in the endpoint
	// history, for agents that start later.
	k.waitFor("the IPv6 endpoints' change in the endpoint history", 10*time.Second, func() string {
		s, err := k.cs.CoreV1().Services(k8sNamespace).Get(ctx, k8sChainService, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		v := s.Annotations[k8sapi.AnnotationEndpointHistory]
		h, err := history.Parse(v)
		if err != nil {
			return fmt.Sprintf("%q: %v", v, err)
		}
		if len(h.Generations(history.PortKey6(80, config.TCP))) == 0 || len(h.Sets[history.PortKey6(80, config.TCP)]) != len(rest) {
			return "annotation " + v
		}
		return ""
	})

	if n := k.natNoEntry(); n != 0 {
		t.Errorf("the Kubernetes nodes dropped %d packets for want of a translation", n)
	}
	t.Logf("node counters: %s", k.counters())
}
