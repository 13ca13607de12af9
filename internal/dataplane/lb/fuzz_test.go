package lb

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"os/exec"
	"testing"
	"time"
)

// FuzzLBProgram feeds arbitrary frames to the LB program through
// BPF_PROG_TEST_RUN. Whatever arrives, the program must return a defined
// verdict, leave what it passes untouched (unless it encapsulated it for
// the kernel to forward), and emit only well-formed packets to known
// backends or ICMP replies.
//
//	go test -fuzz FuzzLBProgram -fuzztime 30s ./internal/dataplane/
func FuzzLBProgram(f *testing.F) {
	d, fx := newFixtureLB(f)
	// Fuzzing workers are ended without running cleanups: drop the
	// namespace's name now, so that it lives only as long as the thread
	// parked in it, and goes with the worker however that ends.
	if out, err := exec.Command("ip", "netns", "del", fx.Name).CombinedOutput(); err != nil {
		f.Fatalf("ip netns del %s: %v: %s", fx.Name, err, out)
	}
	for _, p := range []pkt{
		tcpTo(fxVIP, 80),
		{Src: fxClient, Dst: fxVIP, Sport: 9, Dport: 53, Proto: 17},
		tcpTo(netip.MustParseAddr("10.99.0.3"), 80),
		tcpTo(netip.MustParseAddr("10.99.0.2"), 80),
		{Src: fxClient, Dst: fxVIP, Sport: 1, Dport: 80, Proto: 6, Options: []byte{1, 1, 1, 0}},
		{Src: fxClient, Dst: fxVIP, Sport: 1, Dport: 80, Proto: 6, FlagsFrag: 0x2000},
	} {
		f.Add(p.Frame(fx.MAC))
	}
	big := tcpTo(netip.MustParseAddr("10.99.0.4"), 80)
	big.Payload = make([]byte, 1400)
	f.Add(big.Frame(fx.MAC))
	// Layer-2 mode: fxVIP is owned, and ARP requests for it answered.
	now, err := Monotonic()
	if err != nil {
		f.Fatal(err)
	}
	if err := d.SetL2Owned([]netip.Addr{fxVIP}, l2MAC, now+24*time.Hour); err != nil {
		f.Fatal(err)
	}
	f.Add(arpRequest(fxVIP).bytes())
	f.Add(arpRequest(netip.MustParseAddr("10.99.0.2")).bytes())

	backends := map[netip.Addr]bool{fxBackend: true, fxRedirBE: true, fxNoNeighBE: true, fxSmallMTU: true}
	f.Fuzz(func(t *testing.T, frame []byte) {
		// BPF_PROG_TEST_RUN refuses XDP frames shorter than an Ethernet
		// header (EINVAL): drop_malformed_eth is out of reach here, as for
		// every fixture (TestShortFrames, docs/architecture.md).
		if len(frame) < 14 {
			frame = append(frame, make([]byte, 14-len(frame))...)
		}
		if len(frame) > 3000 {
			frame = frame[:3000]
		}
		v, out := fx.Run(t, d.objs.XlbLbProg, frame)
		switch v {
		case xdpDrop:
			return
		case xdpPass:
			if bytes.Equal(out, frame) {
				return
			}
			checkEmitted(t, out, map[netip.Addr]bool{fxNoNeighBE: true})
		case xdpTX, xdpRedirect:
			if binary.BigEndian.Uint16(frame[12:]) == 0x0806 {
				checkARPReply(t, frame, out)
				return
			}
			checkEmitted(t, out, backends)
		default:
			t.Fatalf("verdict %d", v)
		}
	})
}

// checkARPReply asserts that out is the reply to the ARP request in:
// from l2MAC for the owned fxVIP, to the asker, everything else kept.
func checkARPReply(t *testing.T, in, out []byte) {
	t.Helper()
	if len(out) != len(in) || len(in) < 42 {
		t.Fatalf("ARP reply of %d bytes to a request of %d", len(out), len(in))
	}
	vip := fxVIP.As4()
	want := append([]byte{}, in...)
	copy(want[0:], in[22:28])  // to the asker's hardware address
	copy(want[6:], l2MAC)      // from the owner's
	want[21] = 2               // a reply
	copy(want[22:], l2MAC)     // the VIP is at the owner's MAC
	copy(want[28:], vip[:])    //
	copy(want[32:], in[22:28]) // to the asker
	copy(want[38:], in[28:32]) // at its address
	if !bytes.Equal(in[38:42], vip[:]) || in[22]&1 != 0 || !bytes.Equal(out, want) {
		t.Fatalf("bad ARP reply:\n in %x\nout %x\nwant %x", in, out, want)
	}
}

