package dataplane

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
	"github.com/xlbproject/xlb/testbed/testenv"
)

func requirePrivileges(t testing.TB) {
	testenv.RequireRoot(t, "data plane tests (BPF, network namespaces)")
}

var nsCounter atomic.Int32

func ipcmd(t testing.TB, args ...string) {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// Addresses of the fixture namespace. The node sits on veth0 (10.0.1.2)
// with its router at 10.0.1.1 (a permanent neighbour); a second
// interface, veth2, leads to 10.0.4.0/24 so that forwarding there is a
// redirect; 10.0.6.0/24 goes via a neighbour that is never resolved;
// 10.0.7.0/24 has a route MTU of 1400; 10.0.8.0/24 is unreachable.
var (
	fxNode      = netip.MustParseAddr("10.0.1.2")
	fxRouterMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	fxOtherMAC  = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x05}
	fxClient    = netip.MustParseAddr("10.0.2.2")
	fxVIP       = netip.MustParseAddr("10.99.0.1")
	fxBackend   = netip.MustParseAddr("10.0.3.2")
	fxRedirBE   = netip.MustParseAddr("10.0.4.2")
	fxNoNeighBE = netip.MustParseAddr("10.0.6.2")
	fxSmallMTU  = netip.MustParseAddr("10.0.7.2")
	fxNoRouteBE = netip.MustParseAddr("10.0.8.2")
)

type fixtureNS struct {
	name              string
	ifindex, ifindex2 int
	mac               net.HardwareAddr
	runner            *netns.Runner // a thread in the namespace, pinned to CPU 0
}

