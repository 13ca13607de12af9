package agent

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/testbed/netns"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// hostNamespace makes a network namespace holding 10.0.1.2/24 on veth0
// and 192.0.2.9/32 on its peer veth1 (labelled veth1:vip), removed when
// t ends.
func hostNamespace(t *testing.T) string {
	t.Helper()
	testenv.RequireRoot(t, "network namespaces")
	name := fmt.Sprintf("xlbtest-host-%d", os.Getpid())
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	_ = exec.Command("ip", "netns", "del", name).Run()
	ip("netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	ip("-n", name, "link", "add", "veth0", "type", "veth", "peer", "name", "veth1")
	ip("-n", name, "addr", "add", "10.0.1.2/24", "dev", "veth0")
	ip("-n", name, "addr", "add", "192.0.2.9/32", "dev", "veth1", "label", "veth1:vip")
	return name
}

// TestReloadRefusesNodeAddresses: a reload of a file whose VIP is the
// node's address (the interface's, node.address unset) or any other
// address of the host, or whose backend is the node address, fails with
// the file's line; the running configuration stays.
func TestReloadRefusesNodeAddresses(t *testing.T) {
	ns := hostNamespace(t)
	path := filepath.Join(t.TempDir(), "agent.yaml")
	const file = "node:\n  interface: veth0\nservices:\n  - name: ssh\n    vip: %s\n    port: 22\n    backends:\n      - address: %s\n"
	write := func(vip, backend string) {
		t.Helper()
		if err := os.WriteFile(path, fmt.Appendf(nil, file, vip, backend), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("10.99.0.1", "10.0.3.2")
	var cfg *config.Config
	if err := netns.Do(ns, func() (err error) { cfg, err = LoadFile(path); return err }); err != nil {
		t.Fatal(err)
	}
	a, f, _ := testAgentAt(t, path, cfg, nil)

	for _, tc := range []struct {
		vip, backend, want string
	}{
		{"10.0.1.2", "10.0.3.2", path + ":5: services[0].vip: 10.0.1.2 is this node's own address (the first IPv4 address of node.interface veth0"},
		{"192.0.2.9", "10.0.3.2", path + ":5: services[0].vip: 192.0.2.9 is configured on this host (interface veth1)"},
		{"10.99.0.1", "10.0.1.2", path + ":8: services[0].backends[0].address: 10.0.1.2 is this node's own address"},
	} {
		write(tc.vip, tc.backend)
		mark := f.mark()
		err := netns.Do(ns, func() error { return reload(a) })
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("vip %s, backend %s: reload: %v\nwant an error containing %q", tc.vip, tc.backend, err, tc.want)
		}
		st := status(t, a)
		if st.Config.Result != api.ResultError || st.Config.LoadError == "" || st.Config.ApplyError != "" || len(st.Services) != 1 || st.Services[0].VIP.String() != "10.99.0.1" {
			t.Errorf("after the refused reload: %+v, services %+v", st.Config, st.Services)
		}
		if calls := f.mutations(mark); len(calls) > 0 {
			t.Errorf("a refused reload changed the data plane: %v", calls)
		}
	}
}

// TestLoadChecksNATPorts: the agent reads the namespace's
// net.ipv4.ip_local_port_range with its addresses, so a file whose full
// NAT would allocate the ports of the node's own connections fails where
// the agent reads it (start, reload, --check), and passes once the range
// is narrowed.
func TestLoadChecksNATPorts(t *testing.T) {
	ns := hostNamespace(t)
	path := filepath.Join(t.TempDir(), "agent.yaml")
	const file = "node:\n  interface: veth0\nservices:\n  - name: app\n    vip: 10.99.0.1\n    port: 443\n    forwarding: nat\n    backends:\n      - {address: 10.0.3.2, port: 8443}\n"
	if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	load := func(portRange string) (*config.Config, error) {
		var cfg *config.Config
		err := netns.Do(ns, func() error {
			// A file of /proc/sys/net is the namespace of whoever opens it.
			if err := os.WriteFile(localPortRange, []byte(portRange), 0o644); err != nil {
				return err
			}
			var err error
			cfg, err = LoadFile(path)
			return err
		})
		return cfg, err
	}
	_, err := load("1024 65535")
	want := path + ":7: services[0].forwarding: forwarding nat takes source ports from nat.ports 20000-32767, which overlap this host's net.ipv4.ip_local_port_range 1024-65535"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("range 1024-65535: %v\nwant an error containing %q", err, want)
	}
	if cfg, err := load("32768 60999"); err != nil || cfg.Services[0].Forwarding != config.NAT {
		t.Errorf("range 32768-60999: %v", err)
	}
}

func TestParseLocalPorts(t *testing.T) {
	if r, err := parseLocalPorts("32768\t60999\n"); err != nil || r != (config.PortRange{Min: 32768, Max: 60999}) {
		t.Errorf("32768 60999: %v, %v", r, err)
	}
	for _, bad := range []string{"", "32768", "60999 32768", "1 70000", "a b"} {
		if _, err := parseLocalPorts(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
