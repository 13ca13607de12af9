package lab

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Plain backends (Spec.PlainBackends) run nothing but nginx: no `xlb
// backend`, no VIP on their loopback, no decapsulation program, as the
// appliances and foreign hosts that a NAT service (forwarding: nat or
// dnat) reaches. nginx answers as the lab's embedded server does, so the
// lab's clients and load (testbed/labrun) work unchanged.

// PeerHeader carries, in a plain backend's answers, the address and port
// the backend saw the connection come from: the node's with forwarding
// nat, the client's with dnat.
const PeerHeader = "X-Peer"

// HealthPath is where a plain backend answers health checks: 200 while
// SetHealthy says so (the default), 503 otherwise. Only the check fails:
// its other requests and open connections are served as before.
const HealthPath = "/healthz"

// plainKeepalive is a plain backend's keepalive_timeout and
// keepalive_requests: far above any test's, so that nginx never closes a
// persistent connection that a test counts as broken when it ends.
const (
	plainKeepaliveTimeout  = time.Hour
	plainKeepaliveRequests = 1_000_000
)

// PlainServerName is the StartProcess name of plain backend (or pod)
// h's nginx.
func PlainServerName(h Host) string { return "nginx-" + h.Name }

// plainDir is the directory of h's nginx: configuration, pid file,
// temporary files, and the health file.
func plainDir(prefix string, h Host) string {
	return filepath.Join(StateDir(prefix), PlainServerName(h))
}

// healthFile exists while h answers its health checks.
func healthFile(prefix string, h Host) string { return filepath.Join(plainDir(prefix, h), "healthy") }

// plainNginx is the nginx.conf of plain backend name listening on port:
// a single process (master_process off, so that its command line stays
// what StartProcess recorded and the lab can stop it), every request
// answered with 200, header BackendHeader: name, PeerHeader with the
// connection's source, and body "name\n"; HealthPath answered 200 while
// the health file exists. dir holds its pid and temporary files. ipv6:
// it listens on IPv6 too (a dual-stack lab).
func plainNginx(name string, port int, dir string, ipv6 bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by xlb lab for plain backend %s (nothing but nginx).\n", name)
	b.WriteString("daemon off;\nmaster_process off;\nworker_processes 1;\n")
	fmt.Fprintf(&b, "pid %s/nginx.pid;\nerror_log stderr warn;\nworker_rlimit_nofile 16384;\n", dir)
	b.WriteString("events {\n    worker_connections 8192;\n}\n")
	b.WriteString("http {\n    access_log off;\n    default_type text/plain;\n")
	fmt.Fprintf(&b, "    keepalive_timeout %ds;\n    keepalive_requests %d;\n", int(plainKeepaliveTimeout.Seconds()), plainKeepaliveRequests)
	for _, t := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		fmt.Fprintf(&b, "    %s_temp_path %s/%s;\n", t, dir, t)
	}
	fmt.Fprintf(&b, "    server {\n        listen %d backlog=4096;\n", port)
	if ipv6 {
		fmt.Fprintf(&b, "        listen [::]:%d backlog=4096 ipv6only=on;\n", port)
	}
	fmt.Fprintf(&b, "        location / {\n            add_header %s %s always;\n            add_header %s $remote_addr:$remote_port always;\n            return 200 %q;\n        }\n",
		BackendHeader, name, PeerHeader, name+"\n")
	fmt.Fprintf(&b, "        location = %s {\n            if (!-f %s/healthy) {\n                return 503 \"unhealthy\\n\";\n            }\n            return 200 \"ok\\n\";\n        }\n    }\n}\n",
		HealthPath, dir)
	return b.String()
}

