package source

import (
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/xlbproject/xlb/internal/config"
)

func TestDaemonSetBase(t *testing.T) {
	k := config.Kubernetes{NodeName: "node-1", SecretNamespace: "xlb-system"}
	withAddrs := func(addrs ...corev1.NodeAddress) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Status: corev1.NodeStatus{Addresses: addrs}}
	}
	internal := func(a string) corev1.NodeAddress { return corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a} }
	tests := []struct {
		name    string
		node    *corev1.Node
		iface   string
		want    config.Node
		wantErr string
	}{
		{"the first IPv4 and IPv6 InternalIPs, on the interface given", withAddrs(corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "192.0.2.1"},
			internal("fe80::10"), internal("fd00::10"), internal("10.0.0.10"), internal("10.0.0.11"), internal("fd00::11")), "eth1",
			config.Node{Interface: "eth1", Address: netip.MustParseAddr("10.0.0.10"), Address6: netip.MustParseAddr("fd00::10")}, ""},
		{"an IPv4-only Node", withAddrs(internal("10.0.0.10")), "eth1", config.Node{Interface: "eth1", Address: netip.MustParseAddr("10.0.0.10")}, ""},
		{"no Node", nil, "eth0", config.Node{}, `read this node's Node object "node-1"`},
		{"no IPv4 InternalIP", withAddrs(internal("fd00::10")), "eth0", config.Node{}, "has no IPv4 InternalIP"},
		// 192.0.2.0/24 (TEST-NET-1) is on no interface of a test machine.
		{"no interface holds the address", withAddrs(internal("192.0.2.77")), "", config.Node{}, "no interface holds the Node's InternalIP 192.0.2.77; name the interface XDP attaches to with --interface"},
		{"an invalid interface name", withAddrs(internal("10.0.0.10")), "eth/0", config.Node{}, "node.interface"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset()
			if tc.node != nil {
				cs = fake.NewClientset(tc.node)
			}
			cfg, err := DaemonSetBase(t.Context(), cs, k, tc.iface, config.NATConfig{})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Node != tc.want || cfg.Kubernetes == nil || *cfg.Kubernetes != k || cfg.BGP != nil || len(cfg.Services) != 0 ||
				cfg.API.Socket != config.DefaultSocket || cfg.Dataplane.TableSize != config.DefaultTableSize {
				t.Errorf("got %+v (kubernetes %+v), want node %+v and every default", cfg, cfg.Kubernetes, tc.want)
			}
		})
	}
}

func TestInterfaceWith(t *testing.T) {
	name, err := interfaceWith(netip.MustParseAddr("127.0.0.1"))
	if err != nil || name != "lo" {
		t.Errorf("interfaceWith(127.0.0.1) = %q, %v; want lo", name, err)
	}
}

// The agent's nat flags reach the base configuration: the fields given,
// and every default for the rest; a value a file would refuse is
// refused.
func TestDaemonSetBaseNAT(t *testing.T) {
	k := config.Kubernetes{NodeName: "node-1", SecretNamespace: "xlb-system"}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.10"}}}}
	cfg, err := DaemonSetBase(t.Context(), fake.NewClientset(node), k, "eth0", config.NATConfig{})
	if err != nil || cfg.NAT != config.DefaultNAT() {
		t.Fatalf("no nat flags: %+v, %v; want the defaults", cfg, err)
	}
	nat := config.NATConfig{Address: netip.MustParseAddr("10.0.0.12"), Ports: config.PortRange{Min: 40000, Max: 49999}}
	cfg, err = DaemonSetBase(t.Context(), fake.NewClientset(node), k, "eth0", nat)
	want := config.DefaultNAT()
	want.Address, want.Ports = nat.Address, nat.Ports
	if err != nil || cfg.NAT != want {
		t.Errorf("nat flags: %+v, %v; want %+v", cfg.NAT, err, want)
	}
	nat.Sessions = 10
	if _, err := DaemonSetBase(t.Context(), fake.NewClientset(node), k, "eth0", nat); err == nil || !strings.Contains(err.Error(), "nat.sessions: 10 is out of range 1024..16777216") {
		t.Errorf("10 sessions: %v", err)
	}
}
