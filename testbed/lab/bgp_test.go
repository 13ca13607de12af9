package lab

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// needRouterTools skips a test whose router is not installed, except on
// CI, which installs FRR and gobgpd (scripts/deps.sh).
func needRouterTools(t *testing.T, s Spec) {
	t.Helper()
	var need []string
	if s.Router == RouterFRR {
		need = append(need, filepath.Join(frrDaemonDir, "bgpd"), "vtysh")
	}
	if s.Reflector {
		need = append(need, "gobgpd", "gobgp")
	}
	for _, tool := range need {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s: %v (CI=true: not skipping)", tool, err)
			}
			t.Skipf("%s is not installed (Debian packages frr, gobgpd): %v", tool, err)
		}
	}
}

// upBGPLab builds a lab with the given router and nodes.
func upBGPLab(t *testing.T, prefix string, s Spec, nodes int) Plan {
	t.Helper()
	needRouterTools(t, s)
	s.Prefix, s.Nodes, s.Backends, s.Binary, s.SkipDecap = prefix, nodes, 1, xlbBinary, true
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	p, err := Up(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lab up with the %s router (reflector %v, BFD %v) in %s", s.Router, s.Reflector, s.BFD, time.Since(start).Round(time.Millisecond))
	return p
}

// speakerName is the StartProcess name of node h's test speaker.
func speakerName(h Host) string { return "speaker-" + h.Name }

// startSpeaker runs a test speaker in node h's namespace that announces
// vip to the peer the plan gives the nodes.
func startSpeaker(t *testing.T, p Plan, h Host, vip netip.Addr) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sp := speaker{local: h.Addr, asn: p.BGP.NodeASN, peer: p.BGP.PeerAddr, peerASN: p.BGP.PeerASN,
		prefix: netip.PrefixFrom(vip, 32), hold: p.BGP.HoldTime, bfd: p.BGP.BFD}
	if _, err := StartProcess(p.Spec.Prefix, h.Namespace, speakerName(h), append([]string{exe}, sp.args()...)...); err != nil {
		t.Fatal(err)
	}
}

func nodeAddrs(p Plan, ks ...int) []netip.Addr {
	var a []netip.Addr
	for _, k := range ks {
		a = append(a, p.Nodes[k-1].Addr)
	}
	return a
}

// allProcesses returns every process the lab has started.
func allProcesses(t *testing.T, prefix string) []procRef {
	t.Helper()
	recs, err := records(prefix)
	if err != nil {
		t.Fatal(err)
	}
	var refs []procRef
	for _, r := range recs {
		if ours(r) {
			refs = append(refs, procRef{r.PID, r.Start})
		}
	}
	return refs
}

