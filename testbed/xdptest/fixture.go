package xdptest

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/testbed/netns"
)

// IP runs ip with args, failing t on an error.
func IP(t testing.TB, args ...string) {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// The fixture namespace of the programs' tests. The node sits on veth0
// (10.0.1.2) with its router at 10.0.1.1 (a permanent neighbour); a
// second interface, veth2, leads to 10.0.4.0/24 so that forwarding there
// is a redirect; 10.0.6.0/24 goes via a neighbour that is never resolved;
// 10.0.7.0/24 has a route MTU of 1400; 10.0.8.0/24 is unreachable.
var (
	Node      = netip.MustParseAddr("10.0.1.2")
	RouterMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	OtherMAC  = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x05}
	Client    = netip.MustParseAddr("10.0.2.2")
	VIP       = netip.MustParseAddr("10.99.0.1")
	Backend   = netip.MustParseAddr("10.0.3.2")
	RedirBE   = netip.MustParseAddr("10.0.4.2")
	NoNeighBE = netip.MustParseAddr("10.0.6.2")
	SmallMTU  = netip.MustParseAddr("10.0.7.2")
	NoRouteBE = netip.MustParseAddr("10.0.8.2")
)

// NS is the fixture namespace.
type NS struct {
	Name              string
	Ifindex, Ifindex2 int
	MAC               net.HardwareAddr
	Runner            *netns.Runner // a thread in the namespace, pinned to CPU 0
}

var nsCounter atomic.Int32

