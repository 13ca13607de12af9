// Package labrun runs xlb agents in a lab (package lab) and measures what
// they do: it writes the nodes' configuration files, starts the agents and
// waits until they serve, sends HTTP and UDP traffic from inside a client
// namespace, and reads the counters of the agents, the interfaces and the
// client's TCP/IP stack. The demo and the end-to-end tests share it, so
// that both exercise xlb the same way.
package labrun

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/testbed/lab"
)

// Service is one service as the lab's agents serve it.
type Service struct {
	Name       string
	VIP        netip.Addr
	Port       uint16
	Protocol   config.Protocol
	Forwarding config.Forwarding
	Backends   []netip.Addr
	// Check is the service's health check; nil: none.
	Check *Check
	// Flows is the service's flows mode ("": stateless).
	Flows config.Flows
	// History is a daisy-chained service's earlier backend sets, as a
	// tool that changes the backends would record them.
	History []Generation
}

// Generation is a backend set that was a service's until Until.
type Generation struct {
	Until    time.Time
	Backends []netip.Addr
}

// Check is a service's health check as the lab writes it; zero fields
// are left out of the file, so the agent's defaults apply.
type Check struct {
	Type     config.CheckType // tcp or http
	Port     uint16
	Path     string
	Interval time.Duration
	Timeout  time.Duration
	Rise     int
	Fall     int
}

// WithCheck returns services with the check of the service named name
// set to c (nil: none).
func WithCheck(services []Service, name string, c *Check) []Service {
	out := slices.Clone(services)
	for i := range out {
		if out[i].Name == name {
			out[i].Check = c
		}
	}
	return out
}

// Target is the address clients send the service's traffic to.
func (s Service) Target() netip.AddrPort { return netip.AddrPortFrom(s.VIP, s.Port) }

// Services returns the lab's two services over every backend of p:
// "web", HTTP on the first VIP's port 80 over IPIP, and "echo", UDP echo on
// the second VIP's port 9000 over GUE. They match what `lab up` runs on
// the backends.
func Services(p lab.Plan) ([]Service, error) {
	if len(p.VIPs) < 2 {
		return nil, fmt.Errorf("lab %q has %d VIPs, want 2", p.Spec.Prefix, len(p.VIPs))
	}
	var backends []netip.Addr
	for _, b := range p.Backends {
		backends = append(backends, b.Addr)
	}
	return []Service{
		{Name: "web", VIP: p.VIPs[0], Port: lab.HTTPPort, Protocol: config.TCP, Forwarding: config.DSRIPIP, Backends: backends},
		{Name: "echo", VIP: p.VIPs[1], Port: lab.UDPPort, Protocol: config.UDP, Forwarding: config.DSRGUE, Backends: slices.Clone(backends)},
	}, nil
}

// Without returns services with backend addr removed from every service.
func Without(services []Service, addr netip.Addr) []Service {
	out := make([]Service, len(services))
	for i, s := range services {
		s.Backends = slices.DeleteFunc(slices.Clone(s.Backends), func(a netip.Addr) bool { return a == addr })
		out[i] = s
	}
	return out
}

// ConfigPath is where the agent of node reads its configuration.
func ConfigPath(p lab.Plan, node lab.Host) string {
	return filepath.Join(p.StateDir, node.Name+".yaml")
}

// Socket is the API socket of the agent of node.
func Socket(p lab.Plan, node lab.Host) string {
	return filepath.Join(p.StateDir, node.Name+".sock")
}

// The YAML shape of an agent configuration (docs/configuration.md), only
// the fields the lab sets.
type (
	fileConfig struct {
		Node      fileNode      `yaml:"node"`
		API       fileAPI       `yaml:"api"`
		Dataplane fileDataplane `yaml:"dataplane"`
		BGP       *fileBGP      `yaml:"bgp,omitempty"`
		Services  []fileService `yaml:"services"`
	}
	fileBGP struct {
		ASN       uint32     `yaml:"asn"`
		HoldTime  string     `yaml:"holdTime,omitempty"`
		DrainTime string     `yaml:"drainTime"`
		Peers     []filePeer `yaml:"peers"`
	}
	filePeer struct {
		Address string   `yaml:"address"`
		ASN     uint32   `yaml:"asn"`
		BFD     *fileBFD `yaml:"bfd,omitempty"`
	}
	fileBFD struct {
		MinRx      string `yaml:"minRx"`
		MinTx      string `yaml:"minTx"`
		Multiplier int    `yaml:"multiplier"`
	}
	fileNode struct {
		Interface string `yaml:"interface"`
		Address   string `yaml:"address"`
	}
	fileAPI struct {
		Socket string `yaml:"socket"`
	}
	fileDataplane struct {
		PinPath       string `yaml:"pinPath"`
		AttachMode    string `yaml:"attachMode,omitempty"`
		ConntrackSize uint32 `yaml:"conntrackSize,omitempty"`
	}
	fileService struct {
		Name        string        `yaml:"name"`
		VIP         string        `yaml:"vip"`
		Port        uint16        `yaml:"port"`
		Protocol    string        `yaml:"protocol"`
		Forwarding  string        `yaml:"forwarding"`
		Flows       string        `yaml:"flows,omitempty"`
		History     []fileGen     `yaml:"history,omitempty"`
		HealthCheck *fileCheck    `yaml:"healthCheck,omitempty"`
		Backends    []fileBackend `yaml:"backends"`
	}
	fileGen struct {
		Until    string        `yaml:"until"`
		Backends []fileBackend `yaml:"backends"`
	}
	fileCheck struct {
		Type     string `yaml:"type"`
		Port     uint16 `yaml:"port,omitempty"`
		Path     string `yaml:"path,omitempty"`
		Interval string `yaml:"interval,omitempty"`
		Timeout  string `yaml:"timeout,omitempty"`
		Rise     int    `yaml:"rise,omitempty"`
		Fall     int    `yaml:"fall,omitempty"`
	}
	fileBackend struct {
		Address string `yaml:"address"`
	}
)

