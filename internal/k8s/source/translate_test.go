package source

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/k8s/api"
)

const baseYAML = "node: {interface: eth0, address: 10.0.0.10}\nkubernetes: {nodeName: node-1, secretNamespace: xlb-system}\n"

func parseBase(t testing.TB, extra string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("base.yaml", []byte(baseYAML+extra))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

// svcOpt changes a test Service.
type svcOpt func(*corev1.Service)

func withClass(c string) svcOpt {
	return func(s *corev1.Service) { s.Spec.LoadBalancerClass = &c }
}
func noClass(s *corev1.Service) { s.Spec.LoadBalancerClass = nil }
func withType(t corev1.ServiceType) svcOpt {
	return func(s *corev1.Service) { s.Spec.Type = t }
}
func withIngress(ips ...string) svcOpt {
	return func(s *corev1.Service) {
		s.Status.LoadBalancer.Ingress = nil
		for _, ip := range ips {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
		}
	}
}
func withPorts(ports ...corev1.ServicePort) svcOpt {
	return func(s *corev1.Service) { s.Spec.Ports = ports }
}
func withAnnotation(k, v string) svcOpt {
	return func(s *corev1.Service) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[k] = v
	}
}
func createdAt(t time.Time) svcOpt {
	return func(s *corev1.Service) { s.CreationTimestamp = metav1.NewTime(t) }
}

func port(name string, p int32, proto corev1.Protocol) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: p, Protocol: proto}
}

// service is a Service of xlb's class with an address and one TCP port 80
// unless opts say otherwise.
func service(ns, name string, opts ...svcOpt) *corev1.Service {
	class := api.LoadBalancerClass
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(t0)},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class,
			Ports: []corev1.ServicePort{port("", 80, corev1.ProtocolTCP)}},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "10.99.0.1"}}}},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func ptr[T any](v T) *T { return &v }

func slicePortOf(name string, p int32, proto corev1.Protocol) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: ptr(name), Port: ptr(p), Protocol: ptr(proto)}
}

// endpointSlice is an IPv4 slice of Service ns/svc.
func endpointSlice(ns, svc, name string, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       ports,
		Endpoints:   eps,
	}
}

// Endpoint conditions.
var (
	condReady    = discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)}
	condNotReady = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(false)}
	condDraining = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}
	condGone     = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(true)}
	condUnset    = discoveryv1.EndpointConditions{}
)

func endpoint(c discoveryv1.EndpointConditions, addrs ...string) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: addrs, Conditions: c}
}

func onNode(node string, ep discoveryv1.Endpoint) discoveryv1.Endpoint {
	ep.NodeName = &node
	return ep
}

// bgpPeer is a BGPPeer object as the dynamic client returns it.
func bgpPeer(name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": api.Group + "/" + api.Version, "kind": "BGPPeer",
		"metadata": map[string]any{"name": name},
		"spec":     spec,
	}}
}

func node(name string, lbls map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.10"}}}}
}

