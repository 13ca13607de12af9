package backendhost

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/decap"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/testbed/netns"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// Test packets of IPv6 and the tunnels that carry them to a backend
// host, built from scratch with every checksum computed, as an xlb node
// would send them.

// pseudoSum6 is the sum of the IPv6 pseudo-header of an upper-layer
// packet.
func pseudoSum6(src, dst netip.Addr, proto uint8, l4len int) uint32 {
	s, d := src.As16(), dst.As16()
	ph := append(append([]byte{}, s[:]...), d[:]...)
	ph = binary.BigEndian.AppendUint32(ph, uint32(l4len))
	ph = append(ph, 0, 0, 0, proto)
	return sum16(ph, 0)
}

// ipv6Header is a fixed IPv6 header (hop limit 64) before payloadLen
// bytes of next header nh.
func ipv6Header(src, dst netip.Addr, nh uint8, payloadLen int) []byte {
	h := make([]byte, 40)
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(payloadLen))
	h[6] = nh
	h[7] = 64
	s, d := src.As16(), dst.As16()
	copy(h[8:], s[:])
	copy(h[24:], d[:])
	return h
}

// ip6Seg is a TCP segment or a UDP datagram over IPv6.
type ip6Seg struct {
	src, dst     netip.Addr
	sport, dport uint16
	proto        uint8
	seq, ack     uint32
	flags        uint8
	payload      []byte
}

func (p ip6Seg) bytes() []byte {
	var l4 []byte
	off := 6
	if p.proto == 6 {
		l4 = make([]byte, 20+len(p.payload))
		binary.BigEndian.PutUint32(l4[4:], p.seq)
		binary.BigEndian.PutUint32(l4[8:], p.ack)
		l4[12] = 5 << 4
		l4[13] = p.flags
		binary.BigEndian.PutUint16(l4[14:], 65535)
		copy(l4[20:], p.payload)
		off = 16
	} else {
		l4 = make([]byte, 8+len(p.payload))
		binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
		copy(l4[8:], p.payload)
	}
	binary.BigEndian.PutUint16(l4[0:], p.sport)
	binary.BigEndian.PutUint16(l4[2:], p.dport)
	c := ^uint16(sum16(l4, pseudoSum6(p.src, p.dst, p.proto, len(l4))))
	if c == 0 && p.proto == 17 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(l4[off:], c)
	return append(ipv6Header(p.src, p.dst, p.proto, len(l4)), l4...)
}

// encap wraps the datagram inner (either family) for the outer
// destination dst (either family) from src: IP-in-IP without gueHdr,
// GUE (UDP to 6080, with gueHdr, empty for variant 1) with it. dstOpts
// puts a destination options header of 8 bytes before an IPv6 outer
// header's payload, as a tunnel with an encapsulation limit has.
func encap(inner []byte, src, dst netip.Addr, gueHdr []byte, dstOpts bool) []byte {
	proto := uint8(4)
	if inner[0]>>4 == 6 {
		proto = 41
	}
	payload := inner
	if gueHdr != nil {
		udp := make([]byte, 8, 8+len(gueHdr)+len(inner))
		binary.BigEndian.PutUint16(udp[0:], 0xc123)
		binary.BigEndian.PutUint16(udp[2:], wire.GUEPort)
		binary.BigEndian.PutUint16(udp[4:], uint16(8+len(gueHdr)+len(inner)))
		udp = append(append(udp, gueHdr...), inner...)
		// IPv6 wants the UDP checksum; an IPv4 outer header goes
		// without one, as xlb sends it.
		if dst.Is6() {
			c := ^uint16(sum16(udp, pseudoSum6(src, dst, 17, len(udp))))
			binary.BigEndian.PutUint16(udp[6:], c)
		}
		payload, proto = udp, 17
	}
	if dst.Is4() {
		return append(ipv4Header(src, dst, proto, 0x4000, len(payload)), payload...)
	}
	if dstOpts {
		// Tunnel encapsulation limit 4 (RFC 2473), then PadN.
		opts := []byte{proto, 0, 4, 1, 4, 1, 1, 0}
		payload = append(opts, payload...)
		proto = 60
	}
	return append(ipv6Header(src, dst, proto, len(payload)), payload...)
}

// v6Host is a backend host in miniature, in two network namespaces:
//
//	node ── eth1 ═ eth0 ── backend (xlb backend on eth0, VIPs on lo)
//	        10.0.3.1        10.0.3.2
//	        fd00:3::1       fd00:3::2
//
// The node stands for an xlb node and the router behind it: the test
// writes tunnelled frames onto eth1 and reads what the backend sends
// back (its direct replies to the client, whose routes lead to the node).
type v6Host struct {
	node, backend string
	pin           string
	beMAC         net.HardwareAddr
}

