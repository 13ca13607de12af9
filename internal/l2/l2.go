// Package l2 is layer-2 mode (node.announce: l2): it makes this node
// answer ARP for the VIPs the election (package l2/elect) gives it, by
// programming the LB program's l2_owned map with an expiry it moves
// forward at every heartbeat, and announces each VIP it gains with
// gratuitous ARP (IPv4) or an unsolicited neighbour advertisement (IPv6). docs/decisions/0009-layer2-arp.md says why.
package l2

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/xlbproject/xlb/internal/announce"
	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
)

// GARPSchedule is when a node that gains a VIP sends gratuitous ARP (an
// unsolicited neighbour advertisement for an IPv6 VIP) for it, after the
// gain: at once, so that clients move within a round trip,
// then three repeats, for a frame lost on the way and a switch still
// relearning its ports. A client that missed all four asks again when its
// entry goes stale, and the new owner answers.
var GARPSchedule = []time.Duration{0, 250 * time.Millisecond, time.Second, 3 * time.Second}

// Dataplane is what the speaker programs: the LB's l2_owned map.
type Dataplane interface {
	SetL2Owned(owned []netip.Addr, mac net.HardwareAddr, expires time.Duration) error
}

// Options configure New.
type Options struct {
	Config    *config.L2
	Interface string
	Dataplane Dataplane
	// Monotonic reads the clock the data plane's expiry is in.
	Monotonic func() (time.Duration, error)
	Logger    *slog.Logger
	// Election decides the owners; nil: heartbeats among Config.Nodes
	// (package l2/elect). A cluster passes its Leases (package l2/lease).
	Election Election
}

// Speaker answers ARP for this node's share of the VIPs.
type Speaker struct {
	cfg     config.L2
	iface   string
	mac     net.HardwareAddr
	dp      Dataplane
	mono    func() (time.Duration, error)
	log     *slog.Logger
	elector Election
	garp    func(netip.Addr) error   // sends one gratuitous ARP
	join    func([]netip.Addr) error // joins the IPv6 VIPs' solicited-node groups
	closeG  func()
	now     func() time.Time

	mu     sync.Mutex
	routes []announce.Route // every VIP, from Sync
	alive  []string
	since  map[netip.Addr]time.Time // owned VIPs, since when
	garpAt map[netip.Addr]time.Time // gained VIPs: when they were gained
	garpN  map[netip.Addr]int       // and how many of GARPSchedule were sent
	err    string
	left   bool
}

