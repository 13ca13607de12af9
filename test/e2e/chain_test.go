package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/internal/dataplane/decap"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/netns"
)

// forgedPackets is how many forged packets each attack sends.
const forgedPackets = 5

// TestChainForgedHints is the review's attack on daisy chaining: from a
// namespace that is no xlb node, a client sends a backend GUE packets
// whose hint names an address of its choice (its own, so that it sees
// what comes back) as the previous owner of a TCP packet the backend
// holds no connection for. A backend that trusted the hint would re-send
// each packet there from its own address: a reflector. None may come
// back: the lab's backends (set up to chain from the lab's xlb nodes to
// its backends) drop them as from an unknown source, a backend set up
// with `xlb backend`'s defaults chains nothing, and even a packet from an
// xlb node is not sent to an address that is no known backend. Each
// refusal is counted under its own reason.
func TestChainForgedHints(t *testing.T) {
	ctx, p := startLab(t, "f", lab.Spec{Clients: 1, Nodes: 1, Backends: 2, Router: lab.RouterEmbedded}, 3*time.Minute)
	var err error
	client, node, be1, be2 := p.Clients[0], p.Nodes[0], p.Backends[0], p.Backends[1]
	vip := p.VIPs[0]

	// The backend's own answers (resets from the stack) go to the inner
	// source; only a re-sent tunnel packet reaches the GUE port.
	catch, err := listenGUE(client.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	defer catch.Close()

	// be2 as `xlb backend` sets a host up without daisy-chaining flags.
	out, err := exec.Command(xlbBinary, netns.ExecCommand, be2.Namespace, "--", xlbBinary, "backend", "--interface", be2.Interface,
		"--vip", vip.String(), "--pin-path", be2.PinDir).CombinedOutput()
	if err != nil {
		t.Fatalf("xlb backend with its defaults on %s: %v: %s", be2.Name, err, out)
	}
	t.Logf("%s set up with the defaults: %s", be2.Name, out)
	if !strings.Contains(string(out), "daisy chaining off") || !strings.Contains(string(out), "--chain-from") {
		t.Errorf("the set-up with the defaults does not say that daisy chaining is off and how to turn it on: %s", out)
	}

	for _, c := range []struct {
		name    string
		from    lab.Host // the namespace that sends the forged packets
		to      lab.Host // the backend attacked
		counter string   // chain counter that must count every packet
	}{
		{"from a client, to a backend chaining from the xlb nodes", client, be1, "chain_drop_untrusted_source"},
		// Chaining off: the packet is delivered, and the stack answers
		// the inner source as it would any packet to the VIP.
		{"from a client, to a backend set up with the defaults", client, be2, "no_socket"},
		{"from an xlb node, naming an address that is no backend", node, be1, "chain_drop_unknown_owner"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before, err := decap.ChainStats(c.to.PinDir)
			if err != nil {
				t.Fatal(err)
			}
			for i := range forgedPackets {
				pkt := forgedGUE(c.from.Addr, c.to.Addr, client.Addr, vip, uint16(41000+i), client.Addr)
				if err := sendRaw(c.from.Namespace, c.to.Addr, pkt); err != nil {
					t.Fatal(err)
				}
			}
			resent := catch.count(ctx, 2*time.Second)
			after, err := decap.ChainStats(c.to.PinDir)
			if err != nil {
				t.Fatal(err)
			}
			chained := after["chained"].Packets - before["chained"].Packets
			counted := after[c.counter].Packets - before[c.counter].Packets
			t.Logf("%d forged packets from %s (%v) to %s naming %v: %d re-sent to it, %d chained, %d counted as %s",
				forgedPackets, c.from.Name, c.from.Addr, c.to.Name, client.Addr, resent, chained, counted, c.counter)
			if resent != 0 || chained != 0 {
				t.Errorf("%s re-sent %d of %d forged packets (chained counter +%d): a reflector", c.to.Name, resent, forgedPackets, chained)
			}
			if counted != forgedPackets {
				t.Errorf("%s counted %d packets as %s, want %d", c.to.Name, counted, c.counter, forgedPackets)
			}
		})
	}
}

