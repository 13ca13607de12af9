package decap

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// The second IPv6 pod of the fixture (fxPod6 is the first).
var fxPod6b = netip.MustParseAddr("fd00:244::3")

// checkTranslated6 verifies a delivered frame: the inner IPv6 packet, now
// the frame's only IP header, is addressed to [pod]:podPort, its TCP
// checksum valid over the new addresses.
func checkTranslated6(t *testing.T, out []byte, pod netip.Addr) {
	t.Helper()
	if len(out) < 14+40+20 || binary.BigEndian.Uint16(out[12:]) != ethIPv6 {
		t.Fatalf("delivered frame of %d bytes, ethertype %x", len(out), out[12:14])
	}
	ip := out[14:]
	if dst := netip.AddrFrom16([16]byte(ip[24:40])); dst != pod {
		t.Errorf("delivered to %v, want pod %v", dst, pod)
	}
	l4 := append([]byte{}, ip[40:40+int(binary.BigEndian.Uint16(ip[4:]))]...)
	if port := binary.BigEndian.Uint16(l4[2:]); port != podPort {
		t.Errorf("delivered to port %d, want %d", port, podPort)
	}
	got := binary.BigEndian.Uint16(l4[16:])
	l4[16], l4[17] = 0, 0
	src := netip.AddrFrom16([16]byte(ip[8:24]))
	if want := l4Csum(src, pod, nhTCP, l4); got != want {
		t.Errorf("TCP checksum %04x, want %04x", got, want)
	}
}

// newPodFixture6 is the Kubernetes-mode chaining fixture for IPv6: this
// host with its IPv6 address and routes (prepareChain6), two IPv6 pods
// with their connections, translated for with their network namespaces.
func newPodFixture6(t *testing.T) (*fixtureNS, *backendObjects, *podNS, *podNS) {
	t.Helper()
	requirePrivileges(t)
	f := newFixtureNS(t)
	objs := newFixtureDecap(t, f)
	prepareChain6(t, f, objs)
	pod1 := newFixturePod(t, f, "vpod1", fxPod6)
	pod2 := newFixturePod(t, f, "vpod2", fxPod6b)
	pods := []*podNS{pod1, pod2}
	translateFor(t, objs, pods, pods...)
	return f, objs, pod1, pod2
}

