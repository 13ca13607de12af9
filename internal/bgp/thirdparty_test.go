package bgp

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xlbproject/xlb/testbed/testenv"
)

// Real routers from Debian: FRR's bgpd (with zebra) and gobgpd 3.10.

const frrDir = "/usr/lib/frr"

func requireBinary(t *testing.T, path, pkg string) {
	t.Helper()
	if _, err := exec.LookPath(path); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not installed (Debian package %s)", path, pkg)
		}
		t.Skipf("%s not installed (Debian package %s)", path, pkg)
	}
}

// frr is a zebra+bgpd pair running in a namespace.
type frr struct {
	dir string
}

// startFRR starts zebra and bgpd in ns and applies conf (frr.conf syntax).
// The routes bgpd learns stay out of the namespace's kernel table.
func startFRR(t *testing.T, ns, conf string) *frr {
	t.Helper()
	return startFRRDaemons(t, ns, conf, false)
}

// startFRRDaemons is startFRR; with fib, bgpd has zebra install the
// routes it learns in the namespace's kernel table.
func startFRRDaemons(t *testing.T, ns, conf string, fib bool) *frr {
	t.Helper()
	requireBinary(t, filepath.Join(frrDir, "bgpd"), "frr")
	// The daemons drop to user frr, which must own the directory and
	// reach it: t.TempDir's parents are private to root.
	dir, err := os.MkdirTemp("", "xlb-bgp-frr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	u, err := user.Lookup("frr")
	if err != nil {
		t.Fatalf("user frr: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.conf")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f := &frr{dir: dir}
	zserv := filepath.Join(dir, "zserv.api")
	for _, d := range []struct{ name string }{{"zebra"}, {"bgpd"}} {
		pidFile := filepath.Join(dir, d.name+".pid")
		args := []string{"netns", "exec", ns, filepath.Join(frrDir, d.name), "-d", "-f", empty, "-i", pidFile,
			"-z", zserv, "--vty_socket", dir, "--log", "file:" + filepath.Join(dir, d.name+".log")}
		if d.name == "bgpd" && !fib {
			args = append(args, "-n") // keep learned routes out of the namespace's kernel table
		}
		// Registered before the start: a daemon that forks and then
		// fails a check still leaves a process to kill.
		t.Cleanup(func() { killPidFile(t, pidFile) })
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("start %s: %v\n%s", d.name, err, out)
		}
		testenv.Eventually(t, 5*time.Second, d.name+" vty socket", func() (bool, string) {
			_, err := os.Stat(filepath.Join(dir, d.name+".vty"))
			return err == nil, fmt.Sprint(err)
		})
	}
	if err := os.WriteFile(filepath.Join(dir, "frr.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("vtysh", "--vty_socket", dir, "--config_dir", dir, "-b").CombinedOutput(); err != nil {
		t.Fatalf("vtysh -b: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("FRR: %s", f.vtysh(t, "show bgp summary"))
			if b, err := os.ReadFile(filepath.Join(dir, "bgpd.log")); err == nil {
				t.Logf("bgpd log:\n%s", tail(string(b), 40))
			}
		}
	})
	return f
}

func (f *frr) vtysh(t *testing.T, cmd string) string {
	t.Helper()
	out, err := exec.Command("vtysh", "--vty_socket", f.dir, "-c", cmd).CombinedOutput()
	if err != nil {
		t.Fatalf("vtysh -c %q: %v\n%s", cmd, err, out)
	}
	return string(out)
}

// killPidFile ends the process a daemon's pid file names, by its pid.
func killPidFile(t *testing.T, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	for range 30 {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	t.Logf("killed %s (pid %d) with SIGKILL", filepath.Base(path), pid)
}

// frrShowBGP is FRR's show command for the BGP table of p's family.
func frrShowBGP(p netip.Prefix) string {
	if p.Addr().Is4() {
		return "show ip bgp"
	}
	return "show bgp ipv6 unicast"
}

// frrRoute is what `show ip bgp PREFIX json` (`show bgp ipv6 unicast
// PREFIX json` for IPv6) says about the best path.
type frrRoute struct {
	NextHop     string
	Communities string
	Large       string
	MED         *uint32
	LocalPref   *uint32
}

func (f *frr) route(t *testing.T, p netip.Prefix) (frrRoute, bool) {
	t.Helper()
	var out struct {
		Paths []struct {
			Community *struct {
				String string `json:"string"`
			} `json:"community"`
			LargeCommunity *struct {
				String string `json:"string"`
			} `json:"largeCommunity"`
			Metric    *uint32 `json:"metric"`
			LocalPref *uint32 `json:"locPrf"`
			Nexthops  []struct {
				IP string `json:"ip"`
			} `json:"nexthops"`
			BestPath *struct {
				Overall bool `json:"overall"`
			} `json:"bestpath"`
		} `json:"paths"`
	}
	cmd := frrShowBGP(p) + " " + p.String() + " json"
	raw := f.vtysh(t, cmd)
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, raw)
	}
	for _, path := range out.Paths {
		if path.BestPath == nil || !path.BestPath.Overall || len(path.Nexthops) == 0 {
			continue
		}
		r := frrRoute{NextHop: path.Nexthops[0].IP, MED: path.Metric, LocalPref: path.LocalPref}
		if path.Community != nil {
			r.Communities = path.Community.String
		}
		if path.LargeCommunity != nil {
			r.Large = path.LargeCommunity.String
		}
		return r, true
	}
	return frrRoute{}, false
}

