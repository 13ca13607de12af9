package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xlbproject/xlb/bench/internal/natfloor"
	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
	"github.com/xlbproject/xlb/testbed/netns"
)

// The lab: one client, the static router, one LB node per path that
// needs one, eight backends with nginx. Every path has its own VIP, routed
// by the router to its own node, so the paths never share a namespace:
// no path runs with another's conntrack, netfilter hooks or XDP program.
//
//	client1 ── router ──┬── node1  xlb agent (XDP): VIP .1 dsr-ipip, VIP .2 dsr-gue, VIP .7 nat, VIP .8 dnat
//	                    ├── node2  nftables DNAT:   VIP .3
//	                    ├── node3  iptables DNAT:   VIP .4
//	                    ├── node4  nginx stream:    VIP .5 (on lo)
//	                    ├── node5  HAProxy tcp:     VIP .6 (on lo)
//	                    ├── node6 … node9  the IPv6 twins of node2 … node5 (ipv6.go)
//	                    └── be1 … be8  nginx on :80 and :8080 (VIPs .1 and .2 on lo, decapsulation attached)
//
// The lab is dual stack: each path has an IPv6 twin (ipv6.go) with VIP
// fd00:99::<the same last byte>; node1's agent serves the xlb twins too.
//
// The dnat path's backends answer on dnatPort, and the router sends what
// comes from that port to the client through node1 (a policy rule): a
// dnat service keeps the client's address, so its replies must pass the
// node. The other paths' replies route as before.

// stalePrefix starts the lab's name, followed by the run's PID.
const stalePrefix = "xhb"

// labBackends is the number of backends of the lab: the largest count
// measured.
const labBackends = 8

// dnatPort is the backends' port of the dnat path: the router tells its
// replies from the other paths' by it.
const dnatPort = 8080

// The nat section of node1's agent: sessions on the node's address and
// ports natPortMin to natPortMax, and node1's own ephemeral ports above
// them, so that nothing the node itself opens meets a session. The new-
// connection runs open thousands of connections a second, each session
// lingering tcpClosing after its end: the range is as wide as it goes.
const (
	natPortMin, natPortMax = 1024, 60999
	nodeLocalPorts         = "61000 65535"
)

// dnatRuleTable is the router's routing table for the dnat path's
// replies.
const dnatRuleTable = "100"

// xlbKey says whether path key goes through the xlb agent.
func xlbKey(key string) bool {
	key = baseKey(key)
	return key == keyIPIP || key == keyGUE || key == keyNAT || key == keyDNAT
}

// Path keys.
const (
	keyIPIP     = "xlb-ipip"
	keyGUE      = "xlb-gue"
	keyNAT      = "xlb-nat"
	keyDNAT     = "xlb-dnat"
	keyFloor    = "nat-floor"
	keyNft      = "nft"
	keyIptables = "iptables"
	keyNginx    = "nginx"
	keyHAProxy  = "haproxy"
	keyDirect   = "direct"
)

// Path is one way from the client to the backends.
type Path struct {
	Key  string `json:"key"`
	Name string `json:"name"`
	// Node is the LB node's namespace, "" for direct.
	Node string `json:"node,omitempty"`
	// VIP is the address the client sends to; invalid for direct.
	VIP netip.Addr `json:"vip,omitzero"`
	How string     `json:"how"`
	// node is the index of the LB node in the plan, -1 for direct.
	node int
}

