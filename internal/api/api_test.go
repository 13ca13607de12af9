package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func ptr[T any](v T) *T { return &v }

func sampleStatus() *Status {
	return &Status{
		Version: "v1.2.3",
		Node: Node{Interface: "eth0", Address: netip.MustParseAddr("10.0.1.2"), AttachMode: "native", PinPath: "/sys/fs/bpf/xlb/1-eth0",
			FlowHash: "fmix64", TableSize: 65537},
		Config: Config{
			Path: "/etc/xlb.yaml", Generation: 3, LastReload: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
			Result: ResultError, Error: "xlb.yaml:7: services[0].port: must be 1-65535",
			Reloads: map[string]uint64{ResultOK: 2, ResultError: 1},
		},
		Services: []Service{{
			Name: `we"b`, VIP: netip.MustParseAddr("10.99.0.1"), Port: 80, Protocol: "tcp", Forwarding: "dsr-ipip",
			Installed: true, State: StateUp, Counters: Counters{Packets: 30, Bytes: 3000},
			SourceRanges: []string{"10.0.0.0/8"}, SourceRangeDrops: Counters{Packets: 6, Bytes: 360},
			Backends: []Backend{
				{Address: netip.MustParseAddr("10.0.3.2"), Port: 80, Weight: 1, Counters: Counters{Packets: 20, Bytes: 2000},
					Health: Health{Check: "http", State: StateUp, Since: time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC),
						LastCheck: time.Date(2026, 1, 2, 3, 4, 5, 250e6, time.UTC), LatencyMs: 2.5}},
				{Address: netip.MustParseAddr("10.0.3.3"), Port: 80, Weight: 0, Counters: Counters{Packets: 10, Bytes: 1000},
					Health: Health{Check: "http", State: StateDown, Since: time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC),
						LastCheck: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), LastError: "connect: connection refused", LatencyMs: 0.125}},
				{Address: netip.MustParseAddr("10.0.3.4"), Port: 80, Weight: 1, Health: Health{Check: "tcp", State: StateUnknown}},
			},
		}, {
			Name: "dns", VIP: netip.MustParseAddr("10.99.0.2"), Port: 53, Protocol: "udp", Forwarding: "dsr-gue",
			Installed: true, State: StateDown,
			Backends: []Backend{
				{Address: netip.MustParseAddr("10.0.3.2"), Port: 53, Weight: 1,
					Health: Health{Check: "tcp", State: StateDown, LastCheck: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), LastError: "i/o timeout", LatencyMs: 500}},
			},
		}},
		Reasons:   map[string]uint64{"drop_no_backend": 4, "pass_not_vip": 18446744073709551615, "drop_denied": 9, "drop_source_range": 6},
		Policy:    Policy{DenyPrefixes: 2, Denied: 9},
		Conntrack: Conntrack{Flows: 1500, Size: 262144},
		NAT: &NAT{Address: netip.MustParseAddr("10.0.1.2"), Ports: "20000-32767", Sessions: 120, Embryonic: 7, Capacity: 262144, Created: 900,
			AllocFailures: 3, Expired: 780, NoReply: 11, ReverseMisses: 5, FragmentsDropped: 2, ICMPTranslated: 4},
		BGP: &BGP{ASN: 65001, RouterID: netip.MustParseAddr("10.0.1.2"), NextHop: netip.MustParseAddr("10.0.1.2"),
			Peers: []Peer{{Address: netip.MustParseAddr("10.0.1.1"), ASN: 65000, State: "established", Flaps: 2,
				PrefixesReceived: ptr(12), MaxPrefixes: 10000, BFD: &BFDSession{State: "up", DetectionMs: 300},
				GracefulRestart: &GracefulRestart{RestartTimeSeconds: 120, Negotiated: ptr(true)}},
				// Counters unknown, held down for its prefix limit.
				{Address: netip.MustParseAddr("10.0.1.3"), ASN: 65003, State: "idle", MaxPrefixes: 100,
					PrefixLimit: &PrefixLimit{Limit: 100, Times: 1}, GracefulRestart: &GracefulRestart{RestartTimeSeconds: 60}}},
			Routes: []Route{{Prefix: netip.MustParsePrefix("10.99.0.1/32"), Announced: true},
				{Prefix: netip.MustParsePrefix("10.99.0.2/32"), Reason: "every backend is down"}}},
		Reconciles: map[string]Reconcile{"config": {Count: 3, SumSeconds: 0.75, LastSeconds: 0.5,
			Buckets: []Bucket{{Le: 0.1, Count: 1}, {Le: 0.5, Count: 3}, {Le: 1, Count: 3}}}},
	}
}

