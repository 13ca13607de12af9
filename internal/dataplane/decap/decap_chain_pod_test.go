package decap

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/testbed/netns"
)

// Pods of the Kubernetes-mode chaining fixture: two pods on the fixture
// node, each in its own namespace behind a veth, with the client's address
// on its lo so that a connection client -> pod:podPort is a real socket
// there.
var (
	fxPod1 = netip.MustParseAddr("10.244.0.2")
	fxPod2 = netip.MustParseAddr("10.244.0.3")
)

const podPort = 8080

// podNS is one pod of the fixture: its namespace, its network namespace ID
// as the node knows it, and its open connections' client ports.
type podNS struct {
	name   string
	addr   netip.Addr
	nsid   uint32
	conns  []uint16
	runner *netns.Runner
}

// newFixturePod creates a pod namespace behind veth `link` of the fixture
// node, with addr on its eth0, the client's address of addr's family on
// its lo, a route from the node, a listener on addr:podPort and one
// connection to it.
func newFixturePod(t testing.TB, f *fixtureNS, link string, addr netip.Addr) *podNS {
	t.Helper()
	name := fmt.Sprintf("xlbtest-pod-%d-%d", os.Getpid(), nsCounter.Add(1))
	host, client, opts := "/32", fxClient, []string{}
	if addr.Is6() {
		host, client, opts = "/128", fxClient6, []string{"nodad"}
	}
	ipcmd(t, "netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	ipcmd(t, "-n", f.Name, "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", name)
	ipcmd(t, "-n", f.Name, "link", "set", link, "up")
	ipcmd(t, "-n", f.Name, "route", "add", addr.String()+host, "dev", link)
	ipcmd(t, "-n", name, "link", "set", "lo", "up")
	ipcmd(t, "-n", name, "link", "set", "eth0", "up")
	ipcmd(t, append([]string{"-n", name, "addr", "add", addr.String() + host, "dev", "eth0"}, opts...)...)
	ipcmd(t, append([]string{"-n", name, "addr", "add", client.String() + host, "dev", "lo"}, opts...)...)
	p := &podNS{name: name, addr: addr}
	err := netns.Do(f.Name, func() error {
		l, err := netlink.LinkByName(link)
		if err != nil {
			return err
		}
		if l.Attrs().NetNsID < 0 {
			return fmt.Errorf("%s has no link-netnsid", link)
		}
		p.nsid = uint32(l.Attrs().NetNsID)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	runner, err := netns.NewRunner(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(runner.Close)
	p.runner = runner
	p.conns = append(p.conns, dialFrom(t, runner, netip.AddrPortFrom(addr, podPort), 0))
	return p
}

// translateFor sets the fixture's translations: VIP:80/tcp -> pod:podPort
// for every pod (the VIP of the pod's family), each pod local, with its
// network namespace ID unless it is left out of withNetns.
func translateFor(t testing.TB, objs *backendObjects, pods []*podNS, withNetns ...*podNS) {
	t.Helper()
	for _, p := range pods {
		vip := fxVIP
		if p.addr.Is6() {
			vip = fxVIP6
		}
		k := natSvcKeyOf(vip, p.addr, 80)
		if err := objs.NatSvcs.Put(k, be16bytes(podPort)); err != nil {
			t.Fatal(err)
		}
		if err := objs.NatPods.Put(wire.AddrOf(p.addr), uint8(1)); err != nil {
			t.Fatal(err)
		}
		_ = objs.NatPodNetns.Delete(wire.AddrOf(p.addr))
	}
	for _, p := range withNetns {
		if err := objs.NatPodNetns.Put(wire.AddrOf(p.addr), p.nsid); err != nil {
			t.Fatal(err)
		}
	}
}

// podCase is a case of a frame tunnelled to a local pod: one delivered is
// translated for pod.
type podCase struct {
	chainCase
	pod netip.Addr
}

// podCases makes the cases of frames tunnelled to the fixture's first
// pod: wrap encapsulates an inner packet with a hint; a chained packet
// leaves from that pod's address (from), with the node's MAC (mac).
type podCases struct {
	wrap func(inner, hint []byte) []byte
	from netip.Addr
	mac  net.HardwareAddr
}

func (k podCases) delivered(name string, inner, hint []byte, stat string, pod netip.Addr) podCase {
	return podCase{chainCase{name: name, frame: k.wrap(inner, hint), verdict: xdpPass, decap: "decap_gue", chain: stat}, pod}
}

func (k podCases) chained(name string, inner, hint []byte, to, next netip.Addr) podCase {
	return podCase{chainCase: chainCase{name: name, frame: k.wrap(inner, hint), verdict: xdpTX, chain: "chained",
		chainedTo: to, next: next, dstMAC: fxRouterMAC, srcMAC: k.mac, from: k.from}}
}

func (k podCases) dropped(name string, inner, hint []byte, stat string) podCase {
	return podCase{chainCase: chainCase{name: name, frame: k.wrap(inner, hint), verdict: xdpDrop, chain: stat}}
}

// runPodCases runs each case as a subtest, and checks the packet of one
// delivered for a pod with translated.
func runPodCases(t *testing.T, f *fixtureNS, objs *backendObjects, cases []podCase, translated func(*testing.T, []byte, netip.Addr)) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			runChainCase(t, f, objs, c.chainCase)
			if c.verdict == xdpPass && c.pod.IsValid() {
				_, out := f.Run(t, objs.XlbDecap, c.frame)
				translated(t, out, c.pod)
			}
		})
	}
}

