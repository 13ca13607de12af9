package source

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/xlbproject/xlb/internal/config"
)

// DaemonSetBase is the base configuration of an agent started without a
// file, as a DaemonSet runs it: every default, the node address is the
// Node's InternalIP, and XDP attaches to iface, or when that is "" to the
// interface that holds the InternalIP. nat is the nat section (the
// agent's flags); its zero fields take their defaults. k must have its
// defaults resolved.
func DaemonSetBase(ctx context.Context, client kubernetes.Interface, k config.Kubernetes, iface string, nat config.NATConfig) (*config.Config, error) {
	node, err := client.CoreV1().Nodes().Get(ctx, k.NodeName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("kubernetes: read this node's Node object %q: %w; set NODE_NAME to spec.nodeName (the DaemonSet does)", k.NodeName, err)
	}
	addr, ok := internalIP(node)
	if !ok {
		return nil, fmt.Errorf("kubernetes: Node %q has no IPv4 InternalIP in status.addresses; start the agent with --config naming node.interface and node.address", k.NodeName)
	}
	if iface == "" {
		if iface, err = interfaceWith(addr); err != nil {
			return nil, fmt.Errorf("kubernetes: %w; name the interface XDP attaches to with --interface", err)
		}
	}
	// A dual-stack Node's IPv6 InternalIP is the node's IPv6 address.
	addr6, _ := internalIP6(node)
	// Checked as a file is, so that a bad --interface or address is
	// reported as the file's checks would.
	return config.ValidateConfig(&config.Config{
		Node: config.Node{Interface: iface, Address: addr, Address6: addr6},
		API:  config.API{Socket: config.DefaultSocket},
		Dataplane: config.Dataplane{AttachMode: config.DefaultAttachMode, TableSize: config.DefaultTableSize, MaxBackends: config.DefaultMaxBackends, FlowHash: config.DefaultFlowHash,
			PingVIPs: config.DefaultPingVIPs},
		Kubernetes: &k,
		NAT:        nat,
	}, config.Env{File: "defaults"})
}

// internalIP returns a Node's first IPv4 InternalIP.
func internalIP(n *corev1.Node) (netip.Addr, bool) {
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Is4() {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// internalIP6 returns a Node's first global IPv6 InternalIP.
func internalIP6(n *corev1.Node) (netip.Addr, bool) {
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil && config.IsGlobal6(ip) {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// interfaceWith names the interface that holds addr.
func interfaceWith(addr netip.Addr) (string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", fmt.Errorf("list the interfaces: %w", err)
	}
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == addr {
					return ifc.Name, nil
				}
			}
		}
	}
	return "", fmt.Errorf("no interface holds the Node's InternalIP %s", addr)
}