// serve starts a server on a socket in a fresh directory below t.TempDir().
func serve(t *testing.T, metrics string, status StatusFunc) (*Server, string) {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "run", "xlb", "xlb.sock")
	ln, err := Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := Serve(ln, metrics, status, quiet)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv, socket
}

func TestStatusRoundTrip(t *testing.T) {
	want := sampleStatus()
	srv, socket := serve(t, "", func() (*Status, error) { return want, nil })

	fi, err := os.Stat(socket)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != socketMode {
		t.Errorf("socket mode %v, want a socket with %o", fi.Mode(), socketMode)
	}

	got, err := GetStatus(socket)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip changed the status:\n got %+v\nwant %+v", got, want)
	}

	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket still there after Close: %v", err)
	}
	if _, err := GetStatus(socket); !errors.Is(err, ErrNotRunning) {
		t.Errorf("after Close: err = %v, want ErrNotRunning", err)
	}
}

func TestStatusError(t *testing.T) {
	_, socket := serve(t, "", func() (*Status, error) { return nil, errors.New("map lookup failed") })
	_, err := GetStatus(socket)
	if err == nil || !strings.Contains(err.Error(), "map lookup failed") {
		t.Fatalf("err = %v, want the agent's error", err)
	}
}

func TestListen(t *testing.T) {
	t.Run("stale socket is replaced", func(t *testing.T) {
		socket := filepath.Join(t.TempDir(), "xlb.sock")
		// A socket file that nobody serves, as a killed agent leaves.
		ln, err := net.Listen("unix", socket)
		if err != nil {
			t.Fatal(err)
		}
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		ln.Close()
		if _, err := GetStatus(socket); !errors.Is(err, ErrNotRunning) {
			t.Fatalf("stale socket: err = %v, want ErrNotRunning", err)
		}
		ln, err = Listen(socket)
		if err != nil {
			t.Fatalf("Listen over a stale socket: %v", err)
		}
		ln.Close()
	})
	t.Run("live socket is refused", func(t *testing.T) {
		_, socket := serve(t, "", func() (*Status, error) { return sampleStatus(), nil })
		if ln, err := Listen(socket); err == nil || !strings.Contains(err.Error(), "another agent") {
			if ln != nil {
				ln.Close()
			}
			t.Fatalf("err = %v, want a refusal naming another agent", err)
		}
		if _, err := GetStatus(socket); err != nil {
			t.Errorf("the running server was disturbed: %v", err)
		}
	})
	t.Run("regular file is kept", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "xlb.sock")
		os.WriteFile(path, []byte("data"), 0o644)
		if _, err := Listen(path); err == nil || !strings.Contains(err.Error(), "not a socket") {
			t.Fatalf("err = %v, want 'not a socket'", err)
		}
		if b, _ := os.ReadFile(path); string(b) != "data" {
			t.Error("Listen removed a regular file")
		}
	})
	t.Run("not running", func(t *testing.T) {
		_, err := GetStatus(filepath.Join(t.TempDir(), "none.sock"))
		if !errors.Is(err, ErrNotRunning) {
			t.Fatalf("err = %v, want ErrNotRunning", err)
		}
	})
}

func scrape(t *testing.T, c *http.Client, url string) (string, *http.Response) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), resp
}