// natSvcKeyOf is the nat_svc_key of a TCP VIP:port and a pod.
func natSvcKeyOf(vip, pod netip.Addr, port uint16) wire.NATSvcKey {
	return wire.NATSvcKey{Vip: wire.AddrOf(vip), Pod: wire.AddrOf(pod), Port: wire.Port(port), Proto: wire.ProtoTCP}
}

func be16bytes(v uint16) [2]byte {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return b
}

// checkTranslated verifies a delivered frame: the inner packet, now the
// frame's only IPv4 header, is addressed to pod:podPort.
func checkTranslated(t *testing.T, out []byte, pod netip.Addr) {
	t.Helper()
	if len(out) < 14+20+4 {
		t.Fatalf("delivered frame of %d bytes", len(out))
	}
	ip := out[14:]
	if dst := netip.AddrFrom4([4]byte(ip[16:20])); dst != pod {
		t.Errorf("delivered to %v, want pod %v", dst, pod)
	}
	if port := binary.BigEndian.Uint16(ip[20+2:]); port != podPort {
		t.Errorf("delivered to port %d, want %d", port, podPort)
	}
	if csum(ip[:20]) != 0 {
		t.Errorf("IPv4 checksum of the translated packet invalid")
	}
}

// TestDecapChainPods runs the daisy-chaining decision of the Kubernetes
// mode: a hinted TCP packet tunnelled to a local pod is delivered to it
// when the pod holds the connection (looked up in the pod's network
// namespace, as client -> pod:targetPort), translated for another local
// pod that was the slot's previous owner and holds it, sent on to a
// previous owner on another node, or dropped as stale; a pod whose
// network namespace is unknown is never chained.
func TestDecapChainPods(t *testing.T) {
	requirePrivileges(t)
	f := newFixtureNS(t)
	objs := newFixtureDecap(t, f)
	setChainT(t, objs, chainSets)
	pod1 := newFixturePod(t, f, "vpod1", fxPod1)
	pod2 := newFixturePod(t, f, "vpod2", fxPod2)
	pods := []*podNS{pod1, pod2}
	translateFor(t, objs, pods, pods...)

	now := uint32(time.Now().Unix())
	expired := now - uint32(chainWindow/time.Second) - 1
	var none netip.Addr
	toPod1 := func(inner, hint []byte) []byte { return encapsulate(inner, fxPod1, wire.GUEPort, hint) }
	ack := func(sport uint16) []byte { return tcpSeg(f.MAC, sport, 80, 1000, 1, 0x10) }
	syn := tcpSeg(f.MAC, 40000, 80, 1000, 0, 0x02)
	unknown := uint16(40001)

	k := podCases{wrap: toPod1, from: fxPod1, mac: f.MAC}
	cases := []podCase{
		k.delivered("SYN", syn, hintGUE(chainPrevTX, none, now, now), "syn", fxPod1),
		k.delivered("the pod holds the connection", ack(pod1.conns[0]), hintGUE(chainPrevTX, none, now, now), "socket", fxPod1),
		k.delivered("the previous owner is a local pod that holds it", ack(pod2.conns[0]), hintGUE(fxPod2, none, now, now), "chained", fxPod2),
		k.delivered("the second previous owner is a local pod that holds it", ack(pod2.conns[0]), hintGUE(none, fxPod2, now, now), "chained", fxPod2),
		// The first previous owner is on another node: the packet goes
		// there first, naming pod2 as the next, as the host mode does.
		k.chained("remote first, though the local second holds it", ack(pod2.conns[0]), hintGUE(chainPrevTX, fxPod2, now, now), chainPrevTX, fxPod2),
		k.chained("no socket, previous owner on another node", ack(unknown), hintGUE(chainPrevTX, none, now, now), chainPrevTX, none),
		k.chained("no socket in the local previous owner either: on to the next", ack(unknown), hintGUE(fxPod2, chainPrevTX, now, now), chainPrevTX, none),
		k.chained("remote previous owner first, the next travels on", ack(unknown), hintGUE(chainPrevTX, fxPod2, now, now), chainPrevTX, fxPod2),
		k.delivered("window expired", ack(unknown), hintGUE(chainPrevTX, none, expired, now), "no_socket", fxPod1),
		k.delivered("the hint names the pod itself", ack(unknown), hintGUE(fxPod1, none, now, now), "no_socket", fxPod1),
		k.delivered("newest generation, no socket", ack(unknown), hintGUE(none, none, now, now), "no_socket", fxPod1),
		k.dropped("older generation, no socket", ack(unknown), hintGUE(none, none, now, now-1), "stale_drop"),
	}
	runPodCases(t, f, objs, cases, checkTranslated)

	// A client port whose earlier connection to pod1 left a TIME-WAIT
	// socket there, and whose newer connection is pod2's: pod1 passes
	// the packet to pod2, the previous owner, which holds it. (On port
	// 8081, translated for VIP:81, so that the connections need no
	// listener of newFixturePod's.)
	const twPort = podPort + 1
	for _, p := range pods {
		if err := objs.NatSvcs.Put(natSvcKeyOf(fxVIP, p.addr, 81), be16bytes(twPort)); err != nil {
			t.Fatal(err)
		}
	}
	reused := timeWaitConn(t, pod1.runner, pod1.name, netip.AddrPortFrom(fxPod1, twPort))
	dialFrom(t, pod2.runner, netip.AddrPortFrom(fxPod2, twPort), reused)
	t.Run("TIME-WAIT in the pod, the connection in the local previous owner", func(t *testing.T) {
		seg := tcpSeg(f.MAC, reused, 81, 5000, 1, 0x18)
		c := podCase{chainCase{name: "", frame: toPod1(seg, hintGUE(fxPod2, none, now, now)), verdict: xdpPass, decap: "decap_gue", chain: "chained"}, fxPod2}
		runChainCase(t, f, objs, c.chainCase)
		_, out := f.Run(t, objs.XlbDecap, c.frame)
		if dst := netip.AddrFrom4([4]byte(out[14+16 : 14+20])); dst != fxPod2 {
			t.Errorf("delivered to %v, want pod %v", dst, fxPod2)
		}
	})

	// Without its network namespace ID, the pod's sockets cannot be
	// looked at: its packets are delivered, never chained or counted.
	translateFor(t, objs, pods, pod2)
	t.Run("no network namespace ID for the pod", func(t *testing.T) {
		c := k.delivered("", ack(unknown), hintGUE(chainPrevTX, none, now, now), "", fxPod1)
		runChainCase(t, f, objs, c.chainCase)
		_, out := f.Run(t, objs.XlbDecap, c.frame)
		checkTranslated(t, out, fxPod1)
	})
}

