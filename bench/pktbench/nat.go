package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
	"github.com/xlbproject/xlb/testbed/netns"
)

// replyTuple is what a backend's reply in a session carries, as the
// node's state predicts it: its source (the backend's address and port)
// and its destination (the node's NAT address and port, or the client).
type replyTuple struct{ Src, Dst netip.AddrPort }

// replyTargets picks the replies that from sends: the destination
// address they all share, and their destination ports, sorted and each
// once. The generator varies only the port, so replies to more than one
// address are an error, as are none or more than portSlots.
func replyTargets(from netip.AddrPort, replies []replyTuple) (netip.Addr, []uint16, error) {
	var dst netip.Addr
	seen := map[uint16]bool{}
	var ports []uint16
	for _, r := range replies {
		if unmapPort(r.Src) != from {
			continue
		}
		d := unmapPort(r.Dst)
		switch {
		case !dst.IsValid():
			dst = d.Addr()
		case d.Addr() != dst:
			return netip.Addr{}, nil, fmt.Errorf("the replies from %s go to %s and to %s: the generator sends to one address", from, dst, d.Addr())
		}
		if !seen[d.Port()] {
			seen[d.Port()] = true
			ports = append(ports, d.Port())
		}
	}
	if len(ports) == 0 {
		return netip.Addr{}, nil, fmt.Errorf("no session has replies from %s (of %d sessions): the forward run opened none to that backend", from, len(replies))
	}
	if len(ports) > portSlots {
		return netip.Addr{}, nil, fmt.Errorf("%d reply ports from %s: the generator's table holds %d", len(ports), from, portSlots)
	}
	slices.Sort(ports)
	return dst, ports, nil
}

func unmapPort(a netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
}

// sessionReplies lists the replies of every session of the UDP service
// at vip:servicePort that the agent on socket holds.
func sessionReplies(socket string, vip netip.Addr) ([]replyTuple, error) {
	ss, err := api.GetSessions(socket, api.SessionQuery{VIP: vip, Port: servicePort, Protocol: "udp", Max: api.MaxSessionSample})
	if err != nil {
		return nil, fmt.Errorf("sessions of %s: %w", vip, err)
	}
	return sessionTuples(ss)
}

// sessionTuples turns a session listing into replies: a backend answers
// the source it saw (the node's NAT address and port, or the client).
// A listing that was cut short is an error: the generator would miss
// sessions.
func sessionTuples(ss *api.Sessions) ([]replyTuple, error) {
	var out []replyTuple
	for _, s := range ss.Services {
		if s.More {
			return nil, fmt.Errorf("service %s has more than the %d sessions listed", s.Name, len(s.Sessions))
		}
		for _, x := range s.Sessions {
			out = append(out, replyTuple{Src: x.Backend, Dst: x.Source})
		}
	}
	return out, nil
}

