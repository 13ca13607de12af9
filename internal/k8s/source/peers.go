package source

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/k8s/api"
)

// peers adds the BGPPeers that select this node to d.cfg's bgp section,
// creating the section when the base has none. Peers come after the
// base's, by BGPPeer name. A peer that cannot be used is left out with a
// problem; the others are kept.
func peers(st settings, c cluster, d *desired) []problem {
	var probs []problem
	list := slices.Clone(c.peers)
	slices.SortFunc(list, func(a, b *unstructured.Unstructured) int { return strings.Compare(a.GetName(), b.GetName()) })

	var nodeLabels labels.Set
	if c.node != nil {
		nodeLabels = labels.Set(c.node.Labels)
	}
	base := st.base.BGP
	var section *config.BGP
	if base != nil {
		b := *base
		b.Peers = slices.Clone(base.Peers)
		section = &b
	}
	for _, u := range list {
		obj := "BGPPeer " + u.GetName()
		var bp api.BGPPeer
		if err := api.FromUnstructured(u, &bp); err != nil {
			probs = append(probs, problem{obj, fmt.Sprintf("cannot be read: %v", err),
				"correct the BGPPeer as the error says (kubectl edit bgppeer " + u.GetName() + "); if it matches the schema, install the CustomResourceDefinitions of this xlb version (deploy/crds)"})
			continue
		}
		if len(bp.Spec.NodeSelectors) > 0 && c.node == nil {
			probs = append(probs, problem{obj, fmt.Sprintf("has nodeSelectors, but this node's Node object %q does not exist, so they cannot match; check kubernetes.nodeName (NODE_NAME)", nodeName(st)),
				"set kubernetes.nodeName, or NODE_NAME (the DaemonSet sets it from spec.nodeName), to the name of this node's Node object; the peer is taken in once the Node is seen"})
			continue
		}
		ok, err := selects(bp.Spec.NodeSelectors, nodeLabels)
		if err != nil {
			probs = append(probs, problem{obj, fmt.Sprintf("spec.nodeSelectors%v; the peer is left out", err),
				"correct spec.nodeSelectors (label selectors, as in a Deployment's) with kubectl edit bgppeer " + u.GetName()})
			continue
		}
		if !ok {
			continue
		}
		if ref := bp.Spec.PasswordSecret; ref != nil && ref.Name != "" {
			ns := ref.Namespace
			if ns == "" {
				ns = st.secretNamespace
			}
			d.secrets[ns+"/"+ref.Name] = true
		}
		if bp.Spec.MyASN == 0 || bp.Spec.MyASN == asTrans {
			probs = append(probs, problem{obj, fmt.Sprintf("spec.myASN %d is not an AS number a node can have; the peer is left out", bp.Spec.MyASN),
				"set spec.myASN to this node's AS number (kubectl edit bgppeer " + u.GetName() + ")"})
			continue
		}
		if section == nil {
			// The first BGPPeer that selects this node sets the AS, as
			// the base has no bgp section to say it.
			section = &config.BGP{ASN: bp.Spec.MyASN, HoldTime: peerHoldTime, Keepalive: peerHoldTime / 3,
				DrainTime: config.DefaultDrainTime}
		}
		if bp.Spec.MyASN != section.ASN {
			probs = append(probs, problem{obj, fmt.Sprintf("spec.myASN %d differs from this node's AS %d (%s); a node has one AS: the peer is left out", bp.Spec.MyASN, section.ASN, asnFrom(base)),
				fmt.Sprintf("set spec.myASN to %d, or narrow spec.nodeSelectors so that the BGPPeer no longer selects this node", section.ASN)})
			continue
		}
		p, why := peer(bp.Spec, section, base != nil, st.secretNamespace, c.secret)
		if why != "" {
			probs = append(probs, problem{obj, why + "; the peer is left out until this is corrected",
				"correct what the reason names: the BGPPeer (kubectl edit bgppeer " + u.GetName() + "), its password Secret, or the agent's permission to read it; the peer is taken in as soon as that changes"})
			continue
		}
		if p.Passive && section.ListenPort == 0 {
			section.ListenPort = config.DefaultBGPPort
		}
		section.Peers = append(section.Peers, p)
		d.peerFrom = append(d.peerFrom, obj)
	}
	if base == nil && section != nil && len(section.Peers) == 0 {
		// The section came from the BGPPeers alone, and none is left.
		section = nil
	}
	d.cfg.BGP = section
	return probs
}

// asTrans (RFC 6793) only stands in for 4-byte AS numbers.
const asTrans = 23456

