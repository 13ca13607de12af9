package main

import (
	"strings"
	"testing"

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