// conntrackReplies lists the reply tuples of namespace ns's UDP
// conntrack entries.
func conntrackReplies(ns string) ([]replyTuple, error) {
	var flows []*netlink.ConntrackFlow
	err := netns.Do(ns, func() error {
		var err error
		flows, err = netlink.ConntrackTableList(netlink.ConntrackTable, netlink.FAMILY_V4)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("conntrack of %s: %w", ns, err)
	}
	return conntrackTuples(flows), nil
}

// conntrackTuples is the reply tuple of every UDP flow.
func conntrackTuples(flows []*netlink.ConntrackFlow) []replyTuple {
	var out []replyTuple
	for _, f := range flows {
		if f.Reverse.Protocol != ipProtoUDP {
			continue
		}
		src, ok1 := netip.AddrFromSlice(f.Reverse.SrcIP)
		dst, ok2 := netip.AddrFromSlice(f.Reverse.DstIP)
		if !ok1 || !ok2 {
			continue
		}
		out = append(out, replyTuple{Src: netip.AddrPortFrom(src.Unmap(), f.Reverse.SrcPort), Dst: netip.AddrPortFrom(dst.Unmap(), f.Reverse.DstPort)})
	}
	return out
}

// reverse is the flow of from's replies: frames from from's servicePort
// to dst, each to one of dports, sent out of from's interface towards
// the router and counted at the client's sockets.
func (pa *path) reverse(from lab.Host, dst netip.Addr, dports []uint16) (flow, error) {
	src, err := linkMAC(from.Namespace, from.Interface)
	if err != nil {
		return flow{}, err
	}
	gw, err := linkMAC(pa.plan.Router, pa.plan.BackendSegment.Bridge)
	if err != nil {
		return flow{}, err
	}
	return flow{
		spec: frameSpec{SrcMAC: src, DstMAC: gw, Src: from.Addr, Dst: dst, Sport: servicePort, Dport: dports[0]},
		ns:   from.Namespace, ifname: from.Interface, dports: dports, reverse: true,
	}, nil
}

// openClientSinks opens a never-read UDP socket on every source port of
// the generated flows in the client's namespace, once: the reverse
// runs' frames end there.
func (pa *path) openClientSinks() error {
	if len(pa.clientSinks) > 0 {
		return nil
	}
	err := netns.Do(pa.client.Namespace, func() error {
		for p := sportBase; p < sportBase+1<<sportBits; p++ {
			c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(pa.client.Addr, uint16(p))))
			if err != nil {
				return err
			}
			pa.clientSinks = append(pa.clientSinks, c)
			if err := c.SetReadBuffer(sinkBuffer); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("the client's sink sockets: %w", err)
	}
	pa.log.add("# in the client: a UDP socket on each of %s:%d-%d with SO_RCVBUF %d, never read", pa.client.Addr, sportBase, sportBase+1<<sportBits-1, sinkBuffer)
	return nil
}

// natServices are the NAT variants' services, in one agent: nat on the
// first VIP, dnat on the second.
func (pa *path) natServices() []labrun.Service {
	nat := pa.xlbServices(config.NAT)
	dnat := pa.xlbServices(config.DNAT)
	nat[0].Name, dnat[0].Name, dnat[0].VIP = "pkt-nat", "pkt-dnat", pa.plan.VIPs[1]
	return append(nat, dnat...)
}

// natVariants runs the NAT variants of a round, each forward and then
// reverse: the reverse floors, xlb-nat and xlb-dnat with one agent,
// then nftables-masq. In section sectionNATStats it leaves out the
// floors, which have no program on the node.
func (m *measurer) natVariants(ctx context.Context, section string, round int) error {
	pa := m.pa
	if err := pa.openClientSinks(); err != nil {
		return err
	}
	if section == sectionNAT {
		if err := m.reverseFloors(ctx, round); err != nil {
			return err
		}
	}
	err := m.withNATAgent(ctx, func(socket string) error {
		for _, v := range []string{vXLBNAT, vXLBDNAT} {
			vip := pa.dst(v).Dst
			err := m.natPair(ctx, section, v, round, socket, func() ([]replyTuple, error) { return sessionReplies(socket, vip) })
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	undo, err := pa.kernelSetUp(ctx, vNFTMasq)
	if err != nil {
		return errors.Join(fmt.Errorf("%s: %w", vNFTMasq, err), undo())
	}
	err = m.natPair(ctx, section, vNFTMasq, round, "", func() ([]replyTuple, error) { return conntrackReplies(pa.node.Namespace) })
	if uerr := undo(); uerr != nil {
		err = errors.Join(err, fmt.Errorf("%s: remove its rules: %w", vNFTMasq, uerr))
	}
	return err
}

// reverseFloors measures the reverse direction's floors: the first
// backend's frames to every sink port of the client straight through
// the router (direct), and through the node as a plain router (routed:
// the router sends them to the node as it does dnat's replies, and the
// node, without XDP, forwards them back).
func (m *measurer) reverseFloors(ctx context.Context, round int) (err error) {
	pa, from := m.pa, m.pa.backends[0]
	var ports []uint16
	for p := sportBase; p < sportBase+1<<sportBits; p++ {
		ports = append(ports, uint16(p))
	}
	fl, err := pa.reverse(from, pa.client.Addr, ports)
	if err != nil {
		return err
	}
	o := m.opts(sectionNAT, vDirect, round, []int{0}, "")
	o.Direction = dirReverse
	if err := m.oneFlow(ctx, fl, o); err != nil {
		return err
	}
	defer func() {
		if uerr := lab.UnrouteReplies(context.Background(), pa.plan, from); uerr != nil {
			err = errors.Join(err, uerr)
		}
	}()
	if err := lab.RouteReplies(ctx, pa.plan, from, pa.node); err != nil {
		return err
	}
	o.Variant = vRouted
	return m.oneFlow(ctx, fl, o)
}

// natOpenFrames is how many frames open the sessions before a NAT
// variant's runs: 12 per flow leave each flow without a frame with
// probability e^-12, so that all 4096 get a session.
const natOpenFrames = 12 << sportBits

// natPair measures NAT variant v in both directions, in the state of a
// flow that has seen traffic both ways: the client's frames open a
// session (or conntrack entry) per flow; replies lists them; the replies
// of backend 1's sessions are measured (reverse); backend 2 answers its
// sessions too, unmeasured; and then the client's frames are measured
// (forward), every session having seen replies.
func (m *measurer) natPair(ctx context.Context, section, v string, round int, socket string, replies func() ([]replyTuple, error)) error {
	pa := m.pa
	o := m.opts(section, v, round, []int{0}, socket)
	fwd := pa.forward(v)
	if err := pa.prime(ctx, fwd, natOpenFrames, o); err != nil {
		return fmt.Errorf("%s: open the sessions: %w", v, err)
	}
	rs, err := replies()
	if err != nil {
		return fmt.Errorf("%s: %w", v, err)
	}
	var revs []flow
	for _, b := range pa.backends {
		dst, ports, err := replyTargets(netip.AddrPortFrom(b.Addr, servicePort), rs)
		if err != nil {
			return fmt.Errorf("%s: %w", v, err)
		}
		fl, err := pa.reverse(b, dst, ports)
		if err != nil {
			return fmt.Errorf("%s: %w", v, err)
		}
		m.progress("%s: %s answers %d sessions at %s, ports %d–%d", v, b.Name, len(ports), dst, ports[0], ports[len(ports)-1])
		revs = append(revs, fl)
	}
	o.Direction = dirReverse
	if err := m.oneFlow(ctx, revs[0], o); err != nil {
		return err
	}
	for _, fl := range revs[1:] {
		if err := pa.prime(ctx, fl, uint64(max(o.Warmup, 12*uint64(len(fl.dports)))), o); err != nil {
			return fmt.Errorf("%s: the other backends' replies: %w", v, err)
		}
	}
	o.Direction = dirForward
	return m.oneFlow(ctx, fwd, o)
}

// prime sends n frames of fl from o's CPUs without measuring them: what
// opens sessions, or answers them, before a measured run.
func (pa *path) prime(ctx context.Context, fl flow, n uint64, o runOpts) error {
	frame, err := udpFrame(fl.spec)
	if err != nil {
		return err
	}
	gen, err := newGenerator(frame, fl.dports)
	if err != nil {
		return err
	}
	defer gen.Close()
	sr, err := gen.send(ctx, frame, sendOpts{NS: fl.ns, Ifname: fl.ifname, CPUs: o.CPUs, Count: n, MaxChunk: 1 << 18, Deadline: time.Now().Add(o.Timeout)})
	if err != nil {
		return err
	}
	if sr.Sent < n {
		return fmt.Errorf("sent %d of %d frames within %s", sr.Sent, n, o.Timeout)
	}
	return nil
}

// withNATAgent starts the node's agent with the NAT services, routes the
// backends' replies to the clients through the node (what dnat needs;
// nat's replies go to the node's own address anyway), runs fn with the
// agent's socket, and undoes it all whatever happened.
func (m *measurer) withNATAgent(ctx context.Context, fn func(socket string) error) (err error) {
	pa := m.pa
	defer func() {
		for _, b := range pa.backends {
			if uerr := lab.UnrouteReplies(context.Background(), pa.plan, b); uerr != nil {
				err = errors.Join(err, uerr)
			}
		}
	}()
	for _, b := range pa.backends {
		pa.log.add("# lab.RouteReplies(%s via %s): ip -n %s rule add from %s/32 to %s iif %s lookup <table>; that table: %s via %s",
			b.Name, pa.node.Name, pa.plan.Router, b.Addr, pa.plan.ClientSegment.Subnet, pa.plan.BackendSegment.Bridge, pa.plan.ClientSegment.Subnet, pa.node.Addr)
		if err := lab.RouteReplies(ctx, pa.plan, b, pa.node); err != nil {
			return err
		}
	}
	socket, err := pa.startAgentWith(ctx, pa.natServices(), config.AttachNative)
	defer func() {
		if serr := pa.stopAgent(context.Background()); serr != nil {
			err = errors.Join(err, fmt.Errorf("stop the agent: %w", serr))
		}
	}()
	if err != nil {
		return err
	}
	return fn(socket)
}
