package lab

import (
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// withIPv6 is plan p with the IPv6 fields the router set-up reads.
func withIPv6(t *testing.T, s Spec) Plan {
	t.Helper()
	s.Prefix, s.Nodes, s.Binary = "t6", 3, "/bin/true"
	p, err := NewPlan(s)
	if err != nil {
		t.Fatal(err)
	}
	p.NodeSegment.Subnet6 = netip.MustParsePrefix("fd00:10:1::/64")
	p.VIPPrefix6 = netip.MustParsePrefix("fd00:99::/64")
	return p
}

// The routers' configurations for a lab with IPv6: IPv6 unicast on
// every session, the nodes' IPv6 sessions accepted from the node
// segment's IPv6 subnet, IPv6 multipath routes into the kernel.
func TestRouterConfigsIPv6(t *testing.T) {
	p := withIPv6(t, Spec{Router: RouterBIRD, BFD: true})
	if got := p.NodeSegment.Gateway6(); got != netip.MustParseAddr("fd00:10:1::1") {
		t.Errorf("Gateway6() = %s, want fd00:10:1::1", got)
	}
	conf := birdConfig(p)
	got := lines(conf)
	for _, w := range []string{
		"protocol bgp xlb {", "local 10.0.1.1 as 65000;", "neighbor range 10.0.1.0/24 as 65001;",
		"protocol bgp xlbv6 {", "local fd00:10:1::1 as 65000;", "neighbor range fd00:10:1::/64 as 65001;", `dynamic name "xlbv6";`,
		"ipv6 {", "import where net ~ [ fd00:99::/64+ ];", "import where net ~ [ 10.99.0.0/24+ ];",
	} {
		if !slices.Contains(got, w) {
			t.Errorf("bird.conf lacks %q:\n%s", w, conf)
		}
	}
	if n := strings.Count(conf, "protocol kernel {"); n != 2 {
		t.Errorf("bird.conf has %d kernel protocols, want one per family:\n%s", n, conf)
	}
	if n := strings.Count(conf, "merge paths on limit 64;"); n != 2 {
		t.Errorf("bird.conf merges paths in %d kernel protocols, want 2:\n%s", n, conf)
	}
	birdParses(t, conf)

	p = withIPv6(t, Spec{Router: RouterFRR})
	conf = frrConfig(p)
	got = lines(conf)
	for _, w := range []string{"bgp listen range 10.0.1.0/24 peer-group XLB", "bgp listen range fd00:10:1::/64 peer-group XLB",
		"address-family ipv4 unicast", "address-family ipv6 unicast"} {
		if !slices.Contains(got, w) {
			t.Errorf("frr.conf lacks %q:\n%s", w, conf)
		}
	}
	if n := slices.Index(got, "address-family ipv6 unicast"); n < 0 || !slices.Equal(got[n+1:n+5],
		[]string{"neighbor XLB activate", "maximum-paths 64", "maximum-paths ibgp 64", "exit-address-family"}) {
		t.Errorf("frr.conf's IPv6 unicast section is not activate + maximum-paths:\n%s", conf)
	}
	frrParses(t, conf)

	p = withIPv6(t, Spec{Router: RouterEmbedded})
	args := strings.Join(embeddedArgs(p), " ")
	for _, w := range []string{"--listen 10.0.1.1", "--listen6 fd00:10:1::1", "--neighbors 10.0.1.0/24,fd00:10:1::/64"} {
		if !strings.Contains(args, w) {
			t.Errorf("xlb lab router %s: lacks %q", args, w)
		}
	}
}

// Without the IPv6 fields, nothing of IPv6 reaches the configurations.
func TestRouterConfigsIPv4Only(t *testing.T) {
	for _, r := range []string{RouterBIRD, RouterFRR, RouterEmbedded} {
		p, err := NewPlan(Spec{Router: r, Prefix: "t6", Nodes: 2, Binary: "/bin/true"})
		if err != nil {
			t.Fatal(err)
		}
		var conf string
		switch r {
		case RouterBIRD:
			conf = birdConfig(p)
		case RouterFRR:
			conf = frrConfig(p)
		default:
			conf = strings.Join(embeddedArgs(p), " ")
		}
		if strings.Contains(conf, "ipv6") || strings.Contains(conf, "listen6") || strings.Contains(conf, "xlbv6") {
			t.Errorf("%s configuration of an IPv4-only lab mentions IPv6:\n%s", r, conf)
		}
	}
}

// frrParses checks conf with vtysh's own parser (vtysh --dryrun), when
// FRR is installed.
func frrParses(t *testing.T, conf string) {
	t.Helper()
	if _, err := exec.LookPath("vtysh"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("vtysh: %v (CI=true: not skipping)", err)
		}
		t.Logf("FRR not installed: configuration not checked by its parser")
		return
	}
	dir := t.TempDir()
	for _, c := range []struct {
		text string
		ok   bool
	}{
		{conf, true},
		{strings.Replace(conf, "maximum-paths 64", "maximum-paths sixty-four", 1), false},
	} {
		path := filepath.Join(dir, "frr.conf")
		if err := os.WriteFile(path, []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("vtysh", "--dryrun", "-f", path).CombinedOutput()
		if (err == nil) != c.ok {
			t.Errorf("vtysh --dryrun: %v: %s (want it to accept the file: %v)\n%s", err, out, c.ok, c.text)
		}
	}
}
