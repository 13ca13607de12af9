package decap

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// FuzzBackendProgram feeds arbitrary frames to the backend programs
// through BPF_PROG_TEST_RUN: the XDP program xlb_decap (decapsulation,
// daisy chaining with the chaining sets, the Kubernetes mode's
// translation to local pods) and the TC program xlb_nat_reply (the pods'
// replies). The maps hold a VIP of each family on this host, two local
// pods of each family with translations, connections and flow records,
// and the chaining sets of the chaining tests (IPv6 too), so that every
// branch is reachable. Whatever arrives:
//
//   - each program returns a verdict it can give;
//
//   - a frame xlb_decap sends back out (XDP_TX, redirect, or through the
//     stack re-addressed) is a GUE packet, over IPv4 or IPv6, from a known
//     xlb node or backend that goes to a known previous owner, with
//     nothing changed but the outer addresses, TTL or hop limit and
//     checksums and the hint's previous owners;
//
//   - a frame it passes is untouched, or exactly the inner packet of the
//     tunnel, for a local VIP, or translated for a local pod in the
//     translation's bytes only, inside the inner datagram;
//
//   - the reply program changes a frame only in the bytes of a
//     translation back to a VIP, and only for a local pod's packet.
//
//     go test -fuzz FuzzBackendProgram -fuzztime 30s ./internal/dataplane/
func FuzzBackendProgram(f *testing.F) {
	fx, objs := newChainFixture(f)
	prepareChain6(f, fx, objs)
	conn := dialVIP(f, fx)
	pod1 := newFixturePod(f, fx, "vpod1", fxPod1)
	pod2 := newFixturePod(f, fx, "vpod2", fxPod2)
	pods := []*podNS{pod1, pod2}
	translateFor(f, objs, pods, pods...)
	pod61 := newFixturePod(f, fx, "vpod61", fxPod6)
	pod62 := newFixturePod(f, fx, "vpod62", fxPod6b)
	pods6 := []*podNS{pod61, pod62}
	translateFor(f, objs, pods6, pods6...)
	for _, p := range pods {
		if err := objs.NatSvcs.Put(natSvcKeyOf(fxVIP, p.addr, 53), be16bytes(5353)); err != nil {
			f.Fatal(err)
		}
		// UDP: nat_svc_key's protocol is 17.
		k := natSvcKeyOf(fxVIP, p.addr, 53)
		k.Proto = wire.ProtoUDP
		if err := objs.NatSvcs.Put(k, be16bytes(5353)); err != nil {
			f.Fatal(err)
		}
	}
	// A reply flow of pod1 and the fallback for pod2's port: the reply
	// program's both lookups find something.
	flow := wire.NATFlowKey{Pod: wire.AddrOf(fxPod1), Client: wire.AddrOf(fxClient), PodPort: wire16(podPort), ClientPort: wire16(40001), Proto: 6}
	if err := objs.NatFlows.Put(flow, wire.NATVIP{Vip: wire.AddrOf(fxVIP), Port: wire16(80)}); err != nil {
		f.Fatal(err)
	}
	rev := wire.NATRevKey{Pod: wire.AddrOf(fxPod2), PodPort: wire16(podPort), Proto: 6}
	if err := objs.NatRevPorts.Put(rev, wire.NATVIP{Vip: wire.AddrOf(fxVIP), Port: wire16(80)}); err != nil {
		f.Fatal(err)
	}
	// The first IPv6 pod's UDP translation, a reply flow and the
	// fallback for its port.
	for _, proto := range []uint8{wire.ProtoTCP, wire.ProtoUDP} {
		k := natSvcKeyOf(fxVIP6, fxPod6, 80)
		k.Proto = proto
		if err := objs.NatSvcs.Put(k, be16bytes(podPort)); err != nil {
			f.Fatal(err)
		}
	}
	if err := objs.NatPods.Put(wire.AddrOf(fxPod6), uint8(1)); err != nil {
		f.Fatal(err)
	}
	flow6 := wire.NATFlowKey{Pod: wire.AddrOf(fxPod6), Client: wire.AddrOf(fxClient6), PodPort: wire16(podPort), ClientPort: wire16(40001), Proto: 6}
	if err := objs.NatFlows.Put(flow6, wire.NATVIP{Vip: wire.AddrOf(fxVIP6), Port: wire16(80)}); err != nil {
		f.Fatal(err)
	}
	rev6 := wire.NATRevKey{Pod: wire.AddrOf(fxPod6), PodPort: wire16(podPort), Proto: 17}
	if err := objs.NatRevPorts.Put(rev6, wire.NATVIP{Vip: wire.AddrOf(fxVIP6), Port: wire16(80)}); err != nil {
		f.Fatal(err)
	}
	// Fuzzing workers are ended without running cleanups: drop the
	// namespaces' names now, so that each lives only as long as the
	// thread parked in it, and goes with the worker however that ends.
	for _, ns := range []string{fx.Name, pod1.name, pod2.name, pod61.name, pod62.name} {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			f.Fatalf("ip netns del %s: %v: %s", ns, err, out)
		}
	}

	// The seeds must reach every kind of outcome the checks know, or
	// the checks could pass for want of cases.
	seen := map[string]bool{}
	for _, s := range backendSeeds(fx, conn, pod1, pod2, pod61, pod62) {
		f.Add(s)
		decap, reply := runBackendFrame(f, fx, objs, s)
		seen[decap], seen[reply] = true, true
	}
	for _, k := range []string{"drop", "sent on", "sent on through the stack", "sent on over IPv6", "sent on over IPv6 through the stack",
		"untouched", "decapsulated", "decapsulated IPv6", "translated for a pod",
		"translated for an IPv6 pod", "ICMPv6 error translated for an IPv6 pod", "reply unchanged", "reply translated", "IPv6 reply translated",
		"ICMP error translated", "IPv6 ICMP error translated"} {
		if !seen[k] {
			f.Errorf("no seed gives %q (seen: %v): add one", k, seen)
		}
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		// BPF_PROG_TEST_RUN refuses frames shorter than an Ethernet
		// header (EINVAL), as for every fixture (TestShortFrames).
		if len(frame) < 14 {
			frame = append(frame, make([]byte, 14-len(frame))...)
		}
		if len(frame) > 3000 {
			frame = frame[:3000]
		}
		runBackendFrame(t, fx, objs, frame)
	})
}