var (
	v6VIP      = netip.MustParseAddr("fd00:99::1")
	v6Client   = netip.MustParseAddr("fd00:2::2")
	v6Node     = netip.MustParseAddr("fd00:3::1")
	v6Backend  = netip.MustParseAddr("fd00:3::2")
	v4Node     = netip.MustParseAddr("10.0.3.1")
	v4Backend  = netip.MustParseAddr("10.0.3.2")
	v4ClientBH = netip.MustParseAddr("10.0.2.2")
)

func newV6Host(t *testing.T) *v6Host {
	t.Helper()
	pid := os.Getpid()
	h := &v6Host{
		node: fmt.Sprintf("xlbtest-v6n-%d", pid), backend: fmt.Sprintf("xlbtest-v6b-%d", pid),
		pin: filepath.Join(bpfobj.BPFFSRoot, fmt.Sprintf("xlbtest-v6-%d", pid)),
	}
	for _, ns := range []string{h.node, h.backend} {
		ipcmd(t, "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		ipcmd(t, "-n", ns, "link", "set", "lo", "up")
	}
	t.Cleanup(func() {
		err := netns.Do(h.backend, func() error {
			_, err := Cleanup(h.pin)
			return err
		})
		if err != nil {
			t.Errorf("cleanup: %v", err)
		}
		os.RemoveAll(h.pin)
	})
	ipcmd(t, "-n", h.node, "link", "add", "eth1", "type", "veth", "peer", "name", "eth0", "netns", h.backend)
	ipcmd(t, "-n", h.node, "addr", "add", "10.0.3.1/24", "dev", "eth1")
	ipcmd(t, "-n", h.node, "addr", "add", "fd00:3::1/64", "dev", "eth1", "nodad")
	ipcmd(t, "-n", h.node, "link", "set", "eth1", "up")
	ipcmd(t, "-n", h.backend, "addr", "add", "10.0.3.2/24", "dev", "eth0")
	ipcmd(t, "-n", h.backend, "addr", "add", "fd00:3::2/64", "dev", "eth0", "nodad")
	ipcmd(t, "-n", h.backend, "link", "set", "eth0", "up")
	ipcmd(t, "-n", h.backend, "route", "add", "default", "via", "10.0.3.1")
	ipcmd(t, "-n", h.backend, "-6", "route", "add", "default", "via", "fd00:3::1")
	h.beMAC, _ = net.ParseMAC(macIn(t, h.backend, "eth0"))
	return h
}

// sender writes frames onto the node's eth1 and reads those that arrive
// there, through a packet socket.
type sender struct {
	fd      int
	ifindex int
}

func (h *v6Host) sender(t *testing.T) *sender {
	t.Helper()
	s := &sender{fd: -1}
	err := netns.Do(h.node, func() error {
		ifc, err := net.InterfaceByName("eth1")
		if err != nil {
			return err
		}
		s.ifindex = ifc.Index
		proto := int(htons(unix.ETH_P_ALL))
		if s.fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, proto); err != nil {
			return err
		}
		tv := unix.NsecToTimeval((200 * time.Millisecond).Nanoseconds())
		if err := unix.SetsockoptTimeval(s.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		return unix.Bind(s.fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: s.ifindex})
	})
	if s.fd >= 0 {
		t.Cleanup(func() { unix.Close(s.fd) })
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// send frames datagram (either family) to the backend's MAC.
func (s *sender) send(t *testing.T, to net.HardwareAddr, datagram []byte) {
	t.Helper()
	f := make([]byte, 14, 14+len(datagram))
	copy(f, to)
	copy(f[6:], testSrcMAC)
	et := uint16(0x0800)
	if datagram[0]>>4 == 6 {
		et = 0x86dd
	}
	binary.BigEndian.PutUint16(f[12:], et)
	f = append(f, datagram...)
	if err := unix.Sendto(s.fd, f, 0, &unix.SockaddrLinklayer{Ifindex: s.ifindex, Halen: 6, Addr: [8]byte(append(append([]byte{}, to...), 0, 0))}); err != nil {
		t.Fatalf("send a frame on eth1: %v", err)
	}
}

// await returns the first IPv6 datagram that arrives on eth1 for which
// match holds, within 5 seconds.
func (s *sender) await(t *testing.T, what string, match func(d []byte) bool) []byte {
	t.Helper()
	buf := make([]byte, 2048)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		n, from, err := unix.Recvfrom(s.fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatalf("read eth1: %v", err)
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		if n < 14+40 || binary.BigEndian.Uint16(buf[12:]) != 0x86dd {
			continue
		}
		if d := buf[14:n]; match(d) {
			return append([]byte{}, d...)
		}
	}
	t.Fatalf("no %s arrived within 5 s", what)
	return nil
}

// TestIPv6DecapToSockets: a backend host set up with an IPv4 and an
// IPv6 VIP takes tunnels of every pair of families, IP-in-IP and GUE, from
// an xlb node: a UDP socket on each VIP receives every datagram with the
// client's address and port, and a TCP listener on the IPv6 VIP
// completes a handshake whose SYN came over IPv6-in-IPv6 and whose ACK
// and data came over GUE/IPv4, answering the client directly. The
// kernel checks the inner packets' checksums, so each arrives only if
// the program left it whole; the backend's own neighbour discovery and
// ARP pass through the program along the way.
func TestIPv6DecapToSockets(t *testing.T) {
	testenv.RequireRoot(t, "backend decapsulation test (BPF, network namespaces)")
	h := newV6Host(t)
	var res Result
	err := netns.Do(h.backend, func() error {
		var err error
		res, err = Setup(Options{Interface: "eth0", VIPs: []netip.Addr{fxVIP1, v6VIP}, PinPath: h.pin})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(res.HostAddrs, v4Backend) || !slices.Contains(res.HostAddrs, v6Backend) || len(res.HostAddrs) != 2 {
		t.Errorf("tunnel destinations %v, want %v and %v (no link-local address)", res.HostAddrs, v4Backend, v6Backend)
	}
	if got := loVIPs6(t, h.backend); !slices.Equal(got, []netip.Addr{v6VIP}) {
		t.Errorf("IPv6 /128s on lo %v, want %v", got, v6VIP)
	}

	var udp6, udp4 *net.UDPConn
	var ln *net.TCPListener
	err = netns.Do(h.backend, func() error {
		var err error
		if udp6, err = net.ListenUDP("udp6", net.UDPAddrFromAddrPort(netip.AddrPortFrom(v6VIP, 5353))); err != nil {
			return err
		}
		t.Cleanup(func() { udp6.Close() })
		if udp4, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(fxVIP1, 5353))); err != nil {
			return err
		}
		t.Cleanup(func() { udp4.Close() })
		if ln, err = net.ListenTCP("tcp6", net.TCPAddrFromAddrPort(netip.AddrPortFrom(v6VIP, 80))); err != nil {
			return err
		}
		t.Cleanup(func() { ln.Close() })
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	s := h.sender(t)
	// The backend resolves the node's addresses through the program
	// (neighbour discovery, ARP), as it must to answer the client.
	for _, a := range []netip.Addr{v6Node, v4Node} {
		testenv.EventuallyTrue(t, 10*time.Second, "the backend pings "+a.String(), func() bool {
			return exec.Command("ip", "netns", "exec", h.backend, "ping", "-c1", "-W1", a.String()).Run() == nil
		})
	}

	gue4, gue6, variant1 := []byte{0, 4, 0, 0}, []byte{0, 41, 0, 0}, []byte{}
	for i, c := range []struct {
		name    string
		inner6  bool
		dst     netip.Addr
		gue     []byte
		dstOpts bool
	}{
		{"IPv6-in-IPv6", true, v6Backend, nil, false},
		{"IPv6-in-IPv6 after destination options", true, v6Backend, nil, true},
		{"IPv6-in-IPv4", true, v4Backend, nil, false},
		{"GUE/IPv6, IPv6 inside", true, v6Backend, gue6, false},
		{"GUE/IPv6 variant 1, IPv6 inside", true, v6Backend, variant1, false},
		{"GUE/IPv4, IPv6 inside", true, v4Backend, gue6, false},
		{"IPv4-in-IPv6", false, v6Backend, nil, false},
		{"GUE/IPv6, IPv4 inside", false, v6Backend, gue4, true},
		{"IPv4-in-IPv4", false, v4Backend, nil, false},
	} {
		sport := uint16(41000 + i)
		payload := fmt.Appendf(nil, "datagram %d, %s", i, c.name)
		inner := ip6Seg{src: v6Client, dst: v6VIP, sport: sport, dport: 5353, proto: 17, payload: payload}.bytes()
		conn, client := udp6, v6Client
		if !c.inner6 {
			inner = ipPkt{src: v4ClientBH, dst: fxVIP1, sport: sport, dport: 5353, proto: 17, payload: payload}.bytes()
			conn, client = udp4, v4ClientBH
		}
		src := v6Node
		if c.dst.Is4() {
			src = v4Node
		}
		s.send(t, h.beMAC, encap(inner, src, c.dst, c.gue, c.dstOpts))
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 1500)
		n, from, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Errorf("%s: the VIP's UDP socket received nothing: %v", c.name, err)
			continue
		}
		if !bytes.Equal(buf[:n], payload) || from.Addr().Unmap() != client || from.Port() != sport {
			t.Errorf("%s: received %q from %v, want %q from %v", c.name, buf[:n], from, payload, netip.AddrPortFrom(client, sport))
		}
	}

	// TCP: the SYN over IPv6-in-IPv6; the backend answers the client
	// directly, through the node.
	const cport = 42000
	syn := ip6Seg{src: v6Client, dst: v6VIP, sport: cport, dport: 80, proto: 6, seq: 1000, flags: 0x02}.bytes()
	s.send(t, h.beMAC, encap(syn, v6Node, v6Backend, nil, false))
	synAck := s.await(t, "SYN-ACK from the IPv6 VIP to the client", func(d []byte) bool {
		return d[6] == 6 && len(d) >= 60 && bytes.Equal(d[8:24], v6VIP.AsSlice()) && bytes.Equal(d[24:40], v6Client.AsSlice()) &&
			binary.BigEndian.Uint16(d[40:]) == 80 && binary.BigEndian.Uint16(d[42:]) == cport && d[40+13]&0x12 == 0x12
	})
	if ack := binary.BigEndian.Uint32(synAck[40+8:]); ack != 1001 {
		t.Fatalf("SYN-ACK acknowledges %d, want 1001", ack)
	}
	serverSeq := binary.BigEndian.Uint32(synAck[40+4:])
	// The handshake's ACK with data, over GUE/IPv4.
	data := []byte("hello over IPv6")
	seg := ip6Seg{src: v6Client, dst: v6VIP, sport: cport, dport: 80, proto: 6, seq: 1001, ack: serverSeq + 1, flags: 0x18, payload: data}.bytes()
	s.send(t, h.beMAC, encap(seg, v4Node, v4Backend, gue6, false))
	_ = ln.SetDeadline(time.Now().Add(5 * time.Second))
	conn, err := ln.AcceptTCP()
	if err != nil {
		t.Fatalf("the IPv6 VIP's listener accepted no connection: %v", err)
	}
	defer conn.Close()
	if got := conn.RemoteAddr().(*net.TCPAddr).AddrPort(); got != netip.AddrPortFrom(v6Client, cport) {
		t.Errorf("connection from %v, want %v", got, netip.AddrPortFrom(v6Client, cport))
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, len(data))
	if _, err := io.ReadFull(conn, got); err != nil || !bytes.Equal(got, data) {
		t.Errorf("read %q, %v; want %q", got, err, data)
	}

	st, err := decapStatsIn(h.backend, h.pin)
	if err != nil {
		t.Fatal(err)
	}
	// 9 datagrams and 2 segments, 5 of them over GUE; the neighbour
	// discovery and ARP of the pings passed untouched.
	if st["decap_ipip"].Packets != 6 || st["decap_gue"].Packets != 5 || st["drop_bad_inner"].Packets != 0 || st["drop_bad_gue"].Packets != 0 || st["pass_not_ours"].Packets == 0 {
		t.Errorf("decapsulation counters %v", st)
	}
}

// loVIPs6 lists the IPv6 /128 addresses on lo in ns (::1 aside), sorted.
func loVIPs6(t *testing.T, ns string) []netip.Addr {
	t.Helper()
	var out []netip.Addr
	err := netns.Do(ns, func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		addrs, err := netlink.AddrList(lo, netlink.FAMILY_V6)
		for _, a := range addrs {
			ip, _ := netip.AddrFromSlice(a.IP)
			if ones, _ := a.Mask.Size(); ones == 128 && !ip.IsLoopback() {
				out = append(out, ip)
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

func decapStatsIn(ns, pin string) (map[string]bpfobj.Counters, error) {
	var st map[string]bpfobj.Counters
	err := netns.Do(ns, func() error {
		var err error
		st, err = decap.Stats(pin)
		return err
	})
	return st, err
}

// TestIPv6NATToPod: in Kubernetes mode an IPv6 VIP is translated for an
// IPv6 pod behind the node. A datagram tunnelled to the pod over
// IPv6-in-IPv6 reaches the pod's socket from the client (the kernel
// checks the translated checksum), and the pod's answer leaves the node
// from VIP:53 with a valid checksum, whether the pod computed it or left
// it to the node.
func TestIPv6NATToPod(t *testing.T) {
	testenv.RequireRoot(t, "backend translation test (BPF, network namespaces)")
	h := newV6Host(t)
	pod := fmt.Sprintf("xlbtest-v6p-%d", os.Getpid())
	pod6 := netip.MustParseAddr("fd00:244::2")
	ipcmd(t, "netns", "add", pod)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", pod).Run() })
	ipcmd(t, "-n", pod, "link", "set", "lo", "up")
	ipcmd(t, "-n", h.backend, "link", "add", "hp1", "type", "veth", "peer", "name", "eth0", "netns", pod)
	ipcmd(t, "-n", h.backend, "addr", "add", "fd00:244::1/64", "dev", "hp1", "nodad")
	ipcmd(t, "-n", h.backend, "link", "set", "hp1", "up")
	ipcmd(t, "-n", pod, "addr", "add", "fd00:244::2/64", "dev", "eth0", "nodad")
	ipcmd(t, "-n", pod, "link", "set", "eth0", "up")
	ipcmd(t, "-n", pod, "-6", "route", "add", "default", "via", "fd00:244::1")
	sh(t, "ip", "netns", "exec", pod, "ethtool", "-K", "eth0", "tx", "off")
	err := netns.Do(h.backend, func() error {
		for _, p := range []string{"/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv6/conf/all/forwarding"} {
			if err := os.WriteFile(p, []byte("1"), 0o644); err != nil {
				return err
			}
		}
		_, err := Setup(Options{Interface: "eth0", PinPath: h.pin, NAT: []NATEntry{{v6VIP, 53, wire.ProtoUDP, pod6, 5353}}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var pc *net.UDPConn
	err = netns.Do(pod, func() error {
		var err error
		pc, err = net.ListenUDP("udp6", net.UDPAddrFromAddrPort(netip.AddrPortFrom(pod6, 5353)))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	s := h.sender(t)
	// The node resolves the pod and the node's router before the reply.
	for _, c := range [][]string{{h.backend, "fd00:3::1"}, {h.backend, "fd00:244::2"}} {
		testenv.EventuallyTrue(t, 10*time.Second, c[0]+" pings "+c[1], func() bool {
			return exec.Command("ip", "netns", "exec", c[0], "ping", "-c1", "-W1", c[1]).Run() == nil
		})
	}

	// First the pod sends complete checksums; then partial ones, as a
	// pod's TSO does, which the node finishes when it sends the answer
	// out of an interface without checksum offload: either way the
	// answer leaves with a valid checksum over the VIP's address.
	for i, c := range []struct {
		name    string
		ethtool [][]string
		cport   uint16
	}{
		{"complete checksums", nil, 43053},
		{"partial checksums, finished by the node", [][]string{{pod, "eth0", "on"}, {h.backend, "eth0", "off"}}, 43054},
	} {
		for _, e := range c.ethtool {
			sh(t, "ip", "netns", "exec", e[0], "ethtool", "-K", e[1], "tx", e[2])
		}
		q := fmt.Appendf(nil, "query %d over IPv6 to a pod", i)
		inner := ip6Seg{src: v6Client, dst: v6VIP, sport: c.cport, dport: 53, proto: 17, payload: q}.bytes()
		s.send(t, h.beMAC, encap(inner, v6Node, pod6, nil, false))
		_ = pc.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 1500)
		n, from, err := pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatalf("%s: the pod's socket received nothing: %v", c.name, err)
		}
		if !bytes.Equal(buf[:n], q) || from != netip.AddrPortFrom(v6Client, c.cport) {
			t.Fatalf("%s: the pod received %q from %v, want %q from %v", c.name, buf[:n], from, q, netip.AddrPortFrom(v6Client, c.cport))
		}
		answer := fmt.Appendf(nil, "answer %d from the pod", i)
		if _, err := pc.WriteToUDPAddrPort(answer, from); err != nil {
			t.Fatal(err)
		}
		reply := s.await(t, "the pod's answer from the VIP", func(d []byte) bool {
			return d[6] == 17 && len(d) >= 48 && bytes.Equal(d[24:40], v6Client.AsSlice()) && binary.BigEndian.Uint16(d[42:]) == c.cport
		})
		if src := netip.AddrFrom16([16]byte(reply[8:24])); src != v6VIP || binary.BigEndian.Uint16(reply[40:]) != 53 {
			t.Errorf("%s: answer from %v port %d, want %v port 53", c.name, src, binary.BigEndian.Uint16(reply[40:]), v6VIP)
		}
		if !bytes.Equal(reply[48:], answer) {
			t.Errorf("%s: answer %q, want %q", c.name, reply[48:], answer)
		}
		t.Run(c.name, func(t *testing.T) { checkDatagram6(t, reply) })
	}
}