func nodeName(st settings) string {
	if k := st.base.Kubernetes; k != nil {
		return k.NodeName
	}
	return ""
}

func asnFrom(base *config.BGP) string {
	if base != nil {
		return "the file's bgp.asn"
	}
	return "the myASN of the first BGPPeer, by name, that selects this node"
}

// selects reports whether any of the selectors matches the node's labels;
// no selectors select every node.
func selects(sels []api.LabelSelector, node labels.Set) (bool, error) {
	if len(sels) == 0 {
		return true, nil
	}
	for i := range sels {
		s, err := sels[i].AsSelector()
		if err != nil {
			return false, fmt.Errorf("[%d]: %w", i, err)
		}
		if s.Matches(node) {
			return true, nil
		}
	}
	return false, nil
}

// peer converts a BGPPeer's spec into a peer of section. Timers the spec
// leaves out come from the base's bgp section (inherit), else the API's
// defaults, so that a file's holdTime applies to the cluster's peers too.
// The values are checked later, with the file's rules; why says what
// keeps the peer out.
func peer(s api.BGPPeerSpec, section *config.BGP, inherit bool, secretNS string, secret func(ns, name string) (*corev1.Secret, bool)) (p config.Peer, why string) {
	a, err := netip.ParseAddr(strings.TrimSpace(s.PeerAddress))
	if err != nil {
		return p, fmt.Sprintf("spec.peerAddress %q is not an IP address", s.PeerAddress)
	}
	p = config.Peer{Address: a, ASN: s.PeerASN, Port: s.PeerPort, Multihop: s.EBGPMultiHop, Passive: s.Passive, MaxPrefixes: s.MaxPrefixes}
	if p.Port == 0 {
		p.Port = config.DefaultBGPPort
	}
	if p.MaxPrefixes == 0 {
		p.MaxPrefixes = config.DefaultMaxPrefixes
	}
	hold, keepalive := peerHoldTime, time.Duration(0)
	if inherit {
		hold, keepalive = section.HoldTime, section.Keepalive
	}
	if s.HoldTime != nil {
		hold, keepalive = s.HoldTime.Duration, 0
	}
	if s.KeepaliveTime != nil {
		keepalive = s.KeepaliveTime.Duration
	}
	if keepalive == 0 {
		keepalive = (hold / 3).Truncate(time.Second)
	}
	if hold == 0 {
		keepalive = 0
	}
	p.HoldTime, p.Keepalive = hold, keepalive
	if b := s.BFD; b != nil {
		p.BFD = &config.BFD{MinRx: config.DefaultBFDInterval, MinTx: config.DefaultBFDInterval, Multiplier: config.DefaultBFDMultiplier}
		if b.MinRx != nil {
			p.BFD.MinRx = b.MinRx.Duration
		}
		if b.MinTx != nil {
			p.BFD.MinTx = b.MinTx.Duration
		}
		if b.Multiplier != 0 {
			p.BFD.Multiplier = b.Multiplier
		}
	}
	if g := s.GracefulRestart; g != nil {
		p.GracefulRestart = &config.GracefulRestart{RestartTime: config.DefaultRestartTime}
		if g.RestartTime != nil {
			t := g.RestartTime.Duration
			if t < config.MinRestartTime || t > config.MaxRestartTime || t%time.Second != 0 {
				return p, fmt.Sprintf("spec.gracefulRestart.restartTime %s is not whole seconds from %s to %s", t, config.MinRestartTime, config.MaxRestartTime)
			}
			p.GracefulRestart.RestartTime = t
		}
	}
	if ref := s.PasswordSecret; ref != nil {
		ns := ref.Namespace
		if ns == "" {
			ns = secretNS
		}
		if ref.Name == "" {
			return p, "spec.passwordSecret has no name"
		}
		sec, known := secret(ns, ref.Name)
		switch {
		case !known:
			return p, fmt.Sprintf("spec.passwordSecret: Secret %s/%s not read yet; if this lasts, the agent may not read it: name it in the resourceNames of the agent's Role in namespace %s (Helm: agent.bgpPasswordSecrets)", ns, ref.Name, ns)
		case sec == nil:
			// Without its password the session would be refused by a
			// peer that expects one, or, worse, run unauthenticated.
			return p, fmt.Sprintf("spec.passwordSecret: Secret %s/%s does not exist (or the agent may not read it): create it with the key %q", ns, ref.Name, passwordKey)
		}
		pw, ok := sec.Data[passwordKey]
		if !ok {
			return p, fmt.Sprintf("spec.passwordSecret: Secret %s/%s has no key %q", ns, ref.Name, passwordKey)
		}
		p.Password = string(pw)
	}
	return p, ""
}