// runBackendFrame runs frame through both programs, checks their
// outputs and says what each did.
func runBackendFrame(t testing.TB, fx *fixtureNS, objs *backendObjects, frame []byte) (decap, reply string) {
	t.Helper()
	v, out := fx.Run(t, objs.XlbDecap, frame)
	decap = checkDecapOutput(t, frame, v, out)
	// BPF_PROG_TEST_RUN refuses a TC frame whose ethertype says IPv4 or
	// IPv6 but that is too short for the header (EINVAL): no stack hands
	// such a frame to TC, so it is not run.
	if et := binary.BigEndian.Uint16(frame[12:]); et == 0x0800 && len(frame) < 14+20 || et == 0x86dd && len(frame) < 14+40 {
		return decap, "not run"
	}
	rv, rout := runTC(t, objs.XlbNatReply, frame)
	return decap, checkReplyOutput(t, frame, rv, rout)
}

// backendSeeds are frames of the backend tests: tunnels to the host and
// to a pod, with and without a hint, from known and unknown sources,
// and replies of the pods.
func backendSeeds(fx *fixtureNS, conn uint16, pod1, pod2, pod61, pod62 *podNS) [][]byte {
	now := uint32(time.Now().Unix())
	var none netip.Addr
	ack := func(sport, dport uint16) []byte { return tcpSeg(fx.MAC, sport, dport, 1000, 1, 0x10) }
	syn := tcpSeg(fx.MAC, 40000, 80, 1000, 0, 0x02)
	udp := pkt{Src: fxClient, Dst: fxVIP, Sport: 5353, Dport: 53, Proto: 17, Payload: []byte("q")}.Frame(fx.MAC)
	hint := func(prev, prev2 netip.Addr) []byte { return hintGUE(prev, prev2, now, now) }
	var out [][]byte
	for _, dst := range []netip.Addr{fxBackend, fxPod1} {
		gue := func(inner, h []byte) []byte { return encapsulate(inner, dst, wire.GUEPort, h) }
		out = append(out,
			encapsulate(ack(conn, 80), dst, 0, nil),
			gue(syn, []byte{0, 4, 0, 0}),
			gue(udp, nil),
			gue(ack(conn, 80), hint(chainPrevTX, none)),
			gue(ack(40001, 80), hint(chainPrevTX, chainPrevRedir)),
			gue(ack(40001, 80), hint(chainPrevNoNeigh, none)),
			gue(ack(40001, 80), hint(chainUnknown, none)),
			gue(ack(40001, 80), hint(fxPod2, chainPrevTX)),
			gue(ack(pod2.conns[0], 80), hint(fxPod2, none)),
			gue(ack(pod1.conns[0], 80), hint(chainPrevTX, none)),
			gue(ack(40001, 80), hintGUE(none, none, now, now-1)),
			fromSource(gue(ack(40001, 80), hint(chainPrevTX, none)), chainStranger),
			fromSource(gue(ack(40001, 80), hint(chainPrevRedir, none)), chainPrevTX),
		)
	}
	// Replies: pod1's recorded flow, pod2's fallback, an untracked one,
	// and an ICMP error from pod1 about a translated packet.
	reply := func(src netip.Addr, sport, dport uint16) []byte {
		return pkt{Src: src, Dst: fxClient, Sport: sport, Dport: dport, Proto: 6, TCPFlags: 0x12}.Frame(fx.MAC)
	}
	out = append(out, reply(fxPod1, podPort, 40001), reply(fxPod2, podPort, 40002), reply(fxPod1, podPort, 40009))
	quoted := pkt{Src: fxClient, Dst: fxPod1, Sport: 40001, Dport: podPort, Proto: 6}.Frame(fx.MAC)[14:]
	icmp := append([]byte{3, 4, 0, 0, 0, 0, 5, 0xdc}, quoted[:28]...)
	binary.BigEndian.PutUint16(icmp[2:], csum(icmp))
	ip := pkt{Src: fxPod1, Dst: fxClient, Proto: 1}.Frame(fx.MAC)[:14+20]
	ipICMP := append(append([]byte{}, ip...), icmp...)
	binary.BigEndian.PutUint16(ipICMP[16:], uint16(20+len(icmp)))
	ipICMP[24], ipICMP[25] = 0, 0
	binary.BigEndian.PutUint16(ipICMP[24:], csum(ipICMP[14:34]))
	out = append(out, ipICMP)
	// And an ICMP error to the VIP, tunnelled to pod1, about a reply.
	fromVIP := pkt{Src: fxVIP, Dst: fxClient, Sport: 80, Dport: 40001, Proto: 6}.Frame(fx.MAC)[14:]
	icmpIn := append([]byte{3, 4, 0, 0, 0, 0, 5, 0xdc}, fromVIP[:28]...)
	binary.BigEndian.PutUint16(icmpIn[2:], csum(icmpIn))
	in := pkt{Src: fxClient, Dst: fxVIP, Proto: 1}.Frame(fx.MAC)[:14+20]
	inICMP := append(append([]byte{}, in...), icmpIn...)
	binary.BigEndian.PutUint16(inICMP[16:], uint16(20+len(icmpIn)))
	inICMP[24], inICMP[25] = 0, 0
	binary.BigEndian.PutUint16(inICMP[24:], csum(inICMP[14:34]))
	out = append(out, encapsulate(inICMP, fxPod1, wire.GUEPort, []byte{0, 4, 0, 0}), encapsulate(inICMP, fxPod1, 0, nil))
	return append(out, backendSeeds6(fx, pod61, pod62)...)
}

