package main

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// This file writes the configurations every path runs with: the
// backends' nginx, the nginx stream proxy, HAProxy, the nftables and
// iptables DNAT rules, and wrk's script for the direct path. They are
// pure functions of their inputs so that tests can pin them, and the
// report carries their text.

// statusPort is where each backend's nginx serves stub_status, on its
// loopback only: the benchmark reads how many requests each backend
// answered without the reads counting on port 80.
const statusPort = 8081

// keepaliveRequests is how many requests a backend serves on one
// connection before closing it: nginx's default when the dissertation
// measured (1.13), the 100 requests per connection of its Appendix C.
const keepaliveRequests = 100

// body is what backend name at addr answers every request with: it names
// itself, as the dissertation's nginx pods answered with their address.
func body(name string, addr netip.Addr) string { return name + " " + addr.String() + "\n" }

// backendNginx is the configuration of a backend's nginx: one worker (the
// dissertation's nginx pods ran one; eight backends already make eight
// workers on two cores), keep-alive with keepaliveRequests requests per
// connection, a fixed answer naming the backend on port 80 of every
// address of both families (its own and the VIPs on its loopback) and on dnatPort,
// stub_status on the loopback. dir holds its pid file and temporary directories.
func backendNginx(name string, addr netip.Addr, dir string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by bench/httpbench for backend %s.\n", name)
	b.WriteString("worker_processes 1;\ndaemon off;\nmaster_process on;\n")
	fmt.Fprintf(&b, "pid %s/nginx.pid;\nerror_log stderr warn;\nworker_rlimit_nofile 16384;\n", dir)
	b.WriteString("events {\n    worker_connections 8192;\n}\n")
	b.WriteString("http {\n    access_log off;\n    default_type text/plain;\n")
	fmt.Fprintf(&b, "    keepalive_timeout 65s;\n    keepalive_requests %d;\n", keepaliveRequests)
	for _, t := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		fmt.Fprintf(&b, "    %s_temp_path %s/%s;\n", t, dir, t)
	}
	fmt.Fprintf(&b, "    server {\n        listen 80 backlog=4096;\n        listen %d backlog=4096;\n", dnatPort)
	fmt.Fprintf(&b, "        listen [::]:80 backlog=4096;\n        listen [::]:%d backlog=4096;\n", dnatPort)
	fmt.Fprintf(&b, "        location / {\n            add_header X-Backend %s;\n            return 200 %q;\n        }\n    }\n",
		name, body(name, addr))
	fmt.Fprintf(&b, "    server {\n        listen 127.0.0.1:%d;\n        location / {\n            stub_status;\n        }\n    }\n}\n", statusPort)
	return b.String()
}

// streamNginx is the configuration of nginx as an L4 (stream) proxy on
// the node: two workers for two cores, each with its own listening socket
// (reuseport), round robin over backends.
func streamNginx(vip netip.Addr, backends []netip.Addr, dir string) string {
	var b strings.Builder
	b.WriteString("# Written by bench/httpbench: nginx as an L4 proxy on the node.\n")
	b.WriteString("load_module /usr/lib/nginx/modules/ngx_stream_module.so;\n")
	b.WriteString("worker_processes 2;\ndaemon off;\nmaster_process on;\n")
	fmt.Fprintf(&b, "pid %s/nginx.pid;\nerror_log stderr warn;\nworker_rlimit_nofile 16384;\n", dir)
	b.WriteString("events {\n    worker_connections 8192;\n}\n")
	b.WriteString("stream {\n    upstream backends {\n")
	for _, a := range backends {
		fmt.Fprintf(&b, "        server %s;\n", netip.AddrPortFrom(a, 80))
	}
	b.WriteString("    }\n    server {\n")
	fmt.Fprintf(&b, "        listen %s backlog=4096 reuseport;\n", netip.AddrPortFrom(vip, 80))
	b.WriteString("        proxy_pass backends;\n        proxy_connect_timeout 2s;\n    }\n}\n")
	return b.String()
}

// haproxyConfig is HAProxy in TCP mode on the node: two threads for two
// cores, round robin over backends.
func haproxyConfig(vip netip.Addr, backends []netip.Addr, dir string) string {
	var b strings.Builder
	b.WriteString("# Written by bench/httpbench: HAProxy in TCP mode on the node.\n")
	fmt.Fprintf(&b, "global\n    nbthread 2\n    maxconn 8000\n    pidfile %s/haproxy.pid\n", dir)
	b.WriteString("defaults\n    mode tcp\n    timeout connect 2s\n    timeout client 30s\n    timeout server 30s\n")
	fmt.Fprintf(&b, "frontend vip\n    bind %s\n    default_backend backends\n", netip.AddrPortFrom(vip, 80))
	b.WriteString("backend backends\n    balance roundrobin\n")
	for i, a := range backends {
		fmt.Fprintf(&b, "    server be%d %s\n", i+1, netip.AddrPortFrom(a, 80))
	}
	return b.String()
}

