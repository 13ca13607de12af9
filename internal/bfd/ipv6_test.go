package bfd

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/testbed/netns"
)

// Over IPv6 the Manager checks the hop limit of what it receives (RFC
// 5881 §5: 255, else the packet came from further away than the link)
// and accepts the peer's packets otherwise, as it does the TTL over IPv4.
func TestManagerHopLimitIPv6(t *testing.T) {
	t.Parallel()
	p := newNSPair(t)
	local, peer := p.addr6[0], p.addr6[1]
	m := p.managerOn(t, 0, local)
	if err := m.Add(peer, Config{Passive: true}); err != nil {
		t.Fatal(err)
	}
	var raw *rawPeer
	if err := netns.Do(p.ns[1], func() error { raw = newRawPeer(t, peer, local); return nil }); err != nil {
		t.Fatal(err)
	}
	down := packet{state: StateDown, detectMult: 3, myDiscr: 77, desiredMinTx: 1e6, requiredMinRx: 1e6}
	raw.send(down.encode(nil), 254)
	waitCount(t, "hop limit drops", func() uint64 { return m.dropped(dropTTL) }, 1)
	if st := sessionOf(t, m, peer); st.RxPackets != 0 || st.State != StateDown {
		t.Fatalf("after a packet with hop limit 254: %+v, want nothing received", st)
	}
	raw.send(down.encode(nil), 255)
	if ev := waitEvent(t, m, peer, StateInit, 2*time.Second); ev.Previous != StateDown {
		t.Fatalf("event %+v, want Down→Init", ev)
	}
	if st := sessionOf(t, m, peer); st.RemoteDiscr != 77 || st.RxPackets != 1 {
		t.Fatalf("after a valid packet: %+v", st)
	}
}

// A Manager takes peers of its own family only.
func TestManagerFamilies(t *testing.T) {
	p := newNSPair(t)
	m4, m6 := p.manager(t, 0), p.managerOn(t, 0, p.addr6[0])
	for _, tc := range []struct {
		m       *Manager
		peer    netip.Addr
		wantErr string
	}{
		{m4, p.addr6[1], fmt.Sprintf("bfd peer %s: want a unicast IPv4 address other than the local %s", p.addr6[1], p.addr[0])},
		{m6, p.addr[1], fmt.Sprintf("bfd peer %s: want a unicast IPv6 address other than the local %s", p.addr[1], p.addr6[0])},
		{m6, netip.MustParseAddr("fe80::1"), "want a unicast IPv6 address"},
	} {
		if err := tc.m.Add(tc.peer, fast); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("Add(%s) on %s = %v, want %q", tc.peer, tc.m.local, err, tc.wantErr)
		}
	}
	if _, err := NewManager(netip.MustParseAddr("fe80::1"), nil); err == nil || !strings.Contains(err.Error(), "link-local") {
		t.Errorf("NewManager(fe80::1) = %v, want a link-local error", err)
	}
}

// TestFRRInteropIPv6 runs a session over IPv6 between our Manager and
// FRR's bfdd: up with the negotiated timers, our AdminDown, and FRR's
// crash detected within our detection time.
func TestFRRInteropIPv6(t *testing.T) {
	t.Parallel()
	requireFRR(t)
	p := newNSPair(t)
	ours, theirs := p.addr6[0], p.addr6[1]
	frr := startFRR(t, p.ns[1])
	frr.vtysh("configure terminal", "bfd",
		fmt.Sprintf("peer %s local-address %s", ours, theirs),
		"receive-interval 100", "transmit-interval 100", "detect-multiplier 3")

	m := p.managerOn(t, 0, ours)
	if err := m.Add(theirs, fast); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, m, theirs, StateUp, 10*time.Second)
	negotiated := func(fp frrPeer) bool {
		return fp.Status == "up" && fp.RemoteTransmitInterval == 100 && fp.RemoteReceiveInterval == 100
	}
	fp, _ := frr.waitPeer(ours.String(), 5*time.Second, "Up with our 100 ms timers", negotiated)
	st := sessionOf(t, m, theirs)
	if st.State != StateUp || st.RemoteDiscr != fp.ID || fp.RemoteID != st.LocalDiscr {
		t.Fatalf("after negotiation: ours %+v, FRR %+v", st, fp)
	}

	if err := m.Remove(theirs); err != nil {
		t.Fatal(err)
	}
	fp, _ = frr.waitPeer(ours.String(), 2*time.Second, "Down after our AdminDown", func(fp frrPeer) bool { return fp.Status != "up" })
	if fp.RemoteDiagnostic != "administratively down" {
		t.Errorf("FRR's remote diagnostic %q, want administratively down", fp.RemoteDiagnostic)
	}

	if err := m.Add(theirs, fast); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, m, theirs, StateUp, 10*time.Second)
	frr.waitPeer(ours.String(), 3*time.Second, "Up again", negotiated)
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if st = sessionOf(t, m, theirs); st.DetectionTime == 300*time.Millisecond {
			break
		}
	}
	if st.DetectionTime != 300*time.Millisecond {
		t.Fatalf("our detection time %v, want 300ms", st.DetectionTime)
	}
	start := time.Now()
	if err := frr.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	ev := waitEvent(t, m, theirs, StateDown, 3*st.DetectionTime)
	t.Logf("FRR over IPv6: we detected its crash (SIGKILL) after %v (detection time %v)", ev.Time.Sub(start), st.DetectionTime)
	if ev.Diag != DiagDetectionTimeExpired {
		t.Fatalf("our event %+v, want diag Control Detection Time Expired", ev)
	}
}
