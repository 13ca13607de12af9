package schema

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// Decode reports what is wrong with the shape of a file and nothing of
// what its values mean: a port of 0 or a VIP that is no address are
// config.Validate's to find. Every value keeps where it was written.
func TestDecodeShapeOnly(t *testing.T) {
	const in = `node: {interface: eth0}
services:
  - name: web
    vip: not-an-address
    port: 0
    protocol: 6
    healthCheck: &hc {type: http, interval: 1}
    backends:
      - {address: 10.0.3.2, weight: heavy}
      - *hc
      - 10.0.3.4
`
	doc, errs := Decode("f.yaml", []byte(in))
	if doc == nil {
		t.Fatalf("no document: %v", errs.Err())
	}
	want := []string{
		`f.yaml:6: services[0].protocol: expected a string, got the integer 6; quote it ("6") if you mean the text`,
		`f.yaml:7: services[0].healthCheck.interval: expected a duration with a unit, got the integer 1; write e.g. 1ms or 1s`,
		`f.yaml:9: services[0].backends[0].weight: expected a whole number, got the string "heavy"`,
		`f.yaml:7: services[0].backends[1].type: unknown field; valid fields here: address, port, weight, healthCheck`,
		`f.yaml:7: services[0].backends[1].interval: unknown field; valid fields here: address, port, weight, healthCheck`,
		`f.yaml:11: services[0].backends[2]: expected a backend (a mapping with address and optionally port, weight and healthCheck), got the string "10.0.3.4"`,
	}
	got := strings.Split(errs.Err().Error(), "\n")
	if !sameSet(got, want) {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	s := doc.Services.V[0].V
	if s.VIP.V != "not-an-address" || s.VIP.At != (Pos{Key: 4, Value: 4, Node: 4}) || s.Port.V.N != 0 || !s.Port.Given || s.Port.Bad {
		t.Errorf("vip %+v, port %+v: want the values as written, with their lines", s.VIP, s.Port)
	}
	if !s.Protocol.Given || !s.Protocol.Bad || s.Protocol.V != "" {
		t.Errorf("protocol %+v: want a given, bad, empty field", s.Protocol)
	}
	if s.Forwarding.Given {
		t.Errorf("forwarding %+v: not written, yet given", s.Forwarding)
	}
	hc := s.HealthCheck.V
	if hc == nil || hc.Type.V != "http" || !hc.Interval.Bad || !s.HealthCheck.Flawed || s.HealthCheck.Bad {
		t.Errorf("healthCheck %+v: want type http and a bad interval", s.HealthCheck)
	}
	// The alias is used on line 10 and names the mapping on line 7.
	if at := s.Backends.V[1].At; at.Value != 10 || at.Node != 7 {
		t.Errorf("aliased backend at %+v, want used on line 10, written on line 7", at)
	}
	if b := s.Backends.V[2]; !b.Bad || b.At.Node != 11 {
		t.Errorf("backends[2] %+v: want bad, on line 11", b)
	}
	if w := s.Backends.V[0].V.Weight; !w.Bad {
		t.Errorf("weight %+v: want bad", w)
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		found := false
		for _, y := range b {
			found = found || x == y
		}
		if !found {
			return false
		}
	}
	return true
}

// A Document built in code marshals to a file that Decode reads back to
// the same values: the schema's structs are the file's format both ways.
func TestMarshalDecode(t *testing.T) {
	check := &Check{Type: Set("http"), Path: Set("/h"), ExpectStatus: Set(Status{Text: "200-204"}), Interval: SetDuration(1500 * time.Millisecond)}
	doc := Document{
		Node:      Set(Node{Interface: Set("eth0"), Address: Set(Text("10.0.1.2"))}),
		Dataplane: Set(Dataplane{TableSize: SetInt(251), AttachMode: Set("generic")}),
		BGP: Set(BGP{ASN: SetASN(65001), HoldTime: SetDuration(0),
			Peers: Set([]Field[Peer]{Set(Peer{Address: Set(Text("10.0.1.1")), ASN: SetASN(4200000000), Passive: Set(true), BFD: Set(BFD{})})})}),
		Services: Set([]Field[Service]{Set(Service{
			Name: Set("web"), VIP: Set(Text("10.99.0.1")), Port: SetInt(80), HealthCheck: Set(check),
			BGP:      Set(Route{Communities: SetTexts([]string{"65000:1", "no-export"}), MED: SetInt(0)}),
			Backends: Set([]Field[Backend]{Set(Backend{Address: Set(Text("10.0.3.2")), Weight: SetInt(0), HealthCheck: Set(&Check{Port: SetInt(8080)})})}),
		})}),
		Kubernetes: Set(Kubernetes{}),
	}
	data, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	back, errs := Decode("m.yaml", data)
	if err := errs.Err(); err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if got, want := strip(reflect.ValueOf(back).Elem()), strip(reflect.ValueOf(&doc).Elem()); !reflect.DeepEqual(got, want) {
		t.Errorf("read back\n%#v\nwant\n%#v\nfrom\n%s", got, want, data)
	}
}

// strip returns v without what Decode adds to what was built: positions,
// and the texts of durations.
func strip(v reflect.Value) any {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		return strip(v.Elem())
	case reflect.Slice:
		out := make([]any, v.Len())
		for i := range out {
			out[i] = strip(v.Index(i))
		}
		return out
	case reflect.Struct:
		switch x := v.Interface().(type) {
		case Pos:
			return nil
		case Duration:
			return x.D
		}
		out := map[string]any{}
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() && f.Name != "Misspelt" {
				out[f.Name] = strip(v.Field(i))
			}
		}
		return out
	}
	return v.Interface()
}
