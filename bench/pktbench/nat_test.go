package main

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/testbed/lab"
)

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func TestReplyTargets(t *testing.T) {
	be1 := ap("10.0.3.2:7777")
	replies := []replyTuple{
		{ap("10.0.3.2:7777"), ap("10.0.1.2:20005")},
		{ap("10.0.3.3:7777"), ap("10.0.1.2:20001")}, // backend 2's: left out
		{ap("10.0.3.2:7777"), ap("10.0.1.2:20003")},
		{ap("10.0.3.2:7777"), ap("10.0.1.2:20005")}, // twice: once in the list
		{ap("10.0.3.2:53"), ap("10.0.1.2:20009")},   // another port of backend 1
		// An IPv4-mapped address is the same backend and destination.
		{ap("[::ffff:10.0.3.2]:7777"), ap("[::ffff:10.0.1.2]:20004")},
	}
	dst, ports, err := replyTargets(be1, replies)
	if err != nil {
		t.Fatal(err)
	}
	if dst != netip.MustParseAddr("10.0.1.2") || !slices.Equal(ports, []uint16{20003, 20004, 20005}) {
		t.Fatalf("got %s %v, want 10.0.1.2 [20003 20004 20005]", dst, ports)
	}
	if _, _, err := replyTargets(be1, append(replies, replyTuple{be1, ap("10.0.2.2:33000")})); err == nil || !strings.Contains(err.Error(), "one address") {
		t.Errorf("replies to two addresses: err %v", err)
	}
	if _, _, err := replyTargets(ap("10.0.3.9:7777"), replies); err == nil || !strings.Contains(err.Error(), "no session") {
		t.Errorf("no replies from the backend: err %v", err)
	}
	var many []replyTuple
	for p := range portSlots + 1 {
		many = append(many, replyTuple{be1, netip.AddrPortFrom(dst, uint16(1024+p))})
	}
	if _, _, err := replyTargets(be1, many); err == nil {
		t.Errorf("%d ports: no error", len(many))
	}
}

func TestSessionTuples(t *testing.T) {
	ss := &api.Sessions{Services: []api.ServiceSessions{{Name: "pkt-nat", Sessions: []api.Session{
		{Client: ap("10.0.2.2:32768"), Backend: ap("10.0.3.2:7777"), Source: ap("10.0.1.2:20000")},
		{Client: ap("10.0.2.2:32769"), Backend: ap("10.0.3.3:7777"), Source: ap("10.0.1.2:20001")},
	}}}}
	got, err := sessionTuples(ss)
	if err != nil {
		t.Fatal(err)
	}
	want := []replyTuple{{ap("10.0.3.2:7777"), ap("10.0.1.2:20000")}, {ap("10.0.3.3:7777"), ap("10.0.1.2:20001")}}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	ss.Services[0].More = true
	if _, err := sessionTuples(ss); err == nil {
		t.Error("a listing cut short: no error")
	}
}

func TestConntrackTuples(t *testing.T) {
	flows := []*netlink.ConntrackFlow{
		{Forward: netlink.IPTuple{Protocol: 17, SrcIP: net.ParseIP("10.0.2.2"), SrcPort: 32768, DstIP: net.ParseIP("10.99.0.1"), DstPort: 7777},
			Reverse: netlink.IPTuple{Protocol: 17, SrcIP: net.ParseIP("10.0.3.2"), SrcPort: 7777, DstIP: net.ParseIP("10.0.1.2"), DstPort: 41234}},
		{Reverse: netlink.IPTuple{Protocol: 6, SrcIP: net.ParseIP("10.0.3.2"), SrcPort: 7777, DstIP: net.ParseIP("10.0.1.2"), DstPort: 5000}},
	}
	got := conntrackTuples(flows)
	want := []replyTuple{{ap("10.0.3.2:7777"), ap("10.0.1.2:41234")}}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v (UDP only, the reply tuple, IPv4 addresses)", got, want)
	}
}

func TestNFTMasqRules(t *testing.T) {
	vip := netip.MustParseAddr("10.99.0.1")
	bs := []lab.Host{{Addr: netip.MustParseAddr("10.0.3.2")}, {Addr: netip.MustParseAddr("10.0.3.3")}}
	base, masq := nftRules(vip, bs), nftMasqRules(vip, bs)
	// The DNAT part is the nftables variant's, unchanged.
	if !strings.HasPrefix(masq, strings.TrimSuffix(base, "}\n")) {
		t.Errorf("the masquerade rules do not start with the nftables variant's:\n%s", masq)
	}
	for _, want := range []string{"type nat hook postrouting priority srcnat", "ct status dnat masquerade fully-random"} {
		if !strings.Contains(masq, want) {
			t.Errorf("lacks %q:\n%s", want, masq)
		}
	}
	if strings.Count(masq, "{") != strings.Count(masq, "}") || !strings.HasSuffix(masq, "\t}\n}\n") {
		t.Errorf("the postrouting chain is not inside the table:\n%s", masq)
	}
}

