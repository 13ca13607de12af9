package backendhost

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/dataplane/decap"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// Addresses of the BPF_PROG_TEST_RUN fixtures.
var (
	fxClient  = netip.MustParseAddr("10.0.1.2")
	fxLB      = netip.MustParseAddr("10.0.2.1")
	fxNode    = netip.MustParseAddr("10.0.2.2") // the node's own address
	fxRouter  = netip.MustParseAddr("10.0.9.1") // a router on the reply path
	fxVIP1    = netip.MustParseAddr("10.99.0.1")
	fxVIP2    = netip.MustParseAddr("10.99.0.2")
	fxPod1    = netip.MustParseAddr("10.244.1.2")
	fxPod2    = netip.MustParseAddr("10.244.1.3")
	fxFarPod  = netip.MustParseAddr("10.244.2.2") // a pod on another node
	fxEntries = []NATEntry{
		{fxVIP1, 80, wire.ProtoTCP, fxPod1, 8080},
		{fxVIP1, 80, wire.ProtoTCP, fxPod2, 8080},
		{fxVIP2, 80, wire.ProtoTCP, fxPod1, 8080}, // a second VIP on the same pod port
		{fxVIP1, 53, wire.ProtoUDP, fxPod1, 5353},
	}
)

// natFixture is the backend object loaded without pinning or attaching,
// with the host-mode VIP fxVIP1 on "lo" and the NAT entries fxEntries.
type natFixture struct {
	objs struct {
		Decap      *ebpf.Program `ebpf:"xlb_decap"`
		Reply      *ebpf.Program `ebpf:"xlb_nat_reply"`
		HostAddrs  *ebpf.Map     `ebpf:"host_addrs"`
		DecapVips  *ebpf.Map     `ebpf:"decap_vips"`
		DecapStats *ebpf.Map     `ebpf:"decap_stats"`
		NatPods    *ebpf.Map     `ebpf:"nat_pods"`
		NatSvcs    *ebpf.Map     `ebpf:"nat_svcs"`
		NatFlows   *ebpf.Map     `ebpf:"nat_flows"`
		NatRev     *ebpf.Map     `ebpf:"nat_rev_ports"`
		NatStats   *ebpf.Map     `ebpf:"nat_stats"`
	}
	nat *natMaps
}

func newNATFixture(t *testing.T, opts NATOptions) *natFixture {
	t.Helper()
	testenv.RequireRoot(t, "BPF program tests")
	spec, err := decap.Spec()
	if err != nil {
		t.Fatal(err)
	}
	f := &natFixture{}
	if err := spec.LoadAndAssign(&f.objs, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range []interface{ Close() error }{f.objs.Decap, f.objs.Reply, f.objs.HostAddrs, f.objs.DecapVips,
			f.objs.DecapStats, f.objs.NatPods, f.objs.NatSvcs, f.objs.NatFlows, f.objs.NatRev, f.objs.NatStats} {
			c.Close()
		}
	})
	if err := f.objs.HostAddrs.Put(wire.AddrOf(fxNode), uint8(1)); err != nil {
		t.Fatal(err)
	}
	if err := f.objs.DecapVips.Put(wire.AddrOf(fxVIP1), uint8(1)); err != nil {
		t.Fatal(err)
	}
	f.nat = &natMaps{pods: f.objs.NatPods, svcs: f.objs.NatSvcs, rev: f.objs.NatRev}
	if _, err := f.nat.apply(fxEntries, opts); err != nil {
		t.Fatal(err)
	}
	return f
}

const (
	xdpDrop = 1
	xdpPass = 2
	tcNext  = 0xffffffff // TC_ACT_UNSPEC (-1)
	tcShot  = 2
)

func run(t *testing.T, prog *ebpf.Program, frame []byte) (uint32, []byte) {
	t.Helper()
	out := make([]byte, len(frame)+256)
	opts := &ebpf.RunOptions{Data: frame, DataOut: out}
	v, err := prog.Run(opts)
	if err != nil {
		t.Fatalf("BPF_PROG_TEST_RUN: %v", err)
	}
	return v, opts.DataOut
}

// counts reads every counter of both programs, by name.
func (f *natFixture) counts(t *testing.T) map[string]uint64 {
	t.Helper()
	st, err := natStats(f.objs.NatStats)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for k, v := range st {
		out[k] = v.Packets
	}
	for i, name := range wire.DecapStatNames {
		var per []wire.Counter
		if err := f.objs.DecapStats.Lookup(uint32(i), &per); err != nil {
			t.Fatal(err)
		}
		for _, p := range per {
			out[name] += p.Packets
		}
	}
	return out
}

