package lab

import (
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestNewPlanRouters(t *testing.T) {
	for _, tt := range []struct {
		name       string
		spec       Spec
		router     string
		bgp        *BGP
		namespaces []string
	}{
		{"default is static", Spec{}, RouterStatic, nil,
			[]string{"t3-router", "t3-client1", "t3-node1", "t3-node2", "t3-be1"}},
		{"embedded", Spec{Router: RouterEmbedded}, RouterEmbedded,
			&BGP{NodeASN: 65001, PeerAddr: netip.MustParseAddr("10.0.1.1"), PeerASN: 65000, RouterASN: 65000, HoldTime: 9 * time.Second},
			[]string{"t3-router", "t3-client1", "t3-node1", "t3-node2", "t3-be1"}},
		{"frr with BFD", Spec{Router: RouterFRR, BFD: true}, RouterFRR,
			&BGP{NodeASN: 65001, PeerAddr: netip.MustParseAddr("10.0.1.1"), PeerASN: 65000, RouterASN: 65000, HoldTime: 9 * time.Second,
				BFD: &BFD{MinRx: 100 * time.Millisecond, MinTx: 100 * time.Millisecond, Multiplier: 3}},
			[]string{"t3-router", "t3-client1", "t3-node1", "t3-node2", "t3-be1"}},
		{"frr behind a reflector: iBGP to 10.0.1.254", Spec{Router: RouterFRR, Reflector: true}, RouterFRR,
			&BGP{NodeASN: 65000, PeerAddr: netip.MustParseAddr("10.0.1.254"), PeerASN: 65000, RouterASN: 65000, HoldTime: 9 * time.Second},
			[]string{"t3-router", "t3-rr", "t3-client1", "t3-node1", "t3-node2", "t3-be1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.spec
			s.Prefix, s.Backends, s.Binary = "t3", 1, "/bin/true"
			p, err := NewPlan(s)
			if err != nil {
				t.Fatal(err)
			}
			if p.Spec.Router != tt.router {
				t.Errorf("router %q, want %q", p.Spec.Router, tt.router)
			}
			if (p.BGP == nil) != (tt.bgp == nil) || (p.BGP != nil && !sameBGP(*p.BGP, *tt.bgp)) {
				t.Errorf("BGP %+v, want %+v", p.BGP, tt.bgp)
			}
			if got := p.Namespaces(); !slices.Equal(got, tt.namespaces) {
				t.Errorf("namespaces %v, want %v", got, tt.namespaces)
			}
			if (p.Reflector != nil) != s.Reflector {
				t.Fatalf("reflector %+v, want one: %v", p.Reflector, s.Reflector)
			}
			if rr := p.Reflector; rr != nil {
				if rr.Addr != p.BGP.PeerAddr || rr.Gateway != p.NodeSegment.Gateway() || rr.Peer != "nrr" || rr.MTU != p.NodeSegment.MTU || !namespacePattern("t3").MatchString(rr.Namespace) {
					t.Errorf("reflector host %+v", rr)
				}
				for _, n := range p.Nodes {
					if n.Addr == rr.Addr {
						t.Errorf("%s has the reflector's address", n.Name)
					}
				}
			}
			// The recorded spec gives the same plan back (Load).
			again, err := NewPlan(p.Spec)
			if err != nil || again.Spec != p.Spec || !slices.Equal(again.Namespaces(), p.Namespaces()) {
				t.Errorf("plan from its own spec: %+v, %v", again.Spec, err)
			}
		})
	}
}

func sameBGP(a, b BGP) bool {
	if (a.BFD == nil) != (b.BFD == nil) || (a.BFD != nil && *a.BFD != *b.BFD) {
		return false
	}
	a.BFD, b.BFD = nil, nil
	return a == b
}

func TestNewPlanRouterErrors(t *testing.T) {
	for _, tt := range []struct {
		spec Spec
		want string
	}{
		{Spec{Router: "quagga"}, `router "quagga": want one of static, embedded, frr, bird`},
		{Spec{Router: "FRR"}, "want one of"},
		{Spec{BFD: true}, "BFD needs a BGP router"},
		{Spec{Router: RouterEmbedded, Reflector: true}, "route reflector needs --router frr"},
		{Spec{Reflector: true}, "route reflector needs --router frr"},
		{Spec{Router: RouterFRR, Reflector: true, BFD: true}, "gobgpd, which has no BFD"},
		{Spec{Router: RouterFRR, Reflector: true, Nodes: MaxHosts}, "at most 252"},
	} {
		tt.spec.Binary = "/bin/true"
		if _, err := NewPlan(tt.spec); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewPlan(%+v) = %v, want an error with %q", tt.spec, err, tt.want)
		}
	}
	if _, err := NewPlan(Spec{Router: RouterFRR, Reflector: true, Nodes: MaxHosts - 1, Binary: "/bin/true"}); err != nil {
		t.Errorf("252 nodes and a reflector: %v", err)
	}
}

