package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xlbproject/xlb/testbed/netns"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// xlbBinary is the xlb command built by TestMain: the lab runs its
// subcommands (lab serve, netns-exec), which the test binary lacks.
var xlbBinary string

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == speakerCommand {
		os.Exit(speakerMain(os.Args[2:]))
	}
	os.Exit(func() int {
		if testenv.Privileged() {
			bin, remove, err := testenv.BuildXLB()
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer remove()
			xlbBinary = bin
		}
		return m.Run()
	}())
}

func needRoot(t *testing.T) { testenv.RequireRoot(t, "lab tests") }

// testPrefix is unique per test process and test, so concurrent runs and
// a developer's own lab are never touched.
func testPrefix(t *testing.T, n int) string {
	t.Helper()
	prefix := fmt.Sprintf("xlbt%d-%d", os.Getpid(), n)
	t.Cleanup(func() {
		if err := Down(prefix); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return prefix
}

// upLab builds a lab without `xlb backend`, which is not part of this
// package and not needed for plain routing.
func upLab(t *testing.T, prefix string, nodes, backends int) Plan {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := Up(ctx, Spec{Prefix: prefix, Nodes: nodes, Backends: backends, Binary: xlbBinary, SkipDecap: true})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// httpClientIn returns an HTTP client whose connections are made inside
// namespace ns.
func httpClientIn(ns string) *http.Client {
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := netns.Do(ns, func() error {
				var d net.Dialer
				var err error
				c, err = d.DialContext(ctx, network, addr)
				return err
			})
			return c, err
		}},
	}
}

func get(t *testing.T, c *http.Client, url string) (string, http.Header) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(body), resp.Header
}

// udpEcho sends payload from namespace ns to addr and returns the reply.
// Datagrams carry Don't Fragment, so one too large for a link on the way
// is never delivered.
func udpEcho(ns string, addr netip.AddrPort, payload string) (string, error) {
	var reply string
	err := netns.Do(ns, func() error {
		d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_MTU_DISCOVER, syscall.IP_PMTUDISC_DO)
			})
			return errors.Join(err, serr)
		}}
		c, err := d.Dial("udp4", addr.String())
		if err != nil {
			return err
		}
		defer c.Close()
		buf := make([]byte, 2048)
		for i := 0; i < 5; i++ { // the first datagram may wait for ARP
			if _, err := c.Write([]byte(payload)); err != nil {
				return err
			}
			c.SetReadDeadline(time.Now().Add(time.Second))
			n, err := c.Read(buf)
			if err == nil {
				reply = string(buf[:n])
				return nil
			}
		}
		return errors.New("no reply")
	})
	return reply, err
}

// inNS runs a program inside namespace ns with `ip netns exec`, which is
// independent of this package's way of entering namespaces.
func inNS(t *testing.T, ns string, argv ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns exec %s %v: %v: %s", ns, argv, err, out)
	}
	return strings.TrimSpace(string(out))
}

