package bgp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/osrg/gobgp/v4/api"
	gobgp "github.com/osrg/gobgp/v4/pkg/packet/bgp"

	"github.com/xlbproject/xlb/testbed/testenv"
)

// TestFirstConnectIsImmediate: a started speaker's session is up well
// before GoBGP would have made its first connection attempt (2 s × 0.75
// to 1 after the peer is added, whatever connect-retry says), because
// the speaker dials the peer itself and hands the connection over.
func TestFirstConnectIsImmediate(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	node, rtr := newNamespace(t, "node"), newNamespace(t, "rtr")
	nodeIP, rtrIP := mustAddr("10.251.3.2"), mustAddr("10.251.3.1")
	connect(t, node, "eth0", []string{nodeIP.String()}, rtr, "eth0", []string{rtrIP.String()})
	router := startRouter(t, rtr, 65000, rtrIP, routerPeer{Address: nodeIP, ASN: 65001})

	sp := startSpeaker(t, node, helperOptions{ASN: 65001, NextHop: nodeIP, Peers: []Peer{{Address: rtrIP, ASN: 65000}}})
	started := time.Now() // Start has returned: GoBGP has the peer
	const bound = time.Second
	for {
		p := sp.peer(rtrIP)
		if p.State == StateEstablished {
			break
		}
		if time.Since(started) > bound {
			t.Fatalf("session not established %s after Start (GoBGP alone connects after 1.5-2 s): %+v", bound, p)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("Start to established: %s", time.Since(started).Round(time.Millisecond))
	// The router sees the node itself, not the relay. It is established
	// once the node's KEEPALIVE answers its OPEN, a moment after the node
	// is.
	testenv.Eventually(t, time.Second, "the router's session with the node", func() (bool, string) {
		st := router.peerState(t, nodeIP)
		return st == api.PeerState_SESSION_STATE_ESTABLISHED, st.String()
	})
	vip := mustPrefix("10.99.3.1/32")
	if err := sp.Announce(vip, Attributes{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "route on the router", func() (bool, string) {
		rr, ok := router.rib(t)[vip]
		return ok && rr.NextHop == nodeIP, rr.String()
	})
}

// TestMultihopAndPort runs eBGP sessions to routers one hop away, on
// port 1790: with multihop 2 the session comes up on that port; without
// multihop (TTL 1) the packets die at the hop in between and the session
// never comes up.
func TestMultihopAndPort(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	node, mid, rtr := newNamespace(t, "node"), newNamespace(t, "mid"), newNamespace(t, "rtr")
	nodeIP, midNode := mustAddr("10.251.4.2"), mustAddr("10.251.4.1")
	midRtr, farRtr, ttlRtr := mustAddr("10.251.5.1"), mustAddr("10.251.5.2"), mustAddr("10.251.5.3")
	connect(t, node, "eth0", []string{nodeIP.String()}, mid, "eth0", []string{midNode.String()})
	connect(t, mid, "eth1", []string{midRtr.String()}, rtr, "eth0", []string{farRtr.String(), ttlRtr.String()})
	run(t, "ip", "netns", "exec", mid, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	run(t, "ip", "-n", node, "route", "add", "10.251.5.0/24", "via", midNode.String())
	run(t, "ip", "-n", rtr, "route", "add", "10.251.4.0/24", "via", midRtr.String())

	const port = 1790
	far := startRouterOn(t, rtr, 65000, farRtr, port, routerPeer{Address: nodeIP, ASN: 65001, Multihop: 2})
	ttl := startRouterOn(t, rtr, 65003, ttlRtr, port, routerPeer{Address: nodeIP, ASN: 65001, Multihop: 2})
	sp := startSpeaker(t, node, helperOptions{ASN: 65001, NextHop: nodeIP, Peers: []Peer{
		{Address: farRtr, ASN: 65000, Port: port, Multihop: 2},
		{Address: ttlRtr, ASN: 65003, Port: port}, // TTL 1
	}})
	vip := mustPrefix("10.99.4.1/32")
	if err := sp.Announce(vip, Attributes{}); err != nil {
		t.Fatal(err)
	}
	waitEstablished(t, sp, farRtr, 10*time.Second)
	testenv.Eventually(t, 5*time.Second, "route on the router one hop away", func() (bool, string) {
		rr, ok := far.rib(t)[vip]
		return ok && rr.NextHop == nodeIP && rr.ASPath == "65001", rr.String()
	})

	// The SYN with TTL 1 dies at the hop between, which says so (ICMP
	// time exceeded): the attempt fails as "no route to host" when it
	// times out (dialTimeout, 4 s).
	want := fmt.Sprintf("connect to %s port %d: no route to host", ttlRtr, port)
	testenv.Eventually(t, 10*time.Second, "TTL-1 session failing", func() (bool, string) {
		p := sp.peer(ttlRtr)
		if p.State == StateEstablished {
			t.Fatalf("session with %s up despite TTL 1 over a routed hop: %+v", ttlRtr, p)
		}
		return strings.Contains(p.LastError, want), fmt.Sprintf("%+v", p)
	})
	if st := ttl.peerState(t, nodeIP); st == api.PeerState_SESSION_STATE_ESTABLISHED {
		t.Errorf("router %s established with %s although the node sends with TTL 1", ttlRtr, nodeIP)
	}
}

// TestRelayThroughNodeListener: with a listener on the node address (a
// passive peer), the speaker hands its own connections to that listener,
// and the passive peer's session still comes in through it. The passive
// peer is another Speaker, which connects to the node's listenPort.
func TestRelayThroughNodeListener(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	node, rtr := newNamespace(t, "node"), newNamespace(t, "rtr")
	nodeIP, active, passive := mustAddr("10.251.6.2"), mustAddr("10.251.6.1"), mustAddr("10.251.6.3")
	connect(t, node, "eth0", []string{nodeIP.String()}, rtr, "eth0", []string{active.String(), passive.String()})
	const listen = 1179
	router := startRouter(t, rtr, 65000, active, routerPeer{Address: nodeIP, ASN: 65001})
	sp := startSpeaker(t, node, helperOptions{ASN: 65001, NextHop: nodeIP, ListenPort: listen, Peers: []Peer{
		{Address: active, ASN: 65000},
		{Address: passive, ASN: 65003, Passive: true},
	}})
	caller := startSpeaker(t, rtr, helperOptions{ASN: 65003, NextHop: passive, Peers: []Peer{{Address: nodeIP, ASN: 65001, Port: listen}}})
	vip := mustPrefix("10.99.6.1/32")
	if err := sp.Announce(vip, Attributes{}); err != nil {
		t.Fatal(err)
	}
	waitEstablished(t, sp, active, 2*time.Second)
	waitEstablished(t, sp, passive, 2*time.Second)
	waitEstablished(t, caller, nodeIP, 2*time.Second)
	testenv.Eventually(t, 5*time.Second, "route on the router", func() (bool, string) {
		rr, ok := router.rib(t)[vip]
		return ok && rr.NextHop == nodeIP, rr.String()
	})
	testenv.Eventually(t, 5*time.Second, "route sent to the passive peer", func() (bool, string) {
		p := sp.peer(passive)
		return p.Counters != nil && p.Counters.PrefixesSent == 1, fmt.Sprintf("%+v", p)
	})
}

// tcpPair returns both ends of a TCP connection over loopback.
func tcpPair(t *testing.T) (client, server *net.TCPConn) {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

func serialize(t *testing.T, m *gobgp.BGPMessage) []byte {
	t.Helper()
	b, err := m.Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// relayUnderTest is a relaySession between a fake peer ("router") and a
// fake GoBGP.
type relayUnderTest struct {
	router, gobgp *net.TCPConn
	cancel        context.CancelFunc
	done          chan struct{}
	mu            sync.Mutex
	notes         []string // NOTIFICATIONs reported, "code/subcode"
}

func startRelay(t *testing.T) *relayUnderTest {
	t.Helper()
	router, peerSide := tcpPair(t)
	localSide, fakeGoBGP := tcpPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	r := &relayUnderTest{router: router, gobgp: fakeGoBGP, cancel: cancel, done: make(chan struct{})}
	go func() {
		relaySession(ctx, peerSide, localSide, func(code, sub uint8) {
			r.mu.Lock()
			r.notes = append(r.notes, fmt.Sprintf("%d/%d", code, sub))
			r.mu.Unlock()
		})
		close(r.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

func (r *relayUnderTest) reported() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.notes...)
}

func (r *relayUnderTest) waitDone(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(within):
		t.Fatalf("relay still running after %s", within)
	}
}

// readAll reads c to EOF, failing the test after a few seconds.
func readAll(t *testing.T, c *net.TCPConn) []byte {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read: %v (after %d bytes)", err, len(b))
	}
	return b
}

func TestRelaySession(t *testing.T) {
	open, err := openMessage(65000, 9*time.Second, mustAddr("10.0.1.1"), true, false)
	if err != nil {
		t.Fatal(err)
	}
	keepalive := serialize(t, gobgp.NewBGPKeepAliveMessage())
	badPeerAS := serialize(t, gobgp.NewBGPNotificationMessage(2, 2, nil))
	cease := serialize(t, gobgp.NewBGPNotificationMessage(codeCease, 2, nil))

	t.Run("rejection", func(t *testing.T) {
		// The peer answers our OPEN with its own and a NOTIFICATION, then
		// closes: GoBGP gets every byte and then EOF, and the
		// NOTIFICATION is reported.
		r := startRelay(t)
		sent := slicesConcat(open, badPeerAS)
		if _, err := r.router.Write(sent); err != nil {
			t.Fatal(err)
		}
		_ = r.router.CloseWrite()
		if got := readAll(t, r.gobgp); !bytes.Equal(got, sent) {
			t.Errorf("GoBGP got %x, want %x", got, sent)
		}
		r.gobgp.Close()
		r.waitDone(t, time.Second) // both sides closed: no linger
		if got := r.reported(); len(got) != 1 || got[0] != "2/2" {
			t.Errorf("reported %v, want [2/2]", got)
		}
	})

	t.Run("established", func(t *testing.T) {
		// Once the peer has sent a KEEPALIVE the session is up and its
		// NOTIFICATIONs are GoBGP's business alone. Bytes pass both
		// ways; GoBGP's close reaches the peer as a FIN after its last
		// message.
		r := startRelay(t)
		fromRouter := slicesConcat(open, keepalive, keepalive, cease)
		if _, err := r.router.Write(fromRouter); err != nil {
			t.Fatal(err)
		}
		_ = r.router.CloseWrite()
		fromGoBGP := slicesConcat(open, keepalive, cease)
		if _, err := r.gobgp.Write(fromGoBGP); err != nil {
			t.Fatal(err)
		}
		_ = r.gobgp.CloseWrite()
		if got := readAll(t, r.router); !bytes.Equal(got, fromGoBGP) {
			t.Errorf("peer got %x, want %x", got, fromGoBGP)
		}
		if got := readAll(t, r.gobgp); !bytes.Equal(got, fromRouter) {
			t.Errorf("GoBGP got %x, want %x", got, fromRouter)
		}
		r.waitDone(t, time.Second)
		if got := r.reported(); len(got) != 0 {
			t.Errorf("reported %v after the session was up", got)
		}
	})

	t.Run("not BGP", func(t *testing.T) {
		// A header with an impossible length stops the sniffing; the
		// bytes still pass unchanged, for GoBGP to judge.
		r := startRelay(t)
		junk := bytes.Repeat([]byte{0xff}, 16)
		junk = append(junk, 0, 5, 1) // length 5
		junk = append(junk, badPeerAS...)
		if _, err := r.router.Write(junk); err != nil {
			t.Fatal(err)
		}
		_ = r.router.CloseWrite()
		if got := readAll(t, r.gobgp); !bytes.Equal(got, junk) {
			t.Errorf("GoBGP got %x, want %x", got, junk)
		}
		if got := r.reported(); len(got) != 0 {
			t.Errorf("reported %v from a malformed stream", got)
		}
		r.gobgp.Close()
		r.waitDone(t, time.Second)
	})

	t.Run("one side silent", func(t *testing.T) {
		// GoBGP closes, the peer never does: the relay closes both after
		// relayLinger.
		r := startRelay(t)
		r.gobgp.Close()
		start := time.Now()
		r.waitDone(t, relayLinger+time.Second)
		if d := time.Since(start); d < relayLinger-100*time.Millisecond {
			t.Errorf("relay ended after %s, before relayLinger (%s)", d, relayLinger)
		}
		_ = readAll(t, r.router) // EOF: closed
	})

	t.Run("canceled", func(t *testing.T) {
		// Stop: the relay ends within relayLinger even if neither side
		// closes.
		r := startRelay(t)
		r.cancel()
		r.waitDone(t, relayLinger+time.Second)
		_ = readAll(t, r.router)
		_ = readAll(t, r.gobgp)
	})
}

func slicesConcat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// TestAPIPeer pins how a peer's options reach GoBGP: as they are for a
// peer GoBGP connects to itself or waits for (passive); for a relayed
// peer, GoBGP gets the stand-in, the relay's key and listener, and
// waits; port, key and TTL go to the connector instead (dialPeer, run
// against real sessions in TestMultihopAndPort and TestBadPeers).
func TestAPIPeer(t *testing.T) {
	s := newTestSpeaker(t)
	p := Peer{Address: mustAddr("10.0.1.1"), ASN: 65000, Port: 1790, Password: "secret", HoldTime: 6 * time.Second,
		Keepalive: 2 * time.Second, Multihop: 3}

	native := s.apiPeer(p, true, nil, mustAddr("127.100.0.1"))
	if c := native.Conf; c.NeighborAddress != "10.0.1.1" || c.PeerAsn != 65000 || c.LocalAsn != 65001 || c.AuthPassword != "secret" || !c.AdminDown {
		t.Errorf("native Conf = %+v", c)
	}
	if tr := native.Transport; tr.RemotePort != 1790 || tr.LocalAddress != "10.0.1.2" || tr.PassiveMode {
		t.Errorf("native Transport = %+v", tr)
	}
	if m := native.EbgpMultihop; !m.Enabled || m.MultihopTtl != 3 {
		t.Errorf("native EbgpMultihop = %+v", m)
	}
	if tc := native.Timers.Config; tc.HoldTime != 6 || tc.KeepaliveInterval != 2 || tc.ConnectRetry != 5 {
		t.Errorf("native Timers = %+v", tc)
	}

	rc := &relayConfig{target: netip.MustParseAddrPort("127.0.0.1:40000"), key: "relay-key"}
	relayed := s.apiPeer(p, false, rc, mustAddr("127.100.0.7"))
	if c := relayed.Conf; c.NeighborAddress != "127.100.0.7" || c.PeerAsn != 65000 || c.AuthPassword != "relay-key" || c.AdminDown {
		t.Errorf("relayed Conf = %+v", c)
	}
	if tr := relayed.Transport; !tr.PassiveMode || tr.LocalAddress != "127.0.0.1" || tr.RemotePort != 0 {
		t.Errorf("relayed Transport = %+v", tr)
	}
	if tc := relayed.Timers.Config; tc.HoldTime != 6 || tc.KeepaliveInterval != 2 {
		t.Errorf("relayed Timers = %+v", tc)
	}

	families := func(ap *api.Peer) (out []string) {
		for _, af := range ap.AfiSafis {
			out = append(out, fmt.Sprintf("%s/%d", af.Config.Family.Afi, af.PrefixLimits.MaxPrefixes))
		}
		return out
	}
	if got := families(native); !slices.Equal(got, []string{"AFI_IP/0"}) {
		t.Errorf("IPv4-only node: families %v, want IPv4 unicast alone", got)
	}
	// A dual-stack node: both families on a session of either family,
	// each with the peer's prefix limit; an IPv6 peer's session is
	// sourced from the node's IPv6 address.
	s6, err := New(Options{ASN: 65001, NextHop: mustAddr("10.0.1.2"), NextHop6: mustAddr("2001:db8::2"), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	p6 := Peer{Address: mustAddr("2001:db8::1"), ASN: 65000, MaxPrefixes: 7}
	for _, peer := range []Peer{{Address: mustAddr("10.0.1.1"), ASN: 65000, MaxPrefixes: 7}, p6} {
		if got := families(s6.apiPeer(peer, false, nil, netip.Addr{})); !slices.Equal(got, []string{"AFI_IP/7", "AFI_IP6/7"}) {
			t.Errorf("dual-stack node, peer %s: families %v, want IPv4 and IPv6 unicast", peer.Address, got)
		}
	}
	if tr := s6.apiPeer(p6, false, nil, netip.Addr{}).Transport; tr.LocalAddress != "2001:db8::2" {
		t.Errorf("IPv6 peer: local address %s, want the node's IPv6 address", tr.LocalAddress)
	}

	// Without multihop an eBGP session is TTL-limited to 1 hop.
	p.Multihop = 0
	if m := s.apiPeer(p, false, nil, netip.Addr{}).EbgpMultihop; m.Enabled {
		t.Errorf("EbgpMultihop without multihop = %+v", m)
	}
}

// TestStandIns: stand-in addresses are loopback, distinct, and never
// a network or broadcast-looking address.
func TestStandIns(t *testing.T) {
	s := newTestSpeaker(t)
	seen := map[netip.Addr]bool{}
	for range 600 {
		a := s.allocStandIn()
		b := a.As4()
		if !a.IsLoopback() || !standInPrefix.Contains(a) || b[3] == 0 || b[3] == 255 || seen[a] {
			t.Fatalf("stand-in %s (after %d)", a, len(seen))
		}
		seen[a] = true
	}
}
