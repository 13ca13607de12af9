package main

import (
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/api"
)

func TestPrintStatusHealth(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 10, 0, time.UTC)
	st := &api.Status{
		Version: "v1", Node: api.Node{Interface: "eth0", Address: netip.MustParseAddr("10.0.1.2"), AttachMode: "native", PinPath: "/sys/fs/bpf/xlb/1-eth0",
			FlowHash: "fmix64", TableSize: 65537, PingVIPs: true},
		Config: api.Config{Path: "x.yaml", Generation: 1, Result: api.ResultOK},
		Services: []api.Service{{
			Name: "web", VIP: netip.MustParseAddr("10.99.0.1"), Port: 80, Protocol: "tcp", Forwarding: "dsr-gue", Flows: "daisy-chain", Affinity: "client-ip",
			Installed: true, State: api.StateDown, Counters: api.Counters{Packets: 7, Bytes: 700},
			Backends: []api.Backend{
				{Address: netip.MustParseAddr("10.0.3.2"), Port: 80, Weight: 1, Counters: api.Counters{Packets: 5, Bytes: 500},
					Health: api.Health{Check: "http", State: api.StateDown, LastCheck: now.Add(-340 * time.Millisecond),
						LastError: "GET http://10.0.3.2:80/:\nstatus 503", LatencyMs: 1.24}},
				{Address: netip.MustParseAddr("10.0.3.3"), Port: 80, Weight: 0,
					Health: api.Health{Check: "tcp", State: api.StateUnknown}},
				{Address: netip.MustParseAddr("10.0.3.4"), Port: 80, Weight: 2,
					Health: api.Health{Check: "none", State: api.StateUp}},
			},
		}},
	}
	var b strings.Builder
	if err := printStatus(&b, st, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Logf("\n%s", out)
	lines := strings.Split(out, "\n")
	find := func(prefix string) []string {
		t.Helper()
		for _, l := range lines {
			if strings.HasPrefix(strings.TrimSpace(l), prefix) {
				return strings.Fields(l)
			}
		}
		t.Fatalf("no line starting with %q in:\n%s", prefix, out)
		return nil
	}
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"Node:", []string{"Node:", "eth0", "10.0.1.2,", "XDP", "native,", "pinned", "at", "/sys/fs/bpf/xlb/1-eth0;", "flow", "hash", "fmix64,", "tables", "of", "65537"}},
		{"SERVICE", []string{"SERVICE", "ADDRESS", "FORWARDING", "WEIGHT", "HEALTH", "LAST", "CHECK", "PACKETS", "BYTES", "LAST", "ERROR"}},
		{"web", []string{"web", "10.99.0.1:80/tcp", "dsr-gue,", "daisy-chain,", "affinity", "client-ip", "down", "7", "700"}},
		{"backend  10.0.3.2:80", []string{"backend", "10.0.3.2:80", "1", "down", "(http)", "300ms", "ago,", "took", "1.2ms", "5", "500", "GET", "http://10.0.3.2:80/:", "status", "503"}},
		{"backend  10.0.3.3:80", []string{"backend", "10.0.3.3:80", "0", "unknown", "(tcp)", "-", "0", "0"}},
		{"backend  10.0.3.4:80", []string{"backend", "10.0.3.4:80", "2", "-", "(no", "check)", "-", "0", "0"}},
	} {
		if got := find(tc.prefix); strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("line %q:\n got %q\nwant %q", tc.prefix, got, tc.want)
		}
	}
	// The columns line up: HEALTH starts at the same place in every row,
	// and so does the error under LAST ERROR.
	col := strings.Index(lines[4], "HEALTH")
	for _, l := range lines[5:8] {
		if len(l) <= col || l[col-1] != ' ' || l[col] == ' ' {
			t.Errorf("HEALTH column (at %d) not aligned in %q", col, l)
		}
	}
	if strings.Index(lines[6], "GET") != strings.Index(lines[4], "LAST ERROR") {
		t.Errorf("the error is not under LAST ERROR:\n%s\n%s", lines[4], lines[6])
	}
	for _, l := range lines {
		if strings.TrimRight(l, " ") != l {
			t.Errorf("trailing blanks in %q", l)
		}
	}
}

