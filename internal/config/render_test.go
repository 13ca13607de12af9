package config

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// roundTrip checks that Marshal renders cfg as a document that parses back
// to an equal configuration.
func roundTrip(cfg *Config) error {
	data, err := Marshal(cfg)
	if err != nil {
		return err
	}
	back, err := Parse("rendered.yaml", data)
	if err != nil {
		return fmt.Errorf("the rendering does not parse: %v\nrendering:\n%s", err, data)
	}
	if !reflect.DeepEqual(back, cfg) {
		return fmt.Errorf("the rendering parses to\n%+v\nwant\n%+v\nrendering:\n%s", back, cfg, data)
	}
	valid, err := ValidateConfig(cfg, Env{File: "built"})
	if err != nil {
		return fmt.Errorf("Validate rejects what Parse accepts: %v\nrendering:\n%s", err, data)
	}
	if !reflect.DeepEqual(valid, cfg) {
		return fmt.Errorf("Validate returns\n%+v\nwant\n%+v", valid, cfg)
	}
	return nil
}

func TestMarshalRoundTrip(t *testing.T) {
	full, err := os.ReadFile(filepath.Join("testdata", "full.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{
		"full example": string(full),
		"minimal":      minimal,
		"no services":  "node: {interface: eth0}\n",
		"hold time 0 in the section, peers with their own": "node: {interface: eth0, address: 10.0.1.2}\nbgp:\n  asn: 65001\n  holdTime: 0\n  drainTime: 0\n  peers:\n" +
			"    - {address: 10.0.1.1, asn: 65000, holdTime: 30s, keepalive: 7s, multihop: 4, maxPrefixes: 1}\n    - {address: 10.0.1.3, asn: 65001, passive: true, password: \"no\", maxPrefixes: 100000}\n",
		"peer hold time 0 under a section keepalive": "node: {interface: eth0}\nbgp: {asn: 65001, routerID: 1.2.3.4, keepalive: 2s, listenPort: 1179, peers: [{address: 10.0.1.1, asn: 65000, holdTime: 0, bfd: {}}]}\n",
		"shared route attributes and aliases": "node: {interface: eth0}\nbgp: {asn: 65001, peers: [{address: 10.0.1.1, asn: 65000}]}\nservices:\n" +
			"  - &s {name: a, vip: 10.99.0.1, port: 80, bgp: {communities: [\"65535:65281\", \"1:2\"], med: 0}, backends: &b [{address: 10.0.3.2, weight: 0}, {address: 10.0.3.3}]}\n" +
			"  - {<<: *s, name: b, protocol: udp, forwarding: dsr-gue}\n  - {name: c, vip: 10.99.0.1, port: 81, backends: *b}\n",
		"health checks": "node: {interface: eth0}\ndataplane: {tableSize: 251, maxBackends: 10, pinPath: /sys/fs/bpf/x, attachMode: generic}\napi: {metrics: \":9400\"}\nservices:\n  - name: a\n    vip: 10.99.0.1\n    port: 80\n" +
			"    healthCheck: {type: http, path: \"/h?x=1\", expectStatus: 204, interval: 1h, timeout: 1ns, rise: 100, fall: 1}\n" +
			"    backends: [{address: 10.0.3.2, healthCheck: {type: tcp, port: 22}}, {address: 10.0.3.3, healthCheck: {type: none}}, {address: 10.0.3.4}]\n",
	}
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			cfg, err := Parse(file, []byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			if err := roundTrip(cfg); err != nil {
				t.Error(err)
			}
		})
	}
}

// Validate rejects what Parse rejects in the rendering, with the same
// paths and reasons, only without lines.
func TestValidateAgreesWithParse(t *testing.T) {
	base := func() *Config {
		cfg, err := Parse(file, []byte("node: {interface: eth0, address: 10.0.1.2}\nbgp: {asn: 65001, peers: [{address: 10.0.1.1, asn: 65000}]}\n"+
			"services:\n  - {name: a, vip: 10.99.0.1, port: 80, healthCheck: {type: http, interval: 1s}, backends: [{address: 10.0.3.2}, {address: 10.0.3.3}]}\n"+
			"  - {name: b, vip: 10.99.0.2, port: 80, backends: [{address: 10.0.3.2}]}\n"))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	tests := map[string]func(*Config){
		"same key":           func(c *Config) { c.Services[1].VIP = c.Services[0].VIP },
		"same name":          func(c *Config) { c.Services[1].Name = "a" },
		"loopback VIP":       func(c *Config) { c.Services[1].VIP = netip.MustParseAddr("127.0.0.1") },
		"no VIP":             func(c *Config) { c.Services[1].VIP = netip.Addr{} },
		"backend port":       func(c *Config) { c.Services[1].Backends[0].Port = 8080 },
		"duplicate backend":  func(c *Config) { c.Services[0].Backends[1].Address = c.Services[0].Backends[0].Address },
		"all drained":        func(c *Config) { c.Services[1].Backends[0].Weight = 0 },
		"timeout > interval": func(c *Config) { c.Services[0].Backends[0].HealthCheck.Timeout = 2 * time.Second },
		"peer is the node":   func(c *Config) { c.BGP.Peers[0].Address = c.Node.Address },
		"VIP is the node":    func(c *Config) { c.Services[1].VIP = c.Node.Address },
		"backend is the node": func(c *Config) {
			c.Services[1].Backends[0].Address = c.Node.Address
		},
		"backend at a VIP": func(c *Config) { c.Services[0].Backends[1].Address = c.Services[1].VIP },
		"duplicate peer": func(c *Config) {
			c.BGP.Peers = append(c.BGP.Peers, c.BGP.Peers[0])
		},
		"keepalive above the hold time": func(c *Config) { c.BGP.Peers[0].Keepalive = time.Minute },
		"table size not prime":          func(c *Config) { c.Dataplane.TableSize = 1000 },
		"name":                          func(c *Config) { c.Services[0].Name = "A/b" },
	}
	for name, edit := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := base()
			edit(cfg)
			data, err := Marshal(cfg)
			if err != nil {
				t.Fatal(err)
			}
			_, perr := Parse("x", data)
			_, verr := ValidateConfig(cfg, Env{File: "x"})
			if perr == nil || verr == nil {
				t.Fatalf("Parse: %v\nValidate: %v", perr, verr)
			}
			if want, got := withoutLines(perr), withoutLines(verr); !reflect.DeepEqual(got, want) {
				t.Errorf("Validate:\n%s\nParse of the rendering:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// withoutLines lists an error's problems as "path: message", with the
// lines taken out.
func withoutLines(err error) []string {
	var out []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var ce *Error
		if !errors.As(e, &ce) {
			out = append(out, e.Error())
			continue
		}
		msg := regexp.MustCompile(` \(line \d+\)`).ReplaceAllString(ce.Msg, "")
		out = append(out, ce.Path+": "+regexp.MustCompile(`, line \d+`).ReplaceAllString(msg, ""))
	}
	slices.Sort(out)
	return out
}
