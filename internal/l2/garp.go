package l2

import (
	"encoding/binary"
	"errors"
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
	// joined are the multicast groups the socket holds the interface in.
	joined map[[6]byte]bool
}

func newGARPSender(ifindex int, mac net.HardwareAddr) (*garpSender, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("gratuitous ARP: open a packet socket: %w", err)
	}
	return &garpSender{fd: fd, ifindex: ifindex, mac: mac, joined: map[[6]byte]bool{}}, nil
}

// send announces vip at the sender's MAC: for an IPv4 VIP a gratuitous
// ARP request, sender and target address both vip, broadcast (Linux
// hosts update an entry they hold for vip on one whatever its age:
// arp_process's is_garp); for an IPv6 VIP an unsolicited neighbour
// advertisement with the override flag to all nodes (RFC 4861 7.2.6).
func (g *garpSender) send(vip netip.Addr) error {
	frame, proto, to, what := announcement(g.mac, vip)
	sa := &unix.SockaddrLinklayer{Ifindex: g.ifindex, Protocol: htons(proto), Halen: 6}
	copy(sa.Addr[:], to)
	if err := unix.Sendto(g.fd, frame, 0, sa); err != nil {
		return fmt.Errorf("%s for %s: %w", what, vip, err)
	}
	return nil
}

// announcement is the frame that announces vip at mac, with its
// EtherType, destination and name for errors.
func announcement(mac net.HardwareAddr, vip netip.Addr) (frame []byte, proto uint16, to net.HardwareAddr, what string) {
	if vip.Is4() {
		return GratuitousARP(mac, vip), unix.ETH_P_ARP, broadcast, "gratuitous ARP"
	}
	return UnsolicitedNA(mac, vip), unix.ETH_P_IPV6, allNodesMAC, "unsolicited neighbour advertisement"
}

func (g *garpSender) close() { unix.Close(g.fd) }

// join holds the interface in the solicited-node group of each IPv6 VIP
// of vips, and in no other group of its own. A NIC filters multicast by
// destination MAC before XDP sees a frame, and the kernel joins the
// groups of the addresses it holds only, which no VIP is: without this a
// solicitation for a VIP would never reach the program. Every node joins
// for every IPv6 VIP, owned or not, so that a VIP moving to it waits on
// no join. The memberships are the socket's: they end with it.
func (g *garpSender) join(vips []netip.Addr) error {
	want := map[[6]byte]bool{}
	for _, v := range vips {
		if v.Is6() && !v.Is4In6() {
			want[[6]byte(SolicitedNodeMAC(v))] = true
		}
	}
	set := func(mac [6]byte, opt int) error {
		mr := unix.PacketMreq{Ifindex: int32(g.ifindex), Type: unix.PACKET_MR_MULTICAST, Alen: 6}
		copy(mr.Address[:], mac[:])
		return unix.SetsockoptPacketMreq(g.fd, unix.SOL_PACKET, opt, &mr)
	}
	var errs []error
	for mac := range want {
		if g.joined[mac] {
			continue
		}
		if err := set(mac, unix.PACKET_ADD_MEMBERSHIP); err != nil {
			errs = append(errs, fmt.Errorf("join the multicast group %s: %w", net.HardwareAddr(mac[:]), err))
			continue
		}
		g.joined[mac] = true
	}
	for mac := range g.joined {
		if want[mac] {
			continue
		}
		if err := set(mac, unix.PACKET_DROP_MEMBERSHIP); err != nil {
			errs = append(errs, fmt.Errorf("leave the multicast group %s: %w", net.HardwareAddr(mac[:]), err))
			continue
		}
		delete(g.joined, mac)
	}
	return errors.Join(errs...)
}

// SolicitedNodeMAC is the Ethernet group of IPv6 address a's
// solicited-node address ff02::1:ffXX:XXXX (RFC 4291 2.7.1, RFC 2464 7),
// where neighbour solicitations for a are sent.
func SolicitedNodeMAC(a netip.Addr) net.HardwareAddr {
	b := a.As16()
	return net.HardwareAddr{0x33, 0x33, 0xff, b[13], b[14], b[15]}
}

var (
	broadcast   = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	allNodesMAC = net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1} // ff02::1
	allNodes    = netip.MustParseAddr("ff02::1")
)

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

// UnsolicitedNA is the frame that tells a segment IPv6 vip is at mac: a
// neighbour advertisement from vip to all nodes, override set, with the
// target link-layer address option.
func UnsolicitedNA(mac net.HardwareAddr, vip netip.Addr) []byte {
	t := vip.As16()
	icmp := []byte{136, 0, 0, 0, 0x20, 0, 0, 0} // override
	icmp = append(icmp, t[:]...)
	icmp = append(append(icmp, 2, 1), mac...)
	ip := make([]byte, 40, 40+len(icmp))
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], uint16(len(icmp)))
	ip[6], ip[7] = 58, 255
	d := allNodes.As16()
	copy(ip[8:], t[:])
	copy(ip[24:], d[:])
	binary.BigEndian.PutUint16(icmp[2:], icmp6Checksum(ip[8:24], ip[24:40], icmp))
	b := append(append(append([]byte{}, allNodesMAC...), mac...), 0x86, 0xdd)
	return append(append(b, ip...), icmp...)
}

// icmp6Checksum is the ICMPv6 checksum of msg (its checksum field zero)
// from src to dst (RFC 8200 8.1).
func icmp6Checksum(src, dst, msg []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	add(src)
	add(dst)
	sum += uint32(len(msg)) + 58
	add(msg)
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