// startPlainServers starts nginx on every plain backend, or in every pod
// of a Kubernetes lab, healthy, and waits until each listens.
func startPlainServers(ctx context.Context, p Plan) error {
	if _, err := exec.LookPath("nginx"); err != nil {
		return fmt.Errorf("plain backends run nginx: %w (install nginx-light: `make deps`)", err)
	}
	prefix := p.Spec.Prefix
	servers, port := p.serverHosts()
	for _, h := range servers {
		dir := plainDir(prefix, h)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		conf := filepath.Join(dir, "nginx.conf")
		if err := os.WriteFile(conf, []byte(plainNginx(h.Name, port, dir, p.Spec.IPv6)), 0o644); err != nil {
			return err
		}
		if err := SetHealthy(p, h, true); err != nil {
			return err
		}
		if _, err := StartProcess(prefix, h.Namespace, PlainServerName(h), "nginx", "-p", dir, "-e", "stderr", "-c", conf); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(readyTimeout)
	for _, h := range servers {
		name := PlainServerName(h)
		running := func() bool {
			rec, err := readRecord(prefix, name)
			return err == nil && ours(rec)
		}
		if err := waitListening(ctx, h.Namespace, port, deadline, running); err != nil {
			return fmt.Errorf("%s: nginx: %w; its log %s ends with: %s", h.Name, err, LogFile(prefix, name), logTail(LogFile(prefix, name)))
		}
	}
	return nil
}

// serverHosts are the hosts that run the lab's servers, and their HTTP
// port: the backends, or the pods of a Kubernetes lab.
func (p Plan) serverHosts() ([]Host, int) {
	if len(p.Pods) == 0 {
		return p.Backends, HTTPPort
	}
	hs := make([]Host, len(p.Pods))
	for i, pod := range p.Pods {
		hs[i] = pod.Host
	}
	return hs, PodHTTPPort
}

// SetHealthy makes plain backend (or pod) h answer its health checks on
// HealthPath with 200 (healthy) or 503; nothing else about it changes.
func SetHealthy(p Plan, h Host, healthy bool) error {
	if !p.Spec.PlainBackends {
		return fmt.Errorf("lab %q: %s is not a plain backend (use SetHTTPMode)", p.Spec.Prefix, h.Name)
	}
	path := healthFile(p.Spec.Prefix, h)
	if healthy {
		return os.WriteFile(path, []byte("ok\n"), 0o644)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// backendChecksums turns off transmit checksum offload on the backends
// and pods of a lab with PlainBackends or FullBackendChecksums, as
// fullChecksums does on the clients: the replies of a NAT service reach
// an xlb node, whose XDP program rewrites them for the client and sends
// them on, and a veth's half-done (CHECKSUM_PARTIAL) checksum would
// arrive at the client unfinished.
func backendChecksums(ctx context.Context, p Plan) error {
	if !p.Spec.PlainBackends && !p.Spec.FullBackendChecksums {
		return nil
	}
	hs, _ := p.serverHosts()
	for _, h := range hs {
		cmd := exec.CommandContext(ctx, "ip", "netns", "exec", h.Namespace, "ethtool", "-K", h.Interface, "tx", "off")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: ethtool -K %s tx off: %v: %s (install ethtool)", h.Name, h.Interface, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// replyRulePriority is the priority of the router's reply rules (before
// the main table's 32766).
const replyRulePriority = 100

// replyTable is the router's routing table for what backend (or pod)
// address a sends to the clients: one per address, numbered by it.
func replyTable(a netip.Addr) string {
	b := a.As4()
	return strconv.FormatUint(uint64(binary.BigEndian.Uint32(b[:])), 10)
}

// RouteReplies makes the router send what backend (or pod) h sends to
// the clients' segment through node instead of straight to the client,
// as the dissertation's IPVS-NAT set-up did with the director as the
// backends' gateway: a forwarding: dnat service keeps the client's
// address, so its replies must pass the node that holds the session. It
// is a policy rule in the router namespace (from h's address, arriving
// from the backend segment, to the clients' subnet) and a table of its
// own with one route via node. The node's program rewrites the reply's
// source to the VIP and sends it back to the router, which routes it to
// the client as usual (the rule matches only what comes from the
// backends). In a dual-stack lab the same holds for h's IPv6 replies.
func RouteReplies(ctx context.Context, p Plan, h Host, node Host) error {
	table := replyTable(h.Addr)
	cmds := [][]string{
		{"-n", p.Router, "route", "replace", p.ClientSegment.Subnet.String(), "via", node.Addr.String(), "table", table},
		{"-n", p.Router, "rule", "add", "priority", strconv.Itoa(replyRulePriority), "from", netip.PrefixFrom(h.Addr, 32).String(),
			"to", p.ClientSegment.Subnet.String(), "iif", p.BackendSegment.Bridge, "lookup", table},
	}
	if h.Addr6.IsValid() && node.Addr6.IsValid() && p.ClientSegment.Subnet6.IsValid() {
		cmds = append(cmds,
			[]string{"-n", p.Router, "-6", "route", "replace", p.ClientSegment.Subnet6.String(), "via", node.Addr6.String(), "table", table},
			[]string{"-n", p.Router, "-6", "rule", "add", "priority", strconv.Itoa(replyRulePriority), "from", netip.PrefixFrom(h.Addr6, 128).String(),
				"to", p.ClientSegment.Subnet6.String(), "iif", p.BackendSegment.Bridge, "lookup", table})
	}
	for _, args := range cmds {
		if _, err := ip(ctx, args...); err != nil {
			return fmt.Errorf("%s's replies via %s: %w", h.Name, node.Name, err)
		}
	}
	return nil
}

// UnrouteReplies undoes RouteReplies: h's replies go straight to the
// client again. Doing it twice is not an error.
func UnrouteReplies(ctx context.Context, p Plan, h Host) error {
	table := replyTable(h.Addr)
	// Each del removes one rule; RouteReplies twice makes two.
	for range 8 {
		if _, err := ip(ctx, "-n", p.Router, "rule", "del", "priority", strconv.Itoa(replyRulePriority), "from", netip.PrefixFrom(h.Addr, 32).String(), "lookup", table); err != nil {
			break // no such rule (left)
		}
	}
	if _, err := ip(ctx, "-n", p.Router, "route", "flush", "table", table); err != nil {
		return fmt.Errorf("%s's replies: %w", h.Name, err)
	}
	if !h.Addr6.IsValid() {
		return nil
	}
	for range 8 {
		if _, err := ip(ctx, "-n", p.Router, "-6", "rule", "del", "priority", strconv.Itoa(replyRulePriority), "from", netip.PrefixFrom(h.Addr6, 128).String(), "lookup", table); err != nil {
			break
		}
	}
	if _, err := ip(ctx, "-n", p.Router, "-6", "route", "flush", "table", table); err != nil {
		return fmt.Errorf("%s's IPv6 replies: %w", h.Name, err)
	}
	return nil
}

// routeRepliesAll routes every backend's (or pod's) replies through the
// node Spec.RepliesVia names.
func routeRepliesAll(ctx context.Context, p Plan) error {
	if p.Spec.RepliesVia == "" {
		return nil
	}
	node, ok := p.Node(p.Spec.RepliesVia)
	if !ok {
		return fmt.Errorf("replies via %q: no such node", p.Spec.RepliesVia)
	}
	hs, _ := p.serverHosts()
	for _, h := range hs {
		if err := RouteReplies(ctx, p, h, node); err != nil {
			return err
		}
	}
	return nil
}

// Node returns the xlb node named name (node1, node2, ...).
func (p Plan) Node(name string) (Host, bool) {
	for _, n := range p.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return Host{}, false
}
