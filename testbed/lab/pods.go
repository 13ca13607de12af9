package lab

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
)

// setUpPods wires the pods of a Kubernetes lab (Spec.Pods) the way a CNI
// with host routing does: each pod has only its own address, /32, and a
// default route via PodGateway over its veth; the node routes the pod's
// /32 to that veth and answers the pod's ARP for the gateway by proxy
// ARP; the router routes each node's pod CIDR to the node. In a
// dual-stack lab each pod also has an IPv6 /128 with a default route via
// PodGateway6, which the node's end of its veth holds, and the router
// routes each node's PodCIDR6 to it. Runs after
// the namespaces exist and before the sysctls of the other hosts.
func setUpPods(ctx context.Context, p Plan) error {
	if len(p.Pods) == 0 {
		return nil
	}
	for k, node := range p.Backends {
		if _, err := ip(ctx, "-n", p.Router, "route", "add", PodCIDR(k).String(), "via", node.Addr.String()); err != nil {
			return fmt.Errorf("%s: pod CIDR: %w", node.Name, err)
		}
		// The node forwards between its uplink and its pods; replies
		// leave with the VIP as source after the translation, which a
		// reverse-path filter would take for a spoof.
		if err := setSysctls(node.Namespace, []sysctl{{"ipv4/ip_forward", "1"}}); err != nil {
			return err
		}
		if !p.Spec.IPv6 {
			continue
		}
		if _, err := ip(ctx, "-n", p.Router, "-6", "route", "add", PodCIDR6(k).String(), "via", node.Addr6.String()); err != nil {
			return fmt.Errorf("%s: IPv6 pod CIDR: %w", node.Name, err)
		}
		if err := setSysctls(node.Namespace, []sysctl{{"ipv6/conf/all/forwarding", "1"}}); err != nil {
			return err
		}
	}
	for _, pod := range p.Pods {
		node := p.Backends[pod.Node]
		mtu := strconv.Itoa(pod.MTU)
		gw := pod.Gateway.String()
		for _, args := range [][]string{
			{"-n", node.Namespace, "link", "add", pod.Peer, "mtu", mtu, "type", "veth", "peer", "name", pod.Interface, "mtu", mtu, "netns", pod.Namespace},
			{"-n", node.Namespace, "link", "set", pod.Peer, "up"},
			{"-n", node.Namespace, "route", "add", netip.PrefixFrom(pod.Addr, 32).String(), "dev", pod.Peer, "scope", "link"},
			{"-n", pod.Namespace, "addr", "add", netip.PrefixFrom(pod.Addr, 32).String(), "dev", pod.Interface},
			{"-n", pod.Namespace, "link", "set", pod.Interface, "up"},
			{"-n", pod.Namespace, "route", "add", gw, "dev", pod.Interface, "scope", "link"},
			{"-n", pod.Namespace, "route", "add", "default", "via", gw, "dev", pod.Interface},
		} {
			if _, err := ip(ctx, args...); err != nil {
				return fmt.Errorf("%s: %w", pod.Name, err)
			}
		}
		if err := setSysctls(node.Namespace, []sysctl{{"ipv4/conf/" + pod.Peer + "/proxy_arp", "1"}}); err != nil {
			return err
		}
		if !pod.Addr6.IsValid() {
			continue
		}
		// IPv6 has no proxy ARP to lean on: the node's end of the veth
		// holds the pods' link-local gateway itself.
		gw6 := pod.Gateway6.String()
		for _, args := range [][]string{
			{"-n", node.Namespace, "addr", "add", netip.PrefixFrom(pod.Gateway6, 64).String(), "dev", pod.Peer, "nodad"},
			{"-n", node.Namespace, "-6", "route", "add", netip.PrefixFrom(pod.Addr6, 128).String(), "dev", pod.Peer},
			{"-n", pod.Namespace, "addr", "add", netip.PrefixFrom(pod.Addr6, 128).String(), "dev", pod.Interface, "nodad"},
			{"-n", pod.Namespace, "-6", "route", "add", "default", "via", gw6, "dev", pod.Interface},
		} {
			if _, err := ip(ctx, args...); err != nil {
				return fmt.Errorf("%s: %w", pod.Name, err)
			}
		}
	}
	for _, node := range p.Backends {
		if err := noRPFilter(node.Namespace); err != nil {
			return err
		}
	}
	for _, pod := range p.Pods {
		if err := noRPFilter(pod.Namespace); err != nil {
			return err
		}
	}
	return nil
}
