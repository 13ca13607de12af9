package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/testbed/netns"
)

// A dual-stack lab (Spec.IPv6): every host reaches the backends over
// IPv6 through the router, the router routes the IPv6 VIP prefix over
// the nodes' IPv6 addresses (and SetNodes moves that route with the
// IPv4 one), flows spread over the nodes by their ports, the backends
// hold the IPv6 VIPs, and Down removes it all.
func TestLabIPv6(t *testing.T) {
	needRoot(t)
	prefix := testPrefix(t, 6)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	p, err := Up(ctx, Spec{Prefix: prefix, Nodes: 3, Backends: 2, Binary: xlbBinary, IPv6: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("dual-stack lab up in %s", time.Since(start).Round(time.Millisecond))

	for _, tt := range []struct{ ns, key, want string }{
		{p.Router, "net.ipv6.conf.all.forwarding", "1"},
		{p.Router, "net.ipv6.fib_multipath_hash_policy", "1"},
		{p.Nodes[0].Namespace, "net.ipv6.conf.all.forwarding", "1"},
		{p.Clients[0].Namespace, "net.ipv6.conf.all.forwarding", "0"},
		{p.Backends[1].Namespace, "net.ipv6.conf.default.accept_dad", "0"},
	} {
		if got := inNS(t, tt.ns, "sysctl", "-n", tt.key); got != tt.want {
			t.Errorf("%s: %s = %s, want %s", tt.ns, tt.key, got, tt.want)
		}
	}

	st, err := ReadStatus(prefix)
	if err != nil {
		t.Fatal(err)
	}
	ifaces := map[string]InterfaceStatus{}
	for _, ns := range st.Namespaces {
		for _, i := range ns.Interfaces {
			ifaces[ns.Name+"/"+i.Name] = i
		}
	}
	for _, h := range p.Hosts() {
		want := []netip.Prefix{netip.PrefixFrom(h.Addr, 24), netip.PrefixFrom(h.Addr6, 64)}
		if got := ifaces[h.Namespace+"/eth0"].Addrs; !slices.Equal(got, want) {
			t.Errorf("%s eth0 addresses %v, want %v", h.Name, got, want)
		}
	}

	client := httpClientIn(p.Clients[0].Namespace)
	defer client.CloseIdleConnections()
	for _, be := range p.Backends {
		url := fmt.Sprintf("http://%s/", net.JoinHostPort(be.Addr6.String(), strconv.Itoa(HTTPPort)))
		if body, hdr := get(t, client, url); body != be.Name+"\n" || hdr.Get(BackendHeader) != be.Name {
			t.Errorf("GET %s = %q, want %q", url, body, be.Name)
		}
		if reply, err := udpEcho6(p.Clients[0].Namespace, netip.AddrPortFrom(be.Addr6, UDPPort), "ping"); err != nil || reply != be.Name+":ping" {
			t.Errorf("UDP echo over IPv6 from %s = %q, %v", be.Name, reply, err)
		}
		lo := ifaces[be.Namespace+"/lo"].Addrs
		for _, vip := range p.VIPs6 {
			if !slices.Contains(lo, netip.PrefixFrom(vip, 128)) {
				t.Errorf("%s: lo has %v, want the IPv6 VIP %s/128 (xlb backend --vip)", be.Name, lo, vip)
			}
		}
	}

	nodes6 := func(ks ...int) []netip.Addr {
		var a []netip.Addr
		for _, k := range ks {
			a = append(a, p.Nodes[k-1].Addr6)
		}
		return a
	}
	check := func(want []netip.Addr) {
		t.Helper()
		for _, vip := range p.VIPs6 {
			if got, err := RouteNextHops(ctx, p, vip); err != nil || !slices.Equal(got, want) {
				t.Errorf("RouteNextHops(%s) = %v, %v; want %v", vip, got, err, want)
			}
		}
	}
	check(nodes6(1, 2, 3))
	if err := SetNodes(prefix, []int{3, 1}); err != nil {
		t.Fatal(err)
	}
	check(nodes6(1, 3))
	if got, err := Nexthops(prefix); err != nil || !slices.Equal(slices.SortedFunc(slices.Values(got), netip.Addr.Compare), []netip.Addr{p.Nodes[0].Addr, p.Nodes[2].Addr}) {
		t.Errorf("IPv4 next hops after SetNodes(3, 1): %v, %v", got, err)
	}
	if err := SetNodes(prefix, nil); err != nil {
		t.Fatal(err)
	}
	check(nil)
	if err := SetNodes(prefix, []int{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	check(nodes6(1, 2, 3))
	if st, err := ReadStatus(prefix); err != nil || !slices.ContainsFunc(st.Routes, func(r Route) bool { return r.Dst == p.VIPPrefix6 && len(r.Nexthops) == 3 }) {
		t.Errorf("status routes %+v, %v; want %s over 3 nodes", st.Routes, err, p.VIPPrefix6)
	}
	// The router hashes IPv6 flows on their ports too.
	seen := map[string]bool{}
	for sport := 1000; sport < 1064; sport++ {
		out := inNS(t, p.Router, "ip", "-6", "route", "get", p.VIPs6[0].String(), "from", p.Clients[0].Addr6.String(),
			"iif", p.ClientSegment.Bridge, "ipproto", "tcp", "sport", strconv.Itoa(sport), "dport", "80")
		f := strings.Fields(out)
		if i := slices.Index(f, "via"); i >= 0 && i+1 < len(f) {
			seen[f[i+1]] = true
		}
	}
	if len(seen) != len(p.Nodes) {
		t.Errorf("64 IPv6 flows went via %v, want all %d nodes", seen, len(p.Nodes))
	}

	if err := Down(prefix); err != nil {
		t.Fatal(err)
	}
	if left, err := labNamespaces(prefix); err != nil || len(left) > 0 {
		t.Errorf("after Down: namespaces %v, %v", left, err)
	}
}

// udpEcho6 is udpEcho over IPv6.
func udpEcho6(ns string, addr netip.AddrPort, payload string) (string, error) {
	var reply string
	err := netns.Do(ns, func() error {
		c, err := net.Dial("udp6", addr.String())
		if err != nil {
			return err
		}
		defer c.Close()
		buf := make([]byte, 2048)
		for range 5 { // the first datagram may wait for neighbour discovery
			if _, err := c.Write([]byte(payload)); err != nil {
				return err
			}
			c.SetReadDeadline(time.Now().Add(time.Second))
			if n, err := c.Read(buf); err == nil {
				reply = string(buf[:n])
				return nil
			}
		}
		return errors.New("no reply")
	})
	return reply, err
}
