package elect

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/xlbproject/xlb/testbed/netns"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// nsPair is two namespaces joined by a veth pair, 10.77.0.1 and
// 10.77.0.2.
type nsPair struct {
	ns   [2]string
	addr [2]netip.Addr
}

func run(t *testing.T, argv ...string) {
	t.Helper()
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%v: %v: %s", argv, err, out)
	}
}

func newNSPair(t *testing.T) *nsPair {
	testenv.RequireRoot(t, "network namespaces")
	id := fmt.Sprintf("xlbel%d", os.Getpid()%100000)
	p := &nsPair{ns: [2]string{id + "a", id + "b"}, addr: [2]netip.Addr{netip.MustParseAddr("10.77.0.1"), netip.MustParseAddr("10.77.0.2")}}
	for _, ns := range p.ns {
		run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() }) // the veth goes with it
	}
	run(t, "ip", "link", "add", "el0", "netns", p.ns[0], "type", "veth", "peer", "name", "el1", "netns", p.ns[1])
	for i, ns := range p.ns {
		dev := fmt.Sprintf("el%d", i)
		run(t, "ip", "-n", ns, "addr", "add", p.addr[i].String()+"/24", "dev", dev)
		run(t, "ip", "-n", ns, "link", "set", dev, "up")
		run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	return p
}

// elector starts node i's Elector in its namespace; the returned function
// stops it (leaving first when leave is set) and waits for it.
func (p *nsPair) elector(t *testing.T, i int, deadAfter time.Duration) (*Elector, func(leave bool)) {
	t.Helper()
	cfg := Config{Self: []string{"a", "b"}[i], Nodes: []Node{{"a", p.addr[0]}, {"b", p.addr[1]}}, Port: 7947,
		Heartbeat: 50 * time.Millisecond, DeadAfter: deadAfter}
	var e *Elector
	if err := netns.Do(p.ns[i], func() (err error) {
		e, err = New(cfg, slog.New(slog.DiscardHandler))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { e.Run(ctx, func([]string) {}) })
	var once sync.Once
	stop := func(leave bool) {
		once.Do(func() {
			if leave {
				e.Leave()
			}
			cancel()
			wg.Wait()
		})
	}
	t.Cleanup(func() { stop(false) })
	return e, stop
}

func waitAlive(t *testing.T, e *Elector, want ...string) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, fmt.Sprintf("%s sees %v alive", e.cfg.Self, want), func() (bool, string) {
		got := e.Alive()
		return slices.Equal(got, want), fmt.Sprint(got)
	})
}

// TestNamespaces runs two Electors across a veth pair: they find each
// other, a leaving node is gone at once (long before the dead time), a
// silent one after the dead time, and a datagram from an unlisted
// address is refused and counted.
func TestNamespaces(t *testing.T) {
	p := newNSPair(t)
	const long = time.Minute
	a, _ := p.elector(t, 0, long)
	b, stopB := p.elector(t, 1, long)
	waitAlive(t, a, "a", "b")
	waitAlive(t, b, "b", "a")

	// Leaving: a takes b's VIPs over at once; with a dead time of a
	// minute, only the leaving heartbeat can have told it.
	start := time.Now()
	stopB(true)
	waitAlive(t, a, "a")
	t.Logf("a saw b leave after %v (dead time %v)", time.Since(start), long)

	// A datagram from an address not listed is refused and counted.
	if err := netns.Do(p.ns[1], func() error {
		c, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.IPv4(10, 77, 0, 2), Port: 7948}, net.UDPAddrFromAddrPort(netip.AddrPortFrom(p.addr[0], 7947)))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write(Heartbeat{Name: "b", Seq: 1}.Marshal())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "a counts the heartbeat from another port as spoofed", func() (bool, string) {
		v := a.View()
		return v.Dropped[DropSpoofed] == 1, fmt.Sprint(v.Dropped)
	})
	if got := a.Alive(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("a sees %v alive after a spoofed heartbeat, want a alone", got)
	}
}

// TestNamespacesSilence: a node that stops without a word (SIGKILL, a
// hang) is gone for the other once the dead time has passed.
func TestNamespacesSilence(t *testing.T) {
	p := newNSPair(t)
	a, _ := p.elector(t, 0, 300*time.Millisecond)
	_, stopB := p.elector(t, 1, 300*time.Millisecond)
	waitAlive(t, a, "a", "b")
	start := time.Now()
	stopB(false)
	waitAlive(t, a, "a")
	t.Logf("a saw silent b dead after %v (heartbeat 50ms, dead time 300ms)", time.Since(start))
	v := a.View()
	if len(v.Peers) != 1 || v.Peers[0].Alive || v.Peers[0].Name != "b" {
		t.Errorf("a's view of its peers: %+v", v.Peers)
	}
}
