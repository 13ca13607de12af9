package lb

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// PrepareInterface sets the two per-interface sysctls the LB program
// depends on:
//   - forwarding: bpf_fib_lookup answers FWD_DISABLED on an ingress
//     interface that does not forward.
//   - accept_local: a packet whose next hop is not resolved yet is handed
//     to the kernel already encapsulated, with this node's address as
//     source; without accept_local the kernel drops it as a martian.
//
// Both are per interface: nothing else on the host changes.
func PrepareInterface(ifname string) error {
	for _, k := range []string{"forwarding", "accept_local"} {
		p := filepath.Join("/proc/sys/net/ipv4/conf", ifname, k)
		cur, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		if strings.TrimSpace(string(cur)) == "1" {
			continue
		}
		if err := os.WriteFile(p, []byte("1\n"), 0o644); err != nil {
			return fmt.Errorf("set %s=1: %w", p, err)
		}
	}
	return nil
}
