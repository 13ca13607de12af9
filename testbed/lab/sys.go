package lab

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/xlbproject/xlb/testbed/netns"
)

// ip runs iproute2's ip with args and returns its standard output. The
// error carries the command line and ip's own message.
func ip(ctx context.Context, args ...string) ([]byte, error) {
	return iproute2(ctx, "ip", args...)
}

// tc runs iproute2's tc with args, its error as ip's.
func tc(ctx context.Context, args ...string) error {
	_, err := iproute2(ctx, "tc", args...)
	return err
}

// iproute2 runs tool (ip, tc) with args and returns its standard output;
// the error carries the command line and the tool's own message.
func iproute2(ctx context.Context, tool string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, tool, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", tool, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// sysctl is one network sysctl, named by its path under /proc/sys/net.
type sysctl struct{ key, value string }

// setSysctls writes sysctls inside namespace ns. Files under /proc/sys/net
// belong to the network namespace of the thread that opens them, so the
// writes happen inside netns.Do; the host's own settings are never
// touched.
func setSysctls(ns string, settings []sysctl) error {
	return netns.Do(ns, func() error {
		for _, s := range settings {
			path := filepath.Join("/proc/sys/net", s.key)
			if err := os.WriteFile(path, []byte(s.value), 0o644); err != nil {
				return fmt.Errorf("namespace %s: sysctl net/%s=%s: %w", ns, s.key, s.value, err)
			}
		}
		return nil
	})
}

// noRPFilter turns reverse-path filtering off on every interface of
// namespace ns (all, default and each existing one): with DSR, packets
// legitimately arrive from sources that are routed elsewhere.
func noRPFilter(ns string) error {
	var ifaces []string
	err := netns.Do(ns, func() error {
		entries, err := os.ReadDir("/proc/sys/net/ipv4/conf")
		if err != nil {
			return err
		}
		for _, e := range entries {
			ifaces = append(ifaces, e.Name())
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("namespace %s: list interfaces: %w", ns, err)
	}
	var settings []sysctl
	for _, i := range ifaces {
		settings = append(settings, sysctl{"ipv4/conf/" + i + "/rp_filter", "0"})
	}
	return setSysctls(ns, settings)
}

// namespacePattern matches exactly the namespace names a lab with this
// prefix creates, and no other lab's: the prefix "xlb" does not match
// "xlb-2-router".
func namespacePattern(prefix string) *regexp.Regexp {
	return regexp.MustCompile(`^` + regexp.QuoteMeta(prefix) + `-(router|rr|(client|node|be)[1-9][0-9]*|be[1-9][0-9]*-pod[1-9][0-9]*)$`)
}

// labNamespaces lists the existing namespaces that belong to the lab,
// whether or not its state survived.
func labNamespaces(prefix string) ([]string, error) {
	entries, err := os.ReadDir(netns.Dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list network namespaces: %w", err)
	}
	re := namespacePattern(prefix)
	var names []string
	for _, e := range entries {
		if re.MatchString(e.Name()) {
			names = append(names, e.Name())
		}
	}
	// Plan order: router, reflector, clients, nodes, backends, each by
	// number, then pods by name.
	key := func(name string) (int, int) {
		m := re.FindStringSubmatch(name) // m[1] "router", "rr", "node12" or "be1-pod2", m[2] "", "", "node" or ""
		if m[2] == "" {
			if i := slices.Index([]string{"router", "rr"}, m[1]); i >= 0 {
				return i, 0
			}
			return 5, 0
		}
		k, _ := strconv.Atoi(strings.TrimPrefix(m[1], m[2]))
		return 2 + slices.Index([]string{"client", "node", "be"}, m[2]), k
	}
	slices.SortFunc(names, func(a, b string) int {
		ra, ka := key(a)
		rb, kb := key(b)
		return cmp.Or(cmp.Compare(ra, rb), cmp.Compare(ka, kb), strings.Compare(a, b))
	})
	return names, nil
}
