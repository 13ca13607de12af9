package main

import (
	"fmt"
	"net/netip"
	"strings"
)

// The variants, in report order: xlb's deny list, then the kernel's
// filters on the node's forwarding path, as the seed report measured
// them (iptables walked to its end, iptables matched by its first rule)
// and as nftables holds a list (a set: one lookup).
const (
	vXLB       = "xlb"
	vIPTNone   = "iptables-no-match"
	vIPTFirst  = "iptables-match-first"
	vNFTSet    = "nftables-set"
	nftTable   = "xpolicy"
	iperfPort  = 5201
	rrRequests = 1000
)

var variantOrder = []string{vXLB, vIPTNone, vIPTFirst, vNFTSet}

// variantWhat says what each variant's path and rules are.
var variantWhat = map[string]string{
	vXLB:      "xlb agent on the node: its XDP program checks the source in the deny list (policy.deny, N prefixes, none holding the client), then encapsulates to the backend (dsr-ipip); the reply goes straight to the client",
	vIPTNone:  "no xlb: the node forwards the client's packets to the backend; N rules `-A FORWARD -s PREFIX -j DROP` in iptables-legacy's filter table, none matching the client, so every packet walks all N (the seed's \"no matching rule\")",
	vIPTFirst: "the same path; the first of the N rules accepts the client (`-s CLIENT -j ACCEPT`), the other N-1 drop other prefixes, so every packet stops at the first (the seed's \"top of chain matching rule\")",
	vNFTSet:   "the same path; nftables, one rule `ip saddr @deny drop` against an interval set of the N prefixes",
}

// iptablesRules is the filter table of an iptables variant, for
// iptables-legacy-restore: the N prefixes as DROP rules in FORWARD, after
// a rule that accepts client when acceptFirst is set (then the prefixes
// fill the other N-1 rules). Zero rules: an empty FORWARD chain.
func iptablesRules(prefixes []netip.Prefix, client netip.Addr, acceptFirst bool) string {
	var b strings.Builder
	b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	if acceptFirst && len(prefixes) > 0 {
		fmt.Fprintf(&b, "-A FORWARD -s %s -j ACCEPT\n", netip.PrefixFrom(client, 32))
		prefixes = prefixes[1:]
	}
	for _, p := range prefixes {
		fmt.Fprintf(&b, "-A FORWARD -s %s -j DROP\n", p)
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// nftRules is the nftables variant's table, for nft -f: an interval set
// of the prefixes (overlaps merged: auto-merge) that one rule in the
// forward hook checks every packet's source against. The file replaces
// the table whole. No prefixes: none, and nftDelete removes the table.
func nftRules(prefixes []netip.Prefix) string {
	var b strings.Builder
	fmt.Fprintf(&b, "add table ip %s\ndelete table ip %s\n", nftTable, nftTable)
	fmt.Fprintf(&b, "table ip %s {\n\tset deny {\n\t\ttype ipv4_addr\n\t\tflags interval\n\t\tauto-merge\n", nftTable)
	if len(prefixes) > 0 {
		b.WriteString("\t\telements = { ")
		for i, p := range prefixes {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(p.String())
		}
		b.WriteString(" }\n")
	}
	b.WriteString("\t}\n\tchain forward {\n\t\ttype filter hook forward priority filter; policy accept;\n\t\tip saddr @deny drop\n\t}\n}\n")
	return b.String()
}
