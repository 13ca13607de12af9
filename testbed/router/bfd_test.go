package router

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/bfd"
	"github.com/xlbproject/xlb/testbed/testenv"
)

func TestFailure(t *testing.T) {
	peer := netip.MustParseAddr("10.0.1.2")
	for _, tt := range []struct {
		name string
		ev   bfd.Event
		want bool
	}{
		{"detection time expired", bfd.Event{State: bfd.StateDown, Previous: bfd.StateUp, Diag: bfd.DiagDetectionTimeExpired}, true},
		{"peer saw us down", bfd.Event{State: bfd.StateDown, Previous: bfd.StateUp, Diag: bfd.DiagNeighborDown, RemoteDiag: bfd.DiagDetectionTimeExpired}, true},
		{"peer said AdminDown", bfd.Event{State: bfd.StateDown, Previous: bfd.StateUp, Diag: bfd.DiagNeighborDown, RemoteDiag: bfd.DiagAdminDown}, false},
		{"coming up", bfd.Event{State: bfd.StateUp, Previous: bfd.StateInit}, false},
		{"init", bfd.Event{State: bfd.StateInit, Previous: bfd.StateDown}, false},
		{"init lost before up", bfd.Event{State: bfd.StateDown, Previous: bfd.StateInit, Diag: bfd.DiagDetectionTimeExpired}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.ev.Peer = peer
			if got := failure(tt.ev); got != tt.want {
				t.Errorf("failure(%+v) = %v, want %v", tt.ev, got, tt.want)
			}
		})
	}
}

func TestNewBFDConfig(t *testing.T) {
	base := Config{ASN: 65000, Listen: routerIP, Neighbors: []netip.Prefix{segment}}
	for _, tt := range []struct {
		name    string
		bfd     *bfd.Config
		want    *bfd.Config // nil: New refuses
		wantErr string
	}{
		{"none", nil, nil, ""},
		{"defaults", &bfd.Config{}, &bfd.Config{MinTx: bfd.DefaultMinTx, MinRx: bfd.DefaultMinRx, Multiplier: bfd.DefaultMultiplier}, ""},
		{"set", &bfd.Config{MinTx: 50 * time.Millisecond, MinRx: 100 * time.Millisecond, Multiplier: 5},
			&bfd.Config{MinTx: 50 * time.Millisecond, MinRx: 100 * time.Millisecond, Multiplier: 5}, ""},
		{"too fast", &bfd.Config{MinTx: time.Millisecond}, nil, "minTx"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base
			cfg.BFD = tt.bfd
			r, err := New(cfg)
			switch {
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("New: %v, want an error about %s", err, tt.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case tt.want == nil && r.cfg.BFD != nil:
				t.Errorf("BFD config %+v, want none", *r.cfg.BFD)
			case tt.want != nil && (r.cfg.BFD == nil || *r.cfg.BFD != *tt.want):
				t.Errorf("BFD config %v, want %+v", r.cfg.BFD, *tt.want)
			}
		})
	}
}

// bfdEvery and bfdMult are the timers of both sides in TestRouterBFD:
// the router declares a silent node down after bfdMult × bfdEvery.
const (
	bfdEvery = 100 * time.Millisecond
	bfdMult  = 3
)

