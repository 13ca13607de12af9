// Package dataplane loads xlb's eBPF programs, attaches them, pins their
// maps and link under bpffs, and programs the maps: services, backends,
// Maglev tables (swapped atomically through map-in-map) and counters.
package dataplane

import (
	"net/netip"
)

// Encap is a service's forwarding mode in the data plane.
type Encap uint8

const (
	EncapIPIP Encap = 1
	EncapGUE  Encap = 2
)

// Protocol numbers used in service keys.
const (
	ProtoTCP uint8 = 6
	ProtoUDP uint8 = 17
)

// ServiceKey is what the XDP program looks packets up by.
type ServiceKey struct {
	VIP   netip.Addr
	Port  uint16
	Proto uint8
}

// Service is one service as the data plane sees it: its key, encapsulation
// and Maglev table. Table holds backend IDs and must have exactly the
// data plane's table size entries.
type Service struct {
	ID    uint32
	Key   ServiceKey
	Encap Encap
	Table []uint32
}

// Counters is a packets/bytes pair summed over all CPUs.
type Counters struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// Options configure Open.
type Options struct {
	Interface  string     // XDP attach point
	NodeAddr   netip.Addr // outer source address of encapsulated packets
	PinPath    string     // bpffs directory for this agent's maps and link
	AttachMode string     // auto | native | generic
	TableSize  uint32     // Maglev table size (prime)
	// MaxBackends sizes the backend maps (0: DefaultMaxBackends).
	// Changing it for pinned state migrates the maps (see Load).
	MaxBackends uint32
}

// GUEPort is the UDP destination port of GUE tunnels (XLB_GUE_PORT).
const GUEPort = 6080
