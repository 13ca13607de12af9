package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/netns"
	"github.com/xlbproject/xlb/testbed/xdppass"
)

// The service every load-balancing variant serves, and where the
// backends' sink sockets listen.
const (
	servicePort = 7777
	// sinkBuffer is the receive buffer of a backend's sink socket: the
	// socket is never read, so after the first few datagrams the kernel
	// drops each one at the socket (UDP RcvbufErrors). The backends'
	// application thereby costs nothing, and every datagram still goes
	// all the way to a socket.
	sinkBuffer = 4096
	// routedTable is the router's routing table for the "routed"
	// variant: VIP traffic that comes back from the node goes to the
	// first backend.
	routedTable = "100"
	// pathQueues is the number of queues of every veth of the path (at
	// most: see pathQueueCount).
	pathQueues = 2
)

// path is the lab plus what pktbench adds to it: multi-queue veths with
// XPS, XDP_PASS on the client's router port, the backends' decapsulation
// and sink sockets, and a policy route for the "routed" variant.
type path struct {
	plan     lab.Plan
	xlb      string
	client   lab.Host
	node     lab.Host
	backends []lab.Host
	// srcMAC is the client's eth0, dstMAC the router's bridge on the
	// client segment: the generated frames' Ethernet addresses.
	srcMAC, dstMAC net.HardwareAddr
	sinks          []*net.UDPConn
	// clientSinks are the client's sockets for the NAT variants'
	// reverse runs (openClientSinks).
	clientSinks []*net.UDPConn
	// log records every command pktbench ran, for the report.
	log *cmdLog
}

// cmdLog records commands in the order they first ran: a command that
// every round repeats (loading the same rules) is recorded once.
type cmdLog struct {
	lines []string
	seen  map[string]bool
}

func (l *cmdLog) add(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	if l.seen[line] {
		return
	}
	if l.seen == nil {
		l.seen = map[string]bool{}
	}
	l.seen[line] = true
	l.lines = append(l.lines, line)
}

