package bgp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"

	gobgp "github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"golang.org/x/sys/unix"
)

// When a peer rejects the OPEN of a session GoBGP initiated, GoBGP v4
// reads the peer's NOTIFICATION and throws it away: its event only says
// "invalid message". For the sessions the speaker relays, the relay sees
// the NOTIFICATION go by (connect.go); where GoBGP connects itself (no
// relay: the loopback interface is down), the probe finds out what the
// peer objects to. It
// opens one extra connection, sends the OPEN GoBGP sends, and reads the
// answer. The speaker runs it only after such a failure, right after its
// session went back to Active (the moment the peer accepts connections
// again and before GoBGP's own next attempt, which waits at least 1.5s),
// and at most once per probeInterval per peer, or probeRetry after a
// probe that could not connect or read.
const (
	probeInterval = 30 * time.Second
	probeRetry    = 10 * time.Second
	probeTimeout  = 3 * time.Second
)

// probeOpen returns the NOTIFICATION the peer answers our OPEN with, in
// words, or "" when the peer accepts the OPEN. A peer that closes the
// connection without a word is an error, like one that cannot be reached.
func probeOpen(ctx context.Context, local netip.Addr, p Peer, localASN uint32, routerID netip.Addr, ipv4, ipv6 bool) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	ttl := 0
	if p.ASN != localASN {
		ttl = 1
		if p.Multihop > 0 {
			ttl = int(p.Multihop)
		}
	}
	d := net.Dialer{
		LocalAddr: &net.TCPAddr{IP: local.AsSlice()},
		Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				if p.Password != "" {
					serr = unix.SetsockoptTCPMD5Sig(int(fd), unix.IPPROTO_TCP, unix.TCP_MD5SIG, md5Sig(p.Address, p.Password))
				}
				if serr == nil && ttl > 0 {
					serr = setTTL(int(fd), p.Address, ttl)
				}
			})
			if err != nil {
				return err
			}
			return serr
		},
	}
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(p.Address.String(), strconv.Itoa(int(p.Port))))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)

	open, err := openMessage(localASN, p.HoldTime, routerID, ipv4, ipv6)
	if err != nil {
		return "", err
	}
	if _, err := conn.Write(open); err != nil {
		return "", err
	}
	for range 3 { // OPEN, then KEEPALIVE or NOTIFICATION
		m, err := readMessage(conn)
		if errors.Is(err, io.EOF) {
			return "", errors.New("the peer closed the connection without a NOTIFICATION")
		}
		if err != nil {
			return "", err
		}
		switch body := m.Body.(type) {
		case *gobgp.BGPNotification:
			text := notificationText(body.ErrorCode, body.ErrorSubcode)
			if body.ErrorCode == 2 && body.ErrorSubcode == 2 {
				text += fmt.Sprintf(" (our OPEN carries AS %d)", localASN)
			}
			return text, nil
		case *gobgp.BGPKeepAlive:
			// The peer accepts this OPEN: close politely, the failure
			// was something else.
			b, _ := gobgp.NewBGPNotificationMessage(codeCease, 7, nil).Serialize() // connection collision resolution
			_, _ = conn.Write(b)
			return "", nil
		}
	}
	return "", nil
}

// openMessage is the OPEN GoBGP sends for a session with IPv4 unicast
// and/or IPv6 unicast (Speaker.afiSafis).
func openMessage(asn uint32, hold time.Duration, routerID netip.Addr, ipv4, ipv6 bool) ([]byte, error) {
	as2 := uint16(asTrans)
	if asn <= 0xFFFF {
		as2 = uint16(asn)
	}
	var caps []gobgp.ParameterCapabilityInterface
	if ipv4 {
		caps = append(caps, gobgp.NewCapMultiProtocol(gobgp.RF_IPv4_UC))
	}
	if ipv6 {
		caps = append(caps, gobgp.NewCapMultiProtocol(gobgp.RF_IPv6_UC))
	}
	caps = append(caps, gobgp.NewCapRouteRefresh(), gobgp.NewCapFourOctetASNumber(asn))
	m, err := gobgp.NewBGPOpenMessage(as2, uint16(hold/time.Second), routerID,
		[]gobgp.OptionParameterInterface{gobgp.NewOptionParameterCapability(caps)})
	if err != nil {
		return nil, err
	}
	return m.Serialize()
}

func readMessage(r io.Reader) (*gobgp.BGPMessage, error) {
	hdr := make([]byte, gobgp.BGP_HEADER_LENGTH)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(hdr[16:18]))
	if n < gobgp.BGP_HEADER_LENGTH || n > gobgp.BGP_MAX_MESSAGE_LENGTH {
		return nil, fmt.Errorf("bad BGP message length %d", n)
	}
	buf := make([]byte, n)
	copy(buf, hdr)
	if _, err := io.ReadFull(r, buf[gobgp.BGP_HEADER_LENGTH:]); err != nil {
		return nil, err
	}
	return gobgp.ParseBGPMessage(buf)
}

// md5Sig is the TCP_MD5SIG option for peer: its address as a sockaddr_in
// or sockaddr_in6 in a sockaddr_storage, and the key.
func md5Sig(peer netip.Addr, key string) *unix.TCPMD5Sig {
	s := &unix.TCPMD5Sig{Keylen: uint16(len(key))}
	if peer.Is4() {
		s.Addr.Family = unix.AF_INET
		a := peer.As4()
		copy(s.Addr.Data[2:6], a[:]) // sockaddr_in: port, then address
	} else {
		s.Addr.Family = unix.AF_INET6
		a := peer.As16()
		copy(s.Addr.Data[6:22], a[:]) // sockaddr_in6: port, flow info, then address
	}
	copy(s.Key[:], key)
	return s
}
