package nodenat

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/xlbproject/xlb/internal/backendhost"
	"github.com/xlbproject/xlb/internal/k8s/api"
)

// Fixtures. The node under test is "node-a".

const nodeA, nodeB = "node-a", "node-b"

type svcOpt func(*corev1.Service)

func service(name string, opts ...svcOpt) *corev1.Service {
	class := api.LoadBalancerClass
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, CreationTimestamp: metav1.NewTime(time.Unix(1000, 0))},
		Spec: corev1.ServiceSpec{
			Type:              corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass: &class,
			Ports:             []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}},
		},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "10.99.0.1"}}}},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func withIngress(ips ...string) svcOpt {
	return func(s *corev1.Service) {
		s.Status.LoadBalancer.Ingress = nil
		for _, ip := range ips {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
		}
	}
}

func withAnnotation(k, v string) svcOpt {
	return func(s *corev1.Service) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[k] = v
	}
}

func withClass(c *string) svcOpt { return func(s *corev1.Service) { s.Spec.LoadBalancerClass = c } }

func withType(t corev1.ServiceType) svcOpt { return func(s *corev1.Service) { s.Spec.Type = t } }

func withPorts(ps ...corev1.ServicePort) svcOpt { return func(s *corev1.Service) { s.Spec.Ports = ps } }

func createdAt(sec int64) svcOpt {
	return func(s *corev1.Service) { s.CreationTimestamp = metav1.NewTime(time.Unix(sec, 0)) }
}

func ptr[T any](v T) *T { return &v }

type ep struct {
	node  string
	addrs []string
	cond  discoveryv1.EndpointConditions
}

var (
	condReady      = discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)}
	condNotReady   = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(false)}
	condDraining   = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}
	condTerminated = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(true)}
	condUnset      = discoveryv1.EndpointConditions{}
)

func slicePorts(ps ...discoveryv1.EndpointPort) []discoveryv1.EndpointPort { return ps }

func sport(name string, port int32, proto corev1.Protocol) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: ptr(name), Port: ptr(port), Protocol: ptr(proto)}
}

func slice(svc, name string, ports []discoveryv1.EndpointPort, eps ...ep) *discoveryv1.EndpointSlice {
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       ports,
	}
	for _, e := range eps {
		x := discoveryv1.Endpoint{Addresses: e.addrs, Conditions: e.cond}
		if e.node != "" {
			x.NodeName = ptr(e.node)
		}
		sl.Endpoints = append(sl.Endpoints, x)
	}
	return sl
}

// slice6 is an IPv6 EndpointSlice.
func slice6(svc, name string, ports []discoveryv1.EndpointPort, eps ...ep) *discoveryv1.EndpointSlice {
	sl := slice(svc, name, ports, eps...)
	sl.AddressType = discoveryv1.AddressTypeIPv6
	return sl
}

func slicesOf(all ...*discoveryv1.EndpointSlice) func(ns, name string) []*discoveryv1.EndpointSlice {
	return func(ns, name string) []*discoveryv1.EndpointSlice {
		var out []*discoveryv1.EndpointSlice
		for _, sl := range all {
			if sl.Namespace == ns && sl.Labels[discoveryv1.LabelServiceName] == name {
				out = append(out, sl)
			}
		}
		return out
	}
}