// paths returns the paths, in the order the report lists them: each
// IPv4 path followed by its IPv6 twin (ipv6.go).
func paths() []Path {
	v := func(last byte) netip.Addr { return netip.AddrFrom4([4]byte{10, 99, 0, last}) }
	return withIPv6([]Path{
		{Key: keyIPIP, Name: "xlb dsr-ipip", VIP: v(1), node: 0,
			How: "xlb agent on the node: XDP picks the backend (Maglev), IPIP to it; the backend's XDP program decapsulates, the VIP is on its lo, the reply goes straight to the client"},
		{Key: keyGUE, Name: "xlb dsr-gue", VIP: v(2), node: 0,
			How: "the same agent and node, GUE (UDP) encapsulation"},
		{Key: keyNAT, Name: "xlb nat", VIP: v(7), node: 0,
			How: "the same agent and node, forwarding nat: XDP rewrites the client's packet to the backend, from the node's address and a port of its own (a session per connection), and the backend's reply back to VIP → client"},
		{Key: keyDNAT, Name: "xlb dnat", VIP: v(8), node: 0,
			How: "the same agent and node, forwarding dnat: only the destination is rewritten (to backend port " + strconv.Itoa(dnatPort) + "); the router sends the backends' replies from that port through the node, whose XDP program rewrites their source to the VIP"},
		{Key: keyFloor, Name: "NAT floor", VIP: v(9), node: 5,
			How: "no LB: a stateless XDP program on the node (bench/internal/natfloor) sends the client's segments to the backend a hash of the client's port picks, from the node's address and the client's own port, and the replies back from the VIP; no table, no session, nothing allocated, only the rewrite and XDP_TX. The least any NAT node can cost here: no NAT path of this lab can be faster"},
		{Key: keyNft, Name: "nftables DNAT", VIP: v(3), node: 1,
			How: "nftables DNAT on the node (numgen random over the backends, as kube-proxy's nftables mode) and masquerade, so replies return through the node"},
		{Key: keyIptables, Name: "iptables DNAT", VIP: v(4), node: 2,
			How: "iptables-legacy DNAT on the node (statistic random chains, as kube-proxy's iptables mode) and masquerade"},
		{Key: keyNginx, Name: "nginx stream", VIP: v(5), node: 3,
			How: "nginx as an L4 (stream) proxy on the node, 2 workers with reuseport, round robin; the VIP is on the node's lo"},
		{Key: keyHAProxy, Name: "HAProxy tcp", VIP: v(6), node: 4,
			How: "HAProxy in TCP mode on the node, 2 threads, round robin; the VIP is on the node's lo"},
		{Key: keyDirect, Name: "direct", node: -1,
			How: "no LB: the client sends to the backends' own addresses, wrk thread i to backend i mod n"},
	})
}

// benchLab is the lab and what runs in it.
type benchLab struct {
	p     lab.Plan
	xlb   string // the xlb binary: netns-exec, agent
	dir   string // configs written by the benchmark
	paths []Path
	// roles maps namespace inodes to CPU roles.
	roles map[uint64]string
	// procs are the lab processes this program started, by name.
	procs map[string]proc
	// setup is every command the set-up ran, for the report.
	setup []string
	// n is the number of backends the paths use now.
	n int
	// floor is the NAT floor's program, attached at the first configure.
	floor *natfloor.Floor
	// agentSvcs are the agent's services now.
	agentSvcs []labrun.Service
	progress  func(string, ...any)
}

// upLab builds the lab and starts everything but the paths' own
// programs (those follow the backend count: configure).
func upLab(ctx context.Context, prefix, xlb string, queue int, progress func(string, ...any)) (*benchLab, error) {
	nodes := 0
	for _, p := range paths() {
		nodes = max(nodes, p.node+1)
	}
	// The backends' replies of the nat and dnat paths are rewritten by
	// the node's XDP program and sent on: they must leave the backend
	// with complete checksums, as from a real NIC (see docs/lab.md). The
	// same for every path.
	p, err := lab.Up(ctx, lab.Spec{Prefix: prefix, Clients: 1, Nodes: nodes, Backends: labBackends, Binary: xlb, Router: lab.RouterStatic, FullBackendChecksums: true, IPv6: hasIPv6(paths()), EgressQueue: queue})
	if err != nil {
		return nil, err
	}
	l := &benchLab{p: p, xlb: xlb, dir: filepath.Join(p.StateDir, "httpbench"), paths: paths(), roles: map[uint64]string{}, procs: map[string]proc{}, progress: progress}
	if err := os.MkdirAll(l.dir, 0o755); err != nil {
		return nil, err
	}
	ipv6 := ""
	if p.Spec.IPv6 {
		ipv6 = " --ipv6"
	}
	l.setup = append(l.setup, fmt.Sprintf("xlb lab up --prefix %s --clients 1 --nodes %d --backends %d --router static --full-backend-checksums --egress-queue %d%s  # testbed/lab: namespaces, router, XDP_PASS on the router's ports, `ethtool -K eth0 tx off` on the client and every backend, `xlb backend --vip %s` on every backend, `xlb lab serve` on every backend, a pfifo qdisc on every veth end",
		prefix, nodes, labBackends, queue, ipv6, joinAddrs(slices.Concat(p.VIPs, p.VIPs6), " --vip ")))
	for i := range l.paths {
		if n := l.paths[i].node; n >= 0 {
			l.paths[i].Node = p.Nodes[n].Namespace
		}
	}
	for _, h := range p.Backends {
		l.roles[nsInode(netns.Dir, h.Namespace)] = roleBackends
	}
	for _, h := range p.Nodes {
		l.roles[nsInode(netns.Dir, h.Namespace)] = roleNode
	}
	if err := l.network(ctx); err != nil {
		return nil, err
	}
	if err := l.network6(ctx); err != nil {
		return nil, err
	}
	if err := l.startBackends(ctx); err != nil {
		return nil, err
	}
	return l, nil
}

