package bgp

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xlbproject/xlb/testbed/testenv"
)

// IPv6 VIPs against FRR: announced as /128s in IPv6 unicast with the
// node's IPv6 address as next hop, over an IPv4 session (both families
// on one session) and over an IPv6 session, one the node opens and one
// FRR opens to the node's listener (with TCP MD5 on it); the IPv4 VIP
// beside them as before.
func TestSpeakerIPv6AgainstFRR(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	for _, tc := range []struct {
		name    string
		subnet  int // third octet / fourth group of the link's addresses
		v6      bool
		passive bool
	}{
		{"over IPv4 session", 5, false, false},
		{"over IPv6 session", 6, true, false},
		{"over IPv6 session, passive", 7, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			node, rtr := newNamespace(t, "node"), newNamespace(t, "frr")
			nodeIP, rtrIP := mustAddr(fmt.Sprintf("10.251.%d.2", tc.subnet)), mustAddr(fmt.Sprintf("10.251.%d.1", tc.subnet))
			nodeIP6, rtrIP6 := mustAddr(fmt.Sprintf("fd00:251:%d::2", tc.subnet)), mustAddr(fmt.Sprintf("fd00:251:%d::1", tc.subnet))
			connect(t, node, "eth0", []string{nodeIP.String(), nodeIP6.String()}, rtr, "eth0", []string{rtrIP.String(), rtrIP6.String()})
			neighbor, peer := nodeIP, rtrIP
			if tc.v6 {
				neighbor, peer = nodeIP6, rtrIP6
			}
			// traditional defaults activate IPv4 unicast on every
			// neighbour; IPv6 unicast is activated here. FRR refuses
			// to set up an IPv6 session until its interface has a
			// link-local address (which goes through duplicate address
			// detection first), and by default then retries only every
			// 120 s: it is told to retry every second.
			f := startFRR(t, rtr, fmt.Sprintf(`frr defaults traditional
hostname xlb-test-frr
router bgp 65000
 bgp router-id %s
 no bgp ebgp-requires-policy
 no bgp network import-check
 neighbor %s remote-as 65001
 neighbor %s password s3cret
 neighbor %s timers 3 9
 neighbor %s timers connect 1
 address-family ipv6 unicast
  neighbor %s activate
 exit-address-family
!
`, rtrIP, neighbor, neighbor, neighbor, neighbor, neighbor))

			sp := startSpeaker(t, node, helperOptions{ASN: 65001, NextHop: nodeIP, NextHop6: nodeIP6, Peers: []Peer{
				{Address: peer, ASN: 65000, Password: "s3cret", HoldTime: 9 * time.Second, Passive: tc.passive},
			}})
			waitEstablished(t, sp, peer, 30*time.Second)

			vip4 := mustPrefix(fmt.Sprintf("10.99.%d.1/32", tc.subnet))
			vip6 := mustPrefix(fmt.Sprintf("fd00:99:%d::1/128", tc.subnet))
			attrs := Attributes{
				Communities:      []string{"65000:100", "no-export"},
				LargeCommunities: []string{"65000:1:2"},
				MED:              u32(50),
			}
			for _, vip := range []netip.Prefix{vip4, vip6} {
				if err := sp.Announce(vip, attrs); err != nil {
					t.Fatal(err)
				}
			}
			for vip, nh := range map[netip.Prefix]netip.Addr{vip4: nodeIP, vip6: nodeIP6} {
				testenv.Eventually(t, 10*time.Second, vip.String()+" in FRR", func() (bool, string) {
					if !f.inTable(t, vip) {
						return false, "not in " + frrShowBGP(vip) + " json"
					}
					r, ok := f.route(t, vip)
					return ok && r.NextHop == nh.String() && r.Communities == "65000:100 no-export" &&
						r.Large == "65000:1:2" && r.MED != nil && *r.MED == 50, fmt.Sprintf("%+v", r)
				})
			}
			want := []Route{
				{Prefix: vip4, NextHop: nodeIP, Attributes: Attributes{Communities: []string{"65000:100", "no-export"}, LargeCommunities: []string{"65000:1:2"}, MED: u32(50)}},
				{Prefix: vip6, NextHop: nodeIP6, Attributes: Attributes{Communities: []string{"65000:100", "no-export"}, LargeCommunities: []string{"65000:1:2"}, MED: u32(50)}},
			}
			if got := sp.Announced(); !slices.EqualFunc(got, want, func(a, b Route) bool {
				return a.Prefix == b.Prefix && a.NextHop == b.NextHop && fmt.Sprint(a.Attributes.Communities) == fmt.Sprint(b.Attributes.Communities)
			}) {
				t.Errorf("Announced() = %+v, want %+v", got, want)
			}

			if err := sp.Withdraw(vip6); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 10*time.Second, "IPv6 route gone from FRR", func() (bool, string) {
				return !f.inTable(t, vip6), "still there"
			})
			if !f.inTable(t, vip4) {
				t.Errorf("%s gone from FRR with the IPv6 route", vip4)
			}
			if p := sp.peer(peer); p.State != StateEstablished || p.Flaps != 0 {
				t.Errorf("after withdraw: %+v, want still established", p)
			}
		})
	}
}

