package bgp

import (
	"bytes"
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"github.com/osrg/gobgp/v4/api"
)

func TestNotificationText(t *testing.T) {
	for _, tc := range []struct {
		code, sub uint8
		want      string
	}{
		{2, 2, "OPEN message error / bad peer AS"},
		{2, 6, "OPEN message error / unacceptable hold time"},
		{4, 0, "hold timer expired"},
		{6, 2, "Cease / administrative shutdown"},
		{6, 10, "Cease / BFD down"},
		{6, 99, "Cease / subcode 99"},
		{42, 1, "error code 42 / subcode 1"},
	} {
		if got := notificationText(tc.code, tc.sub); got != tc.want {
			t.Errorf("notificationText(%d, %d) = %q, want %q", tc.code, tc.sub, got, tc.want)
		}
	}
}

func TestConnectErrorText(t *testing.T) {
	nh := mustAddr("10.0.1.2")
	p := Peer{Address: mustAddr("10.0.1.1"), Port: 179}
	withPW := p
	withPW.Password = "x"
	for _, tc := range []struct {
		err  string
		peer Peer
		want []string
	}{
		{"dial tcp 10.0.1.2:0->10.0.1.1:179: connect: connection refused", p, []string{"connect to 10.0.1.1 port 179: connection refused"}},
		{"dial tcp 10.0.1.2:0->10.0.1.1:179: i/o timeout", withPW, []string{"no answer", "TCP MD5 password mismatch"}},
		{"dial tcp 10.0.1.2:0->10.0.1.1:179: i/o timeout", p, []string{"no answer", "unreachable or filtered"}},
		{"dial tcp 10.0.1.2:0->10.0.1.1:179: connect: no route to host", p, []string{"no route to host"}},
		{"dial tcp 10.0.1.2:0->10.0.1.1:179: connect: network is unreachable", p, []string{"network unreachable"}},
		{"dial tcp 10.0.1.2:0->10.0.1.1:179: bind: cannot assign requested address", p, []string{"cannot use local address 10.0.1.2"}},
		{"something new", p, []string{"connect to 10.0.1.1 port 179: something new"}},
	} {
		got := connectErrorText(tc.err, tc.peer, nh)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("connectErrorText(%q) = %q, want %q in it", tc.err, got, w)
			}
		}
	}
}

// The hook passes GoBGP's records on one level lower, with the attributes
// of the logger they came through, and picks out the ones the speaker
// needs from per-peer loggers only.
func TestLogHook(t *testing.T) {
	var buf bytes.Buffer
	inner := slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})
	var got []gobgpLogEvent
	var gotPeer netip.Addr
	log := slog.New(newLogHook(inner, func(a netip.Addr, ev gobgpLogEvent) { gotPeer = a; got = append(got, ev) }))

	log.Info("Add a peer configuration", "Topic", "Peer", "Key", "10.0.1.1") // server logger: Key is no With attribute
	log.Debug("failed to connect", "Error", "x")                             // not from a peer logger
	peerLog := log.With(slog.String("Topic", "Peer"), slog.String("Key", "10.0.1.1"))
	peerLog.Debug("failed to connect", "Error", "dial tcp: connection refused")
	peerLog.Info("sent notification", "State", "x", "Code", 2, "Subcode", 2, "Data", []byte{})
	peerLog.Warn("something odd")
	peerLog.Warn("prefix limit reached", "Family", "ipv4-unicast") // the speaker says it better

	if len(got) != 2 || gotPeer != mustAddr("10.0.1.1") {
		t.Fatalf("events = %+v from %s", got, gotPeer)
	}
	if got[0].kind != logConnectFailed || got[0].err != "dial tcp: connection refused" {
		t.Errorf("connect event = %+v", got[0])
	}
	if got[1].kind != logSentNotification || got[1].code != 2 || got[1].subcode != 2 {
		t.Errorf("notification event = %+v", got[1])
	}
	out := buf.String()
	for _, want := range []string{
		`level=DEBUG msg="Add a peer configuration" component=gobgp`, // Info → Debug
		`level=WARN msg="something odd" component=gobgp Topic=Peer Key=10.0.1.1`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// GoBGP's debug records fall below the inner handler's level; the
	// warnings the speaker reports itself become debug records.
	if !strings.Contains(out, `level=DEBUG msg="prefix limit reached"`) {
		t.Errorf("GoBGP's prefix limit warning not turned into a debug record:\n%s", out)
	}
	if strings.Contains(out, "failed to connect") {
		t.Errorf("debug record passed through:\n%s", out)
	}
}

