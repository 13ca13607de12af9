package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
	"github.com/xlbproject/xlb/testbed/netns"
)

// Variant names, in report order. direct is the floor.
const (
	vDirect   = "direct"
	vRouted   = "routed"
	vXLBGUE   = "xlb-gue"
	vXLBIPIP  = "xlb-ipip"
	vXLBGen   = "xlb-gue-generic"
	vNFT      = "nftables"
	vIPTables = "iptables"
)

var variantOrder = []string{vDirect, vRouted, vXLBGUE, vXLBIPIP, vXLBGen, vNFT, vIPTables}

// The NAT variants, measured in each direction: forward (client to
// VIP, counted at the backends) and reverse (a backend's replies in the
// sessions the forward run opened, counted at the client).
const (
	vXLBNAT  = "xlb-nat"
	vXLBDNAT = "xlb-dnat"
	vNFTMasq = "nftables-masq"
)

var natVariantOrder = []string{vXLBNAT, vXLBDNAT, vNFTMasq}

// The directions of a NAT variant's runs.
const (
	dirForward = "forward"
	dirReverse = "reverse"
)

var natVariantWhat = map[string]string{
	vXLBNAT:  "xlb agent on the node, service VIP:7777/udp with `forwarding: nat`: XDP rewrites the destination to the backend and the source to the node's address and a port it allocates, and the backends' replies to that port back to VIP → client; every packet goes back out with XDP_TX",
	vXLBDNAT: "the same agent, a second service (the lab's second VIP) with `forwarding: dnat`: only the destination is rewritten, the backends see the client's address, and a policy rule on the router (`lab.RouteReplies`) sends what the backends send to the client segment through the node, whose program rewrites the source back to the VIP",
	vNFTMasq: "no xlb; the `nftables` rules plus a postrouting chain that masquerades what was DNATed (`ct status dnat masquerade fully-random`, as kube-proxy does for traffic from outside the cluster), so the replies come back to the node's address and conntrack translates them",
}

// variantWhat says in one line what each variant's path is.
var variantWhat = map[string]string{
	vDirect:   "no load balancer, no node: client → router → backend, frames addressed to backend 1 (the floor)",
	vRouted:   "the node in the path as a plain router: client → router → node → router → backend 1, frames to the VIP; the node forwards by its default route, the router sends VIP traffic from the node segment to backend 1 (policy route)",
	vXLBGUE:   "xlb agent on the node, service VIP:7777/udp, dsr-gue over both backends; XDP (native, on the veth) encapsulates and sends back out with XDP_TX, the backends decapsulate in XDP",
	vXLBIPIP:  "the same with dsr-ipip",
	vXLBGen:   "xlb-gue with the program attached in generic mode (`attachMode: generic`): it runs on the skb the router sent, and XDP_TX hands the skb to the veth's transmit path instead of an XDP frame to the router's port",
	vNFT:      "no xlb; nftables DNAT on the node, shaped like kube-proxy's nftables mode (a verdict map on address . protocol . port, numgen random over both backends)",
	vIPTables: "no xlb; iptables DNAT on the node, shaped like kube-proxy's iptables mode (KUBE-SERVICES → KUBE-SVC → statistic random → KUBE-SEP → DNAT), loaded with iptables-nft-restore (the nf_tables backend, Debian 12's default)",
}

// nftRules is the nftables variant's rule set.
func nftRules(vip netip.Addr, backends []lab.Host) string {
	var eps, chains strings.Builder
	for i, b := range backends {
		if i > 0 {
			eps.WriteString(", ")
		}
		fmt.Fprintf(&eps, "%d : goto ep-%d", i, i+1)
		fmt.Fprintf(&chains, "\tchain ep-%d {\n\t\tmeta l4proto udp dnat to %s:%d\n\t}\n", i+1, b.Addr, servicePort)
	}
	return fmt.Sprintf(`table ip xlbpkt {
	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		elements = { %s . udp . %d : goto svc-pkt }
	}
	chain prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr . meta l4proto . th dport vmap @service-ips
	}
	chain svc-pkt {
		numgen random mod %d vmap { %s }
	}
%s}
`, vip, servicePort, len(backends), eps.String(), chains.String())
}

// nftMasqRules is the nftables-masq variant's rule set: nftRules, and
// the masquerade of the connections it translated.
func nftMasqRules(vip netip.Addr, backends []lab.Host) string {
	r := nftRules(vip, backends)
	i := strings.LastIndex(r, "}")
	return r[:i] + "\tchain postrouting {\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n\t\tct status dnat masquerade fully-random\n\t}\n}\n"
}

