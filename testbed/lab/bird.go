package lab

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// birdBinary is where Debian's bird2 package installs BIRD 2.
const birdBinary = "/usr/sbin/bird"

// birdProcess is the StartProcess name of the lab's BIRD.
const birdProcess = "bird"

// birdProtocol names the dynamic BGP protocol that accepts the nodes;
// BIRD names the session it spawns for each node birdProtocol plus a
// number (xlb1, xlb2, ...).
const birdProtocol = "xlb"

// BIRDDir is the directory of a lab's BIRD: bird.conf, its control
// socket and its pid file. `birdc -s <BIRDDir>/bird.ctl` talks to it.
func BIRDDir(prefix string) string { return filepath.Join(StateDir(prefix), "bird") }

func birdConfigFile(prefix string) string { return filepath.Join(BIRDDir(prefix), "bird.conf") }
func birdSocket(prefix string) string     { return filepath.Join(BIRDDir(prefix), "bird.ctl") }
func birdPIDFile(prefix string) string    { return filepath.Join(BIRDDir(prefix), "bird.pid") }

// birdConfig renders bird.conf. As with FRR, the nodes need no entry of
// their own: one dynamic BGP protocol accepts any address of the node
// segment over eBGP and spawns a session per node. The kernel protocol
// merges the equally good paths of a VIP into one multipath route.
func birdConfig(p Plan) string {
	gw := p.NodeSegment.Gateway()
	var b strings.Builder
	fmt.Fprintf(&b, "# BIRD of xlb lab %q, written by `xlb lab up`.\n", p.Spec.Prefix)
	// BIRD runs in the foreground; its standard error is the lab's log
	// of the process.
	b.WriteString("log stderr all;\n")
	b.WriteString("timeformat log iso long ms;\n")
	// Every session's state changes, in the log.
	b.WriteString("debug protocols { states };\n")
	fmt.Fprintf(&b, "router id %s;\n\n", gw)

	b.WriteString("# The interfaces and their addresses: BGP and BFD find the nodes\n# through them.\n")
	b.WriteString("protocol device {\n}\n\n")

	b.WriteString("# Into the kernel's main table. merge paths joins the best route\n")
	b.WriteString("# of a VIP and the ones as good as it into one multipath route.\n")
	b.WriteString("protocol kernel {\n")
	b.WriteString("\tipv4 {\n\t\timport none;\n\t\texport all;\n\t};\n")
	fmt.Fprintf(&b, "\tmerge paths on limit %d;\n", maximumPaths)
	b.WriteString("}\n\n")
	if p.VIPPrefix6.IsValid() {
		// A kernel protocol has one channel: IPv6 needs its own.
		b.WriteString("protocol kernel {\n")
		b.WriteString("\tipv6 {\n\t\timport none;\n\t\texport all;\n\t};\n")
		fmt.Fprintf(&b, "\tmerge paths on limit %d;\n", maximumPaths)
		b.WriteString("}\n\n")
	}

	if bfd := p.BGP.BFD; bfd != nil {
		b.WriteString("# BFD towards the nodes, on the node segment's bridge.\n")
		b.WriteString("protocol bfd {\n")
		fmt.Fprintf(&b, "\tinterface %q {\n", p.NodeSegment.Bridge)
		fmt.Fprintf(&b, "\t\tmin rx interval %d ms;\n", bfd.MinRx.Milliseconds())
		fmt.Fprintf(&b, "\t\tmin tx interval %d ms;\n", bfd.MinTx.Milliseconds())
		fmt.Fprintf(&b, "\t\tmultiplier %d;\n", bfd.Multiplier)
		b.WriteString("\t};\n}\n\n")
	}

	b.WriteString("# The xlb nodes: any address of the node segment, eBGP.\n")
	birdNodes(&b, p, birdProtocol, gw, p.NodeSegment.Subnet)
	if s6 := p.NodeSegment.Subnet6; s6.IsValid() {
		// A BGP protocol has one local address: the nodes' IPv6
		// sessions need their own.
		b.WriteString("\n# The xlb nodes' IPv6 sessions, from the node segment's IPv6 subnet.\n")
		birdNodes(&b, p, birdProtocol6, p.NodeSegment.Gateway6(), s6)
	}
	return b.String()
}

// birdProtocol6 names the dynamic BGP protocol of the nodes' IPv6
// sessions (Plan.NodeSegment.Subnet6).
const birdProtocol6 = "xlbv6"

// birdNodes writes the dynamic BGP protocol name that accepts the nodes
// from subnet on local: IPv4 unicast, and IPv6 unicast in a lab with
// IPv6 VIPs, over its sessions whatever their family.
func birdNodes(b *strings.Builder, p Plan, name string, local netip.Addr, subnet netip.Prefix) {
	hold := int(p.BGP.HoldTime / time.Second)
	fmt.Fprintf(b, "protocol bgp %s {\n", name)
	fmt.Fprintf(b, "\tlocal %s as %d;\n", local, p.BGP.RouterASN)
	fmt.Fprintf(b, "\tneighbor range %s as %d;\n", subnet.Masked(), p.BGP.NodeASN)
	fmt.Fprintf(b, "\tdynamic name %q;\n", name)
	// The nodes connect; a node's session that went down waits for it
	// instead of calling a node that does not listen.
	b.WriteString("\tpassive on;\n")
	// After an error (BFD down, hold timer expired) BIRD refuses the
	// node for a while: 60 s at first by default, more on repeats. A
	// lab node that hung and resumed is back after a second.
	b.WriteString("\terror wait time 1, 5;\n")
	fmt.Fprintf(b, "\thold time %d;\n", hold)
	fmt.Fprintf(b, "\tkeepalive time %d;\n", hold/3)
	if p.BGP.BFD != nil {
		b.WriteString("\tbfd on;\n")
	}
	b.WriteString("\tipv4 {\n")
	fmt.Fprintf(b, "\t\timport where net ~ [ %s+ ];\n", p.VIPPrefix.Masked())
	b.WriteString("\t\texport none;\n\t};\n")
	if p.VIPPrefix6.IsValid() {
		b.WriteString("\tipv6 {\n")
		fmt.Fprintf(b, "\t\timport where net ~ [ %s+ ];\n", p.VIPPrefix6.Masked())
		b.WriteString("\t\texport none;\n\t};\n")
	}
	b.WriteString("}\n")
}

