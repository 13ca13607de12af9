package main

import (
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/testbed/lab"
)

var testBackends6 = []netip.Addr{netip.MustParseAddr("fd00:10:3::2"), netip.MustParseAddr("fd00:10:3::3")}

// TestNftRulesIPv6: an IPv6 VIP gets the IPv4 rules in an ip6 table,
// matching ip6 daddr, with the same atomic replacement.
func TestNftRulesIPv6(t *testing.T) {
	rules := nftRules(netip.MustParseAddr("fd00:99::3"), testBackends6)
	for _, want := range []string{
		"add table ip6 xhb_dnat\ndelete table ip6 xhb_dnat\ntable ip6 xhb_dnat {\n",
		"ip6 daddr fd00:99::3 tcp dport 80 dnat to numgen random mod 2 map { 0 : fd00:10:3::2, 1 : fd00:10:3::3 }",
		"type nat hook prerouting priority dstnat;", "type nat hook postrouting priority srcnat;",
		"ct status dnat masquerade",
	} {
		if !strings.Contains(rules, want) {
			t.Errorf("no %q in:\n%s", want, rules)
		}
	}
	if strings.Contains(rules, "table ip ") || strings.Contains(rules, "\tip daddr") {
		t.Errorf("IPv4 rules for an IPv6 VIP:\n%s", rules)
	}
}

// TestIptablesRulesIPv6: the same chains for ip6tables-legacy-restore,
// a /128 VIP and bracketed backends.
func TestIptablesRulesIPv6(t *testing.T) {
	rules := iptablesRules(netip.MustParseAddr("fd00:99::4"), testBackends6)
	for _, want := range []string{
		"(ip6tables-legacy-restore)",
		"-A PREROUTING -d fd00:99::4/128 -p tcp -m tcp --dport 80 -j XHB-SVC\n",
		"-A XHB-SVC -m statistic --mode random --probability 0.50000000000 -j XHB-SEP-1\n",
		"-A XHB-SEP-2 -p tcp -m tcp -j DNAT --to-destination [fd00:10:3::3]:80\n",
		"-A POSTROUTING -m conntrack --ctstate DNAT -j MASQUERADE\nCOMMIT\n",
	} {
		if !strings.Contains(rules, want) {
			t.Errorf("no %q in:\n%s", want, rules)
		}
	}
	if v4 := iptablesRules(netip.MustParseAddr("10.99.0.4"), testBackends[:1]); !strings.Contains(v4, "(iptables-legacy-restore)") || !strings.Contains(v4, "-d 10.99.0.4/32 ") {
		t.Errorf("the IPv4 rules changed:\n%s", v4)
	}
}