// expectCounts runs fn and checks that exactly the named counters moved,
// each by one.
func (f *natFixture) expectCounts(t *testing.T, want []string, fn func()) {
	t.Helper()
	before := f.counts(t)
	fn()
	after := f.counts(t)
	wantSet := map[string]bool{}
	for _, w := range want {
		wantSet[w] = true
	}
	for name, v := range after {
		d := v - before[name]
		if wantSet[name] && d != 1 || !wantSet[name] && d != 0 {
			t.Errorf("counter %s moved by %d, want %d", name, d, map[bool]int{true: 1}[wantSet[name]])
		}
	}
}

func (f *natFixture) flow(t *testing.T, pod netip.Addr, podPort uint16, client netip.Addr, clientPort uint16, proto uint8) (wire.NATVIP, bool) {
	t.Helper()
	var v wire.NATVIP
	k := wire.NATFlowKey{Pod: wire.AddrOf(pod), Client: wire.AddrOf(client), PodPort: wire.Port(podPort), ClientPort: wire.Port(clientPort), Proto: proto}
	err := f.objs.NatFlows.Lookup(k, &v)
	return v, err == nil
}

func vipOf(a netip.Addr, port uint16) wire.NATVIP {
	return wire.NATVIP{Vip: wire.AddrOf(a), Port: wire.Port(port)}
}

// udpZeroAfter returns a UDP payload for which the checksum of the
// datagram src:sport -> dst:dport computes to 0, so that it must be sent
// as 0xffff.
func udpZeroAfter(src, dst netip.Addr, sport, dport uint16) []byte {
	payload := make([]byte, 8)
	p := ipPkt{src: src, dst: dst, sport: sport, dport: dport, proto: 17, payload: payload, noUDPCsum: true}
	l4 := p.bytes()[20:]
	s := sum16(l4, pseudoSum(src, dst, 17, len(l4)))
	binary.BigEndian.PutUint16(payload, ^uint16(s)) // makes the sum 0xffff
	return payload
}

