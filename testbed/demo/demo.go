// Package demo is `xlb demo`: it builds a lab, runs xlb agents on its
// nodes and shows, with measured numbers, what xlb does: requests spread
// over the backends by Maglev and over the nodes by ECMP, replies that
// bypass the nodes (direct server return), UDP over GUE, and a backend
// removed from the configuration without restarting anything, and an
// IPv6 client reaching the same backends. It fails,
// with the reason, when a measurement contradicts any of that.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
	"github.com/xlbproject/xlb/testbed/survival"
)

// Defaults and limits of Options.
const (
	DefaultPrefix   = "xlbdemo"
	DefaultRequests = 2000
	// MinRequests makes "every backend gets requests" a safe claim: the
	// chance that one of 4 backends gets none of 100 flows is 4·0.75¹⁰⁰,
	// about 10⁻¹².
	MinRequests = 100
	MaxRequests = 1_000_000
)

const (
	// udpRequests is the number of UDP echo requests, each a new flow.
	udpRequests = 50
	// parallel is the number of requests in flight at a time.
	parallel = 8
)

// Options configure Run.
type Options struct {
	Prefix   string // lab name; default DefaultPrefix
	Requests int    // HTTP requests per round; default DefaultRequests
	Keep     bool   // leave the lab up at the end
	// Binary is the xlb executable the lab runs (agents, backends);
	// default: the running executable.
	Binary string
	Out    io.Writer // default os.Stdout
}

func (o *Options) defaults() error {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.Requests == 0 {
		o.Requests = DefaultRequests
	}
	if o.Requests < MinRequests || o.Requests > MaxRequests {
		return fmt.Errorf("%d requests: want %d to %d, so that every backend's share can be measured", o.Requests, MinRequests, MaxRequests)
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	// The plan checks the prefix and finds the binary before anything
	// is printed or built.
	_, err := lab.NewPlan(lab.Spec{Prefix: o.Prefix, Binary: o.Binary})
	return err
}

// Run runs the demo. It builds lab o.Prefix, which must not exist, and
// takes it down at the end, also when a step fails or ctx is cancelled
// (Ctrl-C), unless o.Keep is set.
func Run(ctx context.Context, o Options) (err error) {
	if err := o.defaults(); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("the demo needs root: it creates network namespaces and attaches XDP programs (run it with sudo, or `make demo`)")
	}
	d := &run{o: o, out: &printer{w: o.Out, total: 10}}
	start := time.Now()
	d.out.printf("xlb demo in lab %q: 1 client, a router, 3 xlb nodes, 4 backends, each a network namespace.\n", o.Prefix)
	d.out.printf("Each xlb node announces the VIPs over BGP to the router (embedded, with BFD), which spreads\n")
	d.out.printf("flows over the nodes (ECMP); each node's XDP program picks a backend with Maglev and tunnels\n")
	d.out.printf("the packet to it; the backend answers the client directly. The lab is dual stack: the same\n")
	d.out.printf("backends serve an IPv6 VIP too.\n")

	d.out.step("Build the lab")
	p, err := lab.Up(ctx, lab.Spec{Prefix: o.Prefix, Clients: 1, Nodes: 3, Backends: 4, Binary: o.Binary,
		Router: lab.RouterEmbedded, BFD: true, IPv6: true})
	if err != nil {
		// Up removes what it made itself; a lab that existed before is
		// not ours to remove.
		if ctx.Err() != nil {
			err = fmt.Errorf("interrupted (%v); the half-built lab was removed", context.Cause(ctx))
		}
		return d.out.fail(err)
	}
	d.p = p
	defer func() {
		switch {
		case ctx.Err() != nil:
			err = fmt.Errorf("interrupted (%v)", context.Cause(ctx))
		case err != nil:
			d.showLogs()
		}
		d.teardown(ctx)
		if err == nil {
			d.out.printf("\nPASS in %s: every request was answered; all %d backends served IPv4 and IPv6 clients;\n", since(start), len(p.Backends))
			d.out.printf("replies bypassed the xlb nodes; after %s was removed, hot, it got no requests and the\n", p.Backends[len(p.Backends)-1].Name)
			d.out.printf("others took its share;\n")
			d.out.printf("connections open while a backend left and came back survived with daisy chaining;\n")
			d.out.printf("a node that left gracefully and came back, and a hung node, failed no request; the hung node\n")
			d.out.printf("left the router's route within the BFD detection time.\n")
		}
	}()
	d.out.done("%s", since(d.out.started))
	d.out.line("%s %s -> router %s -> %s (ECMP) -> %s", p.Clients[0].Name, p.Clients[0].Addr, p.Router,
		hostList(p.Nodes, true), hostList(p.Backends, false)+fmt.Sprintf(" (%s)", addrRange(p.Backends)))

	for _, s := range []func(context.Context) error{d.startAgents, d.spread, d.bypass, d.udp, d.ipv6, d.survive, d.removeBackend, d.nodeLeaves, d.nodeHangs} {
		if err := s(ctx); err != nil {
			return d.out.fail(err)
		}
	}
	return nil
}