func TestLastHost(t *testing.T) {
	for _, tt := range []struct{ prefix, want string }{
		{"10.0.1.0/24", "10.0.1.254"},
		{"10.0.1.77/24", "10.0.1.254"},
		{"10.0.0.0/16", "10.0.255.254"},
		{"192.168.4.0/30", "192.168.4.2"},
	} {
		if got := lastHost(netip.MustParsePrefix(tt.prefix)); got.String() != tt.want {
			t.Errorf("lastHost(%s) = %s, want %s", tt.prefix, got, tt.want)
		}
	}
}

// lines returns the trimmed, non-empty, non-comment lines of a config.
func lines(conf string) []string {
	var ls []string
	for _, l := range strings.Split(conf, "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "!") && !strings.HasPrefix(l, "#") {
			ls = append(ls, l)
		}
	}
	return ls
}

func TestFRRConfig(t *testing.T) {
	common := []string{"router bgp 65000", "bgp router-id 10.0.1.1", "no bgp ebgp-requires-policy",
		"bgp bestpath as-path multipath-relax", "timers bgp 3 9", "maximum-paths 64", "maximum-paths ibgp 64"}
	for _, tt := range []struct {
		name      string
		spec      Spec
		want, not []string
	}{
		{"eBGP from a listen range", Spec{Router: RouterFRR},
			[]string{"neighbor XLB peer-group", "neighbor XLB remote-as external", "bgp listen range 10.0.1.0/24 peer-group XLB", "neighbor XLB activate"},
			[]string{"neighbor XLB bfd", "bfd", "10.0.1.254"}},
		{"BFD", Spec{Router: RouterFRR, BFD: true},
			[]string{"neighbor XLB bfd", "neighbor XLB bfd profile xlb-lab", "bfd", "profile xlb-lab", "detect-multiplier 3", "receive-interval 100", "transmit-interval 100"},
			nil},
		{"reflector", Spec{Router: RouterFRR, Reflector: true},
			[]string{"neighbor 10.0.1.254 remote-as internal", "neighbor 10.0.1.254 activate"},
			[]string{"neighbor XLB peer-group", "bgp listen range 10.0.1.0/24 peer-group XLB", "bfd"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.spec
			s.Prefix, s.Nodes, s.Binary = "t4", 3, "/bin/true"
			p, err := NewPlan(s)
			if err != nil {
				t.Fatal(err)
			}
			got := lines(frrConfig(p))
			for _, w := range append(slices.Clone(common), tt.want...) {
				if !slices.Contains(got, w) {
					t.Errorf("frr.conf lacks %q:\n%s", w, strings.Join(got, "\n"))
				}
			}
			for _, n := range tt.not {
				if slices.ContainsFunc(got, func(l string) bool { return l == n || strings.Contains(l, n+" ") || strings.HasSuffix(l, " "+n) }) {
					t.Errorf("frr.conf has %q:\n%s", n, strings.Join(got, "\n"))
				}
			}
			// Sections open and close in pairs, or vtysh would apply
			// the BFD profile inside router bgp.
			opens, closes := 0, 0
			for _, l := range got {
				switch {
				case l == "router bgp 65000" || l == "bfd" || strings.HasPrefix(l, "profile ") || strings.HasPrefix(l, "address-family "):
					opens++
				case l == "exit" || l == "exit-address-family":
					closes++
				}
			}
			if opens != closes {
				t.Errorf("%d sections opened, %d closed", opens, closes)
			}
		})
	}
}

