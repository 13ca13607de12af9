package main

import (
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var testBackends = []netip.Addr{
	netip.MustParseAddr("10.0.3.2"), netip.MustParseAddr("10.0.3.3"),
	netip.MustParseAddr("10.0.3.4"), netip.MustParseAddr("10.0.3.5"),
}

func TestBackendNginx(t *testing.T) {
	conf := backendNginx("be3", netip.MustParseAddr("10.0.3.4"), "/tmp/x")
	for _, want := range []string{
		"worker_processes 1;", "daemon off;", "keepalive_requests 100;",
		`return 200 "be3 10.0.3.4\n";`, "add_header X-Backend be3;",
		"listen 80 backlog=4096;", "listen 127.0.0.1:8081;", "stub_status;",
		"pid /tmp/x/nginx.pid;", "client_body_temp_path /tmp/x/client_body;",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("backend nginx.conf lacks %q:\n%s", want, conf)
		}
	}
	if body("be3", netip.MustParseAddr("10.0.3.4")) != "be3 10.0.3.4\n" {
		t.Error("the body must name the backend first: the clients check it")
	}
}

func TestStreamNginx(t *testing.T) {
	conf := streamNginx(netip.MustParseAddr("10.99.0.5"), testBackends, "/tmp/x")
	for _, want := range []string{
		"load_module /usr/lib/nginx/modules/ngx_stream_module.so;", "worker_processes 2;",
		"listen 10.99.0.5:80 backlog=4096 reuseport;", "proxy_pass backends;",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("stream nginx.conf lacks %q:\n%s", want, conf)
		}
	}
	if got := strings.Count(conf, "        server 10.0.3."); got != len(testBackends) {
		t.Errorf("%d upstream servers, want %d:\n%s", got, len(testBackends), conf)
	}
}

func TestHAProxyConfig(t *testing.T) {
	conf := haproxyConfig(netip.MustParseAddr("10.99.0.6"), testBackends, "/tmp/x")
	for _, want := range []string{"nbthread 2", "mode tcp", "bind 10.99.0.6:80", "balance roundrobin", "server be4 10.0.3.5:80"} {
		if !strings.Contains(conf, want) {
			t.Errorf("haproxy.cfg lacks %q:\n%s", want, conf)
		}
	}
	// haproxy -c parses without binding anything; nginx -t would bind
	// the listening addresses (reuseport), so nginx is not run here.
	if _, err := exec.LookPath("haproxy"); err != nil {
		return
	}
	path := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("haproxy", "-c", "-q", "-f", path).CombinedOutput(); err != nil {
		t.Errorf("haproxy -c: %v: %s\n%s", err, out, conf)
	}
}

func TestNftRules(t *testing.T) {
	rules := nftRules(netip.MustParseAddr("10.99.0.3"), testBackends)
	want := "ip daddr 10.99.0.3 tcp dport 80 dnat to numgen random mod 4 map { 0 : 10.0.3.2, 1 : 10.0.3.3, 2 : 10.0.3.4, 3 : 10.0.3.5 }"
	if !strings.Contains(rules, want) {
		t.Errorf("no %q in:\n%s", want, rules)
	}
	// Atomic replacement: the table is created, deleted and defined in
	// one file, in that order.
	a, d, def := strings.Index(rules, "add table ip xhb_dnat"), strings.Index(rules, "delete table ip xhb_dnat"), strings.Index(rules, "table ip xhb_dnat {")
	if a < 0 || d < a || def < d {
		t.Errorf("want add, delete, then the table:\n%s", rules)
	}
	if !strings.Contains(rules, "ct status dnat masquerade") {
		t.Errorf("no masquerade of translated connections:\n%s", rules)
	}
	if strings.Count(rules, "{") != strings.Count(rules, "}") {
		t.Errorf("unbalanced braces:\n%s", rules)
	}
}

// TestIptablesRules: the chains give every backend the same share, as
// kube-proxy's do: backend i is taken with probability 1/(n-i) among the
// connections the earlier ones left.
func TestIptablesRules(t *testing.T) {
	for n := 1; n <= len(testBackends); n++ {
		rules := iptablesRules(netip.MustParseAddr("10.99.0.4"), testBackends[:n])
		re := regexp.MustCompile(`(?m)^-A XHB-SVC (?:-m statistic --mode random --probability ([0-9.]+) )?-j XHB-SEP-(\d+)$`)
		m := re.FindAllStringSubmatch(rules, -1)
		if len(m) != n {
			t.Fatalf("%d backends: %d service rules:\n%s", n, len(m), rules)
		}
		left := 1.0
		for i, r := range m {
			p := 1.0
			if r[1] != "" {
				p, _ = strconv.ParseFloat(r[1], 64)
			} else if i != n-1 {
				t.Errorf("%d backends: rule %d is unconditional but not the last", n, i)
			}
			if share := left * p; math.Abs(share-1/float64(n)) > 1e-9 {
				t.Errorf("%d backends: backend %d gets %.6f, want %.6f", n, i+1, share, 1/float64(n))
			}
			left *= 1 - p
		}
		for i, a := range testBackends[:n] {
			want := "-A XHB-SEP-" + strconv.Itoa(i+1) + " -p tcp -m tcp -j DNAT --to-destination " + a.String() + ":80"
			if !strings.Contains(rules, want) {
				t.Errorf("no %q in:\n%s", want, rules)
			}
		}
		for _, want := range []string{"*nat\n", "-A PREROUTING -d 10.99.0.4/32 -p tcp -m tcp --dport 80 -j XHB-SVC", "-j MASQUERADE", "COMMIT\n"} {
			if !strings.Contains(rules, want) {
				t.Errorf("no %q in:\n%s", want, rules)
			}
		}
	}
}

func TestDirectScript(t *testing.T) {
	s := directScript(testBackends[:2])
	for _, want := range []string{`local backends = {"10.0.3.2", "10.0.3.3"}`, "function setup(thread)", `thread.addr = wrk.lookup(a, "80")[1]`} {
		if !strings.Contains(s, want) {
			t.Errorf("no %q in:\n%s", want, s)
		}
	}
}

// TestPaths: every path but direct has its own VIP and a node; the xlb
// paths share the first node and the VIPs the lab's backends accept.
func TestPaths(t *testing.T) {
	seen := map[netip.Addr]bool{}
	for _, p := range paths() {
		if baseKey(p.Key) == keyDirect {
			if p.VIP.IsValid() || p.node != -1 {
				t.Errorf("direct: VIP %v, node %d", p.VIP, p.node)
			}
			continue
		}
		if seen[p.VIP] {
			t.Errorf("%s: VIP %s used twice", p.Key, p.VIP)
		}
		seen[p.VIP] = true
		xlb := xlbKey(p.Key)
		if xlb != (p.node == 0) {
			t.Errorf("%s: node %d", p.Key, p.node)
		}
	}
	if a, b := paths()[0].VIP.String(), paths()[2].VIP.String(); a != "10.99.0.1" || b != "10.99.0.2" {
		t.Errorf("the xlb paths use %s and %s, want the lab's VIPs 10.99.0.1 and 10.99.0.2", a, b)
	}
}
