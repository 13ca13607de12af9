package bfd

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xlbproject/xlb/testbed/netns"
	"github.com/xlbproject/xlb/testbed/testenv"
)

func testLogger(t *testing.T, name string) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})).With("side", name)
}

// loopbackPair returns two random addresses in 127/8, so that tests
// running at the same time on this host do not share port 3784.
func loopbackPair() (netip.Addr, netip.Addr) {
	b, c := byte(1+rand.IntN(250)), byte(1+rand.IntN(250))
	return netip.AddrFrom4([4]byte{127, b, c, 1}), netip.AddrFrom4([4]byte{127, b, c, 2})
}

// newManager starts a Manager that the test closes (quietly, without
// failing it: the test may have closed it already).
func newManager(t *testing.T, local netip.Addr, name string) *Manager {
	t.Helper()
	m, err := NewManager(local, testLogger(t, name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// waitEvent waits for an event of m that takes peer to state want,
// skipping the ones before it (Down→Init on the way Up).
func waitEvent(t *testing.T, m *Manager, peer netip.Addr, want State, timeout time.Duration) Event {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-m.Events():
			if !ok {
				t.Fatalf("events closed while waiting for %v to be %v", peer, want)
			}
			if ev.Peer == peer && ev.State == want {
				return ev
			}
			t.Logf("event on the way to %v: %+v", want, ev)
		case <-deadline:
			t.Fatalf("no %v event for %v within %v; sessions: %+v", want, peer, timeout, m.Sessions())
		}
	}
}

func sessionOf(t *testing.T, m *Manager, peer netip.Addr) SessionStatus {
	t.Helper()
	for _, s := range m.Sessions() {
		if s.Peer == peer {
			return s
		}
	}
	t.Fatalf("no session for %v", peer)
	return SessionStatus{}
}

// nsPair is two network namespaces joined by a veth pair, with A.1 and
// A.2 of 10.250.N.0/24 on either end.
type nsPair struct {
	ns     [2]string
	ifname [2]string
	addr   [2]netip.Addr
	addr6  [2]netip.Addr // fd00:250:N::1 and ::2 of fd00:250:N::/64
}

var nsSeq atomic.Int32

func newNSPair(t *testing.T) *nsPair {
	t.Helper()
	testenv.RequireRoot(t, "namespace tests")
	seq := nsSeq.Add(1)
	base := fmt.Sprintf("bfd%d%c", os.Getpid(), 'a'+seq-1)
	p := &nsPair{
		ns:     [2]string{base + "1", base + "2"},
		ifname: [2]string{base + "v1", base + "v2"},
		addr: [2]netip.Addr{
			netip.AddrFrom4([4]byte{10, 250, byte(seq), 1}),
			netip.AddrFrom4([4]byte{10, 250, byte(seq), 2}),
		},
		addr6: [2]netip.Addr{
			netip.MustParseAddr(fmt.Sprintf("fd00:250:%d::1", seq)),
			netip.MustParseAddr(fmt.Sprintf("fd00:250:%d::2", seq)),
		},
	}
	t.Cleanup(func() {
		for _, ns := range p.ns {
			if netns.Exists(ns) {
				if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
					t.Errorf("ip netns del %s: %v: %s", ns, err, out)
				}
			}
		}
	})
	run(t, "ip", "netns", "add", p.ns[0])
	run(t, "ip", "netns", "add", p.ns[1])
	run(t, "ip", "link", "add", p.ifname[0], "netns", p.ns[0], "type", "veth", "peer", "name", p.ifname[1], "netns", p.ns[1])
	for i := range 2 {
		run(t, "ip", "-n", p.ns[i], "addr", "add", p.addr[i].String()+"/24", "dev", p.ifname[i])
		// nodad: usable at once, as the IPv4 address is.
		run(t, "ip", "-n", p.ns[i], "addr", "add", p.addr6[i].String()+"/64", "dev", p.ifname[i], "nodad")
		run(t, "ip", "-n", p.ns[i], "link", "set", p.ifname[i], "up")
		run(t, "ip", "-n", p.ns[i], "link", "set", "lo", "up")
	}
	return p
}

// manager starts a Manager on side i of the pair, inside its namespace,
// on its IPv4 address.
func (p *nsPair) manager(t *testing.T, i int) *Manager {
	t.Helper()
	return p.managerOn(t, i, p.addr[i])
}

// managerOn starts a Manager on side i of the pair on local.
func (p *nsPair) managerOn(t *testing.T, i int, local netip.Addr) *Manager {
	t.Helper()
	var m *Manager
	err := netns.Do(p.ns[i], func() (err error) {
		m, err = NewManager(local, testLogger(t, p.ns[i]))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func run(t *testing.T, argv ...string) string {
	t.Helper()
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}
