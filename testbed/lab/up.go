package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/testbed/netns"
	"github.com/xlbproject/xlb/testbed/xdppass"
)

// readyTimeout bounds the wait for the backends' servers to listen.
const readyTimeout = 10 * time.Second

// Up builds the lab that s describes and returns its plan. It refuses to
// touch a lab that already exists (run Down first). If any step fails, Up
// removes whatever it had made before returning the error.
func Up(ctx context.Context, s Spec) (Plan, error) {
	p, err := NewPlan(s)
	if err != nil {
		return Plan{}, err
	}
	prefix := p.Spec.Prefix
	existing, err := labNamespaces(prefix)
	if err != nil {
		return Plan{}, err
	}
	if len(existing) > 0 {
		return Plan{}, fmt.Errorf("lab %q already exists (namespaces %s): run `xlb lab down --prefix %s` first", prefix, strings.Join(existing, ", "), prefix)
	}
	for _, dir := range []string{p.StateDir, p.PinDir} {
		if _, err := os.Stat(dir); err == nil {
			return Plan{}, fmt.Errorf("lab %q: %s is left from an earlier lab: run `xlb lab down --prefix %s` first", prefix, dir, prefix)
		}
	}
	if fi, err := os.Stat(p.Spec.Binary); err != nil || fi.IsDir() {
		return Plan{}, fmt.Errorf("xlb executable %q: not a file (build it, or set its path)", p.Spec.Binary)
	}

	// Creating the state directory claims the prefix: of two concurrent
	// Ups only one gets past here, and the other must not call Down.
	if err := claim(p.StateDir); err != nil {
		if errors.Is(err, os.ErrExist) {
			return Plan{}, fmt.Errorf("lab %q is being built by someone else (%s exists)", prefix, p.StateDir)
		}
		return Plan{}, fmt.Errorf("lab %q: %w", prefix, err)
	}

	slog.Info("lab up", "prefix", prefix, "clients", len(p.Clients), "nodes", len(p.Nodes), "backends", len(p.Backends),
		"router", p.Spec.Router, "reflector", p.Spec.Reflector, "bfd", p.Spec.BFD)
	if err := build(ctx, p); err != nil {
		if derr := Down(prefix); derr != nil {
			err = errors.Join(err, fmt.Errorf("removing the half-built lab: %w (run `xlb lab down --prefix %s`)", derr, prefix))
		}
		return Plan{}, fmt.Errorf("lab %q: %w", prefix, err)
	}
	return p, nil
}

func build(ctx context.Context, p Plan) error {
	spec, err := json.MarshalIndent(p.Spec, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(specFile(p.Spec.Prefix), spec, 0o644); err != nil {
		return err
	}
	if err := ensureBPFFS(); err != nil {
		return err
	}
	if err := mkdirAll(filepath.Join(p.PinDir, p.Router), 0o700); err != nil {
		return fmt.Errorf("pin directory: %w", err)
	}

	steps := []struct {
		what string
		do   func(context.Context, Plan) error
	}{
		{"namespaces", addNamespaces},
		{"router", setUpRouter},
		{"hosts", setUpHosts},
		{"pods", setUpPods},
		{"sysctls", setSysctlsAll},
		{"client checksums", fullChecksums},
		{"backend checksums", backendChecksums},
		{"VIP route", setStaticRoute},
		{"XDP_PASS on router ports", attachPass},
		{"backend decapsulation", setUpDecap},
		{"backend servers", startServers},
		{"reply routes", routeRepliesAll},
		{p.Spec.Router + " router", startRouter},
	}
	for _, st := range steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := st.do(ctx, p); err != nil {
			return fmt.Errorf("%s: %w", st.what, err)
		}
	}
	return nil
}

// mkdirAll is os.MkdirAll that survives another lab's Down removing the
// shared, empty parent directory between creating it and its child.
func mkdirAll(dir string, perm os.FileMode) error {
	var err error
	for range 3 {
		if err = os.MkdirAll(dir, perm); !errors.Is(err, os.ErrNotExist) {
			break
		}
	}
	return err
}

// claim creates dir, failing with os.ErrExist if it exists already.
func claim(dir string) error {
	var err error
	for range 3 {
		if err = mkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return err
		}
		if err = os.Mkdir(dir, 0o755); !errors.Is(err, os.ErrNotExist) {
			break
		}
	}
	return err
}

// ensureBPFFS mounts bpffs at /sys/fs/bpf if nothing is mounted there, as
// systemd does on most distributions: pins need it.
func ensureBPFFS() error {
	var st unix.Statfs_t
	if err := unix.Statfs(bpffsRoot, &st); err != nil {
		return fmt.Errorf("%s: %w", bpffsRoot, err)
	}
	if st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	slog.Info("mounting bpffs", "path", bpffsRoot)
	if err := unix.Mount("bpf", bpffsRoot, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mount bpffs on %s: %w (mount it yourself: mount -t bpf bpf %s)", bpffsRoot, err, bpffsRoot)
	}
	return nil
}