// run runs a program, logs its command line and returns its output; the
// error carries the output.
func (l *cmdLog) run(ctx context.Context, stdin string, argv ...string) (string, error) {
	l.add("%s", shellLine(argv))
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// shellLine writes argv as a shell would read it back: an argument
// with spaces or shell characters in single quotes.
func shellLine(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a == "" || strings.ContainsAny(a, " \t\n;&|<>()$`\\\"'*?[]#~=%") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}

// inNS runs argv inside namespace ns with `ip netns exec`, which also
// mounts the namespace's own sysfs (for /sys/class/net writes).
func (l *cmdLog) inNS(ctx context.Context, ns string, argv ...string) (string, error) {
	return l.run(ctx, "", append([]string{"ip", "netns", "exec", ns}, argv...)...)
}

// labSpec is the lab pktbench builds: one client, the static router, one
// xlb node and two backends. The XDP_PASS programs and the backends'
// decapsulation are left out: pktbench sets up the queues first (a veth
// refuses to change them under an XDP program, or keeps the new queues
// without one) and attaches them itself.
func labSpec(prefix, xlb string) lab.Spec {
	return lab.Spec{Prefix: prefix, Clients: 1, Nodes: 1, Backends: 2, Binary: xlb,
		Router: lab.RouterStatic, SkipPass: true, SkipDecap: true}
}

// setUp adds pktbench's pieces to a lab that lab.Up built from labSpec.
func setUp(ctx context.Context, p lab.Plan, xlb string, log *cmdLog) (*path, error) {
	pa := &path{plan: p, xlb: xlb, client: p.Clients[0], node: p.Nodes[0], backends: p.Backends, log: log}
	var err error
	if pa.srcMAC, err = linkMAC(pa.client.Namespace, pa.client.Interface); err != nil {
		return nil, err
	}
	if pa.dstMAC, err = linkMAC(p.Router, p.ClientSegment.Bridge); err != nil {
		return nil, err
	}
	queues := pathQueueCount()
	q := strconv.Itoa(queues)
	// Every veth pair of the path gets pathQueues queues both ways,
	// before any XDP program is attached.
	pairs := [][2]string{{p.Router, pa.client.Peer}, {p.Router, pa.node.Peer}}
	for _, b := range pa.backends {
		pairs = append(pairs, [2]string{p.Router, b.Peer})
	}
	for _, h := range p.Hosts() {
		pairs = append(pairs, [2]string{h.Namespace, h.Interface})
	}
	for _, d := range pairs {
		if _, err := log.inNS(ctx, d[0], "ethtool", "-L", d[1], "rx", q, "tx", q); err != nil {
			return nil, fmt.Errorf("queues: %w (a veth has as many queues at most as the machine has CPUs)", err)
		}
	}
	// XPS: a packet leaves on the queue of the CPU that sends it, and a
	// veth delivers it to the peer's receive queue of the same number,
	// whose NAPI runs on that CPU: each CPU keeps to its own queues.
	if err := pa.setXPS(ctx, p.Router, pa.node.Peer, queues); err != nil {
		return nil, err
	}
	if err := pa.setXPS(ctx, pa.node.Namespace, pa.node.Interface, queues); err != nil {
		return nil, err
	}
	for _, b := range pa.backends {
		if err := pa.setXPS(ctx, p.Router, b.Peer, queues); err != nil {
			return nil, err
		}
	}
	// XDP_PASS on the router's ports: the generator's frames leave the
	// client through XDP (live frames), and a node's XDP_TX frames come
	// back through n1; a veth drops frames sent by XDP unless its peer
	// has an XDP program (DESIGN.md). The lab would attach the node's
	// and backends' itself; the client's is pktbench's own.
	ports := []string{pa.client.Peer, pa.node.Peer}
	for _, b := range pa.backends {
		ports = append(ports, b.Peer)
	}
	for _, port := range ports {
		pin := filepath.Join(p.PinDir, p.Router, "xdp-pass-"+port)
		log.add("xdppass.Attach(%s, %s) # XDP_PASS, pinned at %s", p.Router, port, pin)
		if err := xdppass.Attach(p.Router, port, pin); err != nil {
			return nil, fmt.Errorf("XDP_PASS on %s: %w", port, err)
		}
	}
	// The backends' decapsulation, as `xlb lab up` runs it.
	for _, b := range pa.backends {
		argv := []string{xlb, netns.ExecCommand, b.Namespace, "--", xlb, "backend", "--interface", b.Interface}
		for _, v := range p.VIPs {
			argv = append(argv, "--vip", v.String())
		}
		argv = append(argv, lab.ChainArgs(p)...)
		argv = append(argv, "--pin-path", b.PinDir)
		if _, err := log.run(ctx, "", argv...); err != nil {
			return nil, fmt.Errorf("%s: %w", b.Name, err)
		}
	}
	// The "routed" variant: VIP traffic the node routes back to the
	// router goes on to the first backend, which has the VIP on lo.
	vip := netip.PrefixFrom(p.VIPs[0], 32).String()
	for _, args := range [][]string{
		{"ip", "-n", p.Router, "rule", "add", "iif", p.NodeSegment.Bridge, "to", vip, "lookup", routedTable, "pref", routedTable},
		{"ip", "-n", p.Router, "route", "add", vip, "via", pa.backends[0].Addr.String(), "table", routedTable},
	} {
		if _, err := log.run(ctx, "", args...); err != nil {
			return nil, err
		}
	}
	for _, b := range pa.backends {
		c, err := sink(b.Namespace)
		if err != nil {
			pa.closeSinks()
			return nil, err
		}
		pa.sinks = append(pa.sinks, c)
	}
	log.add("# in each backend: a UDP socket on 0.0.0.0:%d with SO_RCVBUF %d, never read", servicePort, sinkBuffer)
	return pa, nil
}

// setXPS maps transmit queue i of dev in ns to CPU i (queues beyond the
// CPUs wrap around).
func (pa *path) setXPS(ctx context.Context, ns, dev string, queues int) error {
	var script strings.Builder
	for i := range queues {
		fmt.Fprintf(&script, "echo %x > /sys/class/net/%s/queues/tx-%d/xps_cpus; ", 1<<(i%maxCPUs()), dev, i)
	}
	if _, err := pa.log.inNS(ctx, ns, "sh", "-c", strings.TrimSpace(script.String())); err != nil {
		return fmt.Errorf("XPS on %s: %w", dev, err)
	}
	return nil
}

// setNodeQueues gives the node's ingress veth pair q queues: the node's
// eth0 receives on q queues, and the router's port sends on q. The
// node's eth0 must have no XDP program (the agent stopped and cleaned
// up). The router's port keeps its receive queues, and with them its
// XDP_PASS, untouched: a veth that gets new receive queues under an XDP
// program leaves them without NAPI and drops what the peer's XDP sends
// there (seen on this kernel).
func (pa *path) setNodeQueues(ctx context.Context, q int) error {
	r, n := pa.plan.Router, pa.node
	qs := strconv.Itoa(q)
	for _, s := range [][]string{
		{n.Namespace, "ethtool", "-L", n.Interface, "rx", qs},
		{r, "ethtool", "-L", n.Peer, "tx", qs},
		{n.Namespace, "ethtool", "-L", n.Interface, "tx", qs},
	} {
		if _, err := pa.log.inNS(ctx, s[0], s[1:]...); err != nil {
			return fmt.Errorf("node queues: %w", err)
		}
	}
	if err := pa.setXPS(ctx, r, n.Peer, q); err != nil {
		return err
	}
	return pa.setXPS(ctx, n.Namespace, n.Interface, q)
}

// maxCPUs is the number of CPUs XPS masks and generators may use.
func maxCPUs() int { return runtime.NumCPU() }

// pathQueueCount is the queues every veth of the path gets: pathQueues,
// or fewer on a machine with fewer CPUs (a veth has at most one queue
// per CPU).
func pathQueueCount() int { return min(pathQueues, maxCPUs()) }

// sink opens the never-read UDP socket of a backend namespace.
func sink(ns string) (*net.UDPConn, error) {
	var c *net.UDPConn
	err := netns.Do(ns, func() error {
		var err error
		c, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4zero, Port: servicePort})
		if err != nil {
			return err
		}
		return c.SetReadBuffer(sinkBuffer)
	})
	if err != nil {
		if c != nil {
			c.Close()
		}
		return nil, fmt.Errorf("sink socket in %s: %w", ns, err)
	}
	return c, nil
}