// TestDecapChainPodsTrust: in the Kubernetes mode too, a hint is followed
// only for a packet from a known source and only to a known previous
// owner; a local pod that was the previous owner is known (the node
// translates for it), but a stranger's packet is not handed to it either.
func TestDecapChainPodsTrust(t *testing.T) {
	requirePrivileges(t)
	f := newFixtureNS(t)
	objs := newFixtureDecap(t, f)
	setChainT(t, objs, chainSets)
	pod1 := newFixturePod(t, f, "vpod1", fxPod1)
	pod2 := newFixturePod(t, f, "vpod2", fxPod2)
	pods := []*podNS{pod1, pod2}
	translateFor(t, objs, pods, pods...)

	now := uint32(time.Now().Unix())
	var none netip.Addr
	frame := func(src netip.Addr, inner, hint []byte) []byte {
		return fromSource(encapsulate(inner, fxPod1, wire.GUEPort, hint), src)
	}
	ack := func(sport uint16) []byte { return tcpSeg(f.MAC, sport, 80, 1000, 1, 0x10) }
	hint := func(prev, prev2 netip.Addr) []byte { return hintGUE(prev, prev2, now, now) }
	dropped := func(name string, src netip.Addr, inner, hint []byte, stat string) chainCase {
		return chainCase{name: name, frame: frame(src, inner, hint), verdict: xdpDrop, chain: stat}
	}
	cases := []podCase{
		{chainCase: dropped("unknown source, remote previous owner", chainStranger, ack(40001), hint(chainPrevTX, none), "chain_drop_untrusted_source")},
		{chainCase: dropped("unknown source, the local previous owner holds it", chainStranger, ack(pod2.conns[0]), hint(fxPod2, none), "chain_drop_untrusted_source")},
		{chainCase: dropped("unknown source, to prev2 on another node", chainStranger, ack(40001), hint(none, chainPrevTX), "chain_drop_untrusted_source")},
		{chainCase{name: "unknown source, the pod holds the connection", frame: frame(chainStranger, ack(pod1.conns[0]), hint(chainPrevTX, none)),
			verdict: xdpPass, decap: "decap_gue", chain: "socket"}, fxPod1},
		{chainCase: dropped("known node, unknown remote previous owner", fxNode, ack(40001), hint(chainUnknown, none), "chain_drop_unknown_owner")},
		{chainCase: dropped("known node, local prev without the connection, unknown prev2", fxNode, ack(40001), hint(fxPod2, chainUnknown), "chain_drop_unknown_owner")},
		{chainCase{name: "known node, the local previous owner holds it", frame: frame(fxNode, ack(pod2.conns[0]), hint(fxPod2, none)),
			verdict: xdpPass, decap: "decap_gue", chain: "chained"}, fxPod2},
		{chainCase{name: "a known backend chained it here: on to a known owner", frame: frame(chainPrevTX, ack(40001), hint(chainPrevRedir, none)),
			verdict: xdpRedirect, chain: "chained", chainedTo: chainPrevRedir, dstMAC: fxOtherMAC, from: fxPod1}, none},
	}
	var mac2 net.HardwareAddr
	if err := f.Runner.Do(func() error {
		i, err := net.InterfaceByName("veth2")
		if err == nil {
			mac2 = i.HardwareAddr
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		if c.chainedTo.IsValid() {
			c.srcMAC = mac2
		}
		t.Run(c.name, func(t *testing.T) {
			runChainCase(t, f, objs, c.chainCase)
			if c.verdict == xdpPass && c.pod.IsValid() {
				_, out := f.Run(t, objs.XlbDecap, c.frame)
				checkTranslated(t, out, c.pod)
			}
		})
	}
}

// clientOf is the fixture's client of server's family.
func clientOf(server netip.Addr) netip.Addr {
	if server.Is6() {
		return fxClient6
	}
	return fxClient
}

// dialFrom opens a connection from the client's port `port` (0: any) to
// server, a listener it starts in the namespace of runner, and returns
// the client port; listener and connection stay open until the test
// ends.
func dialFrom(t testing.TB, runner *netns.Runner, server netip.AddrPort, port uint16) uint16 {
	t.Helper()
	var ln net.Listener
	var c, s net.Conn
	err := runner.Do(func() error {
		var err error
		if ln, err = net.Listen("tcp", server.String()); err != nil {
			return err
		}
		d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(clientOf(server.Addr()), port)), Timeout: 5 * time.Second}
		if c, err = d.Dial("tcp", server.String()); err != nil {
			ln.Close()
			return err
		}
		if s, err = ln.Accept(); err != nil {
			c.Close()
			ln.Close()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		s.Close()
		ln.Close()
	})
	return uint16(c.LocalAddr().(*net.TCPAddr).Port)
}
