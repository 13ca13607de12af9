package decap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/testbed/netns"
)

// Previous owners in the fixture namespace: one whose next hop is on the
// ingress interface (XDP_TX), one behind veth2 (redirect), one whose
// neighbour is never resolved, one without a route.
var (
	chainPrevTX      = netip.MustParseAddr("10.0.3.7")
	chainPrevRedir   = netip.MustParseAddr("10.0.4.2")
	chainPrevNoNeigh = fxNoNeighBE
	chainPrevNoRoute = fxNoRouteBE
)

const chainWindow = 2 * time.Minute

// chainSets is the fixture's daisy-chaining configuration: the node that
// sends the frames (encapsulate's outer source) is a known xlb node, and
// every previous owner above a known backend, one of them through a
// prefix. chainUnknown is routed like chainPrevTX but in no set.
var (
	chainSets = Chain{Window: chainWindow, From: []netip.Prefix{netip.PrefixFrom(fxNode, 32)},
		To: []netip.Prefix{netip.PrefixFrom(chainPrevTX, 32), netip.MustParsePrefix("10.0.4.0/24"),
			netip.PrefixFrom(chainPrevNoNeigh, 32), netip.PrefixFrom(chainPrevNoRoute, 32)}}
	chainUnknown   = netip.MustParseAddr("10.0.3.9")
	chainStranger  = netip.MustParseAddr("10.0.9.9")
	chainNoSetsCfg = Chain{Window: chainWindow}
)

// fromSource returns a copy of an encapsulated frame with outer source src.
func fromSource(frame []byte, src netip.Addr) []byte {
	return outer(frame, func(ip []byte) {
		a := src.As4()
		copy(ip[12:16], a[:])
	})
}

func setChainT(t testing.TB, objs *backendObjects, c Chain) {
	t.Helper()
	if err := setChain(&objs.backendMaps, c); err != nil {
		t.Fatal(err)
	}
}

// hintGUE is the GUE header (variant 0, hlen 4, IPv4 inside) with the
// daisy-chain hint an xlb node sends: the slot's previous owner, the one
// before it (invalid: none), when the slot changed, the generation.
func hintGUE(prev, prev2 netip.Addr, changed, generation uint32) []byte {
	h := make([]byte, 20)
	h[0], h[1] = 4, 4
	for i, a := range []netip.Addr{prev, prev2} {
		if a.IsValid() {
			b := a.As4()
			copy(h[4+4*i:], b[:])
		}
	}
	binary.BigEndian.PutUint32(h[12:], changed)
	binary.BigEndian.PutUint32(h[16:], generation)
	return h
}

// tcpSeg builds an Ethernet frame with a TCP segment from the client to
// the VIP with the given sequence numbers and flags.
func tcpSeg(mac net.HardwareAddr, sport, dport uint16, seq, ack uint32, flags uint8) []byte {
	f := pkt{Src: fxClient, Dst: fxVIP, Sport: sport, Dport: dport, Proto: 6, DF: true, TCPFlags: flags}.Frame(mac)
	l4 := f[14+20:]
	binary.BigEndian.PutUint32(l4[4:], seq)
	binary.BigEndian.PutUint32(l4[8:], ack)
	binary.BigEndian.PutUint16(l4[16:], 0)
	binary.BigEndian.PutUint16(l4[16:], tcpChecksum(fxClient, fxVIP, l4))
	return f
}

func tcpChecksum(src, dst netip.Addr, l4 []byte) uint16 {
	s, d := src.As4(), dst.As4()
	ph := append(append(append([]byte{}, s[:]...), d[:]...), 0, 6, byte(len(l4)>>8), byte(len(l4)))
	return csum(append(ph, l4...))
}

// newChainFixture is the decapsulation fixture with daisy chaining on,
// the VIP and the client local in the namespace (so that real sockets
// can stand for the backend's connections), and a listener on VIP:80.
func newChainFixture(t testing.TB) (*fixtureNS, *backendObjects) {
	t.Helper()
	requirePrivileges(t)
	f := newFixtureNS(t)
	objs := newFixtureDecap(t, f)
	setChainT(t, objs, chainSets)
	for _, a := range []netip.Addr{fxVIP, fxClient} {
		ipcmd(t, "-n", f.Name, "addr", "add", a.String()+"/32", "dev", "lo")
	}
	var ln net.Listener
	err := f.Runner.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", netip.AddrPortFrom(fxVIP, 80).String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// The accepted connections live until the listener closes.
	done := make(chan struct{})
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	return f, objs
}

