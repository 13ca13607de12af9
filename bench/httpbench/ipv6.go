package main

import (
	"context"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/testbed/labrun"
)

// The IPv6 paths: each measures an IPv4 path's way over IPv6, in the
// same run, so that the report can put it beside its twin and divide the
// two. A twin's key is its IPv4 path's key with v6Suffix; its VIP is the
// IPv6 VIP with the same last byte (the lab's backends accept
// fd00:99::1 and ::2, the xlb DSR paths' VIPs, as they accept 10.99.0.1
// and .2), and it sends to the backends' IPv6 addresses.

// v6Suffix ends the key of an IPv6 path.
const v6Suffix = "-v6"

// vip6Prefix holds the IPv6 paths' VIPs: the lab's IPv6 VIP prefix.
var vip6Prefix = netip.MustParsePrefix("fd00:99::/64")

// twin describes the IPv6 twin of the IPv4 path Key.
type twin struct {
	Key  string
	Name string
	How  string
}

// ipv6Twins are the IPv4 paths measured over IPv6 too, in the report's
// order. The xlb twins are services of the same agent; the others get an
// LB node of their own, as their IPv4 twins have. Adding a path here is
// all its IPv6 twin needs.
var ipv6Twins = []twin{
	{keyIPIP, "xlb dsr-ipip IPv6", "the same agent and node, an IPv6 VIP to the backends' IPv6 addresses: IPv6-in-IPv6 to them, decapsulated by the same backend program; the VIP is on the backends' lo, the reply goes straight to the client"},
	{keyGUE, "xlb dsr-gue IPv6", "the same agent and node, GUE over IPv6 to the backends' IPv6 addresses"},
	{keyNAT, "xlb nat IPv6", "the same agent and node, forwarding nat for an IPv6 VIP to the backends' IPv6 addresses, from the node's IPv6 address"},
	{keyDNAT, "xlb dnat IPv6", "the same, forwarding dnat; the router sends the backends' IPv6 replies to the client through the node"},
	{keyNft, "nftables DNAT IPv6", "as nftables DNAT, in an ip6 table, on a node of its own"},
	{keyIptables, "ip6tables DNAT", "as iptables DNAT, with ip6tables-legacy, on a node of its own"},
	{keyNginx, "nginx stream IPv6", "as nginx stream, a process of its own on a node of its own, listening on the IPv6 VIP, proxying to the backends' IPv6 addresses"},
	{keyHAProxy, "HAProxy tcp IPv6", "as HAProxy tcp, a process of its own on a node of its own, listening on the IPv6 VIP, proxying to the backends' IPv6 addresses"},
	{keyDirect, "direct IPv6", "as direct, to the backends' IPv6 addresses"},
}

// baseKey is the key of the IPv4 path that path key measures over its own
// family: key itself for an IPv4 path.
func baseKey(key string) string { return strings.TrimSuffix(key, v6Suffix) }

// isV6 says whether path key is an IPv6 path.
func isV6(key string) bool { return strings.HasSuffix(key, v6Suffix) }

// withIPv6 is ps with each IPv4 path's IPv6 twin (ipv6Twins) right after
// it. An xlb twin shares its twin's node (the agent); the others get the
// nodes after the IPv4 paths'.
func withIPv6(ps []Path) []Path {
	next := 0
	for _, p := range ps {
		next = max(next, p.node+1)
	}
	var out []Path
	for _, p := range ps {
		out = append(out, p)
		i := slices.IndexFunc(ipv6Twins, func(t twin) bool { return t.Key == p.Key })
		if i < 0 {
			continue
		}
		t := ipv6Twins[i]
		q := Path{Key: p.Key + v6Suffix, Name: t.Name, How: t.How, node: p.node}
		if p.VIP.IsValid() {
			b := vip6Prefix.Addr().As16()
			b[15] = p.VIP.As4()[3]
			q.VIP = netip.AddrFrom16(b)
		}
		if p.node >= 0 && !xlbKey(p.Key) {
			q.node = next
			next++
		}
		out = append(out, q)
	}
	return out
}

// parsePaths reads -paths: comma-separated path keys, or "ipv4" or
// "ipv6" for every path of that family; nil for "" (every path).
func parsePaths(s string, ps []Path) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	known := map[string]bool{}
	for _, p := range ps {
		known[p.Key] = true
	}
	var out []string
	add := func(k string) {
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "ipv4" || f == "ipv6":
			for _, p := range ps {
				if isV6(p.Key) == (f == "ipv6") {
					add(p.Key)
				}
			}
		case known[f]:
			add(f)
		default:
			return nil, fmt.Errorf("%q is no path; the paths are %s, or ipv4 or ipv6 for every path of that family", f, strings.Join(slices.Sorted(maps.Keys(known)), ", "))
		}
	}
	return out, nil
}

