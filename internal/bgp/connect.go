package bgp

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"

	gobgp "github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"golang.org/x/sys/unix"
)

// The speaker dials its peers itself and relays each connection into
// GoBGP's listener from a loopback stand-in address: GoBGP waits 1.5-2 s
// before its first outgoing attempt, and no setting shortens that, but it
// takes an incoming connection at once. GoBGP still runs the whole
// session; docs/decisions/0004-bgp-relay.md has the details.
const (
	// relayHost is where GoBGP listens for the relay when it has no
	// other listener (Options.ListenPort -1), on a port picked at Start.
	relayHost = "127.0.0.1"
	// dialTimeout bounds one connection attempt to a peer, as GoBGP's
	// own (connect-retry less a second).
	dialTimeout = connectRetry - time.Second
	// relayLinger is how long a relay that one side closed waits for
	// the other side to close too before it closes both.
	relayLinger = 2 * time.Second
)

// standInPrefix holds the loopback addresses that stand in for relayed
// peers towards GoBGP: 127.100.0.1, 127.100.0.2, ... in the order the
// speaker first sees the peers.
var standInPrefix = netip.MustParsePrefix("127.100.0.0/16")

// relayConfig is how the relays of a running speaker reach GoBGP.
type relayConfig struct {
	target netip.AddrPort // GoBGP's listener
	key    string         // TCP MD5 key of the loopback leg
}

func newRelayKey() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("relay key: %w", err)
	}
	return hex.EncodeToString(b), nil // 48 bytes, within TCP MD5's 80
}

// freeLoopbackPort asks the kernel for a TCP port that is free on
// relayHost. Another process could take it before GoBGP binds it; Start
// then tries again.
func freeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp4", net.JoinHostPort(relayHost, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// allocStandIn returns the next unused stand-in address. Called with mu
// held.
func (s *Speaker) allocStandIn() netip.Addr {
	for {
		s.standIns++
		b := standInPrefix.Addr().As4()
		b[2], b[3] = byte(s.standIns>>8), byte(s.standIns)
		a := netip.AddrFrom4(b)
		if b[3] == 0 || b[3] == 255 || !standInPrefix.Contains(a) {
			continue
		}
		return a
	}
}

// connector dials one relayed peer whenever GoBGP's session to it is
// Active, and relays the session.
type connector struct {
	peer    Peer
	standIn netip.Addr
	relay   relayConfig
	kickCh  chan struct{} // GoBGP's session became Active
	cancel  context.CancelFunc
}

// kick wakes the connector; it never blocks.
func (c *connector) kick() {
	select {
	case c.kickCh <- struct{}{}:
	default:
	}
}

// newConnector prepares the connector of peer record r before GoBGP
// learns the peer, so that the first Active event finds it. Called with
// mu held.
func (s *Speaker) newConnector(r *peerRecord, p Peer) *connector {
	ctx, cancel := context.WithCancel(s.relayCtx)
	c := &connector{peer: p, standIn: r.standIn, relay: *s.relay, kickCh: make(chan struct{}, 1), cancel: cancel}
	r.conn = c
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.runConnector(ctx, r, c)
	}()
	return c
}

// stopConnector ends r's connector, if any. A relayed session it carries
// ends when GoBGP closes its side or after relayLinger. Called with mu
// held.
func (s *Speaker) stopConnector(r *peerRecord) {
	if r.conn != nil {
		r.conn.cancel()
		r.conn = nil
	}
}

// wantsDial reports whether c should connect now: it is still r's
// connector, GoBGP's session is Active and no one holds it down.
func (s *Speaker) wantsDial(r *peerRecord, c *connector) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return r.conn == c && r.state == StateActive && r.forcedDown == ""
}