// Two IPv6-only xlb nodes announce the same IPv6 VIP over IPv6 sessions;
// FRR installs one route with both nodes as next hops in the router's
// kernel table.
func TestSpeakerIPv6ECMPAgainstFRR(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	rtr := newNamespace(t, "frr")
	type nodeSide struct {
		ns       string
		ip, rtr  netip.Addr
		routerID netip.Addr
		dev      string
	}
	nodes := []nodeSide{
		{ip: mustAddr("fd00:251:71::2"), rtr: mustAddr("fd00:251:71::1"), routerID: mustAddr("10.251.71.2"), dev: "eth0"},
		{ip: mustAddr("fd00:251:72::2"), rtr: mustAddr("fd00:251:72::1"), routerID: mustAddr("10.251.72.2"), dev: "eth1"},
	}
	var conf strings.Builder
	fmt.Fprintf(&conf, "frr defaults traditional\nhostname xlb-test-frr\nrouter bgp 65000\n bgp router-id 10.251.71.1\n no bgp ebgp-requires-policy\n")
	for i := range nodes {
		n := &nodes[i]
		n.ns = newNamespace(t, "node")
		connect(t, n.ns, "eth0", []string{n.ip.String()}, rtr, n.dev, []string{n.rtr.String()})
		fmt.Fprintf(&conf, " neighbor %s remote-as 65001\n neighbor %s timers 3 9\n", n.ip, n.ip)
	}
	conf.WriteString(" address-family ipv6 unicast\n  maximum-paths 4\n")
	for _, n := range nodes {
		fmt.Fprintf(&conf, "  neighbor %s activate\n", n.ip)
	}
	conf.WriteString(" exit-address-family\n!\n")
	f := startFRRDaemons(t, rtr, conf.String(), true)

	vip := mustPrefix("fd00:99:71::1/128")
	for _, n := range nodes {
		sp := startSpeaker(t, n.ns, helperOptions{ASN: 65001, RouterID: n.routerID, NextHop6: n.ip, Peers: []Peer{
			{Address: n.rtr, ASN: 65000, HoldTime: 9 * time.Second},
		}})
		waitEstablished(t, sp, n.rtr, 20*time.Second)
		if err := sp.Announce(vip, Attributes{}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 20*time.Second, "ECMP route of both nodes in the router's kernel", func() (bool, string) {
		out := run(t, "ip", "-n", rtr, "-6", "route", "show", vip.String())
		for _, n := range nodes {
			if !strings.Contains(out, fmt.Sprintf("nexthop via %s dev %s", n.ip, n.dev)) {
				return false, out + "\n" + f.vtysh(t, "show bgp ipv6 unicast "+vip.String())
			}
		}
		return true, out
	})
	t.Logf("router: %s", run(t, "ip", "-n", rtr, "-6", "route", "show", vip.String()))
}

// bird is BIRD 2 running in a namespace, its control socket in dir.
type bird struct {
	dir string
}

// startBIRD runs BIRD in the foreground in ns with conf (bird.conf
// syntax); it is killed, by its PID, when the test ends.
func startBIRD(t *testing.T, ns, conf string) *bird {
	t.Helper()
	requireBinary(t, "/usr/sbin/bird", "bird2")
	requireBinary(t, "birdc", "bird2")
	b := &bird{dir: t.TempDir()}
	path := filepath.Join(b.dir, "bird.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(b.dir, "bird.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns, "/usr/sbin/bird", "-f", "-c", path, "-s", b.socket(), "-P", filepath.Join(b.dir, "bird.pid"))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	release, err := startPinned(cmd)
	if err != nil {
		t.Fatalf("start bird: %v", err)
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
			out, _ := b.birdc("show", "protocols", "all")
			log, _ := os.ReadFile(logFile.Name())
			t.Logf("BIRD protocols:\n%s\nBIRD log:\n%s", out, tail(string(log), 40))
		}
	})
	testenv.Eventually(t, 10*time.Second, "BIRD control socket", func() (bool, string) {
		out, err := b.birdc("show", "status")
		return err == nil, out
	})
	return b
}