func secret(ns, name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

// fixture is a cluster's state for translate.
type fixture struct {
	services []*corev1.Service
	slices   []*discoveryv1.EndpointSlice
	node     *corev1.Node
	peers    []*unstructured.Unstructured
	lists    []*unstructured.Unstructured // DenyLists
	adverts  []*unstructured.Unstructured // BGPAdvertisements
	pools    []*unstructured.Unstructured // AddressPools
	secrets  []*corev1.Secret
	l2Pools  map[string]bool // AddressPools with announce: l2
	// unknownNS are namespaces whose Secrets have not been read yet.
	unknownNS []string
}

func (f fixture) cluster() cluster {
	return cluster{
		services: f.services,
		slices: func(ns, name string) []*discoveryv1.EndpointSlice {
			var out []*discoveryv1.EndpointSlice
			for _, s := range f.slices {
				if s.Namespace == ns && s.Labels[discoveryv1.LabelServiceName] == name {
					out = append(out, s)
				}
			}
			return out
		},
		node:      f.node,
		peers:     f.peers,
		denyLists: f.lists,
		adverts:   f.adverts,
		pools:     f.pools,
		l2Pools:   f.l2Pools,
		secret: func(ns, name string) (*corev1.Secret, bool) {
			if slices.Contains(f.unknownNS, ns) {
				return nil, false
			}
			for _, s := range f.secrets {
				if s.Namespace == ns && s.Name == name {
					return s, true
				}
			}
			return nil, true
		},
	}
}

// run translates and validates f over base.
func run(t *testing.T, base *config.Config, f fixture) (*config.Config, []string, error) {
	t.Helper()
	return runOn(t, base, f, nil)
}

// runOn translates and validates f over base for host h.
func runOn(t *testing.T, base *config.Config, f fixture, h *config.Host) (*config.Config, []string, error) {
	t.Helper()
	st := settings{base: base, serveClassless: base.Kubernetes.ServeClassless, secretNamespace: base.Kubernetes.SecretNamespace}
	d, probs := translate(st, f.cluster())
	cfg, more, err := validate(&config.Validator{}, d, base, h)
	var out []string
	for _, p := range append(probs, more...) {
		out = append(out, p.String())
	}
	return cfg, out, err
}

// summary lists services as "name vip backends".
func summary(cfg *config.Config) []string {
	var out []string
	for _, s := range cfg.Services {
		var bs []string
		for _, b := range s.Backends {
			bs = append(bs, fmt.Sprintf("%s:%d/%d", b.Address, b.Port, b.Weight))
		}
		fwd := string(s.Forwarding)
		if s.Flows != "" {
			fwd += "," + string(s.Flows)
		}
		out = append(out, fmt.Sprintf("%s %s %s %s", s.Name, s.VIP, fwd, strings.Join(bs, ",")))
	}
	return out
}

func TestServices(t *testing.T) {
	web := []discoveryv1.EndpointPort{slicePortOf("", 8080, corev1.ProtocolTCP)}
	readyWeb := endpointSlice("default", "web", "web-1", web, endpoint(condReady, "10.244.1.2"))
	tests := []struct {
		name      string
		classless bool
		f         fixture
		want      []string
		problems  []string
	}{
		{
			name: "ready, draining and other endpoints; target port",
			f: fixture{services: []*corev1.Service{service("default", "web")}, slices: []*discoveryv1.EndpointSlice{
				endpointSlice("default", "web", "web-1", web,
					endpoint(condReady, "10.244.1.2"), endpoint(condDraining, "10.244.1.3"), endpoint(condNotReady, "10.244.1.4"),
					endpoint(condGone, "10.244.1.5"), endpoint(condUnset, "10.244.1.6")),
			}},
			want: []string{"default/web:80/tcp 10.99.0.1 dsr-ipip 10.244.1.2:8080/1,10.244.1.3:8080/0,10.244.1.6:8080/1"},
		},
		{
			name: "only draining endpoints take new flows rather than none",
			f: fixture{services: []*corev1.Service{service("default", "web")}, slices: []*discoveryv1.EndpointSlice{
				endpointSlice("default", "web", "web-1", web, endpoint(condDraining, "10.244.1.3", "10.244.1.7"), endpoint(condNotReady, "10.244.1.4")),
			}},
			want: []string{"default/web:80/tcp 10.99.0.1 dsr-ipip 10.244.1.3:8080/1,10.244.1.7:8080/1"},
		},
		{
			name: "no usable endpoint: the service is left out",
			f: fixture{services: []*corev1.Service{service("default", "web")}, slices: []*discoveryv1.EndpointSlice{
				endpointSlice("default", "web", "web-1", web, endpoint(condNotReady, "10.244.1.4"), endpoint(condGone, "10.244.1.5")),
			}},
		},
		{
			name: "two slices for one service; an address in both counts once, in its best state",
			f: fixture{services: []*corev1.Service{service("default", "web")}, slices: []*discoveryv1.EndpointSlice{
				endpointSlice("default", "web", "web-1", web, endpoint(condReady, "10.244.1.2"), endpoint(condDraining, "10.244.1.9")),
				endpointSlice("default", "web", "web-2", web, endpoint(condReady, "10.244.2.2", "10.244.1.9")),
				endpointSlice("default", "other", "other-1", web, endpoint(condReady, "10.244.3.3")),
			}},
			want: []string{"default/web:80/tcp 10.99.0.1 dsr-ipip 10.244.1.2:8080/1,10.244.1.9:8080/1,10.244.2.2:8080/1"},
		},
		{
			name: "every port, matched by name and protocol; SCTP is not served",
			f: fixture{
				services: []*corev1.Service{service("apps", "dns", withIngress("10.99.0.2"), withPorts(
					port("dns-udp", 53, corev1.ProtocolUDP), port("dns-tcp", 53, corev1.ProtocolTCP), port("metrics", 9153, corev1.ProtocolTCP),
					port("sctp", 36412, corev1.ProtocolSCTP)))},
				slices: []*discoveryv1.EndpointSlice{endpointSlice("apps", "dns", "dns-1", []discoveryv1.EndpointPort{
					slicePortOf("dns-udp", 5353, corev1.ProtocolUDP), slicePortOf("dns-tcp", 5354, corev1.ProtocolTCP),
					slicePortOf("metrics", 9153, corev1.ProtocolTCP), slicePortOf("sctp", 36412, corev1.ProtocolSCTP)},
					endpoint(condReady, "10.244.1.2"))},
			},
			want: []string{
				"apps/dns:53/udp 10.99.0.2 dsr-ipip 10.244.1.2:5353/1",
				"apps/dns:53/tcp 10.99.0.2 dsr-ipip 10.244.1.2:5354/1",
				"apps/dns:9153/tcp 10.99.0.2 dsr-ipip 10.244.1.2:9153/1",
			},
			problems: []string{"Service apps/dns: port 36412/SCTP: xlb balances TCP and UDP only; this port is not served"},
		},
		{
			name: "a port the slices do not list has no backends",
			f: fixture{services: []*corev1.Service{service("default", "web", withPorts(port("http", 80, corev1.ProtocolTCP), port("https", 443, corev1.ProtocolTCP)))},
				slices: []*discoveryv1.EndpointSlice{endpointSlice("default", "web", "web-1",
					[]discoveryv1.EndpointPort{slicePortOf("http", 8080, corev1.ProtocolTCP)}, endpoint(condReady, "10.244.1.2"))}},
			want: []string{"default/web:80/tcp 10.99.0.1 dsr-ipip 10.244.1.2:8080/1"},
		},
		{
			name: "a dual-stack Service: each address gets the endpoints of its family",
			f: fixture{services: []*corev1.Service{service("default", "web", withIngress("fd00::1", "10.99.0.7"))}, slices: []*discoveryv1.EndpointSlice{
				readyWeb,
				func() *discoveryv1.EndpointSlice {
					s := endpointSlice("default", "web", "web-v6", web, endpoint(condReady, "fd00::2"))
					s.AddressType = discoveryv1.AddressTypeIPv6
					return s
				}(),
			}},
			want: []string{"default/web:80/tcp 10.99.0.7 dsr-ipip 10.244.1.2:8080/1", "default/web:80/tcp/ipv6 fd00::1 dsr-ipip fd00::2:8080/1"},
		},
		{
			name: "an IPv6-only Service gets the IPv6 endpoints only",
			f: fixture{services: []*corev1.Service{service("default", "web", withIngress("2001:db8:99::1"))}, slices: []*discoveryv1.EndpointSlice{
				readyWeb,
				func() *discoveryv1.EndpointSlice {
					s := endpointSlice("default", "web", "web-v6", web, endpoint(condReady, "fd00::2"), endpoint(condReady, "10.244.9.9"), endpoint(condReady, "fe80::1%eth0"))
					s.AddressType = discoveryv1.AddressTypeIPv6
					return s
				}(),
			}},
			want: []string{"default/web:80/tcp/ipv6 2001:db8:99::1 dsr-ipip fd00::2:8080/1"},
		},
		{
			name: "a Service without an address yet is ignored",
			f: fixture{services: []*corev1.Service{service("default", "web", withIngress())},
				slices: []*discoveryv1.EndpointSlice{readyWeb}},
		},
		{
			name: "classes: another class, no class, not a load balancer",
			f: fixture{services: []*corev1.Service{
				service("default", "web", withClass("metallb.io/metallb")),
				service("default", "web2", noClass),
				service("default", "web3", withType(corev1.ServiceTypeClusterIP)),
			}, slices: []*discoveryv1.EndpointSlice{
				readyWeb,
				endpointSlice("default", "web2", "web2-1", web, endpoint(condReady, "10.244.1.2")),
				endpointSlice("default", "web3", "web3-1", web, endpoint(condReady, "10.244.1.2")),
			}},
		},
		{
			name:      "classless served when asked",
			classless: true,
			f: fixture{services: []*corev1.Service{
				service("default", "web", withClass("metallb.io/metallb")),
				service("default", "web2", noClass),
			}, slices: []*discoveryv1.EndpointSlice{
				readyWeb,
				endpointSlice("default", "web2", "web2-1", web, endpoint(condReady, "10.244.1.2")),
			}},
			want: []string{"default/web2:80/tcp 10.99.0.1 dsr-ipip 10.244.1.2:8080/1"},
		},
		{
			name: "forwarding annotation",
			f: fixture{services: []*corev1.Service{
				service("default", "web", withAnnotation(api.AnnotationForwarding, "dsr-gue")),
				service("default", "bad", withIngress("10.99.0.3"), withAnnotation(api.AnnotationForwarding, "natt")),
			}, slices: []*discoveryv1.EndpointSlice{readyWeb, endpointSlice("default", "bad", "bad-1", web, endpoint(condReady, "10.244.1.2"))}},
			want:     []string{"default/bad:80/tcp 10.99.0.3 dsr-ipip 10.244.1.2:8080/1", "default/web:80/tcp 10.99.0.1 dsr-gue 10.244.1.2:8080/1"},
			problems: []string{`Service default/bad: annotation xlb.io/forwarding: "natt" is not a forwarding mode (dsr-ipip, dsr-gue, nat or dnat); the Service is forwarded dsr-ipip, the default, until it is corrected`},
		},
		{
			// The load-balancer node rewrites to the pods itself: no
			// translation on the pods' nodes.
			name: "nat and dnat annotations: the pods' addresses and target ports",
			f: fixture{services: []*corev1.Service{
				service("default", "web", withAnnotation(api.AnnotationForwarding, "nat")),
				service("default", "db", withIngress("10.99.0.3"), withAnnotation(api.AnnotationForwarding, " dnat "), withAnnotation(api.AnnotationFlows, "stateless")),
				service("default", "sticky", withIngress("10.99.0.4"), withAnnotation(api.AnnotationForwarding, "nat"), withAnnotation(api.AnnotationFlows, "stateful")),
				service("default", "chain", withIngress("10.99.0.5"), withAnnotation(api.AnnotationForwarding, "dnat"), withAnnotation(api.AnnotationFlows, "daisy-chain")),
			}, slices: []*discoveryv1.EndpointSlice{
				endpointSlice("default", "web", "web-1", web, endpoint(condReady, "10.244.1.2"), endpoint(condDraining, "10.244.1.3")),
				endpointSlice("default", "db", "db-1", []discoveryv1.EndpointPort{slicePortOf("", 5432, corev1.ProtocolTCP)}, endpoint(condReady, "10.244.2.2")),
				endpointSlice("default", "sticky", "sticky-1", web, endpoint(condReady, "10.244.1.2")),
				endpointSlice("default", "chain", "chain-1", web, endpoint(condReady, "10.244.1.2")),
			}},
			want: []string{"default/db:80/tcp 10.99.0.3 dnat 10.244.2.2:5432/1", "default/web:80/tcp 10.99.0.1 nat 10.244.1.2:8080/1,10.244.1.3:8080/0"},
			problems: []string{
				`Service default/sticky: annotation xlb.io/flows: forwarding nat holds a session per connection on the load-balancer node, which is stateful by nature, and takes no flows mode, but xlb.io/flows says stateful; the Service is not served until it is corrected`,
				`Service default/chain: annotation xlb.io/flows: daisy-chain needs forwarding dsr-gue (the hint travels in the GUE header), but xlb.io/forwarding says dnat; the Service is not served until it is corrected`,
			},
		},
		{
			name: "flows annotation",
			f: fixture{services: []*corev1.Service{
				service("default", "web", withAnnotation(api.AnnotationFlows, "stateful")),
				service("default", "plain", withIngress("10.99.0.4"), withAnnotation(api.AnnotationFlows, "stateless")),
				service("default", "chain", withIngress("10.99.0.3"), withAnnotation(api.AnnotationFlows, "daisy-chain")),
				service("default", "chaingue", withIngress("10.99.0.6"), withAnnotation(api.AnnotationFlows, "daisy-chain"), withAnnotation(api.AnnotationForwarding, "dsr-gue")),
				service("default", "chainipip", withIngress("10.99.0.7"), withAnnotation(api.AnnotationFlows, "daisy-chain"), withAnnotation(api.AnnotationForwarding, "dsr-ipip")),
				service("default", "bad", withIngress("10.99.0.5"), withAnnotation(api.AnnotationFlows, "sticky")),
			}, slices: []*discoveryv1.EndpointSlice{readyWeb,
				endpointSlice("default", "plain", "plain-1", web, endpoint(condReady, "10.244.1.2")),
				endpointSlice("default", "chain", "chain-1", web, endpoint(condReady, "10.244.1.2")),
				endpointSlice("default", "chaingue", "chaingue-1", web, endpoint(condReady, "10.244.1.2")),
				endpointSlice("default", "chainipip", "chainipip-1", web, endpoint(condReady, "10.244.1.2")),
				endpointSlice("default", "bad", "bad-1", web, endpoint(condReady, "10.244.1.2"))}},
			want: []string{
				"default/chain:80/tcp 10.99.0.3 dsr-gue,daisy-chain 10.244.1.2:8080/1",
				"default/chaingue:80/tcp 10.99.0.6 dsr-gue,daisy-chain 10.244.1.2:8080/1",
				"default/plain:80/tcp 10.99.0.4 dsr-ipip 10.244.1.2:8080/1",
				"default/web:80/tcp 10.99.0.1 dsr-ipip,stateful 10.244.1.2:8080/1",
			},
			problems: []string{
				`Service default/bad: annotation xlb.io/flows: "sticky" is not a flows mode (stateless, daisy-chain or stateful); the Service is not served until it is corrected`,
				`Service default/chainipip: annotation xlb.io/flows: daisy-chain needs forwarding dsr-gue (the hint travels in the GUE header), but xlb.io/forwarding says dsr-ipip; the Service is not served until it is corrected`,
			},
		},
		{
			name: "two Services claim one VIP and port: the older keeps it",
			f: fixture{services: []*corev1.Service{
				service("default", "new", createdAt(t0.Add(time.Minute))),
				service("default", "web"),
			}, slices: []*discoveryv1.EndpointSlice{readyWeb, endpointSlice("default", "new", "new-1", web, endpoint(condReady, "10.244.9.9"))}},
			want:     []string{"default/web:80/tcp 10.99.0.1 dsr-ipip 10.244.1.2:8080/1"},
			problems: []string{`Service default/new: port 10.99.0.1:80/tcp (default/new:80/tcp) is not served: 10.99.0.1:80/tcp is already served by service "default/web:80/tcp"`},
		},
		{
			name: "Services sharing an address: services of one VIP, each with its own ports and endpoints",
			f: fixture{services: []*corev1.Service{
				service("apps", "dns-udp", withAnnotation(api.AnnotationSharingKey, "dns"), withPorts(port("dns", 53, corev1.ProtocolUDP))),
				service("apps", "dns-tcp", withAnnotation(api.AnnotationSharingKey, "dns"), withPorts(port("dns", 53, corev1.ProtocolTCP))),
				service("apps", "admin", withAnnotation(api.AnnotationSharingKey, "dns"), withPorts(port("", 8080, corev1.ProtocolTCP)),
					withAnnotation(api.AnnotationForwarding, "dsr-gue")),
			}, slices: []*discoveryv1.EndpointSlice{
				endpointSlice("apps", "dns-udp", "dns-udp-1", []discoveryv1.EndpointPort{slicePortOf("dns", 5353, corev1.ProtocolUDP)}, endpoint(condReady, "10.244.1.2", "10.244.2.2")),
				endpointSlice("apps", "dns-tcp", "dns-tcp-1", []discoveryv1.EndpointPort{slicePortOf("dns", 5353, corev1.ProtocolTCP)}, endpoint(condReady, "10.244.1.2")),
				endpointSlice("apps", "admin", "admin-1", []discoveryv1.EndpointPort{slicePortOf("", 9000, corev1.ProtocolTCP)}, endpoint(condReady, "10.244.3.3")),
			}},
			want: []string{
				"apps/admin:8080/tcp 10.99.0.1 dsr-gue 10.244.3.3:9000/1",
				"apps/dns-tcp:53/tcp 10.99.0.1 dsr-ipip 10.244.1.2:5353/1",
				"apps/dns-udp:53/udp 10.99.0.1 dsr-ipip 10.244.1.2:5353/1,10.244.2.2:5353/1",
			},
		},
		{
			// The LB nodes send to endpoints on every node whatever
			// the policy: each pod's own node delivers to it with the
			// client's address (docs/kubernetes.md), so Local has no
			// endpoints to leave out. This node (node-1) has none.
			name: "externalTrafficPolicy Local translates as Cluster: the endpoints of every node",
			f: fixture{services: []*corev1.Service{
				service("default", "web", func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal }),
				service("default", "web2", withIngress("10.99.0.2"), func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster }),
			}, slices: []*discoveryv1.EndpointSlice{
				endpointSlice("default", "web", "web-1", web, onNode("node-a", endpoint(condReady, "10.244.1.2")), onNode("node-b", endpoint(condReady, "10.244.2.2"))),
				endpointSlice("default", "web2", "web2-1", web, onNode("node-a", endpoint(condReady, "10.244.1.2")), onNode("node-b", endpoint(condReady, "10.244.2.2"))),
			}},
			want: []string{
				"default/web:80/tcp 10.99.0.1 dsr-ipip 10.244.1.2:8080/1,10.244.2.2:8080/1",
				"default/web2:80/tcp 10.99.0.2 dsr-ipip 10.244.1.2:8080/1,10.244.2.2:8080/1",
			},
		},
		{
			name: "an address the file's rules reject leaves that Service out, not the others",
			f: fixture{services: []*corev1.Service{
				service("default", "web"),
				service("default", "lo", withIngress("127.0.0.1")),
			}, slices: []*discoveryv1.EndpointSlice{readyWeb, endpointSlice("default", "lo", "lo-1", web, endpoint(condReady, "10.244.1.2"))}},
			want:     []string{"default/web:80/tcp 10.99.0.1 dsr-ipip 10.244.1.2:8080/1"},
			problems: []string{"Service default/lo: port 127.0.0.1:80/tcp (default/lo:80/tcp) is not served: vip: 127.0.0.1 is a loopback address"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := parseBase(t, "")
			base.Kubernetes.ServeClassless = tc.classless
			cfg, probs, err := run(t, base, tc.f)
			if err != nil {
				t.Fatal(err)
			}
			if got := summary(cfg); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("services:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			checkProblems(t, probs, tc.problems)
			for _, s := range cfg.Services {
				if s.TranslatePorts == s.Forwarding.Translates() || s.Backends[0].HealthCheck.Type != config.CheckNone {
					t.Errorf("service %s: want translatePorts unless nat or dnat, and no health check, got %+v", s.Name, s)
				}
			}
		})
	}
}

