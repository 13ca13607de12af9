package main

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

const sampleAgentLog = `--- 2026-11-22T07:10:46Z: in lab-node2: /tmp/xlb agent --config /run/xlb-lab/lab/node2.yaml
time=2026-11-22T07:10:47.255Z level=INFO msg="data plane attached" interface=eth0 mode=native
time=2026-11-22T07:10:47.285Z level=INFO msg="bgp speaker started" component=bgp asn=65001
time=2026-11-22T07:10:47.286Z level=INFO msg="BFD session state changed" bfd.local=10.0.1.3 from=Down to=Init diag="No Diagnostic"
time=2026-11-22T07:10:49.287Z level=INFO msg="bgp peer up" component=bgp peer=10.0.1.1 asn=65000
time=2026-11-22T07:10:51.100Z level=INFO msg="BFD session state changed" bfd.local=10.0.1.3 from=Init to=Up diag="No Diagnostic"
time=2026-11-22T07:10:52.000Z level=WARN msg="bgp peer down" component=bgp peer=10.0.1.1
time=2026-11-22T07:10:53.000Z level=INFO msg="bgp peer up" component=bgp peer=10.0.1.1 asn=65000
time=2026-11-22T07:10:54.001Z level=INFO msg="bgp routes withdrawn" component=bgp count=1
--- 2026-11-22T07:10:56Z: in lab-node2: /tmp/xlb agent --config /run/xlb-lab/lab/node2.yaml
time=2026-11-22T07:10:57.233Z level=INFO msg="bgp speaker started" component=bgp asn=65001
time=2026-11-22T07:10:59.210Z level=INFO msg="bgp peer up" component=bgp peer=10.0.1.1 asn=65000
`

func TestParseAgentLog(t *testing.T) {
	ts := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	got := parseAgentLog(sampleAgentLog)
	want := agentLog{
		speakerStarted: ts("2026-11-22T07:10:47.285Z"),
		peerUp:         ts("2026-11-22T07:10:49.287Z"), // the first one
		withdrawn:      ts("2026-11-22T07:10:54.001Z"),
		bfdUp:          ts("2026-11-22T07:10:51.100Z"), // to=Init does not count
	}
	if got != want {
		t.Errorf("first run:\ngot  %+v\nwant %+v", got, want)
	}

	// From an offset in the middle of a run (a stop's): no header first.
	i := strings.Index(sampleAgentLog, "time=2026-11-22T07:10:52.000Z")
	got = parseAgentLog(sampleAgentLog[i:])
	if !got.speakerStarted.IsZero() || got.peerUp != ts("2026-11-22T07:10:53.000Z") || got.withdrawn != ts("2026-11-22T07:10:54.001Z") {
		t.Errorf("from the middle: %+v", got)
	}

	// The second run alone.
	i = strings.LastIndex(sampleAgentLog, "--- ")
	got = parseAgentLog(sampleAgentLog[i:])
	if got.speakerStarted != ts("2026-11-22T07:10:57.233Z") || got.peerUp != ts("2026-11-22T07:10:59.210Z") || !got.withdrawn.IsZero() {
		t.Errorf("second run: %+v", got)
	}
	if got := parseAgentLog(""); got != (agentLog{}) {
		t.Errorf("empty log: %+v", got)
	}
}

func TestLogLine(t *testing.T) {
	for _, tc := range []struct {
		line, msg string
		ok        bool
	}{
		{`time=2026-11-22T07:10:47.285Z level=INFO msg="bgp speaker started" asn=1`, "bgp speaker started", true},
		{`time=2026-11-22T07:10:47.285+01:00 level=INFO msg=plain x=1`, "plain", true},
		{`time=2026-11-22T07:10:47.285Z level=INFO msg=last`, "last", true},
		{`time=yesterday level=INFO msg="x"`, "", false},
		{`level=INFO msg="x"`, "", false},
		{`time=2026-11-22T07:10:47.285Z level=INFO`, "", false},
		{`--- 2026-11-22T07:10:46Z: in ns: xlb agent`, "", false},
	} {
		_, msg, ok := logLine(tc.line)
		if ok != tc.ok || msg != tc.msg {
			t.Errorf("logLine(%q) = %q, %v; want %q, %v", tc.line, msg, ok, tc.msg, tc.ok)
		}
	}
}

