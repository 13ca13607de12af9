// Package api is the agent's local HTTP API, served on a unix socket and
// read by `xlb status`, and its Prometheus metrics. It knows nothing of the
// agent's internals: everything it serves comes from one StatusFunc.
package api

import (
	"net/netip"
	"time"
)

// StatusFunc returns the agent's current state. It is called once per
// request and once per metrics scrape.
type StatusFunc func() (*Status, error)

// Status is the body of GET /v1/status.
type Status struct {
	Version  string            `json:"version"`
	Node     Node              `json:"node"`
	Config   Config            `json:"config"`
	Services []Service         `json:"services"`
	Reasons  map[string]uint64 `json:"reasons"` // data-plane pass/drop reason → packets
}

// Node is the host and its data plane.
type Node struct {
	Interface  string     `json:"interface"`
	Address    netip.Addr `json:"address"`
	AttachMode string     `json:"attachMode"` // native | generic
	PinPath    string     `json:"pinPath"`
}

// Reload results.
const (
	ResultOK    = "ok"
	ResultError = "error"
)

// Config is the running configuration and the outcome of the last
// (re)load.
type Config struct {
	Path string `json:"path"`
	// Generation counts the configurations loaded since the agent started;
	// 1 is the one it started with.
	Generation uint64    `json:"generation"`
	LastReload time.Time `json:"lastReload"`
	Result     string    `json:"result"`          // ResultOK or ResultError
	Error      string    `json:"error,omitempty"` // why the last reload failed
	// Reloads counts reloads after the start by result.
	Reloads map[string]uint64 `json:"reloads"`
}

// Service is one configured service and its counters.
type Service struct {
	Name       string     `json:"name"`
	VIP        netip.Addr `json:"vip"`
	Port       uint16     `json:"port"`
	Protocol   string     `json:"protocol"`
	Forwarding string     `json:"forwarding"`
	// Installed is false while the data plane does not serve the service
	// yet (its last apply failed; see Config.Error).
	Installed bool      `json:"installed"`
	Counters  Counters  `json:"counters"`
	Backends  []Backend `json:"backends"`
}

// Backend is one backend of a service and the traffic sent to it by this
// service.
type Backend struct {
	Address  netip.Addr `json:"address"`
	Port     uint16     `json:"port"`
	Weight   uint32     `json:"weight"`
	Counters Counters   `json:"counters"`
}

// Counters count packets and bytes.
type Counters struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}
