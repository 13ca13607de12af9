package lb

import (
	"net/netip"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// The accessors the agent still type-asserts; Shape and Installed replace
// them once the agent uses those.

// AttachMode reports how XDP is attached: "native" or "generic".
func (d *Dataplane) AttachMode() string { return d.Shape().AttachMode }

// MaxBackends is the number of backend IDs the maps hold.
func (d *Dataplane) MaxBackends() uint32 { return d.Shape().MaxBackends }

// TableSize is the Maglev table size the program was loaded with.
func (d *Dataplane) TableSize() uint32 { return d.Shape().TableSize }

// FlowHash is the flow hash the program was loaded with.
func (d *Dataplane) FlowHash() wire.FlowHash { return d.Shape().FlowHash }

// Services lists installed services (without tables or hints).
func (d *Dataplane) Services() ([]Service, error) {
	in, err := d.Installed()
	return in.Services, err
}

// Backends lists installed backends by id.
func (d *Dataplane) Backends() (map[uint32]netip.Addr, error) {
	in, err := d.Installed()
	return in.Backends, err
}

// BackendOwners maps each backend that counts for a service to that
// service's ID.
func (d *Dataplane) BackendOwners() (map[uint32]uint32, error) {
	in, err := d.Installed()
	return in.Owners, err
}
