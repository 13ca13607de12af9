package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	k8sapi "github.com/xlbproject/xlb/internal/k8s/api"
	"github.com/xlbproject/xlb/testbed/k8stest"
)

// The objects of the benchmark.
const (
	benchNS   = "k8sbench"
	nodeName  = "lb-1"
	portName  = "http"
	svcPort   = 80
	podPort   = 8080
	managedBy = "k8sbench.xlb.io"
	// crdDir holds the BGPPeer and DenyList CRDs, which the agent
	// requires, relative to the repository's root.
	crdDir = "deploy/crds"
)

// crdFiles are the CRDs the agent requires, in crdDir.
var crdFiles = []string{"xlb.io_bgppeers.yaml", "xlb.io_denylists.yaml", "xlb.io_addresspools.yaml"}

// cluster is the control plane and a client with room for the set-up's
// burst of requests.
type cluster struct {
	cp  *k8stest.ControlPlane
	cs  kubernetes.Interface
	dyn dynamic.Interface
}

func connect(cp *k8stest.ControlPlane) (*cluster, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		return nil, err
	}
	// The set-up sends thousands of requests: client-go's default of
	// 5/s would take minutes. The concurrency bounds the load instead.
	rc.QPS, rc.Burst = 2000, 4000
	rc.UserAgent = "xlb-k8sbench"
	c := &cluster{cp: cp}
	if c.cs, err = kubernetes.NewForConfig(rc); err != nil {
		return nil, err
	}
	if c.dyn, err = dynamic.NewForConfig(rc); err != nil {
		return nil, err
	}
	return c, nil
}

// svcName names the i-th Service, and its one EndpointSlice.
func svcName(i int) string { return fmt.Sprintf("svc-%04d", i) }

// vip is the i-th Service's address: 10.99.0.1 on.
func vip(i int) netip.Addr { return addrPlus(netip.AddrFrom4([4]byte{10, 99, 0, 0}), i+1) }

// endpointAddr is endpoint j of Service i: 10.128.0.1 on, each address
// used once.
func endpointAddr(i, j, perService int) netip.Addr {
	return addrPlus(netip.AddrFrom4([4]byte{10, 128, 0, 0}), i*perService+j+1)
}

func addrPlus(a netip.Addr, n int) netip.Addr {
	b := a.As4()
	v := binary.BigEndian.Uint32(b[:]) + uint32(n)
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

// setUp installs the BGPPeer CRD and creates the namespace, the agent's
// Node and the Services with their addresses and EndpointSlices. It
// returns the number of API calls made.
func (c *cluster) setUp(ctx context.Context, o options, progress func(string)) (int, error) {
	if err := c.installCRD(ctx); err != nil {
		return 0, err
	}
	calls := 1
	if _, err := c.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNS}}, metav1.CreateOptions{}); err != nil {
		return calls, fmt.Errorf("namespace %s: %w", benchNS, err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{"xlb.io/lb-node": "true"}}}
	if _, err := c.cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return calls, fmt.Errorf("node %s: %w", nodeName, err)
	}
	calls += 2

	var made, failed atomic.Int64
	var firstErr error
	var once sync.Once
	work := make(chan int)
	var wg sync.WaitGroup
	for range o.concurrency {
		wg.Go(func() {
			for i := range work {
				if err := c.createService(ctx, i, o.endpoints); err != nil {
					failed.Add(1)
					once.Do(func() { firstErr = err })
					continue
				}
				if n := made.Add(1); n%200 == 0 {
					progress(fmt.Sprintf("  %d of %d Services with their address and EndpointSlice", n, o.services))
				}
			}
		})
	}
