package main

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// TestPrefixList: --chain-from and --chain-to take IPv4 and IPv6
// addresses (as /32 or /128) and CIDR prefixes, repeated or
// comma-separated, and refuse anything else with the value in the
// message.
func TestPrefixList(t *testing.T) {
	var p prefixList
	for _, s := range []string{"10.0.1.2", "10.0.3.0/24, 192.0.2.7", "fd00:1::2,fd00:3::/64"} {
		if err := p.Set(s); err != nil {
			t.Fatalf("Set(%q): %v", s, err)
		}
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.1.2/32"), netip.MustParsePrefix("10.0.3.0/24"), netip.MustParsePrefix("192.0.2.7/32"),
		netip.MustParsePrefix("fd00:1::2/128"), netip.MustParsePrefix("fd00:3::/64")}
	if !slices.Equal(p, want) {
		t.Errorf("got %v, want %v", p, want)
	}
	for _, bad := range []string{"", "node1", "::ffff:10.0.1.2", "::ffff:10.0.0.0/104", "fe80::1%eth0", "fd00:3::1/64", "10.0.3.1/24", "10.0.3.0/33"} {
		var q prefixList
		if err := q.Set(bad); err == nil {
			t.Errorf("Set(%q): no error", bad)
		}
	}
	var q prefixList
	if err := q.Set("10.0.3.1/24"); err == nil || !strings.Contains(err.Error(), "10.0.3.0/24") {
		t.Errorf("host bits: %v, want the masked prefix suggested", err)
	}
}

// TestBackendChainFlagsTogether: one of --chain-from and --chain-to
// without the other could never chain, and is refused before anything
// is set up.
func TestBackendChainFlagsTogether(t *testing.T) {
	for _, args := range [][]string{
		{"--interface", "lo", "--vip", "10.99.0.1", "--chain-from", "10.0.1.2"},
		{"--interface", "lo", "--vip", "10.99.0.1", "--chain-to", "10.0.3.0/24"},
	} {
		err := runBackend(args)
		if err == nil || !strings.Contains(err.Error(), "--chain-from and --chain-to go together") {
			t.Errorf("runBackend(%q): %v, want the two flags' rule", args, err)
		}
	}
}

// TestBackendAttachMode: an attach mode the agent's configuration does
// not know is refused before anything is set up, with the names to use.
func TestBackendAttachMode(t *testing.T) {
	err := runBackend([]string{"--interface", "lo", "--vip", "10.99.0.1", "--attach-mode", "offload"})
	if err == nil || err.Error() != `--attach-mode: "offload" is not an attach mode; use auto (native, falling back to generic), native or generic` {
		t.Errorf("got %v, want the attach modes", err)
	}
}

// TestBackendVIPFlag: --vip takes IPv6 VIPs beside IPv4 ones, repeated
// or comma-separated, and refuses what the configuration refuses as a
// VIP, or the backend program cannot serve, saying why.
func TestBackendVIPFlag(t *testing.T) {
	var v vipList
	for _, s := range []string{"10.99.0.1", "2001:db8::10, fd00:99::1"} {
		if err := v.Set(s); err != nil {
			t.Fatalf("Set(%q): %v", s, err)
		}
	}
	want := []netip.Addr{netip.MustParseAddr("10.99.0.1"), netip.MustParseAddr("2001:db8::10"), netip.MustParseAddr("fd00:99::1")}
	if !slices.Equal(v, want) {
		t.Errorf("got %v, want %v", v, want)
	}
	for in, want := range map[string]string{
		"fe80::1":         "link-local",
		"::ffff:10.0.0.1": "write it as plain IPv4 (10.0.0.1)",
		"ff02::1":         "multicast",
		"vip":             `"vip" is not an IP address`,
		"::":              "unspecified",
	} {
		var q vipList
		if err := q.Set(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--vip %s: %v, want %q", in, err, want)
		}
	}
}

// The node's own addresses, which no endpoint is translated to, are its
// IPv4 and global IPv6 ones: an IPv6 hostNetwork pod is told apart too.
func TestHostAddrsOf(t *testing.T) {
	ipn := func(s string) net.Addr {
		p := netip.MustParsePrefix(s)
		return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
	}
	got, err := hostAddrsOf("eth0", []net.Addr{ipn("10.0.2.2/24"), ipn("fe80::1/64"), ipn("fd00:10:2::2/64")})
	if want := []netip.Addr{netip.MustParseAddr("10.0.2.2"), netip.MustParseAddr("fd00:10:2::2")}; err != nil || !slices.Equal(got, want) {
		t.Errorf("dual stack: %v, %v; want %v", got, err, want)
	}
	if got, err := hostAddrsOf("eth0", []net.Addr{ipn("fe80::1/64"), ipn("fd00:10:2::2/64")}); err != nil || len(got) != 1 {
		t.Errorf("IPv6 only: %v, %v; want the global address", got, err)
	}
	if _, err := hostAddrsOf("eth0", []net.Addr{ipn("fe80::1/64")}); err == nil || !strings.Contains(err.Error(), "neither an IPv4 nor a global IPv6 address") {
		t.Errorf("link-local only: %v", err)
	}
}
