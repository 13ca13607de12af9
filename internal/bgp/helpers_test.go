package bgp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	gobgp "github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/xlbproject/xlb/testbed/netns"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// A Speaker dials its peers from whatever goroutine GoBGP picks, so it
// must live in a process that is wholly inside the node's network
// namespace. The tests therefore run it in a helper: this test binary
// re-executed under `ip netns exec`, driven over stdin/stdout with one
// JSON request and one JSON response per line.
const helperEnv = "XLB_BGP_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "speaker" {
		os.Exit(speakerHelperMain(os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

// helperOptions is Options without the logger, for the wire.
type helperOptions struct {
	ASN        uint32
	RouterID   netip.Addr
	NextHop    netip.Addr
	NextHop6   netip.Addr
	ListenPort int
	Peers      []Peer
	// PrefixLimitRetry: Options.PrefixLimitRetry.
	PrefixLimitRetry time.Duration
	// Quiet leaves GoBGP's debug records (one per route and more) out
	// of the helper's log: the flood tests would write gigabytes.
	Quiet bool
	// Routes are announced between New and Start, as the agent's first
	// routes are.
	Routes []netip.Prefix
}

type helperRequest struct {
	Op      string // start, announce, withdraw, withdrawAll, setPeers, peerDown, peerUp, flap, adminDown, peers, announced, stop
	Options helperOptions
	Prefix  netip.Prefix
	Attrs   Attributes
	Peers   []Peer
	Addr    netip.Addr
	Reason  string
	Count   int // of flap
}

type helperResponse struct {
	Err    string
	Peers  []PeerStatus
	Routes []Route
	// AdminDown: GoBGP's own admin state of the peer (op adminDown).
	AdminDown bool
	// Learned: paths in GoBGP's global RIB that are not the speaker's
	// own routes (op learned).
	Learned int
	// HeapBytes: the helper's Go heap in use after a collection (op
	// mem); RSSBytes and PeakRSSBytes its resident set, now and at most.
	HeapBytes, RSSBytes, PeakRSSBytes uint64
	// Stalled: GoBGP was still held (see stall) when op peers returned.
	Stalled bool
}

func speakerHelperMain(in io.Reader, out io.Writer) int {
	level := &slog.LevelVar{}
	level.Set(slog.LevelDebug - 4)
	st := &stall{}
	log := slog.New(&stallHandler{inner: slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug - 4}), level: level, st: st})
	var sp *Speaker
	dec := json.NewDecoder(in)
	enc := json.NewEncoder(out)
	for {
		var req helperRequest
		if err := dec.Decode(&req); err != nil {
			if sp != nil {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = sp.Stop(ctx)
				cancel()
			}
			if errors.Is(err, io.EOF) {
				return 0
			}
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 1
		}
		var resp helperResponse
		var err error
		switch {
		case req.Op == "start":
			o := req.Options
			if o.Quiet {
				level.Set(slog.LevelDebug)
			}
			sp, err = New(Options{ASN: o.ASN, RouterID: o.RouterID, NextHop: o.NextHop, NextHop6: o.NextHop6, ListenPort: o.ListenPort, Peers: o.Peers,
				PrefixLimitRetry: o.PrefixLimitRetry, Logger: log})
			for _, p := range o.Routes {
				if err == nil {
					err = sp.Announce(p, Attributes{})
				}
			}
			if err == nil {
				err = sp.Start(context.Background())
			}
		case sp == nil:
			err = errors.New("helper: start first")
		case req.Op == "announce":
			err = sp.Announce(req.Prefix, req.Attrs)
		case req.Op == "withdraw":
			err = sp.Withdraw(req.Prefix)
		case req.Op == "withdrawAll":
			err = sp.WithdrawAll()
		case req.Op == "setPeers":
			err = sp.SetPeers(req.Peers)
		case req.Op == "peerDown":
			err = sp.PeerDown(req.Addr, req.Reason)
		case req.Op == "peerUp":
			err = sp.PeerUp(req.Addr)
		case req.Op == "flap":
			// Down and up back to back, in-process: as fast as BFD
			// can do it.
			for range req.Count {
				if err = sp.PeerDown(req.Addr, req.Reason); err == nil {
					err = sp.PeerUp(req.Addr)
				}
				if err != nil {
					break
				}
			}
		case req.Op == "adminDown":
			sp.mu.Lock()
			srv, gaddr := sp.srv, sp.gobgpAddrOf(req.Addr)
			sp.mu.Unlock()
			var ok bool
			if resp.AdminDown, ok = gobgpAdminDown(context.Background(), srv, gaddr); !ok {
				err = fmt.Errorf("helper: no admin state for %s", req.Addr)
			}
		case req.Op == "peers":
			resp.Peers = sp.Peers()
			resp.Stalled = st.holding()
		case req.Op == "stall":
			err = st.arm(10 * time.Second)
		case req.Op == "unstall":
			st.unstall()
		case req.Op == "learned":
			resp.Learned, err = learnedPaths(sp)
		case req.Op == "mem":
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			resp.HeapBytes = ms.HeapInuse
			resp.RSSBytes, resp.PeakRSSBytes, err = residentSet()
		case req.Op == "announced":
			resp.Routes = sp.Announced()
		case req.Op == "stop":
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err = sp.Stop(ctx)
			cancel()
		case req.Op == "stopGraceful":
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err = sp.StopGraceful(ctx)
			cancel()
		default:
			err = fmt.Errorf("helper: unknown op %q", req.Op)
		}
		if err != nil {
			resp.Err = err.Error()
		}
		if err := enc.Encode(resp); err != nil {
			return 1
		}
	}
}