func TestNATForward(t *testing.T) {
	f := newNATFixture(t, NATOptions{})
	get := []byte("GET / HTTP/1.0\r\n\r\n")
	tcpVIP := func(vip netip.Addr, cport uint16) ipPkt {
		return ipPkt{src: fxClient, dst: vip, sport: cport, dport: 80, proto: 6, payload: get}
	}
	tcpPod := func(pod netip.Addr, cport uint16) ipPkt {
		return ipPkt{src: fxClient, dst: pod, sport: cport, dport: 8080, proto: 6, payload: get}
	}
	dns := []byte("\x12\x34query")
	udpVIP := ipPkt{src: fxClient, dst: fxVIP1, sport: 40053, dport: 53, proto: 17, payload: dns}
	udpPod := ipPkt{src: fxClient, dst: fxPod1, sport: 40053, dport: 5353, proto: 17, payload: dns}
	noCsumVIP, noCsumPod := udpVIP, udpPod
	noCsumVIP.noUDPCsum, noCsumPod.noUDPCsum = true, true
	zero := udpZeroAfter(fxClient, fxPod1, 40054, 5353)
	zeroVIP := ipPkt{src: fxClient, dst: fxVIP1, sport: 40054, dport: 53, proto: 17, payload: zero}
	zeroPod := ipPkt{src: fxClient, dst: fxPod1, sport: 40054, dport: 5353, proto: 17, payload: zero}

	// An ICMP error a router on the reply path sends to the VIP about a
	// reply, and what the pod must see of it.
	reply := ipPkt{src: fxVIP1, dst: fxClient, sport: 80, dport: 40000, proto: 6, payload: make([]byte, 1400)}
	podReply := ipPkt{src: fxPod1, dst: fxClient, sport: 8080, dport: 40000, proto: 6, payload: make([]byte, 1400)}
	tooBig := icmpError(fxRouter, fxVIP1, 3, 4, reply.bytes(), 8)
	tooBigPod := icmpError(fxRouter, fxPod1, 3, 4, podReply.bytes(), 8)
	// The same error whose datagram ends after the quoted IPv4 header:
	// the quoted ports lie past it, in bytes that are not the error's.
	quoteCut := append([]byte{}, tooBig...)
	binary.BigEndian.PutUint16(quoteCut[2:], uint16(len(quoteCut)-8))
	binary.BigEndian.PutUint16(quoteCut[10:], 0)
	binary.BigEndian.PutUint16(quoteCut[10:], csum(quoteCut[:20]))

	frag := tcpVIP(fxVIP1, 40000)
	frag.fragOff = 0x2000 // MF
	echo := append(ipv4Header(fxClient, fxVIP1, 1, 0, 8), 8, 0, 0xf7, 0xff, 0, 0, 0, 0)
	gre := append(ipv4Header(fxClient, fxVIP1, 47, 0, 4), 0, 0, 0x08, 0)
	outerFrag := ipip(tcpVIP(fxVIP1, 40000).bytes(), fxLB, fxPod1)
	binary.BigEndian.PutUint16(outerFrag[6:], 0x2000)
	binary.BigEndian.PutUint16(outerFrag[10:], 0)
	binary.BigEndian.PutUint16(outerFrag[10:], csum(outerFrag[:20]))
	truncated := ipip(tcpVIP(fxVIP1, 40000).bytes(), fxLB, fxPod1)[:20+20+10]
	longer := ipip(tcpVIP(fxVIP1, 40000).bytes(), fxLB, fxPod1)
	binary.BigEndian.PutUint16(longer[22:], 2000) // inner total length beyond the frame
	// The outer header rewritten by fn, its checksum fixed.
	reOuter := func(d []byte, fn func(ip []byte)) []byte {
		d = append([]byte{}, d...)
		fn(d)
		binary.BigEndian.PutUint16(d[10:], 0)
		binary.BigEndian.PutUint16(d[10:], csum(d[:int(d[0]&0xf)*4]))
		return d
	}
	toPod := ipip(tcpVIP(fxVIP1, 40000).bytes(), fxLB, fxPod1)
	outerLen := func(n int) func([]byte) {
		return func(ip []byte) { binary.BigEndian.PutUint16(ip[2:], uint16(n)) }
	}
	outerLonger := reOuter(toPod, outerLen(len(toPod)+1))
	innerPastOuter := reOuter(toPod, outerLen(len(toPod)-8)) // the last 8 bytes are padding
	innerCut := reOuter(toPod[:20+10], outerLen(20+10))
	options := append(append(append([]byte{}, toPod[:20]...), 1, 1, 1, 0), toPod[20:]...)
	options = reOuter(options, func(ip []byte) {
		ip[0] = 0x46
		binary.BigEndian.PutUint16(ip[2:], uint16(len(options)))
	})

	gue0 := []byte{0, 4, 0, 0}
	cases := []struct {
		name    string
		frame   []byte
		verdict uint32
		want    []byte // the datagram handed to the stack; nil: the frame unchanged
		counts  []string
	}{
		{"IPIP TCP to pod 1", ipip(tcpVIP(fxVIP1, 40000).bytes(), fxLB, fxPod1), xdpPass, tcpPod(fxPod1, 40000).bytes(), []string{"decap_ipip", "nat_fwd"}},
		{"IPIP TCP to pod 2", ipip(tcpVIP(fxVIP1, 40001).bytes(), fxLB, fxPod2), xdpPass, tcpPod(fxPod2, 40001).bytes(), []string{"decap_ipip", "nat_fwd"}},
		{"GUE TCP, second VIP on the same pod port", gue(tcpVIP(fxVIP2, 40002).bytes(), fxLB, fxPod1, gue0), xdpPass, tcpPod(fxPod1, 40002).bytes(), []string{"decap_gue", "nat_fwd"}},
		{"GUE UDP", gue(udpVIP.bytes(), fxLB, fxPod1, gue0), xdpPass, udpPod.bytes(), []string{"decap_gue", "nat_fwd"}},
		{"GUE variant 1 UDP without checksum", gue(noCsumVIP.bytes(), fxLB, fxPod1, nil), xdpPass, noCsumPod.bytes(), []string{"decap_gue", "nat_fwd"}},
		{"IPIP UDP whose new checksum is 0", ipip(zeroVIP.bytes(), fxLB, fxPod1), xdpPass, zeroPod.bytes(), []string{"decap_ipip", "nat_fwd"}},
		{"ICMP fragmentation needed about a reply", ipip(tooBig, fxLB, fxPod1), xdpPass, tooBigPod, []string{"decap_ipip", "nat_fwd_icmp"}},
		{"ICMP error whose quote ends before the ports", ipip(quoteCut, fxLB, fxPod1), xdpDrop, nil, []string{"nat_drop_malformed"}},
		{"host mode still works beside it", ipip(tcpVIP(fxVIP1, 40000).bytes(), fxLB, fxNode), xdpPass, tcpVIP(fxVIP1, 40000).bytes(), []string{"decap_ipip"}},
		{"pod on another node", ipip(tcpVIP(fxVIP1, 40000).bytes(), fxLB, fxFarPod), xdpPass, nil, []string{"pass_not_ours"}},
		{"plain TCP to a local pod", tcpPod(fxPod1, 40000).bytes(), xdpPass, nil, []string{"pass_not_ours"}},
		{"outer fragment", outerFrag, xdpPass, nil, []string{"pass_not_ours"}},
		{"unknown VIP port", ipip(ipPkt{src: fxClient, dst: fxVIP1, sport: 1, dport: 443, proto: 6}.bytes(), fxLB, fxPod1), xdpDrop, nil, []string{"nat_drop_no_entry"}},
		{"VIP not mapped to this pod", ipip(tcpVIP(fxVIP2, 40000).bytes(), fxLB, fxPod2), xdpDrop, nil, []string{"nat_drop_no_entry"}},
		{"wrong protocol for the port", ipip(ipPkt{src: fxClient, dst: fxVIP1, sport: 1, dport: 80, proto: 17}.bytes(), fxLB, fxPod1), xdpDrop, nil, []string{"nat_drop_no_entry"}},
		{"inner fragment", ipip(frag.bytes(), fxLB, fxPod1), xdpDrop, nil, []string{"nat_drop_fragment"}},
		{"inner truncated", truncated, xdpDrop, nil, []string{"nat_drop_malformed"}},
		{"inner length beyond the frame", longer, xdpDrop, nil, []string{"nat_drop_malformed"}},
		{"outer length beyond the frame", outerLonger, xdpDrop, nil, []string{"nat_drop_malformed"}},
		{"inner length beyond the outer datagram", innerPastOuter, xdpDrop, nil, []string{"nat_drop_malformed"}},
		{"inner header truncated, outer length consistent", innerCut, xdpDrop, nil, []string{"nat_drop_malformed"}},
		{"outer IP options", options, xdpPass, nil, []string{"pass_not_ours"}},
		{"inner ping to the VIP", ipip(echo, fxLB, fxPod1), xdpDrop, nil, []string{"nat_drop_proto"}},
		{"inner GRE", ipip(gre, fxLB, fxPod1), xdpDrop, nil, []string{"nat_drop_proto"}},
		{"bad GUE to a pod", gue(udpVIP.bytes(), fxLB, fxPod1, []byte{0x20, 0, 0, 0}), xdpDrop, nil, []string{"drop_bad_gue"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			frame := eth(c.frame)
			var v uint32
			var out []byte
			f.expectCounts(t, c.counts, func() { v, out = run(t, f.objs.Decap, frame) })
			if v != c.verdict {
				t.Fatalf("verdict %d, want %d", v, c.verdict)
			}
			if v != xdpPass {
				return
			}
			want := frame
			if c.want != nil {
				want = eth(c.want)
				checkDatagram(t, out[14:])
			}
			if !bytes.Equal(out, want) {
				t.Errorf("output\n got %x\nwant %x", out, want)
			}
		})
	}

	// The flows are recorded for their replies, each with its own VIP.
	for _, c := range []struct {
		pod   netip.Addr
		port  uint16
		cport uint16
		proto uint8
		want  wire.NATVIP
	}{
		{fxPod1, 8080, 40000, 6, vipOf(fxVIP1, 80)},
		{fxPod2, 8080, 40001, 6, vipOf(fxVIP1, 80)},
		{fxPod1, 8080, 40002, 6, vipOf(fxVIP2, 80)},
		{fxPod1, 5353, 40053, 17, vipOf(fxVIP1, 53)},
	} {
		if got, ok := f.flow(t, c.pod, c.port, fxClient, c.cport, c.proto); !ok || got != c.want {
			t.Errorf("flow record %v:%d <- client:%d: %v (found %v), want %v", c.pod, c.port, c.cport, got, ok, c.want)
		}
	}
	if _, ok := f.flow(t, fxPod1, 8080, fxClient, 1, 6); ok {
		t.Error("a flow record for a dropped packet")
	}
}

