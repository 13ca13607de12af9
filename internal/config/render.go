package config

import (
	"fmt"
	"net/netip"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/xlbproject/xlb/internal/config/schema"
)

// Marshal renders c as a configuration file. If c is a configuration
// Parse could have returned, Parse reads the rendering back into a Config
// equal to c: every value is written out.
func Marshal(c *Config) ([]byte, error) {
	out, err := yaml.Marshal(Render(c))
	if err != nil {
		return nil, fmt.Errorf("render the configuration: %w", err)
	}
	return out, nil
}

// Render is the document of c, every value written out, as Marshal writes
// it. ValidateConfig checks a configuration built in code through it, so
// that what a cluster builds passes exactly the checks a file passes.
func Render(c *Config) *schema.Document {
	dp := c.Dataplane
	doc := &schema.Document{
		Node: schema.Set(schema.Node{Interface: schema.Set(c.Node.Interface), Address: addr(c.Node.Address), Address6: addr(c.Node.Address6)}),
		API:  schema.Set(schema.API{Socket: schema.Set(c.API.Socket), Metrics: text(c.API.Metrics)}),
		Dataplane: schema.Set(schema.Dataplane{
			PinPath:    str(dp.PinPath),
			AttachMode: schema.Set(string(dp.AttachMode)),
			TableSize:  schema.SetInt(dp.TableSize), MaxBackends: schema.SetInt(dp.MaxBackends),
			FlowHash: str(dp.FlowHash), PingVIPs: schema.Set(dp.PingVIPs),
		}),
	}
	if dp.ConntrackSize != 0 {
		doc.Dataplane.V.ConntrackSize = schema.SetInt(dp.ConntrackSize)
	}
	if a := c.Node.Announce; a != "" && a != AnnounceBGP {
		doc.Node.V.Announce = schema.Set(string(a))
	}
	if b := c.BGP; b != nil {
		doc.BGP = schema.Set(renderBGP(b))
	}
	if l := c.L2; l != nil {
		doc.L2 = schema.Set(renderL2(l))
	}
	if k := c.Kubernetes; k != nil {
		doc.Kubernetes = schema.Set(schema.Kubernetes{Kubeconfig: str(k.Kubeconfig), NodeName: str(k.NodeName), SecretNamespace: str(k.SecretNamespace)})
		if k.ServeClassless {
			doc.Kubernetes.V.ServeClassless = schema.Set(true)
		}
	}
	if len(c.Policy.Deny) > 0 {
		doc.Policy = schema.Set(schema.Policy{Deny: prefixTexts(c.Policy.Deny)})
	}
	if n := c.NAT; n != (NATConfig{}) && n != DefaultNAT() {
		doc.NAT = schema.Set(renderNAT(n))
	}
	if len(c.Services) > 0 {
		services := make([]schema.Field[schema.Service], len(c.Services))
		for i, s := range c.Services {
			services[i] = schema.Set(renderService(s))
		}
		doc.Services = schema.Set(services)
	}
	return doc
}

// renderL2 writes the l2 section, every value written out.
func renderL2(l *L2) schema.L2 {
	nodes := make([]schema.Field[schema.L2Node], len(l.Nodes))
	for i, n := range l.Nodes {
		nodes[i] = schema.Set(schema.L2Node{Name: schema.Set(n.Name), Address: addr(n.Address)})
	}
	return schema.L2{NodeName: str(l.NodeName), Port: schema.SetInt(l.Port),
		Heartbeat: schema.SetDuration(l.Heartbeat), DeadAfter: schema.SetDuration(l.DeadAfter), Nodes: schema.Set(nodes)}
}

// renderNAT writes the nat section. A zero field, as a configuration
// built in code may leave one, is left out: its default applies.
func renderNAT(n NATConfig) schema.NAT {
	out := schema.NAT{Address: addr(n.Address)}
	if n.Ports != (PortRange{}) {
		out.Ports = schema.Set(schema.Text(n.Ports.String()))
	}
	if n.Sessions != 0 {
		out.Sessions = schema.SetInt(n.Sessions)
	}
	dur := func(d time.Duration) schema.Field[schema.Duration] {
		if d == 0 {
			return schema.Field[schema.Duration]{}
		}
		return schema.SetDuration(d)
	}
	if t := n.Timeouts; t != (NATTimeouts{}) {
		out.Timeouts = schema.Set(schema.NATTimeouts{TCPSyn: dur(t.TCPSyn), TCPEstablished: dur(t.TCPEstablished),
			TCPClosing: dur(t.TCPClosing), UDP: dur(t.UDP), TCPTimeWait: dur(t.TCPTimeWait)})
	}
	return out
}

