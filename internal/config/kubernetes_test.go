package config

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func TestKubernetesSection(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want *Kubernetes
	}{
		{"absent", "node: {interface: eth0}\n", nil},
		{"empty: every default", "node: {interface: eth0}\nkubernetes:\n", &Kubernetes{}},
		{"empty mapping", "node: {interface: eth0}\nkubernetes: {}\n", &Kubernetes{}},
		{"every field", "node: {interface: eth0}\nkubernetes:\n  kubeconfig: /etc/xlb/kubeconfig\n  nodeName: worker-1.example.com\n  secretNamespace: lb\n  serveClassless: true\n",
			&Kubernetes{Kubeconfig: "/etc/xlb/kubeconfig", NodeName: "worker-1.example.com", SecretNamespace: "lb", ServeClassless: true}},
		{"serveClassless false", "node: {interface: eth0}\nkubernetes: {serveClassless: false}\n", &Kubernetes{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse(file, []byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cfg.Kubernetes, tc.want) {
				t.Errorf("kubernetes = %+v, want %+v", cfg.Kubernetes, tc.want)
			}
		})
	}
}

func TestKubernetesSectionErrors(t *testing.T) {
	const head = "node: {interface: eth0}\nkubernetes:\n"
	tests := []struct {
		name string
		yaml string
		line int
		path string
		want string
	}{
		{"not a mapping", "node: {interface: eth0}\nkubernetes: [a]\n", 2, "kubernetes", "expected a mapping"},
		{"unknown field", head + "  nodename: a\n", 3, "kubernetes.nodename", `did you mean "nodeName"?`},
		{"relative kubeconfig", head + "  kubeconfig: kube/config\n", 3, "kubernetes.kubeconfig", `"kube/config" is not an absolute path; give the kubeconfig file's absolute path`},
		{"empty kubeconfig", head + "  kubeconfig: \"\"\n", 3, "kubernetes.kubeconfig", "is not an absolute path"},
		{"kubeconfig a number", head + "  kubeconfig: 1\n", 3, "kubernetes.kubeconfig", "expected a string"},
		{"upper-case node name", head + "  nodeName: Worker-1\n", 3, "kubernetes.nodeName", `"Worker-1" is not a valid Node name; a Node name is a DNS subdomain`},
		{"node name with an empty part", head + "  nodeName: a..b\n", 3, "kubernetes.nodeName", "is not a valid Node name"},
		{"empty node name", head + "  nodeName: \"\"\n", 3, "kubernetes.nodeName", "is empty"},
		{"long node name", head + "  nodeName: " + strings.Repeat("a.", 127) + "a\n", 3, "kubernetes.nodeName", "is 255 characters long"},
		{"namespace with a dot", head + "  secretNamespace: a.b\n", 3, "kubernetes.secretNamespace", `"a.b" is not a valid namespace; a namespace is a DNS label`},
		{"namespace too long", head + "  secretNamespace: " + strings.Repeat("a", 64) + "\n", 3, "kubernetes.secretNamespace", "is not a valid namespace"},
		{"serveClassless a string", head + "  serveClassless: \"yes\"\n", 3, "kubernetes.serveClassless", "expected true or false"},
		{"serveClassless without value", head + "  serveClassless:\n", 3, "kubernetes.serveClassless", "has no value"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { wantError(t, tc.yaml, tc.line, tc.path, tc.want) })
	}
}