func addNamespaces(ctx context.Context, p Plan) error {
	for _, ns := range p.Namespaces() {
		if _, err := ip(ctx, "netns", "add", ns); err != nil {
			return err
		}
		if _, err := ip(ctx, "-n", ns, "link", "set", "lo", "up"); err != nil {
			return err
		}
		if p.Spec.IPv6 {
			if err := noDAD(ns); err != nil {
				return err
			}
		}
	}
	return nil
}

// noDAD turns duplicate address detection off for the interfaces that
// namespace ns gets from now on: in a lab every address is unique by
// plan, and an address in DAD (a second or more) can be neither a
// packet's source nor a BGP session's. The lab's own addresses are
// added with nodad as well; this covers the link-local ones.
func noDAD(ns string) error {
	err := setSysctls(ns, []sysctl{{"ipv6/conf/all/accept_dad", "0"}, {"ipv6/conf/default/accept_dad", "0"}})
	if err != nil && errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w (the kernel has no IPv6: boot it without ipv6.disable=1, or build the lab without --ipv6)", err)
	}
	return err
}

// setUpRouter makes one bridge per segment in the router namespace, with
// the router's address on it.
func setUpRouter(ctx context.Context, p Plan) error {
	for _, seg := range []Segment{p.ClientSegment, p.NodeSegment, p.BackendSegment} {
		mtu := strconv.Itoa(seg.MTU)
		gw := netip.PrefixFrom(seg.Gateway(), seg.Subnet.Bits()).String()
		for _, args := range [][]string{
			{"link", "add", seg.Bridge, "mtu", mtu, "type", "bridge"},
			{"addr", "add", gw, "dev", seg.Bridge},
			{"link", "set", seg.Bridge, "up"},
		} {
			if _, err := ip(ctx, append([]string{"-n", p.Router}, args...)...); err != nil {
				return err
			}
		}
		if seg.Subnet6.IsValid() {
			gw6 := netip.PrefixFrom(seg.Gateway6(), seg.Subnet6.Bits()).String()
			if _, err := ip(ctx, "-n", p.Router, "addr", "add", gw6, "dev", seg.Bridge, "nodad"); err != nil {
				return err
			}
		}
	}
	return nil
}

// setUpHosts gives every host, and the route reflector, a veth pair: eth0
// in the host namespace, the peer enslaved to its segment's bridge in the
// router namespace. Both ends are created inside namespaces, so no name
// ever appears on the host.
func setUpHosts(ctx context.Context, p Plan) error {
	nodes := p.Nodes
	if p.Reflector != nil {
		nodes = append(slices.Clone(nodes), *p.Reflector)
	}
	for _, g := range []struct {
		seg   Segment
		hosts []Host
		// onLink: the hosts reach the VIPs on the link, by ARP (the
		// layer-2 lab's clients).
		onLink bool
	}{{p.ClientSegmentOf(), p.Clients, p.Spec.L2}, {p.NodeSegment, nodes, false}, {p.BackendSegment, p.Backends, false}} {
		for _, h := range g.hosts {
			mtu := strconv.Itoa(h.MTU)
			addr := netip.PrefixFrom(h.Addr, g.seg.Subnet.Bits()).String()
			for _, args := range [][]string{
				{"-n", p.Router, "link", "add", h.Peer, "mtu", mtu, "type", "veth", "peer", "name", h.Interface, "mtu", mtu, "netns", h.Namespace},
				{"-n", p.Router, "link", "set", h.Peer, "master", g.seg.Bridge, "up"},
				{"-n", h.Namespace, "addr", "add", addr, "dev", h.Interface},
				{"-n", h.Namespace, "link", "set", h.Interface, "up"},
				{"-n", h.Namespace, "route", "add", "default", "via", h.Gateway.String()},
			} {
				if _, err := ip(ctx, args...); err != nil {
					return fmt.Errorf("%s: %w", h.Name, err)
				}
			}
			if g.onLink {
				if _, err := ip(ctx, "-n", h.Namespace, "route", "add", p.VIPPrefix.String(), "dev", h.Interface); err != nil {
					return fmt.Errorf("%s: %w", h.Name, err)
				}
			}
			if q := p.Spec.EgressQueue; q > 0 {
				for _, end := range [][]string{{p.Router, h.Peer}, {h.Namespace, h.Interface}} {
					if err := tc(ctx, "-n", end[0], "qdisc", "replace", "dev", end[1], "root", "pfifo", "limit", strconv.Itoa(q)); err != nil {
						return fmt.Errorf("%s: %w", h.Name, err)
					}
				}
			}
			if !h.Addr6.IsValid() {
				continue
			}
			addr6 := netip.PrefixFrom(h.Addr6, g.seg.Subnet6.Bits()).String()
			for _, args := range [][]string{
				{"-n", h.Namespace, "addr", "add", addr6, "dev", h.Interface, "nodad"},
				{"-n", h.Namespace, "-6", "route", "add", "default", "via", h.Gateway6.String()},
			} {
				if _, err := ip(ctx, args...); err != nil {
					return fmt.Errorf("%s: %w", h.Name, err)
				}
			}
			if g.onLink && p.VIPPrefix6.IsValid() {
				if _, err := ip(ctx, "-n", h.Namespace, "-6", "route", "add", p.VIPPrefix6.String(), "dev", h.Interface); err != nil {
					return fmt.Errorf("%s: %w", h.Name, err)
				}
			}
		}
	}
	return nil
}

