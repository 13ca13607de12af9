package bgp

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/osrg/gobgp/v4/api"
)

// TestPeerFixMatchesReasons: peerFix picks its advice by the wording of a
// reason, so it is fed here the reasons the package really produces
// (connectErrorText, notificationText, disconnectText, the log hook's
// text), not copies of them. Rewording one of them without peerFix fails
// here instead of quietly degrading the advice to the generic line.
func TestPeerFixMatchesReasons(t *testing.T) {
	p := Peer{Address: netip.MustParseAddr("10.0.1.1"), Port: 179, ASN: 65000}
	withKey := p
	withKey.Password = "s3cret"
	node := netip.MustParseAddr("10.0.1.2")
	s := &Speaker{}
	r := &peerRecord{cfg: p}
	forced := &peerRecord{cfg: p, forcedDown: "BFD session down (control detection time expired)"}

	for _, tc := range []struct {
		reason, want string
	}{
		{connectErrorText("dial tcp 10.0.1.1:179: connect: connection refused", p, node), "runs BGP on that address"},
		{connectErrorText("dial tcp 10.0.1.1:179: i/o timeout", withKey, node), "TCP MD5 password"},
		{connectErrorText("dial tcp 10.0.1.1:179: i/o timeout", p, node), "TCP MD5 password"},
		{connectErrorText("connect: no route to host", p, node), "needs multihop"},
		{connectErrorText("connect: network is unreachable", p, node), "needs multihop"},
		{connectErrorText("bind: cannot assign requested address", p, node), "check node.address"},
		{"peer sent NOTIFICATION: " + notificationText(2, 2), "the router expects another AS"},
		{s.disconnectText(r, api.PeerState_DISCONNECT_REASON_BAD_PEER_AS, ""), "correct the peer's AS"},
		{"sent NOTIFICATION: " + notificationText(2, 3), "router ID of its own"},
		{"peer sent NOTIFICATION: " + notificationText(2, 6), "set holdTime"},
		{s.disconnectText(r, api.PeerState_DISCONNECT_REASON_INVALID_MSG, ""), "check the ASNs on both sides"},
		{"the peer rejected our OPEN (most likely with a NOTIFICATION: check ASNs on both sides)", "check the ASNs on both sides"},
		{s.disconnectText(r, api.PeerState_DISCONNECT_REASON_HOLD_TIMER_EXPIRED, ""), "within the hold time: check the link"},
		{"peer sent NOTIFICATION: " + notificationText(codeCease, 2), "shut down or reset on the router"},
		{"peer sent NOTIFICATION: " + notificationText(codeCease, 4), "shut down or reset on the router"},
		{s.disconnectText(r, api.PeerState_DISCONNECT_REASON_DECONFIGURED, ""), "nothing to do"},
		{s.disconnectText(forced, api.PeerState_DISCONNECT_REASON_ADMIN_DOWN, ""), "BFD found the link to the peer dead"},
	} {
		if tc.reason == "" {
			t.Errorf("no reason text for the case wanting %q", tc.want)
			continue
		}
		if got := peerFix(tc.reason, false); !strings.Contains(got, tc.want) {
			t.Errorf("peerFix(%q) = %q, want advice containing %q", tc.reason, got, tc.want)
		}
	}
	if got := peerFix("connect to 10.0.1.1 port 179: connection refused", true); !strings.Contains(got, "peer is passive") {
		t.Errorf("a passive peer's advice: %q", got)
	}
}