var (
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(\\.|[^"\\])*",?)*\})? [0-9.e+-]+$`)
	commentRe  = regexp.MustCompile(`^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.+)$`)
)

func TestMetrics(t *testing.T) {
	srv, socket := serve(t, "127.0.0.1:0", func() (*Status, error) { return sampleStatus(), nil })
	body, resp := scrape(t, http.DefaultClient, "http://"+srv.MetricsAddr().String()+"/metrics")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("status %s, content type %q", resp.Status, resp.Header.Get("Content-Type"))
	}

	// Every line is well formed; every sample follows its HELP and TYPE.
	help, typ := map[string]string{}, map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
		if m := commentRe.FindStringSubmatch(line); m != nil {
			if m[1] == "HELP" {
				help[m[2]] = m[3]
			} else {
				typ[m[2]] = m[3]
			}
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("malformed line %q", line)
			continue
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base := strings.TrimSuffix(m[1], suffix); base != m[1] && typ[base] == "histogram" {
				m[1] = base
			}
		}
		if help[m[1]] == "" || typ[m[1]] == "" {
			t.Errorf("sample %q before its HELP/TYPE", line)
		}
		if typ[m[1]] == "counter" && !strings.HasSuffix(m[1], "_total") {
			t.Errorf("counter %s does not end in _total", m[1])
		}
	}
	for name, wantType := range map[string]string{
		"xlb_service_packets_total":                      "counter",
		"xlb_service_bytes_total":                        "counter",
		"xlb_backend_packets_total":                      "counter",
		"xlb_backend_bytes_total":                        "counter",
		"xlb_dataplane_reason_packets_total":             "counter",
		"xlb_config_reloads_total":                       "counter",
		"xlb_config_generation":                          "gauge",
		"xlb_dataplane_info":                             "gauge",
		"xlb_service_up":                                 "gauge",
		"xlb_backend_up":                                 "gauge",
		"xlb_health_check_duration_seconds":              "gauge",
		"xlb_reconcile_duration_seconds":                 "histogram",
		"xlb_bgp_peer_up":                                "gauge",
		"xlb_bgp_peer_flaps_total":                       "counter",
		"xlb_bgp_peer_prefixes_received":                 "gauge",
		"xlb_bgp_peer_max_prefixes":                      "gauge",
		"xlb_bgp_peer_prefix_limit_exceeded":             "gauge",
		"xlb_bgp_peer_graceful_restart":                  "gauge",
		"xlb_bgp_route_announced":                        "gauge",
		"xlb_bfd_session_up":                             "gauge",
		"xlb_service_source_range_dropped_packets_total": "counter",
		"xlb_service_source_range_dropped_bytes_total":   "counter",
		"xlb_policy_deny_prefixes":                       "gauge",
		"xlb_conntrack_flows":                            "gauge",
		"xlb_conntrack_flows_capacity":                   "gauge",
		"xlb_nat_sessions":                               "gauge",
		"xlb_nat_sessions_capacity":                      "gauge",
		"xlb_nat_sessions_embryonic":                     "gauge",
		"xlb_nat_allocation_failures_total":              "counter",
		"xlb_nat_expired_total":                          "counter",
		"xlb_nat_reverse_misses_total":                   "counter",
		"xlb_nat_no_reply_total":                         "counter",
		"xlb_nat_fragments_dropped_total":                "counter",
		"xlb_nat_icmp_translated_total":                  "counter",
	} {
		if help[name] == "" {
			t.Errorf("%s has no HELP", name)
		}
		if typ[name] != wantType {
			t.Errorf("%s: TYPE %q, want %s", name, typ[name], wantType)
		}
	}
	for _, want := range []string{
		`xlb_service_packets_total{service="we\"b"} 30`,
		`xlb_service_bytes_total{service="we\"b"} 3000`,
		`xlb_backend_packets_total{backend="10.0.3.2:80",service="we\"b"} 20`,
		`xlb_backend_bytes_total{backend="10.0.3.3:80",service="we\"b"} 1000`,
		`xlb_dataplane_reason_packets_total{reason="pass_not_vip"} 1.8446744073709552e+19`,
		`xlb_config_reloads_total{result="ok"} 2`,
		`xlb_config_reloads_total{result="error"} 1`,
		`xlb_config_generation 3`,
		`xlb_config_last_reload_successful 0`,
		`xlb_build_info{version="v1.2.3"} 1`,
		`xlb_dataplane_info{flow_hash="fmix64",table_size="65537"} 1`,
		`xlb_service_up{service="we\"b"} 1`,
		`xlb_service_up{service="dns"} 0`,
		`xlb_backend_up{backend="10.0.3.2:80",service="we\"b"} 1`,
		`xlb_backend_up{backend="10.0.3.3:80",service="we\"b"} 0`,
		`xlb_backend_up{backend="10.0.3.4:80",service="we\"b"} 1`,
		`xlb_backend_up{backend="10.0.3.2:53",service="dns"} 0`,
		`xlb_health_check_duration_seconds{backend="10.0.3.2:80",service="we\"b"} 0.0025`,
		`xlb_health_check_duration_seconds{backend="10.0.3.3:80",service="we\"b"} 0.000125`,
		`xlb_health_check_duration_seconds{backend="10.0.3.2:53",service="dns"} 0.5`,
		`xlb_reconcile_duration_seconds_bucket{trigger="config",le="0.1"} 1`,
		`xlb_reconcile_duration_seconds_bucket{trigger="config",le="0.5"} 3`,
		`xlb_reconcile_duration_seconds_bucket{trigger="config",le="+Inf"} 3`,
		`xlb_reconcile_duration_seconds_sum{trigger="config"} 0.75`,
		`xlb_reconcile_duration_seconds_count{trigger="config"} 3`,
		`xlb_bgp_peer_up{peer="10.0.1.1"} 1`,
		`xlb_bgp_peer_flaps_total{peer="10.0.1.1"} 2`,
		`xlb_bgp_peer_prefixes_received{peer="10.0.1.1"} 12`,
		`xlb_bgp_peer_max_prefixes{peer="10.0.1.1"} 10000`,
		`xlb_bgp_peer_prefix_limit_exceeded{peer="10.0.1.1"} 0`,
		`xlb_bgp_peer_up{peer="10.0.1.3"} 0`,
		`xlb_bgp_peer_max_prefixes{peer="10.0.1.3"} 100`,
		`xlb_bgp_peer_prefix_limit_exceeded{peer="10.0.1.3"} 1`,
		`xlb_bgp_peer_graceful_restart{peer="10.0.1.1"} 1`,
		`xlb_bgp_peer_graceful_restart{peer="10.0.1.3"} 0`,
		`xlb_bfd_session_up{peer="10.0.1.1"} 1`,
		`xlb_bgp_route_announced{prefix="10.99.0.1/32"} 1`,
		`xlb_bgp_route_announced{prefix="10.99.0.2/32"} 0`,
		`xlb_service_source_range_dropped_packets_total{service="we\"b"} 6`,
		`xlb_service_source_range_dropped_bytes_total{service="we\"b"} 360`,
		`xlb_policy_deny_prefixes 2`,
		`xlb_conntrack_flows 1500`,
		`xlb_conntrack_flows_capacity 262144`,
		`xlb_dataplane_reason_packets_total{reason="drop_denied"} 9`,
		`xlb_nat_sessions 120`,
		`xlb_nat_sessions_capacity 262144`,
		`xlb_nat_sessions_embryonic 7`,
		`xlb_nat_allocation_failures_total 3`,
		`xlb_nat_expired_total 780`,
		`xlb_nat_reverse_misses_total 5`,
		`xlb_nat_no_reply_total 11`,
		`xlb_nat_fragments_dropped_total 2`,
		`xlb_nat_icmp_translated_total 4`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("missing %q in:\n%s", want, body)
		}
	}
	// Counters unknown: no sample rather than a 0.
	if strings.Contains(body, `xlb_bgp_peer_prefixes_received{peer="10.0.1.3"}`) {
		t.Errorf("prefixes received reported for a peer whose counters are unknown:\n%s", body)
	}
	// A service without ranges has no drops to report.
	if strings.Contains(body, `xlb_service_source_range_dropped_packets_total{service="dns"}`) {
		t.Errorf("source range drops for a service without ranges:\n%s", body)
	}
	// Never probed: no duration to report.
	if strings.Contains(body, `xlb_health_check_duration_seconds{backend="10.0.3.4:80"`) {
		t.Errorf("a duration for a backend that was never probed:\n%s", body)
	}

	// The unix socket serves the same metrics.
	unix := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
	if body2, _ := scrape(t, unix, "http://xlb/metrics"); body2 != body {
		t.Errorf("the socket's metrics differ from the TCP ones:\n%s", body2)
	}
}

// Without a NAT service there is no session table to report.
func TestMetricsWithoutNAT(t *testing.T) {
	st := sampleStatus()
	st.NAT = nil
	srv, _ := serve(t, "127.0.0.1:0", func() (*Status, error) { return st, nil })
	body, _ := scrape(t, http.DefaultClient, "http://"+srv.MetricsAddr().String()+"/metrics")
	if strings.Contains(body, "\nxlb_nat_") {
		t.Errorf("NAT metrics without a NAT service:\n%s", body)
	}
}

func TestMetricsStatusError(t *testing.T) {
	srv, _ := serve(t, "127.0.0.1:0", func() (*Status, error) { return nil, errors.New("boom") })
	body, resp := scrape(t, http.DefaultClient, "http://"+srv.MetricsAddr().String()+"/metrics")
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(body, "boom") {
		t.Errorf("status %s, body %q; want 500 with the error", resp.Status, body)
	}
}

func TestServeMetricsPortTaken(t *testing.T) {
	ln, err := Listen(filepath.Join(t.TempDir(), "xlb.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	if _, err := Serve(ln, taken.Addr().String(), func() (*Status, error) { return sampleStatus(), nil }, quiet); err == nil || !strings.Contains(err.Error(), "api.metrics") {
		t.Fatalf("err = %v, want a metrics error naming api.metrics", err)
	}
}

// Times that have not happened yet are left out, not shown as year 1.
func TestHealthJSON(t *testing.T) {
	for _, tc := range []struct {
		h    Health
		want string
	}{
		{Health{Check: "tcp", State: StateUnknown}, `{"check":"tcp","state":"unknown","latencyMs":0}`},
		{Health{Check: "http", State: StateDown, Since: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), LastCheck: time.Date(2026, 1, 2, 3, 4, 6, 0, time.UTC), LastError: "refused", LatencyMs: 0.5},
			`{"check":"http","state":"down","since":"2026-01-02T03:04:05Z","lastCheck":"2026-01-02T03:04:06Z","lastError":"refused","latencyMs":0.5}`},
	} {
		b, err := json.Marshal(tc.h)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != tc.want {
			t.Errorf("got  %s\nwant %s", b, tc.want)
		}
	}
}