// run runs argv (in namespace ns unless "") and records it.
func (l *benchLab) run(ctx context.Context, ns string, argv ...string) (string, error) {
	shown := strings.Join(argv, " ")
	cmdArgs := argv
	if ns != "" {
		shown = "ip netns exec " + ns + " " + shown
		cmdArgs = append([]string{l.xlb, netns.ExecCommand, ns, "--"}, argv...)
	}
	l.setup = append(l.setup, shown)
	cmd := exec.CommandContext(ctx, cmdArgs[0], cmdArgs[1:]...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", shown, err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// sysctls writes sysctls (paths under /proc/sys/net) inside namespace ns.
func (l *benchLab) sysctls(ns string, kv ...string) error {
	for i := 0; i+1 < len(kv); i += 2 {
		l.setup = append(l.setup, fmt.Sprintf("ip netns exec %s sysctl -w net.%s=%q", ns, strings.ReplaceAll(kv[i], "/", "."), kv[i+1]))
	}
	return netns.Do(ns, func() error {
		for i := 0; i+1 < len(kv); i += 2 {
			if err := os.WriteFile(filepath.Join("/proc/sys/net", kv[i]), []byte(kv[i+1]), 0o644); err != nil {
				return fmt.Errorf("namespace %s: net/%s=%s: %w", ns, kv[i], kv[i+1], err)
			}
		}
		return nil
	})
}

// network adds what the paths need to the lab's network: a route per
// VIP to its node, the proxies' VIPs on their nodes' loopback, and
// ephemeral ports for the many connections of the new-connection runs.
func (l *benchLab) network(ctx context.Context) error {
	for _, p := range l.paths {
		if p.node < 0 || isV6(p.Key) {
			continue
		}
		node := l.p.Nodes[p.node]
		if _, err := l.run(ctx, "", "ip", "-n", l.p.Router, "route", "replace", p.VIP.String()+"/32", "via", node.Addr.String()); err != nil {
			return err
		}
		if p.Key == keyNginx || p.Key == keyHAProxy {
			if _, err := l.run(ctx, "", "ip", "-n", node.Namespace, "addr", "add", p.VIP.String()+"/32", "dev", "lo"); err != nil {
				return err
			}
		}
	}
	// The dnat path's replies: from the backends' dnatPort to the
	// client, through the xlb node.
	xlbNode := l.p.Nodes[l.path(keyDNAT).node]
	for _, args := range [][]string{
		{"ip", "-n", l.p.Router, "route", "replace", l.p.ClientSegment.Subnet.String(), "via", xlbNode.Addr.String(), "table", dnatRuleTable},
		{"ip", "-n", l.p.Router, "rule", "add", "priority", "100", "from", l.p.BackendSegment.Subnet.String(), "to", l.p.ClientSegment.Subnet.String(),
			"ipproto", "tcp", "sport", strconv.Itoa(dnatPort), "iif", l.p.BackendSegment.Bridge, "lookup", dnatRuleTable},
	} {
		if _, err := l.run(ctx, "", args...); err != nil {
			return err
		}
	}
	// The client opens thousands of connections a second in the
	// new-connection runs, as do the proxies towards the backends: the
	// whole port range, and TIME_WAIT ports reused (timestamps keep it
	// safe). The xlb node keeps the range for its NAT sessions.
	ports := []string{"ipv4/ip_local_port_range", "1024 65535", "ipv4/tcp_tw_reuse", "1"}
	if err := l.sysctls(l.p.Clients[0].Namespace, ports...); err != nil {
		return err
	}
	for _, n := range l.p.Nodes {
		if n.Name == xlbNode.Name {
			if err := l.sysctls(n.Namespace, "ipv4/ip_local_port_range", nodeLocalPorts); err != nil {
				return err
			}
			continue
		}
		if err := l.sysctls(n.Namespace, ports...); err != nil {
			return err
		}
	}
	return nil
}

// nginxName is the lab process name of backend h's nginx.
func nginxName(h lab.Host) string { return "nginx-" + h.Name }

// startBackends replaces every backend's embedded server by nginx.
func (l *benchLab) startBackends(ctx context.Context) error {
	for _, h := range l.p.Backends {
		if err := lab.StopProcess(l.p.Spec.Prefix, lab.ServerName(h)); err != nil {
			return fmt.Errorf("%s: stop the lab's server: %w", h.Name, err)
		}
		l.setup = append(l.setup, "# stop `xlb lab serve` on "+h.Name+" (lab.StopProcess)")
		dir := filepath.Join(l.dir, nginxName(h))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		conf := filepath.Join(dir, "nginx.conf")
		if err := os.WriteFile(conf, []byte(backendNginx(h.Name, h.Addr, dir)), 0o644); err != nil {
			return err
		}
		if err := l.start(h.Namespace, nginxName(h), "nginx", "-p", dir, "-e", "stderr", "-c", conf); err != nil {
			return err
		}
	}
	for _, h := range l.p.Backends {
		if err := l.waitListening(ctx, h.Namespace, nginxName(h), netip.MustParseAddrPort("127.0.0.1:80")); err != nil {
			return err
		}
	}
	return nil
}

// backendConf is the nginx.conf of backend i (0-based).
func (l *benchLab) backendConf(i int) string {
	return filepath.Join(l.dir, nginxName(l.p.Backends[i]), "nginx.conf")
}

// start starts a lab process, remembers it and records its command.
func (l *benchLab) start(ns, name string, argv ...string) error {
	l.setup = append(l.setup, "ip netns exec "+ns+" "+strings.Join(argv, " "))
	pid, err := lab.StartProcess(l.p.Spec.Prefix, ns, name, argv...)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	st, ok := startTime(pid)
	if !ok {
		return fmt.Errorf("%s (PID %d) exited at once; its log %s ends with: %s", name, pid,
			lab.LogFile(l.p.Spec.Prefix, name), logTail(lab.LogFile(l.p.Spec.Prefix, name)))
	}
	l.procs[name] = proc{pid, st}
	return nil
}

// proc is one process this program started: its PID and start time,
// which tells it apart from a later process with the same PID.
type proc struct {
	pid   int
	start uint64
}

// alive says whether p still runs (and is not a zombie).
func (p proc) alive() bool {
	st, ok := startTime(p.pid)
	return ok && st == p.start
}

// stop stops the lab process name that start started, and its children:
// SIGTERM, SIGKILL after 5 s. It signals them by PID itself: nginx
// rewrites its command line ("nginx: master process ..."), so
// lab.StopProcess, which signals a PID only while its command line is
// the one started, would leave it running, and a new nginx would share
// the VIP's port with the old one (reuseport).
func (l *benchLab) stop(name string) error {
	p, ok := l.procs[name]
	if !ok {
		return nil
	}
	delete(l.procs, name)
	group := append([]proc{p}, children(p.pid)...)
	signal := func(sig syscall.Signal) {
		for _, q := range group {
			if q.alive() {
				_ = syscall.Kill(q.pid, sig)
			}
		}
	}
	gone := func(d time.Duration) bool {
		for deadline := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
			if !slices.ContainsFunc(group, proc.alive) {
				return true
			}
			if time.Now().After(deadline) {
				return false
			}
		}
	}
	signal(syscall.SIGTERM)
	if !gone(5 * time.Second) {
		signal(syscall.SIGKILL)
		if !gone(2 * time.Second) {
			return fmt.Errorf("%s (PID %d) and its children survive SIGKILL", name, p.pid)
		}
	}
	// Only the records are left to remove: the process is gone.
	return lab.StopProcess(l.p.Spec.Prefix, name)
}

// startTime is a process's start time from /proc/PID/stat (field 22);
// false if it is gone or a zombie.
func startTime(pid int) (uint64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return 0, false
	}
	st, err := strconv.ParseUint(f[19], 10, 64)
	return st, err == nil
}