func TestPrintStatusBGP(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 10, 0, time.UTC)
	st := &api.Status{
		Version: "v1", Node: api.Node{Interface: "eth0", Address: netip.MustParseAddr("10.0.1.2"), AttachMode: "native", PinPath: "/sys/fs/bpf/xlb/1-eth0"},
		Config: api.Config{Path: "x.yaml", Generation: 1, Result: api.ResultOK},
		BGP: &api.BGP{
			ASN: 65001, RouterID: netip.MustParseAddr("10.0.1.2"), NextHop: netip.MustParseAddr("10.0.1.2"),
			Peers: []api.Peer{
				{Address: netip.MustParseAddr("10.0.1.1"), ASN: 65000, State: "established", Since: now.Add(-90 * time.Second),
					PrefixesSent: ptr(2), PrefixesReceived: ptr(0), MessagesReceived: ptr[uint64](120), MessagesSent: ptr[uint64](118),
					CountersAt: now.Add(-time.Second), MaxPrefixes: 10000,
					Flaps: 1, LastError: "hold timer expired: nothing heard from the peer within the hold time",
					BFD:             &api.BFDSession{State: "up", RemoteState: "up", Diag: "none", DetectionMs: 300},
					GracefulRestart: &api.GracefulRestart{RestartTimeSeconds: 120, Negotiated: ptr(true)}},
				{Address: netip.MustParseAddr("10.0.1.254"), ASN: 65000, State: "idle", Since: now.Add(-1500 * time.Millisecond),
					PrefixesSent: ptr(0), PrefixesReceived: ptr(0), MessagesReceived: ptr[uint64](7), MessagesSent: ptr[uint64](9),
					CountersAt: now.Add(-12 * time.Second), MaxPrefixes: 10000,
					Flaps: 3, HeldDown: "BFD session down\n(control detection time expired)", LastError: "forced down: BFD session down\n(control detection time expired)",
					BFD:             &api.BFDSession{State: "down", RemoteState: "up", Diag: "control detection time expired"},
					GracefulRestart: &api.GracefulRestart{RestartTimeSeconds: 60, Negotiated: ptr(false)}},
				{Address: netip.MustParseAddr("10.0.9.9"), ASN: 65099, State: "idle", MaxPrefixes: 10000,
					GracefulRestart: &api.GracefulRestart{RestartTimeSeconds: 300}},
				{Address: netip.MustParseAddr("10.0.1.3"), ASN: 65003, State: "idle", Since: now.Add(-12 * time.Second),
					PrefixesSent: ptr(0), PrefixesReceived: ptr(0), MessagesReceived: ptr[uint64](30), MessagesSent: ptr[uint64](4),
					CountersAt: now, MaxPrefixes: 100, Flaps: 2,
					PrefixLimit: &api.PrefixLimit{Limit: 100, At: now.Add(-12 * time.Second), Times: 2, RetryAt: now.Add(48 * time.Second)},
					LastError:   "sent NOTIFICATION: Cease / maximum number of prefixes reached (the peer sent more than its limit of 100, maxPrefixes)"},
			},
			Routes: []api.Route{
				{Prefix: netip.MustParsePrefix("10.99.0.1/32"), Announced: true},
				{Prefix: netip.MustParsePrefix("10.99.0.2/32"), Reason: "no healthy backend"},
				{Prefix: netip.MustParsePrefix("10.99.0.3/32"), Announced: true, Reason: "withdrawal failed: speaker stopped; retrying in 2s"},
				{Prefix: netip.MustParsePrefix("10.99.0.0/24"), Announced: true, Peers: []netip.Addr{netip.MustParseAddr("10.0.1.1"), netip.MustParseAddr("10.0.1.254")}},
			},
		},
	}
	var b strings.Builder
	if err := printStatus(&b, st, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Logf("\n%s", out)
	lines := strings.Split(out, "\n")
	line := func(prefix string) string {
		t.Helper()
		for _, l := range lines {
			if strings.HasPrefix(strings.TrimSpace(l), prefix) {
				return l
			}
		}
		t.Fatalf("no line starting with %q in:\n%s", prefix, out)
		return ""
	}
	fields := func(prefix string) string { return strings.Join(strings.Fields(line(prefix)), " ") }
	for _, tc := range []struct{ prefix, want string }{
		{"BGP:", "BGP: AS 65001, router ID 10.0.1.2, next hop 10.0.1.2"},
		{"PEER", "PEER AS STATE SINCE SENT RECEIVED/MAX MSGS IN/OUT FLAPS BFD LAST ERROR"},
		{"10.0.1.1 ", "10.0.1.1 65000 established 1m30s ago 2 0/10000 120/118 1 up (detect 300ms) hold timer expired: nothing heard from the peer within the hold time"},
		{"10.0.1.254", "10.0.1.254 65000 idle (held down: BFD session down (control detection time expired)) 2s ago 0 0/10000 7/9 3 down forced down: BFD session down (control detection time expired)"},
		{"10.0.9.9", "10.0.9.9 65099 idle - ? ?/10000 ?/? 0 - -"},
		{"10.0.1.3 ", "10.0.1.3 65003 idle (held down: over maxPrefixes) 12s ago 0 0/100 30/4 2 - sent NOTIFICATION: Cease / maximum number of prefixes reached (the peer sent more than its limit of 100, maxPrefixes)"},
		{"peer 10.0.1.3:", "peer 10.0.1.3: session closed 12s ago, because the peer sent more than 100 prefixes (maxPrefixes), 2 times in a row (each hold twice the last); it may re-form in 48s. " +
			"xlb imports no routes: make the router send this node none (or a default route only), or raise maxPrefixes (bgp.peers[].maxPrefixes, or the BGPPeer's spec.maxPrefixes), which re-forms the session at once"},
		{"peer 10.0.9.9:", "peer 10.0.9.9: counters unknown (?): the BGP speaker has not reported them since the session last changed state; " +
			"it answers between two UPDATEs it processes, and a peer that sends many makes that slow: run xlb status again"},
		{"peer 10.0.1.254:", "peer 10.0.1.254: counters from 12s ago: the BGP speaker is busy (it answers between two UPDATEs it processes); run xlb status again for newer ones"},
		{"peer 10.0.1.1: graceful", "peer 10.0.1.1: graceful restart 120s negotiated: on SIGTERM the peer keeps this node's routes while the agent restarts"},
		{"peer 10.0.1.254: graceful", "peer 10.0.1.254: graceful restart 60s offered, but the peer did not advertise it: on SIGTERM it drops this node's routes at once, with no drain; " +
			"enable graceful restart on the router (FRR: bgp graceful-restart), or send SIGUSR1 to stop the agent (withdraw, drain)"},
		{"peer 10.0.9.9: graceful", "peer 10.0.9.9: graceful restart 300s offered; whether the peer helps shows once the session is established"},
		{"route 10.99.0.1/32", "route 10.99.0.1/32: announced"},
		{"route 10.99.0.2/32", "route 10.99.0.2/32: withdrawn (no healthy backend)"},
		{"route 10.99.0.3/32", "route 10.99.0.3/32: announced (withdrawal failed: speaker stopped; retrying in 2s)"},
		{"route 10.99.0.0/24", "route 10.99.0.0/24: announced to 10.0.1.1, 10.0.1.254 only"},
	} {
		if got := fields(tc.prefix); got != tc.want {
			t.Errorf("line %q:\n got %q\nwant %q", tc.prefix, got, tc.want)
		}
	}
	// The table's columns line up, so a reader can tell SENT from
	// RECEIVED; multi-line errors do not break it.
	header := line("PEER")
	for _, col := range []string{"STATE", "SINCE", "SENT", "RECEIVED/MAX", "MSGS IN/OUT", "FLAPS", "BFD", "LAST ERROR"} {
		at := strings.Index(header, col)
		for _, l := range []string{line("10.0.1.1 "), line("10.0.1.254"), line("10.0.9.9"), line("10.0.1.3 ")} {
			if len(l) <= at || l[at-1] != ' ' || l[at] == ' ' {
				t.Errorf("%s column (at %d) not aligned in %q", col, at, l)
			}
		}
	}
	for _, l := range lines {
		if strings.TrimRight(l, " ") != l {
			t.Errorf("trailing blanks in %q", l)
		}
	}
}

