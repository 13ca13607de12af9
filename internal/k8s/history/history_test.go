package history

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/config"
)

func be(s string, w uint32) config.Backend {
	ap := netip.MustParseAddrPort(s)
	return config.Backend{Address: ap.Addr(), Port: ap.Port(), Weight: w}
}

// TestRecord: the first record has no past; a change moves the current
// sets into the past at the time of the change; an unchanged set (in
// another order) records nothing; the past keeps config.MaxHistory sets,
// each ending at its own second.
func TestRecord(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	a, b, c := be("10.244.1.2:8080", 1), be("10.244.1.3:8080", 1), be("10.244.2.2:8080", 0)
	h, changed := Record(History{}, Sets{"80/TCP": {b, a}}, t0)
	if !changed || len(h.Past) != 0 || !reflect.DeepEqual(h.Sets["80/TCP"], []config.Backend{a, b}) {
		t.Fatalf("first record: %+v, %v", h, changed)
	}
	if _, changed := Record(h, Sets{"80/TCP": {a, b}}, t0.Add(time.Second)); changed {
		t.Error("the same sets in another order recorded a change")
	}
	h2, changed := Record(h, Sets{"80/TCP": {a, c}}, t0.Add(1500*time.Millisecond))
	if !changed || len(h2.Past) != 1 || !h2.Past[0].Until.Equal(t0.Add(time.Second)) ||
		!reflect.DeepEqual(h2.Past[0].Sets, h.Sets) {
		t.Fatalf("change: %+v", h2)
	}
	// Two changes within a second end a second apart.
	h3, _ := Record(h2, Sets{"80/TCP": {a}}, t0.Add(1700*time.Millisecond))
	if !h3.Past[1].Until.Equal(t0.Add(2 * time.Second)) {
		t.Errorf("second change in the same second ends at %v", h3.Past[1].Until)
	}
	for i := range 20 {
		h3, _ = Record(h3, Sets{"80/TCP": {be(netip.AddrPortFrom(netip.MustParseAddr("10.244.3.1"), uint16(1000+i)).String(), 1)}}, t0.Add(time.Duration(10+i)*time.Second))
	}
	if len(h3.Past) != config.MaxHistory {
		t.Errorf("%d past sets, want %d", len(h3.Past), config.MaxHistory)
	}
}

// TestFormatParse: what Format writes, Parse reads back the same; the
// port's generations come out oldest first, empty where the port had no
// set.
func TestFormatParse(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	h, _ := Record(History{}, Sets{"80/TCP": {be("10.244.1.2:8080", 1)}}, t0)
	h, _ = Record(h, Sets{"80/TCP": {be("10.244.1.2:8080", 0), be("10.244.1.3:8080", 1)}, "53/UDP": {be("10.244.1.3:5353", 1)}}, t0.Add(time.Minute))
	h, _ = Record(h, Sets{"80/TCP": {be("10.244.1.3:8080", 3)}}, t0.Add(2*time.Minute))
	s := Format(h)
	if !strings.Contains(s, `"10.244.1.2:8080/0"`) || strings.Contains(s, `"10.244.1.3:8080/1"`) {
		t.Errorf("weights in %s", s)
	}
	got, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, h) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, h)
	}
	// 53/UDP did not exist in the first generation: left out.
	gens := got.Generations("53/UDP")
	if len(gens) != 1 || len(gens[0].Backends) != 1 || !gens[0].Until.Equal(t0.Add(2*time.Minute)) {
		t.Errorf("generations of 53/UDP: %+v", gens)
	}
	if gens := got.Generations("80/TCP"); len(gens) != 2 || len(gens[1].Backends) != 2 {
		t.Errorf("generations of 80/TCP: %+v", gens)
	}
	if PortKey(53, config.UDP) != "53/UDP" {
		t.Errorf("PortKey %q", PortKey(53, config.UDP))
	}
}

// TestFormatParse6: a dual-stack Service's history holds its IPv6
// endpoints under their own key, as [ADDRESS]:PORT, beside the IPv4 ones;
// each family's generations come out of its own key.
func TestFormatParse6(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	k4, k6 := PortKey(80, config.TCP), PortKey6(80, config.TCP)
	if k6 != "80/TCP/IPv6" {
		t.Errorf("PortKey6 %q", k6)
	}
	h, _ := Record(History{}, Sets{k4: {be("10.244.1.2:8080", 1)}, k6: {be("[fd00:244::2]:8080", 1)}}, t0)
	h, _ = Record(h, Sets{k4: {be("10.244.1.2:8080", 1)}, k6: {be("[fd00:244::3]:8080", 1), be("[fd00:244::2]:8080", 0)}}, t0.Add(time.Minute))
	h, _ = Record(h, Sets{k4: {be("10.244.1.3:8080", 1)}, k6: {be("[fd00:244::3]:8080", 1)}}, t0.Add(2*time.Minute))
	s := Format(h)
	for _, want := range []string{`"80/TCP/IPv6":["[fd00:244::3]:8080"]`, `"[fd00:244::2]:8080/0"`, `"80/TCP":["10.244.1.3:8080"]`} {
		if !strings.Contains(s, want) {
			t.Errorf("%s lacks %s", s, want)
		}
	}
	got, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, h) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, h)
	}
	g6 := got.Generations(k6)
	if len(g6) != 2 || !reflect.DeepEqual(g6[0].Backends, []config.Backend{be("[fd00:244::2]:8080", 1)}) ||
		!reflect.DeepEqual(g6[1].Backends, []config.Backend{be("[fd00:244::2]:8080", 0), be("[fd00:244::3]:8080", 1)}) {
		t.Errorf("generations of %s: %+v", k6, g6)
	}
	for _, g := range got.Generations(k4) {
		for _, b := range g.Backends {
			if !b.Address.Is4() {
				t.Errorf("generations of %s name %v", k4, b.Address)
			}
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`nonsense`, "not the JSON"},
		{`{"history": []}`, `no "sets"`},
		{`{"sets": {}, "extra": 1}`, "unknown field"},
		{`{"sets": {"80/TCP": ["10.244.1.2"]}}`, "want IPV4:PORT"},
		{`{"sets": {"80/TCP": ["[::1]:80"]}}`, "want IPV4:PORT"},
		{`{"sets": {"80/TCP/IPv6": ["10.244.1.2:80"]}}`, "want [IPV6]:PORT"},
		{`{"sets": {"80/TCP/IPv6": ["[::ffff:10.244.1.2]:80"]}}`, "want [IPV6]:PORT"},
		{`{"sets": {"80/TCP/IPv6": ["[fd00::1%eth0]:80"]}}`, "want [IPV6]:PORT"},
		{`{"sets": {"80/TCP/IPv6": ["[fd00::1]:0"]}}`, "want [IPV6]:PORT"},
		{`{"sets": {"80/TCP": ["10.244.1.2:80/x"]}}`, "not a number"},
		{`{"sets": {"80/TCP": ["10.244.1.2:80/70000"]}}`, "weight above"},
		{`{"sets": {}, "history": [{"until": "yesterday", "sets": {}}]}`, "not an RFC 3339"},
		{`{"sets": {}, "history": [{"until": "2026-11-25T10:00:00Z", "sets": {}}, {"until": "2026-11-25T10:00:00Z", "sets": {}}]}`, "not after"},
		{`{"sets": {}, "history": [{"until": "1960-01-01T00:00:00Z", "sets": {}}]}`, "outside"},
	} {
		if _, err := Parse(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%s): %v, want an error with %q", c.in, err, c.want)
		}
	}
}