// TestBGPRouters builds each BGP router with three nodes, starts a GoBGP
// speaker in each node announcing one VIP, and follows the router's
// kernel route as speakers come and go: the route must list exactly the
// nodes whose speakers are up.
func TestBGPRouters(t *testing.T) {
	needRoot(t)
	vip := netip.MustParseAddr(DefaultVIPs[0])
	for i, tt := range []struct {
		name      string
		spec      Spec
		processes []string // of the router, besides the backends' servers
		peer      string   // the nodes' BGP peer
		nodeASN   uint32
	}{
		{"frr", Spec{Router: RouterFRR}, []string{"frr-zebra", "frr-bgpd"}, "10.0.1.1", NodeASN},
		{"frr with BFD", Spec{Router: RouterFRR, BFD: true}, []string{"frr-zebra", "frr-bgpd", "frr-bfdd"}, "10.0.1.1", NodeASN},
		{"embedded", Spec{Router: RouterEmbedded}, []string{"router"}, "10.0.1.1", NodeASN},
		{"embedded with BFD", Spec{Router: RouterEmbedded, BFD: true}, []string{"router"}, "10.0.1.1", NodeASN},
		{"frr behind a route reflector", Spec{Router: RouterFRR, Reflector: true}, []string{"frr-zebra", "frr-bgpd", "gobgpd-rr"}, "10.0.1.254", RouterASN},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			prefix := testPrefix(t, 10+i)
			p := upBGPLab(t, prefix, tt.spec, 3)
			if b := p.BGP; b == nil || b.PeerAddr.String() != tt.peer || b.NodeASN != tt.nodeASN || b.PeerASN != RouterASN || (b.BFD != nil) != tt.spec.BFD {
				t.Fatalf("plan's BGP = %+v, want peer %s AS %d, node AS %d, BFD %v", b, tt.peer, RouterASN, tt.nodeASN, tt.spec.BFD)
			}
			if got, err := labNamespaces(prefix); err != nil || !slices.Equal(got, p.Namespaces()) {
				t.Errorf("namespaces %v, %v; want %v", got, err, p.Namespaces())
			}
			st, err := ReadStatus(prefix)
			if err != nil {
				t.Fatal(err)
			}
			var running []string
			for _, ps := range st.Processes {
				if ps.Alive && !strings.HasPrefix(ps.Name, "serve-") {
					running = append(running, ps.Name)
				}
			}
			slices.Sort(running)
			want := slices.Sorted(slices.Values(tt.processes))
			if !st.Up || st.Router != tt.spec.Router || !slices.Equal(running, want) {
				t.Fatalf("status: up %v, router %q, processes %v; want %s with %v", st.Up, st.Router, running, tt.spec.Router, want)
			}
			if got, err := RouteNextHops(context.Background(), p, vip); err != nil || len(got) != 0 {
				t.Fatalf("before any speaker: route to %s via %v, %v; want none", vip, got, err)
			}
			if err := SetNodes(prefix, []int{1}); err == nil || !strings.Contains(err.Error(), "static router only") {
				t.Errorf("SetNodes on a BGP lab: %v, want a refusal", err)
			}

			// Speakers 1, 2, 3 come up one after the other.
			for k := 1; k <= len(p.Nodes); k++ {
				h := p.Nodes[k-1]
				start := time.Now()
				startSpeaker(t, p, h, vip)
				if err := WaitNextHops(context.Background(), p, vip, nodeAddrs(p, seq(k)...), 20*time.Second); err != nil {
					t.Fatalf("speaker %d: %v\nits log: %s", k, err, logTail(LogFile(prefix, speakerName(h))))
				}
				done := time.Now()
				est, ok := waitEstablished(t, prefix, speakerName(h), 5*time.Second)
				if !ok {
					t.Fatalf("speaker %d: route came without a session", k)
				}
				t.Logf("%s: speaker %d start -> route via %d nodes: %s (session established after %s, then route installed in %s)",
					tt.name, k, k, done.Sub(start).Round(time.Millisecond), est.Sub(start).Round(time.Millisecond), done.Sub(est).Round(time.Millisecond))
			}
			if st, err := ReadStatus(prefix); err != nil || st.SessionsError != "" || len(established(st.Sessions)) < len(p.Nodes) {
				t.Errorf("sessions in status: %+v (%v, %s); want the %d nodes established", st.Sessions, err, st.SessionsError, len(p.Nodes))
			}

			// Speaker 2 stops cleanly: a Cease notification withdraws
			// its path at once, long before a hold time would.
			// The clock runs from the signal, not from the end of
			// StopProcess: a speaker may take its time to exit after
			// its notification has gone out.
			rec, err := readRecord(prefix, speakerName(p.Nodes[1]))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if err := syscall.Kill(rec.PID, syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if err := WaitNextHops(context.Background(), p, vip, nodeAddrs(p, 1, 3), p.BGP.HoldTime/3); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: speaker 2 stopped -> route via nodes 1 and 3: %s", tt.name, time.Since(start).Round(time.Millisecond))
			if err := StopProcess(prefix, speakerName(p.Nodes[1])); err != nil {
				t.Fatal(err)
			}

			if tt.spec.BFD {
				checkBFD(t, p, vip)
			}

			procs := allProcesses(t, prefix)
			// The FRR daemons' directories are named while the daemons
			// run: once they are gone, their PIDs may already belong to
			// a daemon of a lab running beside this one.
			frrDirs := frrTempDirs(procs)
			if n := countFRR(tt.processes); len(frrDirs) != n {
				t.Errorf("FRR temporary directories %v, want one for each of the %d FRR daemons", frrDirs, n)
			}
			if err := Down(prefix); err != nil {
				t.Fatal(err)
			}
			assertGone(t, prefix, procs)
			for _, dir := range frrDirs {
				if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("FRR temporary directory %s left: %v", dir, err)
				}
			}
		})
	}
}

