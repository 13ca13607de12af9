package lab

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"

	"github.com/xlbproject/xlb/internal/bfd"
)

// speakerCommand makes the test binary a node's BGP speaker instead of
// running tests (see TestMain): a GoBGP library speaker, as an xlb node
// embeds one, but not xlb's agent. It runs as a process of its own,
// started with StartProcess in the node's namespace, because GoBGP opens
// its sockets on goroutines that may run on any thread of a process.
// It announces one prefix with next hop = its own address as soon as
// the session is up, prints "established UNIXNANO" each time the
// session comes up, and on SIGTERM stops cleanly: a Cease notification
// tells the peer to withdraw at once.
const speakerCommand = "lab-test-speaker"

// speaker describes one test speaker.
type speaker struct {
	local, peer  netip.Addr
	asn, peerASN uint32
	prefix       netip.Prefix
	hold         time.Duration
	bfd          *BFD // also run xlb's BFD towards peer
}

func (s speaker) args() []string {
	a := []string{speakerCommand,
		"--local", s.local.String(), "--asn", strconv.FormatUint(uint64(s.asn), 10),
		"--peer", s.peer.String(), "--peer-asn", strconv.FormatUint(uint64(s.peerASN), 10),
		"--prefix", s.prefix.String(), "--hold", s.hold.String(),
	}
	if s.bfd != nil {
		a = append(a, "--bfd", s.bfd.MinTx.String(), "--bfd-multiplier", strconv.Itoa(s.bfd.Multiplier))
	}
	return a
}

func speakerMain(args []string) int {
	fs := flag.NewFlagSet(speakerCommand, flag.ContinueOnError)
	local := fs.String("local", "", "own address: router ID, source, next hop")
	asn := fs.Uint("asn", 0, "own AS")
	peer := fs.String("peer", "", "the router or reflector")
	peerASN := fs.Uint("peer-asn", 0, "its AS")
	prefix := fs.String("prefix", "", "prefix to announce")
	hold := fs.Duration("hold", 9*time.Second, "hold time")
	bfdEvery := fs.Duration("bfd", 0, "BFD interval towards the peer; 0: no BFD")
	bfdMult := fs.Int("bfd-multiplier", 3, "BFD detection multiplier")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := speak(log, *local, uint32(*asn), *peer, uint32(*peerASN), *prefix, *hold, *bfdEvery, *bfdMult); err != nil {
		log.Error("speaker failed", "err", err)
		return 1
	}
	return 0
}

func speak(log *slog.Logger, localS string, asn uint32, peerS string, peerASN uint32, prefixS string, hold, bfdEvery time.Duration, bfdMult int) error {
	local, err := netip.ParseAddr(localS)
	if err != nil {
		return err
	}
	peer, err := netip.ParseAddr(peerS)
	if err != nil {
		return err
	}
	prefix, err := netip.ParsePrefix(prefixS)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	s := server.NewBgpServer(server.LoggerOption(log.With("gobgp", true), nil))
	go s.Serve()
	if err := s.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{Asn: asn, RouterId: local.String(), ListenPort: -1}}); err != nil {
		return fmt.Errorf("start BGP: %w", err)
	}
	err = s.WatchEvent(ctx, server.WatchEventMessageCallbacks{
		OnPeerUpdate: func(ev *apiutil.WatchEventMessage_PeerEvent, t time.Time) {
			if ev.Type == apiutil.PEER_EVENT_STATE && ev.Peer.State.SessionState == bgp.BGP_FSM_ESTABLISHED {
				fmt.Printf("established %d\n", t.UnixNano())
			}
		},
	}, server.WatchPeer())
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	// The path goes in before the peer: the first UPDATE carries it.
	nlri, err := bgp.NewIPAddrPrefix(prefix)
	if err != nil {
		return err
	}
	nh, err := bgp.NewPathAttributeNextHop(local)
	if err != nil {
		return err
	}
	if _, err := s.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{{
		Family: bgp.RF_IPv4_UC,
		Nlri:   nlri,
		Attrs:  []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP), nh},
	}}}); err != nil {
		return fmt.Errorf("add path: %w", err)
	}
	secs := uint64(hold / time.Second)
	if err := s.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{
		Conf: &api.PeerConf{NeighborAddress: peer.String(), PeerAsn: peerASN},
		Timers: &api.Timers{Config: &api.TimersConfig{
			HoldTime: secs, KeepaliveInterval: max(secs/3, 1), ConnectRetry: 1,
		}},
		Transport: &api.Transport{LocalAddress: local.String()},
		AfiSafis: []*api.AfiSafi{{Config: &api.AfiSafiConfig{
			Family: &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}, Enabled: true,
		}}},
	}}); err != nil {
		return fmt.Errorf("add peer: %w", err)
	}
	if bfdEvery > 0 {
		m, err := bfd.NewManager(local, log)
		if err != nil {
			return err
		}
		defer m.Close()
		if err := m.Add(peer, bfd.Config{MinTx: bfdEvery, MinRx: bfdEvery, Multiplier: uint8(bfdMult)}); err != nil {
			return err
		}
		go func() {
			for ev := range m.Events() {
				log.Info("BFD", "peer", ev.Peer, "state", ev.State, "diag", ev.Diag)
			}
		}()
	}
	<-ctx.Done()
	log.Info("stopping: withdrawing with a Cease notification")
	sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return s.StopBgp(sctx, &api.StopBgpRequest{})
}

// waitEstablished waits up to timeout for the speaker's log to show an
// established session and returns its time (lastEstablished). The
// speaker logs the session from GoBGP's event watcher, which may run
// after the UPDATE that follows it has reached the router: a route can
// be in the router's FIB a moment before the line is in the log.
func waitEstablished(t *testing.T, prefix, name string, timeout time.Duration) (time.Time, bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if est, ok := lastEstablished(t, prefix, name); ok || time.Now().After(deadline) {
			return est, ok
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lastEstablished reads the time of the speaker's latest session
// establishment from its log.
func lastEstablished(t *testing.T, prefix, name string) (time.Time, bool) {
	t.Helper()
	b, err := os.ReadFile(LogFile(prefix, name))
	if err != nil {
		t.Fatal(err)
	}
	var last time.Time
	var ok bool
	for _, line := range strings.Split(string(b), "\n") {
		if v, found := strings.CutPrefix(line, "established "); found {
			if ns, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				last, ok = time.Unix(0, ns), true
			}
		}
	}
	return last, ok
}