func TestNoteGoBGPLog(t *testing.T) {
	a := mustAddr("10.0.1.1")
	s := newTestSpeaker(t, Peer{Address: a, ASN: 65000})
	status := func() PeerStatus { return s.Peers()[0] }
	// GoBGP's records name the peer as GoBGP knows it: here by its own
	// address, as when GoBGP dials it itself. Until GoBGP has the peer,
	// records naming it are not about it.
	s.noteGoBGPLog(a, gobgpLogEvent{kind: logConnectFailed, err: "connect: connection refused"})
	if got := status().LastError; got != "" {
		t.Errorf("record for a peer GoBGP does not have: %q", got)
	}
	s.mu.Lock()
	s.peers[a].gobgpAddr = a
	s.mu.Unlock()

	s.noteGoBGPLog(a, gobgpLogEvent{kind: logConnectFailed, err: "connect: connection refused"})
	if got := status().LastError; !strings.Contains(got, "connection refused") {
		t.Errorf("after connect failure: %q", got)
	}
	s.noteGoBGPLog(a, gobgpLogEvent{kind: logSentNotification, code: 2, subcode: 2})
	if got, want := status().LastError, "sent NOTIFICATION: OPEN message error / bad peer AS (the peer's OPEN does not carry the configured AS 65000)"; got != want {
		t.Errorf("after bad peer AS: %q, want %q", got, want)
	}
	// An FSM error in OpenSent means the peer answered our OPEN with a
	// NOTIFICATION; once a probe knows which, that is what shows.
	s.mu.Lock()
	s.peers[a].rejection = "OPEN message error / unacceptable hold time"
	s.mu.Unlock()
	s.noteGoBGPLog(a, gobgpLogEvent{kind: logSentNotification, code: 5, subcode: 1})
	if got, want := status().LastError, "peer sent NOTIFICATION: OPEN message error / unacceptable hold time"; got != want {
		t.Errorf("after FSM error: %q, want %q", got, want)
	}
	// The Cease that PeerDown causes is no error of its own.
	if err := s.PeerDown(a, "bfd"); err != nil {
		t.Fatal(err)
	}
	s.noteGoBGPLog(a, gobgpLogEvent{kind: logSentNotification, code: 6, subcode: 2})
	s.noteGoBGPLog(a, gobgpLogEvent{kind: logConnectFailed, err: "connect: connection refused"})
	if got := status().LastError; got != "forced down: bfd" {
		t.Errorf("while forced down: %q", got)
	}
	// Unknown peers are ignored.
	s.noteGoBGPLog(mustAddr("10.9.9.9"), gobgpLogEvent{kind: logConnectFailed, err: "x"})

	// A relayed peer is known to GoBGP by its stand-in address.
	if err := s.PeerUp(a); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	standIn := s.peers[a].standIn
	s.peers[a].gobgpAddr = standIn
	s.mu.Unlock()
	if real, ok := s.relayedPeer(standIn); !ok || real != a {
		t.Errorf("relayedPeer(%s) = %s, %v; want %s", standIn, real, ok, a)
	}
	s.noteGoBGPLog(standIn, gobgpLogEvent{kind: logSentNotification, code: 2, subcode: 2})
	if got := status().LastError; !strings.Contains(got, "bad peer AS") {
		t.Errorf("record naming the stand-in %s: LastError %q", standIn, got)
	}
}

func TestTruncateUTF8(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"abc", 5, "abc"},
		{"abcdef", 3, "abc"},
		{"aé", 2, "a"}, // é is two bytes: never cut in half
		{"aé", 3, "aé"},
	} {
		if got := truncateUTF8(tc.in, tc.n); got != tc.want {
			t.Errorf("truncateUTF8(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestDisconnectText(t *testing.T) {
	s := newTestSpeaker(t)
	for _, tc := range []struct {
		reason    api.PeerState_DisconnectReason
		msg       string
		rec       peerRecord
		want      string
		wantEmpty bool
	}{
		{reason: api.PeerState_DISCONNECT_REASON_HOLD_TIMER_EXPIRED, want: "hold timer expired"},
		{reason: api.PeerState_DISCONNECT_REASON_ADMIN_DOWN, rec: peerRecord{forcedDown: "BFD down"}, want: "forced down: BFD down"},
		{reason: api.PeerState_DISCONNECT_REASON_ADMIN_DOWN, want: "administratively down"},
		{reason: api.PeerState_DISCONNECT_REASON_NOTIFICATION_RECEIVED, rec: peerRecord{notifRecv: "Cease / administrative reset"}, want: "peer sent NOTIFICATION: Cease / administrative reset"},
		{reason: api.PeerState_DISCONNECT_REASON_NOTIFICATION_RECEIVED, msg: "notification-received cease", want: "peer sent NOTIFICATION (notification-received cease)"},
		{reason: api.PeerState_DISCONNECT_REASON_READ_FAILED, want: "connection closed by the peer"},
		{reason: api.PeerState_DISCONNECT_REASON_BAD_PEER_AS, rec: peerRecord{cfg: Peer{ASN: 65099}}, want: "bad peer AS (the peer's OPEN does not carry the configured AS 65099)"},
		{reason: api.PeerState_DISCONNECT_REASON_INVALID_MSG, want: "check ASNs on both sides"},
		{reason: api.PeerState_DISCONNECT_REASON_INVALID_MSG, rec: peerRecord{rejection: "OPEN message error / bad peer AS"}, want: "peer sent NOTIFICATION: OPEN message error / bad peer AS"},
		{reason: api.PeerState_DISCONNECT_REASON_IDLE_TIMER_EXPIRED, wantEmpty: true},
		{reason: api.PeerState_DISCONNECT_REASON_UNSPECIFIED, wantEmpty: true},
	} {
		got := s.disconnectText(&tc.rec, tc.reason, tc.msg)
		if tc.wantEmpty != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%v %+v: %q, want %q", tc.reason, tc.rec, got, tc.want)
		}
	}
}