func TestRouteHops(t *testing.T) {
	ip := func(s string) net.IP { return net.ParseIP(s).To4() }
	addrs := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	multi := netlink.Route{Priority: 20, MultiPath: []*netlink.NexthopInfo{{Gw: ip("10.0.1.5")}, {Gw: ip("10.0.1.2")}, {Gw: ip("10.0.1.3")}}}
	single := netlink.Route{Priority: 20, Gw: ip("10.0.1.4")}
	worse := netlink.Route{Priority: 100, Gw: ip("10.0.1.9")}
	for _, tc := range []struct {
		name   string
		routes []netlink.Route
		want   []netip.Addr
	}{
		{"no route", nil, nil},
		{"multipath, sorted", []netlink.Route{multi}, addrs("10.0.1.2", "10.0.1.3", "10.0.1.5")},
		{"single path", []netlink.Route{single}, addrs("10.0.1.4")},
		{"the lowest metric wins", []netlink.Route{worse, multi}, addrs("10.0.1.2", "10.0.1.3", "10.0.1.5")},
		{"duplicates once", []netlink.Route{{MultiPath: []*netlink.NexthopInfo{{Gw: ip("10.0.1.2")}, {Gw: ip("10.0.1.2")}}}}, addrs("10.0.1.2")},
	} {
		if got := routeHops(tc.routes); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	cond := []netip.Addr{netip.MustParseAddr("10.0.1.2"), netip.MustParseAddr("10.0.1.3")}
	a2, a4 := netip.MustParseAddr("10.0.1.2"), netip.MustParseAddr("10.0.1.4")
	if !has(a2)(cond) || has(a4)(cond) || lacks(a2)(cond) || !lacks(a4)(nil) {
		t.Error("has/lacks")
	}
	if !exactly([]netip.Addr{cond[1], cond[0]})(cond) || exactly(cond[:1])(cond) || !exactly(nil)(nil) {
		t.Error("exactly")
	}
}

func TestParseCPU(t *testing.T) {
	stat := "cpu  600595 772 335734 2741074 9256 1 27847 13749 0 0\ncpu0 290764 347 156602 1394758 2276 0 13059 6750 0 0\nintr 1 2 3\n"
	got, err := parseProcStat(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := (cpuTimes{600595, 772, 335734, 2741074, 9256, 1, 27847, 13749}); got != want {
		t.Errorf("parseProcStat = %+v, want %+v", got, want)
	}
	if got.total() != 600595+772+335734+2741074+9256+1+27847+13749 {
		t.Errorf("total %d", got.total())
	}
	if _, err := parseProcStat("cpu0 1 2 3 4 5 6 7 8\n"); err == nil {
		t.Error("no aggregate cpu line: no error")
	}
	if _, err := parseProcStat("cpu 1 2 x 4 5 6 7 8\n"); err == nil {
		t.Error("a bad number: no error")
	}

	// The name may hold spaces and parentheses: count from the last ')'.
	pt, err := parsePIDStat("4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 731 250 0 0 20 0 3 0 12345 1000 10\n")
	if err != nil || pt != (procTimes{731, 250}) {
		t.Errorf("parsePIDStat = %+v, %v; want {731 250}", pt, err)
	}
	if _, err := parsePIDStat("4242 (short) S 1 2"); err == nil {
		t.Error("a short stat line: no error")
	}

	cfg := "# comment\nCONFIG_TICK_CPU_ACCOUNTING=y\n# CONFIG_IRQ_TIME_ACCOUNTING is not set\nCONFIG_HZ=250\n"
	for opt, want := range map[string]string{"CONFIG_TICK_CPU_ACCOUNTING": "y", "CONFIG_IRQ_TIME_ACCOUNTING": "n", "CONFIG_HZ": "250", "CONFIG_NOPE": ""} {
		if got := configValue(cfg, opt); got != want {
			t.Errorf("configValue(%s) = %q, want %q", opt, got, want)
		}
	}
}

// TestCPUUse: machine shares, roles per wall second, other processes as
// everything but the lab's, and busy time nobody was charged with.
func TestCPUUse(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 7, 0, 0, 0, time.UTC)
	a := snapshot{at: t0, cpu: cpuTimes{user: 1000, system: 1000, idle: 1000, softirq: 100},
		roles: map[string]procTimes{roleBackends: {100, 100}, roleAgents: {10, 10}},
		all:   map[int]procTimes{1: {100, 100}, 2: {10, 10}, 3: {50, 50}, 4: {5, 5}}}
	// 2 s on 2 CPUs: 400 ticks, of which 40 idle.
	b := snapshot{at: t0.Add(2 * time.Second), cpu: cpuTimes{user: 1120, system: 1200, idle: 1040, softirq: 140},
		roles: map[string]procTimes{roleBackends: {160, 160}, roleAgents: {11, 11}},
		all:   map[int]procTimes{1: {160, 160}, 2: {11, 11}, 3: {80, 70}, 5: {4, 6}}} // 4 is gone, 5 is new
	u := cpuUse(a, b, procTimes{10, 70})
	if u.UserPct != 30 || u.SystemPct != 50 || u.SoftirqPct != 10 || u.IdlePct != 10 {
		t.Errorf("shares: %+v", u)
	}
	want := map[string]float64{
		roleClient:   0.4,  // 80 ticks in 2 s
		roleBackends: 0.6,  // 120
		roleAgents:   0.01, // 2
		roleOthers:   0.3,  // (120 + 2 + 50 + 10) − 122 = 60 ticks
		// busy 360 − (processes 182 + wrk 80) = 98 ticks
		roleUnattributed: 0.49,
	}
	for _, r := range u.Roles {
		if w, ok := want[r.Role]; ok && r.Cores != w {
			t.Errorf("%s: %v cores, want %v", r.Role, r.Cores, w)
		}
		delete(want, r.Role)
	}
	if len(want) > 0 {
		t.Errorf("roles missing: %v", want)
	}
	if got := shares([]uint64{10, 20, 30}, []uint64{35, 45, 80}); !slices.Equal(got, []float64{25, 25, 50}) {
		t.Errorf("shares = %v", got)
	}
	if got := shares([]uint64{1}, []uint64{1, 2}); got != nil {
		t.Errorf("shares of mismatched readings = %v", got)
	}
}

const sampleWrk = `Running 3s test @ http://10.99.0.1:80/
  2 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     2.05ms    3.10ms  48.39ms   92.17%
    Req/Sec    10.31k     1.02k   12.50k    70.00%
  Latency Distribution
     50%  850.00us
     75%    1.61ms
     90%    4.20ms
     99%    1.02s
  61923 requests in 3.00s, 8.15MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 4
Requests/sec:  20628.71
Transfer/sec:      2.71MB
`

func TestParseWrk(t *testing.T) {
	got, err := parseWrk(sampleWrk)
	if err != nil {
		t.Fatal(err)
	}
	want := wrkResult{Requests: 61923, RPS: 20628.71, LatP50Ms: 0.85, LatP90Ms: 4.2, LatP99Ms: 1020, SocketErrs: 3, Non2xx: 4, WrkDuration: 3}
	if got != want {
		t.Errorf("parseWrk:\ngot  %+v\nwant %+v", got, want)
	}
	clean := strings.NewReplacer("  Socket errors: connect 0, read 2, write 0, timeout 1\n", "", "  Non-2xx or 3xx responses: 4\n", "").Replace(sampleWrk)
	if got, err := parseWrk(clean); err != nil || got.SocketErrs != 0 || got.Non2xx != 0 {
		t.Errorf("without errors: %+v, %v", got, err)
	}
	for name, broken := range map[string]string{
		"no summary line": strings.Replace(sampleWrk, "61923 requests in 3.00s", "", 1),
		"no rate":         strings.Replace(sampleWrk, "Requests/sec:", "Rate:", 1),
		"no latencies":    strings.Replace(strings.Replace(sampleWrk, "50%", "", 1), "99%", "", 1),
	} {
		if _, err := parseWrk(broken); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if got := wrkArgs(2, 3*time.Second, netip.MustParseAddrPort("10.99.0.1:80")); strings.Join(got, " ") != "wrk -t 2 -c 64 -d 3s --timeout 2s --latency http://10.99.0.1:80/" {
		t.Errorf("wrkArgs = %v", got)
	}
}