// backendSeeds6 are IPv6 frames: tunnels of every family pair to this
// host (IPv6 VIP inside, or the IPv4 one under an IPv6 outer header),
// with extension headers, to a pod, and neighbour discovery.
func backendSeeds6(fx *fixtureNS, pod61, pod62 *podNS) [][]byte {
	tcp6 := seg{src: fxClient6, dst: fxVIP6, sport: 40000, dport: 80, proto: nhTCP, seq: 1000, flags: 0x02}.datagram()
	udp6 := seg{src: fxClient6, dst: fxVIP6, sport: 5353, dport: 53, proto: nhUDP, payload: []byte("q")}.datagram()
	tcp4 := seg{src: fxClient, dst: fxVIP, sport: 40000, dport: 80, proto: nhTCP, seq: 1000}.datagram()
	ack6 := seg{src: fxClient6, dst: fxVIP6, sport: 40001, dport: 80, proto: nhTCP, seq: 1000, ack: 1, flags: 0x10}.datagram()
	now := uint32(time.Now().Unix())
	var none netip.Addr
	var out [][]byte
	// Hinted, over IPv4: chained, through the stack, or refused.
	for _, h := range [][]byte{hintGUE6(chainPrevTX, none, now, now), hintGUE6(chainPrevNoNeigh, chainPrevTX, now, now),
		hintGUE6(chainUnknown, none, now, now), hintGUE6(none, none, now, now-1)} {
		out = append(out, ethFrame(fx.MAC, tunnel{dst: fxBackend, gue: h}.wrap(ack6)), ethFrame(fx.MAC, tunnel{dst: fxBackend6, gue: h}.wrap(ack6)))
	}
	// The hint with IPv6 owners, over either family and to a pod.
	for _, h := range [][]byte{hint6GUE(nhIPv6, chainPrev6TX, chainPrev6TX2, now, now), hint6GUE(nhIPv6, chainUnknown6, none, now, now),
		hint6GUE(nhIPv6, none, none, now, now-1)} {
		for _, dst := range []netip.Addr{fxBackend6, fxBackend, fxPod6} {
			out = append(out, ethFrame(fx.MAC, tunnel{dst: dst, gue: h}.wrap(ack6)))
		}
	}
	out = append(out, ethFrame(fx.MAC, tunnel{dst: fxBackend6, gue: hint6GUE(nhIPIP, chainPrev6TX, none, now, now)}.wrap(tcp4)))
	// To the first IPv6 pod: its own connection, the second pod's (its
	// previous owner), an unresolved next hop, an unknown source.
	ackOf := func(sport uint16) []byte {
		return seg{src: fxClient6, dst: fxVIP6, sport: sport, dport: 80, proto: nhTCP, seq: 1000, ack: 1, flags: 0x10}.datagram()
	}
	toPod6 := func(inner, h []byte) []byte { return ethFrame(fx.MAC, tunnel{dst: fxPod6, gue: h}.wrap(inner)) }
	stranger := toPod6(ack6, hint6GUE(nhIPv6, chainPrev6TX, none, now, now))
	copy(stranger[14+8:14+24], chainStranger6.AsSlice())
	out = append(out,
		toPod6(ackOf(pod61.conns[0]), hint6GUE(nhIPv6, chainPrev6TX, none, now, now)),
		toPod6(ackOf(pod62.conns[0]), hint6GUE(nhIPv6, fxPod6b, none, now, now)),
		toPod6(ack6, hint6GUE(nhIPv6, fxPod6b, chainPrev6NoNeigh, now, now)),
		stranger)
	for _, tn := range []tunnel{
		{dst: fxBackend6}, {dst: fxBackend}, {dst: fxBackend6, gue: gue6}, {dst: fxBackend6, gue: gueV1},
		{dst: fxBackend6, gue: gue6Hint}, {dst: fxBackend, gue: gue6}, {dst: fxBackend, gue: gue6Hint},
		{dst: fxBackend6, ext: []extHdr{{nhHop, 8}, {nhDst, 16}}}, {dst: fxBackend6, gue: gue6, ext: []extHdr{{nhDst, 8}}},
		{dst: fxPod1}, {dst: fxPod1, gue: gue6}, {dst: fxOther6}, {dst: fxPod6}, {dst: fxPod6, gue: gue6},
		{dst: fxPod6, gue: gueV1, ext: []extHdr{{nhDst, 8}}},
	} {
		out = append(out, ethFrame(fx.MAC, tn.wrap(tcp6)), ethFrame(fx.MAC, tn.wrap(udp6)))
	}
	for _, tn := range []tunnel{{dst: fxBackend6}, {dst: fxBackend6, gue: gue4}, {dst: fxBackend6, ext: []extHdr{{nhDst, 8}}}} {
		out = append(out, ethFrame(fx.MAC, tn.wrap(tcp4)))
	}
	// Replies of the IPv6 pod: by its flow, by the fallback, untracked.
	for _, r := range []seg{
		{src: fxPod6, dst: fxClient6, sport: podPort, dport: 40001, proto: nhTCP, flags: 0x12},
		{src: fxPod6, dst: fxClient6, sport: podPort, dport: 40002, proto: nhUDP, payload: []byte("a")},
		{src: fxPod6, dst: fxClient6, sport: podPort, dport: 40003, proto: nhTCP},
	} {
		out = append(out, ethFrame(fx.MAC, r.datagram()))
	}
	// ICMPv6 errors: a Packet Too Big to the VIP about the pod's reply,
	// tunnelled to the pod, and a port unreachable from the pod about
	// the client's translated packet.
	icmp6 := func(src, dst netip.Addr, typ uint8, quote []byte) []byte {
		m := append([]byte{typ, 0, 0, 0, 0, 0, 5, 0xdc}, quote[:min(len(quote), 40+8)]...)
		binary.BigEndian.PutUint16(m[2:], l4Csum(src, dst, nhICMP6, m))
		return ipDatagram(src, dst, nhICMP6, nil, m)
	}
	fromVIP := seg{src: fxVIP6, dst: fxClient6, sport: 80, dport: 40001, proto: nhTCP}.datagram()
	toPod := seg{src: fxClient6, dst: fxPod6, sport: 40001, dport: podPort, proto: nhTCP}.datagram()
	out = append(out, ethFrame(fx.MAC, tunnel{dst: fxPod6}.wrap(icmp6(fxNode6, fxVIP6, 2, fromVIP))),
		ethFrame(fx.MAC, icmp6(fxPod6, fxClient6, 1, toPod)), ethFrame(fx.MAC, icmp6(fxBackend6, fxClient6, 3, toPod)))
	ns := append([]byte{135, 0, 0, 0, 0, 0, 0, 0}, fxBackend6.AsSlice()...)
	return append(out, ethFrame(fx.MAC, ipDatagram(fxNode6, netip.MustParseAddr("ff02::1:ff00:2"), nhICMP6, nil, ns)), ethFrame(fx.MAC, tcp6))
}

