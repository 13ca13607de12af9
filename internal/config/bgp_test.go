package config

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

// withBGP returns a configuration with node.address 10.0.1.2, no services
// and the bgp section written on line 2 as the flow mapping bgp.
func withBGP(bgp string) string {
	return "node: {interface: eth0, address: 10.0.1.2}\nbgp: " + bgp + "\n"
}

// onePeer is the smallest valid bgp section, for withBGP.
const onePeer = "{asn: 65001, peers: [{address: 10.0.1.1, asn: 65000}]}"

// peerWith returns onePeer with the peer's fields extended by extra.
func peerWith(extra string) string {
	return withBGP("{asn: 65001, peers: [{address: 10.0.1.1, asn: 65000, " + extra + "}]}")
}

// topWith returns onePeer with the section's fields extended by extra.
func topWith(extra string) string {
	return withBGP("{asn: 65001, " + extra + ", peers: [{address: 10.0.1.1, asn: 65000}]}")
}

// defaultPeer is the peer of onePeer with every default filled in.
func defaultPeer() Peer {
	return Peer{Address: netip.MustParseAddr("10.0.1.1"), ASN: 65000, Port: DefaultBGPPort,
		HoldTime: DefaultHoldTime, Keepalive: 3 * time.Second, MaxPrefixes: DefaultMaxPrefixes}
}

// defaultBGP is onePeer's section with every default filled in.
func defaultBGP() *BGP {
	return &BGP{ASN: 65001, RouterID: netip.MustParseAddr("10.0.1.2"), HoldTime: DefaultHoldTime,
		Keepalive: 3 * time.Second, DrainTime: DefaultDrainTime, Peers: []Peer{defaultPeer()}}
}

