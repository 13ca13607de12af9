package l2

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// garpSender sends gratuitous ARP from one interface: an AF_PACKET socket
// that only sends (protocol 0 receives nothing).
type garpSender struct {
	fd      int
	ifindex int
	mac     net.HardwareAddr
}

func newGARPSender(ifindex int, mac net.HardwareAddr) (*garpSender, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("gratuitous ARP: open a packet socket: %w", err)
	}
	return &garpSender{fd: fd, ifindex: ifindex, mac: mac}, nil
}

// send broadcasts a gratuitous ARP request for vip at the sender's MAC:
// sender and target address both vip. Linux hosts update an entry they
// hold for vip on such a request whatever its age (arp_process's is_garp),
// as do most others.
func (g *garpSender) send(vip netip.Addr) error {
	frame := GratuitousARP(g.mac, vip)
	sa := &unix.SockaddrLinklayer{Ifindex: g.ifindex, Protocol: htons(unix.ETH_P_ARP), Halen: 6}
	copy(sa.Addr[:], broadcast)
	if err := unix.Sendto(g.fd, frame, 0, sa); err != nil {
		return fmt.Errorf("gratuitous ARP for %s: %w", vip, err)
	}
	return nil
}

func (g *garpSender) close() { unix.Close(g.fd) }

var broadcast = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// GratuitousARP is the frame that tells a segment vip is at mac.
func GratuitousARP(mac net.HardwareAddr, vip netip.Addr) []byte {
	a := vip.As4()
	b := make([]byte, 0, 42)
	b = append(append(b, broadcast...), mac...)
	b = binary.BigEndian.AppendUint16(b, unix.ETH_P_ARP)
	b = append(b, 0, 1, 0x08, 0x00, 6, 4, 0, 1) // Ethernet, IPv4, request
	b = append(append(b, mac...), a[:]...)
	b = append(append(b, make([]byte, 6)...), a[:]...)
	return b
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