func wire16(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.LittleEndian.Uint16(b[:])
}

// runTC runs a TC program once on frame and returns its verdict and the
// frame it left.
func runTC(t testing.TB, prog *ebpf.Program, frame []byte) (uint32, []byte) {
	t.Helper()
	out := make([]byte, len(frame)+256)
	opts := &ebpf.RunOptions{Data: frame, DataOut: out}
	v, err := prog.Run(opts)
	if err != nil {
		t.Fatalf("BPF_PROG_TEST_RUN (TC): %v", err)
	}
	return v, out[:len(opts.DataOut)]
}

// The fuzz fixture's sets: what may be sent back out, from where.
func fuzzTrusted(a netip.Addr) bool {
	return prefixesContain(chainSets6.From, a) || prefixesContain(chainSets6.To, a)
}

func prefixesContain(ps []netip.Prefix, a netip.Addr) bool {
	return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(a) })
}

var (
	fxPod6    = netip.MustParseAddr("fd00:244::2")
	fuzzHosts = []netip.Addr{fxBackend, fxBackend6}
	fuzzPods6 = []netip.Addr{fxPod6, fxPod6b}
	fuzzPods  = []netip.Addr{fxPod1, fxPod2, fxPod6, fxPod6b}
)

func wireAddr(b []byte) netip.Addr { return netip.AddrFrom4([4]byte(b[:4])) }