// TestDecapChainPods6 is TestDecapChainPods for IPv6 pods: a hinted TCP
// packet tunnelled over IPv6 (GUE with the 40-byte hint, as an xlb node
// sends it to an IPv6 backend) to a local IPv6 pod is delivered to it
// when the pod holds the connection (looked up in IPv6 in the pod's
// network namespace, as client -> [pod]:targetPort), translated for
// another local pod that was the slot's previous owner and holds it,
// sent on over IPv6 to a previous owner on another node, or dropped as
// stale; a pod whose network namespace is unknown is never chained.
func TestDecapChainPods6(t *testing.T) {
	f, objs, pod1, pod2 := newPodFixture6(t)
	pods := []*podNS{pod1, pod2}

	now := uint32(time.Now().Unix())
	expired := now - uint32(chainWindow/time.Second) - 1
	var none netip.Addr
	toPod1 := func(inner, hint []byte) []byte {
		return ethFrame(f.MAC, tunnel{dst: fxPod6, gue: hint}.wrap(inner))
	}
	tcp := func(sport, dport uint16, flags uint8) []byte {
		return seg{src: fxClient6, dst: fxVIP6, sport: sport, dport: dport, proto: nhTCP, seq: 1000, ack: 1, flags: flags}.datagram()
	}
	ack := func(sport uint16) []byte { return tcp(sport, 80, 0x10) }
	syn := tcp(40000, 80, 0x02)
	unknown := uint16(40001)
	hint := func(prev, prev2 netip.Addr, changed, gen uint32) []byte {
		return hint6GUE(nhIPv6, prev, prev2, changed, gen)
	}

	k := podCases{wrap: toPod1, from: fxPod6, mac: f.MAC}
	cases := []podCase{
		k.delivered("SYN", syn, hint(chainPrev6TX, none, now, now), "syn", fxPod6),
		k.delivered("the pod holds the connection", ack(pod1.conns[0]), hint(chainPrev6TX, none, now, now), "socket", fxPod6),
		k.delivered("the previous owner is a local pod that holds it", ack(pod2.conns[0]), hint(fxPod6b, none, now, now), "chained", fxPod6b),
		k.delivered("the second previous owner is a local pod that holds it", ack(pod2.conns[0]), hint(none, fxPod6b, now, now), "chained", fxPod6b),
		k.chained("remote first, though the local second holds it", ack(pod2.conns[0]), hint(chainPrev6TX, fxPod6b, now, now), chainPrev6TX, fxPod6b),
		k.chained("no socket, previous owner on another node", ack(unknown), hint(chainPrev6TX, none, now, now), chainPrev6TX, none),
		k.chained("no socket in the local previous owner either: on to the next", ack(unknown), hint(fxPod6b, chainPrev6TX, now, now), chainPrev6TX, none),
		k.chained("remote previous owner first, the next travels on", ack(unknown), hint(chainPrev6TX, fxPod6b, now, now), chainPrev6TX, fxPod6b),
		k.delivered("window expired", ack(unknown), hint(chainPrev6TX, none, expired, now), "no_socket", fxPod6),
		k.delivered("the hint names the pod itself", ack(unknown), hint(fxPod6, none, now, now), "no_socket", fxPod6),
		k.delivered("the hint names this host", ack(unknown), hint(fxBackend6, none, now, now), "no_socket", fxPod6),
		k.delivered("newest generation, no socket", ack(unknown), hint(none, none, now, now), "no_socket", fxPod6),
		k.dropped("older generation, no socket", ack(unknown), hint(none, none, now, now-1), "stale_drop"),
		// The IPv4 hint over IPv6, which no xlb node sends, is not
		// followed: translated and delivered as plain GUE.
		k.delivered("the IPv4 hint over IPv6", ack(unknown), hintGUE6(chainPrevTX, none, now, now), "", fxPod6),
		k.delivered("UDP with a hint", seg{src: fxClient6, dst: fxVIP6, sport: 5353, dport: 80, proto: nhUDP}.datagram(),
			hint(chainPrev6TX, none, now, now), "", netip.Addr{}),
	}
	// The UDP datagram has a translation of its own.
	if err := objs.NatSvcs.Put(wire.NATSvcKey{Vip: wire.AddrOf(fxVIP6), Pod: wire.AddrOf(fxPod6), Port: wire.Port(80), Proto: wire.ProtoUDP},
		be16bytes(podPort)); err != nil {
		t.Fatal(err)
	}
	runPodCases(t, f, objs, cases, checkTranslated6)

	// A client port whose earlier connection to pod1 left a TIME-WAIT
	// socket there, and whose newer connection is pod2's: pod1 passes
	// the packet to pod2, the previous owner, which holds it.
	const twPort = podPort + 1
	for _, p := range pods {
		if err := objs.NatSvcs.Put(natSvcKeyOf(fxVIP6, p.addr, 81), be16bytes(twPort)); err != nil {
			t.Fatal(err)
		}
	}
	reused := timeWaitConn(t, pod1.runner, pod1.name, netip.AddrPortFrom(fxPod6, twPort))
	dialFrom(t, pod2.runner, netip.AddrPortFrom(fxPod6b, twPort), reused)
	t.Run("TIME-WAIT in the pod, the connection in the local previous owner", func(t *testing.T) {
		c := chainCase{frame: toPod1(tcp(reused, 81, 0x18), hint(fxPod6b, none, now, now)), verdict: xdpPass, decap: "decap_gue", chain: "chained"}
		runChainCase(t, f, objs, c)
		_, out := f.Run(t, objs.XlbDecap, c.frame)
		if dst := netip.AddrFrom16([16]byte(out[14+24 : 14+40])); dst != fxPod6b {
			t.Errorf("delivered to %v, want pod %v", dst, fxPod6b)
		}
	})

	// Without its network namespace ID, the pod's sockets cannot be
	// looked at: its packets are delivered, never chained or counted.
	translateFor(t, objs, pods, pod2)
	t.Run("no network namespace ID for the pod", func(t *testing.T) {
		c := k.delivered("", ack(unknown), hint(chainPrev6TX, none, now, now), "", fxPod6)
		runChainCase(t, f, objs, c.chainCase)
		_, out := f.Run(t, objs.XlbDecap, c.frame)
		checkTranslated6(t, out, fxPod6)
	})
}