feed:
	for i := range o.services {
		select {
		case work <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	calls += 3 * int(made.Load())
	if err := ctx.Err(); err != nil {
		return calls, err
	}
	if firstErr != nil {
		return calls, fmt.Errorf("%d of %d Services not created; the first error: %w", failed.Load(), o.services, firstErr)
	}
	return calls, nil
}

// installCRD creates the BGPPeer and DenyList CRDs (the agent checks
// that they are served) and waits until they can be listed.
func (c *cluster) installCRD(ctx context.Context) error {
	var paths []string
	for _, f := range crdFiles {
		path, err := findUp(filepath.Join(crdDir, f))
		if err != nil {
			return err
		}
		paths = append(paths, path)
	}
	return k8stest.InstallCRDs(ctx, c.dyn, 30*time.Second, paths...)
}

// findUp finds rel from the working directory upwards: the repository's
// root when run as `go run ./bench/k8sbench` or from a subdirectory.
func findUp(rel string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%s not found from the working directory upwards: run k8sbench in the xlb repository", rel)
		}
		dir = parent
	}
}

// createService creates Service i without a selector, writes its
// address to its status as the xlb controller would, and gives it one
// EndpointSlice of ready endpoints, as the EndpointSlice controller would
// for pods (without the cost of creating them).
func (c *cluster) createService(ctx context.Context, i, endpoints int) error {
	class := k8sapi.LoadBalancerClass
	noNodePorts := false
	name := svcName(i)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNS},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class,
			// No node ports: there are no nodes to serve them, and
			// the range has room for 2768 only.
			AllocateLoadBalancerNodePorts: &noNodePorts,
			Ports:                         []corev1.ServicePort{{Name: portName, Port: svcPort, TargetPort: intstr.FromInt32(podPort), Protocol: corev1.ProtocolTCP}},
		},
	}
	if _, err := c.cs.CoreV1().Services(benchNS).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("service %s: %w", name, err)
	}
	status := fmt.Sprintf(`{"status":{"loadBalancer":{"ingress":[{"ip":%q}]}}}`, vip(i))
	if _, err := c.cs.CoreV1().Services(benchNS).Patch(ctx, name, types.MergePatchType, []byte(status), metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("service %s status: %w", name, err)
	}
	if _, err := c.cs.DiscoveryV1().EndpointSlices(benchNS).Create(ctx, endpointSlice(i, endpoints), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("service %s EndpointSlice: %w", name, err)
	}
	return nil
}

// endpointSlice is Service i's slice: what the agent's source selects
// (the service-name label) with a managed-by label of this program's own,
// so that no controller of kube-controller-manager takes it over.
func endpointSlice(i, endpoints int) *discoveryv1.EndpointSlice {
	name := svcName(i)
	proto, port, pname := corev1.ProtocolTCP, int32(podPort), portName
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNS, Labels: map[string]string{
			discoveryv1.LabelServiceName: name,
			discoveryv1.LabelManagedBy:   managedBy,
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &pname, Port: &port, Protocol: &proto}},
	}
	node := nodeName
	for j := range endpoints {
		ready := true
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{endpointAddr(i, j, endpoints).String()},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			NodeName:   &node,
		})
	}
	return sl
}

// readyPatch is the JSON patch that sets endpoint j's ready condition.
func readyPatch(j int, ready bool) []byte {
	return fmt.Appendf(nil, `[{"op":"replace","path":"/endpoints/%d/conditions/ready","value":%t}]`, j, ready)
}

// setReady sets endpoint j of Service i ready or not, in one request. It
// returns when the request was sent and when its answer came.
func (c *cluster) setReady(ctx context.Context, i, j int, ready bool) (sent, answered time.Time, err error) {
	sent = time.Now()
	_, err = c.cs.DiscoveryV1().EndpointSlices(benchNS).Patch(ctx, svcName(i), types.JSONPatchType, readyPatch(j, ready), metav1.PatchOptions{})
	answered = time.Now()
	if err != nil {
		return sent, answered, fmt.Errorf("EndpointSlice %s/%s endpoint %d ready=%t: %w", benchNS, svcName(i), j, ready, err)
	}
	return sent, answered, nil
}