// checkDecapOutput asserts the invariants of xlb_decap's verdict v on
// frame, which left out.
func checkDecapOutput(t testing.TB, frame []byte, v uint32, out []byte) string {
	t.Helper()
	switch v {
	case xdpDrop:
		if len(out) != len(frame) {
			t.Fatalf("dropped frame changed length %d -> %d", len(frame), len(out))
		}
		return "drop"
	case xdpTX, xdpRedirect:
		if binary.BigEndian.Uint16(frame[12:]) == 0x86dd {
			checkSentOn6(t, frame, out, false)
			return "sent on over IPv6"
		}
		checkSentOn(t, frame, out, false)
		return "sent on"
	case xdpPass:
		switch {
		case bytes.Equal(out, frame):
			return "untouched"
		case len(out) == len(frame) && binary.BigEndian.Uint16(frame[12:]) == 0x86dd:
			checkSentOn6(t, frame, out, true)
			return "sent on over IPv6 through the stack"
		case len(out) == len(frame):
			checkSentOn(t, frame, out, true)
			return "sent on through the stack"
		default:
			return checkDecapsulated(t, frame, out)
		}
	}
	t.Fatalf("verdict %d: not one xlb_decap gives", v)
	return ""
}

// checkSentOn asserts that out is frame chained to a previous owner:
// from a known source, to a known previous owner, changed only where
// chaining changes it. viaStack: handed to the stack re-addressed (the
// outer source stays).
func checkSentOn(t testing.TB, frame, out []byte, viaStack bool) {
	t.Helper()
	const hintEnd = 14 + 20 + 8 + 4 + 16
	if len(out) != len(frame) || len(frame) < hintEnd {
		t.Fatalf("sent on: %d bytes from %d, want the same length and a hinted GUE packet", len(out), len(frame))
	}
	if binary.BigEndian.Uint16(frame[12:]) != 0x0800 || frame[14] != 0x45 || frame[14+9] != 17 ||
		binary.BigEndian.Uint16(frame[14+20+2:]) != wire.GUEPort || frame[14+20+8]&0x3f != 4 {
		t.Fatalf("sent on a frame that is no hinted GUE packet: %x", frame)
	}
	src, dst := wireAddr(frame[14+12:]), wireAddr(frame[14+16:])
	newSrc, newDst := wireAddr(out[14+12:]), wireAddr(out[14+16:])
	checkSentOnAddrs(t, src, dst, newSrc, newDst, viaStack)
	if csum(out[14:34]) != 0 || out[14+8] != 64 || out[14+20+6] != 0 || out[14+20+7] != 0 {
		t.Fatalf("sent-on headers: IP checksum %x, TTL %d, UDP checksum %x", out[24:26], out[22], out[40:42])
	}
	// What chaining may change: the MACs (not via the stack), the outer
	// TTL, checksum and addresses, the UDP checksum, the hint's two
	// previous owners.
	for i := range frame {
		if frame[i] == out[i] {
			continue
		}
		switch {
		case i < 12 && !viaStack:
		case i == 14+8, i == 14+10, i == 14+11:
		case i >= 14+12 && i < 14+20:
		case i == 14+20+6, i == 14+20+7:
		case i >= 14+20+8+4 && i < 14+20+8+12:
		default:
			t.Fatalf("sending on changed byte %d: %x -> %x", i, frame[i], out[i])
		}
	}
}