func (b *bird) socket() string { return filepath.Join(b.dir, "bird.ctl") }

func (b *bird) birdc(args ...string) (string, error) {
	out, err := exec.Command("birdc", append([]string{"-s", b.socket()}, args...)...).CombinedOutput()
	return string(out), err
}

// route returns `birdc show route for PREFIX all`, "" when BIRD has no
// route to exactly p.
func (b *bird) route(t *testing.T, p netip.Prefix) string {
	t.Helper()
	out, err := b.birdc("show", "route", p.String(), "all")
	if strings.Contains(out, "Network not found") {
		return "" // birdc exits 1 then
	}
	if err != nil {
		t.Fatalf("birdc show route %s all: %v\n%s", p, err, out)
	}
	if !strings.Contains(out, p.String()) {
		return ""
	}
	return out
}

// IPv6 VIPs against BIRD, over an IPv4 session (both families on it)
// and over an IPv6 session, with the IPv4 VIP beside them.
func TestSpeakerIPv6AgainstBIRD(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	for _, tc := range []struct {
		name   string
		subnet int
		v6     bool
	}{
		{"over IPv4 session", 8, false},
		{"over IPv6 session", 9, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			node, rtr := newNamespace(t, "node"), newNamespace(t, "bird")
			nodeIP, rtrIP := mustAddr(fmt.Sprintf("10.251.%d.2", tc.subnet)), mustAddr(fmt.Sprintf("10.251.%d.1", tc.subnet))
			nodeIP6, rtrIP6 := mustAddr(fmt.Sprintf("fd00:251:%d::2", tc.subnet)), mustAddr(fmt.Sprintf("fd00:251:%d::1", tc.subnet))
			connect(t, node, "eth0", []string{nodeIP.String(), nodeIP6.String()}, rtr, "eth0", []string{rtrIP.String(), rtrIP6.String()})
			local, neighbor, peer := rtrIP, nodeIP, rtrIP
			if tc.v6 {
				local, neighbor, peer = rtrIP6, nodeIP6, rtrIP6
			}
			b := startBIRD(t, rtr, fmt.Sprintf(`log stderr all;
router id %s;
protocol device {
}
protocol bgp xlb {
	local %s as 65000;
	neighbor %s as 65001;
	password "s3cret";
	hold time 9;
	keepalive time 3;
	ipv4 {
		import all;
		export none;
	};
	ipv6 {
		import all;
		export none;
	};
}
`, rtrIP, local, neighbor))

			sp := startSpeaker(t, node, helperOptions{ASN: 65001, NextHop: nodeIP, NextHop6: nodeIP6, Peers: []Peer{
				{Address: peer, ASN: 65000, Password: "s3cret", HoldTime: 9 * time.Second},
			}})
			waitEstablished(t, sp, peer, 20*time.Second)

			vip4 := mustPrefix(fmt.Sprintf("10.99.%d.1/32", tc.subnet))
			vip6 := mustPrefix(fmt.Sprintf("fd00:99:%d::1/128", tc.subnet))
			attrs := Attributes{Communities: []string{"65000:100"}, LargeCommunities: []string{"65000:1:2"}, MED: u32(50)}
			for _, vip := range []netip.Prefix{vip4, vip6} {
				if err := sp.Announce(vip, attrs); err != nil {
					t.Fatal(err)
				}
			}
			for vip, nh := range map[netip.Prefix]netip.Addr{vip4: nodeIP, vip6: nodeIP6} {
				testenv.Eventually(t, 10*time.Second, vip.String()+" in BIRD", func() (bool, string) {
					out := b.route(t, vip)
					return strings.Contains(out, "BGP.next_hop: "+nh.String()) && strings.Contains(out, "via "+nh.String()+" on eth0") &&
						strings.Contains(out, "BGP.med: 50") && strings.Contains(out, "BGP.community: (65000,100)") &&
						strings.Contains(out, "BGP.large_community: (65000, 1, 2)"), out
				})
			}
			t.Logf("BIRD: %s", b.route(t, vip6))
			if err := sp.Withdraw(vip6); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 10*time.Second, "IPv6 route gone from BIRD", func() (bool, string) {
				out := b.route(t, vip6)
				return out == "", out
			})
			if b.route(t, vip4) == "" {
				t.Errorf("%s gone from BIRD with the IPv6 route", vip4)
			}
			if p := sp.peer(peer); p.State != StateEstablished || p.Flaps != 0 {
				t.Errorf("after withdraw: %+v, want still established", p)
			}
		})
	}
}