// children lists the processes whose parent is pid.
func children(pid int) []proc {
	var out []proc
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 || f[1] != strconv.Itoa(pid) {
			continue
		}
		if st, ok := startTime(c); ok {
			out = append(out, proc{c, st})
		}
	}
	return out
}

// waitListening waits until addr accepts connections inside ns, for at
// most 10 s, or until process name has exited.
func (l *benchLab) waitListening(ctx context.Context, ns, name string, addr netip.AddrPort) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := netns.Do(ns, func() error {
			c, err := net.DialTimeout("tcp", addr.String(), 200*time.Millisecond)
			if err == nil {
				c.Close()
			}
			return err
		})
		if err == nil {
			return nil
		}
		if p, ok := l.procs[name]; !ok || !p.alive() {
			return fmt.Errorf("%s exited; its log %s ends with: %s", name, lab.LogFile(l.p.Spec.Prefix, name), logTail(lab.LogFile(l.p.Spec.Prefix, name)))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: nothing listens on %s after 10 s: %w", name, addr, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// logTail is the last lines of a log, for an error message.
func logTail(path string) string { return lab.LogTail(path, 5) }

// waitClosed waits until nothing accepts connections on addr inside ns
// any more, for at most 5 s.
func (l *benchLab) waitClosed(ctx context.Context, ns string, addr netip.AddrPort) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := netns.Do(ns, func() error {
			c, err := net.DialTimeout("tcp", addr.String(), 200*time.Millisecond)
			if err == nil {
				c.Close()
			}
			return err
		})
		if err != nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still accepts connections 5 s after its proxy was stopped: something else listens there (see `ip netns exec %s ss -tlnp`)", addr, ns)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// backendAddrs is the addresses of the first n backends.
func (l *benchLab) backendAddrs(n int) []netip.Addr {
	var out []netip.Addr
	for _, h := range l.p.Backends[:n] {
		out = append(out, h.Addr)
	}
	return out
}

// path returns the path with key k.
func (l *benchLab) path(k string) Path {
	i := slices.IndexFunc(l.paths, func(p Path) bool { return p.Key == k })
	return l.paths[i]
}

// ConfigSet is every path's configuration for one backend count.
type ConfigSet struct {
	Backends     int    `json:"backends"`
	Agent        string `json:"xlb_agent_yaml"`
	Nft          string `json:"nft"`
	Iptables     string `json:"iptables_restore"`
	NginxStream  string `json:"nginx_stream_conf"`
	HAProxy      string `json:"haproxy_cfg"`
	DirectScript string `json:"wrk_direct_lua"`
	// Floor is the NAT floor's configuration (natfloor.Config).
	Floor natfloor.Config `json:"nat_floor"`
	// IPv6 is the IPv6 paths' (ipv6.go).
	IPv6 ConfigSet6 `json:"ipv6,omitzero"`
}

// configure makes every path use the first n backends and checks that
// each answers; it returns the configurations.
func (l *benchLab) configure(ctx context.Context, n int) (ConfigSet, error) {
	cs := ConfigSet{Backends: n}
	addrs := l.backendAddrs(n)
	var err error
	// xlb: both services on the agent of the first node.
	node := l.p.Nodes[l.path(keyIPIP).node]
	svcs := []labrun.Service{
		{Name: "web-ipip", VIP: l.path(keyIPIP).VIP, Port: 80, Protocol: config.TCP, Forwarding: config.DSRIPIP, Backends: addrs},
		{Name: "web-gue", VIP: l.path(keyGUE).VIP, Port: 80, Protocol: config.TCP, Forwarding: config.DSRGUE, Backends: slices.Clone(addrs)},
		{Name: "web-nat", VIP: l.path(keyNAT).VIP, Port: 80, Protocol: config.TCP, Forwarding: config.NAT, Backends: slices.Clone(addrs)},
		{Name: "web-dnat", VIP: l.path(keyDNAT).VIP, Port: 80, Protocol: config.TCP, Forwarding: config.DNAT, Backends: slices.Clone(addrs), BackendPort: dnatPort},
	}
	svcs = append(svcs, l.agentServices6(n)...)
	opts := labrun.NodeOptions{NAT: &labrun.NAT{PortMin: natPortMin, PortMax: natPortMax}}
	sub := l.p
	sub.Nodes = []lab.Host{node}
	if l.agentSvcs == nil {
		if err := labrun.WriteConfigWith(l.p, node, svcs, opts); err != nil {
			return cs, err
		}
		l.setup = append(l.setup, "ip netns exec "+node.Namespace+" "+l.xlb+" agent --config "+labrun.ConfigPath(l.p, node))
		if _, err := labrun.StartAgent(ctx, l.p, node, svcs); err != nil {
			return cs, err
		}
	} else if _, err := labrun.ReconfigureWith(ctx, sub, svcs, opts); err != nil {
		return cs, err
	}
	l.agentSvcs = svcs
	b, err := os.ReadFile(labrun.ConfigPath(l.p, node))
	if err != nil {
		return cs, err
	}
	cs.Agent = string(b)

	// nftables and iptables: load the rules for n backends, replacing the
	// previous ones, and forget the connections of the previous ones. A
	// conntrack entry in TIME_WAIT outlives its rules by two minutes, and
	// takes a new SYN from the same client port (which the client reuses
	// within seconds at these rates) to the old backend, one that may no
	// longer be in use.
	for _, key := range []string{keyNft, keyIptables} {
		if err := l.flushConntrack(l.path(key).Node); err != nil {
			return cs, err
		}
	}
	cs.Nft = nftRules(l.path(keyNft).VIP, addrs)
	if err := l.applyFile(ctx, keyNft, "nft.rules", cs.Nft, "nft", "-f"); err != nil {
		return cs, err
	}
	cs.Iptables = iptablesRules(l.path(keyIptables).VIP, addrs)
	if err := l.applyFile(ctx, keyIptables, "iptables.rules", cs.Iptables, "iptables-legacy-restore"); err != nil {
		return cs, err
	}

	// The proxies: restart on the new configuration.
	cs.NginxStream, err = l.restartProxy(ctx, keyNginx, "nginx-stream.conf", func(dir string) string {
		return streamNginx(l.path(keyNginx).VIP, addrs, dir)
	}, func(dir, conf string) []string { return []string{"nginx", "-p", dir, "-e", "stderr", "-c", conf} })
	if err != nil {
		return cs, err
	}
	cs.HAProxy, err = l.restartProxy(ctx, keyHAProxy, "haproxy.cfg", func(dir string) string {
		return haproxyConfig(l.path(keyHAProxy).VIP, addrs, dir)
	}, func(dir, conf string) []string { return []string{"haproxy", "-db", "-f", conf} })
	if err != nil {
		return cs, err
	}

	if err := l.configureFloor(n); err != nil {
		return cs, err
	}
	cs.Floor = l.floorConfig(n)

	cs.DirectScript = directScript(addrs)
	if err := os.WriteFile(l.scriptPath(), []byte(cs.DirectScript), 0o644); err != nil {
		return cs, err
	}
	if cs.IPv6, err = l.configure6(ctx, n); err != nil {
		return cs, err
	}
	l.n = n
	return cs, l.check(ctx)
}

// floorConfig is the NAT floor's configuration for the first n
// backends.
func (l *benchLab) floorConfig(n int) natfloor.Config {
	p := l.path(keyFloor)
	return natfloor.Config{VIP: p.VIP, Node: l.p.Nodes[p.node].Addr, Client: l.p.Clients[0].Addr, Port: 80, BackendPort: 80, Backends: l.backendAddrs(n)}
}

// configureFloor attaches the NAT floor to its node, or reconfigures it,
// for the first n backends. The program stays attached while this
// process holds it (closeFloor), and goes with the lab's namespace.
func (l *benchLab) configureFloor(n int) error {
	c := l.floorConfig(n)
	if l.floor != nil {
		return l.floor.Configure(c)
	}
	node := l.p.Nodes[l.path(keyFloor).node]
	f, err := natfloor.Attach(node.Namespace, node.Interface, c)
	if err != nil {
		return err
	}
	l.floor = f
	l.setup = append(l.setup, fmt.Sprintf("natfloor.Attach(%s, %s)  # bench/internal/natfloor: the stateless NAT floor, XDP native, VIP %v", node.Namespace, node.Interface, c.VIP))
	return nil
}

// closeFloor detaches the NAT floor, if attached.
func (l *benchLab) closeFloor() error {
	if l.floor == nil {
		return nil
	}
	err := l.floor.Close()
	l.floor = nil
	return err
}

// scriptPath is where wrk's script for the direct path is.
func (l *benchLab) scriptPath() string { return filepath.Join(l.dir, "direct.lua") }

// applyFile writes text to file name and runs argv with the file's path
// appended inside the node of path key.
func (l *benchLab) applyFile(ctx context.Context, key, name, text string, argv ...string) error {
	path := filepath.Join(l.dir, name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		return err
	}
	_, err := l.run(ctx, l.path(key).Node, append(argv, path)...)
	return err
}

// restartProxy stops the proxy of path key, writes its configuration
// and starts it again, and waits until it listens on the VIP; it returns
// the configuration.
func (l *benchLab) restartProxy(ctx context.Context, key, file string, conf func(dir string) string, argv func(dir, conf string) []string) (string, error) {
	p := l.path(key)
	name := key + "-proxy"
	if err := l.stop(name); err != nil {
		return "", err
	}
	if err := l.waitClosed(ctx, p.Node, netip.AddrPortFrom(p.VIP, 80)); err != nil {
		return "", err
	}
	dir := filepath.Join(l.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	text := conf(dir)
	path := filepath.Join(dir, file)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		return "", err
	}
	if err := l.start(p.Node, name, argv(dir, path)...); err != nil {
		return "", err
	}
	return text, l.waitListening(ctx, p.Node, name, netip.AddrPortFrom(p.VIP, 80))
}

// targets is where the client sends path p's requests: the VIP, or the
// first n backends.
func (l *benchLab) targets(p Path, n int) []netip.AddrPort {
	if baseKey(p.Key) != keyDirect {
		return []netip.AddrPort{netip.AddrPortFrom(p.VIP, 80)}
	}
	var out []netip.AddrPort
	for _, a := range l.addrsOf(p, n) {
		out = append(out, netip.AddrPortFrom(a, 80))
	}
	return out
}

// check sends requests on every path from the client and fails unless
// each gets a 200 answer from a backend in use, and, over 4n requests on
// new connections, from every backend in use.
func (l *benchLab) check(ctx context.Context) error {
	in := map[string]bool{}
	for _, h := range l.p.Backends[:l.n] {
		in[h.Name] = true
	}
	return netns.Do(l.p.Clients[0].Namespace, func() error {
		for _, p := range l.paths {
			seen := map[string]bool{}
			ts := l.targets(p, l.n)
			// Random spreading may miss a backend in 4n tries: allow
			// more before calling it broken.
			for i := 0; i < 64*l.n && len(seen) < l.n; i++ {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				out := dialHTTP(ctx, ts[i%len(ts)].String(), 2*time.Second)
				if out.err != "" {
					return fmt.Errorf("%s with %d backends: a request to %s failed (%s): the path does not work (see the logs in %s)",
						p.Name, l.n, ts[i%len(ts)], out.err, l.p.StateDir)
				}
				if !in[out.backend] {
					return fmt.Errorf("%s with %d backends: answered by %q, which is not in use", p.Name, l.n, out.backend)
				}
				seen[out.backend] = true
			}
			if len(seen) < l.n {
				return fmt.Errorf("%s with %d backends: only %d of them answered %d requests", p.Name, l.n, len(seen), 64*l.n)
			}
		}
		return nil
	})
}

// ResponseBytes are the sizes of one request and its answer on a
// keep-alive connection, for the bandwidth model.
type ResponseBytes struct {
	Request int `json:"request"`
	Head    int `json:"response_head"`
	Body    int `json:"response_body"`
}

// measureSizes sends wrk's request to the first backend on a keep-alive
// connection and measures the answer.
func (l *benchLab) measureSizes() (ResponseBytes, error) {
	be := l.p.Backends[0]
	// What wrk sends: request line and Host only.
	req := "GET / HTTP/1.1\r\nHost: " + l.path(keyGUE).VIP.String() + "\r\n\r\n"
	var r ResponseBytes
	r.Request = len(req)
	err := netns.Do(l.p.Clients[0].Namespace, func() error {
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(be.Addr, 80).String(), 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := io.WriteString(c, req); err != nil {
			return err
		}
		br := bufio.NewReader(c)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return err
			}
			r.Head += len(line)
			if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(k, "content-length") {
				r.Body, _ = strconv.Atoi(strings.TrimSpace(v))
			}
			if line == "\r\n" {
				break
			}
		}
		body := make([]byte, r.Body)
		if _, err := io.ReadFull(br, body); err != nil {
			return err
		}
		if !bytes.HasPrefix(body, []byte(be.Name+" ")) {
			return fmt.Errorf("%s answered %q", be.Name, body)
		}
		return nil
	})
	if err != nil {
		return r, fmt.Errorf("measure the answer's size: %w", err)
	}
	return r, nil
}