// checkProblems checks that each of want starts one of got, and that
// there are as many.
func checkProblems(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("problems:\n%s\nwant %d:\n%s", strings.Join(got, "\n"), len(want), strings.Join(want, "\n"))
		return
	}
	for _, w := range want {
		if !slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, w) }) {
			t.Errorf("no problem starts with %q; got:\n%s", w, strings.Join(got, "\n"))
		}
	}
}

// The file's services stay; a cluster Service that collides with one
// of them yields.
// TestServicesAtNodeAddresses: a Service whose address is one of the
// node's, or with an endpoint at the node address (a hostNetwork pod on
// this node), is left out with a problem naming it; the other Services
// are served.
func TestServicesAtNodeAddresses(t *testing.T) {
	base := parseBase(t, "")
	host := &config.Host{Interfaces: map[string][]netip.Addr{
		"eth0": {netip.MustParseAddr("10.0.0.10")}, "dummy0": {netip.MustParseAddr("10.99.0.5")},
	}}
	web := []discoveryv1.EndpointPort{slicePortOf("", 8080, corev1.ProtocolTCP)}
	f := fixture{
		services: []*corev1.Service{
			service("default", "web"),
			service("default", "own", withIngress("10.0.0.10")),
			service("default", "dummy", withIngress("10.99.0.5")),
			service("default", "hostnet", withIngress("10.99.0.6")),
		},
		slices: []*discoveryv1.EndpointSlice{
			endpointSlice("default", "web", "web-1", web, endpoint(condReady, "10.244.1.2")),
			endpointSlice("default", "own", "own-1", web, endpoint(condReady, "10.244.1.3")),
			endpointSlice("default", "dummy", "dummy-1", web, endpoint(condReady, "10.244.1.4")),
			endpointSlice("default", "hostnet", "hostnet-1", web, endpoint(condReady, "10.244.1.5", "10.0.0.10")),
		},
	}
	cfg, probs, err := runOn(t, base, f, host)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := summary(cfg), []string{"default/web:80/tcp 10.99.0.1 dsr-ipip 10.244.1.2:8080/1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("services %q, want %q", got, want)
	}
	slices.Sort(probs)
	want := []string{
		"Service default/dummy: port 10.99.0.5:80/tcp (default/dummy:80/tcp) is not served: vip: 10.99.0.5 is configured on this host (interface dummy0); ",
		"Service default/hostnet: port 10.99.0.6:80/tcp (default/hostnet:80/tcp) is not served: backends[0].address: 10.0.0.10 is this node's own address (node.address); ",
		"Service default/own: port 10.0.0.10:80/tcp (default/own:80/tcp) is not served: vip: 10.0.0.10 is this node's own address (node.address); ",
	}
	if len(probs) != len(want) {
		t.Fatalf("problems:\n%s\nwant %d", strings.Join(probs, "\n"), len(want))
	}
	for i := range want {
		if !strings.HasPrefix(probs[i], want[i]) {
			t.Errorf("problem %q\nwant it to start with %q", probs[i], want[i])
		}
	}
	// Without the host, only what the file's checks know is refused: the
	// node address (node.address), not the dummy interface's.
	cfg, _, err = run(t, base, f)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(cfg.Services); got != 2 {
		t.Errorf("without a host: %q, want web and dummy", summary(cfg))
	}
}