// TestPrintStatusConfigLine: the Config line says what runs after a
// failure: the previous configuration when the new one did not load, the
// new one when it loaded but did not fully apply.
func TestPrintStatusConfigLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    api.Config
		want string
	}{
		{"ok", api.Config{Result: api.ResultOK}, ": ok"},
		{"not loaded", api.Config{Result: api.ResultError, Error: "x.yaml:3: bad", LoadError: "x.yaml:3: bad"},
			": FAILED (the previous configuration keeps running)\n          x.yaml:3: bad\n"},
		{"not fully applied", api.Config{Result: api.ResultError, Error: "apply: bgp: refused", ApplyError: "apply: bgp: refused"},
			": loaded, NOT FULLY APPLIED (this configuration runs; what failed is retried every few seconds)\n          apply: bgp: refused\n"},
		{"both", api.Config{Result: api.ResultError, Error: "x.yaml:3: bad\napply: refused", LoadError: "x.yaml:3: bad", ApplyError: "apply: refused"},
			": FAILED (the previous configuration keeps running, and not all of it is applied)\n          x.yaml:3: bad\n          apply: refused\n"},
		{"an older agent", api.Config{Result: api.ResultError, Error: "x.yaml:3: bad"},
			": FAILED (the previous configuration keeps running)\n          x.yaml:3: bad\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.c.Path, tc.c.Generation = "x.yaml", 2
			var b strings.Builder
			if err := printStatus(&b, &api.Status{Config: tc.c}, time.Now()); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), tc.want) {
				t.Errorf("got\n%s\nwant it to contain %q", b.String(), tc.want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// A node whose data plane drops pings to its VIPs says so on its Node
// line; one that answers them, the default, says nothing.
func TestPrintStatusPingVIPs(t *testing.T) {
	for _, ping := range []bool{true, false} {
		st := &api.Status{Node: api.Node{Interface: "eth0", FlowHash: "fmix64", TableSize: 65537, PingVIPs: ping}}
		var b strings.Builder
		if err := printStatus(&b, st, time.Now()); err != nil {
			t.Fatal(err)
		}
		node, _, _ := strings.Cut(b.String(), "\n")
		if got := strings.HasSuffix(node, "; pings to VIPs dropped"); got == ping {
			t.Errorf("pingVIPs %v: Node line %q", ping, node)
		}
	}
}

// A dual-stack node shows both addresses on its Node line, and an IPv6
// service and backend are written [address]:port.
func TestPrintStatusIPv6(t *testing.T) {
	st := &api.Status{
		Node: api.Node{Interface: "eth0", Address: netip.MustParseAddr("10.0.1.2"), Address6: netip.MustParseAddr("fd00:1::2"), PinPath: "/sys/fs/bpf/xlb"},
		Services: []api.Service{{Name: "web6", VIP: netip.MustParseAddr("2001:db8:99::1"), Port: 80, Protocol: "tcp", Forwarding: "dsr-ipip",
			Backends: []api.Backend{{Address: netip.MustParseAddr("fd00:3::2"), Port: 80, Weight: 1}}}},
	}
	var b strings.Builder
	if err := printStatus(&b, st, time.Now()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"Node:     eth0 10.0.1.2 fd00:1::2, XDP", "[2001:db8:99::1]:80/tcp", "[fd00:3::2]:80"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	// Without an IPv6 address, the Node line is as it was.
	st.Node.Address6 = netip.Addr{}
	b.Reset()
	if err := printStatus(&b, st, time.Now()); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "Node:     eth0 10.0.1.2, XDP") {
		t.Errorf("IPv4-only Node line changed: %q", b.String())
	}
	// An IPv6-only node shows its IPv6 address alone.
	st.Node.Address, st.Node.Address6 = netip.Addr{}, netip.MustParseAddr("fd00:1::2")
	b.Reset()
	if err := printStatus(&b, st, time.Now()); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "Node:     eth0 fd00:1::2, XDP") {
		t.Errorf("IPv6-only Node line: %q", b.String())
	}
	// The BGP line names the next hops of both families, or the one there is.
	for _, c := range []struct {
		hop, hop6 string
		want      string
	}{{"10.0.1.2", "fd00:1::2", "next hop 10.0.1.2 and fd00:1::2\n"}, {"", "fd00:1::2", "next hop fd00:1::2\n"}} {
		st.BGP = &api.BGP{ASN: 65001, RouterID: netip.MustParseAddr("10.0.1.2")}
		st.BGP.NextHop, _ = netip.ParseAddr(c.hop)
		st.BGP.NextHop6 = netip.MustParseAddr(c.hop6)
		b.Reset()
		if err := printStatus(&b, st, time.Now()); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), c.want) {
			t.Errorf("BGP next hops %q, %q: status lacks %q:\n%s", c.hop, c.hop6, c.want, b.String())
		}
	}
	st.BGP = nil
	st.Node.Address, st.Node.Address6 = netip.MustParseAddr("10.0.1.2"), netip.Addr{}
	js, err := json.Marshal(st.Node)
	if err != nil || strings.Contains(string(js), "address6") {
		t.Errorf("IPv4-only node in JSON: %s, %v; want no address6", js, err)
	}
}