// startBIRD writes bird.conf and runs BIRD in the foreground in the
// router namespace, with its control socket and pid file in BIRDDir,
// then waits until it answers on the socket and listens for BGP.
func startBIRD(ctx context.Context, p Plan) error {
	prefix := p.Spec.Prefix
	if _, err := os.Stat(birdBinary); err != nil {
		return fmt.Errorf("BIRD: %w (install Debian's bird2 package)", err)
	}
	if _, err := exec.LookPath("birdc"); err != nil {
		return fmt.Errorf("BIRD: birdc: %w (install Debian's bird2 package)", err)
	}
	dir := BIRDDir(prefix)
	if err := os.Mkdir(dir, 0o750); err != nil {
		return fmt.Errorf("BIRD: %w", err)
	}
	if err := os.WriteFile(birdConfigFile(prefix), []byte(birdConfig(p)), 0o640); err != nil {
		return fmt.Errorf("BIRD: %w", err)
	}
	args := []string{birdBinary, "-f",
		"-c", birdConfigFile(prefix),
		"-s", birdSocket(prefix),
		"-P", birdPIDFile(prefix),
	}
	if _, err := StartProcess(prefix, p.Router, birdProcess, args...); err != nil {
		return fmt.Errorf("BIRD: %w", err)
	}
	err := waitFor(ctx, readyTimeout, prefix, birdProcess, func() (bool, error) {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if _, err := birdShow(sctx, p, "show", "status"); err != nil {
			return false, err
		}
		return listeningTCP(p.Router, bgpPort)
	})
	if err != nil {
		return fmt.Errorf("BIRD: %w", err)
	}
	return nil
}

// birdShow runs one birdc command against the lab's BIRD.
func birdShow(ctx context.Context, p Plan, command ...string) ([]byte, error) {
	args := append([]string{"-s", birdSocket(p.Spec.Prefix)}, command...)
	out, err := exec.CommandContext(ctx, "birdc", args...).Output()
	if err != nil {
		return nil, fmt.Errorf("birdc %s: %w", strings.Join(command, " "), commandError(err))
	}
	return out, nil
}

// birdSessions lists the router's BGP sessions: one per node that has
// connected (the spawned protocols), whatever their state.
func birdSessions(ctx context.Context, p Plan) ([]Session, error) {
	out, err := birdShow(ctx, p, "show", "protocols", "all")
	if err != nil {
		return nil, err
	}
	return parseBIRDProtocols(out)
}

// parseBIRDProtocols reads `birdc show protocols all`: per protocol, a
// table row (name, protocol, table, state, since, info) and indented
// detail lines. It keeps the BGP protocols that have a neighbour
// address, which leaves out the dynamic protocol that only listens.
func parseBIRDProtocols(b []byte) ([]Session, error) {
	type proto struct {
		name, kind    string
		peer          string
		asn, bgpState string
		imported      *int
	}
	var all []*proto
	var cur *proto
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		if line[0] != ' ' && line[0] != '\t' {
			// A table row, the header, or birdc's greeting.
			f := strings.Fields(line)
			cur = nil
			if len(f) < 4 || f[0] == "Name" || f[0] == "BIRD" {
				continue
			}
			cur = &proto{name: f[0], kind: f[1]}
			all = append(all, cur)
			continue
		}
		if cur == nil {
			continue
		}
		key, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		value = strings.TrimSpace(value)
		switch key {
		case "Neighbor address":
			cur.peer = value
		case "Neighbor AS":
			cur.asn = value
		case "BGP state":
			cur.bgpState = value
		case "Routes":
			// "1 imported, 0 exported, 1 preferred"
			if n, _, ok := strings.Cut(value, " imported"); ok {
				if k, err := strconv.Atoi(strings.TrimSpace(n)); err == nil {
					cur.imported = &k
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("show protocols all: %w", err)
	}
	var ss []Session
	for _, pr := range all {
		if pr.kind != "BGP" || pr.peer == "" {
			continue
		}
		addr, err := netip.ParseAddr(pr.peer)
		if err != nil {
			return nil, fmt.Errorf("show protocols all: %s: neighbour %q: %w", pr.name, pr.peer, err)
		}
		s := Session{Speaker: "router", Peer: addr, State: strings.ToLower(pr.bgpState), Prefixes: pr.imported}
		if s.State == "" {
			s.State = "unknown"
		}
		if pr.asn != "" {
			asn, err := strconv.ParseUint(pr.asn, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("show protocols all: %s: neighbour AS %q: %w", pr.name, pr.asn, err)
			}
			s.ASN = uint32(asn)
		}
		ss = append(ss, s)
	}
	slices.SortFunc(ss, func(a, b Session) int { return a.Peer.Compare(b.Peer) })
	return ss, nil
}