func TestMergeWithFile(t *testing.T) {
	base := parseBase(t, "services:\n  - {name: static, vip: 10.99.0.1, port: 80, backends: [{address: 10.0.3.2}]}\n"+
		"  - {name: default/named:80/tcp, vip: 10.99.0.5, port: 80, backends: [{address: 10.0.3.2}]}\n")
	web := []discoveryv1.EndpointPort{slicePortOf("", 8080, corev1.ProtocolTCP)}
	f := fixture{services: []*corev1.Service{
		service("default", "web"), // the file's VIP and port
		service("default", "web443", withPorts(port("", 443, corev1.ProtocolTCP))), // same VIP, other port: fine
		service("default", "named", withIngress("10.99.0.6")),                      // the file's name
	}, slices: []*discoveryv1.EndpointSlice{
		endpointSlice("default", "web", "web-1", web, endpoint(condReady, "10.244.1.2")),
		endpointSlice("default", "web443", "web443-1", web, endpoint(condReady, "10.244.1.2")),
		endpointSlice("default", "named", "named-1", web, endpoint(condReady, "10.244.1.2")),
	}}
	cfg, probs, err := run(t, base, f)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"static 10.99.0.1 dsr-ipip 10.0.3.2:80/1",
		"default/named:80/tcp 10.99.0.5 dsr-ipip 10.0.3.2:80/1",
		"default/web443:443/tcp 10.99.0.1 dsr-ipip 10.244.1.2:8080/1",
	}
	if got := summary(cfg); !reflect.DeepEqual(got, want) {
		t.Errorf("services:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	checkProblems(t, probs, []string{
		"Service default/web: port 10.99.0.1:80/tcp (default/web:80/tcp) is not served: 10.99.0.1:80/tcp is already served by service \"static\"",
		"Service default/named: port 10.99.0.6:80/tcp (default/named:80/tcp) is not served: name: \"default/named:80/tcp\" is already the name of services[1]",
	})
}

