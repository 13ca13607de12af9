package config

import (
	"fmt"
	"net/netip"

	"github.com/xlbproject/xlb/internal/config/schema"
)

// announce checks what node.announce asks of the other sections: with
// l2, an l2 section and no bgp one (a VIP answered by ARP from one node
// and routed to every node would reach the nodes twice over); with bgp,
// no l2 section, which would be silently ignored.
func (c *checker) announce(doc *schema.Document, cfg *Config) {
	mode := doc.Node.V.Announce
	modeAt := withLine("node.announce", mode.At.Value)
	if cfg.Node.Announce != AnnounceL2 {
		if doc.L2.Given {
			c.errorf(doc.L2.At.Key, "l2", "is read only with node.announce: l2, and node.announce is bgp (the default); set announce: l2 in the node section, or remove the l2 section")
		}
		return
	}
	if doc.BGP.Given {
		c.errorf(doc.BGP.At.Key, "bgp", "node.announce is l2 (%s): the VIPs are answered by ARP from one elected node, and no route is announced; remove the bgp section, or set announce: bgp to route the VIPs over BGP instead", modeAt)
	}
	if doc.Kubernetes.Given {
		c.errorf(doc.Kubernetes.At.Key, "kubernetes", "node.announce: l2 (%s) is for a file's services and nodes; layer-2 mode from a cluster is not available yet: remove the kubernetes section, or set announce: bgp", modeAt)
	}
	if !doc.L2.Given {
		c.missing(mode.At.Value, "l2", "required with node.announce: l2: add a top-level l2 section listing the nodes that share the VIPs, e.g. l2: {nodes: [{name: a, address: 10.0.1.2}, {name: b, address: 10.0.1.3}]}")
	} else {
		cfg.L2 = c.l2(doc.L2, "l2")
	}
}

// l2 checks the l2 section.
func (c *checker) l2(f schema.Field[schema.L2], path string) *L2 {
	l := &L2{Port: DefaultL2Port, Heartbeat: DefaultL2Heartbeat, DeadAfter: DefaultL2DeadAfter}
	if f.Bad {
		return l
	}
	v := f.V
	at := func(name string) string { return join(path, name) }
	if n, ok := c.integer(v.Port, at("port"), 1, 65535); ok {
		l.Port = uint16(n)
	}
	if g := v.Heartbeat; valid(g) {
		if t := g.V.D; t < MinL2Heartbeat || t > MaxL2Heartbeat {
			c.errorf(g.At.Node, at("heartbeat"), "%s is out of range %s..%s", schema.Show(g.V.String()), MinL2Heartbeat, MaxL2Heartbeat)
		} else {
			l.Heartbeat = t
			l.DeadAfter = L2DeadAfterBeats * t
		}
	}
	if g := v.DeadAfter; valid(g) {
		lo := MinL2DeadAfterBeats * l.Heartbeat
		switch t := g.V.D; {
		case t < lo:
			c.errorf(g.At.Node, at("deadAfter"), "%s is below %d heartbeats (%s): one lost heartbeat would move the VIPs; raise it, or shorten l2.heartbeat", schema.Show(g.V.String()), MinL2DeadAfterBeats, lo)
		case t > MaxL2DeadAfter:
			c.errorf(g.At.Node, at("deadAfter"), "%s is above the maximum %s", schema.Show(g.V.String()), MaxL2DeadAfter)
		default:
			l.DeadAfter = t
		}
	}
	var nodeAt schema.Line
	if g := v.NodeName; valid(g) {
		if why := checkL2Name(g.V); why != "" {
			c.errorf(g.At.Value, at("nodeName"), "%s", why)
		} else {
			l.NodeName, nodeAt = g.V, g.At.Value
		}
	}
	if !v.Nodes.Given {
		c.missing(f.At.Key, at("nodes"), "required: list every node that shares the VIPs, this one included, e.g. nodes: [{name: a, address: 10.0.1.2}, {name: b, address: 10.0.1.3}]")
		return l
	}
	l.Nodes = c.l2Nodes(v.Nodes, at("nodes"))
	if v.Nodes.Flawed {
		return l
	}
	c.l2Self(l, v, path, nodeAt)
	return l
}