func entry(t *testing.T, s string) backendhost.NATEntry {
	t.Helper()
	e, err := backendhost.ParseNATEntry(s)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestTranslate(t *testing.T) {
	httpPort := slicePorts(sport("http", 8080, corev1.ProtocolTCP))
	tests := []struct {
		name      string
		classless bool
		local     []string
		services  []*corev1.Service
		slices    []*discoveryv1.EndpointSlice
		want      []string
		problems  []string // substrings, one per problem
	}{
		{
			name:     "only this node's endpoints, at the target port",
			services: []*corev1.Service{service("web")},
			slices: []*discoveryv1.EndpointSlice{slice("web", "web-1", httpPort,
				ep{nodeA, []string{"10.244.1.2"}, condReady}, ep{nodeB, []string{"10.244.2.2"}, condReady}, ep{"", []string{"10.244.3.2"}, condReady})},
			want: []string{"10.99.0.1:80/tcp=10.244.1.2:8080"},
		},
		{
			name:     "several slices per Service",
			services: []*corev1.Service{service("web")},
			slices: []*discoveryv1.EndpointSlice{
				slice("web", "web-1", httpPort, ep{nodeA, []string{"10.244.1.2"}, condReady}, ep{nodeB, []string{"10.244.2.2"}, condReady}),
				slice("web", "web-2", httpPort, ep{nodeA, []string{"10.244.1.3"}, condReady}),
				slice("other", "other-1", httpPort, ep{nodeA, []string{"10.244.1.9"}, condReady}),
			},
			want: []string{"10.99.0.1:80/tcp=10.244.1.2:8080", "10.99.0.1:80/tcp=10.244.1.3:8080"},
		},
		{
			name: "named ports matched by name and protocol",
			services: []*corev1.Service{service("web", withPorts(
				corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP},
				corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
				corev1.ServicePort{Name: "dnstcp", Port: 53, Protocol: corev1.ProtocolTCP},
				corev1.ServicePort{Name: "absent", Port: 9000},
			))},
			slices: []*discoveryv1.EndpointSlice{slice("web", "web-1", slicePorts(
				sport("dns", 5353, corev1.ProtocolUDP),
				sport("http", 8080, corev1.ProtocolTCP),
				sport("dnstcp", 5354, corev1.ProtocolTCP),
				sport("dns", 9999, corev1.ProtocolTCP), // same name, other protocol: not the UDP port's
			), ep{nodeA, []string{"10.244.1.2"}, condReady})},
			want: []string{"10.99.0.1:53/tcp=10.244.1.2:5354", "10.99.0.1:53/udp=10.244.1.2:5353", "10.99.0.1:80/tcp=10.244.1.2:8080"},
		},
		{
			name:     "unnamed single port, protocol unset means TCP",
			services: []*corev1.Service{service("web", withPorts(corev1.ServicePort{Port: 443}))},
			slices: []*discoveryv1.EndpointSlice{slice("web", "web-1",
				slicePorts(discoveryv1.EndpointPort{Name: ptr(""), Port: ptr(int32(8443))}), ep{nodeA, []string{"10.244.1.2"}, condReady})},
			want: []string{"10.99.0.1:443/tcp=10.244.1.2:8443"},
		},
		{
			name:     "SCTP is not translated",
			services: []*corev1.Service{service("web", withPorts(corev1.ServicePort{Name: "s", Port: 80, Protocol: corev1.ProtocolSCTP}))},
			slices:   []*discoveryv1.EndpointSlice{slice("web", "web-1", slicePorts(sport("s", 8080, corev1.ProtocolSCTP)), ep{nodeA, []string{"10.244.1.2"}, condReady})},
		},
		{
			// The load-balancer node rewrites to the pods itself; a
			// value that names no mode may leave a Service forwarded
			// by DSR, so it is translated.
			name: "nat and dnat Services are not translated here",
			services: []*corev1.Service{
				service("nat", withAnnotation(api.AnnotationForwarding, "nat"), withIngress("10.99.0.2")),
				service("dnat", withAnnotation(api.AnnotationForwarding, "dnat"), withIngress("10.99.0.3")),
				service("gue", withAnnotation(api.AnnotationForwarding, "dsr-gue"), withIngress("10.99.0.4")),
				service("typo", withAnnotation(api.AnnotationForwarding, "natt"), withIngress("10.99.0.5")),
			},
			slices: []*discoveryv1.EndpointSlice{
				slice("nat", "nat-1", httpPort, ep{nodeA, []string{"10.244.1.2"}, condReady}),
				slice("dnat", "dnat-1", httpPort, ep{nodeA, []string{"10.244.1.2"}, condReady}),
				slice("gue", "gue-1", httpPort, ep{nodeA, []string{"10.244.1.2"}, condReady}),
				slice("typo", "typo-1", httpPort, ep{nodeA, []string{"10.244.1.2"}, condReady}),
			},
			want: []string{"10.99.0.4:80/tcp=10.244.1.2:8080", "10.99.0.5:80/tcp=10.244.1.2:8080"},
		},
		{
			name:     "no ingress IP yet",
			services: []*corev1.Service{service("web", withIngress())},
			slices:   []*discoveryv1.EndpointSlice{slice("web", "web-1", httpPort, ep{nodeA, []string{"10.244.1.2"}, condReady})},
		},
		{
			// Each VIP to the pods of its family, as the LB forwards it.
			name:     "a dual-stack Service: each address to the endpoints of its family",
			services: []*corev1.Service{service("web", withIngress("10.99.0.1", "fd00:99::1"))},
			slices: []*discoveryv1.EndpointSlice{
				slice("web", "web-v4", httpPort, ep{nodeA, []string{"10.244.1.2"}, condReady}, ep{nodeB, []string{"10.244.2.2"}, condReady}),
				slice6("web", "web-v6", httpPort, ep{nodeA, []string{"fd00:244:1::2"}, condNotReady}, ep{nodeB, []string{"fd00:244:2::2"}, condReady}),
			},
			want: []string{"10.99.0.1:80/tcp=10.244.1.2:8080", "[fd00:99::1]:80/tcp=[fd00:244:1::2]:8080"},
		},
		{
			name:     "an IPv6-only Service",
			services: []*corev1.Service{service("web", withIngress("fd00:99::1"))},
			slices: []*discoveryv1.EndpointSlice{
				slice6("web", "web-v6", slicePorts(sport("http", 8081, corev1.ProtocolTCP)), ep{nodeA, []string{"fd00:244:1::2", "fd00:244:1::3"}, condReady}),
				slice("web", "web-v4", httpPort, ep{nodeA, []string{"10.244.1.2"}, condReady}),
			},
			want: []string{"[fd00:99::1]:80/tcp=[fd00:244:1::2]:8081", "[fd00:99::1]:80/tcp=[fd00:244:1::3]:8081"},
		},
		{
			name:     "an IPv6 hostNetwork endpoint, an IPv6 endpoint at the VIP, bad IPv6 addresses",
			local:    []string{"10.0.2.2", "fd00:10:2::2"},
			services: []*corev1.Service{service("web", withIngress("fd00:99::1", "fe80::1%eth0", "::ffff:10.99.0.9"))},
			slices: []*discoveryv1.EndpointSlice{slice6("web", "web-v6", httpPort,
				ep{nodeA, []string{"fd00:10:2::2"}, condReady}, ep{nodeA, []string{"fd00:99::1"}, condReady},
				ep{nodeA, []string{"::", "fe80::2%hp1", "::ffff:10.244.1.2", "fd00:244:1::2"}, condReady})},
			want:     []string{"[fd00:99::1]:80/tcp=[fd00:244:1::2]:8080"},
			problems: []string{"endpoint fd00:10:2::2 is an address of this node", "endpoint fd00:99::1 is the Service's own address"},
		},
		{
			name:     "ingress with a hostname, or IPv6 without IPv6 endpoints",
			services: []*corev1.Service{service("web", withIngress("", "fd00::1", "not-an-ip"))},
			slices:   []*discoveryv1.EndpointSlice{slice("web", "web-1", httpPort, ep{nodeA, []string{"10.244.1.2"}, condReady})},
		},
		{
			name:     "every ingress address, once; the IPv6 one has no IPv6 endpoints",
			services: []*corev1.Service{service("web", withIngress("10.99.0.1", "fd00::1", "10.99.0.2", "10.99.0.1"))},
			slices:   []*discoveryv1.EndpointSlice{slice("web", "web-1", httpPort, ep{nodeA, []string{"10.244.1.2"}, condReady})},
			want:     []string{"10.99.0.1:80/tcp=10.244.1.2:8080", "10.99.0.2:80/tcp=10.244.1.2:8080"},
		},
		{
			name: "class filtering without classless",
			services: []*corev1.Service{
				service("other-class", withClass(ptr("example.com/lb")), withIngress("10.99.0.2")),
				service("classless", withClass(nil), withIngress("10.99.0.3")),
				service("cluster-ip", withType(corev1.ServiceTypeClusterIP), withIngress("10.99.0.4")),
				service("ours", withIngress("10.99.0.5")),
			},
			slices: []*discoveryv1.EndpointSlice{
				slice("other-class", "a", httpPort, ep{nodeA, []string{"10.244.1.2"}, condReady}),
				slice("classless", "b", httpPort, ep{nodeA, []string{"10.244.1.3"}, condReady}),
				slice("cluster-ip", "c", httpPort, ep{nodeA, []string{"10.244.1.4"}, condReady}),
				slice("ours", "d", httpPort, ep{nodeA, []string{"10.244.1.5"}, condReady}),
			},
			want: []string{"10.99.0.5:80/tcp=10.244.1.5:8080"},
		},
		{
			name:      "class filtering with classless",
			classless: true,
			services: []*corev1.Service{
				service("other-class", withClass(ptr("example.com/lb")), withIngress("10.99.0.2")),
				service("classless", withClass(nil), withIngress("10.99.0.3")),
			},
			slices: []*discoveryv1.EndpointSlice{
				slice("other-class", "a", httpPort, ep{nodeA, []string{"10.244.1.2"}, condReady}),
				slice("classless", "b", httpPort, ep{nodeA, []string{"10.244.1.3"}, condReady}),
			},
			want: []string{"10.99.0.3:80/tcp=10.244.1.3:8080"},
		},
		{
			name:     "every listed endpoint, whatever its conditions: a pod is translated before it is ready",
			services: []*corev1.Service{service("web")},
			slices: []*discoveryv1.EndpointSlice{slice("web", "web-1", httpPort,
				ep{nodeA, []string{"10.244.1.1"}, condReady},
				ep{nodeA, []string{"10.244.1.2"}, condNotReady},
				ep{nodeA, []string{"10.244.1.3"}, condDraining},
				ep{nodeA, []string{"10.244.1.4"}, condTerminated},
				ep{nodeA, []string{"10.244.1.5"}, condUnset},
			)},
			want: []string{"10.99.0.1:80/tcp=10.244.1.1:8080", "10.99.0.1:80/tcp=10.244.1.2:8080", "10.99.0.1:80/tcp=10.244.1.3:8080",
				"10.99.0.1:80/tcp=10.244.1.4:8080", "10.99.0.1:80/tcp=10.244.1.5:8080"},
		},
		{
			name:     "an address in two slices counts once: best state, then lowest port",
			services: []*corev1.Service{service("web")},
			slices: []*discoveryv1.EndpointSlice{
				slice("web", "web-1", slicePorts(sport("http", 8081, corev1.ProtocolTCP)), ep{nodeA, []string{"10.244.1.2"}, condDraining}, ep{nodeA, []string{"10.244.1.3"}, condReady}),
				slice("web", "web-2", slicePorts(sport("http", 8082, corev1.ProtocolTCP)), ep{nodeA, []string{"10.244.1.2"}, condReady}, ep{nodeA, []string{"10.244.1.3"}, condReady}),
			},
			want: []string{"10.99.0.1:80/tcp=10.244.1.2:8082", "10.99.0.1:80/tcp=10.244.1.3:8081"},
		},
		{
			name:     "IPv6 slices of an IPv4 Service and bad addresses ignored",
			services: []*corev1.Service{service("web")},
			slices: []*discoveryv1.EndpointSlice{
				func() *discoveryv1.EndpointSlice {
					sl := slice("web", "web-v6", httpPort, ep{nodeA, []string{"fd00::2"}, condReady})
					sl.AddressType = discoveryv1.AddressTypeIPv6
					return sl
				}(),
				slice("web", "web-1", httpPort, ep{nodeA, []string{"garbage", "0.0.0.0", "10.244.1.2"}, condReady}),
			},
			want: []string{"10.99.0.1:80/tcp=10.244.1.2:8080"},
		},
		{
			name: "the older Service keeps a VIP:port both claim",
			services: []*corev1.Service{
				service("young", createdAt(2000), withPorts(corev1.ServicePort{Name: "http", Port: 80}, corev1.ServicePort{Name: "alt", Port: 81})),
				service("old", createdAt(1000)),
			},
			slices: []*discoveryv1.EndpointSlice{
				slice("young", "y", slicePorts(sport("http", 9090, corev1.ProtocolTCP), sport("alt", 9091, corev1.ProtocolTCP)), ep{nodeA, []string{"10.244.1.2"}, condReady}),
				slice("old", "o", httpPort, ep{nodeA, []string{"10.244.1.2"}, condReady}),
			},
			want:     []string{"10.99.0.1:80/tcp=10.244.1.2:8080", "10.99.0.1:81/tcp=10.244.1.2:9091"},
			problems: []string{"default/young: 10.99.0.1:80/tcp is already served by the older Service default/old"},
		},
		{
			name: "Services sharing an address (xlb.io/sharing-key): each its ports, to the same pod",
			services: []*corev1.Service{
				service("dns-udp", withPorts(corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP})),
				service("dns-tcp", withPorts(corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolTCP})),
			},
			slices: []*discoveryv1.EndpointSlice{
				slice("dns-udp", "u", slicePorts(sport("dns", 5353, corev1.ProtocolUDP)), ep{nodeA, []string{"10.244.1.2"}, condReady}),
				slice("dns-tcp", "t", slicePorts(sport("dns", 5353, corev1.ProtocolTCP)), ep{nodeA, []string{"10.244.1.2"}, condReady}),
			},
			want: []string{"10.99.0.1:53/tcp=10.244.1.2:5353", "10.99.0.1:53/udp=10.244.1.2:5353"},
		},
		{
			// The API server refuses such a Service; a list with two
			// target ports would make every SetNAT fail.
			name: "a port listed twice keeps its first target port",
			services: []*corev1.Service{service("web", withPorts(
				corev1.ServicePort{Name: "http", Port: 80}, corev1.ServicePort{Name: "alt", Port: 80}))},
			slices: []*discoveryv1.EndpointSlice{slice("web", "web-1",
				slicePorts(sport("alt", 9090, corev1.ProtocolTCP), sport("http", 8080, corev1.ProtocolTCP)), ep{nodeA, []string{"10.244.1.2"}, condReady})},
			want: []string{"10.99.0.1:80/tcp=10.244.1.2:8080"},
		},
		{
			name:     "a hostNetwork endpoint is not translated",
			local:    []string{"10.0.2.2"},
			services: []*corev1.Service{service("web")},
			slices: []*discoveryv1.EndpointSlice{slice("web", "web-1", httpPort,
				ep{nodeA, []string{"10.0.2.2"}, condReady}, ep{nodeA, []string{"10.244.1.2"}, condReady})},
			want:     []string{"10.99.0.1:80/tcp=10.244.1.2:8080"},
			problems: []string{"endpoint 10.0.2.2 is an address of this node"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := input{node: nodeA, serveClassless: tc.classless, services: tc.services, slices: slicesOf(tc.slices...)}
			for _, a := range tc.local {
				in.local = append(in.local, netip.MustParseAddr(a))
			}
			got, probs := translate(in)
			var want []backendhost.NATEntry
			for _, s := range tc.want {
				want = append(want, entry(t, s))
			}
			if !slices.Equal(got, want) {
				t.Errorf("entries\n got %v\nwant %v", got, want)
			}
			if len(probs) != len(tc.problems) {
				t.Fatalf("problems %q, want %d like %q", probs, len(tc.problems), tc.problems)
			}
			for i, p := range tc.problems {
				if !strings.Contains(probs[i].msg, p) || probs[i].fix == "" {
					t.Errorf("problem %q does not say %q, or has no fix (%q)", probs[i].msg, p, probs[i].fix)
				}
			}
			assertValid(t, got)
		})
	}
}