func TestPeers(t *testing.T) {
	spec := func(kv ...any) map[string]any {
		m := map[string]any{"myASN": int64(65001), "peerASN": int64(65000), "peerAddress": "10.0.0.1"}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	sel := func(lbls map[string]any) []any {
		return []any{map[string]any{"matchLabels": lbls}}
	}
	ip := netip.MustParseAddr
	const dm = config.DefaultMaxPrefixes
	rack1 := node("node-1", map[string]string{"rack": "r1", "role": "lb"})
	tests := []struct {
		name     string
		base     string
		f        fixture
		want     *config.BGP
		problems []string
	}{
		{
			name: "no BGPPeer: no bgp section",
			f:    fixture{node: rack1},
		},
		{
			name: "every field; the first peer's myASN is the node's AS",
			f: fixture{node: rack1, peers: []*unstructured.Unstructured{
				bgpPeer("a-router", spec("peerPort", int64(1179), "maxPrefixes", int64(500), "holdTime", "30s", "keepaliveTime", "5s", "passive", true,
					"bfd", map[string]any{"minRx": "100ms", "multiplier": int64(5)}, "passwordSecret", map[string]any{"name": "bgp"})),
				bgpPeer("b-rr", spec("peerAddress", "10.0.5.1", "peerASN", int64(65001), "nodeSelectors", sel(map[string]any{"rack": "r1"}), "gracefulRestart", map[string]any{})),
				bgpPeer("c-ebgp", spec("peerAddress", "10.0.6.1", "ebgpMultiHop", int64(3), "passwordSecret", map[string]any{"name": "other", "namespace": "net"},
					"gracefulRestart", map[string]any{"restartTime": "300s"})),
			}, secrets: []*corev1.Secret{secret("xlb-system", "bgp", map[string]string{"password": "s3cret"}), secret("net", "other", map[string]string{"password": "x y"})}},
			want: &config.BGP{ASN: 65001, RouterID: ip("10.0.0.10"), HoldTime: 90 * time.Second, Keepalive: 30 * time.Second, DrainTime: config.DefaultDrainTime, ListenPort: 179,
				Peers: []config.Peer{
					{Address: ip("10.0.0.1"), ASN: 65000, Port: 1179, MaxPrefixes: 500, Password: "s3cret", HoldTime: 30 * time.Second, Keepalive: 5 * time.Second, Passive: true,
						BFD: &config.BFD{MinRx: 100 * time.Millisecond, MinTx: config.DefaultBFDInterval, Multiplier: 5}},
					{Address: ip("10.0.5.1"), ASN: 65001, Port: 179, MaxPrefixes: dm, HoldTime: 90 * time.Second, Keepalive: 30 * time.Second,
						GracefulRestart: &config.GracefulRestart{RestartTime: config.DefaultRestartTime}},
					{Address: ip("10.0.6.1"), ASN: 65000, Port: 179, MaxPrefixes: dm, Password: "x y", HoldTime: 90 * time.Second, Keepalive: 30 * time.Second, Multihop: 3,
						GracefulRestart: &config.GracefulRestart{RestartTime: 300 * time.Second}},
				}},
		},
		{
			name: "node selectors: any one matching is enough; none matching leaves the peer out quietly",
			f: fixture{node: rack1, peers: []*unstructured.Unstructured{
				bgpPeer("r2", spec("nodeSelectors", sel(map[string]any{"rack": "r2"}))),
				bgpPeer("r1-or-r2", spec("peerAddress", "10.0.0.2", "nodeSelectors", append(sel(map[string]any{"rack": "r2"}), sel(map[string]any{"role": "lb"})...))),
				bgpPeer("expr", spec("peerAddress", "10.0.0.3", "nodeSelectors", []any{map[string]any{"matchExpressions": []any{
					map[string]any{"key": "rack", "operator": "In", "values": []any{"r1", "r3"}}}}})),
				bgpPeer("bad-selector", spec("peerAddress", "10.0.0.4", "nodeSelectors", []any{map[string]any{"matchExpressions": []any{
					map[string]any{"key": "rack", "operator": "Near"}}}})),
			}},
			want: &config.BGP{ASN: 65001, RouterID: ip("10.0.0.10"), HoldTime: 90 * time.Second, Keepalive: 30 * time.Second, DrainTime: config.DefaultDrainTime,
				Peers: []config.Peer{
					{Address: ip("10.0.0.3"), ASN: 65000, Port: 179, MaxPrefixes: dm, HoldTime: 90 * time.Second, Keepalive: 30 * time.Second},
					{Address: ip("10.0.0.2"), ASN: 65000, Port: 179, MaxPrefixes: dm, HoldTime: 90 * time.Second, Keepalive: 30 * time.Second},
				}},
			problems: []string{"BGPPeer bad-selector: spec.nodeSelectors[0]: "},
		},
		{
			name: "without this node's Node object, selectors cannot match",
			f: fixture{peers: []*unstructured.Unstructured{
				bgpPeer("all", spec()),
				bgpPeer("some", spec("peerAddress", "10.0.0.2", "nodeSelectors", sel(map[string]any{"rack": "r1"}))),
			}},
			want: &config.BGP{ASN: 65001, RouterID: ip("10.0.0.10"), HoldTime: 90 * time.Second, Keepalive: 30 * time.Second, DrainTime: config.DefaultDrainTime,
				Peers: []config.Peer{{Address: ip("10.0.0.1"), ASN: 65000, Port: 179, MaxPrefixes: dm, HoldTime: 90 * time.Second, Keepalive: 30 * time.Second}}},
			problems: []string{`BGPPeer some: has nodeSelectors, but this node's Node object "node-1" does not exist`},
		},
		{
			name: "Secrets: missing, without the key, not read yet",
			f: fixture{node: rack1, peers: []*unstructured.Unstructured{
				bgpPeer("a", spec("passwordSecret", map[string]any{"name": "gone"})),
				bgpPeer("b", spec("peerAddress", "10.0.0.2", "passwordSecret", map[string]any{"name": "nokey"})),
				bgpPeer("c", spec("peerAddress", "10.0.0.3", "passwordSecret", map[string]any{"name": "x", "namespace": "slow"})),
				bgpPeer("d", spec("peerAddress", "10.0.0.4")),
			}, secrets: []*corev1.Secret{secret("xlb-system", "nokey", map[string]string{"pass": "x"})}, unknownNS: []string{"slow"}},
			want: &config.BGP{ASN: 65001, RouterID: ip("10.0.0.10"), HoldTime: 90 * time.Second, Keepalive: 30 * time.Second, DrainTime: config.DefaultDrainTime,
				Peers: []config.Peer{{Address: ip("10.0.0.4"), ASN: 65000, Port: 179, MaxPrefixes: dm, HoldTime: 90 * time.Second, Keepalive: 30 * time.Second}}},
			problems: []string{
				"BGPPeer a: spec.passwordSecret: Secret xlb-system/gone does not exist",
				`BGPPeer b: spec.passwordSecret: Secret xlb-system/nokey has no key "password"`,
				"BGPPeer c: spec.passwordSecret: Secret slow/x not read yet; if this lasts, the agent may not read it: name it in the resourceNames of the agent's Role in namespace slow",
			},
		},
		{
			name: "the file's bgp section: its AS, timers and peers come first",
			base: "bgp: {asn: 65001, holdTime: 9s, keepalive: 2s, drainTime: 1s, peers: [{address: 10.0.0.1, asn: 65000}]}\n",
			f: fixture{node: rack1, peers: []*unstructured.Unstructured{
				bgpPeer("dup", spec()),
				bgpPeer("other-as", spec("peerAddress", "10.0.0.2", "myASN", int64(65002))),
				bgpPeer("timers", spec("peerAddress", "10.0.0.3")),
				bgpPeer("own-hold", spec("peerAddress", "10.0.0.4", "holdTime", "60s")),
			}},
			want: &config.BGP{ASN: 65001, RouterID: ip("10.0.0.10"), HoldTime: 9 * time.Second, Keepalive: 2 * time.Second, DrainTime: time.Second,
				Peers: []config.Peer{
					{Address: ip("10.0.0.1"), ASN: 65000, Port: 179, MaxPrefixes: dm, HoldTime: 9 * time.Second, Keepalive: 2 * time.Second},
					{Address: ip("10.0.0.4"), ASN: 65000, Port: 179, MaxPrefixes: dm, HoldTime: 60 * time.Second, Keepalive: 20 * time.Second},
					{Address: ip("10.0.0.3"), ASN: 65000, Port: 179, MaxPrefixes: dm, HoldTime: 9 * time.Second, Keepalive: 2 * time.Second},
				}},
			problems: []string{
				"BGPPeer dup: peer 10.0.0.1 is left out: spec.peerAddress: 10.0.0.1 is already listed as bgp.peers[0]",
				"BGPPeer other-as: spec.myASN 65002 differs from this node's AS 65001 (the file's bgp.asn)",
			},
		},
		{
			name: "the file's bgp section without peers stays without BGPPeers",
			base: "bgp: {asn: 65001, holdTime: 30s}\n",
			f:    fixture{node: rack1, peers: []*unstructured.Unstructured{bgpPeer("elsewhere", spec("nodeSelectors", sel(map[string]any{"rack": "r9"})))}},
			want: &config.BGP{ASN: 65001, RouterID: ip("10.0.0.10"), HoldTime: 30 * time.Second, Keepalive: 10 * time.Second, DrainTime: config.DefaultDrainTime},
		},
		{
			name: "a myASN no node can have is left out, and the next sets the AS",
			f: fixture{node: rack1, peers: []*unstructured.Unstructured{
				bgpPeer("a-trans", spec("myASN", int64(23456))),
				bgpPeer("b", spec("myASN", int64(65002), "peerAddress", "10.0.0.2")),
			}},
			want: &config.BGP{ASN: 65002, RouterID: ip("10.0.0.10"), HoldTime: 90 * time.Second, Keepalive: 30 * time.Second, DrainTime: config.DefaultDrainTime,
				Peers: []config.Peer{{Address: ip("10.0.0.2"), ASN: 65000, Port: 179, MaxPrefixes: dm, HoldTime: 90 * time.Second, Keepalive: 30 * time.Second}}},
			problems: []string{"BGPPeer a-trans: spec.myASN 23456 is not an AS number a node can have"},
		},
		{
			name: "values the file's rules reject leave that peer out",
			f: fixture{node: rack1, peers: []*unstructured.Unstructured{
				bgpPeer("a-ok", spec()),
				bgpPeer("hold", spec("peerAddress", "10.0.0.2", "holdTime", "2s")),
				bgpPeer("self", spec("peerAddress", "10.0.0.10")),
				bgpPeer("v6", spec("peerAddress", "fd00::1")),
				bgpPeer("v6-link-local", spec("peerAddress", "fe80::1")),
				bgpPeer("garbage", spec("peerAddress", "router")),
				bgpPeer("pw", spec("peerAddress", "10.0.0.5", "passwordSecret", map[string]any{"name": "long"})),
				bgpPeer("prefixes", spec("peerAddress", "10.0.0.6", "maxPrefixes", int64(200000))),
			}, secrets: []*corev1.Secret{secret("xlb-system", "long", map[string]string{"password": strings.Repeat("x", 81)})}},
			want: &config.BGP{ASN: 65001, RouterID: ip("10.0.0.10"), HoldTime: 90 * time.Second, Keepalive: 30 * time.Second, DrainTime: config.DefaultDrainTime,
				Peers: []config.Peer{{Address: ip("10.0.0.1"), ASN: 65000, Port: 179, MaxPrefixes: dm, HoldTime: 90 * time.Second, Keepalive: 30 * time.Second},
					{Address: ip("fd00::1"), ASN: 65000, Port: 179, MaxPrefixes: dm, HoldTime: 90 * time.Second, Keepalive: 30 * time.Second}}},
			problems: []string{
				"BGPPeer hold: peer 10.0.0.2 is left out: spec.holdTime: 2s is out of range; the hold time is 0 (no keepalives) or 3s..65535s",
				"BGPPeer self: peer 10.0.0.10 is left out: spec.peerAddress: 10.0.0.10 is this node's own address",
				"BGPPeer v6-link-local: peer fe80::1 is left out: spec.peerAddress: fe80::1 is a link-local address (fe80::/10)",
				`BGPPeer garbage: spec.peerAddress "router" is not an IP address`,
				"BGPPeer pw: peer 10.0.0.5 is left out: spec.passwordSecret: is 81 bytes long; a TCP MD5 key has at most 80",
				"BGPPeer prefixes: peer 10.0.0.6 is left out: spec.maxPrefixes: 200000 is above the maximum 100000",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, probs, err := run(t, parseBase(t, tc.base), tc.f)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cfg.BGP, tc.want) {
				t.Errorf("bgp:\n%+v\nwant\n%+v", cfg.BGP, tc.want)
			}
			checkProblems(t, probs, tc.problems)
		})
	}
}

