package config

import (
	"fmt"
	"net/netip"
	"time"

	"gopkg.in/yaml.v3"
)

// Marshal renders c as a configuration file. If c is a configuration
// Parse could have returned, Parse reads the rendering back into a Config
// equal to c: every value is written out. A source other than a file
// checks its configurations with Validate, as if it parsed the rendering.
func Marshal(c *Config) ([]byte, error) {
	out, err := yaml.Marshal(render(c))
	if err != nil {
		return nil, fmt.Errorf("render the configuration: %w", err)
	}
	return out, nil
}

// The document as written: only what Marshal sets, in the field order of
// the documentation. Durations are Go duration strings.
type (
	fileDoc struct {
		Node       fileNode        `yaml:"node"`
		API        fileAPI         `yaml:"api"`
		Dataplane  fileDataplane   `yaml:"dataplane"`
		BGP        *fileBGP        `yaml:"bgp,omitempty"`
		Kubernetes *fileKubernetes `yaml:"kubernetes,omitempty"`
		Services   []fileService   `yaml:"services,omitempty"`
	}
	fileNode struct {
		Interface string `yaml:"interface"`
		Address   string `yaml:"address,omitempty"`
	}
	fileAPI struct {
		Socket  string `yaml:"socket"`
		Metrics string `yaml:"metrics,omitempty"`
	}
	fileDataplane struct {
		PinPath       string `yaml:"pinPath,omitempty"`
		AttachMode    string `yaml:"attachMode"`
		TableSize     uint32 `yaml:"tableSize"`
		MaxBackends   uint32 `yaml:"maxBackends"`
		ConntrackSize uint32 `yaml:"conntrackSize,omitempty"`
		FlowHash      string `yaml:"flowHash,omitempty"`
	}
	fileBGP struct {
		ASN        uint32     `yaml:"asn"`
		RouterID   string     `yaml:"routerID,omitempty"`
		HoldTime   string     `yaml:"holdTime"`
		Keepalive  string     `yaml:"keepalive,omitempty"`
		DrainTime  string     `yaml:"drainTime"`
		ListenPort int        `yaml:"listenPort"`
		Peers      []filePeer `yaml:"peers,omitempty"`
	}
	filePeer struct {
		Address   string `yaml:"address"`
		ASN       uint32 `yaml:"asn"`
		Port      uint16 `yaml:"port"`
		Password  string `yaml:"password,omitempty"`
		HoldTime  string `yaml:"holdTime"`
		Keepalive string `yaml:"keepalive,omitempty"`
		Multihop  uint8  `yaml:"multihop,omitempty"`
		Passive   bool   `yaml:"passive,omitempty"`
		// MaxPrefixes is left out at its default.
		MaxPrefixes uint32   `yaml:"maxPrefixes,omitempty"`
		BFD         *fileBFD `yaml:"bfd,omitempty"`
	}
	fileBFD struct {
		MinRx      string `yaml:"minRx"`
		MinTx      string `yaml:"minTx"`
		Multiplier uint8  `yaml:"multiplier"`
	}
	fileKubernetes struct {
		Kubeconfig      string `yaml:"kubeconfig,omitempty"`
		NodeName        string `yaml:"nodeName,omitempty"`
		SecretNamespace string `yaml:"secretNamespace,omitempty"`
		ServeClassless  bool   `yaml:"serveClassless,omitempty"`
	}
	fileService struct {
		Name           string        `yaml:"name"`
		VIP            string        `yaml:"vip"`
		Port           uint16        `yaml:"port"`
		Protocol       Protocol      `yaml:"protocol"`
		Forwarding     Forwarding    `yaml:"forwarding"`
		TranslatePorts bool          `yaml:"translatePorts,omitempty"`
		Flows          Flows         `yaml:"flows,omitempty"`
		History        []fileGen     `yaml:"history,omitempty"`
		BGP            *fileRoute    `yaml:"bgp,omitempty"`
		Backends       []fileBackend `yaml:"backends"`
	}
	fileGen struct {
		Until    string        `yaml:"until"`
		Backends []fileBackend `yaml:"backends"`
	}
	fileRoute struct {
		Communities      []string `yaml:"communities,omitempty,flow"`
		LargeCommunities []string `yaml:"largeCommunities,omitempty,flow"`
		LocalPreference  *uint32  `yaml:"localPreference,omitempty"`
		MED              *uint32  `yaml:"med,omitempty"`
	}
	// A backend is one line: services with thousands of them stay
	// readable, and the document small.
	fileBackend struct {
		Address     string     `yaml:"address"`
		Port        uint16     `yaml:"port"`
		Weight      uint32     `yaml:"weight"`
		HealthCheck *fileCheck `yaml:"healthCheck,omitempty,flow"`
	}
	fileCheck struct {
		Type         CheckType `yaml:"type"`
		Port         uint16    `yaml:"port"`
		Path         string    `yaml:"path,omitempty"`
		ExpectStatus string    `yaml:"expectStatus,omitempty"`
		Interval     string    `yaml:"interval"`
		Timeout      string    `yaml:"timeout"`
		Rise         int       `yaml:"rise"`
		Fall         int       `yaml:"fall"`
	}
)