func (s *Speaker) runConnector(ctx context.Context, r *peerRecord, c *connector) {
	var retry <-chan time.Time
	for {
		if s.wantsDial(r, c) {
			if err := s.connectOnce(ctx, r, c); err != nil && ctx.Err() == nil {
				// Try again while GoBGP still waits, about every
				// connectRetry as GoBGP would (with jitter, so that
				// many nodes do not retry in step).
				retry = time.After(time.Duration(float64(connectRetry) * (0.75 + 0.25*mrand.Float64())))
			} else {
				retry = nil
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-c.kickCh:
		case <-retry:
		}
	}
}

// connectOnce dials the peer, hands the connection to GoBGP and relays
// it until the session ends. It returns an error when no session could
// be handed over.
func (s *Speaker) connectOnce(ctx context.Context, r *peerRecord, c *connector) error {
	p := c.peer
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	peerConn, err := dialPeer(dctx, s.opts.localAddr(p.Address), p, s.opts.ASN)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			s.log.Debug("bgp connect failed", "peer", p.Address, "err", err)
			s.mu.Lock()
			if r.conn == c && r.state != StateEstablished && r.forcedDown == "" {
				s.peerError(r, connectErrorText(err.Error(), p, s.opts.localAddr(p.Address)))
			}
			s.mu.Unlock()
		}
		return err
	}
	dctx, cancel = context.WithTimeout(ctx, dialTimeout)
	local, err := dialRelay(dctx, c.standIn, c.relay)
	cancel()
	if err != nil {
		peerConn.Close()
		if ctx.Err() == nil {
			s.log.Warn("bgp: cannot hand the session to GoBGP", "peer", p.Address, "listener", c.relay.target, "err", err,
				"fix", fmt.Sprintf("check that the loopback interface is up, that no firewall rule drops TCP from %s to the listener, and that the kernel has TCP MD5 (CONFIG_TCP_MD5SIG); "+
					"the speaker dials the peer again every %s or so while the session waits", standInPrefix, connectRetry))
		}
		return err
	}
	s.log.Debug("bgp connected; relaying", "peer", p.Address, "standIn", c.standIn)
	relaySession(ctx, peerConn, local, func(code, subcode uint8) { s.notePeerRejection(r, c, code, subcode) })
	return nil
}

// notePeerRejection records the NOTIFICATION a relayed peer answered the
// OPEN with. GoBGP reads it too but reports only "unexpected message".
func (s *Speaker) notePeerRejection(r *peerRecord, c *connector, code, subcode uint8) {
	text := notificationText(code, subcode)
	if code == 2 && subcode == 2 {
		text += fmt.Sprintf(" (our OPEN carries AS %d)", s.opts.ASN)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.conn != c {
		return
	}
	r.rejection = text
	s.peerError(r, "peer sent NOTIFICATION: "+text)
}

// dialPeer opens a TCP connection to peer p as GoBGP would: from local,
// with p's TCP MD5 key, TTL (hop limit) 1 on eBGP (p.Multihop if set),
// no TCP keepalives (BGP has its own).
func dialPeer(ctx context.Context, local netip.Addr, p Peer, localASN uint32) (*net.TCPConn, error) {
	ttl := 0
	if p.ASN != localASN {
		ttl = 1
		if p.Multihop > 0 {
			ttl = int(p.Multihop)
		}
	}
	return dialTCP(ctx, local, netip.AddrPortFrom(p.Address, p.Port), p.Password, ttl)
}

// dialRelay connects to GoBGP's listener from standIn.
func dialRelay(ctx context.Context, standIn netip.Addr, rc relayConfig) (*net.TCPConn, error) {
	return dialTCP(ctx, standIn, rc.target, rc.key, 0)
}

func dialTCP(ctx context.Context, local netip.Addr, remote netip.AddrPort, md5Key string, ttl int) (*net.TCPConn, error) {
	d := net.Dialer{
		LocalAddr: &net.TCPAddr{IP: local.AsSlice()},
		KeepAlive: -1,
		Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				if md5Key != "" {
					serr = unix.SetsockoptTCPMD5Sig(int(fd), unix.IPPROTO_TCP, unix.TCP_MD5SIG, md5Sig(remote.Addr(), md5Key))
				}
				if serr == nil && ttl > 0 {
					serr = setTTL(int(fd), remote.Addr(), ttl)
				}
			})
			if err != nil {
				return err
			}
			return serr
		},
	}
	network := "tcp4"
	if remote.Addr().Is6() {
		network = "tcp6"
	}
	conn, err := d.DialContext(ctx, network, net.JoinHostPort(remote.Addr().String(), strconv.Itoa(int(remote.Port()))))
	if err != nil {
		return nil, err
	}
	return conn.(*net.TCPConn), nil
}