func TestBGPValid(t *testing.T) {
	ip := netip.MustParseAddr
	s := time.Second
	tests := []struct {
		name string
		yaml string
		want func(b *BGP) // edits defaultBGP() into the expected section
	}{
		{"defaults", withBGP(onePeer), func(*BGP) {}},
		{"block style", "node:\n  interface: eth0\n  address: 10.0.1.2\nbgp:\n  asn: 65001\n  peers:\n    - address: 10.0.1.1\n      asn: 65000\n", func(*BGP) {}},
		{"router ID defaults to nothing without node.address", "node: {interface: eth0}\nbgp: " + onePeer + "\n", func(b *BGP) {
			b.RouterID = netip.Addr{}
		}},
		{"empty router ID is unset", topWith(`routerID: ""`), func(*BGP) {}},
		{"router ID of its own", topWith("routerID: 192.0.2.255"), func(b *BGP) { b.RouterID = ip("192.0.2.255") }},
		{"router ID needs not be unicast", topWith("routerID: 255.255.255.255"), func(b *BGP) { b.RouterID = ip("255.255.255.255") }},
		{"largest ASN", withBGP("{asn: 4294967295, peers: [{address: 10.0.1.1, asn: 1}]}"), func(b *BGP) {
			b.ASN, b.Peers[0].ASN = 4294967295, 1
		}},
		{"hold time 0: no keepalives, also for the peers", topWith("holdTime: 0"), func(b *BGP) {
			b.HoldTime, b.Keepalive = 0, 0
			b.Peers[0].HoldTime, b.Peers[0].Keepalive = 0, 0
		}},
		{"hold time 0s", topWith("holdTime: 0s"), func(b *BGP) {
			b.HoldTime, b.Keepalive = 0, 0
			b.Peers[0].HoldTime, b.Peers[0].Keepalive = 0, 0
		}},
		{"keepalive a third of the hold time, whole seconds", topWith("holdTime: 4s"), func(b *BGP) {
			b.HoldTime, b.Keepalive = 4*s, s
			b.Peers[0].HoldTime, b.Peers[0].Keepalive = 4*s, s
		}},
		{"longest hold time, in other units", topWith("holdTime: 18h12m15s, keepalive: 65534s"), func(b *BGP) {
			b.HoldTime, b.Keepalive = MaxHoldTime, MaxHoldTime-s
			b.Peers[0].HoldTime, b.Peers[0].Keepalive = MaxHoldTime, MaxHoldTime-s
		}},
		{"milliseconds that are whole seconds", topWith("holdTime: 30000ms"), func(b *BGP) {
			b.HoldTime, b.Keepalive = 30*s, 10*s
			b.Peers[0].HoldTime, b.Peers[0].Keepalive = 30*s, 10*s
		}},
		{"peer hold time: keepalive a third of it", peerWith("holdTime: 90s"), func(b *BGP) {
			b.Peers[0].HoldTime, b.Peers[0].Keepalive = 90*s, 30*s
		}},
		{"peer hold time: the section's written keepalive is inherited", withBGP("{asn: 65001, keepalive: 2s, peers: [{address: 10.0.1.1, asn: 65000, holdTime: 90s}]}"), func(b *BGP) {
			b.Keepalive = 2 * s
			b.Peers[0].HoldTime, b.Peers[0].Keepalive = 90*s, 2*s
		}},
		{"peer keepalive only", peerWith("keepalive: 1s"), func(b *BGP) { b.Peers[0].Keepalive = s }},
		{"peer hold time 0 drops the inherited keepalive", withBGP("{asn: 65001, keepalive: 2s, peers: [{address: 10.0.1.1, asn: 65000, holdTime: 0}]}"), func(b *BGP) {
			b.Keepalive = 2 * s
			b.Peers[0].HoldTime, b.Peers[0].Keepalive = 0, 0
		}},
		{"peer with a hold time under a section without", withBGP("{asn: 65001, holdTime: 0, peers: [{address: 10.0.1.1, asn: 65000, holdTime: 6s}]}"), func(b *BGP) {
			b.HoldTime, b.Keepalive = 0, 0
			b.Peers[0].HoldTime, b.Peers[0].Keepalive = 6*s, 2*s
		}},
		{"drain time 0", topWith("drainTime: 0"), func(b *BGP) { b.DrainTime = 0 }},
		{"longest drain time", topWith("drainTime: 10m"), func(b *BGP) { b.DrainTime = MaxDrainTime }},
		{"sub-second drain time", topWith("drainTime: 1500ms"), func(b *BGP) { b.DrainTime = 1500 * time.Millisecond }},
		{"a passive peer opens port 179", peerWith("passive: true"), func(b *BGP) {
			b.ListenPort = DefaultBGPPort
			b.Peers[0].Passive = true
		}},
		{"a passive peer on another port", withBGP("{asn: 65001, listenPort: 1179, peers: [{address: 10.0.1.1, asn: 65000, passive: true}]}"), func(b *BGP) {
			b.ListenPort = 1179
			b.Peers[0].Passive = true
		}},
		{"listener without passive peers", topWith("listenPort: 179"), func(b *BGP) { b.ListenPort = 179 }},
		{"explicitly no listener", topWith("listenPort: 0"), func(*BGP) {}},
		{"passive: false", peerWith("passive: false"), func(*BGP) {}},
		{"every peer field", peerWith(`port: 1179, password: "s3cret ~!", multihop: 255, holdTime: 30s, keepalive: 5s, maxPrefixes: 200`), func(b *BGP) {
			p := &b.Peers[0]
			p.Port, p.Password, p.Multihop, p.HoldTime, p.Keepalive, p.MaxPrefixes = 1179, "s3cret ~!", 255, 30*s, 5*s, 200
		}},
		{"smallest prefix limit", peerWith("maxPrefixes: 1"), func(b *BGP) { b.Peers[0].MaxPrefixes = 1 }},
		{"largest prefix limit", peerWith("maxPrefixes: 100000"), func(b *BGP) { b.Peers[0].MaxPrefixes = MaxMaxPrefixes }},
		{"longest password", peerWith(`password: "` + strings.Repeat("~", MaxPasswordLen) + `"`), func(b *BGP) {
			b.Peers[0].Password = strings.Repeat("~", MaxPasswordLen)
		}},
		{"iBGP peer", withBGP("{asn: 65001, peers: [{address: 10.0.1.1, asn: 65001}]}"), func(b *BGP) { b.Peers[0].ASN = 65001 }},
		{"bfd: {} takes the defaults", peerWith("bfd: {}"), func(b *BGP) {
			b.Peers[0].BFD = &BFD{MinRx: DefaultBFDInterval, MinTx: DefaultBFDInterval, Multiplier: DefaultBFDMultiplier}
		}},
		{"bfd without a value takes the defaults", "node: {interface: eth0, address: 10.0.1.2}\nbgp:\n  asn: 65001\n  peers:\n    - address: 10.0.1.1\n      asn: 65000\n      bfd:\n", func(b *BGP) {
			b.Peers[0].BFD = &BFD{MinRx: DefaultBFDInterval, MinTx: DefaultBFDInterval, Multiplier: DefaultBFDMultiplier}
		}},
		{"gracefulRestart: {} takes the default restart time", peerWith("gracefulRestart: {}"), func(b *BGP) {
			b.Peers[0].GracefulRestart = &GracefulRestart{RestartTime: DefaultRestartTime}
		}},
		{"gracefulRestart without a value takes the default", "node: {interface: eth0, address: 10.0.1.2}\nbgp:\n  asn: 65001\n  peers:\n    - address: 10.0.1.1\n      asn: 65000\n      gracefulRestart:\n", func(b *BGP) {
			b.Peers[0].GracefulRestart = &GracefulRestart{RestartTime: DefaultRestartTime}
		}},
		{"restart time at its limits", peerWith("gracefulRestart: {restartTime: 1s}"), func(b *BGP) {
			b.Peers[0].GracefulRestart = &GracefulRestart{RestartTime: MinRestartTime}
		}},
		{"longest restart time", peerWith("gracefulRestart: {restartTime: 4095s}"), func(b *BGP) {
			b.Peers[0].GracefulRestart = &GracefulRestart{RestartTime: MaxRestartTime}
		}},
		{"bfd at its limits", peerWith("bfd: {minRx: 10ms, minTx: 1m, multiplier: 255}"), func(b *BGP) {
			b.Peers[0].BFD = &BFD{MinRx: MinBFDInterval, MinTx: MaxBFDInterval, Multiplier: 255}
		}},
		{"two peers, one shared anchor", withBGP("{asn: 65001, peers: [&p {address: 10.0.1.1, asn: 65000, holdTime: 3s}, {<<: *p, address: 10.0.1.3}]}"), func(b *BGP) {
			p := defaultPeer()
			p.HoldTime, p.Keepalive = 3*s, s
			b.Peers = []Peer{p, p}
			b.Peers[1].Address = ip("10.0.1.3")
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse(file, []byte(tc.yaml))
			if err != nil {
				t.Fatalf("unexpected error:\n%v", err)
			}
			want := defaultBGP()
			tc.want(want)
			if !reflect.DeepEqual(cfg.BGP, want) {
				t.Errorf("got\n%+v\nwant\n%+v", *cfg.BGP, *want)
			}
			if err := invariants(cfg); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestNoBGPSection(t *testing.T) {
	cfg, err := Parse(file, []byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.BGP != nil || !cfg.Services[0].BGP.IsZero() {
		t.Errorf("bgp = %+v, service bgp = %+v; want nil and none", cfg.BGP, cfg.Services[0].BGP)
	}
}

// withRoute returns a configuration with a bgp section and one service
// per attrs, each on its own line from line 4 on, all with the VIP
// 10.99.0.1 and ports 80, 81, ...; an attrs of "" writes no bgp field.
func withRoute(attrs ...string) string {
	var b strings.Builder
	b.WriteString(withBGP(onePeer) + "services:\n")
	for i, a := range attrs {
		fmt.Fprintf(&b, "  - {name: s%d, vip: 10.99.0.1, port: %d, ", i, 80+i)
		if a != "" {
			b.WriteString("bgp: " + a + ", ")
		}
		b.WriteString("backends: [{address: 10.0.3.2}]}\n")
	}
	return b.String()
}

func TestRouteAttributes(t *testing.T) {
	u32 := func(v uint32) *uint32 { return &v }
	tests := []struct {
		name string
		yaml string
		want []RouteAttributes // per service
	}{
		{"none", withRoute(""), []RouteAttributes{{}}},
		{"empty mapping", withRoute("{}"), []RouteAttributes{{}}},
		{"empty lists", withRoute("{communities: [], largeCommunities: []}"), []RouteAttributes{{}}},
		{"normalised and sorted", withRoute(`{communities: [no-peer, "065000:0100", "1:2", Blackhole, "65535:65282", GRACEFUL-SHUTDOWN, "0:0", "65535:1"], largeCommunities: ["4294967295:0:01", "1:2:3", "1:0:4294967295"]}`),
			[]RouteAttributes{{
				Communities:      []string{"0:0", "1:2", "65000:100", "graceful-shutdown", "65535:1", "blackhole", "no-advertise", "no-peer"},
				LargeCommunities: []string{"1:0:4294967295", "1:2:3", "4294967295:0:1"},
			}}},
		{"numbers at their limits", withRoute("{localPreference: 0, med: 4294967295}"), []RouteAttributes{{LocalPreference: u32(0), MED: u32(4294967295)}}},
		{"every community", withRoute("{communities: [no-export, no-advertise, no-export-subconfed, no-peer, blackhole, graceful-shutdown]}"),
			[]RouteAttributes{{Communities: []string{"graceful-shutdown", "blackhole", "no-export", "no-advertise", "no-export-subconfed", "no-peer"}}}},
		{"a shared VIP's route applies to all its services", withRoute("", `{communities: ["65000:1"], med: 5}`, "", `{med: 5, communities: ["65000:01"]}`),
			[]RouteAttributes{
				{Communities: []string{"65000:1"}, MED: u32(5)},
				{Communities: []string{"65000:1"}, MED: u32(5)},
				{Communities: []string{"65000:1"}, MED: u32(5)},
				{Communities: []string{"65000:1"}, MED: u32(5)},
			}},
		{"an empty bgp beside a shared VIP's", withRoute("{}", "{med: 7}"), []RouteAttributes{{MED: u32(7)}, {MED: u32(7)}}},
		{"another VIP keeps its own", withRoute("{med: 7}") + "  - {name: other, vip: 10.99.0.2, port: 80, backends: [{address: 10.0.3.2}]}\n",
			[]RouteAttributes{{MED: u32(7)}, {}}},
		{"anchored attributes", withRoute("&r {localPreference: 300}") + "  - {name: other, vip: 10.99.0.2, port: 80, bgp: *r, backends: [{address: 10.0.3.2}]}\n",
			[]RouteAttributes{{LocalPreference: u32(300)}, {LocalPreference: u32(300)}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse(file, []byte(tc.yaml))
			if err != nil {
				t.Fatalf("unexpected error:\n%v", err)
			}
			if len(cfg.Services) != len(tc.want) {
				t.Fatalf("got %d services, want %d", len(cfg.Services), len(tc.want))
			}
			for i, w := range tc.want {
				if got := cfg.Services[i].BGP; !reflect.DeepEqual(got, w) {
					t.Errorf("services[%d].bgp = %s, want %s", i, fmtAttrs(got), fmtAttrs(w))
				}
			}
			if err := invariants(cfg); err != nil {
				t.Error(err)
			}
		})
	}
}

func fmtAttrs(a RouteAttributes) string {
	n := func(p *uint32) string {
		if p == nil {
			return "nil"
		}
		return fmt.Sprint(*p)
	}
	return fmt.Sprintf("{%q %q lp=%s med=%s}", a.Communities, a.LargeCommunities, n(a.LocalPreference), n(a.MED))
}

// Services that share a VIP share the attributes' storage only by value:
// changing one service's copy must not change another's.
func TestSharedRouteIsCopied(t *testing.T) {
	cfg, err := Parse(file, []byte(withRoute(`{communities: ["1:1"], med: 1}`, "")))
	if err != nil {
		t.Fatal(err)
	}
	a, b := cfg.Services[0].BGP, cfg.Services[1].BGP
	a.Communities[0] = "x"
	*a.MED = 2
	if b.Communities[0] != "1:1" || *b.MED != 1 {
		t.Errorf("the second service's attributes changed with the first's: %s", fmtAttrs(b))
	}
}

func TestRouteAttributesEqual(t *testing.T) {
	u32 := func(v uint32) *uint32 { return &v }
	base := RouteAttributes{Communities: []string{"1:1"}, LargeCommunities: []string{"1:2:3"}, LocalPreference: u32(1), MED: u32(2)}
	same := RouteAttributes{Communities: []string{"1:1"}, LargeCommunities: []string{"1:2:3"}, LocalPreference: u32(1), MED: u32(2)}
	if !base.Equal(same) || base.IsZero() || !(RouteAttributes{}).IsZero() || !(RouteAttributes{Communities: []string{}}).IsZero() {
		t.Fatal("Equal or IsZero is wrong on equal values")
	}
	for _, other := range []RouteAttributes{
		{Communities: []string{"1:2"}, LargeCommunities: []string{"1:2:3"}, LocalPreference: u32(1), MED: u32(2)},
		{Communities: []string{"1:1"}, LargeCommunities: []string{"1:2:4"}, LocalPreference: u32(1), MED: u32(2)},
		{Communities: []string{"1:1"}, LargeCommunities: []string{"1:2:3"}, MED: u32(2)},
		{Communities: []string{"1:1"}, LargeCommunities: []string{"1:2:3"}, LocalPreference: u32(1), MED: u32(3)},
	} {
		if base.Equal(other) || other.Equal(base) {
			t.Errorf("%s equals %s", fmtAttrs(other), fmtAttrs(base))
		}
	}
}

func TestBGPErrors(t *testing.T) {
	const block = `node: {interface: eth0, address: 10.0.1.2}
bgp:
  asn: 65001
  holdTime: 6s
  keepalive: 2s
  peers:
    - address: 10.0.1.1
      asn: 65000
`
	tests := []struct {
		name string
		yaml string
		line int
		path string
		want string
	}{
		// The section.
		{"bgp is a list", withBGP("[65001]"), 2, "bgp", "expected a mapping with asn and peers, got a list"},
		{"bgp without a value", withBGP(""), 2, "bgp.asn", "required: give this node's autonomous system number"},
		{"bgp without peers", withBGP("{asn: 65001}"), 2, "bgp.peers", "required: list at least one neighbour"},
		{"misspelt bgp field", topWith("holdtime: 9s"), 2, "bgp.holdtime", `did you mean "holdTime"?`},
		{"router ID in the wrong case", topWith("routerId: 10.0.1.2"), 2, "bgp.routerId", `did you mean "routerID"?`},
		{"unknown bgp field", topWith("neighbors: []"), 2, "bgp.neighbors", "valid fields here: asn, routerID, holdTime, keepalive, drainTime, listenPort, peers"},

		// asn
		{"asn zero", withBGP("{asn: 0, peers: [{address: 10.0.1.1, asn: 65000}]}"), 2, "bgp.asn", "0 is reserved and is no one's ASN"},
		{"asn AS_TRANS", withBGP("{asn: 23456, peers: [{address: 10.0.1.1, asn: 65000}]}"), 2, "bgp.asn", "23456 is AS_TRANS (RFC 6793)"},
		{"asn too big", withBGP("{asn: 4294967296, peers: [{address: 10.0.1.1, asn: 65000}]}"), 2, "bgp.asn", "4294967296 is out of range 0..4294967295"},
		{"asn negative", withBGP("{asn: -1, peers: [{address: 10.0.1.1, asn: 65000}]}"), 2, "bgp.asn", "out of range"},
		{"asn as a string", withBGP(`{asn: "65001", peers: [{address: 10.0.1.1, asn: 65000}]}`), 2, "bgp.asn", `expected a whole number, got the string "65001"`},
		{"asn in asdot", withBGP("{asn: 1.10, peers: [{address: 10.0.1.1, asn: 65000}]}"), 2, "bgp.asn", "1.10 is in asdot notation; write the ASN as one number: 65546"},
		{"asn in asdot, quoted", withBGP(`{asn: "65535.65535", peers: [{address: 10.0.1.1, asn: 65000}]}`), 2, "bgp.asn", "write the ASN as one number: 4294967295"},
		{"asn a number with a fraction", withBGP("{asn: 1.5e3, peers: [{address: 10.0.1.1, asn: 65000}]}"), 2, "bgp.asn", "expected a whole number, got the number 1.5e3"},

		// routerID
		{"router ID garbage", topWith("routerID: r1"), 2, "bgp.routerID", `"r1" is not an IPv4 address; a router ID is written as one`},
		{"router ID a number", topWith("routerID: 1"), 2, "bgp.routerID", `"1" is not an IPv4 address`},
		{"router ID zero", topWith("routerID: 0.0.0.0"), 2, "bgp.routerID", "0.0.0.0 is not a valid router ID"},
		{"router ID IPv6", topWith(`routerID: "fd00::1"`), 2, "bgp.routerID", "a router ID is 32 bits"},
		{"router ID a prefix", topWith("routerID: 10.0.1.2/32"), 2, "bgp.routerID", "is a prefix, not an address"},
		{"router ID IPv4-mapped", topWith(`routerID: "::ffff:10.0.1.2"`), 2, "bgp.routerID", "write it as plain IPv4 (10.0.1.2)"},

		// Timers.
		{"hold time too short", topWith("holdTime: 2s"), 2, "bgp.holdTime", "2s is out of range; the hold time is 0 (no keepalives) or 3s..65535s"},
		{"hold time too long", topWith("holdTime: 65536s"), 2, "bgp.holdTime", "out of range"},
		{"hold time negative", topWith("holdTime: -9s"), 2, "bgp.holdTime", "out of range"},
		{"hold time fraction", topWith("holdTime: 9.5s"), 2, "bgp.holdTime", "9.5s is not a whole number of seconds, and BGP carries its timers in seconds; write e.g. 10s"},
		{"hold time without unit", topWith("holdTime: 9"), 2, "bgp.holdTime", "expected a duration with a unit, got the integer 9"},
		{"keepalive zero", topWith("keepalive: 0s"), 2, "bgp.keepalive", "0s is out of range 1s..65534s; to send no keepalives, set holdTime: 0"},
		{"keepalive fraction", topWith("keepalive: 1500ms"), 2, "bgp.keepalive", "1500ms is not a whole number of seconds, and BGP carries its timers in seconds; write e.g. 2s"},
		{"keepalive half a second", topWith("keepalive: 500ms"), 2, "bgp.keepalive", "out of range 1s..65534s"},
		{"keepalive not below the default hold time", topWith("keepalive: 9s"), 2, "bgp.keepalive", "9s is not shorter than the hold time (default 9s)"},
		{"keepalive above the hold time", strings.Replace(block, "keepalive: 2s", "keepalive: 7s", 1), 5, "bgp.keepalive",
			"7s is not shorter than the hold time 6s (bgp.holdTime, line 4); a keepalive must be sent well before the hold time runs out"},
		{"keepalive with hold time 0", strings.Replace(block, "holdTime: 6s", "holdTime: 0", 1), 5, "bgp.keepalive",
			"does not apply: the hold time is 0 (bgp.holdTime, line 4), so no keepalives are sent"},
		{"peer keepalive not below the section's hold time", block + "      keepalive: 6s\n", 9, "bgp.peers[0].keepalive", "6s is not shorter than the hold time 6s (bgp.holdTime, line 4)"},
		{"peer hold time below the section's keepalive", strings.Replace(block, "keepalive: 2s", "keepalive: 5s", 1) + "      holdTime: 4s\n", 9, "bgp.peers[0].holdTime",
			"4s is not longer than the keepalive 5s (bgp.keepalive, line 5)"},
		{"peer hold time equal to the section's keepalive", strings.Replace(block, "keepalive: 2s", "keepalive: 5s", 1) + "      holdTime: 5s\n", 9, "bgp.peers[0].holdTime",
			"5s is not longer than the keepalive 5s (bgp.keepalive, line 5); a keepalive must be sent well before the hold time runs out: raise holdTime or set a shorter keepalive here"},
		{"peer keepalive under the section's hold time 0", strings.NewReplacer("holdTime: 6s", "holdTime: 0", "  keepalive: 2s\n", "").Replace(block) + "      keepalive: 1s\n", 8, "bgp.peers[0].keepalive",
			"does not apply: the hold time is 0 (bgp.holdTime, line 4), so no keepalives are sent"},
		{"peer keepalive above its own hold time", peerWith("holdTime: 3s, keepalive: 3s"), 2, "bgp.peers[0].keepalive", "3s is not shorter than the hold time 3s (bgp.peers[0].holdTime, line 2)"},
		{"peer keepalive with its own hold time 0", peerWith("holdTime: 0, keepalive: 1s"), 2, "bgp.peers[0].keepalive", "does not apply: the hold time is 0 (bgp.peers[0].holdTime, line 2)"},
		{"drain time negative", topWith("drainTime: -1s"), 2, "bgp.drainTime", "-1s is negative; write 0 to exit right after withdrawing the routes"},
		{"drain time too long", topWith("drainTime: 11m"), 2, "bgp.drainTime", "11m is above the maximum 10m0s"},
		{"drain time not a duration", topWith("drainTime: soon"), 2, "bgp.drainTime", "soon is not a duration"},

		// listenPort
		{"listen port too big", topWith("listenPort: 65536"), 2, "bgp.listenPort", "65536 is out of range 0..65535"},
		{"listen port negative", topWith("listenPort: -1"), 2, "bgp.listenPort", "-1 is out of range 0..65535"},
		{"no listener for a passive peer", "node: {interface: eth0}\nbgp:\n  asn: 65001\n  listenPort: 0\n  peers:\n    - {address: 10.0.1.1, asn: 65000}\n    - {address: 10.0.1.3, asn: 65000, passive: true}\n",
			4, "bgp.listenPort", "0 means no listener, but bgp.peers[1] (line 7) is passive and waits for its neighbour to connect; remove listenPort (the default is then 179) or give a port"},

		// peers
		{"peers empty", withBGP("{asn: 65001, peers: []}"), 2, "bgp.peers", "the list is empty"},
		{"peers a mapping", withBGP("{asn: 65001, peers: {address: 10.0.1.1}}"), 2, "bgp.peers", "expected a list"},
		{"peer a string", withBGP("{asn: 65001, peers: [10.0.1.1]}"), 2, "bgp.peers[0]", "expected a peer (a mapping with address and asn), got the string"},
		{"peer without address", withBGP("{asn: 65001, peers: [{asn: 65000}]}"), 2, "bgp.peers[0].address", "required: give the neighbour's IPv4 or IPv6 address"},
		{"peer without asn", withBGP("{asn: 65001, peers: [{address: 10.0.1.1}]}"), 2, "bgp.peers[0].asn", "required: give the neighbour's autonomous system number"},
		{"misspelt peer field", peerWith("adress: 10.0.1.1"), 2, "bgp.peers[0].adress", `did you mean "address"?`},
		{"peer address garbage", withBGP("{asn: 65001, peers: [{address: router, asn: 65000}]}"), 2, "bgp.peers[0].address", `"router" is not an IP address`},
		{"peer address loopback", withBGP("{asn: 65001, peers: [{address: 127.0.0.1, asn: 65000}]}"), 2, "bgp.peers[0].address", "loopback"},
		{"peer address IPv6 link-local", withBGP(`{asn: 65001, peers: [{address: "fe80::1", asn: 65000}]}`), 2, "bgp.peers[0].address", "fe80::1 is a link-local address (fe80::/10)"},
		{"peer address IPv6 multicast", withBGP(`{asn: 65001, peers: [{address: "ff02::2", asn: 65000}]}`), 2, "bgp.peers[0].address", "ff02::2 is a multicast address"},
		{"peer address IPv4-mapped", withBGP(`{asn: 65001, peers: [{address: "::ffff:10.0.1.1", asn: 65000}]}`), 2, "bgp.peers[0].address", "write it as plain IPv4 (10.0.1.1)"},
		{"peer address is node.address6", "node: {interface: eth0, address: 10.0.1.2, address6: \"fd00::2\"}\nbgp: {asn: 65001, peers: [{address: \"fd00::2\", asn: 65000}]}\n", 2, "bgp.peers[0].address", "fd00::2 is this node's own IPv6 address (node.address6); a peer is another router"},
		{"peer IPv6 listed twice", "node: {interface: eth0}\nbgp: {asn: 65001, routerID: 10.0.1.2, peers: [{address: \"fd00::1\", asn: 65000}, {address: \"fd00:0::1\", asn: 65000}]}\n", 2, "bgp.peers[1].address", "fd00::1 is already listed as bgp.peers[0]"},
		{"peer address is the node's", withBGP("{asn: 65001, peers: [{address: 10.0.1.2, asn: 65000}]}"), 2, "bgp.peers[0].address", "10.0.1.2 is this node's own address (node.address); a peer is another router"},
		{"peer listed twice", block + "    - address: 10.0.1.1\n      asn: 65002\n", 9, "bgp.peers[1].address", "10.0.1.1 is already listed as bgp.peers[0] (line 7); list each neighbour once"},
		{"peer asn zero", withBGP("{asn: 65001, peers: [{address: 10.0.1.1, asn: 0}]}"), 2, "bgp.peers[0].asn", "0 is reserved"},
		{"peer asn AS_TRANS", withBGP("{asn: 65001, peers: [{address: 10.0.1.1, asn: 23456}]}"), 2, "bgp.peers[0].asn", "AS_TRANS"},
		{"peer port zero", peerWith("port: 0"), 2, "bgp.peers[0].port", "0 is out of range 1..65535"},
		{"password too long", peerWith(`password: "` + strings.Repeat("x", MaxPasswordLen+1) + `"`), 2, "bgp.peers[0].password", "is 81 bytes long; a TCP MD5 key has at most 80"},
		{"password with a tab", peerWith(`password: "ab\tc"`), 2, "bgp.peers[0].password", "has a character that is not printable ASCII at position 3"},
		{"password not ASCII", peerWith(`password: "gehéim"`), 2, "bgp.peers[0].password", "not printable ASCII at position 4"},
		{"password a number", peerWith("password: 1234"), 2, "bgp.peers[0].password", `expected a string, got the integer 1234; quote it ("1234")`},
		{"multihop too big", peerWith("multihop: 256"), 2, "bgp.peers[0].multihop", "256 is out of range 0..255"},
		{"multihop for iBGP", withBGP("{asn: 65001, peers: [{address: 10.0.1.1, asn: 65001, multihop: 2}]}"), 2, "bgp.peers[0].multihop",
			"applies to eBGP only, and this peer is iBGP (its asn 65001 is bgp.asn)"},
		{"passive as yes", peerWith("passive: yes"), 2, "bgp.peers[0].passive", `expected true or false, got the string "yes"`},
		{"prefix limit off", peerWith("maxPrefixes: 0"), 2, "bgp.peers[0].maxPrefixes",
			"0 would turn the prefix limit off, and xlb keeps one: every prefix a peer sends takes memory until its session ends; write 1..100000, or remove maxPrefixes for the default 10000"},
		{"prefix limit too high", peerWith("maxPrefixes: 100001"), 2, "bgp.peers[0].maxPrefixes", "100001 is above the maximum 100000: xlb imports no routes"},
		{"prefix limit negative", peerWith("maxPrefixes: -5"), 2, "bgp.peers[0].maxPrefixes", "-5 is negative; write 1..100000, or remove maxPrefixes for the default 10000"},
		{"prefix limit not a number", peerWith("maxPrefixes: many"), 2, "bgp.peers[0].maxPrefixes", `expected a whole number, got the string "many"`},
		{"prefix limit without value", block + "      maxPrefixes:\n", 9, "bgp.peers[0].maxPrefixes", "has no value"},
		{"passive without value", block + "      passive:\n", 9, "bgp.peers[0].passive", "has no value"},

		// gracefulRestart
		{"gracefulRestart as a boolean", peerWith("gracefulRestart: true"), 2, "bgp.peers[0].gracefulRestart", "expected a mapping such as {restartTime: 120s}, got the boolean true; write gracefulRestart: {} for the default restart time"},
		{"restart time zero", peerWith("gracefulRestart: {restartTime: 0}"), 2, "bgp.peers[0].gracefulRestart.restartTime", "0 is below the minimum 1s; remove gracefulRestart"},
		{"restart time too long", peerWith("gracefulRestart: {restartTime: 4096s}"), 2, "bgp.peers[0].gracefulRestart.restartTime", "4096s is above the maximum 1h8m15s (RFC 4724 carries it in 12 bits of seconds)"},
		{"restart time in fractions", peerWith("gracefulRestart: {restartTime: 1500ms}"), 2, "bgp.peers[0].gracefulRestart.restartTime", "1500ms is not whole seconds (RFC 4724 carries it in seconds); write e.g. 2s"},
		{"restart time without unit", peerWith("gracefulRestart: {restartTime: 120}"), 2, "bgp.peers[0].gracefulRestart.restartTime", "expected a duration with a unit"},
		{"misspelt gracefulRestart field", peerWith("gracefulRestart: {restart_time: 1s}"), 2, "bgp.peers[0].gracefulRestart.restart_time", `did you mean "restartTime"?`},

		// bfd
		{"bfd as a boolean", peerWith("bfd: true"), 2, "bgp.peers[0].bfd", "expected a mapping such as {minRx: 300ms, minTx: 300ms, multiplier: 3}, got the boolean true; write bfd: {} for the defaults, or remove bfd"},
		{"bfd with multihop", block + "      multihop: 2\n      bfd: {}\n", 10, "bgp.peers[0].bfd", "xlb's BFD watches directly connected neighbours only (RFC 5881), and this peer is multihop 2"},
		{"bfd interval too short", peerWith("bfd: {minRx: 5ms}"), 2, "bgp.peers[0].bfd.minRx", "5ms is below the minimum 10ms"},
		{"bfd interval too long", peerWith("bfd: {minTx: 61s}"), 2, "bgp.peers[0].bfd.minTx", "61s is above the maximum 1m0s"},
		{"bfd interval without unit", peerWith("bfd: {minTx: 300}"), 2, "bgp.peers[0].bfd.minTx", "expected a duration with a unit"},
		{"bfd multiplier zero", peerWith("bfd: {multiplier: 0}"), 2, "bgp.peers[0].bfd.multiplier", "0 is out of range 1..255"},
		{"bfd multiplier too big", peerWith("bfd: {multiplier: 256}"), 2, "bgp.peers[0].bfd.multiplier", "256 is out of range 1..255"},
		{"misspelt bfd field", peerWith("bfd: {min_rx: 1s}"), 2, "bgp.peers[0].bfd.min_rx", `did you mean "minRx"?`},
		{"unknown bfd field", peerWith("bfd: {interval: 1s}"), 2, "bgp.peers[0].bfd.interval", "valid fields here: minRx, minTx, multiplier"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { wantError(t, tc.yaml, tc.line, tc.path, tc.want) })
	}
}

func TestRouteAttributeErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		line int
		path string
		want string
	}{
		{"service bgp without a bgp section", minimalWith("port: 80", "port: 80\n    bgp: {med: 1}"), 7, "services[0].bgp",
			"nothing is announced without a bgp section: add a top-level bgp section with asn and peers, or remove this field"},
		{"empty service bgp without a bgp section", minimalWith("port: 80", "port: 80\n    bgp: {}"), 7, "services[0].bgp", "nothing is announced without a bgp section"},
		{"service bgp a list", withRoute(`["65000:1"]`), 4, "services[0].bgp", "expected a mapping such as {communities: [\"65000:100\"], med: 10}, got a list"},
		{"misspelt attribute", withRoute(`{community: ["65000:1"]}`), 4, "services[0].bgp.community", `did you mean "communities"?`},
		{"local pref in another spelling", withRoute("{local_preference: 1}"), 4, "services[0].bgp.local_preference", `did you mean "localPreference"?`},
		{"communities a string", withRoute(`{communities: "65000:1"}`), 4, "services[0].bgp.communities", "expected a list"},
		{"community garbage", withRoute("{communities: [no-exports]}"), 4, "services[0].bgp.communities[0]",
			"no-exports is not a community; write ASN:VALUE with two numbers 0..65535 (e.g. 65000:100) or one of the names no-export, no-advertise, no-export-subconfed, no-peer, blackhole, graceful-shutdown"},
		{"community a number", withRoute("{communities: [100]}"), 4, "services[0].bgp.communities[0]", "100 is not a community"},
		{"community half empty", withRoute(`{communities: ["65000:"]}`), 4, "services[0].bgp.communities[0]", "is not a community"},
		{"community with a sign", withRoute(`{communities: ["+1:1"]}`), 4, "services[0].bgp.communities[0]", "is not a community"},
		{"community with a 4-byte ASN", withRoute(`{communities: ["4200000000:1"]}`), 4, "services[0].bgp.communities[0]",
			"4200000000:1: 4200000000 is above 65535; a community holds two 16-bit numbers, so for a 4-byte ASN use largeCommunities (e.g. 4200000000:1:0)"},
		{"community value too big", withRoute(`{communities: ["1:65536"]}`), 4, "services[0].bgp.communities[0]", "65536 is above 65535"},
		{"large community among communities", withRoute(`{communities: ["65000:1:2"]}`), 4, "services[0].bgp.communities[0]", "65000:1:2 has three numbers, as a large community has; move it to largeCommunities"},
		{"community listed twice", withRoute(`{communities: [no-export, "65535:65281"]}`), 4, "services[0].bgp.communities[1]", "65535:65281 is the same as services[0].bgp.communities[0] (line 4); list each once"},
		{"community without value", withBGP(onePeer) + "services:\n  - name: a\n    vip: 10.99.0.1\n    port: 80\n    bgp:\n      communities:\n        -\n    backends: [{address: 10.0.3.2}]\n",
			9, "services[0].bgp.communities[0]", "has no value"},
		{"too many communities", withRoute("{communities: [" + strings.Repeat("no-export, ", MaxCommunities) + "no-peer]}"), 4, "services[0].bgp.communities",
			"101 entries exceed the limit of 100 per route"},
		{"large community with two numbers", withRoute(`{largeCommunities: ["65000:1"]}`), 4, "services[0].bgp.largeCommunities[0]", "65000:1 has two numbers, as a community has; move it to communities"},
		{"large community garbage", withRoute(`{largeCommunities: [big]}`), 4, "services[0].bgp.largeCommunities[0]", "big is not a large community; write GLOBAL:LOCAL1:LOCAL2"},
		{"large community too big", withRoute(`{largeCommunities: ["1:2:4294967296"]}`), 4, "services[0].bgp.largeCommunities[0]", "is not a large community"},
		{"large community listed twice", withRoute(`{largeCommunities: ["1:2:3", "1:2:03"]}`), 4, "services[0].bgp.largeCommunities[1]", "is the same as services[0].bgp.largeCommunities[0]"},
		{"too many large communities", withRoute("{largeCommunities: [" + strings.Repeat(`"1:2:3", `, MaxLargeCommunities) + `"1:2:4"]}`), 4, "services[0].bgp.largeCommunities",
			"101 entries exceed the limit of 100"},
		{"local preference negative", withRoute("{localPreference: -1}"), 4, "services[0].bgp.localPreference", "-1 is out of range 0..4294967295"},
		{"med too big", withRoute("{med: 4294967296}"), 4, "services[0].bgp.med", "out of range 0..4294967295"},
		{"med a string", withRoute(`{med: "10"}`), 4, "services[0].bgp.med", "expected a whole number"},
		{"shared VIP, other med", withRoute("{med: 10}", "{med: 20}"), 5, "services[1].bgp",
			`differs from the bgp attributes of service "s0" (services[0].bgp, line 4), which has the same VIP 10.99.0.1 (med 20 here, 10 there); services that share a VIP are announced as one route`},
		{"shared VIP, other communities", withRoute(`{communities: ["1:1"]}`, "", `{communities: ["1:1", "1:2"]}`), 6, "services[2].bgp",
			`service "s0" (services[0].bgp, line 4), which has the same VIP 10.99.0.1 (communities [1:1 1:2] here, [1:1] there)`},
		{"shared VIP, one without local preference", withRoute(`{med: 1, localPreference: 5}`, "{med: 1}"), 5, "services[1].bgp", "(localPreference unset here, 5 there)"},
		{"shared VIP, other large communities", withRoute(`{largeCommunities: ["1:1:1"]}`, `{largeCommunities: ["1:1:2"]}`), 5, "services[1].bgp", "(largeCommunities [1:1:2] here, [1:1:1] there)"},
		{"shared VIP, block style", withBGP(onePeer) + "services:\n  - name: a\n    vip: 10.99.0.1\n    port: 80\n    bgp:\n      med: 1\n    backends: [{address: 10.0.3.2}]\n" +
			"  - name: b\n    vip: 10.99.0.1\n    port: 81\n    bgp: {med: 2}\n    backends: [{address: 10.0.3.2}]\n",
			13, "services[1].bgp", `service "a" (services[0].bgp, line 7)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { wantError(t, tc.yaml, tc.line, tc.path, tc.want) })
	}
}

// A conflict among the bgp section's own timers is reported once, at
// the section, not again at every peer that inherits it; a peer that
// writes a timer of its own is checked against what it inherits.
func TestTimerErrorReportedOnce(t *testing.T) {
	in := `node: {interface: eth0}
bgp:
  asn: 65001
  holdTime: 6s
  keepalive: 6s
  peers:
    - {address: 10.0.1.1, asn: 65000}
    - {address: 10.0.1.3, asn: 65000, keepalive: 1s}
    - {address: 10.0.1.4, asn: 65000, holdTime: 9s}
`
	_, err := Parse(file, []byte(in))
	if err == nil {
		t.Fatal("no error")
	}
	if lines := strings.Split(err.Error(), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], file+":5: bgp.keepalive: 6s is not shorter than the hold time 6s") {
		t.Errorf("want one error at bgp.keepalive, got:\n%v", err)
	}
}

// Every problem of a bgp section is reported, not only the first.
func TestEveryBGPErrorReported(t *testing.T) {
	in := `node: {interface: eth0}
bgp:
  asn: 0
  holdTime: 1s
  peers:
    - {address: 10.0.1.1, asn: 65000, port: 0}
    - {address: 10.0.1.1, asn: 65000, bfd: {multiplier: 0}}
services:
  - {name: a, vip: 10.99.0.1, port: 80, bgp: {med: -1}, backends: [{address: 10.0.3.2}]}
`
	_, err := Parse(file, []byte(in))
	if err == nil {
		t.Fatal("no error")
	}
	want := []string{
		"agent.yaml:3: bgp.asn:",
		"agent.yaml:4: bgp.holdTime:",
		"agent.yaml:6: bgp.peers[0].port:",
		"agent.yaml:7: bgp.peers[1].address:",
		"agent.yaml:7: bgp.peers[1].bfd.multiplier:",
		"agent.yaml:9: services[0].bgp.med:",
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(lines), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("error %d = %q, want prefix %q", i, lines[i], w)
		}
	}
}

func TestCommunityNormalForm(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"0:0", "0:0"},
		{"65535:65535", "65535:65535"},
		{"00065000:00100", "65000:100"},
		{"No-Export", "no-export"},
		{"65535:65281", "no-export"},
		{"65535:0", "graceful-shutdown"},
		{"65535:666", "blackhole"},
		{"65535:65283", "no-export-subconfed"},
	} {
		v, why := parseCommunity(tc.in)
		if why != "" {
			t.Errorf("parseCommunity(%q): %s", tc.in, why)
			continue
		}
		if got := formatCommunity(v); got != tc.want {
			t.Errorf("%q: normal form %q, want %q", tc.in, got, tc.want)
		}
		// The normal form parses to the same value.
		if again, why := parseCommunity(tc.want); why != "" || again != v {
			t.Errorf("%q parses to %#x (%s), want %#x", tc.want, again, why, v)
		}
	}
}