// A service's source ranges and what they turned away, and the deny
// list, in the text status.
func TestPrintStatusPolicy(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 10, 0, time.UTC)
	st := &api.Status{
		Version: "v1", Node: api.Node{Interface: "eth0"},
		Config: api.Config{Path: "x.yaml", Generation: 1, Result: api.ResultOK},
		Services: []api.Service{{
			Name: "web", VIP: netip.MustParseAddr("10.99.0.1"), Port: 80, Protocol: "tcp", Forwarding: "dsr-ipip",
			Installed: true, State: api.StateUp, Counters: api.Counters{Packets: 7, Bytes: 700},
			SourceRanges:     []string{"10.0.0.0/8", "172.16.0.0/12", "192.0.2.0/24", "198.51.100.0/24"},
			SourceRangeDrops: api.Counters{Packets: 3, Bytes: 180},
		}, {
			Name: "dns", VIP: netip.MustParseAddr("10.99.0.2"), Port: 53, Protocol: "udp", Forwarding: "dsr-gue",
			Installed: true, State: api.StateUp,
		}},
		Reasons: map[string]uint64{"drop_denied": 5, "drop_source_range": 3},
		Policy:  api.Policy{DenyPrefixes: 2, Denied: 5},
	}
	var b strings.Builder
	if err := printStatus(&b, st, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Logf("\n%s", out)
	for _, want := range []string{
		"dropped, not from 10.0.0.0/8,172.16.0.0/12,192.0.2.0/24 and 1 more",
		"Deny list: 2 prefixes (policy.deny), 5 packets to VIPs denied",
		"drop_denied",
		"drop_source_range",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in the status", want)
		}
	}
	var sources []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "  sources") {
			sources = append(sources, l)
		}
	}
	if len(sources) != 1 || !strings.Contains(sources[0], " 3 ") || !strings.Contains(sources[0], " 180 ") || !strings.Contains(sources[0], "dropped, not from") {
		t.Errorf("source lines %q, want web's alone with 3 packets and 180 bytes dropped", sources)
	}
}