// run is the state of one demo run.
type run struct {
	o        Options
	out      *printer
	p        lab.Plan
	services []labrun.Service
	// Results of the first HTTP round, compared after the removal.
	before labrun.Tally
	// Counters' growth over the first HTTP round.
	delta labrun.Snapshot
}

func (d *run) startAgents(ctx context.Context) error {
	d.out.step("Start the xlb agents, one node at a time")
	services, err := labrun.Services(d.p)
	if err != nil {
		return err
	}
	v6, err := labrun.Services6(d.p)
	if err != nil {
		return err
	}
	// web6 alone: the IPv6 client's service over the backends' IPv6
	// addresses (IPv6-in-IPv6).
	services = append(services, v6[0])
	d.services = services
	t := d.out.table()
	for _, s := range services {
		t.row(s.Name, fmt.Sprintf("%s/%s", s.Target(), s.Protocol), string(s.Forwarding), "->", d.backendNames(s.Backends))
	}
	t.flush()
	// One node at a time: each agent announces the VIPs over BGP as soon
	// as it serves them, and the router adds it to the ECMP route.
	vip := services[0].VIP
	for i, n := range d.p.Nodes {
		if err := labrun.WriteConfig(d.p, n, services); err != nil {
			return err
		}
		start := time.Now()
		st, err := labrun.StartAgent(ctx, d.p, n, services)
		if err != nil {
			return err
		}
		if err := lab.WaitNextHops(ctx, d.p, vip, hostAddrs(d.p.Nodes[:i+1]), 30*time.Second); err != nil {
			return err
		}
		d.out.line("%s %s (XDP on %s, %s mode, config %s): in the router's route %s after its start:",
			n.Name, n.Addr, st.Node.Interface, st.Node.AttachMode, filepath.Base(labrun.ConfigPath(d.p, n)), since(start))
		d.out.line("  %s", routeText(vip, d.p.Nodes[:i+1]))
	}
	// The IPv6 VIP rides the same sessions, with the nodes' IPv6
	// addresses as next hops.
	vip6 := services[len(services)-1].VIP
	if err := lab.WaitNextHops(ctx, d.p, vip6, hostAddrs6(d.p.Nodes), 30*time.Second); err != nil {
		return err
	}
	d.out.line("the same BGP sessions carry the IPv6 VIP, with the nodes' IPv6 addresses as next hops:")
	d.out.line("  %s", routeText6(vip6, d.p.Nodes))
	return nil
}

func hostAddrs6(hs []lab.Host) []netip.Addr {
	out := make([]netip.Addr, len(hs))
	for i, h := range hs {
		out[i] = h.Addr6
	}
	return out
}

// routeText6 is routeText for the IPv6 route.
func routeText6(vip netip.Addr, via []lab.Host) string {
	parts := []string{vip.String()}
	for _, h := range via {
		parts = append(parts, fmt.Sprintf("nexthop via %s (%s)", h.Addr6, h.Name))
	}
	return strings.Join(parts, " ")
}

// ethHeader is the length of an Ethernet header.
const ethHeader = 14

// ipv6Requests is the size of the IPv6 round: a quarter of the IPv4
// one, enough to reach every backend and node and to tell the replies
// from noise, small enough to keep the demo's run time.
func (d *run) ipv6Requests() int { return max(d.o.Requests/4, MinRequests) }