// residentSet reads the process's resident set size, now and at its
// peak, from /proc/self/status.
func residentSet() (now, peak uint64, err error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.Lines(string(b)) {
		var dst *uint64
		switch {
		case strings.HasPrefix(line, "VmRSS:"):
			dst = &now
		case strings.HasPrefix(line, "VmHWM:"):
			dst = &peak
		default:
			continue
		}
		var kb uint64
		if _, err := fmt.Sscanf(line[6:], "%d kB", &kb); err != nil {
			return 0, 0, fmt.Errorf("helper: /proc/self/status: %q: %w", line, err)
		}
		*dst = kb << 10
	}
	return now, peak, nil
}

// stallHandler is the helper's log handler. It passes on the records
// at level and above, and can hold GoBGP in the middle of an UPDATE: GoBGP
// logs "received update" while it processes one, holding the lock that
// every query of its state waits for. Held there, GoBGP is busy as a peer
// that floods it makes it, only on demand and for as long as the test
// wants.
type stallHandler struct {
	inner slog.Handler
	level *slog.LevelVar
	st    *stall
}

// stallLimit ends a stall the test did not end, well within the hold
// time: the held goroutine is the one that reads the peer's messages.
const stallLimit = 5 * time.Second

type stall struct {
	mu      sync.Mutex
	armed   bool
	engaged chan struct{} // closed once a goroutine is held
	release chan struct{} // closed to let it go
	held    bool
}

// arm holds the next goroutine that logs "received update", and returns
// once one is held, or an error after timeout.
func (s *stall) arm(timeout time.Duration) error {
	s.mu.Lock()
	s.armed, s.held = true, false
	s.engaged, s.release = make(chan struct{}), make(chan struct{})
	engaged := s.engaged
	s.mu.Unlock()
	select {
	case <-engaged:
		return nil
	case <-time.After(timeout):
		s.unstall()
		return fmt.Errorf("helper: GoBGP processed no UPDATE within %s", timeout)
	}
}

func (s *stall) unstall() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = false
	if s.release != nil {
		close(s.release)
		s.release = nil
	}
}

// holding reports whether a goroutine is held now.
func (s *stall) holding() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held && s.release != nil
}

func (s *stall) isArmed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.armed
}

func (s *stall) hold() {
	s.mu.Lock()
	if !s.armed {
		s.mu.Unlock()
		return
	}
	s.armed, s.held = false, true
	release := s.release
	close(s.engaged)
	s.mu.Unlock()
	select {
	case <-release:
	case <-time.After(stallLimit):
		s.unstall()
	}
}

func (h *stallHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.level.Level() || h.st.isArmed()
}

func (h *stallHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "received update" {
		h.st.hold()
	}
	if r.Level < h.level.Level() {
		return nil
	}
	return h.inner.Handle(ctx, r)
}

func (h *stallHandler) WithAttrs(a []slog.Attr) slog.Handler {
	c := *h
	c.inner = h.inner.WithAttrs(a)
	return &c
}

func (h *stallHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.inner = h.inner.WithGroup(name)
	return &c
}