func TestNATReply(t *testing.T) {
	f := newNATFixture(t, NATOptions{})
	// The forward packets that record the flows.
	for _, fw := range [][]byte{
		ipip(ipPkt{src: fxClient, dst: fxVIP1, sport: 40000, dport: 80, proto: 6}.bytes(), fxLB, fxPod1),
		ipip(ipPkt{src: fxClient, dst: fxVIP2, sport: 40002, dport: 80, proto: 6}.bytes(), fxLB, fxPod1),
		ipip(ipPkt{src: fxClient, dst: fxVIP1, sport: 40053, dport: 53, proto: 17}.bytes(), fxLB, fxPod1),
		ipip(ipPkt{src: fxClient, dst: fxVIP1, sport: 40054, dport: 53, proto: 17}.bytes(), fxLB, fxPod1),
	} {
		if v, _ := run(t, f.objs.Decap, eth(fw)); v != xdpPass {
			t.Fatalf("forward packet: verdict %d", v)
		}
	}
	body := []byte("HTTP/1.0 200 OK\r\n\r\npod1")
	tcp := func(src netip.Addr, sport, cport uint16) []byte {
		return ipPkt{src: src, dst: fxClient, sport: sport, dport: cport, proto: 6, payload: body}.bytes()
	}
	udp := func(src netip.Addr, sport, cport uint16, payload []byte, noCsum bool) []byte {
		return ipPkt{src: src, dst: fxClient, sport: sport, dport: cport, proto: 17, payload: payload, noUDPCsum: noCsum}.bytes()
	}
	zero := udpZeroAfter(fxVIP1, fxClient, 53, 40053)
	frag := ipPkt{src: fxPod1, dst: fxClient, sport: 8080, dport: 40000, proto: 6, fragOff: 0x2000}.bytes()
	other := ipPkt{src: fxNode, dst: fxClient, sport: 8080, dport: 40000, proto: 6}.bytes()

	cases := []struct {
		name   string
		frame  []byte
		want   []byte // nil: unchanged
		counts []string
	}{
		{"TCP reply", tcp(fxPod1, 8080, 40000), tcp(fxVIP1, 80, 40000), []string{"nat_rev_flow"}},
		{"TCP reply for the second VIP", tcp(fxPod1, 8080, 40002), tcp(fxVIP2, 80, 40002), []string{"nat_rev_flow"}},
		{"UDP reply", udp(fxPod1, 5353, 40053, []byte("answer"), false), udp(fxVIP1, 53, 40053, []byte("answer"), false), []string{"nat_rev_flow"}},
		{"UDP reply without checksum", udp(fxPod1, 5353, 40053, []byte("answer"), true), udp(fxVIP1, 53, 40053, []byte("answer"), true), []string{"nat_rev_flow"}},
		{"UDP reply whose new checksum is 0", udp(fxPod1, 5353, 40053, zero, false), udp(fxVIP1, 53, 40053, zero, false), []string{"nat_rev_flow"}},
		{"reply to a direct client (a health check)", tcp(fxPod1, 8080, 50000), nil, []string{"nat_rev_untracked"}},
		{"UDP without a flow", udp(fxPod1, 5353, 50000, nil, false), nil, []string{"nat_rev_untracked"}},
		{"fragment from a pod", frag, nil, []string{"nat_rev_fragment"}},
		{"from the node itself", other, nil, nil},
		{"from a pod without translations", tcp(fxFarPod, 8080, 40000), nil, nil},
		{"truncated", tcp(fxPod1, 8080, 40000)[:24], nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			frame := eth(c.frame)
			var v uint32
			var out []byte
			f.expectCounts(t, c.counts, func() { v, out = run(t, f.objs.Reply, frame) })
			if v != tcNext {
				t.Fatalf("verdict %#x, want TC_NEXT", v)
			}
			want := frame
			if c.want != nil {
				want = eth(c.want)
				checkDatagram(t, out[14:])
			}
			if !bytes.Equal(out, want) {
				t.Errorf("output\n got %x\nwant %x", out, want)
			}
		})
	}
	t.Run("not IPv4", func(t *testing.T) {
		arp := eth(make([]byte, 28))
		binary.BigEndian.PutUint16(arp[12:], 0x0806)
		f.expectCounts(t, nil, func() {
			if v, out := run(t, f.objs.Reply, arp); v != tcNext || !bytes.Equal(out, arp) {
				t.Errorf("ARP: verdict %#x, changed %v", v, !bytes.Equal(out, arp))
			}
		})
	})
}

