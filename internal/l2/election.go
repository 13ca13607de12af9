package l2

import (
	"context"
	"log/slog"
	"net/netip"
	"time"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/l2/elect"
)

// Election is how the nodes agree on each VIP's owner: heartbeats among
// the l2.nodes of a file (package l2/elect), or Leases in a cluster
// (package l2/lease).
type Election interface {
	// Run takes part until ctx ends, calling update with the alive nodes
	// at every heartbeat or renewal and whenever they change.
	Run(ctx context.Context, update func(alive []string))
	// Leave tells the others at once that this node goes.
	Leave()
	View() elect.View
	// SetServable takes the VIPs this node can serve.
	SetServable([]netip.Addr)
	// Owner is the node among alive that answers for vip.
	Owner(vip netip.Addr, alive []string) string
	// ValidFor is how long from now this node may answer for what it
	// owns; zero or less: for nothing.
	ValidFor() time.Duration
}

// heartbeats is the file's election: every listed node serves every VIP,
// and a node's answers hold for a dead time after each heartbeat.
type heartbeats struct {
	*elect.Elector
	deadAfter time.Duration
}

func newHeartbeats(c *config.L2, log *slog.Logger) (*heartbeats, error) {
	nodes := make([]elect.Node, len(c.Nodes))
	for i, n := range c.Nodes {
		nodes[i] = elect.Node{Name: n.Name, Address: n.Address}
	}
	e, err := elect.New(elect.Config{Self: c.NodeName, Nodes: nodes, Port: c.Port,
		Heartbeat: c.Heartbeat, DeadAfter: c.DeadAfter}, log)
	if err != nil {
		return nil, err
	}
	return &heartbeats{Elector: e, deadAfter: c.DeadAfter}, nil
}

func (h *heartbeats) SetServable([]netip.Addr) {}

func (h *heartbeats) Owner(vip netip.Addr, alive []string) string { return elect.Owner(vip, alive) }

func (h *heartbeats) ValidFor() time.Duration { return h.deadAfter }