// TestRouterBFD runs `xlb lab router --bfd` with three nodes whose
// speakers also run BFD, freezes one (SIGSTOP: it sends nothing, not
// even a TCP reset) and measures how soon its next hop leaves the
// kernel route: within a few BFD detection times, where the hold time
// alone would take seconds. Thawed, the node comes back.
func TestRouterBFD(t *testing.T) {
	testenv.RequireRoot(t, "router namespace tests")
	t.Parallel()
	l := newLab(t, "b", 3)
	dir := t.TempDir()
	rp := startRouter(t, l, dir, nodeASN, "--bfd", fmt.Sprintf("%s,%s,%d", bfdEvery, bfdEvery, bfdMult))
	fv := openFIBView(t, l.router)
	detection := bfdMult * bfdEvery

	sp := make([]*speaker, 3)
	for k := range sp {
		sp[k] = startSpeakerSpec(t, l.nodes[k], speakerSpec{local: nodeIP(k + 1), asn: nodeASN, router: routerIP, rASN: routerASN,
			prefix: vip, hold: holdSecs, bfdMs: uint64(bfdEvery / time.Millisecond)})
	}
	for k := range sp {
		sp[k].expect(t, "up", 20*time.Second)
		sp[k].do(t, "announce")
	}
	fv.waitNexthops(t, vip, nodes(1, 2, 3), time.Now(), 5*time.Second)
	start := time.Now()
	// Up on both ends: while the node still says Init, it sends at the
	// slow rate (RFC 5880 §6.8.3) and the detection time is 3 s.
	st := waitStatus(t, rp, 10*time.Second, "every peer's BFD session up", func(st Status) bool {
		for k := 1; k <= 3; k++ {
			if b := peerBFD(st, nodeIP(k)); b == nil || b.State != "Up" || b.RemoteState != "Up" {
				return false
			}
		}
		return true
	})
	t.Logf("BFD sessions up %v after the route was complete", time.Since(start).Round(time.Millisecond))
	for k := 1; k <= 3; k++ {
		if b := peerBFD(st, nodeIP(k)); b.DetectionMs != float64(detection/time.Millisecond) || b.Downs != 0 {
			t.Errorf("node%d BFD status %+v, want detection %v and no downs", k, *b, detection)
		}
	}

	// Frozen, node2 sends no BFD packets and no keepalives.
	start = time.Now()
	if err := sp[1].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := true
	defer func() {
		if frozen {
			_ = sp[1].cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	d := fv.waitNexthops(t, vip, nodes(1, 3), start, 3*holdSecs*time.Second)
	t.Logf("node2 frozen: out of the kernel route after %v (BFD detection time %v, hold time %ds)", d, detection, holdSecs)
	// The router's session goes Down one detection time after the last
	// packet, which left up to one interval before the freeze.
	if lo, hi := detection-bfdEvery-50*time.Millisecond, 3*detection; d < lo || d > hi {
		t.Errorf("node2 left the route after %v, want %v to %v (3× the BFD detection time)", d, lo, hi)
	}
	st = waitStatus(t, rp, 5*time.Second, "node2's BFD session down", func(st Status) bool {
		b := peerBFD(st, nodeIP(2))
		return b != nil && b.State != "Up"
	})
	if b := peerBFD(st, nodeIP(2)); b.Diag != bfd.DiagDetectionTimeExpired.String() || b.Downs != 1 {
		t.Errorf("node2 BFD status %+v, want diag %q and one down", *b, bfd.DiagDetectionTimeExpired)
	}
	if p := peerStatus(st, nodeIP(2)); p == nil || !p.Failed {
		t.Errorf("node2 peer status %+v, want failed", p)
	}

	// Thawed, it hears that its session was reset, reconnects after
	// GoBGP's idle hold time and announces again.
	start = time.Now()
	if err := sp[1].cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	frozen = false
	sp[1].expect(t, "up", 20*time.Second)
	t.Logf("node2 thawed: back in the kernel route after %v", fv.waitNexthops(t, vip, nodes(1, 2, 3), start, 20*time.Second))
	st = waitStatus(t, rp, 10*time.Second, "node2's BFD session up again", func(st Status) bool {
		b := peerBFD(st, nodeIP(2))
		return b != nil && b.State == "Up"
	})
	if p := peerStatus(st, nodeIP(2)); p.Failed || p.BFD.Downs != 1 {
		t.Errorf("node2 after the thaw: %+v, BFD %+v; want not failed, one down", *p, *p.BFD)
	}

	// node1 shuts down cleanly: BFD AdminDown first, then a BGP Cease.
	// AdminDown is no failure; the Cease takes the path out.
	start = time.Now()
	sp[0].stop(t)
	t.Logf("node1 stops: out of the kernel route after %v", fv.waitNexthops(t, vip, nodes(2, 3), start, 5*time.Second))
	st = waitStatus(t, rp, 5*time.Second, "node1's BFD session down", func(st Status) bool {
		b := peerBFD(st, nodeIP(1))
		return b != nil && b.State != "Up"
	})
	if p := peerStatus(st, nodeIP(1)); p.Failed || p.BFD.Diag != bfd.DiagNeighborDown.String() {
		t.Errorf("node1 after a clean stop: %+v, BFD %+v; want not failed, diag %q", *p, *p.BFD, bfd.DiagNeighborDown)
	}
}

// waitStatus polls the router's status until cond holds.
func waitStatus(t *testing.T, rp *routerProc, timeout time.Duration, what string, cond func(Status) bool) Status {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := ReadStatus(ctx, rp.socket)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v; status peers: %+v", what, timeout, describePeers(st))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func peerStatus(st Status, a netip.Addr) *PeerStatus {
	for i := range st.Peers {
		if st.Peers[i].Address == a {
			return &st.Peers[i]
		}
	}
	return nil
}

func peerBFD(st Status, a netip.Addr) *BFDStatus {
	if p := peerStatus(st, a); p != nil {
		return p.BFD
	}
	return nil
}

func describePeers(st Status) []string {
	var out []string
	for _, p := range st.Peers {
		s := fmt.Sprintf("%s %s failed=%v", p.Address, p.State, p.Failed)
		if p.BFD != nil {
			s += fmt.Sprintf(" bfd=%+v", *p.BFD)
		}
		out = append(out, s)
	}
	return out
}

// TestRouterBFDIPv6: with --listen6 the router runs BFD over IPv6 with a
// node whose session is IPv6, beside BFD over IPv4 with a node whose
// session is IPv4; both announce one IPv6 VIP. The frozen IPv6 node
// leaves the route within a few BFD detection times.
func TestRouterBFDIPv6(t *testing.T) {
	testenv.RequireRoot(t, "router namespace tests")
	t.Parallel()
	l := newLab(t, "c", 2)
	dir := t.TempDir()
	rp := startRouter(t, l, dir, nodeASN, "--bfd", fmt.Sprintf("%s,%s,%d", bfdEvery, bfdEvery, bfdMult),
		"--listen6", routerIP6.String(), "--neighbors", segment.String()+","+segment6.String())
	fv := openFIBView(t, l.router)
	detection := bfdMult * bfdEvery
	vip6 := netip.MustParsePrefix("fd00:99::2/128")
	every := uint64(bfdEvery / time.Millisecond)
	sp := []*speaker{
		startSpeakerSpec(t, l.nodes[0], speakerSpec{local: nodeIP6(1), asn: nodeASN, router: routerIP6, rASN: routerASN,
			prefix: vip6, hold: holdSecs, bfdMs: every}),
		startSpeakerSpec(t, l.nodes[1], speakerSpec{local: nodeIP(2), asn: nodeASN, router: routerIP, rASN: routerASN,
			prefix: vip6, hold: holdSecs, bfdMs: every, nexthop: nodeIP6(2)}),
	}
	for k := range sp {
		sp[k].expect(t, "up", 20*time.Second)
		sp[k].do(t, "announce")
	}
	fv.waitNexthops(t, vip6, []netip.Addr{nodeIP6(1), nodeIP6(2)}, time.Now(), 5*time.Second)
	waitStatus(t, rp, 10*time.Second, "both BFD sessions up", func(st Status) bool {
		for _, a := range []netip.Addr{nodeIP6(1), nodeIP(2)} {
			if b := peerBFD(st, a); b == nil || b.State != "Up" || b.RemoteState != "Up" {
				return false
			}
		}
		return true
	})

	start := time.Now()
	if err := sp[0].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sp[0].cmd.Process.Signal(syscall.SIGCONT) }()
	d := fv.waitNexthops(t, vip6, []netip.Addr{nodeIP6(2)}, start, 3*holdSecs*time.Second)
	t.Logf("IPv6 node frozen: out of the kernel route after %v (BFD detection time %v, hold time %ds)", d, detection, holdSecs)
	if hi := 3 * detection; d > hi {
		t.Errorf("the frozen node left the route after %v, want within %v (3× the BFD detection time)", d, hi)
	}
	st := waitStatus(t, rp, 5*time.Second, "the IPv6 node's BFD session down", func(st Status) bool {
		b := peerBFD(st, nodeIP6(1))
		return b != nil && b.State != "Up"
	})
	if b := peerBFD(st, nodeIP6(1)); b.Diag != bfd.DiagDetectionTimeExpired.String() {
		t.Errorf("IPv6 node's BFD status %+v, want diag %q", *b, bfd.DiagDetectionTimeExpired)
	}
}