// TestNATReplyICMP: an ICMP error about a translated flow, sent by the pod
// or by the node, reaches the client as one about its own packet to the
// VIP.
func TestNATReplyICMP(t *testing.T) {
	f := newNATFixture(t, NATOptions{})
	fw := ipPkt{src: fxClient, dst: fxVIP1, sport: 40053, dport: 53, proto: 17, payload: []byte("query")}
	if v, _ := run(t, f.objs.Decap, eth(ipip(fw.bytes(), fxLB, fxPod1))); v != xdpPass {
		t.Fatalf("forward packet: verdict %d", v)
	}
	atPod := fw
	atPod.dst, atPod.dport = fxPod1, 5353
	for _, c := range []struct {
		name    string
		from    netip.Addr
		wantSrc netip.Addr
		counts  []string
	}{
		{"port unreachable from the pod", fxPod1, fxVIP1, []string{"nat_rev_icmp"}},
		{"an error the node sent", fxNode, fxNode, []string{"nat_rev_icmp"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			frame := eth(icmpError(c.from, fxClient, 3, 3, atPod.bytes(), 100))
			var v uint32
			var out []byte
			f.expectCounts(t, c.counts, func() { v, out = run(t, f.objs.Reply, frame) })
			if v != tcNext {
				t.Fatalf("verdict %#x", v)
			}
			d := out[14:]
			checkDatagram(t, d)
			q := d[28:]
			if c := csum(q[:20]); c != 0 {
				t.Errorf("quoted IPv4 header checksum invalid")
			}
			got := []netip.Addr{netip.AddrFrom4([4]byte(d[12:16])), netip.AddrFrom4([4]byte(q[12:16])), netip.AddrFrom4([4]byte(q[16:20]))}
			want := []netip.Addr{c.wantSrc, fxClient, fxVIP1}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("outer source, quoted source, quoted destination %v, want %v", got, want)
			}
			if sp, dp := binary.BigEndian.Uint16(q[20:]), binary.BigEndian.Uint16(q[22:]); sp != 40053 || dp != 53 {
				t.Errorf("quoted ports %d -> %d, want 40053 -> 53", sp, dp)
			}
			// The rest of the quote is the client's datagram as sent,
			// except for its UDP checksum: the pod's, left as it was
			// (no stack checks a quoted checksum).
			orig, seen := fw.bytes(), atPod.bytes()
			if !bytes.Equal(q[:10], orig[:10]) || !bytes.Equal(q[24:26], orig[24:26]) ||
				!bytes.Equal(q[26:28], seen[26:28]) || !bytes.Equal(q[28:], orig[28:]) {
				t.Errorf("quote changed beyond the address, port and checksum:\n got %x\nwant %x", q, orig)
			}
		})
	}
	t.Run("about an untracked flow", func(t *testing.T) {
		other := atPod
		other.sport = 1
		frame := eth(icmpError(fxPod1, fxClient, 3, 3, other.bytes(), 8))
		f.expectCounts(t, []string{"nat_rev_untracked"}, func() {
			if v, out := run(t, f.objs.Reply, frame); v != tcNext || !bytes.Equal(out, frame) {
				t.Errorf("verdict %#x, changed %v", v, !bytes.Equal(out, frame))
			}
		})
	})
	t.Run("echo reply from a pod", func(t *testing.T) {
		m := []byte{0, 0, 0xff, 0xff, 0, 0, 0, 0}
		frame := eth(append(ipv4Header(fxPod1, fxClient, 1, 0, len(m)), m...))
		f.expectCounts(t, nil, func() {
			if v, out := run(t, f.objs.Reply, frame); v != tcNext || !bytes.Equal(out, frame) {
				t.Errorf("verdict %#x, changed %v", v, !bytes.Equal(out, frame))
			}
		})
	})
}