func (pa *path) closeSinks() {
	for _, c := range slices.Concat(pa.sinks, pa.clientSinks) {
		c.Close()
	}
	pa.sinks, pa.clientSinks = nil, nil
}

func linkMAC(ns, dev string) (net.HardwareAddr, error) {
	var hw net.HardwareAddr
	err := netns.Do(ns, func() error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return err
		}
		hw = l.Attrs().HardwareAddr
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("MAC address of %s in %s: %w", dev, ns, err)
	}
	return hw, nil
}

// xdpProgID is the ID of the XDP program on dev in ns, 0 for none.
func xdpProgID(ns, dev string) (uint32, error) {
	var id uint32
	err := netns.Do(ns, func() error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return err
		}
		if x := l.Attrs().Xdp; x != nil && x.Attached {
			id = x.ProgId
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("XDP program of %s in %s: %w", dev, ns, err)
	}
	return id, nil
}

// flushConntrack empties the conntrack table of namespace ns, so that a
// DNAT variant starts without the flows (and NAT bindings) of the one
// before it.
func flushConntrack(ns string) error {
	return netns.Do(ns, func() error {
		if err := netlink.ConntrackTableFlush(netlink.ConntrackTable); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("flush conntrack in %s: %w", ns, err)
		}
		return nil
	})
}

// waitQuiet waits until read returns the same value twice in a row,
// every step, at most limit: the packets of a run still in flight
// (queued for ksoftirqd) reach their counters.
func waitQuiet(ctx context.Context, step, limit time.Duration, read func() (uint64, error)) error {
	last, err := read()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(step):
		}
		v, err := read()
		if err != nil {
			return err
		}
		if v == last {
			return nil
		}
		last = v
	}
	return nil
}