// dialVIP opens a connection from the client to VIP:80 inside the
// namespace and returns its client port.
func dialVIP(t testing.TB, f *fixtureNS) uint16 {
	t.Helper()
	var c net.Conn
	err := f.Runner.Do(func() error {
		d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(fxClient, 0)), Timeout: 5 * time.Second}
		var err error
		c, err = d.Dial("tcp", netip.AddrPortFrom(fxVIP, 80).String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return uint16(c.LocalAddr().(*net.TCPAddr).Port)
}

func chainCounts(t *testing.T, objs *backendObjects) []uint64 {
	t.Helper()
	out := make([]uint64, len(wire.ChainStatNames))
	for i := range wire.ChainStatNames {
		c, err := bpfobj.SumPerCPU(objs.ChainStats, uint32(i))
		if err != nil {
			t.Fatal(err)
		}
		out[i] = c.Packets
	}
	return out
}

// chainCase is one frame through the backend program with its expected
// verdict and counters: decap is the decap_stats counter that moves by
// one ("" for none), chain the chain_stats one.
type chainCase struct {
	name    string
	frame   []byte
	verdict uint32
	want    []byte // output when delivered (the inner frame); nil: not compared
	decap   string
	chain   string
	also    string // a second chain counter the case moves
	// viaStack: chained through the stack (neighbour unresolved): the
	// MACs stay, the outer source stays the xlb node's.
	viaStack bool
	// chainedTo, for a chained packet: the previous owner and the
	// MAC addresses of its next hop.
	chainedTo      netip.Addr
	dstMAC, srcMAC net.HardwareAddr
	// next: the previous owner the chained packet's hint names for
	// the next hop to try (invalid: none).
	next netip.Addr
	// from: the chained packet's outer source when it is not fxBackend
	// (a pod the tunnel was addressed to).
	from netip.Addr
}

func runChainCase(t *testing.T, f *fixtureNS, objs *backendObjects, c chainCase) {
	t.Helper()
	beforeD, beforeC := decapCounts(t, objs), chainCounts(t, objs)
	v, out := f.Run(t, objs.XlbDecap, c.frame)
	afterD, afterC := decapCounts(t, objs), chainCounts(t, objs)
	if v != c.verdict {
		t.Errorf("verdict %s, want %s", verdictNames[v], verdictNames[c.verdict])
	}
	if c.want != nil && !bytes.Equal(out, c.want) {
		t.Errorf("output\n got %x\nwant %x", out, c.want)
	}
	switch {
	case c.chainedTo.Is6():
		checkChained6(t, out, c)
	case c.chainedTo.IsValid():
		checkChained(t, out, c)
	}
	for i, name := range wire.DecapStatNames {
		if d := afterD[i] - beforeD[i]; (name == c.decap) != (d == 1) || d > 1 {
			t.Errorf("decap counter %s moved by %d (case expects %q)", name, d, c.decap)
		}
	}
	for i, name := range wire.ChainStatNames {
		if d := afterC[i] - beforeC[i]; (name == c.chain || name == c.also) != (d == 1) || d > 1 {
			t.Errorf("chain counter %s moved by %d (case expects %q)", name, d, c.chain)
		}
	}
}

// checkChained verifies a frame the program sent on to a previous owner:
// new MAC addresses, outer source the host address the frame was sent
// to, outer destination the previous owner, a valid outer checksum, no
// UDP checksum, the hint's previous owners rewritten (prev the next
// candidate, prev2 0) and everything else, the inner packet above all,
// as it came.
func checkChained(t *testing.T, out []byte, c chainCase) {
	t.Helper()
	in := c.frame
	if len(out) != len(in) {
		t.Fatalf("length %d, want %d", len(out), len(in))
	}
	wantDst, wantSrc, wantFrom := c.dstMAC, c.srcMAC, fxBackend
	if c.from.IsValid() {
		wantFrom = c.from
	}
	if c.viaStack {
		wantDst, wantSrc, wantFrom = in[0:6], in[6:12], netip.AddrFrom4([4]byte(in[26:30]))
	}
	if !bytes.Equal(out[0:6], wantDst) || !bytes.Equal(out[6:12], wantSrc) {
		t.Errorf("MACs %x -> %x, want %x -> %x", out[6:12], out[0:6], wantSrc, wantDst)
	}
	ip := out[14 : 14+20]
	if src := netip.AddrFrom4([4]byte(ip[12:16])); src != wantFrom {
		t.Errorf("outer source %v, want %v", src, wantFrom)
	}
	if dst := netip.AddrFrom4([4]byte(ip[16:20])); dst != c.chainedTo {
		t.Errorf("outer destination %v, want %v", dst, c.chainedTo)
	}
	if csum(ip) != 0 {
		t.Errorf("outer IP checksum %04x invalid", binary.BigEndian.Uint16(ip[10:]))
	}
	if ip[8] != 64 {
		t.Errorf("outer TTL %d, want 64", ip[8])
	}
	if !bytes.Equal(ip[:8], in[14:22]) || ip[9] != in[23] {
		t.Errorf("outer header\n got %x\nwant %x (but addresses, TTL, checksum)", ip, in[14:34])
	}
	udp := out[34:42]
	if !bytes.Equal(udp[:6], in[34:40]) || udp[6] != 0 || udp[7] != 0 {
		t.Errorf("UDP header %x, want %x with checksum 0", udp, in[34:42])
	}
	gue := out[42 : 42+20]
	want := append([]byte{}, in[42:46]...)
	want = binary.BigEndian.AppendUint32(want, be32(c.next))
	want = binary.BigEndian.AppendUint32(want, 0)
	want = append(want, in[54:62]...)
	if !bytes.Equal(gue, want) {
		t.Errorf("GUE header and hint %x, want %x (prev %v, prev2 0, changed and generation kept)", gue, want, c.next)
	}
	if !bytes.Equal(out[62:], in[62:]) {
		t.Errorf("inner packet changed:\n got %x\nwant %x", out[62:], in[62:])
	}
}

// TestDecapChain runs the daisy-chaining decision: what the program
// delivers, chains to a slot's previous owner, or drops, for TCP packets
// carrying the hint; and that other packets are handled as before.
func TestDecapChain(t *testing.T) {
	f, objs := newChainFixture(t)
	conn := dialVIP(t, f)
	now := uint32(time.Now().Unix())
	expired := now - uint32(chainWindow/time.Second) - 1
	gue := func(inner []byte, hint []byte) []byte { return encapsulate(inner, fxBackend, wire.GUEPort, hint) }
	ack := func(sport, dport uint16) []byte { return tcpSeg(f.MAC, sport, dport, 1000, 1, 0x10) }
	syn := tcpSeg(f.MAC, 40000, 80, 1000, 0, 0x02)
	udp := pkt{Src: fxClient, Dst: fxVIP, Sport: 5353, Dport: 53, Proto: 17, Payload: []byte("q")}.Frame(f.MAC)
	var none netip.Addr
	fresh := hintGUE(chainPrevTX, none, now, now)
	// The hint is exactly hlen 4. Three option words are the hint of
	// before (prev, changed, generation); five start like a hint.
	prevTX := chainPrevTX.As4()
	hlen3 := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(append([]byte{3, 4, 0, 0}, prevTX[:]...), now), now)
	hlen5 := append(hintGUE(chainPrevTX, chainPrevRedir, now, now), 0, 0, 0, 0)
	hlen5[0] = 5
	delivered := func(name string, inner, hint []byte, stat string) chainCase {
		return chainCase{name: name, frame: gue(inner, hint), verdict: xdpPass, want: inner, decap: "decap_gue", chain: stat}
	}
	// chained: the frame goes to `to`, its hint naming next.
	chained := func(name string, inner, hint []byte, to, next netip.Addr, verdict uint32, dst, src net.HardwareAddr) chainCase {
		return chainCase{name: name, frame: gue(inner, hint), verdict: verdict,
			chain: "chained", chainedTo: to, next: next, dstMAC: dst, srcMAC: src}
	}
	viaStack := func(name string, inner, hint []byte, to, next netip.Addr) chainCase {
		return chainCase{name: name, frame: gue(inner, hint), verdict: xdpPass, chain: "chained", also: "chain_no_neighbour",
			chainedTo: to, next: next, viaStack: true}
	}
	dropped := func(name string, inner, hint []byte, stat string) chainCase {
		return chainCase{name: name, frame: gue(inner, hint), verdict: xdpDrop, chain: stat}
	}
	// Redirects leave through veth2, whose MAC is the new source.
	var mac2 net.HardwareAddr
	err := f.Runner.Do(func() error {
		i, err := net.InterfaceByName("veth2")
		if err == nil {
			mac2 = i.HardwareAddr
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	for _, c := range []chainCase{
		delivered("SYN", syn, fresh, "syn"),
		delivered("SYN with an older generation", syn, hintGUE(chainPrevTX, none, now, now-10), "syn"),
		delivered("established connection", ack(conn, 80), fresh, "socket"),
		delivered("established connection, older generation", ack(conn, 80), hintGUE(chainPrevTX, none, now, now-10), "socket"),
		delivered("established connection, two previous owners", ack(conn, 80), hintGUE(chainPrevTX, chainPrevRedir, now, now), "socket"),
		delivered("listener only, plain ACK, no previous owner", ack(40001, 80), hintGUE(none, none, now, now), "no_socket"),
		chained("listener only, plain ACK, fresh hint", ack(40001, 80), fresh, chainPrevTX, none, xdpTX, fxRouterMAC, f.MAC),
		chained("no socket, previous owner behind another interface", ack(40001, 8080), hintGUE(chainPrevRedir, none, now, now),
			chainPrevRedir, none, xdpRedirect, fxOtherMAC, mac2),
		viaStack("previous owner's neighbour unresolved: through the stack", ack(40001, 80), hintGUE(chainPrevNoNeigh, none, now, now),
			chainPrevNoNeigh, none),
		dropped("no route to the previous owner", ack(40001, 80), hintGUE(chainPrevNoRoute, none, now, now), "chain_no_route"),
		delivered("window expired", ack(40001, 80), hintGUE(chainPrevTX, none, expired, now), "no_socket"),
		delivered("previous owner is this host", ack(40001, 80), hintGUE(fxBackend, none, now, now), "no_socket"),

		// Two previous owners: the first that is not this host gets the
		// packet; the second travels on only when the first was used.
		chained("two previous owners: to prev, prev2 travels on", ack(40001, 80), hintGUE(chainPrevTX, chainPrevRedir, now, now),
			chainPrevTX, chainPrevRedir, xdpTX, fxRouterMAC, f.MAC),
		chained("prev is this host: to prev2, nothing travels on", ack(40001, 80), hintGUE(fxBackend, chainPrevTX, now, now),
			chainPrevTX, none, xdpTX, fxRouterMAC, f.MAC),
		chained("no prev, prev2 behind another interface: to prev2", ack(40001, 8080), hintGUE(none, chainPrevRedir, now, now),
			chainPrevRedir, none, xdpRedirect, fxOtherMAC, mac2),
		viaStack("two previous owners, prev's neighbour unresolved: prev2 travels on", ack(40001, 80),
			hintGUE(chainPrevNoNeigh, chainPrevTX, now, now), chainPrevNoNeigh, chainPrevTX),
		viaStack("prev is this host, prev2's neighbour unresolved", ack(40001, 80),
			hintGUE(fxBackend, chainPrevNoNeigh, now, now), chainPrevNoNeigh, none),
		dropped("prev is this host, no route to prev2", ack(40001, 80), hintGUE(fxBackend, chainPrevNoRoute, now, now), "chain_no_route"),
		delivered("both previous owners are this host", ack(40001, 80), hintGUE(fxBackend, fxBackend, now, now), "no_socket"),
		delivered("two previous owners, window expired", ack(40001, 80), hintGUE(chainPrevTX, chainPrevRedir, expired, now), "no_socket"),

		delivered("no hint (GUE hlen 0)", ack(40001, 80), []byte{0, 4, 0, 0}, ""),
		delivered("GUE with one option word: no hint", ack(40001, 80), []byte{1, 4, 0, 0, 10, 0, 3, 7}, ""),
		delivered("GUE with three option words (the hint of before): no hint", ack(40001, 80), hlen3, ""),
		delivered("GUE with five option words: no hint", ack(40001, 80), hlen5, ""),
		delivered("UDP with a hint", udp, fresh, ""),
		{name: "IPIP: no hint", frame: encapsulate(ack(40001, 80), fxBackend, 0, nil), verdict: xdpPass,
			want: ack(40001, 80), decap: "decap_ipip"},

		// VIP:8080 has no listener. Its newest generation becomes now;
		// an older one comes from an LB instance with an outdated
		// table: dropped, unless a fresh hint chains it first.
		delivered("newest generation, no socket", ack(40002, 8080), hintGUE(none, none, now, now), "no_socket"),
		dropped("older generation, no socket", ack(40002, 8080), hintGUE(none, none, now, now-1), "stale_drop"),
		dropped("older generation, expired hint", ack(40002, 8080), hintGUE(chainPrevTX, none, expired, now-1), "stale_drop"),
		dropped("older generation, previous owners both this host", ack(40002, 8080), hintGUE(fxBackend, fxBackend, now, now-1), "stale_drop"),
		chained("older generation, fresh hint", ack(40002, 8080), hintGUE(chainPrevTX, none, now, now-1),
			chainPrevTX, none, xdpTX, fxRouterMAC, f.MAC),
		chained("older generation, fresh hint to prev2", ack(40002, 8080), hintGUE(none, chainPrevTX, now, now-1),
			chainPrevTX, none, xdpTX, fxRouterMAC, f.MAC),
		delivered("older generation of another port", ack(40002, 8081), hintGUE(none, none, now, now-1), "no_socket"),
		delivered("newer generation again", ack(40002, 8080), hintGUE(none, none, now, now+1), "no_socket"),
		dropped("the previous newest is now older", ack(40002, 8080), hintGUE(none, none, now, now), "stale_drop"),
		// Generation 0 is unknown: never stale. A zero hint (prev, prev2
		// and generation 0), as an LB instance sends for a service
		// without a chain, is no hint, whatever its changed says.
		delivered("generation 0 with a previous owner", ack(40002, 8080), hintGUE(chainPrevTX, none, expired, 0), "no_socket"),
		delivered("generation 0 with a second previous owner", ack(40002, 8080), hintGUE(none, chainPrevTX, expired, 0), "no_socket"),
		chained("generation 0, fresh hint with only prev2", ack(40002, 8080), hintGUE(none, chainPrevTX, now, 0),
			chainPrevTX, none, xdpTX, fxRouterMAC, f.MAC),
		delivered("zero hint", ack(40002, 8080), hintGUE(none, none, 0, 0), ""),
		delivered("zero hint with a change time", ack(40002, 8080), hintGUE(none, none, now, 0), ""),
		delivered("zero hint, SYN", syn, hintGUE(none, none, 0, 0), ""),
	} {
		t.Run(c.name, func(t *testing.T) { runChainCase(t, f, objs, c) })
	}
	t.Run("chaining off", func(t *testing.T) {
		off := chainSets
		off.Window = 0
		setChainT(t, objs, off)
		defer setChainT(t, objs, chainSets)
		runChainCase(t, f, objs, delivered("fresh hint, window 0", ack(40001, 80), fresh, "no_socket"))
	})
	t.Run("forwarding disabled on the interface", func(t *testing.T) {
		fwd := "/proc/sys/net/ipv4/conf/veth0/forwarding"
		err := f.Runner.Do(func() error { return os.WriteFile(fwd, []byte("0\n"), 0o644) })
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := f.Runner.Do(func() error { return os.WriteFile(fwd, []byte("1\n"), 0o644) }); err != nil {
				t.Fatal(err)
			}
		}()
		runChainCase(t, f, objs, dropped("fresh hint", ack(40001, 80), fresh, "chain_no_route"))
	})
}

// TestDecapChainTrust: a hint is followed only for a packet from a known
// xlb node (or a known backend that chained it on) and only to a known
// previous owner; what would otherwise be chained is dropped and counted
// under its own reason, while what is delivered stays delivered. Only a
// known source raises a service's newest generation. Without sets, no
// packet is chained and the hints keep only the stale-instance drop.
func TestDecapChainTrust(t *testing.T) {
	f, objs := newChainFixture(t)
	conn := dialVIP(t, f)
	now := uint32(time.Now().Unix())
	expired := now - uint32(chainWindow/time.Second) - 1
	var none netip.Addr
	ack := func(sport, dport uint16) []byte { return tcpSeg(f.MAC, sport, dport, 1000, 1, 0x10) }
	syn := tcpSeg(f.MAC, 40000, 80, 1000, 0, 0x02)
	frame := func(src netip.Addr, inner, hint []byte) []byte {
		return fromSource(encapsulate(inner, fxBackend, wire.GUEPort, hint), src)
	}
	delivered := func(name string, src netip.Addr, inner, hint []byte, stat string) chainCase {
		return chainCase{name: name, frame: frame(src, inner, hint), verdict: xdpPass, want: inner, decap: "decap_gue", chain: stat}
	}
	dropped := func(name string, src netip.Addr, inner, hint []byte, stat string) chainCase {
		return chainCase{name: name, frame: frame(src, inner, hint), verdict: xdpDrop, chain: stat}
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
	hint := func(prev, prev2 netip.Addr) []byte { return hintGUE(prev, prev2, now, now) }

	for _, c := range []chainCase{
		dropped("unknown source, known previous owner", chainStranger, ack(40001, 80), hint(chainPrevTX, none), "chain_drop_untrusted_source"),
		dropped("unknown source, unknown previous owner", chainStranger, ack(40001, 80), hint(chainUnknown, none), "chain_drop_untrusted_source"),
		dropped("unknown source, to prev2", chainStranger, ack(40001, 80), hint(fxBackend, chainPrevTX), "chain_drop_untrusted_source"),
		delivered("unknown source, SYN", chainStranger, syn, hint(chainPrevTX, none), "syn"),
		delivered("unknown source, established connection", chainStranger, ack(conn, 80), hint(chainPrevTX, none), "socket"),
		delivered("unknown source, window expired", chainStranger, ack(40001, 80), hintGUE(chainPrevTX, none, expired, now), "no_socket"),
		delivered("unknown source, no previous owner", chainStranger, ack(40001, 80), hint(none, none), "no_socket"),
		dropped("known node, unknown previous owner", fxNode, ack(40001, 80), hint(chainUnknown, chainPrevTX), "chain_drop_unknown_owner"),
		dropped("known node, prev this host, prev2 unknown", fxNode, ack(40001, 80), hint(fxBackend, chainUnknown), "chain_drop_unknown_owner"),
		{name: "known node, previous owner known by its prefix", frame: frame(fxNode, ack(40001, 8080), hint(chainPrevRedir, none)),
			verdict: xdpRedirect, chain: "chained", chainedTo: chainPrevRedir, dstMAC: fxOtherMAC, srcMAC: mac2},
		{name: "a known backend chained it here: on to the next", frame: frame(chainPrevTX, ack(40001, 80), hint(chainPrevRedir, none)),
			verdict: xdpRedirect, chain: "chained", chainedTo: chainPrevRedir, dstMAC: fxOtherMAC, srcMAC: mac2},
		dropped("a known backend chained it here, to an unknown owner", chainPrevTX, ack(40001, 80), hint(chainUnknown, none), "chain_drop_unknown_owner"),
	} {
		t.Run(c.name, func(t *testing.T) { runChainCase(t, f, objs, c) })
	}

	// A generation from the future sent by a stranger is not remembered:
	// packets of the known nodes' generation are not dropped as stale.
	t.Run("unknown source cannot raise the newest generation", func(t *testing.T) {
		runChainCase(t, f, objs, delivered("future generation", chainStranger, ack(40003, 8090), hintGUE(none, none, now, now+100), "no_socket"))
		runChainCase(t, f, objs, delivered("current generation", fxNode, ack(40003, 8090), hintGUE(none, none, now, now), "no_socket"))
		runChainCase(t, f, objs, dropped("older generation", fxNode, ack(40003, 8090), hintGUE(none, none, now, now-1), "stale_drop"))
		runChainCase(t, f, objs, dropped("older generation, from a stranger", chainStranger, ack(40003, 8090), hintGUE(none, none, now, now-1), "stale_drop"))
	})

	// Without sets nothing is chained, from anyone to anyone; every
	// hint still tells the newest generation.
	t.Run("no sets", func(t *testing.T) {
		setChainT(t, objs, chainNoSetsCfg)
		defer setChainT(t, objs, chainSets)
		for _, c := range []chainCase{
			delivered("known node, fresh hint", fxNode, ack(40001, 80), hint(chainPrevTX, none), "no_socket"),
			delivered("stranger, fresh hint", chainStranger, ack(40001, 80), hint(chainUnknown, none), "no_socket"),
			delivered("stranger, newer generation", chainStranger, ack(40004, 8091), hintGUE(none, none, now, now+1), "no_socket"),
			dropped("older generation", fxNode, ack(40004, 8091), hintGUE(chainPrevTX, none, now, now), "stale_drop"),
		} {
			runChainCase(t, f, objs, c)
		}
	})
}

// TestDecapChainSynCookie: an ACK that completes a handshake answered
// with a SYN cookie has no socket yet, only the listener, and is
// delivered although a fresh hint would chain it; an ACK whose cookie is
// wrong is chained. The namespace answers every SYN with a cookie
// (tcp_syncookies=2), and a raw socket plays the client to learn one.
func TestDecapChainSynCookie(t *testing.T) {
	f, objs := newChainFixture(t)
	err := f.Runner.Do(func() error {
		return os.WriteFile("/proc/sys/net/ipv4/tcp_syncookies", []byte("2\n"), 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	const sport, seq = 40100, 7000
	var cookie uint32
	if err := f.Runner.Do(func() error {
		var err error
		cookie, err = synCookie(f.MAC, sport, seq)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	now := uint32(time.Now().Unix())
	hint := hintGUE(chainPrevTX, netip.Addr{}, now, now)
	good := tcpSeg(f.MAC, sport, 80, seq+1, cookie+1, 0x10)
	// Off by one, a cookie may still decode to another valid MSS:
	// change the bits that carry it.
	bad := tcpSeg(f.MAC, sport, 80, seq+1, cookie+1+0x100, 0x10)
	for _, c := range []chainCase{
		{name: "valid cookie", frame: encapsulate(good, fxBackend, wire.GUEPort, hint), verdict: xdpPass, want: good,
			decap: "decap_gue", chain: "syncookie"},
		{name: "wrong cookie", frame: encapsulate(bad, fxBackend, wire.GUEPort, hint), verdict: xdpTX,
			chain: "chained", chainedTo: chainPrevTX, dstMAC: fxRouterMAC, srcMAC: f.MAC},
	} {
		t.Run(c.name, func(t *testing.T) { runChainCase(t, f, objs, c) })
	}
}

// TestDecapChainTimeWait: a socket in TIME-WAIT holds no connection. A
// client reuses its port soon after a connection to this host closed
// (the server closed first, so this side keeps the TIME-WAIT socket),
// and the new connection went to another backend; when the slot moves
// here, that connection's packets must go on to the previous owner that
// holds it, not to the TIME-WAIT socket, which would answer each with a
// bare ACK until the client gave up. Without a previous owner to try,
// the packet is delivered, and the TIME-WAIT socket answers it as ever.
func TestDecapChainTimeWait(t *testing.T) {
	f, objs := newChainFixture(t)
	port := timeWaitConn(t, f.Runner, f.Name, netip.AddrPortFrom(fxVIP, 81))
	now := uint32(time.Now().Unix())
	var none netip.Addr
	seg := tcpSeg(f.MAC, port, 81, 5000, 1, 0x18) // PSH, ACK: a request
	for _, c := range []chainCase{
		{name: "fresh hint: to the previous owner", frame: encapsulate(seg, fxBackend, wire.GUEPort, hintGUE(chainPrevTX, none, now, now)),
			verdict: xdpTX, chain: "chained", chainedTo: chainPrevTX, dstMAC: fxRouterMAC, srcMAC: f.MAC},
		{name: "no previous owner: delivered", frame: encapsulate(seg, fxBackend, wire.GUEPort, hintGUE(none, none, now, now)),
			verdict: xdpPass, want: seg, decap: "decap_gue", chain: "no_socket"},
	} {
		t.Run(c.name, func(t *testing.T) { runChainCase(t, f, objs, c) })
	}
}

// timeWaitConn opens a connection from the client (any port) to server
// in namespace ns, whose thread is runner, closes it from the server's side
// first, so that the server's socket stays in TIME-WAIT, and returns the
// client port.
func timeWaitConn(t *testing.T, runner *netns.Runner, ns string, server netip.AddrPort) uint16 {
	t.Helper()
	var client uint16
	err := runner.Do(func() error {
		ln, err := net.Listen("tcp", server.String())
		if err != nil {
			return err
		}
		defer ln.Close()
		d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(clientOf(server.Addr()), 0)), Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", server.String())
		if err != nil {
			return err
		}
		defer c.Close()
		s, err := ln.Accept()
		if err != nil {
			return err
		}
		s.Close() // FIN from the server: it ends in TIME-WAIT
		if _, err := c.Read(make([]byte, 1)); err == nil {
			return errors.New("the client read data, want the server's FIN")
		}
		client = uint16(c.LocalAddr().(*net.TCPAddr).Port)
		return c.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	// The server's socket is in TIME-WAIT once the client's FIN is
	// acknowledged: ss lists it.
	want := netip.AddrPortFrom(clientOf(server.Addr()), client).String()
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, err := exec.Command("ip", "netns", "exec", ns, "ss", "-Htn", "state", "time-wait", "sport", fmt.Sprintf("= :%d", server.Port())).CombinedOutput()
		if err != nil {
			t.Fatalf("ss: %v: %s", err, out)
		}
		if strings.Contains(string(out), want) {
			return client
		}
		if time.Now().After(deadline) {
			t.Fatalf("no TIME-WAIT socket from %s to %s: %s", want, server, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// synCookie sends a SYN from the client's sport to VIP:80 through a raw
// socket and returns the sequence number of the SYN-ACK: with
// tcp_syncookies=2, the cookie. The client's stack answers the SYN-ACK
// with a reset, which a listener that keeps no state ignores. It runs
// in the namespace.
func synCookie(mac net.HardwareAddr, sport uint16, seq uint32) (uint32, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	// Bound to the client: the socket sees only segments to it.
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: fxClient.As4()}); err != nil {
		return 0, err
	}
	tv := unix.NsecToTimeval(int64(5 * time.Second))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return 0, err
	}
	syn := tcpSeg(mac, sport, 80, seq, 0, 0x02)[14+20:]
	if err := unix.Sendto(fd, syn, 0, &unix.SockaddrInet4{Addr: fxVIP.As4()}); err != nil {
		return 0, err
	}
	buf := make([]byte, 1500)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return 0, errors.Join(errors.New("no SYN-ACK from the listener"), err)
		}
		ip := buf[:n]
		if n < 20 || n < int(ip[0]&0xf)*4+20 {
			continue
		}
		tcp := ip[int(ip[0]&0xf)*4:]
		if binary.BigEndian.Uint16(tcp[0:]) == 80 && binary.BigEndian.Uint16(tcp[2:]) == sport &&
			tcp[13]&0x12 == 0x12 && binary.BigEndian.Uint32(tcp[8:]) == seq+1 {
			return binary.BigEndian.Uint32(tcp[4:]), nil
		}
	}
}

// TestSetupDecapChain: SetupDecap writes the chaining window and the
// clock offset into the pinned configuration, 0 turns chaining off, and
// ChainStats reads the pinned counters.
func TestSetupDecapChain(t *testing.T) {
	requirePrivileges(t)
	f := newFixtureNS(t)
	pin := testPinPath(t)
	setupChain := func(c Chain) error {
		return netns.Do(f.Name, func() error {
			_, err := Setup(Options{Interface: "veth0", HostAddrs: []netip.Addr{fxNode}, VIPs: []netip.Addr{fxVIP},
				PinPath: pin, Chain: c})
			return err
		})
	}
	setup := func(w time.Duration) error {
		c := chainSets
		c.Window = w
		return setupChain(c)
	}
	read := func() wire.ChainCfg {
		m, err := ebpf.LoadPinnedMap(filepath.Join(pin, "chain_cfg"), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		var cfg wire.ChainCfg
		if err := m.Lookup(uint32(0), &cfg); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	if err := setup(90 * time.Second); err != nil {
		t.Fatal(err)
	}
	want, err := wallOffset()
	if err != nil {
		t.Fatal(err)
	}
	cfg := read()
	if d := int64(want) - int64(cfg.WallOffsetNs); cfg.WindowS != 90 || d < -int64(time.Second) || d > int64(time.Second) || cfg.Flags != wire.ChainCfgSets {
		t.Errorf("window %d s, offset %d ns, flags %d; want 90 s, about %d ns, %d", cfg.WindowS, cfg.WallOffsetNs, cfg.Flags, want, wire.ChainCfgSets)
	}
	if got := pinnedPrefixes(t, pin, "chain_from"); !slices.Equal(got, chainSets.From) {
		t.Errorf("chain_from holds %v, want %v", got, chainSets.From)
	}
	if got := pinnedPrefixes(t, pin, "chain_to"); !slices.Equal(got, sortedPrefixes(chainSets.To)) {
		t.Errorf("chain_to holds %v, want %v", got, chainSets.To)
	}
	if err := setup(0); err != nil {
		t.Fatal(err)
	}
	if cfg := read(); cfg.WindowS != 0 || cfg.WallOffsetNs != 0 || cfg.Flags != wire.ChainCfgSets {
		t.Errorf("window 0: configuration %+v, want zero with the sets' flag", cfg)
	}
	// Without sets chaining is off whatever the window, and the sets
	// of before are gone.
	if err := setupChain(Chain{Window: 90 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if cfg := read(); cfg != (wire.ChainCfg{}) {
		t.Errorf("no sets: configuration %+v, want zero", cfg)
	}
	if got := pinnedPrefixes(t, pin, "chain_to"); len(got) != 0 {
		t.Errorf("no sets: chain_to holds %v", got)
	}
	// SetChain changes the pinned set-up in place.
	if err := SetChain(pin, chainSets); err != nil {
		t.Fatal(err)
	}
	if cfg := read(); cfg.WindowS != 120 || cfg.Flags != wire.ChainCfgSets {
		t.Errorf("after SetChain: configuration %+v, want a 120 s window with the sets' flag", cfg)
	}
	if got := pinnedPrefixes(t, pin, "chain_to"); !slices.Equal(got, sortedPrefixes(chainSets.To)) {
		t.Errorf("after SetChain chain_to holds %v, want %v", got, chainSets.To)
	}
	// IPv6 peers too (IPv6 backends chain over IPv6).
	if err := SetChain(pin, chainSets6); err != nil {
		t.Fatal(err)
	}
	if got := pinnedPrefixes(t, pin, "chain_to"); !slices.Equal(got, sortedPrefixes(chainSets6.To)) {
		t.Errorf("after SetChain with IPv6 peers chain_to holds %v, want %v", got, chainSets6.To)
	}
	for _, bad := range []Chain{
		{Window: time.Minute, From: []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.0/104")}, To: chainSets.To},
		{Window: time.Minute, From: chainSets.From, To: manyPrefixes(MaxChainTo + 1)},
	} {
		if err := SetChain(pin, bad); err == nil {
			t.Errorf("SetChain(%d from, %d to): no error", len(bad.From), len(bad.To))
		}
	}
	if err := setup(1500 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "whole number of seconds") {
		t.Errorf("window 1.5s: error %v, want one about whole seconds", err)
	}
	st, err := ChainStats(pin)
	if err != nil || len(st) != len(wire.ChainStatNames) {
		t.Fatalf("ChainStats: %v, %v", st, err)
	}
}

// pinnedPrefixes lists the prefixes of a pinned chaining set, sorted.
func pinnedPrefixes(t *testing.T, pin, name string) []netip.Prefix {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(pin, name), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var out []netip.Prefix
	var k wire.ChainPeerKey
	var v uint8
	it := m.Iterate()
	for it.Next(&k, &v) {
		out = append(out, k.Prefix())
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return sortedPrefixes(out)
}

func manyPrefixes(n int) []netip.Prefix {
	out := make([]netip.Prefix, n)
	for i := range out {
		out[i] = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 200, byte(i >> 8), byte(i)}), 32)
	}
	return out
}

func sortedPrefixes(ps []netip.Prefix) []netip.Prefix {
	out := slices.Clone(ps)
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return out
}

func TestCheckChainWindow(t *testing.T) {
	for _, c := range []struct {
		w  time.Duration
		ok bool
	}{
		{0, true}, {2 * time.Minute, true}, {time.Second, true}, {MaxChainWindow, true},
		{-time.Second, false}, {time.Millisecond, false}, {MaxChainWindow + time.Second, false},
	} {
		if err := CheckChainWindow(c.w); (err == nil) != c.ok {
			t.Errorf("CheckChainWindow(%v) = %v, want ok %v", c.w, err, c.ok)
		}
	}
}
