package main

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/config"
)

func TestUseKubernetes(t *testing.T) {
	plain := &config.Config{}
	withSection := &config.Config{Kubernetes: &config.Kubernetes{}}
	tests := []struct {
		name    string
		from    string
		cfg     *config.Config
		kf      kubeFlags
		want    bool
		wantErr string
	}{
		{"a file", "", plain, kubeFlags{kubeconfig: "", iface: ""}, false, ""},
		{"a file with a kubernetes section", "", withSection, kubeFlags{kubeconfig: "", iface: ""}, true, ""},
		{"--source file", "file", plain, kubeFlags{kubeconfig: "", iface: ""}, false, ""},
		{"--source kubernetes with a file", "kubernetes", plain, kubeFlags{kubeconfig: "/k", iface: ""}, true, ""},
		{"--source kubernetes alone", "kubernetes", nil, kubeFlags{kubeconfig: "/k", iface: "eth1"}, true, ""},
		{"nothing", "", nil, kubeFlags{kubeconfig: "", iface: ""}, false, "give --config FILE, or --source kubernetes"},
		{"--source file without a file", "file", nil, kubeFlags{kubeconfig: "", iface: ""}, false, "--source file needs --config FILE"},
		{"--source file, kubernetes section", "file", withSection, kubeFlags{kubeconfig: "", iface: ""}, false, "has a kubernetes section, which takes --source kubernetes"},
		{"--kubeconfig for a file", "", plain, kubeFlags{kubeconfig: "/k", iface: ""}, false, "apply to --source kubernetes only"},
		{"--interface with a file", "kubernetes", plain, kubeFlags{kubeconfig: "", iface: "eth1"}, false, "with --config, set node.interface"},
		{"--serve-classless for a file", "file", plain, kubeFlags{classless: new(bool)}, false, "apply to --source kubernetes only"},
		{"unknown source", "etcd", plain, kubeFlags{kubeconfig: "", iface: ""}, false, `--source "etcd": want file or kubernetes`},
		{"--nat-… without a file", "kubernetes", nil, kubeFlags{nat: &config.NATConfig{Sessions: 4096}}, true, ""},
		{"--nat-… with a file", "kubernetes", plain, kubeFlags{nat: &config.NATConfig{Sessions: 4096}}, false, "with --config, set the nat section in agent.yaml"},
		{"--nat-… for a file", "file", plain, kubeFlags{nat: &config.NATConfig{Sessions: 4096}}, false, "apply to --source kubernetes only"},
		{"--metrics without a file", "kubernetes", nil, kubeFlags{metrics: "10.0.0.10:9400"}, true, ""},
		{"--metrics with a file", "kubernetes", plain, kubeFlags{metrics: "10.0.0.10:9400"}, false, "with --config, set api.metrics in agent.yaml"},
		{"--metrics with a kubernetes section", "", withSection, kubeFlags{metrics: "10.0.0.10:9400"}, false, "with --config, set api.metrics in agent.yaml"},
		{"--metrics for a file", "file", plain, kubeFlags{metrics: "10.0.0.10:9400"}, false, "apply to --source kubernetes only"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := useKubernetes(tc.from, "agent.yaml", tc.cfg, tc.kf)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// The --nat-… flags of an agent without a file: each checked as the
// nat section's field, with the flag named; those not given stay zero
// (their defaults).
func TestNATFlags(t *testing.T) {
	all := map[string]bool{"nat-address": true, "nat-ports": true, "nat-sessions": true, "nat-timeouts": true}
	n, err := natFlags("10.0.0.12", "40000-49999", 4096, "tcpEstablished=2h, udp=30s", all)
	want := config.NATConfig{Address: netip.MustParseAddr("10.0.0.12"), Ports: config.PortRange{Min: 40000, Max: 49999}, Sessions: 4096,
		Timeouts: config.NATTimeouts{TCPEstablished: 2 * time.Hour, UDP: 30 * time.Second}}
	if err != nil || n == nil || *n != want {
		t.Fatalf("every flag: %+v, %v; want %+v", n, err, want)
	}
	if n, err := natFlags("", "", 0, "", map[string]bool{}); n != nil || err != nil {
		t.Errorf("no flag: %+v, %v; want nil", n, err)
	}
	if n, err := natFlags("", "", 2048, "", map[string]bool{"nat-sessions": true}); err != nil || *n != (config.NATConfig{Sessions: 2048}) {
		t.Errorf("--nat-sessions alone: %+v, %v", n, err)
	}
	for _, tc := range []struct {
		address, ports string
		sessions       uint
		timeouts, want string
	}{
		{"10.0.0.x", "", 0, "", `--nat-address "10.0.0.x": give a unicast IPv4 address`},
		{"127.0.0.1", "", 0, "", `--nat-address "127.0.0.1"`},
		{"", "20000", 0, "", "--nat-ports: 20000 is not a port range"},
		{"", "80-2000", 0, "", "--nat-ports: 80-2000 starts below port 1024"},
		{"", "", 100, "", "--nat-sessions 100: give 1024..16777216"},
		{"", "", 0, "tcp=1h", `"tcp=1h" is not NAME=DURATION with NAME tcpSyn, tcpEstablished, tcpClosing, udp or tcpTimeWait`},
		{"", "", 0, "udp=500ms", "--nat-timeouts: udp=500ms: give a duration from 1s to 24h"},
		{"", "", 0, "udp=soon", "--nat-timeouts: udp=soon"},
	} {
		set := map[string]bool{}
		for flag, v := range map[string]bool{"nat-address": tc.address != "", "nat-ports": tc.ports != "", "nat-sessions": tc.sessions != 0, "nat-timeouts": tc.timeouts != ""} {
			set[flag] = v
		}
		if _, err := natFlags(tc.address, tc.ports, tc.sessions, tc.timeouts, set); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error containing %q", tc, err, tc.want)
		}
	}
}

// --metrics is checked as api.metrics is (config.CheckMetrics), with the
// flag named; it may not be empty.
func TestMetricsFlag(t *testing.T) {
	for _, ok := range []string{"10.0.0.10:9400", "[10.0.0.10]:9400", "[fd00::2]:9400", "127.0.0.1:1", ":9400", "localhost:65535"} {
		if got, err := metricsFlag(ok); err != nil || got != ok {
			t.Errorf("%q: %q, %v; want it as given", ok, got, err)
		}
	}
	for _, tc := range []struct{ addr, want string }{
		{"", "--metrics needs HOST:PORT"},
		{"10.0.0.10", `--metrics: "10.0.0.10" is not host:port`},
		{"10.0.0.10:0", `--metrics: "10.0.0.10:0" has port "0"; the port must be a number in 1..65535`},
		{"10.0.0.10:prometheus", "the port must be a number"},
		{"node-1:9400", `has host "node-1"; the host must be an IP address, localhost, or empty`},
		{"$(HOST_IP):9400", `has host "$(HOST_IP)"`},
	} {
		if _, err := metricsFlag(tc.addr); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error containing %q", tc.addr, err, tc.want)
		}
	}
}
