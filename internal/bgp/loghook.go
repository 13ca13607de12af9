package bgp

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
)

// GoBGP reports some session failures only in its logs: a TCP connect
// that fails and a NOTIFICATION exchanged while a session is being set
// up never reach its event stream. logHook is the slog handler GoBGP
// logs through; it picks those records out (by message text, pinned by
// the tests to GoBGP v4.8.0) and passes every record on to xlb's logger
// one level lower, so GoBGP's chatter stays at debug.
type logHook struct {
	inner slog.Handler
	peer  string // GoBGP's per-peer loggers carry the address as "Key"
	note  func(peer netip.Addr, ev gobgpLogEvent)
	// realPeer, if set, names the peer behind a stand-in address
	// (connect.go), for GoBGP's records about a relayed peer.
	realPeer func(standIn netip.Addr) (netip.Addr, bool)
}

// gobgpLogEvent is a log record the speaker cares about.
type gobgpLogEvent struct {
	kind    string // logConnectFailed, logSentNotification, logReceivedNotification
	err     string // connect error
	code    uint8  // NOTIFICATION code and subcode
	subcode uint8
}

const (
	logConnectFailed        = "connect-failed"
	logSentNotification     = "sent-notification"
	logReceivedNotification = "received-notification"
)

func newLogHook(inner slog.Handler, note func(netip.Addr, gobgpLogEvent)) *logHook {
	return &logHook{inner: inner.WithAttrs([]slog.Attr{slog.String("component", "gobgp")}), note: note}
}

// Enabled is true for every level: the connect failures GoBGP logs at
// debug are needed whatever xlb's own level is.
func (h *logHook) Enabled(context.Context, slog.Level) bool { return true }

func (h *logHook) Handle(ctx context.Context, r slog.Record) error {
	if h.peer != "" {
		h.inspect(r)
	}
	level := r.Level
	if level < slog.LevelWarn || reportedByXLB[r.Message] {
		level = min(level, slog.LevelInfo) - 4
	}
	if !h.inner.Enabled(ctx, level) {
		return nil
	}
	out := slog.NewRecord(r.Time, level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool { out.AddAttrs(a); return true })
	return h.inner.Handle(ctx, out)
}

// reportedByXLB are GoBGP's warnings that the speaker reports itself,
// better worded and with what to do: GoBGP's own go to debug.
var reportedByXLB = map[string]bool{
	"prefix limit reached": true, // onPeerEvent: "bgp peer down: it sent more prefixes ..."
}

func (h *logHook) inspect(r slog.Record) {
	addr, err := netip.ParseAddr(h.peer)
	if err != nil {
		return
	}
	var ev gobgpLogEvent
	switch r.Message {
	case "failed to connect":
		ev.kind = logConnectFailed
	case "sent notification":
		ev.kind = logSentNotification
	case "received notification":
		ev.kind = logReceivedNotification
	default:
		return
	}
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "Error":
			ev.err = a.Value.String()
		case "Code":
			ev.code = uint8(a.Value.Int64())
		case "Subcode":
			ev.subcode = uint8(a.Value.Int64())
		}
		return true
	})
	h.note(addr, ev)
}

func (h *logHook) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	for _, a := range attrs {
		if a.Key != "Key" {
			continue
		}
		c.peer = a.Value.String()
		if addr, err := netip.ParseAddr(c.peer); err == nil && h.realPeer != nil {
			if real, ok := h.realPeer(addr); ok {
				attrs = append(slices.Clip(attrs), slog.String("peer", real.String()))
			}
		}
	}
	c.inner = h.inner.WithAttrs(attrs)
	return &c
}

func (h *logHook) WithGroup(name string) slog.Handler {
	c := *h
	c.inner = h.inner.WithGroup(name)
	return &c
}