// ipv6 sends HTTP requests from the client's IPv6 address to the IPv6
// VIP: the same backends answer, over both nodes, and the replies
// bypass the nodes as for IPv4.
func (d *run) ipv6(ctx context.Context) error {
	web6 := d.services[len(d.services)-1]
	n := d.ipv6Requests()
	c := d.p.Clients[0]
	d.out.step(fmt.Sprintf("An IPv6 client: %d HTTP requests from %s to http://[%s]/ (%s: IPv6-in-IPv6 to the backends' IPv6 addresses)",
		n, c.Addr6, web6.VIP, web6.Forwarding))
	before, err := labrun.TakeSnapshot(d.p)
	if err != nil {
		return err
	}
	start := time.Now()
	tally, err := labrun.HTTPLoad(ctx, c.Namespace, web6.Target(), n, parallel, nil)
	if err != nil {
		return fmt.Errorf("HTTP requests over IPv6: %w", err)
	}
	after, err := labrun.TakeSnapshot(d.p)
	if err != nil {
		return err
	}
	delta := after.Since(before)
	d.out.line("ok: %d answers in %s, none failed", tally.Total(), since(start))
	d.out.blank()
	t := d.out.table()
	t.row("BACKEND", "IPv6 ADDRESS", "REQUESTS", "SHARE")
	for _, b := range d.p.Backends {
		t.row(b.Name, b.Addr6.String(), fmt.Sprint(tally[b.Name]), percent(tally[b.Name], tally.Total()), bar(tally[b.Name], tally.Total()))
	}
	t.flush()
	d.out.blank()
	b, bypassErr := labrun.CheckBypass(delta, n)
	t = d.out.table()
	t.row("NODE", "XDP FORWARDED", "ETH0 RECEIVED", "ETH0 SENT", "OTHER PACKETS", "ETH0 BYTES IN/OUT")
	for i, nb := range b.Nodes {
		l := delta.Nodes[i].Link
		t.row(nb.Name, fmt.Sprint(nb.Forwarded), fmt.Sprint(nb.Received), fmt.Sprint(nb.Sent), fmt.Sprint(nb.Unexplained()), fmt.Sprintf("%d/%d", l.RxBytes, l.TxBytes))
	}
	t.flush()
	cl := delta.Clients[0].Link
	var nodesIn uint64
	var grew []string
	for i, nb := range b.Nodes {
		l := delta.Nodes[i].Link
		nodesIn += l.RxBytes
		if nb.Forwarded > 0 {
			grew = append(grew, fmt.Sprintf("%s %.1f", nb.Name, (float64(l.TxBytes)-float64(l.RxBytes))/float64(nb.Forwarded)))
		}
	}
	d.out.line("%s's eth0 sent %d packets (%d bytes) and received %d (%d bytes).", c.Name, cl.TxPackets, cl.TxBytes, cl.RxPackets, cl.RxBytes)
	d.out.line("The nodes' eth0 received %d bytes in all: the client's requests (%d bytes without their", nodesIn, cl.TxBytes-ethHeader*cl.TxPackets)
	d.out.line("%d-byte Ethernet headers, which an interface counts in what it sends, not in what it", ethHeader)
	d.out.line("receives), none of the %d bytes of replies.", cl.RxBytes)
	d.out.line("Bytes out minus bytes in per forwarded packet (%s): the 40-byte", strings.Join(grew, ", "))
	d.out.line("outer IPv6 header and the Ethernet header.")
	var errs []error
	if bypassErr != nil {
		errs = append(errs, fmt.Errorf("IPv6 replies did not bypass the nodes: %w", bypassErr))
	}
	for _, be := range d.p.Backends {
		if tally[be.Name] == 0 {
			errs = append(errs, fmt.Errorf("backend %s got none of %d IPv6 requests", be.Name, tally.Total()))
		}
	}
	for _, nd := range delta.Nodes {
		if nd.Services[web6.Name] == 0 {
			errs = append(errs, fmt.Errorf("node %s forwarded none of the IPv6 requests: the router does not spread IPv6 flows over the nodes", nd.Name))
		}
	}
	if extra := slices.DeleteFunc(tally.Backends(), func(name string) bool { return d.backend(name).IsValid() }); len(extra) > 0 {
		errs = append(errs, fmt.Errorf("IPv6 answers from unknown backends %v", extra))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	d.out.line("The same backends answered the IPv6 client, through every node, and their replies went")
	d.out.line("straight back to it: direct server return over IPv6.")
	return nil
}

// nodeLeaves stops one node's agent gracefully while new connections
// stream in, and starts it again: the agent withdraws its routes before
// it goes (bgp.drainTime), so the router moves the flows away first and
// no connection fails either way.
func (d *run) nodeLeaves(ctx context.Context) error {
	leaving := d.p.Nodes[1]
	web := d.services[0]
	d.out.step(fmt.Sprintf("%s leaves gracefully (SIGTERM) and comes back while new connections stream in", leaving.Name))
	pid, err := labrun.AgentPID(d.p, leaving)
	if err != nil {
		return err
	}
	rest := slices.Concat(d.p.Nodes[:1], d.p.Nodes[2:])
	attempts, err := d.streaming(ctx, web, func() error {
		start := time.Now()
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			return fmt.Errorf("stop the agent of %s: %w", leaving.Name, err)
		}
		if err := lab.WaitNextHops(ctx, d.p, web.VIP, hostAddrs(rest), 10*time.Second); err != nil {
			return err
		}
		d.out.line("withdrawn %s after the signal; the route is now", since(start))
		d.out.line("  %s", routeText(web.VIP, rest))
		if err := labrun.WaitExit(ctx, pid, 10*time.Second); err != nil {
			return fmt.Errorf("the agent of %s: %w", leaving.Name, err)
		}
		d.out.line("the agent exited %s after the signal (it waits bgp.drainTime, %s, after withdrawing)", since(start), labrun.DrainTime)
		start = time.Now()
		if _, err := labrun.StartAgent(ctx, d.p, leaving, d.services); err != nil {
			return err
		}
		if err := lab.WaitNextHops(ctx, d.p, web.VIP, hostAddrs(d.p.Nodes), 30*time.Second); err != nil {
			return err
		}
		d.out.line("started again; back in the route after %s:", since(start))
		d.out.line("  %s", routeText(web.VIP, d.p.Nodes))
		return nil
	})
	if err != nil {
		return err
	}
	failed := failures(attempts)
	d.out.line("%d new connections meanwhile, %d failed.", len(attempts), failed)
	if failed > 0 {
		return fmt.Errorf("%d of %d connections failed while %s left and came back", failed, len(attempts), leaving.Name)
	}
	return nil
}