// hasIPv6 says whether any of ps is an IPv6 path: the lab is then dual
// stack.
func hasIPv6(ps []Path) bool {
	return slices.ContainsFunc(ps, func(p Path) bool { return isV6(p.Key) })
}

// ConfigSet6 is the IPv6 paths' configurations for one backend count
// (the xlb twins' services are in ConfigSet.Agent).
type ConfigSet6 struct {
	Nft          string `json:"nft,omitempty"`
	Iptables     string `json:"ip6tables_restore,omitempty"`
	NginxStream  string `json:"nginx_stream_conf,omitempty"`
	HAProxy      string `json:"haproxy_cfg,omitempty"`
	DirectScript string `json:"wrk_direct_lua,omitempty"`
}

// backendAddrs6 is the IPv6 addresses of the first n backends.
func (l *benchLab) backendAddrs6(n int) []netip.Addr {
	var out []netip.Addr
	for _, h := range l.p.Backends[:n] {
		out = append(out, h.Addr6)
	}
	return out
}

// addrsOf is the addresses of the first n backends in path p's family.
func (l *benchLab) addrsOf(p Path, n int) []netip.Addr {
	if isV6(p.Key) {
		return l.backendAddrs6(n)
	}
	return l.backendAddrs(n)
}

// hasPath says whether the lab has path k.
func (l *benchLab) hasPath(k string) bool {
	return slices.ContainsFunc(l.paths, func(p Path) bool { return p.Key == k })
}

// network6 adds what the IPv6 paths need to the lab's network: a /128
// route per VIP to its node's IPv6 address, the proxies' VIPs on their
// nodes' loopback (nodad: a tentative address cannot be bound), and, for
// an xlb dnat twin, the route of its replies through the node.
func (l *benchLab) network6(ctx context.Context) error {
	for _, p := range l.paths {
		if !isV6(p.Key) || p.node < 0 {
			continue
		}
		node := l.p.Nodes[p.node]
		if _, err := l.run(ctx, "", "ip", "-n", l.p.Router, "-6", "route", "replace", p.VIP.String()+"/128", "via", node.Addr6.String()); err != nil {
			return err
		}
		if b := baseKey(p.Key); b == keyNginx || b == keyHAProxy {
			if _, err := l.run(ctx, "", "ip", "-n", node.Namespace, "addr", "add", p.VIP.String()+"/128", "dev", "lo", "nodad"); err != nil {
				return err
			}
		}
	}
	if !l.hasPath(keyDNAT + v6Suffix) {
		return nil
	}
	xlbNode := l.p.Nodes[l.path(keyDNAT+v6Suffix).node]
	for _, args := range [][]string{
		{"ip", "-n", l.p.Router, "-6", "route", "replace", l.p.ClientSegment.Subnet6.String(), "via", xlbNode.Addr6.String(), "table", dnatRuleTable},
		{"ip", "-n", l.p.Router, "-6", "rule", "add", "priority", "100", "from", l.p.BackendSegment.Subnet6.String(), "to", l.p.ClientSegment.Subnet6.String(),
			"ipproto", "tcp", "sport", strconv.Itoa(dnatPort), "iif", l.p.BackendSegment.Bridge, "lookup", dnatRuleTable},
	} {
		if _, err := l.run(ctx, "", args...); err != nil {
			return err
		}
	}
	return nil
}

// forwardingOf is the forwarding of the agent's service for xlb path key
// (of either family), and the backends' port it needs (0: the service's).
func forwardingOf(key string) (config.Forwarding, uint16) {
	switch baseKey(key) {
	case keyGUE:
		return config.DSRGUE, 0
	case keyNAT:
		return config.NAT, 0
	case keyDNAT:
		return config.DNAT, dnatPort
	}
	return config.DSRIPIP, 0
}

// agentServices6 is the agent's services of the IPv6 xlb paths, to the
// first n backends' IPv6 addresses.
func (l *benchLab) agentServices6(n int) []labrun.Service {
	var out []labrun.Service
	for _, p := range l.paths {
		if !isV6(p.Key) || !xlbKey(p.Key) {
			continue
		}
		fwd, port := forwardingOf(p.Key)
		out = append(out, labrun.Service{Name: "web-" + strings.TrimPrefix(p.Key, "xlb-"), VIP: p.VIP, Port: 80, Protocol: config.TCP,
			Forwarding: fwd, Backends: l.backendAddrs6(n), BackendPort: port})
	}
	return out
}

