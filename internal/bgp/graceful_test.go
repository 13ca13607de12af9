package bgp

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/osrg/gobgp/v4/api"

	"github.com/xlbproject/xlb/testbed/testenv"
)

// frrPath is what FRR says of its one path to p: present, stale (kept
// by graceful restart after its session ended), and the state of the
// session to peer.
func (f *frr) staleness(t *testing.T, p netip.Prefix, peer netip.Addr) (present, stale bool, session string) {
	t.Helper()
	var out struct {
		Paths []struct {
			Stale bool `json:"stale"`
		} `json:"paths"`
	}
	cmd := frrShowBGP(p) + " " + p.String() + " json"
	raw := f.vtysh(t, cmd)
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, raw)
	}
	var nb map[string]struct {
		State string `json:"bgpState"`
	}
	cmd = "show bgp neighbors " + peer.String() + " json"
	raw = f.vtysh(t, cmd)
	if err := json.Unmarshal([]byte(raw), &nb); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, raw)
	}
	session = nb[peer.String()].State
	if len(out.Paths) == 0 {
		return false, false, session
	}
	return true, out.Paths[0].Stale, session
}

// TestGracefulRestartAgainstFRR: with RestartTime, a speaker that dies
// (SIGKILL) or stops with StopGraceful leaves its route in FRR, stale,
// and the next speaker's session makes it fresh again; without it, the
// route goes with the session, as before.
func TestGracefulRestartAgainstFRR(t *testing.T) {
	requireRoot(t)
	for i, tc := range []struct {
		name        string
		restartTime time.Duration
	}{{"with", 120 * time.Second}, {"without", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			node, rtr := newNamespace(t, "node"), newNamespace(t, "frr")
			nodeIP, rtrIP := mustAddr(fmt.Sprintf("10.251.%d.2", 20+i)), mustAddr(fmt.Sprintf("10.251.%d.1", 20+i))
			connect(t, node, "eth0", []string{nodeIP.String()}, rtr, "eth0", []string{rtrIP.String()})
			f := startFRR(t, rtr, fmt.Sprintf(`frr defaults traditional
hostname xlb-test-frr
router bgp 65000
 bgp router-id %s
 bgp graceful-restart
 no bgp ebgp-requires-policy
 no bgp network import-check
 neighbor %s remote-as 65001
 neighbor %s timers 3 9
!
`, rtrIP, nodeIP, nodeIP))
			vip := mustPrefix("10.99.20.1/32")
			opts := helperOptions{ASN: 65001, NextHop: nodeIP, Routes: []netip.Prefix{vip}, Peers: []Peer{
				{Address: rtrIP, ASN: 65000, HoldTime: 9 * time.Second, RestartTime: tc.restartTime},
			}}
			fresh := func(what string) {
				testenv.Eventually(t, 20*time.Second, what, func() (bool, string) {
					present, stale, session := f.staleness(t, vip, nodeIP)
					return present && !stale && session == "Established", fmt.Sprintf("present %v, stale %v, session %s", present, stale, session)
				})
			}
			// The route stays (stale) once FRR has seen the session
			// end, or goes with it.
			afterEnd := func(what string) {
				testenv.Eventually(t, 20*time.Second, what, func() (bool, string) {
					present, stale, session := f.staleness(t, vip, nodeIP)
					state := fmt.Sprintf("present %v, stale %v, session %s", present, stale, session)
					if session == "Established" {
						return false, state
					}
					if tc.restartTime > 0 {
						return present && stale, state
					}
					return !present, state
				})
			}

			sp := startSpeaker(t, node, opts)
			fresh("route announced")
			sp.kill()
			afterEnd("after SIGKILL")

			sp = startSpeaker(t, node, opts)
			fresh("route fresh again from the next speaker")
			if err := sp.StopGraceful(); err != nil {
				t.Fatal(err)
			}
			afterEnd("after StopGraceful")

			sp = startSpeaker(t, node, opts)
			fresh("route fresh again after StopGraceful")
			// Stop withdraws, graceful restart or not.
			if err := sp.Stop(); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 20*time.Second, "route withdrawn by Stop", func() (bool, string) {
				present, stale, session := f.staleness(t, vip, nodeIP)
				return !present, fmt.Sprintf("present %v, stale %v, session %s", present, stale, session)
			})
		})
	}
}

// A peer helps a restart when its OPEN carries graceful restart for an
// address family; the capability without families (a restarting peer
// that keeps no state) or no capability at all does not.
func TestPeerRestarts(t *testing.T) {
	gr := func(tuples ...*api.GracefulRestartCapabilityTuple) *api.Capability {
		return &api.Capability{Cap: &api.Capability_GracefulRestart{GracefulRestart: &api.GracefulRestartCapability{Time: 120, Tuples: tuples}}}
	}
	ipv4 := &api.GracefulRestartCapabilityTuple{Family: &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}}
	other := &api.Capability{Cap: &api.Capability_RouteRefresh{RouteRefresh: &api.RouteRefreshCapability{}}}
	for _, c := range []struct {
		name string
		caps []*api.Capability
		want bool
	}{
		{"none", nil, false},
		{"others only", []*api.Capability{other}, false},
		{"without families", []*api.Capability{other, gr()}, false},
		{"IPv4 unicast", []*api.Capability{other, gr(ipv4)}, true},
	} {
		if got := peerRestarts(c.caps); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
