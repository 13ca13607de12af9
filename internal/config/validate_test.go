package config

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/config/schema"
)

// Validate checks a Document built in code, which has no lines, by the
// rules a file passes: its errors name the source and the path, and a
// valid one gets every default, as a file does.
func TestValidateBuiltDocument(t *testing.T) {
	svc := func(name, vip, proto string, port int) schema.Field[schema.Service] {
		return schema.Set(schema.Service{Name: schema.Set(name), VIP: schema.Set(schema.Text(vip)), Port: schema.SetInt(port), Protocol: schema.Set(proto),
			Backends: schema.Set([]schema.Field[schema.Backend]{schema.Set(schema.Backend{Address: schema.Set(schema.Text("10.0.3.2"))})})})
	}
	doc := &schema.Document{
		Node:     schema.Set(schema.Node{Interface: schema.Set("eth0")}),
		Services: schema.Set([]schema.Field[schema.Service]{svc("web", "10.99.0.1", "tcp", 80), svc("web", "10.99.0.x", "sctp", 0)}),
	}
	_, err := Validate(doc, Env{File: "kubernetes"})
	want := []string{
		`kubernetes: services[1].name: "web" is already the name of services[0]; service names must be unique`,
		`kubernetes: services[1].vip: "10.99.0.x" is not an IP address; write an IPv4 (e.g. 10.99.0.1) or an IPv6 address (e.g. 2001:db8::1)`,
		`kubernetes: services[1].port: 0 is out of range 1..65535`,
		`kubernetes: services[1].protocol: "sctp" is not a protocol; use tcp or udp (lower case)`,
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Errorf("got\n%v\nwant\n%s", err, strings.Join(want, "\n"))
	}

	doc.Services.V = doc.Services.V[:1]
	cfg, err := Validate(doc, Env{File: "kubernetes"})
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Services[0]
	if cfg.API.Socket != DefaultSocket || cfg.Dataplane.TableSize != DefaultTableSize || s.Forwarding != DSRIPIP ||
		s.Backends[0] != (Backend{Address: netip.MustParseAddr("10.0.3.2"), Port: 80, Weight: DefaultWeight, HealthCheck: HealthCheck{Type: CheckNone}}) {
		t.Errorf("defaults not applied: %+v", cfg)
	}
}