// served reads how many requests each backend has seen (nginx's
// stub_status): every read counts itself, so between two reads a backend
// answered the difference less one.
func (l *benchLab) served() ([]int, error) {
	out := make([]int, len(l.p.Backends))
	for i, h := range l.p.Backends {
		err := netns.Do(h.Namespace, func() error {
			c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(statusPort), time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(time.Second))
			if _, err := io.WriteString(c, "GET / HTTP/1.0\r\n\r\n"); err != nil {
				return err
			}
			b, err := io.ReadAll(c)
			if err != nil {
				return err
			}
			n, err := parseStubStatus(string(b))
			out[i] = n
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("%s: stub_status: %w", h.Name, err)
		}
	}
	return out, nil
}

// parseStubStatus returns the requests count of nginx's stub_status
// page ("server accepts handled requests" followed by the three
// numbers), which includes the request that read it.
func parseStubStatus(page string) (int, error) {
	_, rest, ok := strings.Cut(page, "server accepts handled requests")
	if !ok {
		return 0, errors.New("no \"server accepts handled requests\" line")
	}
	f := strings.Fields(rest)
	if len(f) < 3 {
		return 0, errors.New("no numbers after \"server accepts handled requests\"")
	}
	n, err := strconv.Atoi(f[2])
	if err != nil {
		return 0, fmt.Errorf("requests %q: %w", f[2], err)
	}
	return n, nil
}