// inTable reports whether `show ip bgp json` (`show bgp ipv6 unicast
// json` for IPv6) lists p.
func (f *frr) inTable(t *testing.T, p netip.Prefix) bool {
	t.Helper()
	var out struct {
		Routes map[string]json.RawMessage `json:"routes"`
	}
	cmd := frrShowBGP(p) + " json"
	raw := f.vtysh(t, cmd)
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, raw)
	}
	_, ok := out.Routes[p.String()]
	return ok
}

func TestSpeakerAgainstFRR(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	node, rtr := newNamespace(t, "node"), newNamespace(t, "frr")
	nodeIP, rtrIP := mustAddr("10.251.3.2"), mustAddr("10.251.3.1")
	connect(t, node, "eth0", []string{nodeIP.String()}, rtr, "eth0", []string{rtrIP.String()})
	f := startFRR(t, rtr, fmt.Sprintf(`frr defaults traditional
hostname xlb-test-frr
router bgp 65000
 bgp router-id %s
 no bgp ebgp-requires-policy
 no bgp network import-check
 neighbor %s remote-as 65001
 neighbor %s password s3cret
 neighbor %s timers 3 9
!
`, rtrIP, nodeIP, nodeIP, nodeIP))

	sp := startSpeaker(t, node, helperOptions{ASN: 65001, NextHop: nodeIP, Peers: []Peer{
		{Address: rtrIP, ASN: 65000, Password: "s3cret", HoldTime: 9 * time.Second},
	}})
	waitEstablished(t, sp, rtrIP, 20*time.Second)

	vip := mustPrefix("10.99.3.1/32")
	if err := sp.Announce(vip, Attributes{
		Communities:      []string{"65000:100", "no-export"},
		LargeCommunities: []string{"65000:1:2"},
		MED:              u32(50),
	}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "route in FRR", func() (bool, string) {
		if !f.inTable(t, vip) {
			return false, "not in show ip bgp json"
		}
		r, ok := f.route(t, vip)
		return ok && r.NextHop == nodeIP.String() && r.Communities == "65000:100 no-export" &&
			r.Large == "65000:1:2" && r.MED != nil && *r.MED == 50, fmt.Sprintf("%+v", r)
	})
	if err := sp.Withdraw(vip); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "route gone from FRR", func() (bool, string) {
		return !f.inTable(t, vip), "still there"
	})
	if p := sp.peer(rtrIP); p.State != StateEstablished || p.Flaps != 0 {
		t.Errorf("after withdraw: %+v, want still established", p)
	}

	// FRR now expects another ASN from us: it closes the session and
	// rejects every new OPEN, and our status says so in its words.
	setRemoteAS := func(asn int) {
		f.vtysh(t, fmt.Sprintf("configure terminal\nrouter bgp 65000\nneighbor %s remote-as %d", nodeIP, asn))
	}
	setRemoteAS(65077)
	testenv.Eventually(t, 30*time.Second, "status names FRR's NOTIFICATION", func() (bool, string) {
		p := sp.peer(rtrIP)
		return p.State != StateEstablished && p.Flaps == 1 &&
			p.LastError == "peer sent NOTIFICATION: OPEN message error / bad peer AS (our OPEN carries AS 65001)", fmt.Sprintf("%+v", p)
	})
	setRemoteAS(65001)
	waitEstablished(t, sp, rtrIP, 20*time.Second)
}

// gobgpd is Debian's gobgpd in a namespace, its API on 127.0.0.1 there.
type gobgpd struct {
	ns, port string
}