// TestNATReplyFallback: without a flow record, a reply is translated by
// its pod port only when asked for and only when one VIP:port maps to it.
func TestNATReplyFallback(t *testing.T) {
	f := newNATFixture(t, NATOptions{ReplyFallback: true})
	udp := func(src netip.Addr, sport uint16) []byte {
		return ipPkt{src: src, dst: fxClient, sport: sport, dport: 50000, proto: 17, payload: []byte("a")}.bytes()
	}
	tcp := ipPkt{src: fxPod1, dst: fxClient, sport: 8080, dport: 50000, proto: 6}.bytes()

	f.expectCounts(t, []string{"nat_rev_fallback"}, func() {
		_, out := run(t, f.objs.Reply, eth(udp(fxPod1, 5353)))
		if want := eth(udp(fxVIP1, 53)); !bytes.Equal(out, want) {
			t.Errorf("unambiguous pod port:\n got %x\nwant %x", out, want)
		}
	})
	// pod1:8080 serves VIP1:80 and VIP2:80: no fallback can choose.
	f.expectCounts(t, []string{"nat_rev_untracked"}, func() {
		if _, out := run(t, f.objs.Reply, eth(tcp)); !bytes.Equal(out, eth(tcp)) {
			t.Errorf("ambiguous pod port translated: %x", out)
		}
	})
	// Turned off again, the fallback is gone.
	if _, err := f.nat.apply(fxEntries, NATOptions{}); err != nil {
		t.Fatal(err)
	}
	f.expectCounts(t, []string{"nat_rev_untracked"}, func() {
		if _, out := run(t, f.objs.Reply, eth(udp(fxPod1, 5353))); !bytes.Equal(out, eth(udp(fxPod1, 5353))) {
			t.Errorf("fallback off, reply translated: %x", out)
		}
	})
}

