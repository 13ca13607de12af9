package decap

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// newChainFixture6 is the daisy-chaining fixture with the IPv6 VIP and
// client local too, a listener on [VIP]:80 and a connection to it from
// the client, whose client port it returns.
func newChainFixture6(t *testing.T) (*fixtureNS, *backendObjects, uint16) {
	t.Helper()
	f, objs := newChainFixture(t)
	for _, a := range []netip.Addr{fxVIP6, fxClient6} {
		ipcmd(t, "-n", f.Name, "addr", "add", a.String()+"/128", "dev", "lo")
	}
	var ln net.Listener
	var c net.Conn
	err := f.Runner.Do(func() error {
		var err error
		if ln, err = net.Listen("tcp6", netip.AddrPortFrom(fxVIP6, 80).String()); err != nil {
			return err
		}
		d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(fxClient6, 0)), Timeout: 5 * time.Second}
		c, err = d.Dial("tcp6", netip.AddrPortFrom(fxVIP6, 80).String())
		return err
	})
	if ln != nil {
		t.Cleanup(func() { ln.Close() })
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return f, objs, uint16(c.LocalAddr().(*net.TCPAddr).Port)
}

// hintGUE6 is hintGUE's header saying IPv6 inside.
func hintGUE6(prev, prev2 netip.Addr, changed, generation uint32) []byte {
	h := hintGUE(prev, prev2, changed, generation)
	h[1] = nhIPv6
	return h
}

// TestDecapChainIPv6: the hint of a GUE/IPv4 packet with IPv6 inside is
// followed as for IPv4: a SYN or a packet of a local connection is
// delivered, one without goes on to the previous owner (the inner packet
// untouched), a stale one is dropped, a forged one is refused. Over an
// IPv6 outer header, whose hint names IPv4 previous owners, it is not
// followed.
func TestDecapChainIPv6(t *testing.T) {
	f, objs, conn := newChainFixture6(t)
	now := uint32(time.Now().Unix())
	var none netip.Addr
	tcp6 := func(sport, dport uint16, flags uint8) []byte {
		return ethFrame(f.MAC, seg{src: fxClient6, dst: fxVIP6, sport: sport, dport: dport, proto: nhTCP, seq: 1000, ack: 1, flags: flags}.datagram())
	}
	ack := func(sport, dport uint16) []byte { return tcp6(sport, dport, 0x10) }
	// gue wraps an IPv6 frame in GUE/IPv4 to this host.
	gue := func(inner, hint []byte) []byte {
		out := encapsulate(inner, fxBackend, wire.GUEPort, hint)
		out[12], out[13] = 0x08, 0x00
		return out
	}
	fresh := hintGUE6(chainPrevTX, none, now, now)
	delivered := func(name string, inner, hint []byte, stat string) chainCase {
		return chainCase{name: name, frame: gue(inner, hint), verdict: xdpPass, want: inner, decap: "decap_gue", chain: stat}
	}
	dropped := func(name string, frame []byte, stat string) chainCase {
		return chainCase{name: name, frame: frame, verdict: xdpDrop, chain: stat}
	}
	for _, c := range []chainCase{
		delivered("SYN", tcp6(40000, 80, 0x02), fresh, "syn"),
		delivered("established connection", ack(conn, 80), fresh, "socket"),
		delivered("listener only, no previous owner", ack(40001, 80), hintGUE6(none, none, now, now), "no_socket"),
		{name: "listener only, fresh hint: chained", frame: gue(ack(40001, 80), fresh), verdict: xdpTX,
			chain: "chained", chainedTo: chainPrevTX, dstMAC: fxRouterMAC, srcMAC: f.MAC},
		{name: "two previous owners: to prev, prev2 travels on", frame: gue(ack(40001, 80), hintGUE6(chainPrevTX, chainPrevRedir, now, now)),
			verdict: xdpTX, chain: "chained", chainedTo: chainPrevTX, next: chainPrevRedir, dstMAC: fxRouterMAC, srcMAC: f.MAC},
		delivered("newest generation, no socket", ack(40002, 8080), hintGUE6(none, none, now, now), "no_socket"),
		dropped("older generation, no socket", gue(ack(40002, 8080), hintGUE6(none, none, now, now-1)), "stale_drop"),
		dropped("from an unknown source", fromSource(gue(ack(40001, 80), fresh), chainStranger), "chain_drop_untrusted_source"),
		dropped("to an unknown previous owner", gue(ack(40001, 80), hintGUE6(chainUnknown, none, now, now)), "chain_drop_unknown_owner"),
		delivered("UDP with a hint", ethFrame(f.MAC, seg{src: fxClient6, dst: fxVIP6, sport: 5353, dport: 53, proto: nhUDP}.datagram()), fresh, ""),
		delivered("no hint", ack(40001, 80), gue6, ""),
		{name: "GUE/IPv6: the hint is not followed", frame: ethFrame(f.MAC, tunnel{dst: fxBackend6, gue: fresh}.wrap(ack(40001, 80)[14:])),
			verdict: xdpPass, want: ack(40001, 80), decap: "decap_gue"},
	} {
		t.Run(c.name, func(t *testing.T) { runChainCase(t, f, objs, c) })
	}
}