// streaming opens a new connection to web every 5 ms while event runs,
// and returns every attempt.
func (d *run) streaming(ctx context.Context, web labrun.Service, event func() error) ([]labrun.Attempt, error) {
	sctx, stopStream := context.WithCancel(ctx)
	defer stopStream()
	type result struct {
		attempts []labrun.Attempt
		err      error
	}
	done := make(chan result, 1)
	go func() {
		as, err := labrun.Stream(sctx, d.p.Clients[0].Namespace, web.Target(), 5*time.Millisecond, 2*time.Second)
		done <- result{as, err}
	}()
	time.Sleep(300 * time.Millisecond)
	evErr := event()
	time.Sleep(700 * time.Millisecond)
	stopStream()
	r := <-done
	if evErr != nil {
		return nil, evErr
	}
	if r.err != nil && ctx.Err() == nil && !errors.Is(r.err, context.Canceled) {
		return nil, r.err
	}
	return r.attempts, nil
}

func failures(as []labrun.Attempt) int {
	n := 0
	for _, a := range as {
		if a.Err != nil {
			n++
		}
	}
	return n
}

// nodeHangs freezes one node's agent while new connections stream in: its
// BGP session stays open but nothing answers any more, so only BFD can
// tell. The router must drop the node from the route within the
// detection time, and no request may fail.
func (d *run) nodeHangs(ctx context.Context) error {
	hung := d.p.Nodes[len(d.p.Nodes)-1]
	web := d.services[0]
	d.out.step(fmt.Sprintf("%s hangs (its agent frozen with SIGSTOP) while new connections stream in", hung.Name))
	pid, err := labrun.AgentPID(d.p, hung)
	if err != nil {
		return err
	}
	defer syscall.Kill(pid, syscall.SIGCONT)
	rest := hostAddrs(d.p.Nodes[:len(d.p.Nodes)-1])
	var gone time.Duration
	attempts, err := d.streaming(ctx, web, func() error {
		start := time.Now()
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return fmt.Errorf("freeze the agent of %s: %w", hung.Name, err)
		}
		if err := lab.WaitNextHops(ctx, d.p, web.VIP, rest, 5*time.Second); err != nil {
			return err
		}
		gone = time.Since(start)
		return nil
	})
	if err != nil {
		return err
	}
	failed := failures(attempts)
	bfd := d.p.BGP.BFD
	d.out.line("BFD (%s x %d) on the router noticed in %s: the route is now", bfd.MinRx, bfd.Multiplier, gone.Round(time.Millisecond))
	d.out.line("  %s", routeText(web.VIP, d.p.Nodes[:len(d.p.Nodes)-1]))
	d.out.line("%d new connections meanwhile, %d failed (a frozen agent leaves the node's XDP program", len(attempts), failed)
	d.out.line("forwarding; the flows ECMP moves to the other nodes keep their backend: same Maglev table).")
	if failed > 0 {
		return fmt.Errorf("%d of %d connections failed while %s hung", failed, len(attempts), hung.Name)
	}
	if limit := 3 * time.Duration(bfd.Multiplier) * bfd.MinRx; gone > limit+500*time.Millisecond {
		return fmt.Errorf("the router dropped %s after %s, want about the BFD detection time", hung.Name, gone)
	}
	syscall.Kill(pid, syscall.SIGCONT)
	start := time.Now()
	if err := lab.WaitNextHops(ctx, d.p, web.VIP, hostAddrs(d.p.Nodes), 30*time.Second); err != nil {
		return err
	}
	d.out.line("%s thawed: back in the route after %s (BGP reconnects after GoBGP's 5 s idle hold).", hung.Name, since(start))
	return nil
}

