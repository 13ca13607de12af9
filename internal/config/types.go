// Package config is the agent's YAML model: parsing, defaults and validation
// with errors that name the file, the field and the reason.
package config

import (
	"fmt"
	"net/netip"
)

// Protocol is the L4 protocol of a service.
type Protocol string

const (
	TCP Protocol = "tcp"
	UDP Protocol = "udp"
)

// Forwarding is how packets reach a backend.
type Forwarding string

const (
	DSRIPIP Forwarding = "dsr-ipip"
	DSRGUE  Forwarding = "dsr-gue"
)

// Defaults.
const (
	DefaultSocket     = "/run/xlb/xlb.sock"
	DefaultTableSize  = 65537
	DefaultAttachMode = "auto"
	DefaultWeight     = 1
)

// Attach modes of the XDP program (Dataplane.AttachMode).
const (
	AttachAuto    = "auto"
	AttachNative  = "native"
	AttachGeneric = "generic"
)

// Limits. They must match the sizes of the data plane's BPF maps (bpf/):
// a configuration that passes Parse must fit into them.
const (
	// MaxServices is the number of services one agent can serve.
	MaxServices = 1024
	// MaxBackends is the number of backend entries over all services: one
	// entry per (service, backend) pair, drained backends included.
	MaxBackends = 16384
	// MinTableSize and MaxTableSize bound Dataplane.TableSize. Both are
	// prime. Below the minimum, weights cannot be honoured with any
	// precision; above the maximum, one table per service no longer fits
	// comfortably into kernel memory.
	MinTableSize = 251
	MaxTableSize = 1048573
	// MaxWeight is the largest backend weight.
	MaxWeight = 65535
)

// Config is a validated agent configuration. Every field holds its final
// value: defaults are applied by Parse.
type Config struct {
	Node      Node
	API       API
	Dataplane Dataplane
	Services  []Service
}

// Node is the host the agent runs on.
type Node struct {
	// Interface is where the XDP program attaches (required).
	Interface string
	// Address is the outer source address and BGP next hop. Invalid (zero)
	// when the file leaves it out: the agent then takes the interface's
	// first IPv4 address.
	Address netip.Addr
}

// API is the local API.
type API struct {
	Socket  string // unix socket path, default DefaultSocket
	Metrics string // optional host:port for Prometheus, "" when unset
}

// Dataplane holds the load-time parameters of the XDP program
// (an extension of the contract; every field is optional).
type Dataplane struct {
	// PinPath is the bpffs directory holding this agent's pinned maps and
	// link. "" means the agent derives one from the network namespace and
	// the interface, so agents in different namespaces never collide.
	PinPath string
	// AttachMode is auto (native, falling back to generic), native or generic.
	AttachMode string
	// TableSize is the Maglev table size, a prime.
	TableSize uint32
}

// Service is one load-balanced (VIP, port, protocol).
type Service struct {
	Name       string
	VIP        netip.Addr
	Port       uint16
	Protocol   Protocol
	Forwarding Forwarding
	Backends   []Backend
}

// Backend is one real server of a service.
type Backend struct {
	Address netip.Addr
	Port    uint16 // equals the service port: DSR cannot translate ports
	Weight  uint32 // default DefaultWeight; 0 drains (no new flows)
}

// Key identifies a service in the data plane.
type Key struct {
	VIP      netip.Addr
	Port     uint16
	Protocol Protocol
}

// Key returns the service's data-plane key.
func (s Service) Key() Key { return Key{VIP: s.VIP, Port: s.Port, Protocol: s.Protocol} }

// String formats the key as VIP:port/protocol, e.g. 10.99.0.1:80/tcp.
func (k Key) String() string { return fmt.Sprintf("%s:%d/%s", k.VIP, k.Port, k.Protocol) }