// learnedPaths counts the paths in sp's GoBGP global RIB that are not
// sp's own routes: what it imported from its peers.
func learnedPaths(sp *Speaker) (int, error) {
	sp.mu.Lock()
	srv := sp.srv
	own := make(map[string]bool, len(sp.routes))
	for p := range sp.routes {
		own[p.String()] = true
	}
	sp.mu.Unlock()
	if srv == nil {
		return 0, errors.New("helper: speaker stopped")
	}
	n := 0
	err := srv.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: gobgp.RF_IPv4_UC},
		func(nlri gobgp.NLRI, paths []*apiutil.Path) {
			if !own[nlri.String()] {
				n += len(paths)
			}
		})
	return n, err
}

// remoteSpeaker drives a Speaker running in a helper process.
type remoteSpeaker struct {
	t       testing.TB
	cmd     *exec.Cmd
	killed  atomic.Bool // by kill: its exit status is not checked
	logPath string
	mu      sync.Mutex
	enc     *json.Encoder
	dec     *json.Decoder
}

// startSpeaker starts a Speaker in namespace ns and returns once Start
// returned.
func startSpeaker(t testing.TB, ns string, opts helperOptions) *remoteSpeaker {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "speaker.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns, self, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=speaker")
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	rs := &remoteSpeaker{}
	release, err := startPinned(cmd)
	if err != nil {
		t.Fatalf("start speaker helper: %v", err)
	}
	t.Cleanup(func() {
		stdin.Close() // the helper stops its speaker and exits
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); release(); close(done) }()
		select {
		case <-done:
			// Non-zero also when the race detector found something.
			if code := cmd.ProcessState.ExitCode(); code != 0 && !rs.killed.Load() {
				t.Errorf("speaker helper in %s exited with status %d", ns, code)
			}
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("speaker helper in %s did not stop within 5s", ns)
		}
		logFile.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("speaker log (%s):\n%s", ns, tail(string(b), 120))
			}
		}
	})
	rs.t, rs.cmd, rs.logPath, rs.enc, rs.dec = t, cmd, logPath, json.NewEncoder(stdin), json.NewDecoder(bufio.NewReader(stdout))
	if err := rs.call(helperRequest{Op: "start", Options: opts}).err(); err != nil {
		t.Fatalf("start speaker: %v", err)
	}
	return rs
}

// startPinned starts cmd from a thread of its own, kept until release is
// called (after the process has exited). Pdeathsig follows the thread
// that forked the child, not the process: a thread that a namespace
// runner (netns.NewRunner) later locks and ends would otherwise take the
// child with it, killing it in the middle of a test.
func startPinned(cmd *exec.Cmd) (release func(), err error) {
	started := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		// Never unlocked: the thread ends with the goroutine.
		runtime.LockOSThread()
		started <- cmd.Start()
		<-done
	}()
	var once sync.Once
	release = func() { once.Do(func() { close(done) }) }
	if err := <-started; err != nil {
		release()
		return nil, err
	}
	return release, nil
}