// natRun makes a NAT-section run.
func natRun(v, dir string, round int, pps, ns float64) Run {
	r := mainRun(v, round, pps, ns)
	r.Section, r.Direction = sectionNAT, dir
	return r
}

func TestSummarizeNAT(t *testing.T) {
	if got := summarizeNAT([]Run{mainRun(vRouted, 1, 1, 5000)}); got != nil {
		t.Fatalf("no NAT runs: %+v, want none", got)
	}
	var runs []Run
	for round, busy := range []float64{1, 2} { // round 2: wall-clock rates halved
		round++
		runs = append(runs,
			mainRun(vDirect, round, 300_000/busy, 2500), mainRun(vRouted, round, 150_000/busy, 5000),
			mainRun(vXLBGUE, round, 1, 4000), // not a NAT row
			natRun(vDirect, dirReverse, round, 250_000/busy, 3000), natRun(vRouted, dirReverse, round, 120_000/busy, 6000),
			natRun(vXLBNAT, dirForward, round, 140_000/busy, 4800+float64(round)), natRun(vXLBNAT, dirReverse, round, 110_000/busy, 6200),
			natRun(vNFTMasq, dirForward, round, 100_000/busy, 6400), natRun(vNFTMasq, dirReverse, round, 90_000/busy, 7000))
	}
	for dir, ns := range map[string]float64{dirForward: 120, dirReverse: 150} {
		runs = append(runs, Run{Section: sectionNATStats, Variant: vXLBNAT, Direction: dir, Delivered: 1, PPS: 1,
			BPF: map[string]BPFRun{"node1/eth0": {Runs: 10, NsPerRun: ns, RunsPerPacket: 1}}})
	}
	got := summarizeNAT(runs)
	var rows []string
	for _, s := range got {
		rows = append(rows, s.Variant+" "+s.Direction)
	}
	wantRows := []string{"direct forward", "direct reverse", "routed forward", "routed reverse", "xlb-nat forward", "xlb-nat reverse", "nftables-masq forward", "nftables-masq reverse"}
	if !slices.Equal(rows, wantRows) {
		t.Fatalf("rows %q, want %q", rows, wantRows)
	}
	f, r := got[4], got[5]
	if f.BPF["node1/eth0"].NsPerRun != 120 || r.BPF["node1/eth0"].NsPerRun != 150 || got[7].BPF != nil {
		t.Errorf("BPF figures not taken from the statistics runs of the same variant and direction: %v, %v, %v", f.BPF, r.BPF, got[7].BPF)
	}
	if f.Rounds != 2 || f.NsPerPkt != 4801.5 || f.OverRoutedNs != -198.5 || f.PPS != 105_000 || f.PPSMin != 70_000 {
		t.Errorf("xlb-nat forward %+v", f)
	}
	// Reverse: over the reverse floor, and over its own forward run of
	// the same round (6200-4801, 6200-4802).
	if r.OverRoutedNs != 200 || r.ReverseOverForwardNs != 1398.5 || f.ReverseOverForwardNs != 0 {
		t.Errorf("xlb-nat reverse over routed %v, over forward %v (forward row %v)", r.OverRoutedNs, r.ReverseOverForwardNs, f.ReverseOverForwardNs)
	}
	if r.CoreVsNFTMasq != round2(7000.0/6200) || got[7].CoreVsNFTMasq != 0 {
		t.Errorf("per-CPU ratios to nftables-masq: %v, and nftables-masq's own %v", r.CoreVsNFTMasq, got[7].CoreVsNFTMasq)
	}
	// The forward floors come from the main comparison.
	if got[2].NsPerPkt != 5000 || got[3].NsPerPkt != 6000 {
		t.Errorf("routed forward %v, reverse %v", got[2].NsPerPkt, got[3].NsPerPkt)
	}

	rep := &Report{Settings: sizes(false), Runs: runs, NAT: got}
	rep.Settings.Flows = 4096
	md := natSection(rep)
	for _, want := range []string{
		"### NAT: forward and reverse", "| `xlb-nat` | reverse | 82k (55k–110k) | 0.00% | 6200 | 161k | 1.13x | +200 |",
		"| `routed` | reverse | 90k (60k–120k) | 0.00% | 6000 | 167k | 1.17x | – |",
		"`xlb-nat`: 6200 ns per packet reverse against 4802 forward (+1398 ns", "added +200 ns to a reply and -198 ns to a request",
		"its XDP program took 150 ns per reply and 120 ns per request.", "| +200 | 150 (1.00) |", "| +1000 | – |",
		"200000 frames after 20000 that warm up", "sends 49152 frames to the VIP (12 per flow",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the NAT section lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "NaN") || strings.Contains(md, "%!") {
		t.Errorf("formatting error:\n%s", md)
	}
	// In the whole section, and its JSON has no NaN (that would not encode).
	rep.Summary = summarize(runs)
	if err := benchutil.CheckSection(markdown(rep, "x.json", plotFiles{}), docBegin, docEnd); err != nil {
		t.Fatal(err)
	}
}