// iptablesRules is the iptables variant's rule set, for
// iptables-restore: each endpoint but the last is chosen with
// probability 1/(endpoints left), as kube-proxy writes it.
func iptablesRules(vip netip.Addr, backends []lab.Host) string {
	var b strings.Builder
	b.WriteString("*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-PKT - [0:0]\n")
	for i := range backends {
		fmt.Fprintf(&b, ":KUBE-SEP-%d - [0:0]\n", i+1)
	}
	b.WriteString("-A PREROUTING -j KUBE-SERVICES\n")
	fmt.Fprintf(&b, "-A KUBE-SERVICES -d %s/32 -p udp -m udp --dport %d -j KUBE-SVC-PKT\n", vip, servicePort)
	for i := range backends {
		left := len(backends) - i
		if left > 1 {
			fmt.Fprintf(&b, "-A KUBE-SVC-PKT -m statistic --mode random --probability %.5f -j KUBE-SEP-%d\n", 1/float64(left), i+1)
		} else {
			fmt.Fprintf(&b, "-A KUBE-SVC-PKT -j KUBE-SEP-%d\n", i+1)
		}
	}
	for i, be := range backends {
		fmt.Fprintf(&b, "-A KUBE-SEP-%d -p udp -m udp -j DNAT --to-destination %s:%d\n", i+1, be.Addr, servicePort)
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// dst is where a variant's frames go.
func (pa *path) dst(variant string) frameSpec {
	to := pa.plan.VIPs[0]
	switch variant {
	case vDirect:
		to = pa.backends[0].Addr
	case vXLBDNAT:
		to = pa.plan.VIPs[1] // the NAT agent's second service (natServices)
	}
	return frameSpec{SrcMAC: pa.srcMAC, DstMAC: pa.dstMAC, Src: pa.client.Addr, Dst: to, Sport: sportBase, Dport: servicePort}
}

// kernelSetUp installs a kernel variant's rules on the node (direct and
// routed have none) and returns the function that removes them.
func (pa *path) kernelSetUp(ctx context.Context, variant string) (func() error, error) {
	ns := pa.node.Namespace
	none := func() error { return nil }
	switch variant {
	case vDirect, vRouted:
		return none, nil
	case vNFT, vNFTMasq:
		if err := flushConntrack(ns); err != nil {
			return none, err
		}
		rules := nftRules(pa.plan.VIPs[0], pa.backends)
		if variant == vNFTMasq {
			rules = nftMasqRules(pa.plan.VIPs[0], pa.backends)
		}
		pa.log.add("# nftables rules (nft -f -):\n%s", rules)
		if _, err := pa.log.run(ctx, rules, "ip", "netns", "exec", ns, "nft", "-f", "-"); err != nil {
			return none, err
		}
		return func() error {
			_, err := pa.log.inNS(context.Background(), ns, "nft", "delete", "table", "ip", "xlbpkt")
			return errors.Join(err, flushConntrack(ns))
		}, nil
	case vIPTables:
		if err := flushConntrack(ns); err != nil {
			return none, err
		}
		rules := iptablesRules(pa.plan.VIPs[0], pa.backends)
		pa.log.add("# iptables rules (iptables-nft-restore):\n%s", rules)
		if _, err := pa.log.run(ctx, rules, "ip", "netns", "exec", ns, "iptables-nft-restore"); err != nil {
			return none, err
		}
		// iptables-nft keeps its tables as nf_tables tables; deleting
		// the table takes its hooks, and conntrack's, out of the
		// namespace.
		return func() error {
			_, err := pa.log.inNS(context.Background(), ns, "nft", "delete", "table", "ip", "nat")
			return errors.Join(err, flushConntrack(ns))
		}, nil
	}
	return none, fmt.Errorf("variant %q is not a kernel variant", variant)
}

// xlbServices is the service the xlb variants configure.
func (pa *path) xlbServices(fwd config.Forwarding) []labrun.Service {
	var bs []netip.Addr
	for _, b := range pa.backends {
		bs = append(bs, b.Addr)
	}
	return []labrun.Service{{Name: "pkt", VIP: pa.plan.VIPs[0], Port: servicePort, Protocol: config.UDP, Forwarding: fwd, Backends: bs}}
}

// startAgent writes the node's configuration and starts its agent, and
// returns its API socket.
func (pa *path) startAgent(ctx context.Context, fwd config.Forwarding, attach config.AttachMode) (string, error) {
	return pa.startAgentWith(ctx, pa.xlbServices(fwd), attach)
}

// startAgentWith is startAgent with the services svcs.
func (pa *path) startAgentWith(ctx context.Context, svcs []labrun.Service, attach config.AttachMode) (string, error) {
	if err := labrun.WriteConfigWith(pa.plan, pa.node, svcs, labrun.NodeOptions{AttachMode: attach}); err != nil {
		return "", err
	}
	pa.log.add("%s %s %s -- %s agent --config %s", pa.xlb, netns.ExecCommand, pa.node.Namespace, pa.xlb, labrun.ConfigPath(pa.plan, pa.node))
	if _, err := labrun.StartAgent(ctx, pa.plan, pa.node, svcs); err != nil {
		return "", err
	}
	return labrun.Socket(pa.plan, pa.node), nil
}

// reconfigure switches the running agent's service to fwd.
func (pa *path) reconfigure(ctx context.Context, fwd config.Forwarding) error {
	pa.log.add("# rewrite %s with forwarding: %s; the agent reloads it", labrun.ConfigPath(pa.plan, pa.node), fwd)
	_, err := labrun.Reconfigure(ctx, pa.plan, pa.xlbServices(fwd))
	return err
}

// stopAgent stops the node's agent and removes its data plane (the XDP
// program stays attached after the agent exits, by design), so the
// kernel variants see a node without XDP.
func (pa *path) stopAgent(ctx context.Context) error {
	err := lab.StopProcess(pa.plan.Spec.Prefix, labrun.AgentName(pa.node))
	_, cerr := pa.log.run(ctx, "", pa.xlb, netns.ExecCommand, pa.node.Namespace, "--",
		pa.xlb, "cleanup", "--config", labrun.ConfigPath(pa.plan, pa.node))
	if err := errors.Join(err, cerr); err != nil {
		return err
	}
	// Removing the pinned link drops the last reference to it, and the
	// kernel detaches the program a moment later, from a workqueue.
	deadline := time.Now().Add(3 * time.Second)
	for {
		id, err := xdpProgID(pa.node.Namespace, pa.node.Interface)
		if err != nil {
			return err
		}
		if id == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("XDP program %d is still on the node's %s 3 s after `xlb cleanup`", id, pa.node.Interface)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