// checkSentOnAddrs checks the addresses of a tunnel src -> dst sent on
// as newSrc -> newDst, in either family: from a trusted sender, to this
// host or a local pod, on to a known previous owner, from the tunnel's
// destination (or, via the stack, its source).
func checkSentOnAddrs(t testing.TB, src, dst, newSrc, newDst netip.Addr, viaStack bool) {
	t.Helper()
	if !fuzzTrusted(src) {
		t.Fatalf("sent on a packet from %v, which is no known xlb node or backend", src)
	}
	if !prefixesContain(chainSets6.To, newDst) {
		t.Fatalf("sent on to %v, which is no known previous owner", newDst)
	}
	wantSrc := dst
	if viaStack {
		wantSrc = src
	}
	if newSrc != wantSrc || !(slices.Contains(fuzzHosts, dst) || slices.Contains(fuzzPods, dst)) {
		t.Fatalf("sent on from %v (tunnel %v -> %v): want from %v, a tunnel to this host or a local pod", newSrc, src, dst, wantSrc)
	}
}

// checkSentOn6 is checkSentOn for a tunnel over IPv6: the GUE packet
// with the 40-byte hint after the option headers decap6 skips; hop
// limit 64, the UDP checksum 0.
func checkSentOn6(t testing.TB, frame, out []byte, viaStack bool) {
	t.Helper()
	if len(out) != len(frame) || len(frame) < 14+40 {
		t.Fatalf("sent on over IPv6: %d bytes from %d, want the same length and a hinted GUE packet", len(out), len(frame))
	}
	off, nh := 14+40, frame[14+6]
	for i := 0; i < 2 && (nh == nhHop && i == 0 || nh == nhDst) && off+2 <= len(frame); i++ {
		nh, off = frame[off], off+(int(frame[off+1])+1)*8
	}
	udp, gue := off, off+8
	if nh != nhUDP || len(frame) < gue+44 || binary.BigEndian.Uint16(frame[udp+2:]) != wire.GUEPort || frame[gue]&0x3f != 10 {
		t.Fatalf("sent on a frame that is no GUE packet over IPv6 with the 40-byte hint: %x", frame)
	}
	addr := func(b []byte) netip.Addr { return netip.AddrFrom16([16]byte(b[:16])) }
	src, dst := addr(frame[14+8:]), addr(frame[14+24:])
	newSrc, newDst := addr(out[14+8:]), addr(out[14+24:])
	checkSentOnAddrs(t, src, dst, newSrc, newDst, viaStack)
	if out[14+7] != 64 || out[udp+6] != 0 || out[udp+7] != 0 {
		t.Fatalf("sent-on headers: hop limit %d, UDP checksum %x", out[14+7], out[udp+6:udp+8])
	}
	// What chaining may change: the MACs (not via the stack), the hop
	// limit and addresses, the UDP checksum, the hint's two owners.
	for i := range frame {
		if frame[i] == out[i] {
			continue
		}
		switch {
		case i < 12 && !viaStack:
		case i == 14+7:
		case i >= 14+8 && i < 14+40:
		case i == udp+6, i == udp+7:
		case i >= gue+4 && i < gue+4+32:
		default:
			t.Fatalf("sending on over IPv6 changed byte %d: %x -> %x", i, frame[i], out[i])
		}
	}
}