// TestReflectorConfig checks gobgpd's configuration with gobgpd's own
// parser (--dry-run), and the settings the topology depends on.
func TestReflectorConfig(t *testing.T) {
	p, err := NewPlan(Spec{Prefix: "t5", Router: RouterFRR, Reflector: true, Binary: "/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	conf := reflectorConfig(p)
	for _, w := range []string{`as = 65000`, `router-id = "10.0.1.254"`, `local-address-list = ["10.0.1.254"]`,
		`prefix = "10.0.1.0/24"`, `neighbor-address = "10.0.1.1"`, `route-reflector-client = true`, `send-max = 64`,
		`hold-time = 9`, `keepalive-interval = 3`} {
		if !strings.Contains(conf, w) {
			t.Errorf("gobgpd.toml lacks %q:\n%s", w, conf)
		}
	}
	// Exactly one reflector client, the router: the nodes' peer group
	// must not be one.
	if n := strings.Count(conf, "route-reflector-client = true"); n != 1 {
		t.Errorf("%d reflector clients, want 1 (the router)", n)
	}
	gobgpd, err := exec.LookPath("gobgpd")
	if err != nil {
		t.Skip("gobgpd not installed: configuration not checked by its parser")
	}
	path := filepath.Join(t.TempDir(), "gobgpd.toml")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(gobgpd, "--dry-run", "-f", path, "-t", "toml").CombinedOutput(); err != nil {
		t.Fatalf("gobgpd --dry-run: %v: %s", err, out)
	}
	// The parser does reject a broken file (else the check above proves
	// nothing).
	if err := os.WriteFile(path, []byte(conf+"\n[[neighbors]]\n  [neighbors.config]\n    neighbor-address = \"bogus\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command(gobgpd, "--dry-run", "-f", path, "-t", "toml").Run(); err == nil {
		t.Error("gobgpd --dry-run accepted a neighbour address \"bogus\"")
	}
}

func TestParseSessions(t *testing.T) {
	frr := `{"ipv4Unicast":{"routerId":"10.0.1.1","as":65000,"peers":{
		"10.0.1.3":{"remoteAs":65001,"state":"Established","pfxRcd":1},
		"10.0.1.2":{"remoteAs":65001,"state":"Active","pfxRcd":0}}}}`
	ss, err := parseFRRSummary([]byte(frr))
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 2 || ss[0].Peer.String() != "10.0.1.2" || ss[0].State != "active" || ss[1].State != "established" ||
		ss[1].ASN != 65001 || ss[1].Prefixes == nil || *ss[1].Prefixes != 1 || ss[1].Speaker != "router" {
		t.Errorf("FRR sessions %+v", ss)
	}
	if ss, err := parseFRRSummary([]byte("{\n}\n")); err != nil || len(ss) != 0 {
		t.Errorf("FRR without peers: %+v, %v", ss, err)
	}

	gobgp := `[{"conf":{"local_asn":65000,"neighbor_address":"10.0.1.1","peer_asn":65000},
		"state":{"neighbor_address":"10.0.1.1","peer_asn":65000,"session_state":6},"afi_safis":[{"state":{"received":3}}]},
		{"state":{"neighbor_address":"10.0.1.2","peer_asn":65000,"session_state":3}}]`
	ss, err = parseGoBGPNeighbors([]byte(gobgp))
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 2 || ss[0].State != "established" || *ss[0].Prefixes != 3 || ss[1].State != "active" || ss[1].Speaker != "rr" {
		t.Errorf("gobgp sessions %+v", ss)
	}
	for _, bad := range []string{`{`, `[{"state":{"neighbor_address":"x"}}]`} {
		if _, err := parseGoBGPNeighbors([]byte(bad)); err == nil {
			t.Errorf("parseGoBGPNeighbors(%s) accepted", bad)
		}
	}
}

func TestListening(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100000A:00B3 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0
   1: 0100000A:C350 0200000A:00B3 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:C351 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3 1 0000000000000000 100 0 0 10 0
`
	path := filepath.Join(t.TempDir(), "tcp")
	if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		port int
		want bool
	}{
		{179, true},    // 00B3, listening
		{50000, false}, // C350 is a connection, not a listener
		{50001, true},  // C351
		{80, false},
	} {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := listening(f, tt.port)
		f.Close()
		if err != nil || got != tt.want {
			t.Errorf("listening on %d = %v, %v; want %v", tt.port, got, err, tt.want)
		}
	}
}