// nftTable names the nftables table of the DNAT path.
const nftTable = "xhb_dnat"

// nftRules is the nftables DNAT path as kube-proxy's nftables mode builds
// a service: new connections to vip:80 get a backend picked at random
// (numgen random) and are DNATed to it. The file replaces the table
// atomically (add, delete, define in one transaction), so reloading it
// with another backend set leaves no window without rules. Replies must
// come back through the node to be translated back: the masquerade makes
// the backends answer the node, as kube-proxy does for traffic from
// outside the cluster (externalTrafficPolicy: Cluster). An IPv6 VIP
// gets the same rules in an ip6 table.
func nftRules(vip netip.Addr, backends []netip.Addr) string {
	family := "ip"
	if vip.Is6() {
		family = "ip6"
	}
	var b strings.Builder
	b.WriteString("# Written by bench/httpbench: nftables DNAT on the node.\n")
	fmt.Fprintf(&b, "add table %s %s\ndelete table %s %s\n", family, nftTable, family, nftTable)
	fmt.Fprintf(&b, "table %s %s {\n", family, nftTable)
	b.WriteString("\tchain prerouting {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n")
	var m []string
	for i, a := range backends {
		m = append(m, fmt.Sprintf("%d : %s", i, a))
	}
	fmt.Fprintf(&b, "\t\t%s daddr %s tcp dport 80 dnat to numgen random mod %d map { %s }\n\t}\n",
		family, vip, len(backends), strings.Join(m, ", "))
	b.WriteString("\tchain postrouting {\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n")
	b.WriteString("\t\tct status dnat masquerade\n\t}\n}\n")
	return b.String()
}

// iptablesRules is the iptables DNAT path as kube-proxy's iptables mode
// builds a service, for iptables-restore: a service chain that jumps to
// endpoint i with probability 1/(n-i) (so each gets 1/n of the new
// connections), endpoint chains that DNAT, and the masquerade of
// translated connections (see nftRules for why). An IPv6 VIP gets the
// same rules for ip6tables-legacy-restore.
func iptablesRules(vip netip.Addr, backends []netip.Addr) string {
	tool := "iptables-legacy-restore"
	if vip.Is6() {
		tool = "ip6tables-legacy-restore"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by bench/httpbench: iptables DNAT on the node (%s).\n", tool)
	b.WriteString("*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n:XHB-SVC - [0:0]\n")
	for i := range backends {
		fmt.Fprintf(&b, ":XHB-SEP-%d - [0:0]\n", i+1)
	}
	fmt.Fprintf(&b, "-A PREROUTING -d %s -p tcp -m tcp --dport 80 -j XHB-SVC\n", netip.PrefixFrom(vip, vip.BitLen()))
	n := len(backends)
	for i := range backends {
		if i < n-1 {
			fmt.Fprintf(&b, "-A XHB-SVC -m statistic --mode random --probability %s -j XHB-SEP-%d\n",
				strconv.FormatFloat(1/float64(n-i), 'f', 11, 64), i+1)
		} else {
			fmt.Fprintf(&b, "-A XHB-SVC -j XHB-SEP-%d\n", i+1)
		}
	}
	for i, a := range backends {
		fmt.Fprintf(&b, "-A XHB-SEP-%d -p tcp -m tcp -j DNAT --to-destination %s\n", i+1, netip.AddrPortFrom(a, 80))
	}
	b.WriteString("-A POSTROUTING -m conntrack --ctstate DNAT -j MASQUERADE\nCOMMIT\n")
	return b.String()
}

// directScript is wrk's Lua script for the direct path: wrk connects
// every connection of a thread to that thread's address, so thread i
// goes to backend i mod n. With as many threads as the largest backend
// count (a multiple of every count measured) each backend gets the same
// number of threads and connections.
func directScript(backends []netip.Addr) string {
	var b strings.Builder
	b.WriteString("-- Written by bench/httpbench: wrk thread i connects to backend i mod n.\n")
	var q []string
	for _, a := range backends {
		q = append(q, strconv.Quote(a.String()))
	}
	fmt.Fprintf(&b, "local backends = {%s}\nlocal n = 0\n", strings.Join(q, ", "))
	b.WriteString("function setup(thread)\n\tlocal a = backends[(n % #backends) + 1]\n\tn = n + 1\n\tthread.addr = wrk.lookup(a, \"80\")[1]\nend\n")
	return b.String()
}