// l2Nodes checks l2.nodes.
func (c *checker) l2Nodes(f schema.Field[[]schema.Field[schema.L2Node]], path string) []L2Node {
	if f.Bad {
		return nil
	}
	switch {
	case len(f.V) == 0:
		c.errorf(f.At.Key, path, "the list is empty; list every node that shares the VIPs, this one included, e.g. nodes: [{name: a, address: 10.0.1.2}]")
		return nil
	case len(f.V) > MaxL2Nodes:
		c.errorf(f.At.Key, path, "%d nodes exceed the limit of %d: every node sends a heartbeat to every other one", len(f.V), MaxL2Nodes)
		return nil
	}
	names := map[string]peerAt{}
	addrs := map[netip.Addr]peerAt{}
	out := make([]L2Node, 0, len(f.V))
	for i, item := range f.V {
		if item.Bad {
			continue
		}
		p, v := index(path, i), item.V
		var n L2Node
		ok := true
		if g := v.Name; !g.Given {
			c.missing(item.At.Node, join(p, "name"), "required: name the node, e.g. name: a; every node must list the same names")
			ok = false
		} else if valid(g) {
			first, dup := names[g.V]
			switch why := checkL2Name(g.V); {
			case why != "":
				c.errorf(g.At.Value, join(p, "name"), "%s", why)
				ok = false
			case dup:
				c.errorf(g.At.Value, join(p, "name"), "%s is already the name of %s%s; give each node its own name", g.V, first.path, lineNote(first.line))
				ok = false
			default:
				n.Name = g.V
				names[g.V] = peerAt{p, item.At.Key}
			}
		} else {
			ok = false
		}
		if g := v.Address; !g.Given {
			c.missing(item.At.Node, join(p, "address"), "required: give the node's IPv4 address, its node.address, e.g. address: 10.0.1.2")
			ok = false
		} else if valid(g) {
			a, why := parseUnicast4(string(g.V), "heartbeats go between the nodes' IPv4 addresses: write the node's node.address")
			first, dup := addrs[a]
			switch {
			case why != "":
				c.errorf(g.At.Value, join(p, "address"), "%s", why)
				ok = false
			case dup:
				c.errorf(g.At.Value, join(p, "address"), "%s is already the address of %s%s; list each node once", a, first.path, lineNote(first.line))
				ok = false
			default:
				n.Address = a
				addrs[a] = peerAt{p, item.At.Key}
			}
		} else {
			ok = false
		}
		if ok {
			out = append(out, n)
		}
	}
	return out
}

// l2Self finds this node in l.Nodes: by l2.nodeName, else by the node
// address. Its entry's address must be the node address, which its
// heartbeats come from.
func (c *checker) l2Self(l *L2, v schema.L2, path string, nameAt schema.Line) {
	if l.NodeName == "" {
		if v.NodeName.Given {
			return // reported
		}
		if !c.nodeAddr.IsValid() {
			c.missing(v.Nodes.At.Key, join(path, "nodeName"), "required here: node.address is not set, so this node cannot be found in l2.nodes by its address; write nodeName: NAME, or set node.address")
			return
		}
		for _, n := range l.Nodes {
			if n.Address == c.nodeAddr {
				l.NodeName = n.Name
				return
			}
		}
		c.errorf(v.Nodes.At.Key, join(path, "nodes"), "no node has this node's address %s (%s); add this node to the list, or write l2.nodeName", c.nodeAddr, c.nodeFrom)
		return
	}
	for i, n := range l.Nodes {
		if n.Name != l.NodeName {
			continue
		}
		if c.nodeAddr.IsValid() && n.Address != c.nodeAddr {
			c.errorf(nameAt, join(path, "nodeName"), "names %s (%s), whose address %s is not this node's %s (%s): heartbeats leave from the node address; correct the address, or the name",
				n.Name, withLine(index(join(path, "nodes"), i), v.Nodes.V[i].At.Key), n.Address, c.nodeAddr, c.nodeFrom)
		}
		return
	}
	c.errorf(nameAt, join(path, "nodeName"), "%s is not in l2.nodes; add it there with this node's address, or correct the name", l.NodeName)
}

// checkL2Name: a node's name is a DNS label, so that it fits any
// heartbeat and reads the same in every log.
func checkL2Name(s string) string {
	if !isDNSLabel(s) || len(s) > MaxL2NodeName {
		return fmt.Sprintf("%s is not a valid node name: 1 to %d lower-case letters, digits and '-', starting and ending with a letter or digit", schema.Show(s), MaxL2NodeName)
	}
	return ""
}

// String sums the election up for logs and status.
func (l *L2) String() string {
	return fmt.Sprintf("node %s of %d, heartbeat %s, dead after %s", l.NodeName, len(l.Nodes), l.Heartbeat, l.DeadAfter)
}