// configure6 makes the IPv6 DNAT, proxy and direct paths use the first n
// backends, as configure does for their IPv4 twins.
func (l *benchLab) configure6(ctx context.Context, n int) (ConfigSet6, error) {
	var cs ConfigSet6
	addrs := l.backendAddrs6(n)
	if k := keyNft + v6Suffix; l.hasPath(k) {
		if err := l.flushConntrack(l.path(k).Node); err != nil {
			return cs, err
		}
		cs.Nft = nftRules(l.path(k).VIP, addrs)
		if err := l.applyFile(ctx, k, "nft6.rules", cs.Nft, "nft", "-f"); err != nil {
			return cs, err
		}
	}
	if k := keyIptables + v6Suffix; l.hasPath(k) {
		if err := l.flushConntrack(l.path(k).Node); err != nil {
			return cs, err
		}
		cs.Iptables = iptablesRules(l.path(k).VIP, addrs)
		if err := l.applyFile(ctx, k, "ip6tables.rules", cs.Iptables, "ip6tables-legacy-restore"); err != nil {
			return cs, err
		}
	}
	var err error
	if k := keyNginx + v6Suffix; l.hasPath(k) {
		cs.NginxStream, err = l.restartProxy(ctx, k, "nginx-stream.conf", func(dir string) string {
			return streamNginx(l.path(k).VIP, addrs, dir)
		}, func(dir, conf string) []string { return []string{"nginx", "-p", dir, "-e", "stderr", "-c", conf} })
		if err != nil {
			return cs, err
		}
	}
	if k := keyHAProxy + v6Suffix; l.hasPath(k) {
		cs.HAProxy, err = l.restartProxy(ctx, k, "haproxy.cfg", func(dir string) string {
			return haproxyConfig(l.path(k).VIP, addrs, dir)
		}, func(dir, conf string) []string { return []string{"haproxy", "-db", "-f", conf} })
		if err != nil {
			return cs, err
		}
	}
	if k := keyDirect + v6Suffix; l.hasPath(k) {
		cs.DirectScript = directScript(addrs)
		if err := os.WriteFile(l.scriptPathOf(l.path(k)), []byte(cs.DirectScript), 0o644); err != nil {
			return cs, err
		}
	}
	return cs, nil
}

// scriptPathOf is where wrk's script for direct path p (of either
// family) is.
func (l *benchLab) scriptPathOf(p Path) string {
	if isV6(p.Key) {
		return filepath.Join(l.dir, "direct6.lua")
	}
	return l.scriptPath()
}

// familyRatio is IPv6 path key's best rate over its IPv4 twin's in mode
// with n backends; NaN for an IPv4 path or without both.
func (r *Report) familyRatio(key, mode string, n int) float64 {
	if !isV6(key) {
		return math.NaN()
	}
	return r.ratio(key, baseKey(key), mode, n)
}

// familyCell is what the requests table adds to an IPv6 path's rate: its
// ratio to the IPv4 twin's, " (0.97x)"; "" for an IPv4 path or without
// both.
func (r *Report) familyCell(key, mode string, n int) string {
	v := r.familyRatio(key, mode, n)
	if math.IsNaN(v) {
		return ""
	}
	return " (" + fmtRatio(v) + ")"
}

// familyTable is, per IPv6 path and mode, its best rate over its IPv4
// twin's for each backend count and the median of its rate over the
// twin's in the same round (the two run one after the other: order),
// and the lab's CPU time per request over the twin's with the most
// backends; "" without an IPv6 path.
func (r *Report) familyTable() string {
	var rows []string
	nMax := 0
	if len(r.BackendCounts) > 0 {
		nMax = slices.Max(r.BackendCounts)
	}
	for _, mode := range r.Modes {
		for _, p := range r.Paths {
			if !isV6(p.Key) {
				continue
			}
			row := fmt.Sprintf("| %s / %s | %s |", p.Name, r.pathName(baseKey(p.Key)), mode)
			for _, n := range r.BackendCounts {
				paired, _ := r.pairedRatio(p.Key, baseKey(p.Key), mode, n)
				row += fmt.Sprintf(" %s%s / %s |", fmtRatio(r.familyRatio(p.Key, mode, n)), star(r.disturbed(mode, n, p.Key, baseKey(p.Key))), fmtRatio(paired))
			}
			row += " " + fmtCostRatio(r, p.Key, baseKey(p.Key), mode, nMax) + " |"
			rows = append(rows, row)
		}
	}
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("| IPv6 / IPv4: best rounds / median of paired rounds | mode |")
	for _, n := range r.BackendCounts {
		fmt.Fprintf(&b, " %s |", backendsLabel(n))
	}
	fmt.Fprintf(&b, " lab CPU per request, IPv6 / IPv4 (%s) |\n|---|---|%s---:|\n", backendsLabel(nMax), strings.Repeat("---:|", len(r.BackendCounts)))
	b.WriteString(strings.Join(rows, "\n") + "\n")
	return b.String()
}