func hostAddrs(hs []lab.Host) []netip.Addr {
	out := make([]netip.Addr, len(hs))
	for i, h := range hs {
		out[i] = h.Addr
	}
	return out
}

// routeText shows a multipath route as `ip route` would.
func routeText(vip netip.Addr, via []lab.Host) string {
	parts := []string{vip.String()}
	for _, h := range via {
		parts = append(parts, fmt.Sprintf("nexthop via %s (%s)", h.Addr, h.Name))
	}
	return strings.Join(parts, " ")
}

// spread sends the first round of HTTP requests and shows how they
// spread over backends and nodes.
func (d *run) spread(ctx context.Context) error {
	web := d.services[0]
	d.out.step(fmt.Sprintf("%d HTTP requests to http://%s/, each on a new TCP connection", d.o.Requests, web.VIP))
	before, err := labrun.TakeSnapshot(d.p)
	if err != nil {
		return err
	}
	tally, err := d.httpRound(ctx, web)
	if err != nil {
		return err
	}
	after, err := labrun.TakeSnapshot(d.p)
	if err != nil {
		return err
	}
	d.before, d.delta = tally, after.Since(before)

	d.out.blank()
	t := d.out.table()
	t.row("BACKEND", "ADDRESS", "REQUESTS", "SHARE")
	for _, b := range d.p.Backends {
		n := tally[b.Name]
		t.row(b.Name, b.Addr.String(), fmt.Sprint(n), percent(n, tally.Total()), bar(n, tally.Total()))
	}
	t.flush()
	d.out.line("Maglev gives each backend an equal share of its lookup table; each new connection is a new")
	d.out.line("flow, hashed on its 5-tuple.")
	d.out.blank()

	t = d.out.table()
	t.row("NODE", "ADDRESS", "PACKETS FORWARDED", "SHARE")
	total := 0
	for _, n := range d.delta.Nodes {
		total += int(n.Services[web.Name])
	}
	for i, n := range d.delta.Nodes {
		c := int(n.Services[web.Name])
		t.row(n.Name, d.p.Nodes[i].Addr.String(), fmt.Sprint(c), percent(c, total), bar(c, total))
	}
	t.flush()
	d.out.line("Packets each node's XDP program forwarded (the client's packets to the VIP): the router's")
	d.out.line("ECMP route spreads the flows over the nodes.")

	var errs []error
	for _, b := range d.p.Backends {
		if tally[b.Name] == 0 {
			errs = append(errs, fmt.Errorf("backend %s got none of %d requests", b.Name, tally.Total()))
		}
	}
	for _, n := range d.delta.Nodes {
		if n.Services[web.Name] == 0 {
			errs = append(errs, fmt.Errorf("node %s forwarded none of the requests: the router does not spread flows over the nodes", n.Name))
		}
	}
	if extra := slices.DeleteFunc(tally.Backends(), func(name string) bool { return d.backend(name).IsValid() }); len(extra) > 0 {
		errs = append(errs, fmt.Errorf("answers from unknown backends %v", extra))
	}
	return errors.Join(errs...)
}

