package lab

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPlainNginxConfig(t *testing.T) {
	conf := plainNginx("be2", 8080, "/run/x/nginx-be2", true)
	for _, want := range []string{
		"master_process off;", // one process: its command line stays the recorded one
		"listen 8080 backlog=4096;",
		"listen [::]:8080 backlog=4096 ipv6only=on;",
		"add_header X-Backend be2 always;",
		"add_header X-Peer $remote_addr:$remote_port always;",
		`return 200 "be2\n";`,
		"location = /healthz {",
		"if (!-f /run/x/nginx-be2/healthy) {",
		"keepalive_requests 1000000;",
		"pid /run/x/nginx-be2/nginx.pid;",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("config lacks %q:\n%s", want, conf)
		}
	}
	if _, err := exec.LookPath("nginx"); err != nil {
		t.Skip("no nginx to check the configuration with")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(plainNginx("be2", 8080, dir, true)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("nginx", "-t", "-q", "-p", dir, "-e", "stderr", "-c", path).CombinedOutput(); err != nil {
		t.Errorf("nginx -t: %v: %s", err, out)
	}
}

func TestNewPlanEgressQueue(t *testing.T) {
	for _, tc := range []struct {
		n  int
		ok bool
	}{{0, true}, {1000, true}, {MaxEgressQueue, true}, {-1, false}, {MaxEgressQueue + 1, false}} {
		_, err := NewPlan(Spec{Prefix: "t3", Binary: "/usr/bin/true", EgressQueue: tc.n})
		if (err == nil) != tc.ok {
			t.Errorf("EgressQueue %d: error %v, want ok %v", tc.n, err, tc.ok)
		}
	}
}

func TestNewPlanRepliesVia(t *testing.T) {
	for _, tc := range []struct {
		via string
		ok  bool
	}{{"", true}, {"node1", true}, {"node2", true}, {"node3", false}, {"node0", false}, {"be1", false}, {"node", false}} {
		_, err := NewPlan(Spec{Nodes: 2, Binary: "/bin/true", RepliesVia: tc.via})
		if (err == nil) != tc.ok {
			t.Errorf("RepliesVia %q: error %v, want ok %v", tc.via, err, tc.ok)
		}
	}
}

// TestPlainBackends brings up a lab whose backends run nothing but
// nginx: it answers as the embedded server does plus the peer's address,
// its health follows SetHealthy, no decapsulation program or VIP is on
// it, its transmit checksums are complete, and the router sends its
// replies to the clients through node1.
func TestPlainBackends(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("nginx"); err != nil {
		t.Skip("nginx is not installed (make deps)")
	}
	prefix := testPrefix(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := Up(ctx, Spec{Prefix: prefix, Nodes: 1, Backends: 2, Binary: xlbBinary, PlainBackends: true, RepliesVia: "node1", EgressQueue: 500})
	if err != nil {
		t.Fatal(err)
	}
	// EgressQueue: both ends of every host's veth pair queue 500 packets.
	for _, h := range p.Hosts() {
		for _, end := range [][2]string{{p.Router, h.Peer}, {h.Namespace, h.Interface}} {
			out, err := exec.Command("tc", "-n", end[0], "qdisc", "show", "dev", end[1], "root").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "pfifo") || !strings.Contains(string(out), "limit 500p") {
				t.Errorf("%s in %s: %v: want a pfifo qdisc of 500 packets:\n%s", end[1], end[0], err, out)
			}
		}
	}
	client := p.Clients[0]
	c := httpClientIn(client.Namespace)
	for _, be := range p.Backends {
		body, h := get(t, c, "http://"+be.Addr.String()+"/")
		if body != be.Name+"\n" || h.Get(BackendHeader) != be.Name {
			t.Errorf("%s answered %q with %s %q", be.Name, body, BackendHeader, h.Get(BackendHeader))
		}
		if peer := h.Get(PeerHeader); !strings.HasPrefix(peer, client.Addr.String()+":") {
			t.Errorf("%s: %s %q, want the client's address %s", be.Name, PeerHeader, peer, client.Addr)
		}
		out, err := exec.Command("ip", "-n", be.Namespace, "-o", "addr", "show", "dev", "lo").CombinedOutput()
		if err != nil || strings.Contains(string(out), "10.99.") {
			t.Errorf("%s's loopback: %v %s: want no VIP", be.Name, err, out)
		}
		out, err = exec.Command("ip", "-n", be.Namespace, "link", "show", "dev", "eth0").CombinedOutput()
		if err != nil || strings.Contains(string(out), "xdp") {
			t.Errorf("%s's eth0: %v %s: want no XDP program", be.Name, err, out)
		}
		out, err = exec.Command("ip", "netns", "exec", be.Namespace, "ethtool", "-k", "eth0").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "tx-checksumming: off") {
			t.Errorf("%s's eth0: %v: want transmit checksum offload off:\n%s", be.Name, err, out)
		}
	}

	be := p.Backends[0]
	health := func() int {
		resp, err := c.Get("http://" + be.Addr.String() + HealthPath)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := health(); got != http.StatusOK {
		t.Errorf("%s%s: %d, want 200", be.Name, HealthPath, got)
	}
	if err := SetHealthy(p, be, false); err != nil {
		t.Fatal(err)
	}
	if got := health(); got != http.StatusServiceUnavailable {
		t.Errorf("%s%s after SetHealthy(false): %d, want 503", be.Name, HealthPath, got)
	}
	if body, _ := get(t, c, "http://"+be.Addr.String()+"/"); body != be.Name+"\n" {
		t.Errorf("an unhealthy %s answered %q, want its name still", be.Name, body)
	}
	if err := SetHealthy(p, be, true); err != nil {
		t.Fatal(err)
	}
	if got := health(); got != http.StatusOK {
		t.Errorf("%s%s after SetHealthy(true): %d, want 200", be.Name, HealthPath, got)
	}

	// The router's rules: one per backend, via node1; gone after
	// UnrouteReplies.
	rules := func() string {
		out, err := exec.Command("ip", "-n", p.Router, "rule", "show").CombinedOutput()
		if err != nil {
			t.Fatalf("ip rule: %v: %s", err, out)
		}
		return string(out)
	}
	for _, b := range p.Backends {
		if want := "from " + b.Addr.String() + " to " + p.ClientSegment.Subnet.String() + " iif " + p.BackendSegment.Bridge; !strings.Contains(rules(), want) {
			t.Errorf("router rules lack %q:\n%s", want, rules())
		}
		out, err := exec.Command("ip", "-n", p.Router, "route", "get", client.Addr.String(), "from", b.Addr.String(), "iif", p.BackendSegment.Bridge).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "via "+p.Nodes[0].Addr.String()) {
			t.Errorf("route from %s to the client: %v %s: want via node1 %s", b.Name, err, out, p.Nodes[0].Addr)
		}
	}
	if err := UnrouteReplies(ctx, p, be); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(rules(), "from "+be.Addr.String()+" ") {
		t.Errorf("rule of %s left after UnrouteReplies:\n%s", be.Name, rules())
	}
	if err := UnrouteReplies(ctx, p, be); err != nil {
		t.Errorf("UnrouteReplies twice: %v", err)
	}
}