// checkBFD freezes speaker 3, which then sends neither keepalives nor
// BFD packets: the router must notice within its BFD detection time and
// take node 3 out long before the hold time runs out. Once thawed, the
// speaker reconnects and node 3 comes back.
func checkBFD(t *testing.T, p Plan, vip netip.Addr) {
	t.Helper()
	node3 := p.Nodes[2]
	// The speaker's session is Up only once the router has answered.
	deadline := time.Now().Add(10 * time.Second)
	for !speakerBFDUp(t, p.Spec.Prefix, speakerName(node3)) {
		if time.Now().After(deadline) {
			t.Fatalf("no BFD session up between %s and the router: %s", node3.Name, logTail(LogFile(p.Spec.Prefix, speakerName(node3))))
		}
		time.Sleep(50 * time.Millisecond)
	}
	// FRR may reach Up a moment after the speaker: a speaker in Init
	// goes Up on FRR's Init, and FRR on the speaker's next packet.
	for deadline := time.Now().Add(5 * time.Second); p.Spec.Router == RouterFRR && !bfdUp(t, p, node3.Addr); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			out, _ := frrShow(context.Background(), p, "show bfd peers")
			t.Fatalf("FRR has no BFD session up with %s: %s", node3.Addr, out)
		}
	}
	rec, err := readRecord(p.Spec.Prefix, speakerName(node3))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := syscall.Kill(rec.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			_ = syscall.Kill(rec.PID, syscall.SIGCONT)
		}
	}
	defer thaw()
	if err := WaitNextHops(context.Background(), p, vip, nodeAddrs(p, 1), p.BGP.HoldTime/3); err != nil {
		t.Fatalf("frozen node 3: %v", err)
	}
	t.Logf("BFD: speaker 3 frozen -> route via node 1 only: %s (detection time %s, hold time %s)",
		time.Since(start).Round(time.Millisecond), time.Duration(p.BGP.BFD.Multiplier)*p.BGP.BFD.MinRx, p.BGP.HoldTime)
	thaw()
	start = time.Now()
	if err := WaitNextHops(context.Background(), p, vip, nodeAddrs(p, 1, 3), 20*time.Second); err != nil {
		t.Fatalf("thawed node 3: %v", err)
	}
	// GoBGP idles 5 s after a session loss before it reconnects.
	t.Logf("BFD: speaker 3 thawed -> back in the route: %s", time.Since(start).Round(time.Millisecond))
}

// bfdUp reports whether FRR's bfdd has an Up session with peer.
func bfdUp(t *testing.T, p Plan, peer netip.Addr) bool {
	t.Helper()
	out, err := frrShow(context.Background(), p, "show bfd peers json")
	if err != nil {
		t.Fatal(err)
	}
	var peers []struct {
		Peer   string `json:"peer"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal(out, &peers); err != nil {
		t.Fatalf("show bfd peers json: %v: %s", err, out)
	}
	return slices.ContainsFunc(peers, func(s struct {
		Peer   string `json:"peer"`
		Status string `json:"status"`
	}) bool {
		return s.Peer == peer.String() && s.Status == "up"
	})
}

// speakerBFDUp reports whether the speaker's last BFD event is Up.
func speakerBFDUp(t *testing.T, prefix, name string) bool {
	t.Helper()
	b, err := os.ReadFile(LogFile(prefix, name))
	if err != nil {
		t.Fatal(err)
	}
	up := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "msg=BFD ") {
			up = strings.Contains(line, "state=Up")
		}
	}
	return up
}

func established(ss []Session) []Session {
	var up []Session
	for _, s := range ss {
		if s.State == "established" {
			up = append(up, s)
		}
	}
	return up
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i + 1
	}
	return s
}

// countFRR counts the FRR daemons among a lab's process names.
func countFRR(names []string) int {
	n := 0
	for _, name := range names {
		if strings.HasPrefix(name, "frr-") {
			n++
		}
	}
	return n
}

// After a crash that lost the lab's state, Down still stops FRR and the
// reflector, found in their namespaces, and removes the reflector's
// namespace.
func TestBGPDownAfterCrash(t *testing.T) {
	needRoot(t)
	t.Parallel()
	prefix := testPrefix(t, 20)
	p := upBGPLab(t, prefix, Spec{Router: RouterFRR, Reflector: true}, 1)
	procs := allProcesses(t, prefix)
	if len(procs) != 4 { // zebra, bgpd, gobgpd, the backend's server
		t.Fatalf("%d processes running, want 4", len(procs))
	}
	if err := os.RemoveAll(p.StateDir); err != nil {
		t.Fatal(err)
	}
	st, err := ReadStatus(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if st.Up || !st.Broken || !slices.ContainsFunc(st.Namespaces, func(n NamespaceStatus) bool { return n.Name == p.Reflector.Namespace }) {
		t.Errorf("status after the crash: up %v, broken %v, namespaces %v; want broken, with %s", st.Up, st.Broken, st.Namespaces, p.Reflector.Namespace)
	}
	if err := Down(prefix); err != nil {
		t.Fatal(err)
	}
	assertGone(t, prefix, procs)
}

// The combinations NewPlan refuses never reach Up's cleanup.
func TestUpRefusesBadRouter(t *testing.T) {
	for _, s := range []Spec{
		{Router: "quagga"},
		{Router: RouterEmbedded, Reflector: true},
		{Router: RouterStatic, BFD: true},
	} {
		s.Prefix, s.Binary = "xlbbad", "/bin/true"
		if _, err := Up(context.Background(), s); err == nil || errors.Is(err, ErrNotUp) {
			t.Errorf("Up(%+v) = %v, want a refusal", s, err)
		}
		if _, err := os.Stat(StateDir(s.Prefix)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Up(%+v) left %s", s, StateDir(s.Prefix))
		}
	}
}