func render(c *Config) *fileDoc {
	doc := &fileDoc{
		Node: fileNode{Interface: c.Node.Interface, Address: addr(c.Node.Address)},
		API:  fileAPI{Socket: c.API.Socket, Metrics: c.API.Metrics},
		Dataplane: fileDataplane{PinPath: c.Dataplane.PinPath, AttachMode: c.Dataplane.AttachMode, TableSize: c.Dataplane.TableSize, MaxBackends: c.Dataplane.MaxBackends,
			ConntrackSize: c.Dataplane.ConntrackSize, FlowHash: c.Dataplane.FlowHash},
	}
	if b := c.BGP; b != nil {
		fb := &fileBGP{ASN: b.ASN, RouterID: addr(b.RouterID), HoldTime: dur(b.HoldTime), DrainTime: dur(b.DrainTime), ListenPort: b.ListenPort}
		// A keepalive is 0 only with a hold time of 0, when it is left
		// out.
		if b.Keepalive != 0 {
			fb.Keepalive = dur(b.Keepalive)
		}
		for _, p := range b.Peers {
			fp := filePeer{Address: p.Address.String(), ASN: p.ASN, Port: p.Port, Password: p.Password, HoldTime: dur(p.HoldTime),
				Multihop: p.Multihop, Passive: p.Passive}
			if p.MaxPrefixes != DefaultMaxPrefixes {
				fp.MaxPrefixes = p.MaxPrefixes
			}
			if p.Keepalive != 0 {
				fp.Keepalive = dur(p.Keepalive)
			}
			if p.BFD != nil {
				fp.BFD = &fileBFD{MinRx: dur(p.BFD.MinRx), MinTx: dur(p.BFD.MinTx), Multiplier: p.BFD.Multiplier}
			}
			fb.Peers = append(fb.Peers, fp)
		}
		doc.BGP = fb
	}
	if k := c.Kubernetes; k != nil {
		doc.Kubernetes = &fileKubernetes{Kubeconfig: k.Kubeconfig, NodeName: k.NodeName, SecretNamespace: k.SecretNamespace, ServeClassless: k.ServeClassless}
	}
	for _, s := range c.Services {
		fs := fileService{Name: s.Name, VIP: s.VIP.String(), Port: s.Port, Protocol: s.Protocol, Forwarding: s.Forwarding,
			TranslatePorts: s.TranslatePorts, Backends: make([]fileBackend, 0, len(s.Backends))}
		if !s.BGP.IsZero() {
			fs.BGP = &fileRoute{Communities: s.BGP.Communities, LargeCommunities: s.BGP.LargeCommunities,
				LocalPreference: s.BGP.LocalPreference, MED: s.BGP.MED}
		}
		for _, b := range s.Backends {
			fs.Backends = append(fs.Backends, fileBackend{Address: b.Address.String(), Port: b.Port, Weight: b.Weight, HealthCheck: renderCheck(b.HealthCheck)})
		}
		fs.Flows = s.Flows
		for _, g := range s.History {
			fg := fileGen{Until: g.Until.UTC().Format(time.RFC3339), Backends: make([]fileBackend, 0, len(g.Backends))}
			for _, b := range g.Backends {
				fg.Backends = append(fg.Backends, fileBackend{Address: b.Address.String(), Port: b.Port, Weight: b.Weight})
			}
			fs.History = append(fs.History, fg)
		}
		doc.Services = append(doc.Services, fs)
	}
	return doc
}

// renderCheck renders a resolved health check with every field it uses, so
// that nothing depends on defaults; none is the default and left out.
func renderCheck(hc HealthCheck) *fileCheck {
	if hc.Type == CheckNone || hc.Type == "" {
		return nil
	}
	fc := &fileCheck{Type: hc.Type, Port: hc.Port, Interval: dur(hc.Interval), Timeout: dur(hc.Timeout), Rise: hc.Rise, Fall: hc.Fall}
	if hc.Type == CheckHTTP {
		fc.Path = hc.Path
		fc.ExpectStatus = fmt.Sprintf("%d-%d", hc.StatusMin, hc.StatusMax)
	}
	return fc
}

func dur(d time.Duration) string { return d.String() }

// addr renders an optional address: "" (left out) when unset.
func addr(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}