// NewNS makes the fixture namespace, removed when t ends. prepare runs in
// it for veth0 first: the program's own preparation of the interface an
// LB node attaches to (lb.PrepareInterface).
func NewNS(t testing.TB, prepare func(ifname string) error) *NS {
	t.Helper()
	name := fmt.Sprintf("xlbtest-dp-%d-%d", os.Getpid(), nsCounter.Add(1))
	IP(t, "netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	IP(t, "-n", name, "link", "set", "lo", "up")
	IP(t, "-n", name, "link", "add", "veth0", "type", "veth", "peer", "name", "veth1")
	IP(t, "-n", name, "link", "add", "veth2", "type", "veth", "peer", "name", "veth3")
	for _, l := range []string{"veth0", "veth1", "veth2", "veth3"} {
		IP(t, "-n", name, "link", "set", l, "up")
	}
	IP(t, "-n", name, "addr", "add", "10.0.1.2/24", "dev", "veth0")
	IP(t, "-n", name, "addr", "add", "10.0.5.2/24", "dev", "veth2")
	IP(t, "-n", name, "neigh", "add", "10.0.1.1", "lladdr", RouterMAC.String(), "dev", "veth0", "nud", "permanent")
	IP(t, "-n", name, "neigh", "add", "10.0.5.1", "lladdr", OtherMAC.String(), "dev", "veth2", "nud", "permanent")
	IP(t, "-n", name, "route", "add", "10.0.3.0/24", "via", "10.0.1.1")
	IP(t, "-n", name, "route", "add", "10.0.4.0/24", "via", "10.0.5.1")
	IP(t, "-n", name, "route", "add", "10.0.6.0/24", "via", "10.0.1.9")
	IP(t, "-n", name, "route", "add", "10.0.7.0/24", "via", "10.0.1.1", "mtu", "lock", "1400")
	IP(t, "-n", name, "route", "add", "unreachable", "10.0.8.0/24")
	f := &NS{Name: name}
	err := netns.Do(name, func() error {
		if err := prepare("veth0"); err != nil {
			return err
		}
		i0, err := net.InterfaceByName("veth0")
		if err != nil {
			return err
		}
		i2, err := net.InterfaceByName("veth2")
		if err != nil {
			return err
		}
		f.Ifindex, f.Ifindex2, f.MAC = i0.Index, i2.Index, i0.HardwareAddr
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// One thread, on one CPU, for every run: per-CPU state (the next-hop
	// cache) carries from one packet to the next as on a NIC queue.
	if f.Runner, err = netns.NewRunner(name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Runner.Close)
	err = f.Runner.Do(func() error {
		var cpus unix.CPUSet
		cpus.Set(0)
		return unix.SchedSetaffinity(0, &cpus)
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// XDPMD mirrors struct xdp_md for BPF_PROG_TEST_RUN's context.
type XDPMD struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// Run feeds one frame to prog inside the fixture namespace, arriving on
// veth0, and returns the verdict and the frame as the program left it.
func (f *NS) Run(t testing.TB, prog *ebpf.Program, frame []byte) (uint32, []byte) {
	t.Helper()
	out := make([]byte, len(frame)+256)
	var verdict uint32
	err := f.Runner.Do(func() error {
		opts := &ebpf.RunOptions{
			Data:    frame,
			DataOut: out,
			Context: XDPMD{DataEnd: uint32(len(frame)), IngressIfindex: uint32(f.Ifindex)},
		}
		v, err := prog.Run(opts)
		verdict = v
		out = out[:len(opts.DataOut)]
		return err
	})
	if err != nil {
		t.Fatalf("BPF_PROG_TEST_RUN: %v", err)
	}
	return verdict, out
}

// XDP verdicts.
const (
	Aborted  = 0
	Drop     = 1
	Pass     = 2
	TX       = 3
	Redirect = 4
)

// VerdictNames name the XDP verdicts.
var VerdictNames = map[uint32]string{0: "ABORTED", 1: "DROP", 2: "PASS", 3: "TX", 4: "REDIRECT"}

// Packet describes a test packet.
type Packet struct {
	Src, Dst     netip.Addr
	Sport, Dport uint16
	Proto        uint8
	TTL          uint8
	DF           bool
	FlagsFrag    uint16 // raw frag_off bits besides DF
	Options      []byte // IP options, a multiple of 4 bytes
	Payload      []byte
	TCPFlags     uint8
}

// SrcMAC is the source MAC of the frames Frame builds.
var SrcMAC = net.HardwareAddr{0x02, 0xaa, 0, 0, 0, 0x01}

// Csum is the Internet checksum of b.
func Csum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = (s & 0xffff) + s>>16
	}
	return ^uint16(s)
}

// Frame builds Ethernet + IPv4 + TCP/UDP with valid checksums.
func (p Packet) Frame(dstMAC net.HardwareAddr) []byte {
	if p.TTL == 0 {
		p.TTL = 64
	}
	var l4 []byte
	switch p.Proto {
	case 17:
		l4 = make([]byte, 8+len(p.Payload))
		binary.BigEndian.PutUint16(l4[0:], p.Sport)
		binary.BigEndian.PutUint16(l4[2:], p.Dport)
		binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
		copy(l4[8:], p.Payload)
	default:
		l4 = make([]byte, 20+len(p.Payload))
		binary.BigEndian.PutUint16(l4[0:], p.Sport)
		binary.BigEndian.PutUint16(l4[2:], p.Dport)
		binary.BigEndian.PutUint32(l4[4:], 1000)
		l4[12] = 5 << 4
		l4[13] = p.TCPFlags
		if l4[13] == 0 {
			l4[13] = 0x10 // ACK
		}
		binary.BigEndian.PutUint16(l4[14:], 65535)
		copy(l4[20:], p.Payload)
	}
	if p.Proto == 6 || p.Proto == 17 {
		s, d := p.Src.As4(), p.Dst.As4()
		ph := append(append(append([]byte{}, s[:]...), d[:]...), 0, p.Proto, byte(len(l4)>>8), byte(len(l4)))
		off := 16
		if p.Proto == 17 {
			off = 6
		}
		binary.BigEndian.PutUint16(l4[off:], Csum(append(ph, l4...)))
	}
	ihl := 20 + len(p.Options)
	ip := make([]byte, ihl, ihl+len(l4))
	ip[0] = 0x40 | byte(ihl/4)
	binary.BigEndian.PutUint16(ip[2:], uint16(ihl+len(l4)))
	binary.BigEndian.PutUint16(ip[4:], 0x1234)
	frag := p.FlagsFrag
	if p.DF {
		frag |= 0x4000
	}
	binary.BigEndian.PutUint16(ip[6:], frag)
	ip[8] = p.TTL
	ip[9] = p.Proto
	s, d := p.Src.As4(), p.Dst.As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	copy(ip[20:], p.Options)
	binary.BigEndian.PutUint16(ip[10:], Csum(ip[:ihl]))
	ip = append(ip, l4...)
	eth := make([]byte, 14, 14+len(ip))
	copy(eth[0:], dstMAC)
	copy(eth[6:], SrcMAC)
	binary.BigEndian.PutUint16(eth[12:], 0x0800)
	return append(eth, ip...)
}