// xdpPackets is the packets the agent's data plane counted for path p's
// service, 0 for other paths.
func (l *benchLab) xdpPackets(p Path) (uint64, error) {
	if !xlbKey(p.Key) {
		return 0, nil
	}
	node := l.p.Nodes[p.node]
	st, err := api.GetStatus(labrun.Socket(l.p, node))
	if err != nil {
		return 0, err
	}
	for _, s := range st.Services {
		if s.VIP == p.VIP {
			return s.Counters.Packets, nil
		}
	}
	return 0, fmt.Errorf("the agent of %s has no service on %s", node.Name, p.VIP)
}

// natFailures is the allocation failures of the xlb node's NAT session
// table so far, 0 for paths other than xlb nat and dnat.
func (l *benchLab) natFailures(p Path) (uint64, error) {
	if b := baseKey(p.Key); b != keyNAT && b != keyDNAT {
		return 0, nil
	}
	node := l.p.Nodes[p.node]
	st, err := api.GetStatus(labrun.Socket(l.p, node))
	if err != nil {
		return 0, err
	}
	if st.NAT == nil {
		return 0, fmt.Errorf("the agent of %s reports no NAT session table", node.Name)
	}
	return st.NAT.AllocFailures, nil
}

// synCounters are the client's SYN retransmits (TcpExt TCPSynRetrans)
// and the backends' segments refused by a TIME_WAIT socket (PAWSTimewait,
// SYNs among them) or SYNs dropped by a full accept queue (ListenDrops),
// so far.
type synCounters struct{ retrans, paws, listenDrops uint64 }

