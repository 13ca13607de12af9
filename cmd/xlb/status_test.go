package main

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/api"
)

func TestPrintStatusHealth(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 10, 0, time.UTC)
	st := &api.Status{
		Version: "v1", Node: api.Node{Interface: "eth0", Address: netip.MustParseAddr("10.0.1.2"), AttachMode: "native", PinPath: "/sys/fs/bpf/xlb/1-eth0"},
		Config: api.Config{Path: "x.yaml", Generation: 1, Result: api.ResultOK},
		Services: []api.Service{{
			Name: "web", VIP: netip.MustParseAddr("10.99.0.1"), Port: 80, Protocol: "tcp", Forwarding: "dsr-ipip",
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
		{"SERVICE", []string{"SERVICE", "ADDRESS", "FORWARDING", "WEIGHT", "HEALTH", "LAST", "CHECK", "PACKETS", "BYTES", "LAST", "ERROR"}},
		{"web", []string{"web", "10.99.0.1:80/tcp", "dsr-ipip", "down", "7", "700"}},
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