// relaySession copies bytes between the peer and GoBGP until both sides
// have closed, or one side closed and the other did not follow within
// relayLinger, or ctx ends (then after at most relayLinger). Each side's
// close is passed on as a half-close, so that a NOTIFICATION written
// just before it still arrives. onNotify hears of a NOTIFICATION the
// peer sends before its first KEEPALIVE, that is, while the session is
// being set up.
func relaySession(ctx context.Context, peer, local *net.TCPConn, onNotify func(code, subcode uint8)) {
	defer peer.Close()
	defer local.Close()
	done := make(chan struct{}, 2)
	go func() {
		_ = copySniffed(local, peer, onNotify)
		_ = local.CloseWrite()
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(peer, local)
		_ = peer.CloseWrite()
		done <- struct{}{}
	}()
	pending := 2
	select {
	case <-done:
		pending--
	case <-ctx.Done():
	}
	linger := time.NewTimer(relayLinger)
	defer linger.Stop()
	for pending > 0 {
		select {
		case <-done:
			pending--
			continue
		case <-linger.C:
		}
		// Unblock whatever still copies; the deferred Closes follow.
		now := time.Now()
		_ = peer.SetDeadline(now)
		_ = local.SetDeadline(now)
		linger.Reset(time.Hour)
	}
}

// copySniffed copies src to dst, message by message until the first
// KEEPALIVE or UPDATE (reporting any NOTIFICATION on the way), then as
// a plain byte stream.
func copySniffed(dst io.Writer, src io.Reader, onNotify func(code, subcode uint8)) error {
	for sniffing := true; sniffing; {
		msg, whole, err := readRawMessage(src)
		if len(msg) > 0 {
			if whole && msg[18] == gobgp.BGP_MSG_NOTIFICATION && len(msg) >= gobgp.BGP_HEADER_LENGTH+2 {
				onNotify(msg[19], msg[20])
			}
			if _, werr := dst.Write(msg); werr != nil {
				return werr
			}
		}
		if err != nil {
			return err
		}
		t := msg[18]
		sniffing = whole && t != gobgp.BGP_MSG_KEEPALIVE && t != gobgp.BGP_MSG_UPDATE
	}
	_, err := io.Copy(dst, src)
	return err
}

// readRawMessage reads one BGP message, header included, without parsing
// its body. whole is false when the header's length makes no sense: msg
// is then the header alone, and what follows is no longer split into
// messages (GoBGP judges, and answers, the malformed stream).
func readRawMessage(r io.Reader) (msg []byte, whole bool, err error) {
	hdr := make([]byte, gobgp.BGP_HEADER_LENGTH)
	if n, err := io.ReadFull(r, hdr); err != nil {
		return hdr[:n], false, err
	}
	n := int(binary.BigEndian.Uint16(hdr[16:18]))
	if n < gobgp.BGP_HEADER_LENGTH || n > gobgp.BGP_MAX_MESSAGE_LENGTH {
		return hdr, false, nil
	}
	buf := make([]byte, n)
	copy(buf, hdr)
	if m, err := io.ReadFull(r, buf[gobgp.BGP_HEADER_LENGTH:]); err != nil {
		return buf[:gobgp.BGP_HEADER_LENGTH+m], false, err
	}
	return buf, true, nil
}

// setTTL sets the TTL (IPv4) or unicast hop limit (IPv6) of a socket that
// talks to remote.
func setTTL(fd int, remote netip.Addr, ttl int) error {
	if remote.Is4() {
		return unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_TTL, ttl)
	}
	return unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS, ttl)
}
