package router

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"

	"github.com/xlbproject/xlb/internal/bfd"
)

// speakerEnv makes the test binary a node's BGP speaker instead of
// running tests (see TestMain): a GoBGP library speaker, as an xlb node
// embeds one, in a process of its own so that all of its sockets live in
// the node's namespace. Its value is "LOCAL ASN ROUTER ROUTER_ASN PREFIX
// HOLD_SECONDS BFD_MS [NEXTHOP]": with BFD_MS > 0 it also runs xlb's BFD
// towards the router (every BFD_MS milliseconds, multiplier 3), as an xlb
// node configured for BFD does, and at end of input stops BFD (AdminDown)
// before BGP. LOCAL and ROUTER are the session's addresses (either
// family); NEXTHOP, LOCAL by default, is PREFIX's next hop (an IPv6
// PREFIX goes in MP_REACH_NLRI, and the session then also carries IPv6
// unicast). It reads commands from standard input, one a line:
// "announce" (PREFIX with next hop NEXTHOP), "withdraw"; and writes "ok
// CMD" or "err CMD: why" after each, "up" and "down" as the session to
// the router changes. At end of input it stops cleanly (a Cease
// notification), as a node shutting down does.
const speakerEnv = "XLB_ROUTER_TEST_SPEAKER"

type speakerSpec struct {
	local, router netip.Addr
	asn, rASN     uint32
	prefix        netip.Prefix
	hold          uint64
	bfdMs         uint64     // 0: no BFD
	nexthop       netip.Addr // invalid: local
}

func (s speakerSpec) String() string {
	out := fmt.Sprintf("%s %d %s %d %s %d %d", s.local, s.asn, s.router, s.rASN, s.prefix, s.hold, s.bfdMs)
	if s.nexthop.IsValid() {
		out += " " + s.nexthop.String()
	}
	return out
}

func parseSpeakerSpec(v string) (speakerSpec, error) {
	var s speakerSpec
	f := strings.Fields(v)
	if len(f) != 7 && len(f) != 8 {
		return s, fmt.Errorf("%s=%q: want 7 or 8 fields", speakerEnv, v)
	}
	s.nexthop = netip.Addr{}
	if len(f) == 8 {
		a, err := netip.ParseAddr(f[7])
		if err != nil {
			return s, err
		}
		s.nexthop = a
	}
	var err error
	var n uint64
	if s.local, err = netip.ParseAddr(f[0]); err != nil {
		return s, err
	}
	if n, err = strconv.ParseUint(f[1], 10, 32); err != nil {
		return s, err
	}
	s.asn = uint32(n)
	if s.router, err = netip.ParseAddr(f[2]); err != nil {
		return s, err
	}
	if n, err = strconv.ParseUint(f[3], 10, 32); err != nil {
		return s, err
	}
	s.rASN = uint32(n)
	if s.prefix, err = netip.ParsePrefix(f[4]); err != nil {
		return s, err
	}
	if s.hold, err = strconv.ParseUint(f[5], 10, 16); err != nil {
		return s, err
	}
	if s.bfdMs, err = strconv.ParseUint(f[6], 10, 32); err != nil {
		return s, err
	}
	return s, nil
}

func speakerMain(v string) int {
	spec, err := parseSpeakerSpec(v)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	ctx := context.Background()
	s := server.NewBgpServer()
	go s.Serve()
	defer s.Stop()
	routerID := spec.local
	if routerID.Is6() {
		// A BGP identifier is 32 bits: the last four bytes will do.
		b := routerID.As16()
		routerID = netip.AddrFrom4([4]byte(b[12:]))
	}
	if err := s.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn: spec.asn, RouterId: routerID.String(), ListenPort: -1,
	}}); err != nil {
		fmt.Fprintln(os.Stderr, "start:", err)
		return 1
	}
	err = s.WatchEvent(ctx, server.WatchEventMessageCallbacks{
		OnPeerUpdate: func(ev *apiutil.WatchEventMessage_PeerEvent, _ time.Time) {
			if ev.Type != apiutil.PEER_EVENT_STATE {
				return
			}
			switch ev.Peer.State.SessionState {
			case bgp.BGP_FSM_ESTABLISHED:
				say("up")
			case bgp.BGP_FSM_IDLE, bgp.BGP_FSM_ACTIVE:
				say("down")
			}
		},
	}, server.WatchPeer())
	if err != nil {
		fmt.Fprintln(os.Stderr, "watch:", err)
		return 1
	}
	families := []*api.AfiSafi{{Config: &api.AfiSafiConfig{Family: &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}, Enabled: true}}}
	if spec.prefix.Addr().Is6() {
		families = append(families, &api.AfiSafi{Config: &api.AfiSafiConfig{Family: &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}, Enabled: true}})
	}
	if err := s.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{
		Conf:      &api.PeerConf{NeighborAddress: spec.router.String(), PeerAsn: spec.rASN},
		Timers:    &api.Timers{Config: &api.TimersConfig{HoldTime: spec.hold, KeepaliveInterval: max(spec.hold/3, 1), ConnectRetry: 1}},
		Transport: &api.Transport{LocalAddress: spec.local.String()},
		AfiSafis:  families,
	}}); err != nil {
		fmt.Fprintln(os.Stderr, "add peer:", err)
		return 1
	}
	if spec.bfdMs > 0 {
		every := time.Duration(spec.bfdMs) * time.Millisecond
		m, err := bfd.NewManager(spec.local, slog.New(slog.NewTextHandler(os.Stderr, nil)))
		if err != nil {
			fmt.Fprintln(os.Stderr, "bfd:", err)
			return 1
		}
		// Deferred after s.Stop, so it runs first: BFD says AdminDown
		// while the BGP session is still up.
		defer m.Close()
		if err := m.Add(spec.router, bfd.Config{MinTx: every, MinRx: every, Multiplier: 3}); err != nil {
			fmt.Fprintln(os.Stderr, "bfd:", err)
			return 1
		}
		go func() {
			for range m.Events() { // the manager logs them
			}
		}()
	}
	nlri, err := bgp.NewIPAddrPrefix(spec.prefix)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	nexthop, family := spec.local, bgp.RF_IPv4_UC
	if spec.nexthop.IsValid() {
		nexthop = spec.nexthop
	}
	var nh bgp.PathAttributeInterface
	if spec.prefix.Addr().Is4() {
		nh, err = bgp.NewPathAttributeNextHop(nexthop)
	} else {
		family = bgp.RF_IPv6_UC
		nh, err = bgp.NewPathAttributeMpReachNLRI(family, []bgp.PathNLRI{{NLRI: nlri}}, nexthop)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		cmd := strings.TrimSpace(in.Text())
		var err error
		switch cmd {
		case "announce":
			_, err = s.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{{
				Family: family,
				Nlri:   nlri,
				Attrs:  []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP), nh},
			}}})
		case "withdraw":
			err = s.DeletePath(apiutil.DeletePathRequest{DeleteAll: true})
		default:
			err = fmt.Errorf("unknown command")
		}
		if err != nil {
			say("err %s: %v", cmd, err)
			continue
		}
		say("ok %s", cmd)
	}
	return 0
}