// checkDecapsulated asserts that out, shorter than frame, is frame's
// inner packet: to a local VIP unchanged, or to a local pod translated,
// with the Ethernet type of its family.
func checkDecapsulated(t testing.TB, frame, out []byte) string {
	t.Helper()
	strip := len(frame) - len(out)
	var validStrip bool
	var dst netip.Addr
	if binary.BigEndian.Uint16(frame[12:]) == 0x86dd {
		// The IPv6 header, options in 8-byte units, UDP and GUE.
		validStrip = strip >= 40 && strip <= 40+2*2048+8+4+31*4 && strip%4 == 0
		if len(frame) >= 14+40 {
			dst = netip.AddrFrom16([16]byte(frame[14+24 : 14+40]))
		}
	} else {
		validStrip = strip == 20 || strip == 28 || strip >= 32 && strip <= 32+31*4 && (strip-32)%4 == 0
		dst = wireAddr(frame[14+16:])
	}
	if !validStrip || !bytes.Equal(out[:12], frame[:12]) || len(out) < 14+20 {
		t.Fatalf("passed %d of %d bytes: no tunnel header of xlb's stripped", len(out), len(frame))
	}
	inner, orig := out[14:], frame[14+strip:]
	inner6 := orig[0]>>4 == 6
	if et := binary.BigEndian.Uint16(out[12:]); inner6 != (et == 0x86dd) || !inner6 && et != 0x0800 {
		t.Fatalf("passed an IPv%d packet with Ethernet type %#04x", orig[0]>>4, et)
	}
	if inner6 {
		if len(orig) < 40 || 40+int(binary.BigEndian.Uint16(orig[4:])) > len(orig) {
			t.Fatalf("passed an IPv6 packet cut short: %x", orig)
		}
		if slices.Contains(fuzzHosts, dst) {
			if !bytes.Equal(inner, orig) || netip.AddrFrom16([16]byte(orig[24:40])) != fxVIP6 {
				t.Fatalf("decapsulated an IPv6 packet (tunnel to %v): changed, or not to the VIP (%x)", dst, orig[24:40])
			}
			return "decapsulated IPv6"
		}
		// Translated for an IPv6 pod: its address and port, and the
		// transport checksum, nothing else; of an ICMPv6 error, the
		// quote's source address and port too.
		// A local previous owner that holds the connection gets it in
		// the tunnel's pod's stead.
		if !slices.Contains(fuzzPods6, dst) || !slices.Contains(fuzzPods6, netip.AddrFrom16([16]byte(inner[24:40]))) ||
			orig[6] != nhTCP && orig[6] != nhUDP && orig[6] != nhICMP6 {
			t.Fatalf("passed an IPv6 packet to %x, tunnel to %v: neither this host's VIP nor the IPv6 pod", inner[24:40], dst)
		}
		allowed := func(i int) bool {
			switch orig[6] {
			case nhTCP:
				return i == 42 || i == 43 || i == 56 || i == 57
			case nhUDP:
				return i == 42 || i == 43 || i == 46 || i == 47
			}
			return i == 42 || i == 43 || i >= 48+8 && i < 48+24 || i == 88 || i == 89
		}
		for i := range orig {
			if orig[i] != inner[i] && !(i >= 24 && i < 40 || allowed(i)) {
				t.Fatalf("translation for an IPv6 pod changed byte %d: %x -> %x", i, orig[i], inner[i])
			}
		}
		if orig[6] == nhICMP6 {
			return "ICMPv6 error translated for an IPv6 pod"
		}
		return "translated for an IPv6 pod"
	}
	innerLen := int(binary.BigEndian.Uint16(orig[2:]))
	if innerLen > len(orig) || innerLen < 20 {
		t.Fatalf("passed an inner packet of length %d in %d bytes", innerLen, len(orig))
	}
	if slices.Contains(fuzzHosts, dst) {
		if !bytes.Equal(inner, orig) || wireAddr(orig[16:]) != fxVIP {
			t.Fatalf("decapsulated for this host: inner packet changed, or not to the VIP (%v)", wireAddr(orig[16:]))
		}
		return "decapsulated"
	}
	if !slices.Contains(fuzzPods, wireAddr(inner[16:])) {
		t.Fatalf("passed to %v, tunnel to %v: neither this host's VIP nor a local pod", wireAddr(inner[16:]), dst)
	}
	// Translated: only the translation's bytes, all inside the inner
	// datagram.
	ihl := int(orig[0]&0xf) * 4
	allowed := map[int]bool{10: true, 11: true, 16: true, 17: true, 18: true, 19: true}
	switch orig[9] {
	case 6, 17:
		off := 16
		if orig[9] == 17 {
			off = 6
		}
		for _, i := range []int{ihl + 2, ihl + 3, ihl + off, ihl + off + 1} {
			allowed[i] = true
		}
	case 1:
		q := ihl + 8
		qihl := 0
		if len(orig) > q {
			qihl = int(orig[q]&0xf) * 4
		}
		for _, i := range []int{ihl + 2, ihl + 3, q + 10, q + 11, q + 12, q + 13, q + 14, q + 15, q + qihl, q + qihl + 1} {
			allowed[i] = true
		}
	}
	for i := range orig {
		if orig[i] != inner[i] && (!allowed[i] || i >= innerLen) {
			t.Fatalf("translation for a pod changed byte %d of the inner packet (length %d): %x -> %x", i, innerLen, orig[i], inner[i])
		}
	}
	return "translated for a pod"
}