// assertValid checks what backendhost.SetNAT rejects a list for: one
// (VIP, port, protocol, pod) with two target ports.
func assertValid(t *testing.T, entries []backendhost.NATEntry) {
	t.Helper()
	seen := map[backendhost.NATEntry]uint16{}
	for _, e := range entries {
		k := e
		k.TargetPort = 0
		if tp, ok := seen[k]; ok && tp != e.TargetPort {
			t.Errorf("%v and target port %d: two target ports for one service and pod", e, tp)
		}
		seen[k] = e.TargetPort
	}
	if !slices.IsSortedFunc(entries, compareEntries) {
		t.Errorf("entries not sorted: %v", entries)
	}
}

// TestTranslateOrderIndependent: the informers' caches list objects in
// no particular order; the result must not depend on it.
func TestTranslateOrderIndependent(t *testing.T) {
	svcs := []*corev1.Service{
		service("a", createdAt(1000)),
		service("b", createdAt(1000), withPorts(corev1.ServicePort{Name: "http", Port: 80}, corev1.ServicePort{Name: "x", Port: 82})),
		service("c", createdAt(900), withIngress("10.99.0.2")),
	}
	sls := []*discoveryv1.EndpointSlice{
		slice("a", "a1", slicePorts(sport("http", 8080, corev1.ProtocolTCP)), ep{nodeA, []string{"10.244.1.2", "10.244.1.3"}, condReady}),
		slice("b", "b1", slicePorts(sport("http", 8081, corev1.ProtocolTCP), sport("x", 8082, corev1.ProtocolTCP)), ep{nodeA, []string{"10.244.1.2"}, condReady}),
		slice("c", "c1", slicePorts(sport("http", 8083, corev1.ProtocolTCP)), ep{nodeA, []string{"10.244.1.4"}, condDraining}),
	}
	first, firstProbs := translate(input{node: nodeA, services: svcs, slices: slicesOf(sls...)})
	if len(first) == 0 || len(firstProbs) != 1 {
		t.Fatalf("fixture: got %v, problems %q; want entries and one conflict", first, firstProbs)
	}
	perms := [][]int{{0, 1, 2}, {2, 1, 0}, {1, 0, 2}, {1, 2, 0}}
	for _, p := range perms {
		shuffled := []*corev1.Service{svcs[p[0]], svcs[p[1]], svcs[p[2]]}
		got, probs := translate(input{node: nodeA, services: shuffled, slices: slicesOf(sls...)})
		if !slices.Equal(got, first) || !slices.Equal(probs, firstProbs) {
			t.Errorf("order %v: got %v %q, want %v %q", p, got, probs, first, firstProbs)
		}
	}
}
