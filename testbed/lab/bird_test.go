package lab

import (
	"context"
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

// needBIRD skips a test when BIRD is not installed, except on CI, which
// installs it (scripts/deps.sh).
func needBIRD(t *testing.T) {
	t.Helper()
	for _, tool := range []string{birdBinary, "birdc"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s: %v (CI=true: not skipping)", tool, err)
			}
			t.Skipf("%s is not installed (Debian package bird2): %v", tool, err)
		}
	}
}

func TestBirdConfig(t *testing.T) {
	common := []string{"router id 10.0.1.1;", "protocol device {", "protocol kernel {", "export all;",
		"merge paths on limit 64;", "protocol bgp xlb {", "local 10.0.1.1 as 65000;",
		"neighbor range 10.0.1.0/24 as 65001;", `dynamic name "xlb";`, "passive on;", "error wait time 1, 5;", "hold time 9;", "keepalive time 3;",
		"import where net ~ [ 10.99.0.0/24+ ];", "export none;"}
	for _, tt := range []struct {
		name      string
		spec      Spec
		want, not []string
	}{
		{"eBGP from a neighbour range", Spec{Router: RouterBIRD}, nil,
			[]string{"bfd on;", "protocol bfd {", "multiplier 3;"}},
		{"BFD", Spec{Router: RouterBIRD, BFD: true},
			[]string{"bfd on;", "protocol bfd {", `interface "br-node" {`, "min rx interval 100 ms;", "min tx interval 100 ms;", "multiplier 3;"},
			nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.spec
			s.Prefix, s.Nodes, s.Binary = "t6", 3, "/bin/true"
			p, err := NewPlan(s)
			if err != nil {
				t.Fatal(err)
			}
			conf := birdConfig(p)
			got := lines(conf)
			for _, w := range append(slices.Clone(common), tt.want...) {
				if !slices.Contains(got, w) {
					t.Errorf("bird.conf lacks %q:\n%s", w, conf)
				}
			}
			for _, n := range tt.not {
				if slices.Contains(got, n) {
					t.Errorf("bird.conf has %q:\n%s", n, conf)
				}
			}
			if o, c := strings.Count(conf, "{"), strings.Count(conf, "}"); o != c {
				t.Errorf("%d braces opened, %d closed:\n%s", o, c, conf)
			}
			birdParses(t, conf)
		})
	}
}

// birdParses checks conf with BIRD's own parser (bird -p), when BIRD is
// installed, and that the parser does reject a broken file.
func birdParses(t *testing.T, conf string) {
	t.Helper()
	if _, err := os.Stat(birdBinary); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s: %v (CI=true: not skipping)", birdBinary, err)
		}
		t.Logf("BIRD not installed: configuration not checked by its parser")
		return
	}
	dir := t.TempDir()
	for _, c := range []struct {
		text string
		ok   bool
	}{
		{conf, true},
		{strings.Replace(conf, "hold time 9;", "hold time nine;", 1), false},
	} {
		path := filepath.Join(dir, "bird.conf")
		if err := os.WriteFile(path, []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(birdBinary, "-p", "-c", path).CombinedOutput()
		if (err == nil) != c.ok {
			t.Errorf("bird -p: %v: %s (want it to accept the file: %v)\n%s", err, out, c.ok, c.text)
		}
	}
}

// showProtocolsAll is `birdc show protocols all` of a lab router with
// two nodes connected (one of them gone again), shortened.
const showProtocolsAll = `BIRD 2.0.12 ready.
Name       Proto      Table      State  Since         Info
device1    Device     ---        up     2026-11-22 07:10:51.503  

kernel1    Kernel     master4    up     2026-11-22 07:10:51.503  
  Channel ipv4
    State:          UP
    Table:          master4
    Preference:     10
    Input filter:   REJECT
    Output filter:  ACCEPT
    Routes:         0 imported, 2 exported, 0 preferred

bfd1       BFD        ---        up     2026-11-22 07:10:51.503  

xlb        BGP        ---        start  2026-11-22 07:10:51.503  Passive       
  BGP state:          Passive
    Neighbor range:   10.0.1.0/24
    Neighbor AS:      65001
    Local AS:         65000
  Channel ipv4
    State:          DOWN
    Table:          master4
    Preference:     100
    Input filter:   (unnamed)
    Output filter:  REJECT

xlb1       BGP        ---        up     2026-11-22 07:11:05.141  Established   
  BGP state:          Established
    Neighbor address: 10.0.1.3
    Neighbor AS:      65001
    Local AS:         65000
    Neighbor ID:      10.0.1.3
    Local capabilities
      Multiprotocol
        AF announced: ipv4
      Route refresh
      4-octet AS numbers
    Session:          external AS4
    Source address:   10.0.1.1
    Hold timer:       7.012/9
    Keepalive timer:  0.530/3
  Channel ipv4
    State:          UP
    Table:          master4
    Preference:     100
    Input filter:   (unnamed)
    Output filter:  REJECT
    Routes:         2 imported, 0 exported, 2 preferred

xlb2       BGP        ---        start  2026-11-22 07:11:15.705  Active        Socket: Connection closed
  BGP state:          Active
    Neighbor address: 10.0.1.2
    Neighbor AS:      65001
    Local AS:         65000
    Connect delay:    3.114/5
    Last error:       Socket: Connection closed
  Channel ipv4
    State:          DOWN
    Table:          master4
    Preference:     100
    Input filter:   (unnamed)
    Output filter:  REJECT

`