// New opens the election's socket and the gratuitous ARP sender on the
// interface.
func New(o Options) (*Speaker, error) {
	ifc, err := net.InterfaceByName(o.Interface)
	if err != nil {
		return nil, fmt.Errorf("layer-2 mode: interface %s: %w", o.Interface, err)
	}
	if len(ifc.HardwareAddr) != 6 {
		return nil, fmt.Errorf("layer-2 mode: interface %s has no Ethernet address (%v); ARP needs one", o.Interface, ifc.HardwareAddr)
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	e := o.Election
	if e == nil {
		if e, err = newHeartbeats(o.Config, log); err != nil {
			return nil, err
		}
	}
	g, err := newGARPSender(ifc.Index, ifc.HardwareAddr)
	if err != nil {
		return nil, err
	}
	return &Speaker{cfg: *o.Config, iface: o.Interface, mac: ifc.HardwareAddr, dp: o.Dataplane, mono: o.Monotonic, log: log,
		elector: e, garp: g.send, join: g.join, closeG: g.close, now: time.Now, since: map[netip.Addr]time.Time{}, garpAt: map[netip.Addr]time.Time{}, garpN: map[netip.Addr]int{}}, nil
}

// Sync takes every VIP with whether this node can serve it; the next
// heartbeat (or this call, once Run runs) answers for the owned ones.
func (s *Speaker) Sync(routes []announce.Route) error {
	s.mu.Lock()
	s.routes = slices.Clone(routes)
	alive := s.alive
	s.mu.Unlock()
	var servable []netip.Addr
	for _, r := range routes {
		if r.Serve {
			servable = append(servable, r.Prefix.Addr())
		}
	}
	s.elector.SetServable(servable)
	if alive == nil {
		return nil // Run has not started
	}
	return s.apply(alive)
}

// Run takes part in the election until ctx ends; call Leave first to
// hand the VIPs over at once.
func (s *Speaker) Run(ctx context.Context) {
	defer s.closeG()
	s.elector.Run(ctx, func(alive []string) {
		if err := s.apply(alive); err != nil {
			s.mu.Lock()
			first := s.err == ""
			s.err = err.Error()
			s.mu.Unlock()
			if first {
				s.log.Warn("layer-2 mode: the ARP answers could not be programmed", "error", err,
					"fix", "see the error; the agent tries again at every heartbeat")
			}
		}
	})
}

// Leave stops answering at once and tells the other nodes, which take
// the VIPs over without waiting for the dead time.
func (s *Speaker) Leave() {
	s.mu.Lock()
	s.left = true
	s.mu.Unlock()
	if err := s.dp.SetL2Owned(nil, s.mac, 0); err != nil {
		s.log.Warn("layer-2 mode: could not stop answering ARP on the way out", "error", err,
			"fix", "nothing: the entries expire by themselves after l2.deadAfter")
	}
	s.elector.Leave()
	s.log.Info("layer-2 mode: left; the other nodes answer for this node's VIPs")
}

// apply programs the owned VIPs among alive, with a fresh expiry, and
// sends the gratuitous ARP that is due.
func (s *Speaker) apply(alive []string) error {
	now := s.now()
	mono, err := s.mono()
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.left {
		return nil
	}
	s.alive = alive
	// How long this node may answer: a dead time from now with
	// heartbeats, until its Lease lapses with Leases.
	valid := s.elector.ValidFor()
	var owned, vips []netip.Addr
	for _, r := range s.routes {
		v := r.Prefix.Addr()
		vips = append(vips, v)
		if r.Serve && valid > 0 && s.elector.Owner(v, alive) == s.cfg.NodeName {
			owned = append(owned, v)
		}
	}
	err = s.dp.SetL2Owned(owned, s.mac, mono+max(valid, 0))
	if s.join != nil {
		err = errors.Join(err, s.join(vips))
	}
	if err == nil {
		s.err = ""
	}
	// Gains and losses, logged once each; a gained VIP's gratuitous ARP
	// starts now.
	for _, v := range owned {
		if _, had := s.since[v]; !had {
			s.since[v] = now
			s.garpAt[v], s.garpN[v] = now, 0
			s.log.Info("layer-2 mode: answering for a VIP", "vip", v, "alive", alive)
		}
	}
	for v := range s.since {
		if !slices.Contains(owned, v) {
			delete(s.since, v)
			delete(s.garpAt, v)
			delete(s.garpN, v)
			s.log.Info("layer-2 mode: no longer answering for a VIP", "vip", v, "owner", s.elector.Owner(v, alive), "alive", alive)
		}
	}
	var gerrs []error
	for _, v := range owned {
		at, pending := s.garpAt[v]
		if !pending {
			continue
		}
		for n := s.garpN[v]; n < len(GARPSchedule) && now.Sub(at) >= GARPSchedule[n]; n++ {
			if gerr := s.garp(v); gerr != nil {
				gerrs = append(gerrs, gerr)
			}
			s.garpN[v] = n + 1
		}
		if s.garpN[v] == len(GARPSchedule) {
			delete(s.garpAt, v)
		}
	}
	return errors.Join(err, errors.Join(gerrs...))
}

// Status is layer-2 mode as this node sees it.
func (s *Speaker) Status() *api.L2 {
	v := s.elector.View()
	s.mu.Lock()
	defer s.mu.Unlock()
	// In a cluster without l2 pools, nothing to show.
	if len(s.cfg.Nodes) == 0 && len(s.routes) == 0 {
		return nil
	}
	st := &api.L2{Node: s.cfg.NodeName, Interface: s.iface, MAC: s.mac.String(), HeartbeatMs: ms(s.cfg.Heartbeat), DeadAfterMs: ms(s.cfg.DeadAfter),
		Alive: v.Alive, AliveSince: v.Changed, Dropped: v.Dropped, Error: s.err}
	if v.SendErr != "" {
		if st.Error != "" {
			st.Error += "; "
		}
		st.Error += "heartbeats: " + v.SendErr
	}
	for _, p := range v.Peers {
		st.Nodes = append(st.Nodes, api.L2Node{Name: p.Name, Address: p.Address, Alive: p.Alive, LastHeardMs: ms(p.LastHeard)})
	}
	for _, r := range s.routes {
		vip := r.Prefix.Addr()
		since, answering := s.since[vip]
		out := api.L2VIP{VIP: vip, Owner: s.elector.Owner(vip, v.Alive), Answering: answering, Why: r.Why}
		if answering {
			out.Since = since
		}
		st.VIPs = append(st.VIPs, out)
	}
	return st
}

// ms is d in milliseconds, to the microsecond, as the status API writes
// durations.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
