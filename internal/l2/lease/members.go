package lease

import (
	"net/netip"
	"slices"
	"sort"
	"time"

	"github.com/xlbproject/xlb/internal/l2/elect"
)

// Members is one node's view of the layer-2 nodes of a cluster, from
// their node Leases: who renewed when, and which VIPs each can serve.
// A node is alive while the local clock saw its Lease change within the
// dead time (the writers' clocks are never compared with this one's),
// and this node while its own last renewal, counted from when it was
// sent, is younger than the dead time. It does no I/O and reads no
// clock: the caller passes the time, so that tests drive it with a fake
// one. Not safe for concurrent use.
type Members struct {
	self      string
	deadAfter time.Duration
	others    map[string]*member
	// renewed is when this node's last successful renewal was sent; zero:
	// none yet.
	renewed  time.Time
	servable map[netip.Addr]bool // this node's
}

type member struct {
	version string    // the Lease's resourceVersion last seen
	seen    time.Time // when it last changed, by the local clock
	vips    map[netip.Addr]bool
}

// NewMembers is the view of node self, which declares another node dead
// deadAfter after its Lease last changed.
func NewMembers(self string, deadAfter time.Duration) *Members {
	return &Members{self: self, deadAfter: deadAfter, others: map[string]*member{}, servable: map[netip.Addr]bool{}}
}

// Observe takes another node's Lease, as read at now: its resourceVersion
// and the VIPs it can serve. A Lease seen for the first time counts as
// changed now: a node that starts takes no VIP of a live neighbour before
// it could have seen it renew, and a dead one's deadAfter later.
func (m *Members) Observe(name, version string, vips []netip.Addr, now time.Time) {
	if name == m.self {
		return
	}
	o := m.others[name]
	if o == nil {
		o = &member{}
		m.others[name] = o
	}
	if o.version != version {
		o.version, o.seen = version, now
	}
	o.vips = make(map[netip.Addr]bool, len(vips))
	for _, v := range vips {
		o.vips[v] = true
	}
}

// Gone takes the deletion of another node's Lease, which a node leaving
// (SIGTERM) does: its VIPs move at once.
func (m *Members) Gone(name string) { delete(m.others, name) }

// Restart counts every other node as seen at now: after this node was
// itself stopped for a while, what it last saw says nothing of the
// others, and it must not take their VIPs before it could see them renew.
func (m *Members) Restart(now time.Time) {
	for _, o := range m.others {
		o.seen = now
	}
}

// Renewed records a successful renewal of this node's Lease, sent at
// sent (not when the answer came: the others may have seen it change as
// early as that).
func (m *Members) Renewed(sent time.Time) {
	if sent.After(m.renewed) {
		m.renewed = sent
	}
}

// SetServable sets the VIPs this node can serve.
func (m *Members) SetServable(vips []netip.Addr) {
	m.servable = make(map[netip.Addr]bool, len(vips))
	for _, v := range vips {
		m.servable[v] = true
	}
}

// ValidFor is how long from now this node may still answer for what it
// owns: until a dead time after its last renewal was sent, when the
// others may take its VIPs over. Zero or less: it owns nothing.
func (m *Members) ValidFor(now time.Time) time.Duration {
	if m.renewed.IsZero() {
		return 0
	}
	return m.renewed.Add(m.deadAfter).Sub(now)
}

// Alive lists the nodes alive at now: this one first while its renewals
// hold, then the others by name.
func (m *Members) Alive(now time.Time) []string {
	var out []string
	if m.ValidFor(now) > 0 {
		out = append(out, m.self)
	}
	names := make([]string, 0, len(m.others))
	for name, o := range m.others {
		if now.Sub(o.seen) < m.deadAfter {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return append(out, names...)
}

// IsAlive reports whether node name is alive at now.
func (m *Members) IsAlive(name string, now time.Time) bool {
	return slices.Contains(m.Alive(now), name)
}

// LastSeen is when another node's Lease last changed (zero: unknown).
func (m *Members) LastSeen(name string) time.Time {
	if o := m.others[name]; o != nil {
		return o.seen
	}
	return time.Time{}
}

// Others lists the other nodes whose Leases were seen, by name.
func (m *Members) Others() []string {
	out := make([]string, 0, len(m.others))
	for name := range m.others {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// Owner is the node among alive that answers for vip: the highest
// rendezvous score (elect.Owner) among the alive nodes that can serve it.
// "" when none can.
func (m *Members) Owner(vip netip.Addr, alive []string) string {
	var can []string
	for _, name := range alive {
		if name == m.self && m.servable[vip] {
			can = append(can, name)
		} else if o := m.others[name]; o != nil && o.vips[vip] {
			can = append(can, name)
		}
	}
	return elect.Owner(vip, can)
}