func newFixtureNS(t testing.TB) *fixtureNS {
	t.Helper()
	name := fmt.Sprintf("xlbtest-dp-%d-%d", os.Getpid(), nsCounter.Add(1))
	ipcmd(t, "netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	ipcmd(t, "-n", name, "link", "set", "lo", "up")
	ipcmd(t, "-n", name, "link", "add", "veth0", "type", "veth", "peer", "name", "veth1")
	ipcmd(t, "-n", name, "link", "add", "veth2", "type", "veth", "peer", "name", "veth3")
	for _, l := range []string{"veth0", "veth1", "veth2", "veth3"} {
		ipcmd(t, "-n", name, "link", "set", l, "up")
	}
	ipcmd(t, "-n", name, "addr", "add", "10.0.1.2/24", "dev", "veth0")
	ipcmd(t, "-n", name, "addr", "add", "10.0.5.2/24", "dev", "veth2")
	ipcmd(t, "-n", name, "neigh", "add", "10.0.1.1", "lladdr", fxRouterMAC.String(), "dev", "veth0", "nud", "permanent")
	ipcmd(t, "-n", name, "neigh", "add", "10.0.5.1", "lladdr", fxOtherMAC.String(), "dev", "veth2", "nud", "permanent")
	ipcmd(t, "-n", name, "route", "add", "10.0.3.0/24", "via", "10.0.1.1")
	ipcmd(t, "-n", name, "route", "add", "10.0.4.0/24", "via", "10.0.5.1")
	ipcmd(t, "-n", name, "route", "add", "10.0.6.0/24", "via", "10.0.1.9")
	ipcmd(t, "-n", name, "route", "add", "10.0.7.0/24", "via", "10.0.1.1", "mtu", "lock", "1400")
	ipcmd(t, "-n", name, "route", "add", "unreachable", "10.0.8.0/24")
	f := &fixtureNS{name: name}
	err := netns.Do(name, func() error {
		if err := PrepareInterface("veth0"); err != nil {
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
		f.ifindex, f.ifindex2, f.mac = i0.Index, i2.Index, i0.HardwareAddr
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// One thread, on one CPU, for every run: per-CPU state (the next-hop
	// cache) carries from one packet to the next as on a NIC queue.
	if f.runner, err = netns.NewRunner(name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.runner.Close)
	err = f.runner.Do(func() error {
		var cpus unix.CPUSet
		cpus.Set(0)
		return unix.SchedSetaffinity(0, &cpus)
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// xdpMD mirrors struct xdp_md for BPF_PROG_TEST_RUN's context.
type xdpMD struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// run feeds one frame to prog inside the fixture namespace, arriving on
// veth0, and returns the verdict and the frame as the program left it.
func (f *fixtureNS) run(t testing.TB, prog *ebpf.Program, frame []byte) (uint32, []byte) {
	t.Helper()
	out := make([]byte, len(frame)+256)
	var verdict uint32
	err := f.runner.Do(func() error {
		opts := &ebpf.RunOptions{
			Data:    frame,
			DataOut: out,
			Context: xdpMD{DataEnd: uint32(len(frame)), IngressIfindex: uint32(f.ifindex)},
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

// Verdicts.
const (
	xdpAborted  = 0
	xdpDrop     = 1
	xdpPass     = 2
	xdpTX       = 3
	xdpRedirect = 4
)

var verdictNames = map[uint32]string{0: "ABORTED", 1: "DROP", 2: "PASS", 3: "TX", 4: "REDIRECT"}

// pkt describes a test packet.
type pkt struct {
	src, dst     netip.Addr
	sport, dport uint16
	proto        uint8
	ttl          uint8
	df           bool
	flagsFrag    uint16 // raw frag_off bits besides DF
	options      []byte // IP options, a multiple of 4 bytes
	payload      []byte
	tcpFlags     uint8
}

var (
	srcMAC = net.HardwareAddr{0x02, 0xaa, 0, 0, 0, 0x01}
)

func csum(b []byte) uint16 {
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

// frame builds Ethernet + IPv4 + TCP/UDP with valid checksums.
func (p pkt) frame(dstMAC net.HardwareAddr) []byte {
	if p.ttl == 0 {
		p.ttl = 64
	}
	var l4 []byte
	switch p.proto {
	case 17:
		l4 = make([]byte, 8+len(p.payload))
		binary.BigEndian.PutUint16(l4[0:], p.sport)
		binary.BigEndian.PutUint16(l4[2:], p.dport)
		binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
		copy(l4[8:], p.payload)
	default:
		l4 = make([]byte, 20+len(p.payload))
		binary.BigEndian.PutUint16(l4[0:], p.sport)
		binary.BigEndian.PutUint16(l4[2:], p.dport)
		binary.BigEndian.PutUint32(l4[4:], 1000)
		l4[12] = 5 << 4
		l4[13] = p.tcpFlags
		if l4[13] == 0 {
			l4[13] = 0x10 // ACK
		}
		binary.BigEndian.PutUint16(l4[14:], 65535)
		copy(l4[20:], p.payload)
	}
	if p.proto == 6 || p.proto == 17 {
		s, d := p.src.As4(), p.dst.As4()
		ph := append(append(append([]byte{}, s[:]...), d[:]...), 0, p.proto, byte(len(l4)>>8), byte(len(l4)))
		off := 16
		if p.proto == 17 {
			off = 6
		}
		binary.BigEndian.PutUint16(l4[off:], csum(append(ph, l4...)))
	}
	ihl := 20 + len(p.options)
	ip := make([]byte, ihl, ihl+len(l4))
	ip[0] = 0x40 | byte(ihl/4)
	binary.BigEndian.PutUint16(ip[2:], uint16(ihl+len(l4)))
	binary.BigEndian.PutUint16(ip[4:], 0x1234)
	frag := p.flagsFrag
	if p.df {
		frag |= 0x4000
	}
	binary.BigEndian.PutUint16(ip[6:], frag)
	ip[8] = p.ttl
	ip[9] = p.proto
	s, d := p.src.As4(), p.dst.As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	copy(ip[20:], p.options)
	binary.BigEndian.PutUint16(ip[10:], csum(ip[:ihl]))
	ip = append(ip, l4...)
	eth := make([]byte, 14, 14+len(ip))
	copy(eth[0:], dstMAC)
	copy(eth[6:], srcMAC)
	binary.BigEndian.PutUint16(eth[12:], 0x0800)
	return append(eth, ip...)
}
