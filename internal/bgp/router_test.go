package bgp

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	gobgp "github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"
)

// testRouter is a plain GoBGP server playing the upstream router, inside
// this test process. Its peers are passive, so every socket it has comes
// from its listener, which its Serve goroutine creates on a thread that
// stays in the router's namespace: that is enough to put the whole
// router there.
type testRouter struct {
	srv  *server.BgpServer
	addr netip.Addr

	mu        sync.Mutex
	withdrawn map[netip.Prefix]int // UPDATE withdrawals received, per prefix
}

type routerPeer struct {
	Address  netip.Addr
	ASN      uint32
	Password string
	Multihop uint8 // TTL of an eBGP session to a peer that is not directly connected
}

// startRouter starts a GoBGP router with ASN asn listening on addr:179
// in namespace ns, with passive sessions to peers.
func startRouter(t *testing.T, ns string, asn uint32, addr netip.Addr, peers ...routerPeer) *testRouter {
	t.Helper()
	return startRouterOn(t, ns, asn, addr, 179, peers...)
}

// startRouterOn is startRouter listening on port instead of 179.
func startRouterOn(t *testing.T, ns string, asn uint32, addr netip.Addr, port int32, peers ...routerPeer) *testRouter {
	t.Helper()
	runner := inNamespace(t, ns)
	srv := server.NewBgpServer()
	served := make(chan struct{})
	go func() {
		_ = runner.Do(func() error { srv.Serve(); return nil })
		runner.Close()
		close(served)
	}()
	ctx := context.Background()
	err := srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn: asn, RouterId: addr.String(), ListenPort: port, ListenAddresses: []string{addr.String()},
	}})
	if err != nil {
		srv.Stop()
		t.Fatalf("start router %s: %v", addr, err)
	}
	r := &testRouter{srv: srv, addr: addr, withdrawn: map[netip.Prefix]int{}}
	watchCtx, stopWatch := context.WithCancel(ctx)
	t.Cleanup(func() {
		stopWatch()
		srv.Stop()
		select {
		case <-served:
		case <-time.After(5 * time.Second):
			t.Errorf("router %s did not stop", addr)
		}
	})
	err = srv.WatchEvent(watchCtx, server.WatchEventMessageCallbacks{
		OnPathUpdate: func(paths []*apiutil.Path, _ time.Time) {
			r.mu.Lock()
			defer r.mu.Unlock()
			for _, p := range paths {
				if p.Withdrawal {
					if pfx, err := netip.ParsePrefix(p.Nlri.String()); err == nil {
						r.withdrawn[pfx]++
					}
				}
			}
		},
	}, server.WatchUpdate(false, "", ""))
	if err != nil {
		t.Fatalf("router watch: %v", err)
	}
	for _, p := range peers {
		err := srv.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{
			Conf:         &api.PeerConf{NeighborAddress: p.Address.String(), PeerAsn: p.ASN, AuthPassword: p.Password},
			Transport:    &api.Transport{PassiveMode: true},
			Timers:       &api.Timers{Config: &api.TimersConfig{HoldTime: 9, KeepaliveInterval: 3}},
			EbgpMultihop: &api.EbgpMultihop{Enabled: p.Multihop > 0, MultihopTtl: uint32(p.Multihop)},
		}})
		if err != nil {
			t.Fatalf("router %s: add peer %s: %v", addr, p.Address, err)
		}
	}
	return r
}

// routerRoute is one path in the router's RIB.
type routerRoute struct {
	NextHop     netip.Addr
	Communities []uint32
	Large       []string
	MED         *uint32
	LocalPref   *uint32
	ASPath      string
}

func (r routerRoute) String() string {
	return fmt.Sprintf("{nh %s comm %v large %v med %v lp %v aspath %q}", r.NextHop, r.Communities, r.Large, deref(r.MED), deref(r.LocalPref), r.ASPath)
}

func deref(p *uint32) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}

// rib returns the router's global RIB (IPv4 unicast), one path per prefix.
func (r *testRouter) rib(t *testing.T) map[netip.Prefix]routerRoute {
	t.Helper()
	out := map[netip.Prefix]routerRoute{}
	err := r.srv.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: gobgp.RF_IPv4_UC},
		func(nlri gobgp.NLRI, paths []*apiutil.Path) {
			pfx, err := netip.ParsePrefix(nlri.String())
			if err != nil || len(paths) == 0 {
				return
			}
			var rr routerRoute
			for _, a := range paths[0].Attrs {
				switch a := a.(type) {
				case *gobgp.PathAttributeNextHop:
					rr.NextHop = a.Value
				case *gobgp.PathAttributeCommunities:
					rr.Communities = slices.Clone(a.Value)
				case *gobgp.PathAttributeLargeCommunities:
					for _, c := range a.Values {
						rr.Large = append(rr.Large, fmt.Sprintf("%d:%d:%d", c.ASN, c.LocalData1, c.LocalData2))
					}
				case *gobgp.PathAttributeMultiExitDisc:
					rr.MED = u32(a.Value)
				case *gobgp.PathAttributeLocalPref:
					rr.LocalPref = u32(a.Value)
				case *gobgp.PathAttributeAsPath:
					var as []string
					for _, seg := range a.Value {
						for _, n := range seg.GetAS() {
							as = append(as, fmt.Sprint(n))
						}
					}
					rr.ASPath = strings.Join(as, " ")
				}
			}
			out[pfx] = rr
		})
	if err != nil {
		t.Fatalf("router %s: list paths: %v", r.addr, err)
	}
	return out
}

// peerState is the router's view of its session with addr.
func (r *testRouter) peerState(t *testing.T, addr netip.Addr) api.PeerState_SessionState {
	t.Helper()
	var st api.PeerState_SessionState
	err := r.srv.ListPeer(context.Background(), &api.ListPeerRequest{Address: addr.String()}, func(p *api.Peer) {
		if p.State != nil {
			st = p.State.SessionState
		}
	})
	if err != nil {
		t.Fatalf("router %s: list peer %s: %v", r.addr, addr, err)
	}
	return st
}

func (r *testRouter) withdrawals(p netip.Prefix) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.withdrawn[p]
}