// forgedGUE is a GUE packet from src to backend carrying the daisy-chain
// hint (variant 0, hlen 4) that names prev as the previous owner, fresh,
// around a TCP ACK from client:sport to vip:80 that opens no connection.
func forgedGUE(src, backend, client, vip netip.Addr, sport uint16, prev netip.Addr) []byte {
	tcp := make([]byte, 20)
	binary.BigEndian.PutUint16(tcp[0:], sport)
	binary.BigEndian.PutUint16(tcp[2:], 80)
	binary.BigEndian.PutUint32(tcp[4:], 1000)
	binary.BigEndian.PutUint32(tcp[8:], 1)
	tcp[12], tcp[13] = 5<<4, 0x10 // ACK
	binary.BigEndian.PutUint16(tcp[14:], 512)
	binary.BigEndian.PutUint16(tcp[16:], l4Checksum(client, vip, 6, tcp))
	inner := append(ipv4Header(client, vip, 6, len(tcp)), tcp...)

	now := uint32(time.Now().Unix())
	gue := []byte{4, 4, 0, 0} // hlen 4, IPIP inside
	p := prev.As4()
	gue = append(gue, p[:]...)
	gue = binary.BigEndian.AppendUint32(gue, 0)   // no second previous owner
	gue = binary.BigEndian.AppendUint32(gue, now) // the slot changed now
	gue = binary.BigEndian.AppendUint32(gue, now) // the table's generation
	udp := make([]byte, 8)
	binary.BigEndian.PutUint16(udp[0:], 50000)
	binary.BigEndian.PutUint16(udp[2:], wire.GUEPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(gue)+len(inner)))
	payload := append(append(udp, gue...), inner...)
	return append(ipv4Header(src, backend, 17, len(payload)), payload...)
}

func ipv4Header(src, dst netip.Addr, proto byte, payload int) []byte {
	h := make([]byte, 20)
	h[0] = 0x45
	binary.BigEndian.PutUint16(h[2:], uint16(20+payload))
	h[6] = 0x40 // DF
	h[8], h[9] = 64, proto
	s, d := src.As4(), dst.As4()
	copy(h[12:], s[:])
	copy(h[16:], d[:])
	binary.BigEndian.PutUint16(h[10:], onesComplement(h))
	return h
}

func l4Checksum(src, dst netip.Addr, proto byte, l4 []byte) uint16 {
	s, d := src.As4(), dst.As4()
	ph := append(append(append([]byte{}, s[:]...), d[:]...), 0, proto, byte(len(l4)>>8), byte(len(l4)))
	return onesComplement(append(ph, l4...))
}

func onesComplement(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// sendRaw sends the IPv4 packet pkt (header included) from namespace ns.
func sendRaw(ns string, dst netip.Addr, pkt []byte) error {
	return netns.Do(ns, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
		if err != nil {
			return fmt.Errorf("raw socket in %s: %w", ns, err)
		}
		defer unix.Close(fd)
		if err := unix.Sendto(fd, pkt, 0, &unix.SockaddrInet4{Addr: dst.As4()}); err != nil {
			return fmt.Errorf("send a forged packet from %s to %v: %w", ns, dst, err)
		}
		return nil
	})
}

// gueCatcher counts the datagrams that arrive at the GUE port in a
// namespace.
type gueCatcher struct{ conn *net.UDPConn }

func listenGUE(ns string) (*gueCatcher, error) {
	var c *net.UDPConn
	err := netns.Do(ns, func() error {
		var err error
		c, err = net.ListenUDP("udp4", &net.UDPAddr{Port: wire.GUEPort})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen on UDP %d in %s: %w", wire.GUEPort, ns, err)
	}
	return &gueCatcher{conn: c}, nil
}

// count returns how many datagrams arrive within wait.
func (g *gueCatcher) count(ctx context.Context, wait time.Duration) int {
	deadline := time.Now().Add(wait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = g.conn.SetReadDeadline(deadline)
	n := 0
	buf := make([]byte, 2048)
	for {
		if _, _, err := g.conn.ReadFromUDP(buf); err != nil {
			return n // the deadline, or a closed socket
		}
		n++
	}
}

func (g *gueCatcher) Close() { g.conn.Close() }
