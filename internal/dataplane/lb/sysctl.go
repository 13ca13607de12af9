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
		if err := setSysctl(filepath.Join("/proc/sys/net/ipv4/conf", ifname, k), "1"); err != nil {
			return err
		}
	}
	return nil
}

// PrepareInterface6 sets what the LB program needs of the interface for
// IPv6 (Load calls it when the node has an IPv6 address): IPv6
// forwarding, as bpf_fib_lookup answers FWD_DISABLED for IPv6 otherwise.
// An interface that forwards ignores router advertisements unless
// accept_ra is 2: a node that takes its IPv6 route from them (accept_ra
// 1) keeps taking it.
func PrepareInterface6(ifname string) error {
	dir := filepath.Join("/proc/sys/net/ipv6/conf", ifname)
	ra, err := os.ReadFile(filepath.Join(dir, "accept_ra"))
	if err != nil {
		return fmt.Errorf("read %s: %w (is IPv6 disabled on %s?)", filepath.Join(dir, "accept_ra"), err, ifname)
	}
	if strings.TrimSpace(string(ra)) == "1" {
		if err := setSysctl(filepath.Join(dir, "accept_ra"), "2"); err != nil {
			return err
		}
	}
	return setSysctl(filepath.Join(dir, "forwarding"), "1")
}

func setSysctl(p, v string) error {
	cur, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("read %s: %w", p, err)
	}
	if strings.TrimSpace(string(cur)) == v {
		return nil
	}
	if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
		return fmt.Errorf("set %s=%s: %w", p, v, err)
	}
	return nil
}
