package bgp

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestOptionDefaults(t *testing.T) {
	nh := mustAddr("10.0.1.2")
	o := Options{ASN: 65001, NextHop: nh, Peers: []Peer{
		{Address: mustAddr("10.0.1.1"), ASN: 65000},
		{Address: mustAddr("10.0.1.3"), ASN: 65000, Port: 1179, HoldTime: 9 * time.Second},
		{Address: mustAddr("10.0.1.4"), ASN: 65000, HoldTime: 10 * time.Second, Keepalive: 2 * time.Second, MaxPrefixes: 5},
	}}.withDefaults()
	if o.RouterID != nh || o.ListenPort != -1 || o.Logger == nil || o.PrefixLimitRetry != DefaultPrefixLimitRetry {
		t.Errorf("defaults: routerID %s, listenPort %d, logger %v, prefixLimitRetry %s", o.RouterID, o.ListenPort, o.Logger, o.PrefixLimitRetry)
	}
	for i, want := range []Peer{
		{Port: 179, HoldTime: 9 * time.Second, Keepalive: 3 * time.Second, MaxPrefixes: DefaultMaxPrefixes},
		{Port: 1179, HoldTime: 9 * time.Second, Keepalive: 3 * time.Second, MaxPrefixes: DefaultMaxPrefixes},
		{Port: 179, HoldTime: 10 * time.Second, Keepalive: 2 * time.Second, MaxPrefixes: 5},
	} {
		p := o.Peers[i]
		if p.Port != want.Port || p.HoldTime != want.HoldTime || p.Keepalive != want.Keepalive || p.MaxPrefixes != want.MaxPrefixes {
			t.Errorf("peer %d: port %d hold %s keepalive %s maxPrefixes %d, want %d %s %s %d", i, p.Port, p.HoldTime, p.Keepalive, p.MaxPrefixes,
				want.Port, want.HoldTime, want.Keepalive, want.MaxPrefixes)
		}
	}
	if err := o.validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}

	// A passive peer needs a listener: the default port becomes 179.
	o = Options{ASN: 1, NextHop: nh, Peers: []Peer{{Address: mustAddr("10.0.1.1"), ASN: 2, Passive: true}}}.withDefaults()
	if o.ListenPort != 179 {
		t.Errorf("with a passive peer ListenPort = %d, want 179", o.ListenPort)
	}
	// An explicit router ID and port stay.
	o = Options{ASN: 1, NextHop: nh, RouterID: mustAddr("1.2.3.4"), ListenPort: 1790}.withDefaults()
	if o.RouterID != mustAddr("1.2.3.4") || o.ListenPort != 1790 {
		t.Errorf("explicit values overridden: %s %d", o.RouterID, o.ListenPort)
	}
}

