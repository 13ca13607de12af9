// Package config is the agent's YAML model: parsing, defaults and validation
// with errors that name the file, the field and the reason.
package config

import (
	"fmt"
	"net/netip"
	"time"
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
	// DefaultMaxBackends is the default of Dataplane.MaxBackends: the
	// number of backend entries over all services, one entry per
	// (service, backend) pair, drained backends included.
	DefaultMaxBackends = 16384
	// MaxBackends bounds Dataplane.MaxBackends. Each entry costs a few
	// dozen bytes per CPU in the data plane's per-CPU counters.
	MaxBackends = 1 << 20
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
	// MaxBackends is how many backend entries (over all services) the
	// data plane's maps hold, fixed when they are created.
	MaxBackends uint32
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
	// HealthCheck is how this backend is probed: the service's
	// healthCheck with the backend's own merged over it, field by field.
	HealthCheck HealthCheck
}

// CheckType is the kind of a health check.
type CheckType string

const (
	CheckNone CheckType = "none" // not probed: always healthy
	CheckTCP  CheckType = "tcp"  // a TCP connect
	CheckHTTP CheckType = "http" // an HTTP GET with an expected status
)

// Health check defaults and limits.
const (
	DefaultCheckInterval = time.Second
	// DefaultCheckTimeout is the timeout's default, or the interval if
	// that is shorter.
	DefaultCheckTimeout = time.Second
	DefaultCheckPath    = "/"
	DefaultStatusMin    = 200
	DefaultStatusMax    = 399
	DefaultRise         = 2
	DefaultFall         = 2

	MinCheckInterval = 10 * time.Millisecond
	MaxCheckInterval = time.Hour
	MaxRiseFall      = 100
	// MaxCheckPath bounds the HTTP path: it goes into every request line.
	MaxCheckPath = 1024
)

// HealthCheck is one backend's resolved health check. Every field holds its
// final value; the fields a type does not use are zero (for CheckNone,
// every field but Type).
type HealthCheck struct {
	Type      CheckType
	Port      uint16 // default: the backend's port
	Path      string // http: the request path, default "/"
	StatusMin int    // http: the lowest status counted as healthy
	StatusMax int    // http: the highest status counted as healthy
	Interval  time.Duration
	Timeout   time.Duration // > 0 and <= Interval
	Rise      int           // consecutive successes that bring a down backend up
	Fall      int           // consecutive failures that take an up backend down
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
