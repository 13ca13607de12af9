package router

import (
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
)

func TestNewValidates(t *testing.T) {
	ok := Config{ASN: 65000, Listen: netip.MustParseAddr("10.0.1.1"), Neighbors: []netip.Prefix{pfx("10.0.1.0/24")}}
	tests := []struct {
		name    string
		edit    func(*Config)
		wantErr string // "" for success
	}{
		{"minimal", func(*Config) {}, ""},
		{"no ASN", func(c *Config) { c.ASN = 0 }, "ASN is required"},
		{"no listen", func(c *Config) { c.Listen = netip.Addr{} }, "listen address"},
		{"IPv6 listen", func(c *Config) { c.Listen = netip.MustParseAddr("fd00::1") }, "want an IPv4 address"},
		{"IPv6 router ID", func(c *Config) { c.RouterID = netip.MustParseAddr("fd00::1") }, "router ID"},
		{"bad port", func(c *Config) { c.Port = 70000 }, "port 70000"},
		{"no neighbours", func(c *Config) { c.Neighbors = nil }, "no neighbour range"},
		{"IPv6 neighbours without listen6", func(c *Config) { c.Neighbors = []netip.Prefix{pfx("fd00::/64")} },
			"neighbour range fd00::/64 is IPv6, but the router has no IPv6 listen address"},
		{"IPv6 neighbours", func(c *Config) {
			c.Listen6 = netip.MustParseAddr("fd00::1")
			c.Neighbors = append(c.Neighbors, pfx("fd00::/64"))
		}, ""},
		{"IPv4 listen6", func(c *Config) { c.Listen6 = netip.MustParseAddr("10.0.1.2") }, "IPv6 listen address"},
		{"link-local listen6", func(c *Config) { c.Listen6 = netip.MustParseAddr("fe80::1") }, "IPv6 listen address"},
		{"mapped neighbours", func(c *Config) { c.Neighbors = []netip.Prefix{pfx("::ffff:10.0.1.0/120")} }, "want an IPv4 or IPv6 prefix"},
		{"hold time too short", func(c *Config) { c.HoldTime = 2 * time.Second }, "hold time 2s"},
		{"hold time fraction", func(c *Config) { c.HoldTime = 3500 * time.Millisecond }, "whole seconds"},
		{"hold time 3s", func(c *Config) { c.HoldTime = 3 * time.Second }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.edit(&c)
			r, err := New(c)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("New: error %v, want one containing %q", err, tt.wantErr)
			}
			if r != nil {
				t.Errorf("New returned a router with an error")
			}
		})
	}
}

func TestNewDefaults(t *testing.T) {
	r, err := New(Config{ASN: 65000, Listen: netip.MustParseAddr("10.0.1.1"), Neighbors: []netip.Prefix{pfx("10.0.1.0/24")}})
	if err != nil {
		t.Fatal(err)
	}
	if r.cfg.RouterID != r.cfg.Listen || r.cfg.Port != 179 || r.cfg.PeerASN != 65000 || r.cfg.HoldTime != DefaultHoldTime {
		t.Errorf("defaults: router ID %v, port %d, peer ASN %d, hold %v; want the listen address, 179, 65000 (iBGP), %v",
			r.cfg.RouterID, r.cfg.Port, r.cfg.PeerASN, r.cfg.HoldTime, DefaultHoldTime)
	}
}

// TestPeerEventHooks feeds session state changes and checks which hooks
// run, that a new session clears a failed mark, and the status.
func TestPeerEventHooks(t *testing.T) {
	n1, n2 := netip.MustParseAddr("10.0.1.2"), netip.MustParseAddr("10.0.1.3")
	type ev struct {
		peer  netip.Addr
		state bgp.FSMState
	}
	tests := []struct {
		name       string
		failed     []netip.Addr
		events     []ev
		wantCalls  []string
		wantFailed []netip.Addr
		wantStates map[netip.Addr]string
	}{
		{
			name:       "up then down",
			events:     []ev{{n1, bgp.BGP_FSM_ACTIVE}, {n1, bgp.BGP_FSM_OPENSENT}, {n1, bgp.BGP_FSM_OPENCONFIRM}, {n1, bgp.BGP_FSM_ESTABLISHED}, {n1, bgp.BGP_FSM_IDLE}},
			wantCalls:  []string{"up 10.0.1.2", "down 10.0.1.2"},
			wantStates: map[netip.Addr]string{n1: "idle"},
		},
		{
			name:       "a repeated state calls nothing twice",
			events:     []ev{{n1, bgp.BGP_FSM_ESTABLISHED}, {n1, bgp.BGP_FSM_ESTABLISHED}, {n2, bgp.BGP_FSM_ACTIVE}},
			wantCalls:  []string{"up 10.0.1.2"},
			wantStates: map[netip.Addr]string{n1: "established", n2: "active"},
		},
		{
			name:       "no down without established",
			events:     []ev{{n1, bgp.BGP_FSM_OPENSENT}, {n1, bgp.BGP_FSM_IDLE}},
			wantStates: map[netip.Addr]string{n1: "idle"},
		},
		{
			name:       "a new session clears the failed mark",
			failed:     []netip.Addr{n1, n2},
			events:     []ev{{n1, bgp.BGP_FSM_ESTABLISHED}, {n2, bgp.BGP_FSM_OPENCONFIRM}},
			wantCalls:  []string{"up 10.0.1.2"},
			wantFailed: []netip.Addr{n2},
			wantStates: map[netip.Addr]string{n1: "established", n2: "openconfirm"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls []string
			r, err := New(Config{
				ASN: 65000, Listen: netip.MustParseAddr("10.0.1.1"), Neighbors: []netip.Prefix{pfx("10.0.1.0/24")},
				Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
				Hooks: Hooks{
					OnPeerEstablished: func(p netip.Addr) { calls = append(calls, "up "+p.String()) },
					OnPeerDown:        func(p netip.Addr) { calls = append(calls, "down "+p.String()) },
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range tt.failed {
				r.failed[a] = true
			}
			for _, e := range tt.events {
				r.peerEvent(apiutil.Peer{State: apiutil.PeerState{NeighborAddress: e.peer, SessionState: e.state, PeerASN: 65001}}, time.Now())
			}
			if !slices.Equal(calls, tt.wantCalls) {
				t.Errorf("hook calls %v, want %v", calls, tt.wantCalls)
			}
			st := r.Status()
			var failed []netip.Addr
			states := map[netip.Addr]string{}
			for _, p := range st.Peers {
				states[p.Address] = p.State
				if p.Failed {
					failed = append(failed, p.Address)
				}
				if p.ASN != 65001 {
					t.Errorf("peer %v: ASN %d, want 65001", p.Address, p.ASN)
				}
			}
			if !slices.Equal(failed, tt.wantFailed) {
				t.Errorf("failed peers %v, want %v", failed, tt.wantFailed)
			}
			if len(states) != len(tt.wantStates) {
				t.Errorf("states %v, want %v", states, tt.wantStates)
			}
			for a, s := range tt.wantStates {
				if states[a] != s {
					t.Errorf("peer %v state %q, want %q", a, states[a], s)
				}
			}
		})
	}
}
