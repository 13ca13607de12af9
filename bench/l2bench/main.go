// Command l2bench measures layer-2 mode (node.announce: l2) in the
// layer-2 lab (testbed/lab, Spec.L2: two clients and three xlb nodes on
// one segment, two backends): how fast a stopped owner of a VIP is
// replaced, by SIGSTOP (a hung agent) and by SIGTERM, with persistent
// connections open and new ones streaming in, and how long an ARP answer
// takes from each responder decision 0009 weighed: the LB program (XDP),
// the kernel, a user-space AF_PACKET socket. It writes the results as
// JSON (with the machine, the kernel and every sample) and as a section
// of docs/benchmarks.md. `make bench` runs it, as root. It removes the
// lab it creates, also after a failure or Ctrl-C, and what an earlier
// run that was killed left behind.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
	"github.com/xlbproject/xlb/testbed/testenv"
)

const (
	docBegin    = "<!-- l2bench:begin -->"
	docEnd      = "<!-- l2bench:end -->"
	stalePrefix = "xlbl2b"
)

// Addresses of the segment that the kernel and the user-space responder
// answer for: no VIP, no host.
var (
	kernelAddr = netip.MustParseAddr("10.0.1.250")
	userAddr   = netip.MustParseAddr("10.0.1.251")
)

// Report is what a run writes.
type Report struct {
	Date      string               `json:"date"`
	Machine   benchutil.Machine    `json:"machine"`
	Command   string               `json:"command"`
	Commands  []string             `json:"commands,omitempty"`
	Heartbeat float64              `json:"heartbeatMs"`
	DeadAfter float64              `json:"deadAfterMs"`
	Failovers []labrun.L2Failover  `json:"failovers"`
	ARP       []ResponderRoundTrip `json:"arp"`
	Seconds   float64              `json:"seconds"`
}