// TestProxiesIPv6: the proxies listen on the IPv6 VIP and connect to the
// backends' IPv6 addresses, bracketed; the backends' nginx listens on
// both families.
func TestProxiesIPv6(t *testing.T) {
	vip := netip.MustParseAddr("fd00:99::5")
	ng := streamNginx(vip, testBackends6, "/tmp/x")
	for _, want := range []string{"listen [fd00:99::5]:80 backlog=4096 reuseport;", "server [fd00:10:3::2]:80;", "server [fd00:10:3::3]:80;"} {
		if !strings.Contains(ng, want) {
			t.Errorf("stream nginx.conf lacks %q:\n%s", want, ng)
		}
	}
	hp := haproxyConfig(netip.MustParseAddr("fd00:99::6"), testBackends6, "/tmp/x")
	for _, want := range []string{"bind [fd00:99::6]:80\n", "server be1 [fd00:10:3::2]:80\n", "server be2 [fd00:10:3::3]:80\n"} {
		if !strings.Contains(hp, want) {
			t.Errorf("haproxy.cfg lacks %q:\n%s", want, hp)
		}
	}
	be := backendNginx("be1", netip.MustParseAddr("10.0.3.2"), "/tmp/x")
	for _, want := range []string{"listen 80 backlog=4096;", "listen [::]:80 backlog=4096;", "listen [::]:8080 backlog=4096;"} {
		if !strings.Contains(be, want) {
			t.Errorf("backend nginx.conf lacks %q:\n%s", want, be)
		}
	}
	if _, err := exec.LookPath("haproxy"); err != nil {
		return
	}
	path := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(path, []byte(hp), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("haproxy", "-c", "-q", "-f", path).CombinedOutput(); err != nil {
		t.Errorf("haproxy -c: %v: %s\n%s", err, out, hp)
	}
}

// TestPathsIPv6: each IPv4 path of ipv6Twins is followed by its twin,
// whose VIP is the IPv6 VIP with the same last byte; the xlb twins use
// the VIPs the lab's backends accept and share the agent's node, the
// others have nodes no other path uses; the NAT paths have no twin yet.
func TestPathsIPv6(t *testing.T) {
	ps := paths()
	nodes := map[int][]string{}
	for _, p := range ps {
		if p.node >= 0 {
			nodes[p.node] = append(nodes[p.node], p.Key)
		}
	}
	twins := 0
	for i, p := range ps {
		if !isV6(p.Key) {
			continue
		}
		twins++
		if i == 0 || ps[i-1].Key != baseKey(p.Key) {
			t.Errorf("%s does not follow its IPv4 twin %s", p.Key, baseKey(p.Key))
			continue
		}
		v4 := ps[i-1]
		if baseKey(p.Key) == keyDirect {
			if p.VIP.IsValid() || p.node != -1 {
				t.Errorf("%s: VIP %v, node %d", p.Key, p.VIP, p.node)
			}
			continue
		}
		if !p.VIP.Is6() || !vip6Prefix.Contains(p.VIP) || p.VIP.As16()[15] != v4.VIP.As4()[3] {
			t.Errorf("%s: VIP %s, want %s's last byte in %s", p.Key, p.VIP, v4.VIP, vip6Prefix)
		}
		if xlbKey(p.Key) {
			if p.node != v4.node {
				t.Errorf("%s: node %d, want the agent's %d", p.Key, p.node, v4.node)
			}
		} else if len(nodes[p.node]) != 1 {
			t.Errorf("%s: node %d shared with %v", p.Key, p.node, nodes[p.node])
		}
	}
	if twins != len(ipv6Twins) {
		t.Errorf("%d IPv6 paths, want %d", twins, len(ipv6Twins))
	}
	for _, k := range []string{keyIPIP, keyGUE} {
		if got, want := pathOf(ps, k+v6Suffix).VIP, pathOf(ps, k).VIP.As4()[3]; !slices.Contains(lab.DefaultVIPs6, got.String()) || got.As16()[15] != want {
			t.Errorf("%s: VIP %s, want one the backends accept (%v)", k+v6Suffix, got, lab.DefaultVIPs6)
		}
	}
	// The NAT twins follow their IPv4 paths on the agent's node, on
	// fd00:99::7 and ::8.
	for _, c := range []struct{ key, vip string }{{keyNAT, "fd00:99::7"}, {keyDNAT, "fd00:99::8"}} {
		i := slices.IndexFunc(ps, func(p Path) bool { return p.Key == c.key+v6Suffix })
		if i < 1 || ps[i-1].Key != c.key || ps[i].VIP.String() != c.vip || ps[i].node != ps[i-1].node {
			t.Errorf("%s: %+v", c.key+v6Suffix, ps[max(i, 0)])
		}
	}
	if !hasIPv6(ps) || hasIPv6(ps[:1]) {
		t.Error("hasIPv6")
	}
}

func pathOf(ps []Path, key string) Path {
	i := slices.IndexFunc(ps, func(p Path) bool { return p.Key == key })
	if i < 0 {
		return Path{}
	}
	return ps[i]
}

func TestParsePaths(t *testing.T) {
	ps := paths()
	if got, err := parsePaths("", ps); err != nil || got != nil {
		t.Errorf("\"\": %v %v, want every path (nil)", got, err)
	}
	got, err := parsePaths("nft, nft-v6,nft", ps)
	if err != nil || !slices.Equal(got, []string{keyNft, keyNft + v6Suffix}) {
		t.Errorf("nft,nft-v6,nft: %v %v", got, err)
	}
	v6, err := parsePaths("ipv6", ps)
	if err != nil || len(v6) != len(ipv6Twins) || !slices.Contains(v6, keyIptables+v6Suffix) || slices.Contains(v6, keyIptables) {
		t.Errorf("ipv6: %v %v", v6, err)
	}
	v4, err := parsePaths("ipv4", ps)
	if err != nil || len(v4)+len(v6) != len(ps) || slices.ContainsFunc(v4, isV6) {
		t.Errorf("ipv4: %v %v", v4, err)
	}
	if _, err := parsePaths("nft,xlb-nope-v6", ps); err == nil || !strings.Contains(err.Error(), `"xlb-nope-v6" is no path`) {
		t.Errorf("an unknown path: %v", err)
	}
}

// TestAgentServices6: the agent gets a service per IPv6 xlb path, of its
// twin's forwarding, to the backends' IPv6 addresses.
func TestAgentServices6(t *testing.T) {
	p, err := lab.NewPlan(lab.Spec{Prefix: "xhbunit", Clients: 1, Nodes: 9, Backends: labBackends, Binary: "/bin/true", IPv6: true})
	if err != nil {
		t.Fatal(err)
	}
	l := &benchLab{p: p, paths: paths()}
	svcs := l.agentServices6(2)
	if len(svcs) != 4 {
		t.Fatalf("%d services: %+v", len(svcs), svcs)
	}
	for i, want := range []struct {
		name string
		vip  string
		fwd  config.Forwarding
		port uint16
	}{{"web-ipip-v6", "fd00:99::1", config.DSRIPIP, 0}, {"web-gue-v6", "fd00:99::2", config.DSRGUE, 0}, {"web-nat-v6", "fd00:99::7", config.NAT, 0}, {"web-dnat-v6", "fd00:99::8", config.DNAT, dnatPort}} {
		s := svcs[i]
		if s.Name != want.name || s.VIP.String() != want.vip || s.Forwarding != want.fwd || s.Port != 80 || s.BackendPort != want.port ||
			!slices.Equal(s.Backends, []netip.Addr{p.Backends[0].Addr6, p.Backends[1].Addr6}) {
			t.Errorf("service %d: %+v, want %s on %s, %s, to be1 and be2's IPv6 addresses", i, s, want.name, want.vip, want.fwd)
		}
	}
	if f, port := forwardingOf(keyDNAT + v6Suffix); f != config.DNAT || port != dnatPort {
		t.Errorf("forwardingOf(xlb-dnat-v6): %s %d", f, port)
	}
	if d := pathOf(l.paths, keyDirect+v6Suffix); !slices.Equal(l.targets(d, 2), []netip.AddrPort{netip.AddrPortFrom(p.Backends[0].Addr6, 80), netip.AddrPortFrom(p.Backends[1].Addr6, 80)}) {
		t.Errorf("direct IPv6 targets: %v", l.targets(d, 2))
	}
	if n := pathOf(l.paths, keyNft+v6Suffix); !slices.Equal(l.targets(n, 2), []netip.AddrPort{netip.AddrPortFrom(n.VIP, 80)}) {
		t.Errorf("nftables IPv6 targets: %v", l.targets(n, 2))
	}
}

// TestReportIPv6: each IPv6 row is below its IPv4 twin's and gives the
// ratio to it; the section has the ratio table and the IPv6 paths'
// configurations. A run without IPv6 paths (the results before them)
// renders without any of it.
func TestReportIPv6(t *testing.T) {
	r := testReport()
	r.Configs = append(r.Configs, ConfigSet{Backends: 2, Nft: "nft 2\n", IPv6: ConfigSet6{Nft: "nft6 2\n", Iptables: "ip6t 2\n", HAProxy: "hap6 2\n"}})
	// ip6tables' second keep-alive round with 1 backend: 0.45x its twin's
	// in that round; its best round still 0.95x the twin's best, the
	// median of the two pairs 0.70x.
	for i, x := range r.Runs {
		if x.Path == keyIptables+v6Suffix && x.Mode == modeKeepAlive && x.Backends == 1 && x.Round == 2 {
			r.Runs[i].RPS = 0.45 * 41000 * 0.9
		}
	}
	table := r.rpsTable(modeKeepAlive)
	for _, want := range []string{
		"| iptables DNAT | 41000 | 45100 |\n| ip6tables DNAT | 38950 (0.95x) | 42845 (0.95x) |\n",
		"| direct | 44000 | 48400 |\n| direct IPv6 | 41800 (0.95x) | 45980 (0.95x) |\n",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("requests table lacks %q:\n%s", want, table)
		}
	}
	md := markdown(r, "bench/results/http-x.json", images{})
	for _, want := range []string{
		"**IPv6.** The lab is dual stack",
		"### IPv6 beside IPv4\n",
		"| IPv6 / IPv4: best rounds / median of paired rounds | mode | 1 backend | 4 backends | lab CPU per request, IPv6 / IPv4 (4 backends) |",
		"| ip6tables DNAT / iptables DNAT | keep-alive | 0.95x / 0.70x | 0.95x / 0.95x | ",
		"| xlb dsr-gue IPv6 / xlb dsr-gue | new-connection | 0.95x / 0.95x | 0.95x / 0.95x | ",
		"ip6tables, `ip6tables-legacy-restore`:\n\n```\nip6t 2\n```",
		"HAProxy over IPv6, `haproxy -db -f`:\n\n```\nhap6 2\n```",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("section lacks %q", want)
		}
	}
	if !strings.Contains(md, "No IPv6 twin: NAT floor.") || strings.Contains(md, "No IPv6 twin: NAT floor,") {
		t.Error("every path but the NAT floor has an IPv6 twin, but the section does not say so")
	}
	if strings.Contains(md, "NaN") || strings.Contains(md, "%!") {
		t.Errorf("section has a formatting error:\n%s", md)
	}

	old := testReport()
	old.Paths = slices.DeleteFunc(old.Paths, func(p Path) bool { return isV6(p.Key) })
	old.Runs = slices.DeleteFunc(old.Runs, func(x Run) bool { return isV6(x.Path) })
	md = markdown(old, "bench/results/http-x.json", images{})
	for _, absent := range []string{"IPv6", "(0.95x)"} {
		if strings.Contains(md, absent) {
			t.Errorf("a run without IPv6 paths: the section has %q", absent)
		}
	}
}