func renderBGP(b *BGP) schema.BGP {
	fb := schema.BGP{ASN: schema.SetASN(b.ASN), RouterID: addr(b.RouterID), HoldTime: schema.SetDuration(b.HoldTime),
		DrainTime: schema.SetDuration(b.DrainTime), ListenPort: schema.SetInt(b.ListenPort)}
	// A keepalive is 0 only with a hold time of 0, when it is left out.
	if b.Keepalive != 0 {
		fb.Keepalive = schema.SetDuration(b.Keepalive)
	}
	if len(b.Peers) == 0 {
		return fb
	}
	peers := make([]schema.Field[schema.Peer], len(b.Peers))
	for i, p := range b.Peers {
		fp := schema.Peer{Address: schema.Set(schema.Text(p.Address.String())), ASN: schema.SetASN(p.ASN), Port: schema.SetInt(p.Port),
			Password: str(p.Password), HoldTime: schema.SetDuration(p.HoldTime)}
		if p.Keepalive != 0 {
			fp.Keepalive = schema.SetDuration(p.Keepalive)
		}
		if p.Multihop != 0 {
			fp.Multihop = schema.SetInt(p.Multihop)
		}
		if p.Passive {
			fp.Passive = schema.Set(true)
		}
		// Left out at its default.
		if p.MaxPrefixes != DefaultMaxPrefixes && p.MaxPrefixes != 0 {
			fp.MaxPrefixes = schema.SetInt(p.MaxPrefixes)
		}
		if f := p.BFD; f != nil {
			fp.BFD = schema.Set(schema.BFD{MinRx: schema.SetDuration(f.MinRx), MinTx: schema.SetDuration(f.MinTx), Multiplier: schema.SetInt(f.Multiplier)})
		}
		if g := p.GracefulRestart; g != nil {
			fp.GracefulRestart = schema.Set(schema.GracefulRestart{RestartTime: schema.SetDuration(g.RestartTime)})
		}
		peers[i] = schema.Set(fp)
	}
	fb.Peers = schema.Set(peers)
	return fb
}

func renderService(s Service) schema.Service {
	fs := schema.Service{Name: schema.Set(s.Name), VIP: schema.Set(schema.Text(s.VIP.String())), Port: schema.SetInt(s.Port),
		Protocol: schema.Set(string(s.Protocol)), Forwarding: schema.Set(string(s.Forwarding)), Flows: str(string(s.Flows)),
		Affinity: str(string(s.Affinity)), Announce: str(string(s.Announce)), Backends: renderBackends(s.Backends, true)}
	if len(s.SourceRanges) > 0 {
		fs.SourceRanges = prefixTexts(s.SourceRanges)
	}
	if s.TranslatePorts {
		fs.TranslatePorts = schema.Set(true)
	}
	if a := s.BGP; !a.IsZero() {
		r := schema.Route{}
		if len(a.Communities) > 0 {
			r.Communities = schema.SetTexts(a.Communities)
		}
		if len(a.LargeCommunities) > 0 {
			r.LargeCommunities = schema.SetTexts(a.LargeCommunities)
		}
		if a.LocalPreference != nil {
			r.LocalPreference = schema.SetInt(*a.LocalPreference)
		}
		if a.MED != nil {
			r.MED = schema.SetInt(*a.MED)
		}
		fs.BGP = schema.Set(r)
	}
	if len(s.History) > 0 {
		history := make([]schema.Field[schema.Generation], len(s.History))
		for i, g := range s.History {
			history[i] = schema.Set(schema.Generation{Until: schema.Set(schema.Text(g.Until.UTC().Format(time.RFC3339))),
				Backends: renderBackends(g.Backends, false)})
		}
		fs.History = schema.Set(history)
	}
	return fs
}

// renderBackends writes backends, with their health checks when checks
// is set.
func renderBackends(backends []Backend, checks bool) schema.Field[[]schema.Field[schema.Backend]] {
	out := make([]schema.Field[schema.Backend], len(backends))
	for i, b := range backends {
		fb := schema.Backend{Address: schema.Set(schema.Text(b.Address.String())), Port: schema.SetInt(b.Port), Weight: schema.SetInt(b.Weight)}
		if checks {
			fb.HealthCheck = renderCheck(b.HealthCheck)
		}
		out[i] = schema.Set(fb)
	}
	return schema.Set(out)
}

// renderCheck renders a resolved health check with every field it uses, so
// that nothing depends on defaults; none is the default and left out.
func renderCheck(hc HealthCheck) schema.Field[*schema.Check] {
	if hc.Type == CheckNone || hc.Type == "" {
		return schema.Field[*schema.Check]{}
	}
	fc := schema.Check{Type: schema.Set(string(hc.Type)), Port: schema.SetInt(hc.Port), Interval: schema.SetDuration(hc.Interval),
		Timeout: schema.SetDuration(hc.Timeout), Rise: schema.SetInt(hc.Rise), Fall: schema.SetInt(hc.Fall)}
	if hc.Type == CheckHTTP {
		fc.Path = str(hc.Path)
		fc.ExpectStatus = schema.Set(schema.Status{Text: fmt.Sprintf("%d-%d", hc.StatusMin, hc.StatusMax)})
	}
	return schema.Set(&fc)
}

// str writes an optional string: left out when "".
func str(s string) schema.Field[string] {
	if s == "" {
		return schema.Field[string]{}
	}
	return schema.Set(s)
}

// text writes an optional text: left out when "".
func text(s string) schema.Field[schema.Text] {
	if s == "" {
		return schema.Field[schema.Text]{}
	}
	return schema.Set(schema.Text(s))
}

// addr writes an optional address: left out when unset.
func addr(a netip.Addr) schema.Field[schema.Text] {
	if !a.IsValid() {
		return schema.Field[schema.Text]{}
	}
	return schema.Set(schema.Text(a.String()))
}

// prefixTexts writes a list of prefixes.
func prefixTexts(ps []netip.Prefix) schema.Field[[]schema.Field[schema.Text]] {
	out := make([]schema.Field[schema.Text], len(ps))
	for i, p := range ps {
		out[i] = schema.Set(schema.Text(p.String()))
	}
	return schema.Set(out)
}