// checkEmitted asserts that a frame the program produced is an IPv4
// packet with a valid header checksum, either encapsulated (IPIP or GUE)
// from this node to one of the allowed backends, or an ICMP error.
func checkEmitted(t *testing.T, out []byte, allowed map[netip.Addr]bool) {
	t.Helper()
	if len(out) < 34 || binary.BigEndian.Uint16(out[12:]) != 0x0800 || out[14] != 0x45 {
		t.Fatalf("emitted frame is not IPv4: %x", out)
	}
	ip := out[14:34]
	if csum(ip) != 0 {
		t.Fatalf("emitted IPv4 checksum invalid: %x", ip)
	}
	if int(binary.BigEndian.Uint16(ip[2:])) != len(out)-14 {
		t.Fatalf("emitted total length %d, frame carries %d", binary.BigEndian.Uint16(ip[2:]), len(out)-14)
	}
	src := netip.AddrFrom4([4]byte(ip[12:16]))
	dst := netip.AddrFrom4([4]byte(ip[16:20]))
	if src != fxNode {
		t.Fatalf("emitted from %v, want %v", src, fxNode)
	}
	switch ip[9] {
	case 1:
		if out[34] != 3 || out[35] != 4 || csum(out[34:]) != 0 {
			t.Fatalf("bad ICMP reply %x", out[34:])
		}
	case 4, 17, 41: // 41: an IPv6 packet in IPv4 (IPv6 VIP, IPv4 backend)
		if !allowed[dst] {
			t.Fatalf("encapsulated to %v, not an allowed backend", dst)
		}
	default:
		t.Fatalf("emitted protocol %d", ip[9])
	}
}

// FuzzLBNAT feeds arbitrary frames to the LB program with NAT and DNAT
// services and sessions in both tables. Whatever arrives, the program
// must return a defined verdict, leave what it passes untouched, and
// emit only IPv4 packets whose header, transport or ICMP checksum holds
// exactly when the input's did (the updates are incremental: they keep a
// checksum right, and keep a wrong one wrong; the node's own ICMP errors
// have theirs computed),
// and that go where a translation may send them: to a backend of the
// services from the NAT address or the client, or to a client from the
// VIP, or an ICMP error from the node.
//
//	go test -fuzz FuzzLBNAT -fuzztime 30s ./internal/dataplane/lb/
func FuzzLBNAT(f *testing.F) {
	x := newNATFuzzFixture(f)
	if out, err := exec.Command("ip", "netns", "del", x.f.Name).CombinedOutput(); err != nil {
		f.Fatalf("ip netns del %s: %v: %s", x.f.Name, err, out)
	}
	c := tuple{clientAt(40000), vip(80), 6}
	nodePort := natCandidate(c, 0, natPortMin, natPortMax)
	back := tuple{natBackends[30], netip.AddrPortFrom(fxNode, nodePort), 6}
	for _, frame := range [][]byte{
		segment(c, tcpSYN, nil).Frame(x.f.MAC),
		segment(c, tcpACK, []byte("data")).Frame(x.f.MAC),
		segment(back, tcpACK, []byte("reply")).Frame(x.f.MAC),
		segment(tuple{clientAt(5000), vip(53), 17}, 0, []byte("q")).Frame(x.f.MAC),
		segment(tuple{clientAt(5001), vip(54), 17}, 0, []byte("q")).Frame(x.f.MAC),
		segment(tuple{natBackends[33], clientAt(5001), 17}, 0, []byte("a")).Frame(x.f.MAC),
		icmpError(netip.MustParseAddr("10.0.2.1"), fxVIP, 64, 3, 4, 1300, quoteOf(c.reverse(), c.reverse(), tcpACK, nil), x.f.MAC, srcMAC),
		icmpError(fxBackend, fxNode, 64, 3, 3, 0, quoteOf(back.reverse(), back.reverse(), tcpACK, nil), x.f.MAC, srcMAC),
		segment(tuple{clientAt(40000), vip(82), 6}, tcpACK, make([]byte, 1400)).Frame(x.f.MAC),
	} {
		f.Add(frame)
	}
	backends := map[netip.Addr]bool{}
	for _, ap := range natBackends {
		backends[ap.Addr()] = true
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) < 14 {
			frame = append(frame, make([]byte, 14-len(frame))...)
		}
		if len(frame) > 3000 {
			frame = frame[:3000]
		}
		v, out := x.f.Run(t, x.d.objs.XlbLbProg, frame)
		switch v {
		case xdpDrop:
			return
		case xdpPass:
			if bytes.Equal(out, frame) {
				return
			}
			// Only a translated packet whose next hop is not resolved
			// goes to the kernel changed; none of the fixture's is.
			t.Fatalf("passed a changed frame:\n in %x\nout %x", frame, out)
		case xdpTX, xdpRedirect:
			checkNATEmitted(t, frame, out, backends)
		default:
			t.Fatalf("verdict %d", v)
		}
	})
}