func tail(s string, lines int) string {
	l := strings.Split(s, "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

func (r helperResponse) err() error {
	if r.Err == "" {
		return nil
	}
	return errors.New(r.Err)
}

func (rs *remoteSpeaker) call(req helperRequest) helperResponse {
	rs.t.Helper()
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if err := rs.enc.Encode(req); err != nil {
		rs.t.Fatalf("speaker helper %s: %v", req.Op, err)
	}
	var resp helperResponse
	if err := rs.dec.Decode(&resp); err != nil {
		rs.t.Fatalf("speaker helper %s: %v", req.Op, err)
	}
	return resp
}

func (rs *remoteSpeaker) Announce(p netip.Prefix, a Attributes) error {
	return rs.call(helperRequest{Op: "announce", Prefix: p, Attrs: a}).err()
}
func (rs *remoteSpeaker) Withdraw(p netip.Prefix) error {
	return rs.call(helperRequest{Op: "withdraw", Prefix: p}).err()
}
func (rs *remoteSpeaker) WithdrawAll() error { return rs.call(helperRequest{Op: "withdrawAll"}).err() }
func (rs *remoteSpeaker) SetPeers(p []Peer) error {
	return rs.call(helperRequest{Op: "setPeers", Peers: p}).err()
}
func (rs *remoteSpeaker) PeerDown(a netip.Addr, reason string) error {
	return rs.call(helperRequest{Op: "peerDown", Addr: a, Reason: reason}).err()
}
func (rs *remoteSpeaker) PeerUp(a netip.Addr) error {
	return rs.call(helperRequest{Op: "peerUp", Addr: a}).err()
}
func (rs *remoteSpeaker) flap(a netip.Addr, n int) error {
	return rs.call(helperRequest{Op: "flap", Addr: a, Reason: "BFD: neighbor down", Count: n}).err()
}
func (rs *remoteSpeaker) gobgpAdminDown(a netip.Addr) (bool, error) {
	r := rs.call(helperRequest{Op: "adminDown", Addr: a})
	return r.AdminDown, r.err()
}
func (rs *remoteSpeaker) learned() (int, error) {
	r := rs.call(helperRequest{Op: "learned"})
	return r.Learned, r.err()
}
func (rs *remoteSpeaker) mem() helperResponse { return rs.call(helperRequest{Op: "mem"}) }
func (rs *remoteSpeaker) stall() error        { return rs.call(helperRequest{Op: "stall"}).err() }
func (rs *remoteSpeaker) unstall()            { rs.call(helperRequest{Op: "unstall"}) }

// peersStalled is Peers, and whether GoBGP was still held when it
// returned.
func (rs *remoteSpeaker) peersStalled() ([]PeerStatus, bool) {
	r := rs.call(helperRequest{Op: "peers"})
	return r.Peers, r.Stalled
}

// logText is what the helper logged so far.
func (rs *remoteSpeaker) logText() string {
	rs.t.Helper()
	b, err := os.ReadFile(rs.logPath)
	if err != nil {
		rs.t.Fatal(err)
	}
	return string(b)
}
func (rs *remoteSpeaker) Stop() error { return rs.call(helperRequest{Op: "stop"}).err() }
func (rs *remoteSpeaker) StopGraceful() error {
	return rs.call(helperRequest{Op: "stopGraceful"}).err()
}

// kill ends the helper with SIGKILL, as a crash would: no NOTIFICATION,
// no withdrawal, the kernel closes its connections.
func (rs *remoteSpeaker) kill() {
	rs.killed.Store(true)
	if err := rs.cmd.Process.Kill(); err != nil {
		rs.t.Fatalf("kill speaker helper: %v", err)
	}
}
func (rs *remoteSpeaker) Peers() []PeerStatus { return rs.call(helperRequest{Op: "peers"}).Peers }
func (rs *remoteSpeaker) Announced() []Route  { return rs.call(helperRequest{Op: "announced"}).Routes }

func (rs *remoteSpeaker) peer(addr netip.Addr) PeerStatus {
	rs.t.Helper()
	for _, p := range rs.Peers() {
		if p.Address == addr {
			return p
		}
	}
	rs.t.Fatalf("peer %s not in speaker status", addr)
	return PeerStatus{}
}

// ---- network namespaces ----

var nsCounter atomic.Int32

// newNamespace creates a network namespace with a name unique to this
// test process and removes it when the test ends.
func newNamespace(t testing.TB, role string) string {
	t.Helper()
	name := fmt.Sprintf("xbgp%d-%s%d", os.Getpid(), role, nsCounter.Add(1))
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("delete namespace %s: %v: %s", name, err, out)
		}
	})
	run(t, "ip", "-n", name, "link", "set", "lo", "up")
	return name
}

// connect joins two namespaces with a veth pair and gives each end its
// addresses (the first of each family is the primary; IPv4 in a /24,
// IPv6 in a /64, usable at once: no duplicate address detection).
func connect(t testing.TB, nsA, ifA string, addrsA []string, nsB, ifB string, addrsB []string) {
	t.Helper()
	run(t, "ip", "-n", nsA, "link", "add", ifA, "type", "veth", "peer", "name", ifB, "netns", nsB)
	addAddrs := func(ns, dev string, addrs []string) {
		for _, a := range addrs {
			if strings.Contains(a, ":") {
				run(t, "ip", "-n", ns, "addr", "add", a+"/64", "dev", dev, "nodad")
			} else {
				run(t, "ip", "-n", ns, "addr", "add", a+"/24", "dev", dev)
			}
		}
	}
	addAddrs(nsA, ifA, addrsA)
	addAddrs(nsB, ifB, addrsB)
	run(t, "ip", "-n", nsA, "link", "set", ifA, "up")
	run(t, "ip", "-n", nsB, "link", "set", ifB, "up")
}

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func requireRoot(t testing.TB) {
	t.Helper()
	testenv.RequireRoot(t, "BGP session tests (network namespaces)")
}

// inNamespace runs fn on a thread inside ns for as long as fn runs.
func inNamespace(t testing.TB, ns string) *netns.Runner {
	t.Helper()
	r, err := netns.NewRunner(ns)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func mustAddr(s string) netip.Addr     { return netip.MustParseAddr(s) }
func u32(v uint32) *uint32             { return &v }