// TestDecapChainPods6Trust is TestDecapChainPodsTrust for IPv6 pods: a
// hint is followed only for a packet from a known source and only to a
// known previous owner; a local pod that was the previous owner is known,
// but a stranger's packet is not handed to it either.
func TestDecapChainPods6Trust(t *testing.T) {
	f, objs, pod1, pod2 := newPodFixture6(t)
	now := uint32(time.Now().Unix())
	var none netip.Addr
	frame := func(src netip.Addr, inner, hint []byte) []byte {
		out := ethFrame(f.MAC, tunnel{dst: fxPod6, gue: hint}.wrap(inner))
		copy(out[14+8:14+24], src.AsSlice())
		return out
	}
	ack := func(sport uint16) []byte {
		return seg{src: fxClient6, dst: fxVIP6, sport: sport, dport: 80, proto: nhTCP, seq: 1000, ack: 1, flags: 0x10}.datagram()
	}
	hint := func(prev, prev2 netip.Addr) []byte { return hint6GUE(nhIPv6, prev, prev2, now, now) }
	dropped := func(name string, src netip.Addr, inner, hint []byte, stat string) chainCase {
		return chainCase{name: name, frame: frame(src, inner, hint), verdict: xdpDrop, chain: stat}
	}
	cases := []podCase{
		{chainCase: dropped("unknown source, remote previous owner", chainStranger6, ack(40001), hint(chainPrev6TX, none), "chain_drop_untrusted_source")},
		{chainCase: dropped("unknown source, the local previous owner holds it", chainStranger6, ack(pod2.conns[0]), hint(fxPod6b, none), "chain_drop_untrusted_source")},
		{chainCase: dropped("unknown source, to prev2 on another node", chainStranger6, ack(40001), hint(none, chainPrev6TX), "chain_drop_untrusted_source")},
		{chainCase{name: "unknown source, the pod holds the connection", frame: frame(chainStranger6, ack(pod1.conns[0]), hint(chainPrev6TX, none)),
			verdict: xdpPass, decap: "decap_gue", chain: "socket"}, fxPod6},
		{chainCase: dropped("known node, unknown remote previous owner", fxNode6, ack(40001), hint(chainUnknown6, none), "chain_drop_unknown_owner")},
		{chainCase: dropped("known node, local prev without the connection, unknown prev2", fxNode6, ack(40001), hint(fxPod6b, chainUnknown6), "chain_drop_unknown_owner")},
		{chainCase{name: "known node, the local previous owner holds it", frame: frame(fxNode6, ack(pod2.conns[0]), hint(fxPod6b, none)),
			verdict: xdpPass, decap: "decap_gue", chain: "chained"}, fxPod6b},
		{chainCase{name: "a known backend chained it here: on to a known owner", frame: frame(chainPrev6TX, ack(40001), hint(chainPrev6TX2, none)),
			verdict: xdpTX, chain: "chained", chainedTo: chainPrev6TX2, dstMAC: fxRouterMAC, srcMAC: f.MAC, from: fxPod6}, none},
	}
	runPodCases(t, f, objs, cases, checkTranslated6)
}