// The NAT session table in the text status: use against capacity, the
// counters, and what a no-reply or allocation failure asks for; none of
// it without a NAT service.
func TestPrintStatusNAT(t *testing.T) {
	st := &api.Status{
		Version: "v1", Node: api.Node{Interface: "eth0"},
		Config: api.Config{Path: "x.yaml", Generation: 1, Result: api.ResultOK},
		Services: []api.Service{{Name: "app", VIP: netip.MustParseAddr("10.99.0.3"), Port: 443, Protocol: "tcp", Forwarding: "nat", Installed: true, State: api.StateUp},
			{Name: "db", VIP: netip.MustParseAddr("10.99.0.4"), Port: 5432, Protocol: "tcp", Forwarding: "dnat", Installed: true, State: api.StateUp}},
		NAT: &api.NAT{Address: netip.MustParseAddr("10.0.1.2"), Ports: "20000-32767", Sessions: 1024, Embryonic: 12, Capacity: 4096, Created: 5000,
			AllocFailures: 2, Expired: 3976, NoReply: 40, ReverseMisses: 9, FragmentsDropped: 1, ICMPTranslated: 3, ExpireError: "map busy"},
	}
	var b strings.Builder
	if err := printStatus(&b, st, time.Now()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Logf("\n%s", out)
	for _, want := range []string{
		"app      10.99.0.3:443/tcp   nat",
		"db       10.99.0.4:5432/tcp  dnat",
		"NAT:      1024/4096 sessions (25.0%), 12 embryonic; from 10.0.1.2 ports 20000-32767",
		"created 5000, expired 3976 (40 without a reply), allocation failures 2, reverse misses 9, fragments dropped 1, ICMP translated 3",
		"sessions without a reply: a dnat backend's route to its clients must go through this node",
		"allocation failures: new connections found no free port or no room; widen nat.ports",
		"reclaiming expired sessions fails: map busy",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in the status", want)
		}
	}
	st.NAT = nil
	b.Reset()
	if err := printStatus(&b, st, time.Now()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "NAT:") {
		t.Errorf("a NAT line without a session table:\n%s", b.String())
	}
}