// The agent's limits drop the newest ports, not the whole configuration;
// so do more rejected Services than one round of checks lists.
func TestLimits(t *testing.T) {
	web := []discoveryv1.EndpointPort{slicePortOf("", 8080, corev1.ProtocolTCP)}
	two := func(ns, name string) *discoveryv1.EndpointSlice {
		return endpointSlice(ns, name, name+"-1", web, endpoint(condReady, "10.244.1.2", "10.244.1.3"))
	}
	t.Run("backend entries", func(t *testing.T) {
		base := parseBase(t, "dataplane: {maxBackends: 4}\nservices:\n  - {name: static, vip: 10.99.0.9, port: 80, backends: [{address: 10.0.3.2}]}\n")
		cfg, probs, err := run(t, base, fixture{
			services: []*corev1.Service{
				service("default", "old", withIngress("10.99.0.1")),
				service("default", "new", withIngress("10.99.0.2"), createdAt(t0.Add(time.Minute))),
			},
			slices: []*discoveryv1.EndpointSlice{two("default", "old"), two("default", "new")},
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := summary(cfg); len(got) != 2 || !strings.HasPrefix(got[1], "default/old:80/tcp") {
			t.Errorf("services %q, want static and default/old", got)
		}
		checkProblems(t, probs, []string{"Service default/new: port 10.99.0.2:80/tcp (default/new:80/tcp) is not served: its 2 backends would take the data plane over its 4 backend entries"})
	})
	t.Run("services", func(t *testing.T) {
		var ports []corev1.ServicePort
		var slicePorts []discoveryv1.EndpointPort
		for p := 1; p <= config.MaxServices+1; p++ {
			name := fmt.Sprintf("p%d", p)
			ports = append(ports, port(name, int32(p), corev1.ProtocolTCP))
			slicePorts = append(slicePorts, slicePortOf(name, int32(p), corev1.ProtocolTCP))
		}
		cfg, probs, err := run(t, parseBase(t, ""), fixture{
			services: []*corev1.Service{service("default", "many", withPorts(ports...))},
			slices:   []*discoveryv1.EndpointSlice{endpointSlice("default", "many", "many-1", slicePorts, endpoint(condReady, "10.244.1.2"))},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(cfg.Services) != config.MaxServices {
			t.Errorf("%d services, want %d", len(cfg.Services), config.MaxServices)
		}
		checkProblems(t, probs, []string{fmt.Sprintf("Service default/many: port 10.99.0.1:%d/tcp (default/many:%d/tcp) is not served: the agent serves at most %d service ports",
			config.MaxServices+1, config.MaxServices+1, config.MaxServices)})
	})
	t.Run("more rejected Services than one round lists", func(t *testing.T) {
		f := fixture{services: []*corev1.Service{service("default", "good")}, slices: []*discoveryv1.EndpointSlice{two("default", "good")}}
		var want []string
		for i := range 120 {
			name := fmt.Sprintf("lo-%d", i)
			f.services = append(f.services, service("default", name, withIngress(fmt.Sprintf("127.0.0.%d", i+1))))
			f.slices = append(f.slices, two("default", name))
			want = append(want, "Service default/"+name+": ")
		}
		cfg, probs, err := run(t, parseBase(t, ""), f)
		if err != nil {
			t.Fatal(err)
		}
		if got := summary(cfg); len(got) != 1 || !strings.HasPrefix(got[0], "default/good:80/tcp") {
			t.Errorf("services %q, want default/good only", got)
		}
		checkProblems(t, probs, want)
	})
}

// What cannot be pinned on a cluster object fails the configuration:
// the agent keeps the running one.
func TestInvalidBase(t *testing.T) {
	base := parseBase(t, "")
	base.Dataplane.TableSize = 100 // not prime: no file could say so
	_, _, err := run(t, base, fixture{})
	if err == nil || !strings.Contains(err.Error(), "dataplane.tableSize") {
		t.Errorf("error %v, want one about dataplane.tableSize", err)
	}
}

// BenchmarkTranslate builds the configuration of 1000 Services with 10
// endpoints each: the cost of every update at that scale. "first" is a
// build with nothing to reuse (a Source's first, or one after the base
// changed); "one change" a build after one Service lost or regained an
// endpoint, as the Source makes it on every EndpointSlice change.
func BenchmarkTranslate(b *testing.B) {
	web := []discoveryv1.EndpointPort{slicePortOf("", 8080, corev1.ProtocolTCP)}
	var f fixture
	var fewer []*discoveryv1.EndpointSlice // each Service's slice without its last address
	for i := range 1000 {
		name := fmt.Sprintf("svc-%d", i)
		vip := netip.AddrFrom4([4]byte{10, 99, byte(i / 250), byte(i%250 + 1)}).String()
		f.services = append(f.services, service("default", name, withIngress(vip)))
		var addrs []string
		for j := range 10 {
			addrs = append(addrs, netip.AddrFrom4([4]byte{10, 244, byte(i / 25), byte(i%25*10 + j + 1)}).String())
		}
		f.slices = append(f.slices, endpointSlice("default", name, name+"-1", web, endpoint(condReady, addrs...)))
		fewer = append(fewer, endpointSlice("default", name, name+"-1", web, endpoint(condReady, addrs[:9]...)))
	}
	base := parseBase(b, "")
	st := settings{base: base, secretNamespace: base.Kubernetes.SecretNamespace}
	c := f.cluster()
	// Indexed, as the informer's indexer is.
	byService := map[string][]*discoveryv1.EndpointSlice{}
	for _, sl := range f.slices {
		k := sl.Namespace + "/" + sl.Labels[discoveryv1.LabelServiceName]
		byService[k] = append(byService[k], sl)
	}
	c.slices = func(ns, name string) []*discoveryv1.EndpointSlice { return byService[ns+"/"+name] }
	build := func(t *translated, v *config.Validator) {
		d, _ := t.translate(st, c)
		cfg, probs, err := validate(v, d, base, nil)
		if err != nil || len(probs) > 0 || len(cfg.Services) != 1000 {
			b.Fatalf("%v %v %d", err, probs, len(cfg.Services))
		}
	}
	b.Run("first", func(b *testing.B) {
		for b.Loop() {
			build(&translated{}, &config.Validator{})
		}
	})
	// oneChange builds again and again, Service i%1000 losing its last
	// endpoint or regaining it each time.
	oneChange := func(b *testing.B) {
		var t translated
		var v config.Validator
		build(&t, &v)
		for i := 0; b.Loop(); i++ {
			j := i % 1000
			k := "default/" + f.slices[j].Labels[discoveryv1.LabelServiceName]
			if byService[k][0] == f.slices[j] {
				byService[k] = []*discoveryv1.EndpointSlice{fewer[j]}
			} else {
				byService[k] = []*discoveryv1.EndpointSlice{f.slices[j]}
			}
			build(&t, &v)
		}
	}
	b.Run("one change", oneChange)
	// With a BGPAdvertisement that gives every route a community: the
	// services carry route attributes, which the validator checks again
	// at every build (config.Validator's quick path takes none).
	c.peers = []*unstructured.Unstructured{bgpPeer("tor", map[string]any{"myASN": int64(65001), "peerASN": int64(65000), "peerAddress": "10.0.0.1"})}
	c.adverts = []*unstructured.Unstructured{advertisement("all", map[string]any{"communities": []any{"65000:100"}, "aggregationLength": int64(24)})}
	b.Run("one change, advertised", oneChange)
}

// The endpoint history the controller writes becomes the history of a
// daisy-chained Service's ports, each port its own sets; an unreadable
// one is reported and the Service served without it; a Service without
// daisy chaining ignores it.
func TestEndpointHistory(t *testing.T) {
	base := parseBase(t, "")
	web := []discoveryv1.EndpointPort{slicePortOf("", 8080, corev1.ProtocolTCP)}
	hist := `{"sets":{"80/TCP":["10.244.1.3:8080"]},"history":[` +
		`{"until":"2026-11-25T10:00:00Z","sets":{"80/TCP":["10.244.1.2:8080","10.244.1.3:8080"]}},` +
		`{"until":"2026-11-25T10:01:00Z","sets":{"80/TCP":["10.244.1.2:8080/0","10.244.1.3:8080"],"53/UDP":["10.244.1.3:5353"]}}]}`
	f := fixture{services: []*corev1.Service{
		service("default", "web", withAnnotation(api.AnnotationFlows, "daisy-chain"), withAnnotation(api.AnnotationEndpointHistory, hist)),
		service("default", "plain", withIngress("10.99.0.2"), withAnnotation(api.AnnotationEndpointHistory, hist)),
		service("default", "bad", withIngress("10.99.0.3"), withAnnotation(api.AnnotationFlows, "daisy-chain"), withAnnotation(api.AnnotationEndpointHistory, "{")),
	}, slices: []*discoveryv1.EndpointSlice{
		endpointSlice("default", "web", "web-1", web, endpoint(condReady, "10.244.1.3")),
		endpointSlice("default", "plain", "plain-1", web, endpoint(condReady, "10.244.1.3")),
		endpointSlice("default", "bad", "bad-1", web, endpoint(condReady, "10.244.1.3")),
	}}
	cfg, probs, err := run(t, base, f)
	if err != nil {
		t.Fatal(err)
	}
	checkProblems(t, probs, []string{`Service default/bad: annotation xlb.io/endpoint-history: not the JSON the controller writes: unexpected EOF; the Service is served with the history each agent records itself, which one started later lacks`})
	got := map[string][]config.Generation{}
	for _, s := range cfg.Services {
		got[s.Name] = s.History
	}
	want := []config.Generation{
		{Until: time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC), Backends: []config.Backend{
			{Address: netip.MustParseAddr("10.244.1.2"), Port: 8080, Weight: 1}, {Address: netip.MustParseAddr("10.244.1.3"), Port: 8080, Weight: 1}}},
		{Until: time.Date(2026, 11, 25, 10, 1, 0, 0, time.UTC), Backends: []config.Backend{
			{Address: netip.MustParseAddr("10.244.1.2"), Port: 8080, Weight: 0}, {Address: netip.MustParseAddr("10.244.1.3"), Port: 8080, Weight: 1}}},
	}
	web80 := config.KubernetesServiceName("default", "web", 80, config.TCP)
	if len(got[web80]) != len(want) {
		t.Fatalf("history of %s: %+v", web80, got[web80])
	}
	for i, g := range got[web80] {
		if !g.Until.Equal(want[i].Until) || len(g.Backends) != len(want[i].Backends) {
			t.Fatalf("history[%d] of %s: %+v, want %+v", i, web80, g, want[i])
		}
		for j, b := range g.Backends {
			w := want[i].Backends[j]
			if b.Address != w.Address || b.Port != w.Port || b.Weight != w.Weight {
				t.Errorf("history[%d] of %s, backend %d: %+v, want %+v", i, web80, j, b, w)
			}
		}
	}
	for _, name := range []string{config.KubernetesServiceName("default", "plain", 80, config.TCP), config.KubernetesServiceName("default", "bad", 80, config.TCP)} {
		if _, ok := got[name]; !ok || len(got[name]) != 0 {
			t.Errorf("%s: served %v with history %+v, want served without", name, ok, got[name])
		}
	}
}

// TestTranslatedAgreesWithTranslate: over a random walk of a cluster
// (Services and EndpointSlices replaced by new objects, added and
// deleted, listed in changing orders, classless Services served or not),
// a translation that keeps the last build's Services gives exactly what
// a translation from scratch gives. (A forwarding annotation that names
// no mode is the exception, by design: it keeps the last build's mode,
// TestBadForwardingKeepsMode.)
func TestTranslatedAgreesWithTranslate(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	web := []discoveryv1.EndpointPort{slicePortOf("", 80, corev1.ProtocolTCP), slicePortOf("", 53, corev1.ProtocolUDP)}
	newService := func(i int) *corev1.Service {
		opts := []svcOpt{withIngress(fmt.Sprint("10.99.0.", 1+rng.IntN(20))), createdAt(t0.Add(time.Duration(rng.IntN(5)) * time.Second))}
		switch rng.IntN(8) {
		case 0:
			opts = append(opts, withAnnotation(api.AnnotationForwarding, []string{"dsr-gue", "nat", "dnat"}[rng.IntN(3)]))
		case 1:
			opts = append(opts, withAnnotation(api.AnnotationFlows, []string{"daisy-chain", "stateful", "sticky"}[rng.IntN(3)]))
		case 2:
			opts = append(opts, withPorts(port("", 80, corev1.ProtocolTCP), port("dns", 53, corev1.ProtocolUDP), port("s", 99, corev1.ProtocolSCTP)))
		case 3:
			opts = append(opts, withIngress()) // no address yet
		case 4:
			opts = append(opts, noClass)
		}
		return service("default", fmt.Sprint("s", i), opts...)
	}
	newSlice := func(svc string, n int) *discoveryv1.EndpointSlice {
		var eps []discoveryv1.Endpoint
		for range 1 + rng.IntN(3) {
			c := []discoveryv1.EndpointConditions{condReady, condReady, condNotReady, condDraining}[rng.IntN(4)]
			eps = append(eps, endpoint(c, fmt.Sprint("10.244.0.", 1+rng.IntN(30))))
		}
		return endpointSlice("default", svc, fmt.Sprintf("%s-%d", svc, n), web, eps...)
	}
	var f fixture
	for i := range 10 {
		f.services = append(f.services, newService(i))
		f.slices = append(f.slices, newSlice(fmt.Sprint("s", i), 0))
	}
	base := parseBase(t, "")
	var memo translated
	reused := 0
	for step := range 1500 {
		switch rng.IntN(7) {
		case 0: // a Service updated: a new object
			i := rng.IntN(len(f.services))
			f.services[i] = newService(i % 12)
			f.services[i].Name = fmt.Sprint("s", i)
		case 1, 2: // an EndpointSlice updated
			i := rng.IntN(len(f.slices))
			f.slices[i] = newSlice(f.slices[i].Labels[discoveryv1.LabelServiceName], i)
		case 3: // another slice for a Service, or one fewer
			if rng.IntN(2) == 0 {
				f.slices = append(f.slices, newSlice(fmt.Sprint("s", rng.IntN(len(f.services))), len(f.slices)))
			} else if len(f.slices) > 1 {
				i := rng.IntN(len(f.slices))
				f.slices = slices.Delete(f.slices, i, i+1)
			}
		case 4: // the indexer lists in another order
			rng.Shuffle(len(f.slices), func(i, j int) { f.slices[i], f.slices[j] = f.slices[j], f.slices[i] })
		}
		st := settings{base: base, serveClassless: step%300 >= 150, secretNamespace: base.Kubernetes.SecretNamespace}
		before := len(memo.last)
		got, gotProbs := memo.translate(st, f.cluster())
		want, wantProbs := translate(st, f.cluster())
		if !reflect.DeepEqual(got.cfg.Services, want.cfg.Services) || !slices.Equal(got.serviceFrom, want.serviceFrom) || !reflect.DeepEqual(gotProbs, wantProbs) {
			t.Fatalf("step %d: kept translations give\n%+v\n%v\n%v\nfrom scratch\n%+v\n%v\n%v", step,
				got.cfg.Services, got.serviceFrom, gotProbs, want.cfg.Services, want.serviceFrom, wantProbs)
		}
		if before > 0 {
			reused++
		}
	}
	if reused == 0 {
		t.Fatal("no build had translations to keep")
	}
}

// TestSessionAffinity: spec.sessionAffinity ClientIP gives every port of
// the Service client-IP affinity, whatever its timeout (which the
// controller reports as not honoured); None and the empty field give
// none.
func TestSessionAffinity(t *testing.T) {
	web := []discoveryv1.EndpointPort{slicePortOf("", 8080, corev1.ProtocolTCP), slicePortOf("dns", 53, corev1.ProtocolUDP)}
	slices := []*discoveryv1.EndpointSlice{endpointSlice("default", "web", "web-1", web, endpoint(condReady, "10.244.1.2"))}
	timeout := int32(60)
	for _, c := range []struct {
		affinity corev1.ServiceAffinity
		config   *corev1.SessionAffinityConfig
		want     config.Affinity
	}{
		{"", nil, ""},
		{corev1.ServiceAffinityNone, nil, ""},
		{corev1.ServiceAffinityClientIP, nil, config.AffinityClientIP},
		{corev1.ServiceAffinityClientIP, &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &timeout}}, config.AffinityClientIP},
	} {
		svc := service("default", "web", withPorts(port("", 80, corev1.ProtocolTCP), port("dns", 53, corev1.ProtocolUDP)), func(s *corev1.Service) {
			s.Spec.SessionAffinity, s.Spec.SessionAffinityConfig = c.affinity, c.config
		})
		out, probs := translateService(svc, slices, "")
		if len(out) != 2 || len(probs) != 0 {
			t.Fatalf("sessionAffinity %q: %d services, problems %v; want 2 and none", c.affinity, len(out), probs)
		}
		for _, s := range out {
			if s.Affinity != c.want {
				t.Errorf("sessionAffinity %q: %s has affinity %q, want %q", c.affinity, s.Name, s.Affinity, c.want)
			}
		}
	}
}

// TestBadForwardingKeepsMode: a forwarding annotation that comes to name
// no mode leaves the Service forwarded as it was, through later changes
// of its endpoints too, with a problem that says so; corrected, it takes
// the new mode. A Service first seen with a bad value gets dsr-ipip.
func TestBadForwardingKeepsMode(t *testing.T) {
	web := []discoveryv1.EndpointPort{slicePortOf("", 8080, corev1.ProtocolTCP)}
	slice := func(addrs ...string) *discoveryv1.EndpointSlice {
		return endpointSlice("default", "web", "web-1", web, endpoint(condReady, addrs...))
	}
	base := parseBase(t, "")
	st := settings{base: base, secretNamespace: base.Kubernetes.SecretNamespace}
	var memo translated
	build := func(fwd string, eps *discoveryv1.EndpointSlice) (config.Service, []string) {
		t.Helper()
		f := fixture{services: []*corev1.Service{service("default", "web", withAnnotation(api.AnnotationForwarding, fwd))}, slices: []*discoveryv1.EndpointSlice{eps}}
		d, probs := memo.translate(st, f.cluster())
		if len(d.cfg.Services) != 1 {
			t.Fatalf("forwarding %q: %d services, problems %v", fwd, len(d.cfg.Services), probs)
		}
		var out []string
		for _, p := range probs {
			out = append(out, p.String())
		}
		return d.cfg.Services[0], out
	}
	if s, probs := build("nat", slice("10.244.1.2")); s.Forwarding != config.NAT || s.TranslatePorts || len(probs) != 0 {
		t.Fatalf("nat: %+v, %v", s, probs)
	}
	want := `Service default/web: annotation xlb.io/forwarding: "nta" is not a forwarding mode (dsr-ipip, dsr-gue, nat or dnat); the Service keeps forwarding nat, as before, until it is corrected`
	for _, eps := range []*discoveryv1.EndpointSlice{slice("10.244.1.2"), slice("10.244.1.2", "10.244.1.3")} {
		s, probs := build("nta", eps)
		if s.Forwarding != config.NAT || s.TranslatePorts || !slices.Equal(probs, []string{want}) {
			t.Errorf("a bad value after nat, %d endpoints: %s (translatePorts %v), %q; want nat and %q", len(s.Backends), s.Forwarding, s.TranslatePorts, probs, want)
		}
	}
	if s, probs := build("dsr-gue", slice("10.244.1.2")); s.Forwarding != config.DSRGUE || !s.TranslatePorts || len(probs) != 0 {
		t.Errorf("corrected to dsr-gue: %+v, %v", s, probs)
	}
	memo = translated{}
	if s, probs := build("nta", slice("10.244.1.2")); s.Forwarding != config.DSRIPIP || len(probs) != 1 || !strings.HasSuffix(probs[0], "the Service is forwarded dsr-ipip, the default, until it is corrected") {
		t.Errorf("first seen with a bad value: %s, %v", s.Forwarding, probs)
	}
}

// A dual-stack Service on a node without an IPv6 address: its IPv4
// address is served, its IPv6 one left out with a problem saying why and
// what to do; on a node with one, both are served.
func TestDualStackOnIPv4OnlyNode(t *testing.T) {
	base := parseBase(t, "")
	web := []discoveryv1.EndpointPort{slicePortOf("", 8080, corev1.ProtocolTCP)}
	v6 := endpointSlice("default", "web", "web-6", web, endpoint(condReady, "fd00:244::2"))
	v6.AddressType = discoveryv1.AddressTypeIPv6
	f := fixture{
		services: []*corev1.Service{service("default", "web", withIngress("10.99.0.1", "2001:db8:99::1"))},
		slices:   []*discoveryv1.EndpointSlice{endpointSlice("default", "web", "web-4", web, endpoint(condReady, "10.244.1.2")), v6},
	}
	only4 := &config.Host{Interfaces: map[string][]netip.Addr{"eth0": {netip.MustParseAddr("10.0.0.10"), netip.MustParseAddr("fe80::10")}}}
	cfg, probs, err := runOn(t, base, f, only4)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := summary(cfg), []string{"default/web:80/tcp 10.99.0.1 dsr-ipip 10.244.1.2:8080/1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("services %q, want %q", got, want)
	}
	if len(probs) != 1 || !strings.Contains(probs[0], "default/web:80/tcp/ipv6") || !strings.Contains(probs[0], "fd00:244::2 is IPv6, and the node has no IPv6 address") {
		t.Errorf("problems %q, want the IPv6 port left out for the node's missing IPv6 address", probs)
	}
	dual := &config.Host{Interfaces: map[string][]netip.Addr{"eth0": {netip.MustParseAddr("10.0.0.10"), netip.MustParseAddr("fd00::10")}}}
	cfg, probs, err = runOn(t, base, f, dual)
	if err != nil {
		t.Fatal(err)
	}
	if got := summary(cfg); len(got) != 2 || len(probs) != 0 {
		t.Errorf("on a dual-stack node: services %q, problems %q; want both served", got, probs)
	}
}

// A dual-stack daisy-chained Service is served at both addresses, each
// with the endpoints of its family and the controller's endpoint history
// of that family (the IPv6 endpoints' under 80/TCP/IPv6): its IPv6 pods
// are chained as its IPv4 ones are, and no problem is reported.
func TestEndpointHistoryDualStack(t *testing.T) {
	web := []discoveryv1.EndpointPort{slicePortOf("", 8080, corev1.ProtocolTCP)}
	hist := `{"sets":{"80/TCP":["10.244.1.3:8080"],"80/TCP/IPv6":["[fd00:244::3]:8080"]},"history":[` +
		`{"until":"2026-11-25T10:00:00Z","sets":{"80/TCP":["10.244.1.2:8080"],"80/TCP/IPv6":["[fd00:244::2]:8080","[fd00:244::3]:8080/0"]}}]}`
	v6 := endpointSlice("default", "web", "web-6", web, endpoint(condReady, "fd00:244::3"))
	v6.AddressType = discoveryv1.AddressTypeIPv6
	f := fixture{services: []*corev1.Service{
		service("default", "web", withIngress("10.99.0.1", "2001:db8:99::1"), withAnnotation(api.AnnotationFlows, "daisy-chain"),
			withAnnotation(api.AnnotationEndpointHistory, hist)),
	}, slices: []*discoveryv1.EndpointSlice{endpointSlice("default", "web", "web-4", web, endpoint(condReady, "10.244.1.3")), v6}}
	cfg, probs, err := run(t, parseBase(t, ""), f)
	if err != nil {
		t.Fatal(err)
	}
	checkProblems(t, probs, nil)
	until := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	want := map[string]string{
		"default/web:80/tcp":      "10.99.0.1 [10.244.1.3:8080] until " + until.String() + ": [10.244.1.2:8080/1]",
		"default/web:80/tcp/ipv6": "2001:db8:99::1 [[fd00:244::3]:8080] until " + until.String() + ": [[fd00:244::2]:8080/1 [fd00:244::3]:8080/0]",
	}
	got := map[string]string{}
	for _, s := range cfg.Services {
		var bs, hs []string
		for _, b := range s.Backends {
			bs = append(bs, netip.AddrPortFrom(b.Address, b.Port).String())
		}
		var line string
		for _, g := range s.History {
			hs = hs[:0]
			for _, b := range g.Backends {
				hs = append(hs, fmt.Sprintf("%s/%d", netip.AddrPortFrom(b.Address, b.Port), b.Weight))
			}
			line += fmt.Sprintf(" until %s: %v", g.Until, hs)
		}
		if s.Flows != config.FlowsDaisyChain || !s.TranslatePorts {
			t.Errorf("%s: flows %q, translatePorts %v; want daisy-chain, true", s.Name, s.Flows, s.TranslatePorts)
		}
		got[s.Name] = fmt.Sprintf("%s %v%s", s.VIP, bs, line)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("served\n%v\nwant\n%v", got, want)
	}
}

// TestL2Pools: the ports of a Service allocated from an AddressPool with
// announce: l2 are answered by ARP (announce l2), the others announced
// over BGP; a pool switched back to bgp takes its Services back, though
// their translations are reused from the last build.
func TestL2Pools(t *testing.T) {
	web := []discoveryv1.EndpointPort{slicePortOf("", 8080, corev1.ProtocolTCP)}
	f := fixture{
		services: []*corev1.Service{
			service("default", "web", withAnnotation(api.AnnotationAllocatedFrom, "lan"), withPorts(port("", 80, corev1.ProtocolTCP), port("tls", 443, corev1.ProtocolTCP))),
			service("default", "api", withIngress("10.99.0.2"), withAnnotation(api.AnnotationAllocatedFrom, "routed")),
		},
		slices: []*discoveryv1.EndpointSlice{
			endpointSlice("default", "web", "web-1", append(web, slicePortOf("tls", 8443, corev1.ProtocolTCP)), endpoint(condReady, "10.244.1.2")),
			endpointSlice("default", "api", "api-1", web, endpoint(condReady, "10.244.1.3")),
		},
		l2Pools: map[string]bool{"lan": true},
	}
	base := parseBase(t, "")
	st := settings{base: base, serveClassless: false, secretNamespace: "xlb-system"}
	var tr translated
	announces := func() map[string]config.Announce {
		t.Helper()
		d, probs := tr.translate(st, f.cluster())
		cfg, more, err := validate(&config.Validator{}, d, base, nil)
		if err != nil || len(probs)+len(more) > 0 {
			t.Fatalf("error %v, problems %v %v", err, probs, more)
		}
		out := map[string]config.Announce{}
		for _, s := range cfg.Services {
			out[s.Name] = s.Announce
		}
		return out
	}
	want := map[string]config.Announce{"default/web:80/tcp": config.AnnounceL2, "default/web:443/tcp": config.AnnounceL2, "default/api:80/tcp": ""}
	if got := announces(); !reflect.DeepEqual(got, want) {
		t.Errorf("announce by service = %v, want %v", got, want)
	}
	f.l2Pools = nil
	want = map[string]config.Announce{"default/web:80/tcp": "", "default/web:443/tcp": "", "default/api:80/tcp": ""}
	if got := announces(); !reflect.DeepEqual(got, want) {
		t.Errorf("pool back to bgp: announce by service = %v, want %v", got, want)
	}
}