// renderConfig returns the configuration file of node's agent.
func renderConfig(p lab.Plan, node lab.Host, services []Service, opts NodeOptions) ([]byte, error) {
	fc := fileConfig{
		Node:      fileNode{Interface: node.Interface, Address: node.Addr.String()},
		API:       fileAPI{Socket: Socket(p, node)},
		Dataplane: fileDataplane{PinPath: node.PinDir, AttachMode: opts.AttachMode, ConntrackSize: opts.ConntrackSize},
		Services:  []fileService{},
	}
	if b := p.BGP; b != nil {
		peer := filePeer{Address: b.PeerAddr.String(), ASN: b.PeerASN}
		if b.BFD != nil {
			peer.BFD = &fileBFD{MinRx: durationText(b.BFD.MinRx), MinTx: durationText(b.BFD.MinTx), Multiplier: b.BFD.Multiplier}
		}
		// drainTime: long enough for the router to act on the
		// withdrawal, short enough for tests that restart agents.
		fc.BGP = &fileBGP{ASN: b.NodeASN, HoldTime: durationText(b.HoldTime), DrainTime: DrainTime.String(), Peers: []filePeer{peer}}
	}
	for _, s := range services {
		fs := fileService{
			Name: s.Name, VIP: s.VIP.String(), Port: s.Port,
			Protocol: string(s.Protocol), Forwarding: string(s.Forwarding), Flows: string(s.Flows),
		}
		for _, g := range s.History {
			fg := fileGen{Until: g.Until.UTC().Format(time.RFC3339), Backends: []fileBackend{}}
			for _, b := range g.Backends {
				fg.Backends = append(fg.Backends, fileBackend{Address: b.String()})
			}
			fs.History = append(fs.History, fg)
		}
		if c := s.Check; c != nil {
			fs.HealthCheck = &fileCheck{Type: string(c.Type), Port: c.Port, Path: c.Path,
				Interval: durationText(c.Interval), Timeout: durationText(c.Timeout), Rise: c.Rise, Fall: c.Fall}
		}
		for _, b := range s.Backends {
			fs.Backends = append(fs.Backends, fileBackend{Address: b.String()})
		}
		fc.Services = append(fc.Services, fs)
	}
	var buf bytes.Buffer
	buf.WriteString("# Written by xlb's lab runner (testbed/labrun) for " + node.Name + ".\n")
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(fc); err != nil {
		return nil, fmt.Errorf("%s: encode configuration: %w", node.Name, err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("%s: encode configuration: %w", node.Name, err)
	}
	return buf.Bytes(), nil
}

// DrainTime is the bgp.drainTime of the lab's agents.
const DrainTime = time.Second

// durationText writes d as the configuration does, "" for 0 (unset).
func durationText(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// WriteConfig writes the configuration of node's agent. It replaces the
// file by renaming a complete new one over it, so a running agent, which
// polls the file, never reads half of it.
func WriteConfig(p lab.Plan, node lab.Host, services []Service) error {
	return WriteConfigWith(p, node, services, NodeOptions{})
}

// NodeOptions are settings of a node's agent beyond its services.
type NodeOptions struct {
	// ConntrackSize is dataplane.conntrackSize; 0: the default.
	ConntrackSize uint32
	// AttachMode is dataplane.attachMode; "": the default (auto).
	AttachMode string
}

// WriteConfigWith is WriteConfig with node options.
func WriteConfigWith(p lab.Plan, node lab.Host, services []Service, opts NodeOptions) error {
	b, err := renderConfig(p, node, services, opts)
	if err != nil {
		return err
	}
	path := ConfigPath(p, node)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("%s: %w", node.Name, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("%s: %w", node.Name, err)
	}
	return nil
}
