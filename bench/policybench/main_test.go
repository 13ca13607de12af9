package main

import (
	"net/netip"
	"strings"
	"testing"
)

func TestIPTablesRules(t *testing.T) {
	ps := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("198.51.100.7/32"), netip.MustParsePrefix("203.0.113.0/25")}
	client := netip.MustParseAddr("10.0.2.2")
	head := "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
	for _, tc := range []struct {
		n     int
		first bool
		want  string
	}{
		{0, false, head + "COMMIT\n"},
		{0, true, head + "COMMIT\n"},
		{3, false, head + "-A FORWARD -s 192.0.2.0/24 -j DROP\n-A FORWARD -s 198.51.100.7/32 -j DROP\n-A FORWARD -s 203.0.113.0/25 -j DROP\nCOMMIT\n"},
		// The accepting rule counts as one of the N.
		{1, true, head + "-A FORWARD -s 10.0.2.2/32 -j ACCEPT\nCOMMIT\n"},
		{3, true, head + "-A FORWARD -s 10.0.2.2/32 -j ACCEPT\n-A FORWARD -s 198.51.100.7/32 -j DROP\n-A FORWARD -s 203.0.113.0/25 -j DROP\nCOMMIT\n"},
	} {
		if got := iptablesRules(ps[:tc.n], client, tc.first); got != tc.want {
			t.Errorf("%d rules, first %v:\n%s\nwant:\n%s", tc.n, tc.first, got, tc.want)
		}
		if got := strings.Count(iptablesRules(ps[:tc.n], client, tc.first), "-A FORWARD"); got != tc.n {
			t.Errorf("%d rules, first %v: %d rules written", tc.n, tc.first, got)
		}
	}
}

func TestNFTRules(t *testing.T) {
	got := nftRules([]netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("198.51.100.7/32")})
	for _, want := range []string{
		"add table ip xpolicy\ndelete table ip xpolicy\n",
		"type ipv4_addr\n\t\tflags interval\n\t\tauto-merge\n",
		"elements = { 192.0.2.0/24, 198.51.100.7/32 }",
		"type filter hook forward priority filter; policy accept;\n\t\tip saddr @deny drop",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in:\n%s", want, got)
		}
	}
	if strings.Contains(nftRules(nil), "elements") {
		t.Error("an empty set with elements")
	}
}
