package lb

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/testbed/netns"
	"github.com/xlbproject/xlb/testbed/xdppass"
)

// TestLBNATLive runs real TCP and UDP through the attached program, in
// namespaces: a client, a router, the node and a backend that runs
// nothing of xlb's. Full NAT: the backend sees the node's address and a
// port of its range; DNAT: it sees the client, and its route back to the
// client goes through the node. Both ways are translated by XDP (the
// node's kernel has no VIP and no session: a packet it saw would not
// reach its peer). Then path MTU discovery through the node, both ways:
// the router's routes to the backends and to the clients carry an MTU of
// 1400 that neither end's MSS knows of, so 20 000 bytes each way go
// through only if the router's fragmentation-needed errors, translated by
// the node, reach the sender of each direction.
func TestLBNATLive(t *testing.T) {
	requirePrivileges(t)
	id := fmt.Sprintf("%d-%d", os.Getpid(), nsCounter.Add(1))
	c, r, n, b := "xlbnat-c-"+id, "xlbnat-r-"+id, "xlbnat-n-"+id, "xlbnat-b-"+id
	for _, ns := range []string{c, r, n, b} {
		ipcmd(t, "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		ipcmd(t, "-n", ns, "link", "set", "lo", "up")
	}
	link := func(ns, ifname, addr, peerNS, peer, peerAddr string) {
		ipcmd(t, "link", "add", ifname, "netns", ns, "type", "veth", "peer", "name", peer, "netns", peerNS)
		ipcmd(t, "-n", ns, "addr", "add", addr, "dev", ifname)
		ipcmd(t, "-n", peerNS, "addr", "add", peerAddr, "dev", peer)
		ipcmd(t, "-n", ns, "link", "set", ifname, "up")
		ipcmd(t, "-n", peerNS, "link", "set", peer, "up")
	}
	link(c, "c0", "10.0.2.2/24", r, "r0", "10.0.2.1/24")
	link(n, "n0", "10.0.1.2/24", r, "r1", "10.0.1.1/24")
	link(b, "b0", "10.0.3.2/24", r, "r2", "10.0.3.1/24")
	ipcmd(t, "-n", c, "route", "add", "default", "via", "10.0.2.1")
	ipcmd(t, "-n", n, "route", "add", "default", "via", "10.0.1.1")
	ipcmd(t, "-n", b, "route", "add", "default", "via", "10.0.3.1")
	ipcmd(t, "-n", r, "route", "add", "10.99.0.1/32", "via", "10.0.1.2")
	// DNAT: the backend's replies to clients go through the node.
	ipcmd(t, "-n", r, "rule", "add", "from", "10.0.3.2", "to", "10.0.2.0/24", "iif", "r2", "lookup", "100")
	ipcmd(t, "-n", r, "route", "add", "default", "via", "10.0.1.2", "table", "100")
	for _, cmd := range [][]string{
		{r, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
		// A sender on this host hands a veth half-done checksums, which
		// XDP cannot finish (architecture.md, NAT forwarding).
		{c, "ethtool", "-K", "c0", "tx", "off"},
		{b, "ethtool", "-K", "b0", "tx", "off"},
	} {
		args := append([]string{"--net=" + netns.Path(cmd[0])}, cmd[1:]...)
		if out, err := exec.Command("nsenter", args...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", cmd, err, out)
		}
	}
	// The node's XDP_TX reaches the router only if its veth peer runs XDP.
	pin := testPinPath(t)
	if err := xdppass.Attach(r, "r1", filepath.Join(pin+"-pass", "r1")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(pin + "-pass") })

	d, err := openIn(t, n, Options{Interface: "n0", NodeAddr: netip.MustParseAddr("10.0.1.2"), PinPath: pin, TableSize: fxTableSize})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.SetNAT(NATConfig{Address: netip.MustParseAddr("10.0.1.2"), PortMin: 20000, PortMax: 20999}); err != nil {
		t.Fatal(err)
	}
	be := netip.MustParseAddr("10.0.3.2")
	for i, s := range []struct {
		key   ServiceKey
		encap Encap
		port  uint16
	}{
		{ServiceKey{fxVIP, 80, ProtoTCP}, EncapNAT, 8080},
		{ServiceKey{fxVIP, 81, ProtoTCP}, EncapDNAT, 8081},
		{ServiceKey{fxVIP, 53, ProtoUDP}, EncapNAT, 5353},
	} {
		if err := d.UpsertBackend(uint32(i), netip.AddrPortFrom(be, s.port)); err != nil {
			t.Fatal(err)
		}
		table := make([]uint32, fxTableSize)
		for j := range table {
			table[j] = uint32(i)
		}
		if err := d.UpsertService(Service{ID: uint32(i), Key: s.key, Encap: s.encap, Table: table}); err != nil {
			t.Fatal(err)
		}
	}

	// The backend: HTTP servers that answer with the peer they see, and
	// a UDP echo.
	var lns []net.Listener
	var udp net.PacketConn
	err = netns.Do(b, func() error {
		for _, p := range []string{":8080", ":8081"} {
			ln, err := net.Listen("tcp4", p)
			if err != nil {
				return err
			}
			lns = append(lns, ln)
		}
		udp, err = net.ListenPacket("udp4", ":5353")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodPost {
			n, _ := io.Copy(io.Discard, req.Body)
			fmt.Fprintf(w, "%d\n%s", n, strings.Repeat("r", 20000))
			return
		}
		fmt.Fprint(w, req.RemoteAddr)
	})}
	for _, ln := range lns {
		go srv.Serve(ln)
	}
	defer srv.Close()
	defer udp.Close()
	go func() {
		buf := make([]byte, 2048)
		for {
			_, from, err := udp.ReadFrom(buf)
			if err != nil {
				return
			}
			udp.WriteTo([]byte(from.String()), from)
		}
	}()

	request := func(port int, req string) string {
		t.Helper()
		var body string
		err := netns.Do(c, func() error {
			var d net.Dialer
			conn, err := d.DialContext(context.Background(), "tcp4", fmt.Sprintf("10.99.0.1:%d", port))
			if err != nil {
				return err
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(conn, req); err != nil {
				return err
			}
			b, err := io.ReadAll(conn)
			if err != nil {
				return err
			}
			_, body, _ = strings.Cut(string(b), "\r\n\r\n")
			return nil
		})
		if err != nil {
			t.Fatalf("a request to VIP:%d from the client: %v", port, err)
		}
		return body
	}
	get := func(port int) string { return request(port, "GET / HTTP/1.0\r\nHost: vip\r\n\r\n") }
	for range 3 {
		seen, err := netip.ParseAddrPort(get(80))
		if err != nil || seen.Addr() != netip.MustParseAddr("10.0.1.2") || seen.Port() < 20000 || seen.Port() > 20999 {
			t.Errorf("NAT: the backend saw %v (%v), want the node's address and a port of its range", seen, err)
		}
		seen, err = netip.ParseAddrPort(get(81))
		if err != nil || seen.Addr() != fxClient {
			t.Errorf("DNAT: the backend saw %v (%v), want the client %v", seen, err, fxClient)
		}
	}

	var echo string
	err = netns.Do(c, func() error {
		conn, err := net.Dial("udp4", "10.99.0.1:53")
		if err != nil {
			return err
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 2048)
		for range 3 {
			if _, err := conn.Write([]byte("ping")); err != nil {
				return err
			}
			n, err := conn.Read(buf)
			if err != nil {
				return err
			}
			echo = string(buf[:n])
		}
		return nil
	})
	if err != nil {
		t.Fatalf("UDP through NAT: %v", err)
	}
	if seen, err := netip.ParseAddrPort(echo); err != nil || seen.Addr() != netip.MustParseAddr("10.0.1.2") {
		t.Errorf("UDP: the backend saw %q, want the node's address", echo)
	}
	nc, err := d.NATCounters()
	if err != nil {
		t.Fatal(err)
	}
	// 6 TCP connections and one UDP flow.
	if nc.Created != 7 || nc.AllocFailures != 0 || nc.ReverseMisses != 0 {
		t.Errorf("NAT counters %+v, want 7 sessions created and no failure or miss", nc)
	}

	ipcmd(t, "-n", r, "route", "replace", "10.0.3.0/24", "dev", "r2", "mtu", "lock", "1400")
	ipcmd(t, "-n", r, "route", "replace", "10.0.2.0/24", "dev", "r0", "mtu", "lock", "1400")
	before, _ := d.NATCounters()
	for _, port := range []int{80, 81} {
		body := request(port, fmt.Sprintf("POST / HTTP/1.0\r\nHost: vip\r\nContent-Length: 20000\r\n\r\n%s", strings.Repeat("q", 20000)))
		if got, rest, _ := strings.Cut(body, "\n"); got != "20000" || len(rest) != 20000 {
			t.Errorf("VIP:%d, 20 000 bytes each way past an MTU of 1400: the backend read %q, the client %d bytes", port, got, len(rest))
		}
	}
	after, _ := d.NATCounters()
	if after.ICMPTranslated-before.ICMPTranslated < 4 {
		t.Errorf("%d ICMP errors translated, want fragmentation needed both ways for both services", after.ICMPTranslated-before.ICMPTranslated)
	}
	st, _ := d.NATStatCounters()
	t.Logf("NAT counters: %v", st)
}