// TestNATApply: the maps hold exactly the entries after every change,
// and only what differs is written.
func TestNATApply(t *testing.T) {
	f := newNATFixture(t, NATOptions{ReplyFallback: true})
	e := func(vip netip.Addr, port uint16, proto uint8, pod netip.Addr, tp uint16) NATEntry {
		return NATEntry{vip, port, proto, pod, tp}
	}
	steps := []struct {
		entries []NATEntry
		change  NATChange
		pods    []netip.Addr
		rev     int // fallback entries
	}{
		{fxEntries, NATChange{}, []netip.Addr{fxPod1, fxPod2}, 2}, // as the fixture left it: pod2:8080 and pod1:5353
		{ // pod2 leaves, VIP1:80 moves pod1 to 9090
			[]NATEntry{e(fxVIP1, 80, 6, fxPod1, 9090), e(fxVIP2, 80, 6, fxPod1, 8080), e(fxVIP1, 53, 17, fxPod1, 5353)},
			NATChange{Updated: 1, Removed: 1}, []netip.Addr{fxPod1}, 3,
		},
		{ // repeated identical entries count once
			[]NATEntry{e(fxVIP1, 53, 17, fxPod2, 53), e(fxVIP1, 53, 17, fxPod2, 53)},
			NATChange{Added: 1, Removed: 3}, []netip.Addr{fxPod2}, 1,
		},
		{nil, NATChange{Removed: 1}, nil, 0},
	}
	for i, s := range steps {
		ch, err := f.nat.apply(s.entries, NATOptions{ReplyFallback: true})
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if ch != s.change {
			t.Errorf("step %d: change %+v, want %+v", i, ch, s.change)
		}
		svcs, _ := readMap[wire.NATSvcKey, uint16](f.nat.svcs)
		want := map[wire.NATSvcKey]uint16{}
		for _, x := range s.entries {
			want[wire.NATSvcKey{Vip: wire.AddrOf(x.VIP), Pod: wire.AddrOf(x.PodIP), Port: wire.Port(x.Port), Proto: x.Proto}] = wire.Port(x.TargetPort)
		}
		if !reflect.DeepEqual(svcs, want) {
			t.Errorf("step %d: nat_svcs %v, want %v", i, svcs, want)
		}
		pods, _ := readMap[wire.Addr, uint8](f.nat.pods)
		wantPods := map[wire.Addr]uint8{}
		for _, p := range s.pods {
			wantPods[wire.AddrOf(p)] = 1
		}
		if !reflect.DeepEqual(pods, wantPods) {
			t.Errorf("step %d: nat_pods %v, want %v", i, pods, wantPods)
		}
		if rev, _ := readMap[wire.NATRevKey, wire.NATVIP](f.nat.rev); len(rev) != s.rev {
			t.Errorf("step %d: %d fallback entries %v, want %d", i, len(rev), rev, s.rev)
		}
	}
}

func TestParseNATEntry(t *testing.T) {
	good := []struct {
		in   string
		want NATEntry
	}{
		{"10.99.0.1:80/tcp=10.244.1.2:8080", NATEntry{fxVIP1, 80, 6, fxPod1, 8080}},
		{" 10.99.0.2:53/UDP=10.244.1.3:5353 ", NATEntry{fxVIP2, 53, 17, fxPod2, 5353}},
		{"[fd00:99::1]:80/tcp=[fd00:244::2]:8080", NATEntry{fxVIP6, 80, 6, fxPod6, 8080}},
	}
	for _, c := range good {
		got, err := ParseNATEntry(c.in)
		if err != nil || got != c.want {
			t.Errorf("%q: %v, %v; want %v", c.in, got, err, c.want)
		}
		if again, err := ParseNATEntry(got.String()); err != nil || again != got {
			t.Errorf("%v does not read back: %v, %v", got, again, err)
		}
	}
	bad := []struct{ in, errPart string }{
		{"10.99.0.1:80/tcp", "no '='"},
		{"10.99.0.1:80=10.244.1.2:8080", "no protocol"},
		{"10.99.0.1:80/sctp=10.244.1.2:8080", `protocol "sctp"`},
		{"10.99.0.1/tcp=10.244.1.2:8080", `VIP "10.99.0.1" has no port`},
		{"10.99.0.1:80/tcp=10.244.1.2", `pod "10.244.1.2" has no port`},
		{"fd00::1:80/tcp=10.244.1.2:8080", `VIP "fd00::1:80": write an IPv6 address in brackets`},
		{"[fd00::1]/tcp=10.244.1.2:8080", `VIP "[fd00::1]" has no port`},
		{"[fd00::x]:80/tcp=10.244.1.2:8080", `VIP address "fd00::x"`},
		{"10.99.0.1:80/tcp=pod:8080", `pod address "pod"`},
		{"10.99.0.1:0/tcp=10.244.1.2:8080", `VIP port "0"`},
		{"10.99.0.1:80/tcp=10.244.1.2:70000", `pod port "70000"`},
	}
	for _, c := range bad {
		if _, err := ParseNATEntry(c.in); err == nil || !strings.Contains(err.Error(), c.errPart) {
			t.Errorf("%q: error %v, want one containing %q", c.in, err, c.errPart)
		}
	}
}