func TestPrintSessions(t *testing.T) {
	out := &api.Sessions{Services: []api.ServiceSessions{
		{Name: "app", VIP: netip.MustParseAddr("10.99.0.3"), Port: 443, Protocol: "tcp", Forwarding: "nat", More: true, Sessions: []api.Session{
			{Client: netip.MustParseAddrPort("192.0.2.1:40000"), Backend: netip.MustParseAddrPort("10.0.4.2:8443"), Source: netip.MustParseAddrPort("10.0.1.2:20001"),
				State: "established", Replied: true, IdleSeconds: 1.25},
			{Client: netip.MustParseAddrPort("192.0.2.7:51000"), Backend: netip.MustParseAddrPort("10.0.4.3:8443"), Source: netip.MustParseAddrPort("10.0.1.2:20002"),
				State: "syn", IdleSeconds: 0.5},
		}},
		{Name: "dns", VIP: netip.MustParseAddr("10.99.0.3"), Port: 53, Protocol: "udp", Forwarding: "dnat"},
	}}
	var b strings.Builder
	if err := printSessions(&b, out); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	t.Logf("\n%s", got)
	want := `app 10.99.0.3:443/tcp, nat: 2 sessions (the first 2; it has more)
CLIENT           BACKEND        BACKEND SEES    STATE        REPLIED  IDLE
192.0.2.1:40000  10.0.4.2:8443  10.0.1.2:20001  established  yes      1.3s
192.0.2.7:51000  10.0.4.3:8443  10.0.1.2:20002  syn          no       500ms

dns 10.99.0.3:53/udp, dnat: 0 sessions
`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// --sessions takes VIP[:PORT[/PROTOCOL]], --max only with it; both are
// checked before the agent is asked.
func TestStatusSessionsUsage(t *testing.T) {
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	old := os.Stderr
	os.Stderr = devnull
	defer func() { os.Stderr = old }()
	socket := filepath.Join(t.TempDir(), "none.sock")
	for _, args := range [][]string{
		{"--sessions", "10.99.0.x"},
		{"--sessions", "10.99.0.1/tcp"},
		{"--sessions", "10.99.0.1:80", "--max", "0"},
		{"--max", "5"},
	} {
		if err := runStatus(append([]string{"--socket", socket}, args...)); err != errUsage {
			t.Errorf("xlb status %q: %v, want the usage", args, err)
		}
	}
	// A valid query reaches for the agent.
	if err := runStatus([]string{"--socket", socket, "--sessions", "10.99.0.1:53/udp", "--max", "5"}); !errors.Is(err, api.ErrNotRunning) {
		t.Errorf("a valid query: %v, want that no agent runs", err)
	}
}

func TestPrintStatusL2(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	st := &api.Status{L2: &api.L2{Node: "b", Interface: "eth0", MAC: "02:00:00:00:00:02", HeartbeatMs: 100, DeadAfterMs: 400,
		Alive: []string{"b", "a"}, AliveSince: now.Add(-2 * time.Second),
		Nodes: []api.L2Node{{Name: "a", Address: netip.MustParseAddr("10.0.1.2"), Alive: true, LastHeardMs: 40},
			{Name: "c", Address: netip.MustParseAddr("10.0.1.4"), LastHeardMs: 3000}},
		VIPs: []api.L2VIP{{VIP: netip.MustParseAddr("10.99.0.1"), Owner: "b", Answering: true, Since: now.Add(-2 * time.Second)},
			{VIP: netip.MustParseAddr("10.99.0.2"), Owner: "a"},
			{VIP: netip.MustParseAddr("10.99.0.3"), Owner: "b", Why: "no healthy backend"}},
		Dropped: map[string]uint64{"spoofed": 2, "malformed": 1}}}
	var b strings.Builder
	if err := printStatus(&b, st, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"L2:       node b, ARP on eth0 at 02:00:00:00:00:02; heartbeat 100ms, dead after 400ms; alive b a (since 2s ago)\n",
		"  a     10.0.1.2  alive  40ms ago\n",
		"  c     10.0.1.4  dead   3s ago\n",
		"  10.99.0.1  b      answering since 2s ago\n",
		"  10.99.0.2  a      -\n",
		"  10.99.0.3  b      not served: no healthy backend\n",
		"  heartbeats refused: malformed 1, spoofed 2\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no line %q in:\n%s", want, b.String())
		}
	}
}