// checkReplyOutput asserts the invariants of xlb_nat_reply's verdict v
// on frame, which left out.
func checkReplyOutput(t testing.TB, frame []byte, v uint32, out []byte) string {
	t.Helper()
	const tcNext, tcShot = 0xffffffff, 2
	if v != tcNext && v != tcShot {
		t.Fatalf("verdict %d: not one xlb_nat_reply gives", v)
	}
	if len(out) != len(frame) {
		t.Fatalf("reply changed length %d -> %d", len(frame), len(out))
	}
	if bytes.Equal(out, frame) {
		return "reply unchanged"
	}
	if len(frame) >= 14+40 && binary.BigEndian.Uint16(frame[12:]) == 0x86dd {
		// An IPv6 pod's reply: its source address and port become the
		// VIP's, the transport checksum follows; nothing else. Of an
		// ICMPv6 error about a packet to the pod: the quote's
		// destination address and port, the checksum, and the source
		// if the pod sent it.
		ip := frame[14:]
		src, nsrc := netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(out[14+8:14+24]))
		if ip[6] == nhICMP6 {
			q := 14 + 48
			if len(frame) < q+44 || !slices.Contains(fuzzPods6, netip.AddrFrom16([16]byte(frame[q+24:q+40]))) || netip.AddrFrom16([16]byte(out[q+24:q+40])) != fxVIP6 {
				t.Fatalf("ICMPv6 error changed, its quote's destination not the IPv6 pod become the VIP: %x -> %x", frame, out)
			}
			if src != nsrc && (!slices.Contains(fuzzPods6, src) || nsrc != fxVIP6) {
				t.Fatalf("ICMPv6 error from %v became from %v: only the pod's source becomes the VIP's", src, nsrc)
			}
			for i := range frame {
				if frame[i] != out[i] && !(i >= 14+8 && i < 14+24 || i == 14+42 || i == 14+43 || i >= q+24 && i < q+40 || i == q+42 || i == q+43) {
					t.Fatalf("reply program changed byte %d of an ICMPv6 error: %x -> %x", i, frame[i], out[i])
				}
			}
			return "IPv6 ICMP error translated"
		}
		if !slices.Contains(fuzzPods6, src) || nsrc != fxVIP6 || ip[6] != nhTCP && ip[6] != nhUDP {
			t.Fatalf("IPv6 reply from %v (next header %d) became from %v: want the IPv6 pod's TCP or UDP become the VIP's", src, ip[6], nsrc)
		}
		off := 14 + 40 + 16
		if ip[6] == nhUDP {
			off = 14 + 40 + 6
		}
		for i := range frame {
			if frame[i] != out[i] && !(i >= 14+8 && i < 14+24 || i == 14+40 || i == 14+41 || i == off || i == off+1) {
				t.Fatalf("reply program changed byte %d of an IPv6 reply: %x -> %x", i, frame[i], out[i])
			}
		}
		return "IPv6 reply translated"
	}
	if len(frame) < 34 || binary.BigEndian.Uint16(frame[12:]) != 0x0800 {
		t.Fatalf("reply program changed a frame that is no IPv4 packet: %x", frame)
	}
	ip := frame[14:]
	ihl := int(ip[0]&0xf) * 4
	l4 := 14 + ihl
	allowed := map[int]bool{24: true, 25: true}
	if src, nsrc := wireAddr(ip[12:]), wireAddr(out[26:]); src != nsrc {
		if !slices.Contains(fuzzPods, src) || nsrc != fxVIP {
			t.Fatalf("reply source %v became %v: want a local pod's become the VIP", src, nsrc)
		}
		for i := 26; i < 30; i++ {
			allowed[i] = true
		}
	}
	switch ip[9] {
	case 6, 17:
		off := 16
		if ip[9] == 17 {
			off = 6
		}
		for _, i := range []int{l4, l4 + 1, l4 + off, l4 + off + 1} {
			allowed[i] = true
		}
	case 1:
		q := l4 + 8
		qihl := int(frame[q]&0xf) * 4
		if !slices.Contains(fuzzPods, wireAddr(frame[q+16:])) || wireAddr(out[q+16:]) != fxVIP {
			t.Fatalf("ICMP quote's destination %v became %v: want a local pod's become the VIP", wireAddr(frame[q+16:]), wireAddr(out[q+16:]))
		}
		for _, i := range []int{l4 + 2, l4 + 3, q + 10, q + 11, q + 16, q + 17, q + 18, q + 19, q + qihl + 2, q + qihl + 3} {
			allowed[i] = true
		}
	}
	for i := range frame {
		if frame[i] != out[i] && !allowed[i] {
			t.Fatalf("reply program changed byte %d: %x -> %x", i, frame[i], out[i])
		}
	}
	if ip[9] == 1 {
		return "ICMP error translated"
	}
	return "reply translated"
}