func TestValidateNAT(t *testing.T) {
	cases := []struct {
		entries []NATEntry
		errPart string // "": valid
	}{
		{fxEntries, ""},
		{append(fxEntries, fxEntries[0]), ""},
		{[]NATEntry{{fxVIP1, 80, 6, fxPod1, 8080}, {fxVIP1, 80, 6, fxPod1, 9090}}, "already map to target port 8080"},
		{[]NATEntry{{fxVIP1, 80, 1, fxPod1, 8080}}, "protocol 1"},
		{[]NATEntry{{fxVIP1, 80, 6, netip.MustParseAddr("fd00::1"), 8080}}, "are of different families"},
		{[]NATEntry{{fxVIP6, 80, 6, fxPod6, 8080}}, ""},
		{[]NATEntry{{fxVIP6, 80, 6, fxPod1, 8080}}, "are of different families"},
		{[]NATEntry{{fxVIP6, 80, 6, netip.MustParseAddr("fe80::2"), 8080}}, "IPv6 link-local"},
		{[]NATEntry{{netip.MustParseAddr("fe80::1"), 80, 6, fxPod6, 8080}}, "VIP fe80::1 is link-local"},
		{[]NATEntry{{netip.MustParseAddr("::ffff:10.99.0.1"), 80, 6, fxPod6, 8080}}, "IPv4-mapped"},
		{[]NATEntry{{netip.Addr{}, 80, 6, fxPod1, 8080}}, "VIP"},
		{[]NATEntry{{fxVIP1, 80, 6, fxVIP1, 8080}}, "the same"},
		{[]NATEntry{{fxVIP1, 80, 6, fxPod1, 0}}, "port 0"},
	}
	for i, c := range cases {
		err := validateNAT(c.entries)
		if c.errPart == "" && err != nil || c.errPart != "" && (err == nil || !strings.Contains(err.Error(), c.errPart)) {
			t.Errorf("case %d: %v, want error containing %q", i, err, c.errPart)
		}
	}
}

// TestNATStatNamesMatchC: the translation counters have one name each
// (wire.NATStatNames, which package wire holds to enum nat_stat).
func TestNATStatNamesMatchC(t *testing.T) {
	spec, err := decap.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if n := spec.Maps[natStatsMap].MaxEntries; int(n) != len(wire.NATStatNames) {
		t.Fatalf("nat_stats has %d entries, Go names %d", n, len(wire.NATStatNames))
	}
}

// TestNATLayoutsMatchC holds the Go keys and values this package writes to
// the C ones: the same size, members and member offsets.
func TestNATLayoutsMatchC(t *testing.T) {
	spec, err := decap.Spec()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mapName string
		key     bool
		goType  any
	}{
		{natSvcsMap, true, wire.NATSvcKey{}},
		{natSvcsMap, false, uint16(0)},
		{natRevMap, true, wire.NATRevKey{}},
		{natRevMap, false, wire.NATVIP{}},
		{"nat_flows", true, wire.NATFlowKey{}},
		{"nat_flows", false, wire.NATVIP{}},
		{natPodsMap, true, wire.Addr{}},
		{natNetnsMap, true, wire.Addr{}},
		{natNetnsMap, false, uint32(0)},
		{natStatsMap, false, wire.Counter{}},
	} {
		ms := spec.Maps[c.mapName]
		typ := ms.Value
		if c.key {
			typ = ms.Key
		}
		if err := wire.Layout(c.goType, typ); err != nil {
			t.Errorf("%s (key %v): %v", c.mapName, c.key, err)
		}
	}
}