func startGoBGPd(t *testing.T, ns, conf string) *gobgpd {
	t.Helper()
	requireBinary(t, "gobgpd", "gobgpd")
	dir := t.TempDir()
	path := filepath.Join(dir, "gobgpd.toml")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, "gobgpd.log"))
	if err != nil {
		t.Fatal(err)
	}
	g := &gobgpd{ns: ns, port: "50051"}
	cmd := exec.Command("ip", "netns", "exec", ns, "gobgpd", "-f", path, "--api-hosts", "127.0.0.1:"+g.port,
		"--pprof-disable", "-p")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	release, err := startPinned(cmd)
	if err != nil {
		t.Fatalf("start gobgpd: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); release(); close(done) }()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("gobgpd log:\n%s", tail(string(b), 40))
		}
	})
	testenv.Eventually(t, 10*time.Second, "gobgpd API", func() (bool, string) {
		out, err := g.cli("global")
		return err == nil, out
	})
	return g
}

func (g *gobgpd) cli(args ...string) (string, error) {
	full := append([]string{"netns", "exec", g.ns, "gobgp", "-p", g.port}, args...)
	out, err := exec.Command("ip", full...).CombinedOutput()
	return string(out), err
}

// rib returns gobgpd's global RIB: prefix → next hop and communities.
func (g *gobgpd) rib(t *testing.T) map[string]gobgpdPath {
	t.Helper()
	out, err := g.cli("global", "rib", "-j")
	if err != nil {
		t.Fatalf("gobgp global rib -j: %v\n%s", err, out)
	}
	var raw map[string][]struct {
		Attrs []struct {
			Type        int      `json:"type"`
			NextHop     string   `json:"nexthop"`
			Communities []uint32 `json:"communities"`
			Metric      *uint32  `json:"metric"`
		} `json:"attrs"`
	}
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("gobgp global rib -j: %v\n%s", err, out)
	}
	rib := map[string]gobgpdPath{}
	for prefix, paths := range raw {
		if len(paths) == 0 {
			continue
		}
		var p gobgpdPath
		for _, a := range paths[0].Attrs {
			switch a.Type {
			case 3: // NEXT_HOP
				p.NextHop = a.NextHop
			case 4: // MULTI_EXIT_DISC
				p.MED = a.Metric
			case 8: // COMMUNITIES
				p.Communities = a.Communities
			}
		}
		rib[prefix] = p
	}
	return rib
}

type gobgpdPath struct {
	NextHop     string
	Communities []uint32
	MED         *uint32
}

func TestSpeakerAgainstGoBGPd(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	node, rtr := newNamespace(t, "node"), newNamespace(t, "gobgpd")
	nodeIP, rtrIP := mustAddr("10.251.4.2"), mustAddr("10.251.4.1")
	connect(t, node, "eth0", []string{nodeIP.String()}, rtr, "eth0", []string{rtrIP.String()})
	// gobgpd as an iBGP route reflector with xlb as its client, the
	// dissertation's topology. Here gobgpd connects and xlb listens,
	// with TCP MD5 on xlb's listening socket.
	sp := startSpeaker(t, node, helperOptions{ASN: 65001, NextHop: nodeIP, Peers: []Peer{
		{Address: rtrIP, ASN: 65001, Passive: true, Password: "rr-key"},
	}})
	g := startGoBGPd(t, rtr, fmt.Sprintf(`[global.config]
  as = 65001
  router-id = "%s"
  local-address-list = ["%s"]
[[neighbors]]
  [neighbors.config]
    neighbor-address = "%s"
    peer-as = 65001
    auth-password = "rr-key"
  [neighbors.timers.config]
    connect-retry = 2
  [neighbors.route-reflector.config]
    route-reflector-client = true
    route-reflector-cluster-id = "%s"
`, rtrIP, rtrIP, nodeIP, rtrIP))
	waitEstablished(t, sp, rtrIP, 15*time.Second)

	vip := mustPrefix("10.99.4.1/32")
	if err := sp.Announce(vip, Attributes{Communities: []string{"65001:7"}, MED: u32(9)}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "route in gobgpd", func() (bool, string) {
		p, ok := g.rib(t)[vip.String()]
		return ok && p.NextHop == nodeIP.String() && slices.Equal(p.Communities, []uint32{65001<<16 | 7}) &&
			p.MED != nil && *p.MED == 9, fmt.Sprintf("%+v", p)
	})
	if err := sp.Withdraw(vip); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "route gone from gobgpd", func() (bool, string) {
		_, ok := g.rib(t)[vip.String()]
		return !ok, "still there"
	})
}
