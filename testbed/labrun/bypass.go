package labrun

import (
	"errors"
	"fmt"
)

// Bypass is the evidence, from the counters' growth over a batch of
// requests, that replies go from the backends straight to the client
// (direct server return), past the xlb nodes.
//
// During the batch the clients talk only to the VIPs. Every packet they
// send reaches a node, whose XDP program forwards it: the nodes together
// forward what the clients sent. If replies passed a node as well, that
// node's interface would receive (and send) many more packets than its
// XDP program forwarded; with DSR it sees only a handful more (ARP, IPv6
// neighbour discovery), however many replies the clients receive.
type Bypass struct {
	// ClientSent and ClientReceived count the packets of the clients'
	// interfaces: requests and replies.
	ClientSent, ClientReceived uint64
	// Forwarded is what the nodes' XDP programs forwarded, all nodes.
	Forwarded uint64
	// Nodes holds each node's counts.
	Nodes []NodeBypass
	// Slack is how many packets per node are tolerated beyond what the
	// XDP program forwarded, and how far Forwarded may be off
	// ClientSent: ARP and IPv6 neighbour discovery.
	Slack uint64
}

// NodeBypass is one node's share of the evidence.
type NodeBypass struct {
	Name      string
	Forwarded uint64 // by the XDP program
	Received  uint64 // by the interface
	Sent      uint64 // by the interface, XDP_TX included
}

// Unexplained is the number of packets the node's interface received or
// sent beyond those its XDP program forwarded (the larger of the two).
func (n NodeBypass) Unexplained() uint64 {
	return max(minus(n.Received, n.Forwarded), minus(n.Sent, n.Forwarded))
}

// minus is a - b, or 0 if b is larger.
func minus(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// CheckBypass evaluates the counters' growth d over a batch of requests
// in which the clients sent nothing but requests to the VIPs. It returns
// the evidence, and an error saying what contradicts direct server return
// if anything does.
func CheckBypass(d Snapshot, requests int) (Bypass, error) {
	return CheckBypassWithin(d, requests, 0)
}

// CheckBypassWithin is CheckBypass for nodes that also exchange control
// traffic with the router during the batch (BFD every 100 ms, BGP
// keepalives): each node's interface may receive and send up to control
// packets more than the neighbour protocols account for.
func CheckBypassWithin(d Snapshot, requests int, control uint64) (Bypass, error) {
	var b Bypass
	for _, c := range d.Clients {
		b.ClientSent += c.Link.TxPackets
		b.ClientReceived += c.Link.RxPackets
	}
	for _, n := range d.Nodes {
		b.Forwarded += n.Forwarded
		b.Nodes = append(b.Nodes, NodeBypass{Name: n.Name, Forwarded: n.Forwarded, Received: n.Link.RxPackets, Sent: n.Link.TxPackets})
	}
	// A few packets per node for the neighbour protocols, and a little
	// more for a long batch, during which entries expire and are probed.
	b.Slack = 8 + b.ClientSent/500
	nodeSlack := b.Slack + control

	var errs []error
	if requests < 1 || b.ClientReceived < uint64(requests) {
		errs = append(errs, fmt.Errorf("the clients received %d packets for %d requests: replies are missing", b.ClientReceived, requests))
	}
	if b.ClientReceived <= 4*b.Slack {
		errs = append(errs, fmt.Errorf("%d replies are too few to tell them from %d packets of noise: send more requests", b.ClientReceived, b.Slack))
	}
	if b.Forwarded+b.Slack < b.ClientSent || b.Forwarded > b.ClientSent+b.Slack {
		errs = append(errs, fmt.Errorf("the nodes' XDP programs forwarded %d packets but the clients sent %d", b.Forwarded, b.ClientSent))
	}
	for _, n := range b.Nodes {
		if u := n.Unexplained(); u > nodeSlack {
			errs = append(errs, fmt.Errorf("%s: its interface received %d and sent %d packets, but its XDP program forwarded %d: %d packets beyond the client's requests (more than %d), replies passing through the node?",
				n.Name, n.Received, n.Sent, n.Forwarded, u, nodeSlack))
		}
	}
	return b, errors.Join(errs...)
}