// newNATFuzzFixture is newNATFixture for a fuzz target, with a few
// sessions open.
func newNATFuzzFixture(tb testing.TB) *natFixture {
	requirePrivileges(tb)
	f := newFixtureNS(tb)
	d, err := New(Options{NodeAddr: fxNode, TableSize: fxTableSize, NATSessions: 4096})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { d.Close() })
	x := &natFixture{d: d, f: f, t: tb}
	x.setup()
	c := tuple{clientAt(40000), vip(80), 6}
	src := x.source(segment(c, tcpSYN, nil).Frame(f.MAC))
	x.run(segment(tuple{natBackends[30], src, 6}, tcpSYN|tcpACK, nil).Frame(f.MAC))
	x.run(segment(c, tcpACK, nil).Frame(f.MAC))
	x.run(segment(tuple{clientAt(5001), vip(54), 17}, 0, nil).Frame(f.MAC))
	x.run(segment(tuple{clientAt(40000), vip(82), 6}, tcpSYN, nil).Frame(f.MAC))
	return x
}

// checkNATEmitted asserts that a frame the NAT path sent is what a
// translation of in may be.
func checkNATEmitted(t *testing.T, in, out []byte, backends map[netip.Addr]bool) {
	t.Helper()
	if len(out) < 34 || binary.BigEndian.Uint16(out[12:]) != 0x0800 || out[14]>>4 != 4 {
		t.Fatalf("emitted frame is not IPv4: %x", out)
	}
	ihl := int(out[14]&0xf) * 4
	total := int(binary.BigEndian.Uint16(out[16:]))
	if ihl < 20 || total < ihl || 14+total > len(out) {
		t.Fatalf("emitted IPv4 header invalid: %x", out)
	}
	ip := out[14 : 14+total]
	src, dst := netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
	if ip[9] == 1 && len(ip) >= ihl+8 && ip[ihl] == 3 && ip[ihl+1] == 4 && src == fxNode && ihl == 20 &&
		csum(ip[:20]) == 0 && csum(ip[ihl:]) == 0 {
		return // fragmentation needed, from the node
	}
	inIHL := int(in[14]&0xf) * 4
	if (csum(in[14:14+inIHL]) == 0) != (csum(ip[:ihl]) == 0) {
		t.Fatalf("the IPv4 header checksum went from valid %v to %v:\n in %x\nout %x", csum(in[14:14+inIHL]) == 0, csum(ip[:ihl]) == 0, in, out)
	}
	switch ip[9] {
	case 1:
		if len(ip) < ihl+8 {
			t.Fatalf("emitted ICMP cut short: %x", out)
		}
		inTotal := int(binary.BigEndian.Uint16(in[16:]))
		if (csum(in[14+inIHL:14+inTotal]) == 0) != (csum(ip[ihl:]) == 0) {
			t.Fatalf("a translated ICMP error's checksum went from %v to %v:\n in %x\nout %x", csum(in[14+inIHL:14+inTotal]) == 0, csum(ip[ihl:]) == 0, in, out)
		}
		if !(backends[dst] || src == fxVIP) {
			t.Fatalf("a translated ICMP error from %v to %v", src, dst)
		}
	case 6, 17:
		if !(backends[dst] && (src == fxNode || src == netip.AddrFrom4([4]byte(in[26:30]))) || src == fxVIP) {
			t.Fatalf("translated %v -> %v: neither to a backend nor from the VIP:\n in %x\nout %x", src, dst, in, out)
		}
		checkL4Kept(t, in, out)
	default:
		t.Fatalf("emitted protocol %d", ip[9])
	}
}

// checkL4Kept asserts that the transport checksum of out holds exactly
// when in's did, and that a UDP checksum 0 stayed 0.
func checkL4Kept(t *testing.T, in, out []byte) {
	t.Helper()
	valid := func(f []byte) (bool, bool) {
		ihl := int(f[14]&0xf) * 4
		total := int(binary.BigEndian.Uint16(f[16:]))
		l4 := f[14+ihl : 14+total]
		if f[23] == 17 && len(l4) >= 8 && binary.BigEndian.Uint16(l4[6:]) == 0 {
			return false, true
		}
		s, d := [4]byte(f[26:30]), [4]byte(f[30:34])
		return l4Csum(s, d, f[23], l4) == 0, false
	}
	inOK, inNone := valid(in)
	outOK, outNone := valid(out)
	if inNone != outNone || (!inNone && inOK != outOK) {
		t.Fatalf("transport checksum valid %v (none %v) became %v (none %v):\n in %x\nout %x", inOK, inNone, outOK, outNone, in, out)
	}
}