// httpRound sends o.Requests HTTP requests to the web service and prints
// progress and the rate.
func (d *run) httpRound(ctx context.Context, web labrun.Service) (labrun.Tally, error) {
	start := time.Now()
	d.out.indent()
	tally, err := labrun.HTTPLoad(ctx, d.p.Clients[0].Namespace, web.Target(), d.o.Requests, parallel, d.out.progress(d.o.Requests))
	if err != nil {
		d.out.printf("\n")
		return tally, fmt.Errorf("HTTP requests: %w", err)
	}
	el := time.Since(start)
	d.out.printf("  ok: %d answers in %s (%.0f requests/s, %d in parallel), none failed\n",
		tally.Total(), el.Round(time.Millisecond), float64(tally.Total())/el.Seconds(), parallel)
	return tally, nil
}

// bypass shows from the first round's counters that the replies did not
// pass the nodes.
func (d *run) bypass(context.Context) error {
	d.out.step("Do the replies bypass the xlb nodes? (the same requests, counted on the interfaces)")
	b, err := labrun.CheckBypass(d.delta, d.o.Requests)
	t := d.out.table()
	t.row("NODE", "XDP FORWARDED", "ETH0 RECEIVED", "ETH0 SENT", "OTHER PACKETS")
	for _, n := range b.Nodes {
		t.row(n.Name, fmt.Sprint(n.Forwarded), fmt.Sprint(n.Received), fmt.Sprint(n.Sent), fmt.Sprint(n.Unexplained()))
	}
	t.flush()
	c := d.delta.Clients[0]
	d.out.line("%s's eth0 sent %d packets (TCP: %d segments) and received %d (TCP: %d segments).",
		c.Name, c.Link.TxPackets, c.IP.TCPOutSegs+c.IP.TCPRetransSegs, c.Link.RxPackets, c.IP.TCPInSegs)
	if err != nil {
		return fmt.Errorf("replies did not bypass the nodes: %w", err)
	}
	d.out.line("The nodes forwarded %d packets: the client's %d TCP segments to the VIP.", b.Forwarded, c.IP.TCPOutSegs+c.IP.TCPRetransSegs)
	d.out.line("The client received %d packets, %.0f%% of its traffic: the replies. Yet no node's eth0", b.ClientReceived, 100*float64(b.ClientReceived)/float64(b.ClientReceived+b.ClientSent))
	d.out.line("counted more than %d packets beyond those its XDP program forwarded (%d tolerated).", maxOther(b), b.Slack)
	d.passed()
	d.out.line("So the replies went from the backends straight to the client: direct server return.")
	return nil
}

// passed prints what the nodes' XDP programs handed to the kernel during
// the first round: the "other packets" of the bypass table.
func (d *run) passed() {
	d.out.line("Meanwhile the XDP programs passed to the kernel (packets not for a VIP):")
	for _, n := range d.delta.Nodes {
		var parts []string
		for _, r := range slices.Sorted(maps.Keys(n.Reasons)) {
			if c := n.Reasons[r]; c > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", r, c))
			}
		}
		if len(parts) == 0 {
			parts = append(parts, "nothing")
		}
		d.out.line("  %s: %s", n.Name, strings.Join(parts, ", "))
	}
}

func maxOther(b labrun.Bypass) uint64 {
	var m uint64
	for _, n := range b.Nodes {
		m = max(m, n.Unexplained())
	}
	return m
}

// udp sends UDP echo requests to the GUE service.
func (d *run) udp(ctx context.Context) error {
	echo := d.services[1]
	d.out.step(fmt.Sprintf("%d UDP echo requests to %s (%s), each from a new source port", udpRequests, echo.Target(), echo.Forwarding))
	start := time.Now()
	d.out.indent()
	tally, err := labrun.UDPLoad(ctx, d.p.Clients[0].Namespace, echo.Target(), udpRequests, parallel, d.out.progress(udpRequests))
	if err != nil {
		d.out.printf("\n")
		return fmt.Errorf("UDP echo requests: %w", err)
	}
	d.out.printf("  ok: %d answers in %s, every one from %s\n", tally.Total(), since(start), echo.Target())
	var parts []string
	for _, b := range d.p.Backends {
		parts = append(parts, fmt.Sprintf("%s %d", b.Name, tally[b.Name]))
	}
	d.out.line("answers per backend: %s", strings.Join(parts, ", "))
	d.out.line("GUE wraps each datagram in UDP to the backend; the backend's echo answers from the VIP,")
	d.out.line("which a client expects of the address it sent to.")
	return nil
}

// surviveConns is how many persistent connections each service of the
// survival step keeps busy.
const surviveConns = 60