// ResponderRoundTrip is the ARP round trips through one responder.
type ResponderRoundTrip struct {
	Responder string            `json:"responder"`
	Address   netip.Addr        `json:"address"`
	Lost      int               `json:"lost"`
	RTT       benchutil.Summary `json:"rtt"`
	Samples   []float64         `json:"samplesMs"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "l2bench:", err)
		os.Exit(1)
	}
}

func run() error {
	out := flag.String("out", "bench/results", "directory for the JSON results")
	doc := flag.String("doc", "", "markdown file whose l2bench section to rewrite (\"\" for none)")
	xlbBin := flag.String("xlb", "", "xlb binary (default: build it)")
	runs := flag.Int("runs", 5, "failovers of each kind (SIGSTOP, SIGTERM)")
	conns := flag.Int("conns", 200, "persistent connections held across each failover")
	rtts := flag.Int("arp", 500, "ARP requests per responder")
	budget := flag.Duration("budget", 10*time.Minute, "the whole run's time limit")
	render := flag.String("render", "", "measure nothing: write the document section from this JSON result")
	flag.Parse()
	results := benchutil.Results[Report]{Name: "l2", Views: func(r *Report) benchutil.Views {
		return benchutil.Views{Doc: *doc, Begin: docBegin, End: docEnd, Section: func(json string, _ []string) string { return markdown(r, json) }}
	}}
	if *render != "" {
		return results.Render(*render)
	}
	if *runs < 1 || *conns < 1 || *rtts < 1 {
		return errors.New("-runs, -conns and -arp must be at least 1")
	}
	if !testenv.Privileged() {
		return errors.New("needs root: it builds network namespaces and loads BPF programs (run `make bench`, or sudo)")
	}
	run := benchutil.Begin("l2bench", stalePrefix, *budget)
	defer run.End()
	ctx, start, progress := run.Ctx, run.Start, run.Progress
	r := &Report{
		Date: start.UTC().Format(time.RFC3339), Machine: benchutil.ThisMachine(),
		Command:   strings.Join(append([]string{"go run ./bench/l2bench"}, os.Args[1:]...), " "),
		Heartbeat: benchutil.Ms(config.DefaultL2Heartbeat), DeadAfter: benchutil.Ms(config.DefaultL2DeadAfter),
	}
	xlb, cmds, remove, err := benchutil.XLB(*xlbBin, progress)
	if err != nil {
		return err
	}
	defer remove()
	r.Commands = append(r.Commands, cmds...)
	if err := measure(ctx, xlb, r, *runs, *conns, *rtts, progress); err != nil {
		return err
	}
	r.Seconds = benchutil.Round3(time.Since(start).Seconds())
	r.Machine.LoadEnd = benchutil.LoadAvg()
	if err := results.Save(*out, start, r, func(s string) { progress("%s", s) }); err != nil {
		return err
	}
	fmt.Print(tables(r))
	return nil
}

// measure brings the lab up, measures, and takes the lab down whatever
// happens.
func measure(ctx context.Context, xlb string, r *Report, runs, conns, rtts int, progress func(string, ...any)) (err error) {
	prefix := stalePrefix + strconv.Itoa(os.Getpid())
	progress("lab %s: up (layer 2: 2 clients, 3 nodes, 2 backends)", prefix)
	defer func() {
		progress("lab %s: down", prefix)
		if derr := lab.Down(prefix); derr != nil {
			err = errors.Join(err, derr)
		}
	}()
	p, err := lab.Up(ctx, lab.Spec{Prefix: prefix, Clients: 2, Nodes: 3, Backends: 2, Binary: xlb, Router: lab.RouterStatic, L2: true})
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	services, err := labrun.Services(p)
	if err != nil {
		return err
	}
	services[0].Forwarding, services[0].Flows = config.DSRGUE, config.FlowsDaisyChain
	web := services[0]
	if err := labrun.StartAgents(ctx, p, services); err != nil {
		return err
	}
	owner, err := labrun.WaitL2Owner(ctx, p, p.Nodes, web.VIP, 10*time.Second)
	if err != nil {
		return err
	}
	progress("%s answers for %s", owner.Name, web.VIP)

	if err := measureARP(ctx, p, owner, web.VIP, rtts, r, progress); err != nil {
		return err
	}
	for i := range runs {
		for _, sig := range []syscall.Signal{syscall.SIGSTOP, syscall.SIGTERM} {
			f, err := failover(ctx, p, services, owner, sig, conns)
			if err != nil {
				return fmt.Errorf("failover %d (%v): %w", i+1, sig, err)
			}
			progress("%d/%d: %s", i+1, runs, f)
			r.Failovers = append(r.Failovers, f)
		}
	}
	return nil
}

// failover runs one failover of the web VIP by sig, then brings the
// stopped agent back and waits until it owns the VIP again.
func failover(ctx context.Context, p lab.Plan, services []labrun.Service, owner lab.Host, sig syscall.Signal, conns int) (labrun.L2Failover, error) {
	web := services[0]
	pid, err := labrun.AgentPID(p, owner)
	if err != nil {
		return labrun.L2Failover{}, err
	}
	if sig == syscall.SIGSTOP {
		defer syscall.Kill(pid, syscall.SIGCONT)
	}
	f, err := labrun.RunL2Failover(ctx, p, web, p.Nodes, owner, sig, conns)
	if err != nil {
		return f, err
	}
	if sig == syscall.SIGSTOP {
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			return f, err
		}
	} else if _, err := labrun.StartAgent(ctx, p, owner, services); err != nil {
		return f, err
	}
	if err := labrun.WaitL2OwnerIs(ctx, p, p.Nodes, web.VIP, owner.Name, 10*time.Second); err != nil {
		return f, fmt.Errorf("after %s came back: %w", owner.Name, err)
	}
	// Let the clients' caches settle on the returned owner.
	return f, benchutil.Sleep(ctx, 500*time.Millisecond)
}

// measureARP times ARP round trips from the first client through each
// responder: the owner's LB program for the VIP, the kernel of another
// node for an address it holds, and a user-space AF_PACKET responder in
// a third node.
func measureARP(ctx context.Context, p lab.Plan, owner lab.Host, vip netip.Addr, n int, r *Report, progress func(string, ...any)) error {
	others := slices.DeleteFunc(slices.Clone(p.Nodes), func(h lab.Host) bool { return h.Name == owner.Name })
	kernelNode, userNode := others[0], others[1]
	client := p.Clients[0]
	one := func(name string, addr netip.Addr) error {
		rtts, lost, err := labrun.ARPRoundTrips(ctx, client, addr, n, time.Second)
		if err != nil {
			return fmt.Errorf("ARP round trips through %s: %w", name, err)
		}
		samples := make([]float64, len(rtts))
		for i, d := range rtts {
			samples[i] = benchutil.Round3(float64(d.Nanoseconds()) / 1e6)
		}
		rt := ResponderRoundTrip{Responder: name, Address: addr, Lost: lost, RTT: benchutil.Summarize(samples), Samples: samples}
		progress("ARP through %s: p50 %s ms, p99 %s ms, %d lost", name, benchutil.FmtMs(rt.RTT.P50), benchutil.FmtMs(rt.RTT.P99), lost)
		r.ARP = append(r.ARP, rt)
		return nil
	}
	if err := one("xdp ("+owner.Name+")", vip); err != nil {
		return err
	}
	addr := netip.PrefixFrom(kernelAddr, 32).String()
	if out, err := exec.CommandContext(ctx, "ip", "-n", kernelNode.Namespace, "addr", "add", addr, "dev", kernelNode.Interface).CombinedOutput(); err != nil {
		return fmt.Errorf("ip addr add %s on %s: %v: %s", addr, kernelNode.Name, err, out)
	}
	err := one("kernel ("+kernelNode.Name+")", kernelAddr)
	if out, derr := exec.Command("ip", "-n", kernelNode.Namespace, "addr", "del", addr, "dev", kernelNode.Interface).CombinedOutput(); derr != nil {
		err = errors.Join(err, fmt.Errorf("ip addr del %s on %s: %v: %s", addr, kernelNode.Name, derr, out))
	}
	if err != nil {
		return err
	}
	uctx, stop := context.WithCancel(ctx)
	wait, err := userResponder(uctx, userNode, userAddr)
	if err != nil {
		stop()
		return fmt.Errorf("user-space responder on %s: %w", userNode.Name, err)
	}
	err = one("AF_PACKET ("+userNode.Name+")", userAddr)
	stop()
	if _, werr := wait(); werr != nil {
		err = errors.Join(err, werr)
	}
	return err
}