func TestParseBirdProtocols(t *testing.T) {
	two := 2
	for _, tt := range []struct {
		name string
		in   string
		want []Session
		err  string
	}{
		{"sessions, sorted by peer; the listener left out", showProtocolsAll, []Session{
			{Speaker: "router", Peer: netip.MustParseAddr("10.0.1.2"), ASN: 65001, State: "active"},
			{Speaker: "router", Peer: netip.MustParseAddr("10.0.1.3"), ASN: 65001, State: "established", Prefixes: &two},
		}, ""},
		{"no node yet", strings.Split(showProtocolsAll, "xlb1 ")[0], nil, ""},
		{"empty", "", nil, ""},
		{"bad neighbour address", strings.Replace(showProtocolsAll, "Neighbor address: 10.0.1.3", "Neighbor address: 10.0.1.300", 1), nil, `neighbour "10.0.1.300"`},
		{"bad AS", strings.Replace(showProtocolsAll, "Neighbor AS:      65001\n    Local AS:         65000\n    Neighbor ID", "Neighbor AS:      x\n    Local AS:         65000\n    Neighbor ID", 1), nil, `neighbour AS "x"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseBIRDProtocols([]byte(tt.in))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one with %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(got, tt.want, sameSession) {
				t.Errorf("sessions %+v, want %+v", got, tt.want)
			}
		})
	}
}

func sameSession(a, b Session) bool {
	if (a.Prefixes == nil) != (b.Prefixes == nil) || (a.Prefixes != nil && *a.Prefixes != *b.Prefixes) {
		return false
	}
	a.Prefixes, b.Prefixes = nil, nil
	return a == b
}

// TestBirdRouter runs BIRD with BFD as the lab's router and a GoBGP
// speaker per node: the router's kernel route has one next hop per
// speaker that is up (BIRD merges the equal paths into one multipath
// route), the status shows BIRD's sessions, a frozen speaker leaves the
// route within the BFD detection time, and Down leaves nothing behind.
func TestBirdRouter(t *testing.T) {
	needRoot(t)
	needBIRD(t)
	t.Parallel()
	vip := netip.MustParseAddr(DefaultVIPs[0])
	prefix := testPrefix(t, 30)
	p := upBGPLab(t, prefix, Spec{Router: RouterBIRD, BFD: true}, 3)
	t.Cleanup(func() {
		if t.Failed() {
			out, err := birdShow(context.Background(), p, "show", "protocols", "all")
			t.Logf("birdc show protocols all: %v\n%s", err, out)
			b, _ := os.ReadFile(LogFile(prefix, birdProcess))
			t.Logf("BIRD's log:\n%s", b)
		}
	})
	if b, err := os.ReadFile(birdConfigFile(prefix)); err != nil || string(b) != birdConfig(p) {
		t.Fatalf("%s: %v; want the rendered configuration", birdConfigFile(prefix), err)
	}
	st, err := ReadStatus(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Up || st.Router != RouterBIRD || !slices.ContainsFunc(st.Processes, func(ps ProcessStatus) bool { return ps.Name == birdProcess && ps.Alive }) {
		t.Fatalf("status: up %v, router %q, processes %+v; want BIRD running", st.Up, st.Router, st.Processes)
	}
	if st.SessionsError != "" || len(st.Sessions) != 0 {
		t.Errorf("sessions before any speaker: %+v (%s), want none", st.Sessions, st.SessionsError)
	}

	for k := 1; k <= len(p.Nodes); k++ {
		start := time.Now()
		startSpeaker(t, p, p.Nodes[k-1], vip)
		if err := WaitNextHops(context.Background(), p, vip, nodeAddrs(p, seq(k)...), 20*time.Second); err != nil {
			t.Fatalf("speaker %d: %v\nBIRD's log: %s", k, err, logTail(LogFile(prefix, birdProcess)))
		}
		t.Logf("speaker %d start -> route via %d nodes: %s", k, k, time.Since(start).Round(time.Millisecond))
	}
	routes, err := vipRoutes(context.Background(), p.Router, p.VIPPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(routes) != 1 || routes[0].Protocol != "bird" || len(routes[0].Nexthops) != len(p.Nodes) {
		t.Errorf("routes in the VIP prefix: %+v; want one of BIRD's with %d next hops", routes, len(p.Nodes))
	}
	st, err = ReadStatus(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if up := established(st.Sessions); st.SessionsError != "" || len(up) != len(p.Nodes) {
		t.Errorf("sessions in status: %+v (%s); want the %d nodes established", st.Sessions, st.SessionsError, len(p.Nodes))
	}
	for _, s := range st.Sessions {
		if s.ASN != NodeASN || s.Prefixes == nil || *s.Prefixes != 1 {
			t.Errorf("session %+v: want AS %d, 1 prefix", s, NodeASN)
		}
	}

	// A clean stop: the Cease notification withdraws at once.
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
	t.Logf("speaker 2 stopped -> route via nodes 1 and 3: %s", time.Since(start).Round(time.Millisecond))
	if err := StopProcess(prefix, speakerName(p.Nodes[1])); err != nil {
		t.Fatal(err)
	}

	checkBFD(t, p, vip)

	procs := allProcesses(t, prefix)
	if err := Down(prefix); err != nil {
		t.Fatal(err)
	}
	assertGone(t, prefix, procs)
}