// survive shows daisy chaining: persistent connections to a daisy-chained
// service and to the plain web service stay busy while a backend leaves
// both and comes back. Every connection of the daisy-chained one must
// survive; the plain one loses those on the backend that left.
func (d *run) survive(ctx context.Context) error {
	leaving := d.p.Backends[1]
	web := d.services[0]
	chained := labrun.Service{Name: "web-chained", VIP: d.p.VIPs[1], Port: web.Port, Protocol: web.Protocol,
		Forwarding: config.DSRGUE, Flows: config.FlowsDaisyChain, Backends: slices.Clone(web.Backends)}
	d.out.step(fmt.Sprintf("Connections survive %s leaving and coming back: %d persistent connections each to web (%s) and web-chained (%s, daisy chaining)",
		leaving.Name, surviveConns, web.Target(), chained.Target()))
	services := append(slices.Clone(d.services), chained)
	if _, err := labrun.Reconfigure(ctx, d.p, services); err != nil {
		return fmt.Errorf("add web-chained: %w", err)
	}
	plain := survival.NewLoad(ctx, d.p, web.Target(), survival.DefaultEvery)
	defer plain.Stop()
	chain := survival.NewLoad(ctx, d.p, chained.Target(), survival.DefaultEvery)
	defer chain.Stop()
	if err := plain.Open(surviveConns); err != nil {
		return err
	}
	if err := chain.Open(surviveConns); err != nil {
		return err
	}
	time.Sleep(time.Second)
	before, err := survival.ChainedPackets(d.p)
	if err != nil {
		return err
	}
	// As a deployment tool would, the new configuration records the set
	// it replaces, so every node names the same previous owners.
	change := func(what string, backends []netip.Addr) error {
		services = slices.Clone(services)
		services[len(services)-1].History = append(slices.Clone(services[len(services)-1].History),
			labrun.Generation{Until: time.Now(), Backends: services[len(services)-1].Backends})
		for i := range services {
			// The IPv4 services; web6 keeps its IPv6 backends.
			if services[i].VIP.Is4() {
				services[i].Backends = backends
			}
		}
		if _, err := labrun.Reconfigure(ctx, d.p, services); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		d.out.line("%s", what)
		time.Sleep(2 * time.Second)
		return nil
	}
	without := slices.DeleteFunc(slices.Clone(web.Backends), func(a netip.Addr) bool { return a == leaving.Addr })
	if err := change(fmt.Sprintf("%s left both services (it keeps running, as a drained server does)", leaving.Name), without); err != nil {
		return err
	}
	// Back in the same second would make two history entries end at
	// the same time.
	time.Sleep(time.Second)
	if err := change(leaving.Name+" is back", web.Backends); err != nil {
		return err
	}
	after, err := survival.ChainedPackets(d.p)
	if err != nil {
		return err
	}
	p, c := plain.Stop(), chain.Stop()
	d.out.blank()
	t := d.out.table()
	t.row("SERVICE", "FLOWS", "CONNECTIONS", "BROKEN", "REQUESTS")
	t.row("web", "stateless", fmt.Sprint(p.Conns), fmt.Sprint(p.Broken), fmt.Sprint(p.Requests))
	t.row("web-chained", "daisy-chain", fmt.Sprint(c.Conns), fmt.Sprint(c.Broken), fmt.Sprint(c.Requests))
	t.flush()
	d.out.line("the backends handed %d packets of connections they did not hold on to the slot's previous owner.", after-before)
	if c.Broken > 0 {
		return fmt.Errorf("daisy chaining broke %d of %d connections: %s", c.Broken, c.Conns, strings.Join(c.Errors, "; "))
	}
	if _, err := labrun.Reconfigure(ctx, d.p, d.services); err != nil {
		return fmt.Errorf("remove web-chained: %w", err)
	}
	d.out.line("plain Maglev moved the connections on %s's slots to backends that never saw them (reset);", leaving.Name)
	d.out.line("with daisy chaining the new owner hands them back (docs/connection-survival.md).")
	return nil
}