func TestOptionValidation(t *testing.T) {
	nh := mustAddr("10.0.1.2")
	peer := Peer{Address: mustAddr("10.0.1.1"), ASN: 65000}
	with := func(f func(*Options)) Options {
		o := Options{ASN: 65001, NextHop: nh, Peers: []Peer{peer}}
		f(&o)
		return o
	}
	withPeer := func(f func(*Peer)) Options {
		return with(func(o *Options) { f(&o.Peers[0]) })
	}
	for _, tc := range []struct {
		name    string
		o       Options
		wantErr string // "" = valid
	}{
		{"valid", with(func(*Options) {}), ""},
		{"no peers", with(func(o *Options) { o.Peers = nil }), ""},
		{"ibgp", withPeer(func(p *Peer) { p.ASN = 65001 }), ""},
		{"4-byte asn", with(func(o *Options) { o.ASN = 4200000000 }), ""},
		{"no asn", with(func(o *Options) { o.ASN = 0 }), "asn is missing"},
		{"as_trans", with(func(o *Options) { o.ASN = 23456 }), "AS_TRANS"},
		{"no next hop", with(func(o *Options) { o.NextHop = netip.Addr{} }), "nextHop (the node address) is missing"},
		{"ipv6 next hop", with(func(o *Options) { o.NextHop = mustAddr("2001:db8::1") }), "nextHop 2001:db8::1: want the node's IPv4 address (its IPv6 address is nextHop6)"},
		{"dual stack", with(func(o *Options) { o.NextHop6 = mustAddr("2001:db8::1") }), ""},
		{"ipv6 only", with(func(o *Options) {
			o.NextHop, o.NextHop6, o.RouterID = netip.Addr{}, mustAddr("2001:db8::1"), mustAddr("10.9.9.9")
			o.Peers[0].Address = mustAddr("2001:db8::2")
		}), ""},
		{"ipv6 only without router id", with(func(o *Options) {
			o.NextHop, o.NextHop6 = netip.Addr{}, mustAddr("2001:db8::1")
			o.Peers = nil
		}), "routerID is missing: the node has no IPv4 address"},
		{"ipv4 next hop6", with(func(o *Options) { o.NextHop6 = mustAddr("10.0.1.9") }), "nextHop6 10.0.1.9: want the node's IPv6 address"},
		{"mapped next hop6", with(func(o *Options) { o.NextHop6 = mustAddr("::ffff:10.0.1.9") }), "nextHop6 ::ffff:10.0.1.9: want the node's IPv6 address"},
		{"link-local next hop6", with(func(o *Options) { o.NextHop6 = mustAddr("fe80::1") }), "nextHop6 fe80::1: link-local"},
		{"loopback next hop6", with(func(o *Options) { o.NextHop6 = mustAddr("::1") }), "nextHop6 ::1: must be a unicast address"},
		{"loopback next hop", with(func(o *Options) { o.NextHop = mustAddr("127.0.0.1") }), "unicast address that peers can reach"},
		{"ipv6 router id", with(func(o *Options) { o.RouterID = mustAddr("::1") }), "routerID ::1"},
		{"bad listen port", with(func(o *Options) { o.ListenPort = 70000 }), "listenPort 70000"},
		{"passive without listener", with(func(o *Options) { o.ListenPort = -1; o.Peers[0].Passive = true }), "passive, but the speaker does not listen"},
		{"passive with listener", with(func(o *Options) { o.ListenPort = 1790; o.Peers[0].Passive = true }), ""},
		{"peer without address", withPeer(func(p *Peer) { p.Address = netip.Addr{} }), "peers[0] (invalid IP): address is missing"},
		{"ipv6 peer without ipv6 address", withPeer(func(p *Peer) { p.Address = mustAddr("2001:db8::2") }),
			"address 2001:db8::2 is IPv6, but the node has no IPv6 address to reach it from (node.address6)"},
		{"ipv6 peer", with(func(o *Options) { o.NextHop6 = mustAddr("2001:db8::1"); o.Peers[0].Address = mustAddr("2001:db8::2") }), ""},
		{"ipv4 peer without ipv4 address", with(func(o *Options) {
			o.NextHop, o.NextHop6, o.RouterID = netip.Addr{}, mustAddr("2001:db8::1"), mustAddr("10.9.9.9")
		}), "address 10.0.1.1 is IPv4, but the node has no IPv4 address to reach it from (node.address)"},
		{"ipv6 peer is us", with(func(o *Options) { o.NextHop6 = mustAddr("2001:db8::1"); o.Peers[0].Address = o.NextHop6 }), "node's own address"},
		{"mapped peer", withPeer(func(p *Peer) { p.Address = mustAddr("::ffff:10.0.1.1") }), "IPv4-mapped; write the IPv4 address (10.0.1.1)"},
		{"link-local peer", with(func(o *Options) { o.NextHop6 = mustAddr("2001:db8::1"); o.Peers[0].Address = mustAddr("fe80::1") }), "fe80::1 is link-local"},
		{"peer is us", withPeer(func(p *Peer) { p.Address = nh }), "node's own address"},
		{"loopback peer", withPeer(func(p *Peer) { p.Address = mustAddr("127.100.0.1") }), "loopback address"},
		{"peer without asn", withPeer(func(p *Peer) { p.ASN = 0 }), "peers[0] (10.0.1.1): asn is missing"},
		{"hold time too short", withPeer(func(p *Peer) { p.HoldTime = 2 * time.Second }), "holdTime 2s"},
		{"hold time fraction", withPeer(func(p *Peer) { p.HoldTime = 4500 * time.Millisecond }), "holdTime 4.5s: want whole seconds"},
		{"keepalive not below hold", withPeer(func(p *Peer) { p.HoldTime = 9 * time.Second; p.Keepalive = 9 * time.Second }), "keepalive 9s must be shorter than holdTime 9s"},
		{"keepalive fraction", withPeer(func(p *Peer) { p.Keepalive = 1500 * time.Millisecond }), "keepalive 1.5s"},
		{"long password", withPeer(func(p *Peer) { p.Password = strings.Repeat("x", 81) }), "at most 80"},
		{"multihop ebgp", withPeer(func(p *Peer) { p.Multihop = 3 }), ""},
		{"multihop ibgp", withPeer(func(p *Peer) { p.ASN = 65001; p.Multihop = 3 }), "only eBGP sessions are TTL-limited"},
		{"duplicate peer", with(func(o *Options) { o.Peers = append(o.Peers, peer) }), "peers[1]: address 10.0.1.1 is listed twice"},
		{"highest prefix limit", withPeer(func(p *Peer) { p.MaxPrefixes = MaxMaxPrefixes }), ""},
		{"prefix limit too high", withPeer(func(p *Peer) { p.MaxPrefixes = MaxMaxPrefixes + 1 }), "peers[0] (10.0.1.1): maxPrefixes 100001: want 1-100000"},
		{"graceful restart", withPeer(func(p *Peer) { p.RestartTime = MaxRestartTime }), ""},
		{"restart time too long", withPeer(func(p *Peer) { p.RestartTime = MaxRestartTime + time.Second }), "restartTime 1h8m16s: want whole seconds from 1s to 1h8m15s"},
		{"restart time fraction", withPeer(func(p *Peer) { p.RestartTime = 1500 * time.Millisecond }), "restartTime 1.5s: want whole seconds"},
		{"negative prefix limit retry", with(func(o *Options) { o.PrefixLimitRetry = -time.Second }), "prefixLimitRetry -1s is negative"},
	} {
		_, err := New(tc.o)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: error = %v, want %q", tc.name, err, tc.wantErr)
		}
	}
}
