package elect

import (
	"hash/fnv"
	"net/netip"
	"time"

	"github.com/xlbproject/xlb/internal/flowhash"
)

// Node is one node of the election: its l2.nodes name and address.
type Node struct {
	Name    string
	Address netip.Addr
}

// Drop reasons of received datagrams, counted by Members.
const (
	DropMalformed = "malformed" // not a heartbeat
	DropUnknown   = "unknown"   // a name not in the list, or this node's own
	DropSpoofed   = "spoofed"   // a listed name from another address or port
)

// Members is one node's view of the others: who was heard when. It does
// no I/O and reads no clock: the caller passes the time, so that tests
// drive it with a fake one. Not safe for concurrent use.
type Members struct {
	self      string
	port      uint16
	deadAfter time.Duration
	addrs     map[string]netip.Addr
	order     []string // the other nodes, as listed
	heard     map[string]time.Time
	leaving   map[string]bool
	dropped   map[string]uint64
}

// NewMembers is the view of node self among nodes, at time now. Every
// other node counts as heard at now: a node that starts claims no VIP of
// a live neighbour before it could have heard from it, and takes a dead
// neighbour's VIPs over deadAfter later, as any node would.
func NewMembers(self string, nodes []Node, port uint16, deadAfter time.Duration, now time.Time) *Members {
	m := &Members{self: self, port: port, deadAfter: deadAfter, addrs: map[string]netip.Addr{},
		heard: map[string]time.Time{}, leaving: map[string]bool{}, dropped: map[string]uint64{}}
	for _, n := range nodes {
		m.addrs[n.Name] = n.Address
		if n.Name != self {
			m.order = append(m.order, n.Name)
			m.heard[n.Name] = now
		}
	}
	return m
}

// Restart counts every other node as heard at now, as NewMembers does:
// after this node was itself stopped for a while (SIGSTOP, a starved
// process), what it last heard says nothing of the others, and it must
// not take their VIPs before it could have heard from them again.
func (m *Members) Restart(now time.Time) {
	for _, name := range m.order {
		m.heard[name] = now
		m.leaving[name] = false
	}
}

// Others lists the other nodes, as listed: where heartbeats go.
func (m *Members) Others() []Node {
	out := make([]Node, len(m.order))
	for i, name := range m.order {
		out[i] = Node{Name: name, Address: m.addrs[name]}
	}
	return out
}

// Receive takes a datagram from from at now. It returns the heartbeat,
// or the drop reason ("" when taken). Only a listed node other than this
// one, from its listed address and the election's port, counts.
func (m *Members) Receive(from netip.AddrPort, b []byte, now time.Time) (Heartbeat, string) {
	h, err := Decode(b)
	if err != nil {
		m.dropped[DropMalformed]++
		return h, DropMalformed
	}
	addr, listed := m.addrs[h.Name]
	switch {
	case !listed || h.Name == m.self:
		m.dropped[DropUnknown]++
		return h, DropUnknown
	case from.Addr().Unmap() != addr || from.Port() != m.port:
		m.dropped[DropSpoofed]++
		return h, DropSpoofed
	}
	m.heard[h.Name] = now
	m.leaving[h.Name] = h.Leaving
	return h, ""
}

// Alive lists the nodes alive at now, this one first, then the others
// as listed: heard from within the dead time, and not leaving.
func (m *Members) Alive(now time.Time) []string {
	out := []string{m.self}
	for _, name := range m.order {
		if m.IsAlive(name, now) {
			out = append(out, name)
		}
	}
	return out
}

// IsAlive reports whether node name is alive at now (this node always is).
func (m *Members) IsAlive(name string, now time.Time) bool {
	if name == m.self {
		return true
	}
	t, ok := m.heard[name]
	return ok && !m.leaving[name] && now.Sub(t) < m.deadAfter
}

// LastHeard is when node name was last heard from (zero: never, or this
// node).
func (m *Members) LastHeard(name string) time.Time { return m.heard[name] }

// Dropped counts the datagrams refused, by reason.
func (m *Members) Dropped() map[string]uint64 {
	out := make(map[string]uint64, len(m.dropped))
	for k, v := range m.dropped {
		out[k] = v
	}
	return out
}

// Owner is the node among alive that answers for vip: the highest score
// of vip and the node's name, ties (never seen in practice) to the
// smaller name. "" when alive is empty.
func Owner(vip netip.Addr, alive []string) string {
	best, bestScore := "", uint64(0)
	for _, name := range alive {
		s := score(vip, name)
		if best == "" || s > bestScore || s == bestScore && name < best {
			best, bestScore = name, s
		}
	}
	return best
}

// Owned lists the VIPs of vips that node self owns among alive, in the
// order given.
func Owned(self string, vips []netip.Addr, alive []string) []netip.Addr {
	var out []netip.Addr
	for _, v := range vips {
		if Owner(v, alive) == self {
			out = append(out, v)
		}
	}
	return out
}

// score hashes a VIP and a node name together (FNV-1a, then a 64-bit
// finaliser so that names differing in one letter spread well). It must
// never change: every node of a cluster computes it alike.
func score(vip netip.Addr, name string) uint64 {
	h := fnv.New64a()
	b := vip.Unmap().As16()
	h.Write(b[:])
	h.Write([]byte{0})
	h.Write([]byte(name))
	return flowhash.Mix64(h.Sum64())
}
