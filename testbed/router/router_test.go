package router

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/testbed/netns"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// xlbBinary is the xlb command, built by TestMain for root runs: the
// router under test is `xlb lab router`, started in its namespace through
// `xlb netns-exec`.
var xlbBinary string

func TestMain(m *testing.M) {
	if spec := os.Getenv(speakerEnv); spec != "" {
		os.Exit(speakerMain(spec))
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

const (
	routerASN = 65000
	nodeASN   = 65001
	holdSecs  = 3
)

var (
	vip       = netip.MustParsePrefix("10.99.0.1/32")
	routerIP  = netip.MustParseAddr("10.252.0.1")
	segment   = netip.MustParsePrefix("10.252.0.0/24")
	testProto = Protocol
	// The segment's IPv6 addresses: the router's and node k's.
	routerIP6 = netip.MustParseAddr("fd00:252::1")
	segment6  = netip.MustParsePrefix("fd00:252::/64")
)

func nodeIP(k int) netip.Addr { return netip.AddrFrom4([4]byte{10, 252, 0, byte(1 + k)}) }

func nodeIP6(k int) netip.Addr {
	return netip.AddrFrom16([16]byte{0: 0xfd, 2: 0x02, 3: 0x52, 15: byte(1 + k)})
}

// lab is a router namespace with a bridge and n node namespaces, one
// veth each onto the bridge.
type lab struct {
	router string
	nodes  []string
}

// newLab builds the namespaces; names carry the test PID and tag so that
// parallel tests and concurrent runs never meet. They are deleted when
// the test ends, also when it fails.
func newLab(t *testing.T, tag string, n int) lab {
	t.Helper()
	base := fmt.Sprintf("xrt%d%s", os.Getpid(), tag)
	l := lab{router: base + "-r"}
	for k := 1; k <= n; k++ {
		l.nodes = append(l.nodes, fmt.Sprintf("%s-n%d", base, k))
	}
	t.Cleanup(func() {
		for _, ns := range append([]string{l.router}, l.nodes...) {
			if netns.Exists(ns) {
				if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
					t.Errorf("cleanup: ip netns del %s: %v: %s", ns, err, out)
				}
			}
		}
	})
	ipc(t, "netns", "add", l.router)
	ipc(t, "-n", l.router, "link", "set", "lo", "up")
	ipc(t, "-n", l.router, "link", "add", "br0", "type", "bridge")
	ipc(t, "-n", l.router, "addr", "add", netip.PrefixFrom(routerIP, segment.Bits()).String(), "dev", "br0")
	// nodad: the IPv6 addresses are usable at once, as the IPv4 ones are.
	ipc(t, "-n", l.router, "addr", "add", netip.PrefixFrom(routerIP6, segment6.Bits()).String(), "dev", "br0", "nodad")
	ipc(t, "-n", l.router, "link", "set", "br0", "up")
	for k, ns := range l.nodes {
		port := fmt.Sprintf("p%d", k+1)
		ipc(t, "netns", "add", ns)
		ipc(t, "-n", ns, "link", "set", "lo", "up")
		ipc(t, "-n", l.router, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
		ipc(t, "-n", l.router, "link", "set", port, "master", "br0", "up")
		ipc(t, "-n", ns, "addr", "add", netip.PrefixFrom(nodeIP(k+1), segment.Bits()).String(), "dev", "eth0")
		ipc(t, "-n", ns, "addr", "add", netip.PrefixFrom(nodeIP6(k+1), segment6.Bits()).String(), "dev", "eth0", "nodad")
		ipc(t, "-n", ns, "link", "set", "eth0", "up")
	}
	return l
}

func ipc(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// routerProc is `xlb lab router` running in the lab's router namespace.
type routerProc struct {
	cmd    *exec.Cmd
	log    string
	socket string
	done   chan struct{}
}

// startRouter starts the router; peerASN 0 leaves --peer-asn out, so the
// sessions are iBGP. extra are further flags.
func startRouter(t *testing.T, l lab, dir string, peerASN uint32, extra ...string) *routerProc {
	t.Helper()
	rp := &routerProc{
		log:    filepath.Join(dir, fmt.Sprintf("router-%d.log", time.Now().UnixNano())),
		socket: filepath.Join(dir, "router.sock"),
		done:   make(chan struct{}),
	}
	logf, err := os.Create(rp.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	args := []string{netns.ExecCommand, l.router, "--", xlbBinary, "lab", "router",
		"--asn", fmt.Sprint(routerASN), "--listen", routerIP.String(), "--neighbors", segment.String(),
		"--hold-time", fmt.Sprintf("%ds", holdSecs), "--status", rp.socket}
	if peerASN != 0 {
		args = append(args, "--peer-asn", fmt.Sprint(peerASN))
	}
	args = append(args, extra...)
	rp.cmd = exec.Command(xlbBinary, args...)
	rp.cmd.Stdout, rp.cmd.Stderr = logf, logf
	if err := rp.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = rp.cmd.Wait(); close(rp.done) }()
	t.Cleanup(func() {
		rp.kill(syscall.SIGKILL)
		if t.Failed() {
			b, _ := os.ReadFile(rp.log)
			t.Logf("router log %s:\n%s", rp.log, b)
		}
	})
	// Up once its status socket answers: by then it has cleaned the
	// FIB and listens for BGP.
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := ReadStatus(ctx, rp.socket)
		cancel()
		if err == nil {
			return rp
		}
		select {
		case <-rp.done:
			b, _ := os.ReadFile(rp.log)
			t.Fatalf("router exited: %v\n%s", rp.cmd.ProcessState, b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("router status socket not up after 15s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill signals the router (by its own PID) and waits for it to exit.
func (rp *routerProc) kill(sig syscall.Signal) {
	select {
	case <-rp.done:
		return
	default:
	}
	_ = rp.cmd.Process.Signal(sig)
	select {
	case <-rp.done:
	case <-time.After(10 * time.Second):
		_ = rp.cmd.Process.Kill()
		<-rp.done
	}
}

// speaker is a node's BGP speaker process (see speakerEnv).
type speaker struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	done  chan struct{}
}

func startSpeaker(t *testing.T, ns string, local netip.Addr, asn uint32) *speaker {
	t.Helper()
	return startSpeakerSpec(t, ns, speakerSpec{local: local, asn: asn, router: routerIP, rASN: routerASN, prefix: vip, hold: holdSecs})
}

func startSpeakerSpec(t *testing.T, ns string, spec speakerSpec) *speaker {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sp := &speaker{name: ns, lines: make(chan string, 64), done: make(chan struct{})}
	sp.cmd = exec.Command(xlbBinary, netns.ExecCommand, ns, "--", self, "-test.run=^$")
	sp.cmd.Env = append(os.Environ(), speakerEnv+"="+spec.String())
	var stderr bytes.Buffer
	sp.cmd.Stderr = &stderr
	if sp.stdin, err = sp.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := sp.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sp.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			sp.lines <- sc.Text()
		}
		close(sp.lines)
	}()
	go func() { _ = sp.cmd.Wait(); close(sp.done) }()
	t.Cleanup(func() {
		sp.kill()
		if t.Failed() && stderr.Len() > 0 {
			t.Logf("speaker %s stderr:\n%s", ns, stderr.String())
		}
	})
	return sp
}

// expect waits for the speaker to print want.
func (sp *speaker) expect(t *testing.T, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l, ok := <-sp.lines:
			if !ok {
				t.Fatalf("speaker %s exited waiting for %q", sp.name, want)
			}
			if l == want {
				return
			}
			if strings.HasPrefix(l, "err ") {
				t.Fatalf("speaker %s: %s", sp.name, l)
			}
		case <-deadline:
			t.Fatalf("speaker %s: no %q within %v", sp.name, want, timeout)
		}
	}
}

func (sp *speaker) do(t *testing.T, cmd string) {
	t.Helper()
	if _, err := fmt.Fprintln(sp.stdin, cmd); err != nil {
		t.Fatalf("speaker %s: %v", sp.name, err)
	}
	sp.expect(t, "ok "+cmd, 5*time.Second)
}

// stop ends the speaker cleanly: it closes its session with a Cease.
func (sp *speaker) stop(t *testing.T) {
	t.Helper()
	sp.stdin.Close()
	select {
	case <-sp.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("speaker %s did not stop", sp.name)
	}
}

func (sp *speaker) kill() {
	select {
	case <-sp.done:
		return
	default:
	}
	_ = sp.cmd.Process.Kill()
	<-sp.done
}

// fibView reads the router namespace's kernel routes.
type fibView struct{ h *netlink.Handle }

func openFIBView(t *testing.T, ns string) fibView {
	t.Helper()
	var h *netlink.Handle
	err := netns.Do(ns, func() error {
		var err error
		h, err = netlink.NewHandle(unix.NETLINK_ROUTE)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return fibView{h}
}

// route returns the next hops and protocol of the main table's route to
// p, or no next hops if there is none.
func (v fibView) route(p netip.Prefix) ([]netip.Addr, int, error) {
	routes, err := v.h.RouteListFiltered(family(p.Addr()), &netlink.Route{Dst: prefixToIPNet(p), Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_DST|netlink.RT_FILTER_TABLE)
	if err != nil || len(routes) == 0 {
		return nil, 0, err
	}
	if len(routes) > 1 {
		return nil, 0, fmt.Errorf("%d routes to %s", len(routes), p)
	}
	r := routes[0]
	var hops []netip.Addr
	if r.Gw != nil {
		a, _ := netip.AddrFromSlice(r.Gw)
		hops = append(hops, a.Unmap())
	}
	for _, nh := range r.MultiPath {
		a, _ := netip.AddrFromSlice(nh.Gw)
		hops = append(hops, a.Unmap())
	}
	return normalize(hops), int(r.Protocol), nil
}

// waitNexthops polls the kernel every 2ms until the route to p has
// exactly want as next hops (none: no route), and returns how long that
// took from start.
func (v fibView) waitNexthops(t *testing.T, p netip.Prefix, want []netip.Addr, start time.Time, timeout time.Duration) time.Duration {
	t.Helper()
	want = normalize(want)
	deadline := time.Now().Add(timeout)
	for {
		got, proto, err := v.route(p)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Equal(got, want) && (len(got) == 0 || proto == testProto) {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("route %s: next hops %v (protocol %d) after %v, want %v (protocol %d)", p, got, proto, timeout, want, testProto)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func nodes(ks ...int) []netip.Addr {
	var out []netip.Addr
	for _, k := range ks {
		out = append(out, nodeIP(k))
	}
	return out
}

func TestRouterMultipath(t *testing.T) {
	testenv.RequireRoot(t, "router namespace tests")
	t.Parallel()
	l := newLab(t, "m", 3)
	dir := t.TempDir()
	rp := startRouter(t, l, dir, nodeASN) // eBGP
	fv := openFIBView(t, l.router)

	var policy []byte
	if err := netns.Do(l.router, func() (err error) {
		policy, err = os.ReadFile("/proc/sys/net/ipv4/fib_multipath_hash_policy")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(policy)) != "1" {
		t.Errorf("router namespace fib_multipath_hash_policy = %q, want 1", policy)
	}

	sp := make([]*speaker, 3)
	for k := range sp {
		sp[k] = startSpeaker(t, l.nodes[k], nodeIP(k+1), nodeASN)
	}
	for k := range sp {
		sp[k].expect(t, "up", 20*time.Second)
	}

	// Each node's announcement adds its next hop to the one route.
	for k := range sp {
		start := time.Now()
		sp[k].do(t, "announce")
		d := fv.waitNexthops(t, vip, nodes(seq(1, k+1)...), start, 20*time.Second)
		t.Logf("node%d announces: route has %d next hop(s) after %v", k+1, k+1, d)
	}

	// The router records a route in its status right after it installs
	// it in the FIB, which the wait above watched: poll a moment.
	var st Status
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var err error
		if st, err = ReadStatus(context.Background(), rp.socket); err != nil {
			t.Fatal(err)
		}
		if len(st.Routes) == 1 && slices.Equal(st.Routes[0].Nexthops, nodes(1, 2, 3)) || time.Now().After(deadline) {
			break
		}
	}
	if len(st.Peers) != 3 {
		t.Errorf("status: %d peers, want 3: %+v", len(st.Peers), st.Peers)
	}
	for _, p := range st.Peers {
		if p.State != "established" || p.ASN != nodeASN {
			t.Errorf("status: peer %+v, want established with ASN %d", p, nodeASN)
		}
	}
	if len(st.Routes) != 1 || st.Routes[0].Prefix != vip || !slices.Equal(st.Routes[0].Nexthops, nodes(1, 2, 3)) {
		t.Errorf("status routes = %+v, want %s via %v", st.Routes, vip, nodes(1, 2, 3))
	}

	// A withdrawal takes that next hop out; announcing again brings it back.
	start := time.Now()
	sp[2].do(t, "withdraw")
	t.Logf("node3 withdraws: 2 next hops after %v", fv.waitNexthops(t, vip, nodes(1, 2), start, 20*time.Second))
	start = time.Now()
	sp[2].do(t, "announce")
	t.Logf("node3 announces again: 3 next hops after %v", fv.waitNexthops(t, vip, nodes(1, 2, 3), start, 20*time.Second))

	// node2 vanishes without a word (its link goes down): only the hold
	// timer can tell.
	start = time.Now()
	ipc(t, "-n", l.nodes[1], "link", "set", "eth0", "down")
	d := fv.waitNexthops(t, vip, nodes(1, 3), start, 3*holdSecs*time.Second)
	t.Logf("node2 silent: 2 next hops after %v (hold time %ds)", d, holdSecs)
	// Keepalives come every second, so the hold timer fires 2 to 3s
	// after the last one; anything much faster was not the hold timer.
	if d < time.Second {
		t.Errorf("node2 left the route after %v, before its hold time of %ds could expire: what else removed it?", d, holdSecs)
	}

	// A failure detector reports node3 down: out at once, and back once
	// its new session brings its path again.
	start = time.Now()
	resp, err := socketClient(rp.socket).Post("http://router/peers/"+nodeIP(3).String()+"/failed", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("POST peers/%s/failed: %s", nodeIP(3), resp.Status)
	}
	t.Logf("PeerFailed(node3): 1 next hop after %v", fv.waitNexthops(t, vip, nodes(1), start, 10*time.Second))
	sp[2].expect(t, "up", 20*time.Second)
	t.Logf("node3 re-established: 2 next hops after %v", fv.waitNexthops(t, vip, nodes(1, 3), start, 20*time.Second))

	// Leaving: node1 shuts down cleanly, node3's process dies.
	start = time.Now()
	sp[0].stop(t)
	t.Logf("node1 stops: 1 next hop after %v", fv.waitNexthops(t, vip, nodes(3), start, 20*time.Second))
	start = time.Now()
	sp[2].kill()
	t.Logf("node3 killed: route gone after %v", fv.waitNexthops(t, vip, nil, start, 3*holdSecs*time.Second))

	// As on the way up, the status follows the FIB by a moment.
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st, err = ReadStatus(context.Background(), rp.socket); err != nil {
			t.Fatal(err)
		}
		if len(st.Routes) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(st.Routes) != 0 {
		t.Errorf("status routes = %+v, want none", st.Routes)
	}
}

func seq(from, to int) []int {
	var s []int
	for k := from; k <= to; k++ {
		s = append(s, k)
	}
	return s
}

func TestRouterRestart(t *testing.T) {
	testenv.RequireRoot(t, "router namespace tests")
	t.Parallel()
	l := newLab(t, "r", 2)
	dir := t.TempDir()
	rp := startRouter(t, l, dir, 0) // iBGP: the nodes share the router's ASN
	fv := openFIBView(t, l.router)

	sp := []*speaker{startSpeaker(t, l.nodes[0], nodeIP(1), routerASN), startSpeaker(t, l.nodes[1], nodeIP(2), routerASN)}
	for _, s := range sp {
		s.expect(t, "up", 20*time.Second)
		s.do(t, "announce")
	}
	fv.waitNexthops(t, vip, nodes(1, 2), time.Now(), 20*time.Second)

	// A crash leaves the routes behind; add one more stale route of the
	// router's protocol that nobody will announce, and a foreign route
	// the router must never touch.
	stale, foreign := netip.MustParsePrefix("10.99.9.9/32"), netip.MustParsePrefix("10.99.8.8/32")
	ipc(t, "-n", l.router, "route", "add", stale.String(), "via", nodeIP(1).String(), "proto", fmt.Sprint(Protocol), "metric", fmt.Sprint(routeMetric))
	ipc(t, "-n", l.router, "route", "add", foreign.String(), "via", nodeIP(1).String(), "proto", "static", "metric", fmt.Sprint(routeMetric))
	rp.kill(syscall.SIGKILL)
	if hops, _, _ := fv.route(vip); !slices.Equal(hops, nodes(1, 2)) {
		t.Fatalf("after the crash: route %s via %v, want the stale route via %v", vip, hops, nodes(1, 2))
	}

	start := time.Now()
	rp2 := startRouter(t, l, dir, 0)
	if hops, _, _ := fv.route(stale); len(hops) != 0 {
		t.Errorf("restarted router left the stale route %s via %v", stale, hops)
	}
	if hops, _, _ := fv.route(foreign); !slices.Equal(hops, nodes(1)) {
		t.Errorf("restarted router touched the foreign route %s: now via %v", foreign, hops)
	}
	b, err := os.ReadFile(rp2.log)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []netip.Prefix{vip, stale} {
		found := false
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "removed a stale route") && strings.Contains(line, "prefix="+p.String()) {
				found = true
			}
		}
		if !found {
			t.Errorf("restarted router did not report removing the stale route %s:\n%s", p, b)
		}
	}
	// The nodes notice the crash, wait their idle hold time (5s in
	// GoBGP) and reconnect; their paths rebuild the route.
	for _, s := range sp {
		s.expect(t, "up", 20*time.Second)
	}
	t.Logf("route rebuilt after restart in %v", fv.waitNexthops(t, vip, nodes(1, 2), start, 20*time.Second))

	// A clean stop takes the router's routes with it, and only those.
	rp2.kill(syscall.SIGTERM)
	if rp2.cmd.ProcessState.ExitCode() != 0 {
		t.Errorf("router exit status %v after SIGTERM", rp2.cmd.ProcessState)
	}
	if hops, _, _ := fv.route(vip); len(hops) != 0 {
		t.Errorf("after a clean stop: route %s via %v is left", vip, hops)
	}
	if hops, _, _ := fv.route(foreign); !slices.Equal(hops, nodes(1)) {
		t.Errorf("clean stop touched the foreign route %s: now via %v", foreign, hops)
	}
	if _, err := os.Stat(rp2.socket); err == nil {
		t.Errorf("status socket %s left after a clean stop", rp2.socket)
	}
}

// TestRouterIPv6Multipath: two nodes announce the same IPv6 VIP, one
// over an IPv4 session (IPv6 unicast beside IPv4 unicast), one over an
// IPv6 session; the router installs one IPv6 route over both nodes' IPv6
// addresses, and follows a withdrawal and a node that stops.
func TestRouterIPv6Multipath(t *testing.T) {
	testenv.RequireRoot(t, "router namespace tests")
	t.Parallel()
	l := newLab(t, "6", 2)
	dir := t.TempDir()
	rp := startRouter(t, l, dir, nodeASN, "--listen6", routerIP6.String(), "--neighbors", segment.String()+","+segment6.String())
	fv := openFIBView(t, l.router)
	var policy []byte
	if err := netns.Do(l.router, func() (err error) {
		policy, err = os.ReadFile("/proc/sys/net/ipv6/fib_multipath_hash_policy")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(policy)) != "1" {
		t.Errorf("router namespace net.ipv6.fib_multipath_hash_policy = %q, want 1", policy)
	}

	vip6 := netip.MustParsePrefix("fd00:99::1/128")
	sp := []*speaker{
		startSpeakerSpec(t, l.nodes[0], speakerSpec{local: nodeIP(1), asn: nodeASN, router: routerIP, rASN: routerASN,
			prefix: vip6, hold: holdSecs, nexthop: nodeIP6(1)}),
		startSpeakerSpec(t, l.nodes[1], speakerSpec{local: nodeIP6(2), asn: nodeASN, router: routerIP6, rASN: routerASN,
			prefix: vip6, hold: holdSecs}),
	}
	for k := range sp {
		sp[k].expect(t, "up", 20*time.Second)
	}
	for k := range sp {
		start := time.Now()
		sp[k].do(t, "announce")
		want := []netip.Addr{nodeIP6(1), nodeIP6(2)}[:k+1]
		t.Logf("node%d announces: route has %d next hop(s) after %v", k+1, k+1, fv.waitNexthops(t, vip6, want, start, 20*time.Second))
	}
	var st Status
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var err error
		if st, err = ReadStatus(context.Background(), rp.socket); err != nil {
			t.Fatal(err)
		}
		if len(st.Routes) == 1 && len(st.Routes[0].Nexthops) == 2 || time.Now().After(deadline) {
			break
		}
	}
	if len(st.Routes) != 1 || st.Routes[0].Prefix != vip6 || !slices.Equal(st.Routes[0].Nexthops, []netip.Addr{nodeIP6(1), nodeIP6(2)}) {
		t.Errorf("status routes = %+v, want %s via %s and %s", st.Routes, vip6, nodeIP6(1), nodeIP6(2))
	}
	if st.Listen6 != netip.AddrPortFrom(routerIP6, 179) {
		t.Errorf("status listen6 = %s, want %s", st.Listen6, netip.AddrPortFrom(routerIP6, 179))
	}
	var out []byte
	if err := netns.Do(l.router, func() (err error) {
		out, err = exec.Command("ip", "-6", "route", "show", vip6.String()).CombinedOutput()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("router: ip -6 route show %s:\n%s", vip6, out)

	start := time.Now()
	sp[0].do(t, "withdraw")
	t.Logf("node1 withdraws: 1 next hop after %v", fv.waitNexthops(t, vip6, []netip.Addr{nodeIP6(2)}, start, 20*time.Second))
	start = time.Now()
	sp[0].do(t, "announce")
	fv.waitNexthops(t, vip6, []netip.Addr{nodeIP6(1), nodeIP6(2)}, start, 20*time.Second)
	start = time.Now()
	sp[1].stop(t)
	t.Logf("node2 stops: 1 next hop after %v", fv.waitNexthops(t, vip6, []netip.Addr{nodeIP6(1)}, start, 20*time.Second))
}