func setSysctlsAll(_ context.Context, p Plan) error {
	router := []sysctl{
		{"ipv4/ip_forward", "1"},
		// Hash on the L4 5-tuple, so flows of one client spread over
		// the nodes (the default hashes on addresses only).
		{"ipv4/fib_multipath_hash_policy", "1"},
	}
	if p.Spec.IPv6 {
		router = append(router, sysctl{"ipv6/conf/all/forwarding", "1"}, sysctl{"ipv6/fib_multipath_hash_policy", "1"})
	}
	if err := setSysctls(p.Router, router); err != nil {
		return err
	}
	if err := noRPFilter(p.Router); err != nil {
		return err
	}
	for _, n := range p.Nodes {
		node := []sysctl{
			{"ipv4/ip_forward", "1"},
			// Packets the XDP program cannot forward yet (next hop's
			// neighbour unresolved) go up to the kernel, which forwards
			// them; their outer source is the node's own address.
			{"ipv4/conf/" + n.Interface + "/accept_local", "1"},
		}
		if p.Spec.IPv6 {
			// IPv6 has no martian check on a local source: forwarding
			// is all such packets need.
			node = append(node, sysctl{"ipv6/conf/all/forwarding", "1"})
		}
		if err := setSysctls(n.Namespace, node); err != nil {
			return err
		}
		if err := noRPFilter(n.Namespace); err != nil {
			return err
		}
	}
	if p.Spec.IPv6 && !p.Spec.SkipDecap && p.Spec.Pods == 0 && !p.Spec.PlainBackends {
		// A backend chains a packet to a previous owner whose neighbour
		// entry is not resolved yet through the kernel, which forwards
		// an IPv6 packet only with forwarding on host-wide
		// (docs/operations.md, daisy chaining over IPv6).
		for _, b := range p.Backends {
			if err := setSysctls(b.Namespace, []sysctl{{"ipv6/conf/all/forwarding", "1"}}); err != nil {
				return err
			}
		}
	}
	return nil
}