func (l *benchLab) synCounters() (synCounters, error) {
	var c synCounters
	// read reads counters of namespace ns's /proc/net/netstat (in
	// /proc/net/snmp's format) into want, through /proc/thread-self:
	// /proc/net follows the reading thread's namespace.
	read := func(ns string, want map[string]*uint64) error {
		err := netns.Do(ns, func() error {
			b, err := os.ReadFile("/proc/thread-self/net/netstat")
			if err != nil {
				return err
			}
			return labrun.ParseSNMP(bytes.NewReader(b), want)
		})
		if err != nil {
			return fmt.Errorf("netstat of namespace %s: %w", ns, err)
		}
		return nil
	}
	if err := read(l.p.Clients[0].Namespace, map[string]*uint64{"TcpExt.TCPSynRetrans": &c.retrans}); err != nil {
		return c, err
	}
	for _, h := range l.p.Backends {
		var paws, drops uint64
		if err := read(h.Namespace, map[string]*uint64{"TcpExt.PAWSTimewait": &paws, "TcpExt.ListenDrops": &drops}); err != nil {
			return c, err
		}
		c.paws += paws
		c.listenDrops += drops
	}
	return c, nil
}

// flushConntrack empties namespace ns's conntrack table, as `conntrack
// -F` would, over netlink.
func (l *benchLab) flushConntrack(ns string) error {
	l.setup = append(l.setup, "ip netns exec "+ns+" conntrack -F  # over netlink")
	return netns.Do(ns, func() error {
		if err := netlink.ConntrackTableFlush(netlink.ConntrackTable); err != nil {
			return fmt.Errorf("namespace %s: flush conntrack: %w", ns, err)
		}
		return nil
	})
}