func readHostSysctl(t *testing.T, key string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/" + key)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestLab(t *testing.T) {
	needRoot(t)
	prefix := testPrefix(t, 1)
	hostKeys := []string{"ipv4/ip_forward", "ipv4/fib_multipath_hash_policy", "ipv4/conf/all/rp_filter", "ipv4/conf/all/accept_local"}
	hostBefore := map[string]string{}
	for _, k := range hostKeys {
		hostBefore[k] = readHostSysctl(t, k)
	}

	start := time.Now()
	p := upLab(t, prefix, 3, 3)
	t.Logf("lab up with %d namespaces in %s", len(p.Namespaces()), time.Since(start))

	t.Run("namespaces", func(t *testing.T) {
		got, err := labNamespaces(prefix)
		if err != nil {
			t.Fatal(err)
		}
		if want := p.Namespaces(); !slices.Equal(got, want) {
			t.Errorf("namespaces %v, want %v", got, want)
		}
	})

	t.Run("sysctls", func(t *testing.T) {
		for _, tt := range []struct{ ns, key, want string }{
			{p.Router, "net.ipv4.ip_forward", "1"},
			{p.Router, "net.ipv4.fib_multipath_hash_policy", "1"},
			{p.Router, "net.ipv4.conf.all.rp_filter", "0"},
			{p.Router, "net.ipv4.conf.br-node.rp_filter", "0"},
			{p.Nodes[0].Namespace, "net.ipv4.ip_forward", "1"},
			{p.Nodes[2].Namespace, "net.ipv4.conf.eth0.accept_local", "1"},
			{p.Nodes[1].Namespace, "net.ipv4.conf.eth0.rp_filter", "0"},
			{p.Clients[0].Namespace, "net.ipv4.ip_forward", "0"},
			{p.Backends[0].Namespace, "net.ipv4.conf.eth0.accept_local", "0"},
		} {
			if got := inNS(t, tt.ns, "sysctl", "-n", tt.key); got != tt.want {
				t.Errorf("%s: %s = %s, want %s", tt.ns, tt.key, got, tt.want)
			}
		}
		for _, k := range hostKeys {
			if got := readHostSysctl(t, k); got != hostBefore[k] {
				t.Errorf("host sysctl %s changed from %s to %s", k, hostBefore[k], got)
			}
		}
	})

	t.Run("interfaces", func(t *testing.T) {
		st, err := ReadStatus(prefix)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Up || st.Broken {
			t.Fatalf("status: up %v, broken %v; want up", st.Up, st.Broken)
		}
		ifaces := map[string]InterfaceStatus{}
		for _, ns := range st.Namespaces {
			for _, i := range ns.Interfaces {
				ifaces[ns.Name+"/"+i.Name] = i
			}
		}
		for _, h := range p.Hosts() {
			i, ok := ifaces[h.Namespace+"/eth0"]
			if !ok || i.MTU != h.MTU || i.State != "UP" || len(i.Addrs) != 1 || i.Addrs[0].Addr() != h.Addr {
				t.Errorf("%s eth0 = %+v, want %s mtu %d up", h.Namespace, i, h.Addr, h.MTU)
			}
			peer := ifaces[p.Router+"/"+h.Peer]
			// Nodes and backends may XDP_TX out of eth0, and a
			// client's frames must reach the router in the order sent:
			// every peer has XDP_PASS (attachPass).
			if peer.MTU != h.MTU || !peer.XDP || peer.Master == "" {
				t.Errorf("router port %s = %+v, want mtu %d, XDP, on a bridge", h.Peer, peer, h.MTU)
			}
		}
		if got := ifaces[p.Router+"/br-client"].MTU; got != 1500 {
			t.Errorf("client bridge MTU %d", got)
		}
	})

	t.Run("HTTP and UDP from the client to every backend", func(t *testing.T) {
		client := httpClientIn(p.Clients[0].Namespace)
		defer client.CloseIdleConnections()
		for _, be := range p.Backends {
			url := fmt.Sprintf("http://%s:%d/", be.Addr, HTTPPort)
			for i := 0; i < 2; i++ { // the second request rides the kept-alive connection
				body, hdr := get(t, client, url)
				if body != be.Name+"\n" || hdr.Get("X-Backend") != be.Name {
					t.Errorf("GET %s = %q (X-Backend %q), want %q", url, body, hdr.Get("X-Backend"), be.Name)
				}
			}
			reply, err := udpEcho(p.Clients[0].Namespace, netip.AddrPortFrom(be.Addr, UDPPort), "ping")
			if err != nil || reply != be.Name+":ping" {
				t.Errorf("UDP echo from %s = %q, %v; want %q", be.Name, reply, err, be.Name+":ping")
			}
			// The server's output goes to its log in the state dir.
			if log, err := os.ReadFile(LogFile(prefix, ServerName(be))); err != nil || !strings.Contains(string(log), "serving HTTP") {
				t.Errorf("log of %s: %q, %v", ServerName(be), log, err)
			}
		}
	})

	t.Run("a backend's HTTP server stops and starts through its control socket", func(t *testing.T) {
		be := p.Backends[0]
		url := fmt.Sprintf("http://%s:%d/", be.Addr, HTTPPort)
		client := httpClientIn(p.Clients[0].Namespace)
		defer client.CloseIdleConnections()
		ctx := context.Background()
		if err := SetHTTPMode(ctx, ControlSocket(prefix, be), HTTPStop); err != nil {
			t.Fatal(err)
		}
		if resp, err := client.Get(url); !errors.Is(err, syscall.ECONNREFUSED) {
			if err == nil {
				resp.Body.Close()
			}
			t.Errorf("GET %s with the server stopped: %v, want connection refused", url, err)
		}
		// UDP is not affected.
		if reply, err := udpEcho(p.Clients[0].Namespace, netip.AddrPortFrom(be.Addr, UDPPort), "ping"); err != nil || reply != be.Name+":ping" {
			t.Errorf("UDP echo with HTTP stopped = %q, %v", reply, err)
		}
		if err := SetHTTPMode(ctx, ControlSocket(prefix, be), HTTPStart); err != nil {
			t.Fatal(err)
		}
		if body, _ := get(t, client, url); body != be.Name+"\n" {
			t.Errorf("GET %s after http start = %q", url, body)
		}
	})

	t.Run("MTU: the fabric carries what the client segment cannot", func(t *testing.T) {
		// 1560 bytes of UDP payload make a 1588-byte packet (the echo
		// 1592): it crosses the 1600-byte node and backend segments
		// unfragmented, and does not fit the client's 1500.
		big := strings.Repeat("x", 1560)
		be := netip.AddrPortFrom(p.Backends[0].Addr, UDPPort)
		if reply, err := udpEcho(p.Nodes[0].Namespace, be, big); err != nil || reply != p.Backends[0].Name+":"+big {
			t.Errorf("1588-byte datagram node1 -> %s: %d bytes back, %v", be, len(reply), err)
		}
		if _, err := udpEcho(p.Clients[0].Namespace, be, big); !errors.Is(err, syscall.EMSGSIZE) {
			t.Errorf("1588-byte datagram from the client: %v, want EMSGSIZE", err)
		}
	})

	t.Run("VIP route and SetNodes", func(t *testing.T) {
		addrs := func(ks ...int) []netip.Addr {
			var a []netip.Addr
			for _, k := range ks {
				a = append(a, p.Nodes[k-1].Addr)
			}
			return a
		}
		check := func(want []netip.Addr) {
			t.Helper()
			got, err := Nexthops(prefix)
			if err != nil {
				t.Fatal(err)
			}
			slices.SortFunc(got, netip.Addr.Compare)
			if !slices.Equal(got, want) {
				t.Errorf("nexthops %v, want %v", got, want)
			}
			// The kernel's view of one VIP agrees.
			for _, vip := range p.VIPs {
				if got, err := RouteNextHops(context.Background(), p, vip); err != nil || !slices.Equal(got, want) {
					t.Errorf("RouteNextHops(%s) = %v, %v; want %v", vip, got, err, want)
				}
			}
		}
		check(addrs(1, 2, 3))
		for _, tt := range []struct {
			nodes []int
			want  []netip.Addr
		}{
			{[]int{2}, addrs(2)},
			{[]int{3, 1}, addrs(1, 3)},
			{nil, nil},
			{nil, nil}, // removing an absent route is fine
			{[]int{1, 2, 3}, addrs(1, 2, 3)},
		} {
			if err := SetNodes(prefix, tt.nodes); err != nil {
				t.Fatalf("SetNodes(%v): %v", tt.nodes, err)
			}
			check(tt.want)
		}
		for _, bad := range [][]int{{0}, {4}, {1, 1}} {
			if err := SetNodes(prefix, bad); err == nil {
				t.Errorf("SetNodes(%v) accepted", bad)
			}
		}
		check(addrs(1, 2, 3))
		// With fib_multipath_hash_policy=1 the router spreads flows by
		// their ports: flows that differ only in the source port reach
		// every node (with the default policy they would all take one).
		seen := map[string]bool{}
		for sport := 1000; sport < 1064; sport++ {
			out := inNS(t, p.Router, "ip", "route", "get", p.VIPs[0].String(), "from", p.Clients[0].Addr.String(),
				"iif", p.ClientSegment.Bridge, "ipproto", "tcp", "sport", strconv.Itoa(sport), "dport", "80")
			f := strings.Fields(out)
			if i := slices.Index(f, "via"); i >= 0 && i+1 < len(f) {
				seen[f[i+1]] = true
			}
		}
		if len(seen) != len(p.Nodes) {
			t.Errorf("64 flows went via %v, want all %d nodes", seen, len(p.Nodes))
		}
	})

	t.Run("StartProcess and StopProcess", func(t *testing.T) {
		ns := p.Nodes[0].Namespace
		pid, err := StartProcess(prefix, ns, "sleeper", "sleep", "60")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := StartProcess(prefix, ns, "sleeper", "sleep", "60"); err == nil {
			t.Error("started a second process under one name")
		}
		if _, err := StartProcess(prefix, "not-a-lab-ns", "x", "sleep", "1"); err == nil {
			t.Error("started a process outside the lab")
		}
		b, err := os.ReadFile(filepath.Join(p.StateDir, "sleeper.pid"))
		if err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(pid) {
			t.Errorf("pid file %q, %v; want %d", b, err, pid)
		}
		// It runs inside the namespace, and still sees the host's bpffs.
		deadline := time.Now().Add(5 * time.Second)
		var sleeper procRef
		for {
			in, err := processesIn(ns)
			if err != nil {
				t.Fatal(err)
			}
			if i := slices.IndexFunc(in, func(r procRef) bool { return r.pid == pid }); i >= 0 {
				sleeper = in[i]
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("PID %d is not in namespace %s", pid, ns)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := StopProcess(prefix, "sleeper"); err != nil {
			t.Fatal(err)
		}
		if alive(sleeper.pid, sleeper.start) {
			t.Errorf("PID %d (start %d) still runs after StopProcess", sleeper.pid, sleeper.start)
		}
		if err := StopProcess(prefix, "sleeper"); err == nil {
			t.Error("stopping a stopped process twice: want an error naming it")
		}
	})

	t.Run("StopProcess spares a reused PID", func(t *testing.T) {
		stranger := exec.Command("sleep", "60")
		if err := stranger.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { stranger.Process.Kill(); stranger.Wait() }()
		start, _, err := procStat(stranger.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range []procRecord{
			{Name: "fake1", PID: stranger.Process.Pid, Start: start, Argv: []string{"xlb", "agent"}},    // other command line
			{Name: "fake2", PID: stranger.Process.Pid, Start: start + 1, Argv: []string{"sleep", "60"}}, // other start time
		} {
			writeRecord(t, prefix, rec)
			if err := StopProcess(prefix, rec.Name); err != nil {
				t.Fatal(err)
			}
			if !alive(stranger.Process.Pid, start) {
				t.Fatalf("StopProcess killed PID %d, which %s never started", stranger.Process.Pid, rec.Name)
			}
		}
	})

	t.Run("up again refuses and keeps the lab", func(t *testing.T) {
		_, err := Up(context.Background(), Spec{Prefix: prefix, Binary: xlbBinary, SkipDecap: true})
		if err == nil || !strings.Contains(err.Error(), "lab down --prefix "+prefix) {
			t.Errorf("second Up: %v, want advice to run lab down", err)
		}
		for _, ns := range p.Namespaces() {
			if !netns.Exists(ns) {
				t.Errorf("second Up removed %s", ns)
			}
		}
	})

	// A namespace named like the lab's but belonging to a lab with a
	// longer prefix must survive Down.
	decoy := prefix + "-2-router"
	if _, err := ip(context.Background(), "netns", "add", decoy); err != nil {
		t.Fatal(err)
	}
	defer ip(context.Background(), "netns", "del", decoy)

	servers := serverPIDs(t, prefix, p)
	if err := Down(prefix); err != nil {
		t.Fatal(err)
	}
	assertGone(t, prefix, servers)
	if !netns.Exists(decoy) {
		t.Errorf("Down removed %s, which is not part of lab %s", decoy, prefix)
	}
	if err := Down(prefix); err != nil {
		t.Errorf("second Down: %v", err)
	}
	if st, err := ReadStatus(prefix); err != nil || st.Up || st.Broken || len(st.Namespaces) > 0 {
		t.Errorf("status after down: %+v, %v", st, err)
	}
}

func writeRecord(t *testing.T, prefix string, rec procRecord) {
	t.Helper()
	b := fmt.Sprintf(`{"name":%q,"pid":%d,"start":%d,"argv":[%q,%q]}`, rec.Name, rec.PID, rec.Start, rec.Argv[0], rec.Argv[1])
	if err := os.WriteFile(recordFile(prefix, rec.Name), []byte(b), 0o644); err != nil {
		t.Fatal(err)
	}
}

// serverPIDs returns the backends' server processes and checks they run.
func serverPIDs(t *testing.T, prefix string, p Plan) []procRef {
	t.Helper()
	var refs []procRef
	for _, h := range p.Backends {
		rec, err := readRecord(prefix, ServerName(h))
		if err != nil {
			t.Fatal(err)
		}
		if !ours(rec) {
			t.Fatalf("server of %s (PID %d) does not run", h.Name, rec.PID)
		}
		refs = append(refs, procRef{rec.PID, rec.Start})
	}
	return refs
}

// assertGone checks that nothing of lab prefix is left.
func assertGone(t *testing.T, prefix string, procs []procRef) {
	t.Helper()
	if left, err := labNamespaces(prefix); err != nil || len(left) > 0 {
		t.Errorf("namespaces left: %v %v", left, err)
	}
	for _, dir := range []string{StateDir(prefix), PinDir(prefix)} {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left: %v", dir, err)
		}
	}
	for _, pr := range procs {
		if alive(pr.pid, pr.start) {
			t.Errorf("PID %d still runs", pr.pid)
		}
	}
}

// After a crash nothing but the namespaces may be left: no state dir, no
// pid files, and processes nobody recorded. Down still removes it all.
func TestDownAfterCrash(t *testing.T) {
	needRoot(t)
	prefix := testPrefix(t, 2)
	p := upLab(t, prefix, 1, 2)
	servers := serverPIDs(t, prefix, p)

	// A process nobody recorded, inside a lab namespace.
	orphan := exec.Command("ip", "netns", "exec", p.Router, "sleep", "60")
	orphan.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	go orphan.Wait()
	orphanStart, _, err := procStat(orphan.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	// One server died with the crash, the others survived it.
	if err := syscall.Kill(servers[0].pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(p.StateDir); err != nil {
		t.Fatal(err)
	}

	st, err := ReadStatus(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if st.Up || !st.Broken || len(st.Namespaces) != len(p.Namespaces()) {
		t.Errorf("status of a crashed lab: up %v, broken %v, %d namespaces", st.Up, st.Broken, len(st.Namespaces))
	}
	if err := Down(prefix); err != nil {
		t.Fatal(err)
	}
	assertGone(t, prefix, append(servers, procRef{orphan.Process.Pid, orphanStart}))
}

// A failure halfway through Up leaves nothing behind.
func TestUpFailureCleansUp(t *testing.T) {
	needRoot(t)
	prefix := testPrefix(t, 3)
	// /bin/false passes the executable check but cannot run the
	// backends' servers: Up fails at the last step.
	start := time.Now()
	_, err := Up(context.Background(), Spec{Prefix: prefix, Nodes: 1, Backends: 1, Binary: "/bin/false", SkipDecap: true})
	if err == nil || !strings.Contains(err.Error(), "server exited") {
		t.Fatalf("Up with a broken binary: %v, want the servers' failure", err)
	}
	if d := time.Since(start); d > readyTimeout {
		t.Errorf("Up took %s to notice the dead server", d)
	}
	assertGone(t, prefix, nil)

	// State left from an earlier lab stops Up, which then leaves it
	// alone for Down.
	if err := os.MkdirAll(StateDir(prefix), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = Up(context.Background(), Spec{Prefix: prefix, Binary: xlbBinary, SkipDecap: true})
	if err == nil || !strings.Contains(err.Error(), "lab down --prefix "+prefix) {
		t.Errorf("Up over left-over state: %v, want advice to run lab down", err)
	}
	if _, err := os.Stat(StateDir(prefix)); err != nil {
		t.Errorf("Up removed state it did not make: %v", err)
	}
	if err := Down(prefix); err != nil {
		t.Fatal(err)
	}
	assertGone(t, prefix, nil)
}

// Of two concurrent Ups of one lab exactly one wins, and the loser leaves
// the winner's lab alone.
func TestConcurrentUp(t *testing.T) {
	needRoot(t)
	prefix := testPrefix(t, 4)
	errc := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := Up(context.Background(), Spec{Prefix: prefix, Nodes: 1, Backends: 1, Binary: xlbBinary, SkipDecap: true})
			errc <- err
		}()
	}
	var failed int
	for range 2 {
		if err := <-errc; err != nil {
			failed++
			t.Logf("loser: %v", err)
		}
	}
	if failed != 1 {
		t.Fatalf("%d of 2 concurrent Ups failed, want 1", failed)
	}
	st, err := ReadStatus(prefix)
	if err != nil || !st.Up || len(st.Processes) != 1 || !st.Processes[0].Alive {
		t.Errorf("the winner's lab: %+v, %v", st, err)
	}
}