func TestKubernetesWithDefaults(t *testing.T) {
	host := func(name string, err error) func() (string, error) {
		return func() (string, error) { return name, err }
	}
	tests := []struct {
		name    string
		in      Kubernetes
		env     map[string]string
		host    func() (string, error)
		want    Kubernetes
		wantErr string
	}{
		{"the file's values stay", Kubernetes{NodeName: "a", SecretNamespace: "b"}, map[string]string{"NODE_NAME": "x", "POD_NAMESPACE": "y"}, host("h", nil),
			Kubernetes{NodeName: "a", SecretNamespace: "b"}, ""},
		{"environment", Kubernetes{}, map[string]string{"NODE_NAME": "node-1", "POD_NAMESPACE": "lb"}, host("h", nil),
			Kubernetes{NodeName: "node-1", SecretNamespace: "lb"}, ""},
		{"host name and default namespace", Kubernetes{ServeClassless: true}, nil, host("worker.local", nil),
			Kubernetes{NodeName: "worker.local", SecretNamespace: DefaultSecretNamespace, ServeClassless: true}, ""},
		{"host name not a Node name", Kubernetes{}, nil, host("My_Host", nil), Kubernetes{}, "kubernetes.nodeName: taken from the host name: \"My_Host\" is not a valid Node name"},
		{"NODE_NAME not a Node name", Kubernetes{}, map[string]string{"NODE_NAME": "-x"}, host("h", nil), Kubernetes{}, "taken from NODE_NAME"},
		{"no host name", Kubernetes{}, nil, host("", errors.New("uname failed")), Kubernetes{}, "the host name is unknown (uname failed)"},
		{"bad POD_NAMESPACE", Kubernetes{NodeName: "a"}, map[string]string{"POD_NAMESPACE": "A"}, host("h", nil), Kubernetes{}, "kubernetes.secretNamespace: taken from POD_NAMESPACE"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.in.WithDefaults(func(k string) string { return tc.env[k] }, tc.host)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestKubernetesServiceNames(t *testing.T) {
	svc := func(name string) string {
		return "node: {interface: eth0}\nservices:\n  - name: " + name + "\n    vip: 10.99.0.1\n    port: 80\n    backends: [{address: 10.0.3.2}]\n"
	}
	for _, name := range []string{
		KubernetesServiceName("default", "web", 80, TCP),
		KubernetesServiceName(strings.Repeat("a", 63), strings.Repeat("b", 63), 65535, UDP),
		"kube-system/dns-1:53/udp",
	} {
		t.Run("valid "+name, func(t *testing.T) {
			cfg, err := Parse(file, []byte(svc(name)))
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Services[0].Name; got != name {
				t.Errorf("name %q, want %q", got, name)
			}
		})
	}
	for _, tc := range []struct{ name, want string }{
		{"default/web", "no ':' before the port"},
		{"default/web:80", "no '/' before the protocol"},
		{"Default/web:80/tcp", `namespace "Default" is not a DNS label`},
		{"/web:80/tcp", `namespace "" is not a DNS label`},
		{"default/web_1:80/tcp", `the Service name "web_1" is not a DNS label`},
		{"default/web:80/sctp", `protocol "sctp" is not tcp or udp`},
		{"default/web:80/TCP", `protocol "TCP" is not tcp or udp`},
		{"default/web:0/tcp", `port "0" is not a number in 1..65535`},
		{"default/web:080/tcp", `port "080" is not a number`},
		{"default/web:65536/tcp", `port "65536" is not a number`},
		{"a/b/web:80/tcp", `the Service name "b/web" is not a DNS label`},
	} {
		t.Run("invalid "+tc.name, func(t *testing.T) {
			wantError(t, svc(`"`+tc.name+`"`), 3, "services[0].name", tc.want)
		})
	}
}

func TestTranslatePorts(t *testing.T) {
	const yaml = "node: {interface: eth0}\nservices:\n  - name: default/web:80/tcp\n    vip: 10.99.0.1\n    port: 80\n    translatePorts: true\n" +
		"    healthCheck: {type: tcp}\n    backends: [{address: 10.244.1.2, port: 8080}, {address: 10.244.2.2, port: 8081, weight: 0}, {address: 10.244.3.2}]\n"
	cfg, err := Parse(file, []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Services[0]
	if !s.TranslatePorts {
		t.Error("TranslatePorts not set")
	}
	var ports, checkPorts []uint16
	for _, b := range s.Backends {
		ports = append(ports, b.Port)
		checkPorts = append(checkPorts, b.HealthCheck.Port)
	}
	// A check probes the backend's own port, the one the pod listens on.
	if want := []uint16{8080, 8081, 80}; !reflect.DeepEqual(ports, want) || !reflect.DeepEqual(checkPorts, want) {
		t.Errorf("backend ports %v, check ports %v, want %v for both", ports, checkPorts, want)
	}

	off := strings.Replace(yaml, "translatePorts: true", "translatePorts: false", 1)
	wantError(t, off, 8, "services[0].backends[0].port", "8080 differs from the service port 80")
	bad := strings.Replace(yaml, "translatePorts: true", "translatePorts: 1", 1)
	wantError(t, bad, 6, "services[0].translatePorts", "expected true or false")
	if _, err := Parse(file, []byte(bad)); strings.Contains(err.Error(), "differs from the service port") {
		t.Errorf("an invalid translatePorts is reported again at the backend ports:\n%v", err)
	}
}

// A Kubernetes configuration as the source builds it: its rendering parses
// back to the same configuration.
func TestKubernetesConfigRoundTrip(t *testing.T) {
	ip := netip.MustParseAddr
	cfg := &Config{
		Node:       Node{Interface: "eth0"},
		API:        API{Socket: DefaultSocket},
		Dataplane:  Dataplane{AttachMode: AttachAuto, TableSize: DefaultTableSize, MaxBackends: DefaultMaxBackends, FlowHash: DefaultFlowHash},
		Kubernetes: &Kubernetes{NodeName: "node-1", SecretNamespace: "xlb-system", ServeClassless: true},
		NAT:        DefaultNAT(),
		BGP: &BGP{ASN: 65001, HoldTime: DefaultHoldTime, Keepalive: DefaultHoldTime / 3, DrainTime: DefaultDrainTime,
			Peers: []Peer{{Address: ip("10.0.1.1"), ASN: 65000, Port: 179, Password: "s3cret: #x", HoldTime: 90e9, Keepalive: 30e9, MaxPrefixes: DefaultMaxPrefixes}}},
		Services: []Service{{Name: KubernetesServiceName("default", "web", 80, TCP), VIP: ip("10.99.0.1"), Port: 80, Protocol: TCP,
			Forwarding: DSRIPIP, TranslatePorts: true, Backends: []Backend{
				{Address: ip("10.244.1.2"), Port: 8080, Weight: 1, HealthCheck: HealthCheck{Type: CheckNone}},
				{Address: ip("10.244.1.3"), Port: 8080, Weight: 0, HealthCheck: HealthCheck{Type: CheckNone}},
			}}},
	}
	if err := roundTrip(cfg); err != nil {
		t.Fatal(err)
	}
}

// With a kubernetes section the BGPPeers supply peers, so the file's bgp
// section may name none; without one, a bgp section without peers is an
// error as before.
func TestKubernetesBGPWithoutPeers(t *testing.T) {
	for _, tc := range []struct{ name, bgp string }{
		{"peers left out", "bgp: {asn: 65001, holdTime: 30s}\n"},
		{"empty list", "bgp: {asn: 65001, holdTime: 30s, peers: []}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse(file, []byte("node: {interface: eth0}\nkubernetes: {}\n"+tc.bgp))
			if err != nil {
				t.Fatal(err)
			}
			if cfg.BGP == nil || cfg.BGP.ASN != 65001 || cfg.BGP.HoldTime != 30e9 || len(cfg.BGP.Peers) != 0 {
				t.Errorf("bgp = %+v, want asn 65001, hold time 30s and no peers", cfg.BGP)
			}
			if err := roundTrip(cfg); err != nil {
				t.Error(err)
			}
		})
	}
	wantError(t, "node: {interface: eth0}\nbgp: {asn: 65001}\n", 2, "bgp.peers", "required: list at least one neighbour")
	wantError(t, "node: {interface: eth0}\nbgp: {asn: 65001, peers: []}\n", 2, "bgp.peers", "the list is empty")
}