// fullChecksums turns off transmit checksum offload on the clients. A
// veth hands the kernel's half-done (CHECKSUM_PARTIAL) TCP/UDP checksums
// to the next namespace, relying on nobody needing them; an XDP program
// that tunnels the packet onward loses that note, and the backend would
// drop the segment as corrupt. Real NICs put complete checksums on the
// wire, so only clients on the same host as an xlb node need this (see
// docs/operations.md).
func fullChecksums(ctx context.Context, p Plan) error {
	for _, c := range p.Clients {
		cmd := exec.CommandContext(ctx, "ip", "netns", "exec", c.Namespace, "ethtool", "-K", c.Interface, "tx", "off")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: ethtool -K %s tx off: %v: %s (install ethtool)", c.Name, c.Interface, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// attachPass puts XDP_PASS on the router-side peers of the nodes,
// backends and clients. Without an XDP program on the peer, a veth drops
// the frames its other end sends with XDP_TX or redirect (the nodes',
// the backends'). And without one, a veth hands each frame to the
// backlog of the CPU that sent it, so two segments of one flow sent
// from two CPUs (a client's ACK from the softirq that took a SYN-ACK in,
// its request from the application) can reach the router in the other
// order; with one, every frame goes through the port's one ring, in the
// order sent, as a NIC's receive queue keeps a flow's frames in order.
func attachPass(_ context.Context, p Plan) error {
	if p.Spec.SkipPass {
		return nil
	}
	for _, h := range slices.Concat(p.Nodes, p.Backends, p.Clients) {
		pin := filepath.Join(p.PinDir, p.Router, "xdp-pass-"+h.Peer)
		if err := xdppass.Attach(p.Router, h.Peer, pin); err != nil {
			return fmt.Errorf("%s: %w", h.Peer, err)
		}
	}
	return nil
}

// setUpDecap runs `xlb backend` in every backend namespace: VIPs local,
// decapsulation program attached and pinned under the host's pin dir,
// daisy chaining from the lab's xlb nodes to its backends. Backends that
// are Kubernetes nodes (Spec.Pods) are left to the user of the lab, who
// runs their translation; plain backends (Spec.PlainBackends) get
// nothing.
func setUpDecap(ctx context.Context, p Plan) error {
	if p.Spec.SkipDecap || p.Spec.Pods > 0 || p.Spec.PlainBackends {
		return nil
	}
	for _, h := range p.Backends {
		args := []string{p.Spec.Binary, "backend", "--interface", h.Interface}
		for _, v := range slices.Concat(p.VIPs, p.VIPs6) {
			args = append(args, "--vip", v.String())
		}
		args = append(args, ChainArgs(p)...)
		args = append(args, "--pin-path", h.PinDir)
		cmd := exec.CommandContext(ctx, p.Spec.Binary, append([]string{netns.ExecCommand, h.Namespace, "--"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %s: %w: %s", h.Name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// ChainArgs are the `xlb backend` flags that let the lab's backends chain
// packets: from the xlb nodes, to the other backends, by their addresses
// of both families in a dual-stack lab.
func ChainArgs(p Plan) []string {
	var from, to []string
	for _, n := range p.Nodes {
		from = append(from, n.Addr.String())
		if n.Addr6.IsValid() {
			from = append(from, n.Addr6.String())
		}
	}
	for _, b := range p.Backends {
		to = append(to, b.Addr.String())
		if b.Addr6.IsValid() {
			to = append(to, b.Addr6.String())
		}
	}
	if len(from) == 0 || len(to) == 0 {
		return nil
	}
	return []string{"--chain-from", strings.Join(from, ","), "--chain-to", strings.Join(to, ",")}
}

// ServerName is the StartProcess name of backend h's embedded server.
func ServerName(h Host) string { return "serve-" + h.Name }

// startServers starts the servers of the backends, or of the pods in a
// Kubernetes lab (Spec.Pods) on the pods' own ports: the embedded
// server, or nginx for plain backends.
func startServers(ctx context.Context, p Plan) error {
	if p.Spec.PlainBackends {
		return startPlainServers(ctx, p)
	}
	prefix := p.Spec.Prefix
	servers, httpPort, udpPort := p.Backends, HTTPPort, UDPPort
	if len(p.Pods) > 0 {
		servers, httpPort, udpPort = nil, PodHTTPPort, PodUDPPort
		for _, pod := range p.Pods {
			servers = append(servers, pod.Host)
		}
	}
	for _, h := range servers {
		args := []string{p.Spec.Binary, "lab", "serve",
			"--name", h.Name,
			"--http", net.JoinHostPort("0.0.0.0", strconv.Itoa(httpPort)),
			"--udp", net.JoinHostPort("0.0.0.0", strconv.Itoa(udpPort)),
			"--control", ControlSocket(prefix, h)}
		if p.Spec.IPv6 {
			args = append(args, "--http6", net.JoinHostPort("::", strconv.Itoa(httpPort)),
				"--udp6", net.JoinHostPort("::", strconv.Itoa(udpPort)))
		}
		_, err := StartProcess(prefix, h.Namespace, ServerName(h), args...)
		if err != nil {
			return err
		}
	}
	deadline := time.Now().Add(readyTimeout)
	for _, h := range servers {
		name := ServerName(h)
		running := func() bool {
			rec, err := readRecord(prefix, name)
			return err == nil && ours(rec)
		}
		if err := waitListening(ctx, h.Namespace, httpPort, deadline, running); err != nil {
			return fmt.Errorf("%s: %w; its log %s ends with: %s", h.Name, err, LogFile(prefix, name), logTail(LogFile(prefix, name)))
		}
	}
	return nil
}

// waitListening waits until a TCP connection to port on the namespace's
// loopback succeeds, giving up early once the server is no longer
// running. Serve binds UDP before TCP, so UDP is ready too.
func waitListening(ctx context.Context, ns string, port int, deadline time.Time, running func() bool) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for {
		err := netns.Do(ns, func() error {
			c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
			if err == nil {
				c.Close()
			}
			return err
		})
		switch {
		case err == nil:
			return nil
		case !running():
			return errors.New("the server exited")
		case time.Now().After(deadline):
			return fmt.Errorf("no server on %s after %s: %w", addr, readyTimeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// LogTail returns the last n lines of a log file on one line, for an
// error message: the lab's logs go when the lab is taken down.
func LogTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

func logTail(path string) string { return LogTail(path, 5) }