// joinAddrs writes addrs separated by sep.
func joinAddrs(addrs []netip.Addr, sep string) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, sep)
}

// ipv6Method is the document's paragraph on the IPv6 paths; "" for a
// run without them.
func (r *Report) ipv6Method() string {
	if !hasIPv6(r.Paths) {
		return ""
	}
	var without []string
	for _, p := range r.Paths {
		if !isV6(p.Key) && !slices.ContainsFunc(r.Paths, func(q Path) bool { return q.Key == p.Key+v6Suffix }) {
			without = append(without, p.Name)
		}
	}
	var b strings.Builder
	b.WriteString("**IPv6.** The lab is dual stack (`xlb lab up --ipv6`), and each path has an IPv6 twin, measured in the same run with the same settings and listed right below it (IPv6, or ip6tables, in its name): ")
	fmt.Fprintf(&b, "it sends to an IPv6 VIP in %s with the IPv4 VIP's last byte (fd00:99::1 and ::2 are the VIPs the backends accept, as 10.99.0.1 and .2), routed by the router to the twin's node, and reaches the backends' IPv6 addresses, where the same nginx listens on `[::]:80`. ", vip6Prefix)
	b.WriteString("xlb's twins are services of the same agent on the same node (IPv6-in-IPv6 and GUE over IPv6 to the backends, nat from the node's IPv6 address, dnat with the backends' IPv6 replies routed through the node); the DNAT twins run the same rules in nftables' ip6 family and with ip6tables-legacy, and the proxies' twins are nginx and HAProxy processes of their own listening on the IPv6 VIP, each on a node of its own as its IPv4 twin is; direct's twin connects to the backends' IPv6 addresses. ")
	b.WriteString("An IPv6 row gives, in parentheses, its best rate over its IPv4 twin's; the section [IPv6 beside IPv4](#ipv6-beside-ipv4) has those ratios and the CPU time per request of each pair. The latency runs, the plots and the bandwidth model are of the IPv4 paths only.")
	if len(without) > 0 {
		fmt.Fprintf(&b, " No IPv6 twin: %s.", strings.Join(without, ", "))
	}
	return b.String() + "\n\n"
}

// ipv6Section is the document's IPv6 beside IPv4 section; "" for a run
// without IPv6 paths.
func (r *Report) ipv6Section() string {
	t := r.familyTable()
	if t == "" {
		return ""
	}
	return "### IPv6 beside IPv4\n\n" +
		"Each IPv6 path's best rate over its IPv4 twin's, per mode and backend count (\\*: either round was disturbed), then the median over the rounds of its rate over its twin's in the same round (a twin runs right before or after its IPv4 path, so a pair shares most of what else the machine did then), and the lab's CPU time per request of the IPv6 path over its twin's (the CPU table below), which the shared machine's other work moves less than the rates. " +
		"An IPv6 packet's header is 20 bytes longer than IPv4's, and xlb's IPv6 encapsulation adds 40 bytes (IPv6-in-IPv6) or 52 (GUE over IPv6) instead of 20 or 32; the TCP payloads are the same.\n\n" + t + "\n"
}

// ipv6Configs writes the IPv6 paths' configurations of cs with block.
func (r *Report) ipv6Configs(cs *ConfigSet, block func(title, lang, text string)) {
	node := func(key string) string {
		for _, p := range r.Paths {
			if p.Key == key && p.Node != "" {
				return " on " + p.Node[strings.LastIndexByte(p.Node, '-')+1:]
			}
		}
		return ""
	}
	for _, c := range []struct{ title, key, lang, text string }{
		{"nftables over IPv6, `nft -f`", keyNft, "", cs.IPv6.Nft},
		{"ip6tables, `ip6tables-legacy-restore`", keyIptables, "", cs.IPv6.Iptables},
		{"nginx stream over IPv6", keyNginx, "nginx", cs.IPv6.NginxStream},
		{"HAProxy over IPv6, `haproxy -db -f`", keyHAProxy, "", cs.IPv6.HAProxy},
		{"wrk's script for direct IPv6", keyDirect, "lua", cs.IPv6.DirectScript},
	} {
		if c.text != "" {
			block(c.title+node(c.key+v6Suffix), c.lang, c.text)
		}
	}
}