// removeBackend removes the last backend from both services by
// rewriting the node configurations, and sends the HTTP round again.
func (d *run) removeBackend(ctx context.Context) error {
	gone := d.p.Backends[len(d.p.Backends)-1]
	d.out.step(fmt.Sprintf("Remove %s (%s) from the node configurations, hot", gone.Name, gone.Addr))
	start := time.Now()
	services := labrun.Without(d.services, gone.Addr)
	gens, err := labrun.Reconfigure(ctx, d.p, services)
	if err != nil {
		return fmt.Errorf("reload without %s: %w", gone.Name, err)
	}
	d.services = services
	d.out.line("rewrote %s; the agents noticed the change and loaded it, without", configNames(d.p))
	d.out.line("restarting, in %s (configuration generation %s).", since(start), generations(gens))
	d.out.line("%d HTTP requests again:", d.o.Requests)
	tally, err := d.httpRound(ctx, services[0])
	if err != nil {
		return err
	}
	d.out.blank()
	t := d.out.table()
	t.row("BACKEND", "BEFORE", "SHARE", "AFTER", "SHARE")
	for _, b := range d.p.Backends {
		after := fmt.Sprint(tally[b.Name])
		note := percent(tally[b.Name], tally.Total())
		if b.Addr == gone.Addr {
			note = "removed"
		}
		t.row(b.Name, fmt.Sprint(d.before[b.Name]), percent(d.before[b.Name], d.before.Total()), after, note)
	}
	t.flush()

	var errs []error
	if n := tally[gone.Name]; n > 0 {
		errs = append(errs, fmt.Errorf("%s still got %d of %d requests after its removal", gone.Name, n, tally.Total()))
	}
	for _, b := range d.p.Backends[:len(d.p.Backends)-1] {
		if tally[b.Name] == 0 {
			errs = append(errs, fmt.Errorf("backend %s got none of %d requests after %s was removed", b.Name, tally.Total(), gone.Name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	d.out.line("%s gets nothing now; its share went to the other %d backends.", gone.Name, len(d.p.Backends)-1)
	return nil
}

// showLogs prints the end of the agents' logs after a failure: they go
// with the lab.
func (d *run) showLogs() {
	logs := labrun.AgentLogs(d.p)
	d.out.printf("\nThe agents' logs end with:\n")
	for _, n := range d.p.Nodes {
		d.out.printf("  %s: %s\n", n.Name, logs[n.Name])
	}
}

func (d *run) teardown(ctx context.Context) {
	prefix := d.p.Spec.Prefix
	if d.o.Keep {
		d.out.printf("\nThe lab stays up (--keep). Look around:\n")
		d.out.printf("  xlb lab status --prefix %s\n", prefix)
		d.out.printf("  xlb status --socket %s\n", labrun.Socket(d.p, d.p.Nodes[0]))
		d.out.printf("  ip netns exec %s curl -s http://%s/\n", d.p.Clients[0].Namespace, d.p.VIPs[0])
		d.out.printf("and remove it with: xlb lab down --prefix %s\n", prefix)
		return
	}
	if ctx.Err() != nil {
		d.out.printf("\nInterrupted.")
	}
	d.out.printf("\nTearing down lab %q ...", prefix)
	start := time.Now()
	if err := lab.Down(prefix); err != nil {
		d.out.printf(" FAILED: %v\nRun `xlb lab down --prefix %s` to try again.\n", err, prefix)
		return
	}
	d.out.printf(" ok (%s)\n", since(start))
}

func (d *run) backend(name string) netip.Addr {
	for _, b := range d.p.Backends {
		if b.Name == name {
			return b.Addr
		}
	}
	return netip.Addr{}
}

func (d *run) backendNames(addrs []netip.Addr) string {
	var names []string
	for _, a := range addrs {
		for _, b := range d.p.Backends {
			if b.Addr == a || b.Addr6 == a {
				names = append(names, b.Name)
			}
		}
	}
	return strings.Join(names, " ")
}

// generations says "2" when all nodes report 2, else "2, 3".
func generations(gens []uint64) string {
	var parts []string
	for _, g := range slices.Compact(slices.Clone(gens)) {
		parts = append(parts, fmt.Sprint(g))
	}
	return strings.Join(parts, ", ")
}

func configNames(p lab.Plan) string {
	var names []string
	for _, n := range p.Nodes {
		names = append(names, n.Name+".yaml")
	}
	return strings.Join(names, " and ")
}

func hostList(hs []lab.Host, withAddr bool) string {
	var parts []string
	for _, h := range hs {
		if withAddr {
			parts = append(parts, h.Name+" "+h.Addr.String())
		} else {
			parts = append(parts, h.Name)
		}
	}
	return strings.Join(parts, ", ")
}

func addrRange(hs []lab.Host) string {
	if len(hs) == 0 {
		return ""
	}
	return hs[0].Addr.String() + "-" + hs[len(hs)-1].Addr.String()
}

func since(t time.Time) time.Duration { return time.Since(t).Round(10 * time.Millisecond) }