// noteGoBGPLog records what the log hook found. It runs on GoBGP's
// goroutines, possibly inside a call that holds opMu, so it takes mu only.
func (s *Speaker) noteGoBGPLog(addr netip.Addr, ev gobgpLogEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.peerByGoBGP(addr)
	if r == nil {
		return
	}
	switch ev.kind {
	case logConnectFailed:
		if r.state != StateEstablished && r.forcedDown == "" {
			s.peerError(r, connectErrorText(ev.err, r.cfg, s.opts.localAddr(r.cfg.Address)))
		}
	case logSentNotification:
		// A Cease from us is our own doing (PeerDown, SetPeers, Stop,
		// collision resolution), not a failure; an expired hold timer is
		// reported by the state event that follows.
		if ev.code == codeCease || ev.code == codeHoldTimerExpired {
			return
		}
		text := "sent NOTIFICATION: " + notificationText(ev.code, ev.subcode)
		switch {
		case ev.code == 2 && ev.subcode == 2:
			text += fmt.Sprintf(" (the peer's OPEN does not carry the configured AS %d)", r.cfg.ASN)
		case ev.code == 5 && ev.subcode == 1:
			// The peer answered our OPEN with something else than an
			// OPEN: nearly always a NOTIFICATION rejecting it, which
			// GoBGP does not report. A probe can tell which.
			r.probeWanted = true
			if r.rejection != "" {
				text = "peer sent NOTIFICATION: " + r.rejection
			} else {
				text = "the peer rejected our OPEN (most likely with a NOTIFICATION: check ASNs on both sides)"
			}
		}
		s.peerError(r, text)
	case logReceivedNotification:
		r.notifRecv = notificationText(ev.code, ev.subcode)
	}
}

// connectErrorText explains a failed TCP connect to a peer.
func connectErrorText(err string, p Peer, nextHop netip.Addr) string {
	target := fmt.Sprintf("%s port %d", p.Address, p.Port)
	switch {
	case strings.Contains(err, "connection refused"):
		return fmt.Sprintf("connect to %s: connection refused (no BGP speaker listens there, or it does not accept %s)", target, nextHop)
	case strings.Contains(err, "i/o timeout"), strings.Contains(err, "deadline exceeded"):
		if p.Password != "" {
			return fmt.Sprintf("connect to %s: no answer (TCP MD5 password mismatch, or no route to the peer)", target)
		}
		return fmt.Sprintf("connect to %s: no answer (peer unreachable or filtered, or it expects a TCP MD5 password)", target)
	case strings.Contains(err, "no route to host"):
		// Also what an ICMP time exceeded gives: an eBGP peer further
		// away than the TTL reaches.
		return fmt.Sprintf("connect to %s: no route to host (peer down or address wrong; or, on eBGP, more hops away than multihop allows)", target)
	case strings.Contains(err, "network is unreachable"):
		return fmt.Sprintf("connect to %s: network unreachable (no route to the peer)", target)
	case strings.Contains(err, "cannot assign requested address"):
		return fmt.Sprintf("connect to %s: cannot use local address %s (not configured on this node)", target, nextHop)
	}
	return fmt.Sprintf("connect to %s: %s", target, err)
}

const (
	codeHoldTimerExpired = 4
	codeCease            = 6
)

// notificationNames are RFC 4271's NOTIFICATION error codes and their
// subcodes (with RFC 4486, 5492, 7313, 8538, 9234 additions).
var notificationNames = map[uint8]struct {
	name string
	sub  map[uint8]string
}{
	1: {"message header error", map[uint8]string{1: "connection not synchronized", 2: "bad message length", 3: "bad message type"}},
	2: {"OPEN message error", map[uint8]string{1: "unsupported version number", 2: "bad peer AS", 3: "bad BGP identifier",
		4: "unsupported optional parameter", 6: "unacceptable hold time", 7: "unsupported capability", 11: "role mismatch"}},
	3: {"UPDATE message error", map[uint8]string{1: "malformed attribute list", 2: "unrecognized well-known attribute",
		3: "missing well-known attribute", 4: "attribute flags error", 5: "attribute length error", 6: "invalid ORIGIN attribute",
		8: "invalid NEXT_HOP attribute", 9: "optional attribute error", 10: "invalid network field", 11: "malformed AS_PATH"}},
	codeHoldTimerExpired: {"hold timer expired", nil},
	5: {"finite state machine error", map[uint8]string{1: "unexpected message in OpenSent", 2: "unexpected message in OpenConfirm",
		3: "unexpected message in Established"}},
	codeCease: {"Cease", map[uint8]string{1: "maximum number of prefixes reached", 2: "administrative shutdown", 3: "peer de-configured",
		4: "administrative reset", 5: "connection rejected", 6: "other configuration change", 7: "connection collision resolution",
		8: "out of resources", 9: "hard reset", 10: "BFD down"}},
	7: {"ROUTE-REFRESH message error", map[uint8]string{1: "invalid message length"}},
}

// notificationText names a NOTIFICATION, e.g. "OPEN message error / bad
// peer AS".
func notificationText(code, subcode uint8) string {
	n, ok := notificationNames[code]
	if !ok {
		return fmt.Sprintf("error code %d / subcode %d", code, subcode)
	}
	if subcode == 0 {
		return n.name
	}
	if sub, ok := n.sub[subcode]; ok {
		return n.name + " / " + sub
	}
	return fmt.Sprintf("%s / subcode %d", n.name, subcode)
}
