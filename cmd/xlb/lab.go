package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/xlbproject/xlb/testbed/lab"
)

const labUsage = `usage: xlb lab up|down|status [FLAGS]

  up      build the lab: client, router, xlb node and backend namespaces
  down    remove everything a lab made, also after a crash (safe to repeat)
  status  show namespaces, addresses, the router's VIP routes, processes

Run "xlb lab COMMAND -h" for a command's flags. docs/lab.md has the plan.`

func runLab(args []string) error {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, labUsage)
		return errUsage
	}
	switch args[0] {
	case "up":
		return labUp(args[1:])
	case "down":
		return labDown(args[1:])
	case "status":
		return labStatus(args[1:])
	case "serve": // hidden: the backends' embedded servers
		return labServe(args[1:])
	case "router": // hidden: the embedded upstream router
		return labRouter(args[1:])
	case "-h", "--help", "help":
		fmt.Fprintln(os.Stderr, labUsage)
		return flag.ErrHelp
	}
	fmt.Fprintf(os.Stderr, "xlb lab: unknown command %q\n\n%s\n", args[0], labUsage)
	return errUsage
}

func labFlags(name string) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("xlb lab "+name, flag.ContinueOnError)
	prefix := fs.String("prefix", lab.DefaultPrefix, "lab name: namespaces are PREFIX-router, PREFIX-node1, ...")
	return fs, prefix
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		fs.Usage()
		return errUsage
	}
	return nil
}

func labUp(args []string) error {
	fs, prefix := labFlags("up")
	clients := fs.Int("clients", lab.DefaultClients, "number of client namespaces")
	nodes := fs.Int("nodes", lab.DefaultNodes, "number of xlb node namespaces")
	backends := fs.Int("backends", lab.DefaultBackends, "number of backend namespaces")
	routerKind := fs.String("router", lab.RouterEmbedded, "upstream `router`: embedded (xlb's BGP router), frr (FRR's zebra and bgpd), bird (BIRD 2) or static (a fixed multipath route over all nodes, no BGP); the BGP routers route each VIP over the nodes that announce it")
	reflector := fs.Bool("reflector", false, "put a gobgpd route reflector between the nodes and the router (needs --router frr)")
	bfd := fs.Bool("bfd", false, "run BFD between the router and the nodes, 100ms x 3 (needs --router embedded, frr or bird)")
	pods := fs.Int("pods", 0, "make the backends Kubernetes nodes with this many pod namespaces each (servers in the pods on ports 8080 and 5353; run `xlb backend --source kubernetes` or --nat on the nodes)")
	plain := fs.Bool("plain-backends", false, "backends (or pods) run nothing but nginx: no `xlb backend`, no VIP, for services with forwarding nat or dnat")
	egressQueue := fs.Int("egress-queue", 0, "a transmit queue of this many packets on both ends of every host's veth (0: none, the veth default): a full XDP ring then stops the queue instead of dropping (kernel 6.16 or later)")
	fullChecksums := fs.Bool("full-backend-checksums", false, "turn off transmit checksum offload on the backends, as services with forwarding nat or dnat need (implied by --plain-backends)")
	repliesVia := fs.String("replies-via", "", "route every backend's replies to the clients through this `node` (node1, ...), as forwarding: dnat needs")
	ipv6 := fs.Bool("ipv6", true, "dual stack: IPv6 addresses and routes beside the IPv4 ones, and IPv6 VIPs (--ipv6=false: IPv4 only; the default is IPv4 only with --pods, --plain-backends or --reflector; --pods with --ipv6 gives the pods IPv6 addresses, the other two have no IPv6 yet)")
	l2 := fs.Bool("l2", false, "the layer-2 lab (node.announce: l2): the clients on the nodes' segment, finding the VIPs by ARP; needs --router static and --ipv6=false")
	peer6 := fs.Bool("peer-ipv6", false, "the nodes peer with the router over IPv6 (BGP and BFD between the IPv6 addresses; both families ride the sessions); needs the dual-stack lab and --router embedded, frr or bird")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "ipv6" })
	*ipv6 = labIPv6(*ipv6, given, *pods, *reflector)
	if *pods < 0 || *pods > lab.MaxPods {
		return fmt.Errorf("--pods %d: want 0 to %d", *pods, lab.MaxPods)
	}
	// lab.Spec reads 0 as "the default"; on the command line it is a mistake.
	for flagName, n := range map[string]int{"clients": *clients, "nodes": *nodes, "backends": *backends} {
		if n < 1 {
			return fmt.Errorf("--%s %d: want at least 1", flagName, n)
		}
	}
	// Ctrl-C while building still removes the half-built lab.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p, err := lab.Up(ctx, lab.Spec{Prefix: *prefix, Clients: *clients, Nodes: *nodes, Backends: *backends,
		Router: *routerKind, Reflector: *reflector, BFD: *bfd, Pods: *pods, PlainBackends: *plain, FullBackendChecksums: *fullChecksums, RepliesVia: *repliesVia, IPv6: *ipv6, EgressQueue: *egressQueue, PeerIPv6: *peer6, L2: *l2})
	if err != nil {
		return err
	}
	printPlan(p)
	return nil
}

// labIPv6 says whether `xlb lab up` builds a dual-stack lab: as --ipv6
// says if it was given (ipv6), else dual stack unless the lab has pods
// (dual stack only when asked) or a route reflector (IPv4 only:
// lab.NewPlan refuses it with IPv6, which an explicit --ipv6 gets to
// see).
func labIPv6(ipv6, given bool, pods int, reflector bool) bool {
	if given {
		return ipv6
	}
	return pods == 0 && !reflector
}

func printPlan(p lab.Plan) {
	fmt.Printf("lab %q is up.\n\n", p.Spec.Prefix)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tNAMESPACE\tADDRESS\tGATEWAY")
	for _, h := range p.Hosts() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", h.Name, h.Namespace, h.Addr, h.Gateway)
		if h.Addr6.IsValid() {
			fmt.Fprintf(tw, "\t\t%s\t%s\n", h.Addr6, h.Gateway6)
		}
	}
	for _, pod := range p.Pods {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s (via %s)\n", pod.Name, pod.Namespace, pod.Addr, pod.Gateway, p.Backends[pod.Node].Name)
	}
	tw.Flush()
	var vips []string
	for _, v := range slices.Concat(p.VIPs, p.VIPs6) {
		vips = append(vips, v.String())
	}
	var nodes []string
	for _, n := range p.Nodes {
		nodes = append(nodes, n.Addr.String())
		if n.Addr6.IsValid() {
			nodes = append(nodes, n.Addr6.String())
		}
	}
	routed := p.VIPPrefix.String()
	if p.VIPPrefix6.IsValid() {
		routed += " and " + p.VIPPrefix6.String()
	}
	if b := p.BGP; b != nil {
		fmt.Printf("\nrouter %s (%s) routes each VIP over the nodes that announce it over BGP; backends accept VIPs %s.\n",
			p.Router, p.Spec.Router, strings.Join(vips, ", "))
		fmt.Printf("xlb nodes announce as AS %d to %s (AS %d)", b.NodeASN, b.PeerAddr, b.PeerASN)
		if p.Reflector != nil {
			fmt.Printf(", the route reflector in %s", p.Reflector.Namespace)
		}
		if b.BFD != nil {
			fmt.Printf("; the router runs BFD (%s x %d)", b.BFD.MinRx, b.BFD.Multiplier)
		}
		fmt.Println(".")
	} else {
		fmt.Printf("\nrouter %s routes %s over %s; backends accept VIPs %s.\n",
			p.Router, routed, strings.Join(nodes, ", "), strings.Join(vips, ", "))
	}
	fmt.Printf("No xlb agent runs yet. Try:\n  ip netns exec %s curl -s http://%s/\n", p.Clients[0].Namespace, p.Backends[0].Addr)
	if a6 := p.Backends[0].Addr6; a6.IsValid() {
		fmt.Printf("  ip netns exec %s curl -s http://[%s]/\n", p.Clients[0].Namespace, a6)
	}
	fmt.Printf("  xlb lab status --prefix %s\n  xlb lab down --prefix %s\n", p.Spec.Prefix, p.Spec.Prefix)
}

func labDown(args []string) error {
	fs, prefix := labFlags("down")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := lab.Down(*prefix); err != nil {
		return err
	}
	fmt.Printf("lab %q is down.\n", *prefix)
	return nil
}

func labStatus(args []string) error {
	fs, prefix := labFlags("status")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	st, err := lab.ReadStatus(*prefix)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	return st.WriteText(os.Stdout)
}

func labServe(args []string) error {
	fs := flag.NewFlagSet("xlb lab serve", flag.ContinueOnError)
	name := fs.String("name", "", "backend name to answer with (required)")
	httpAddr := fs.String("http", "", "HTTP listen address, e.g. 0.0.0.0:80")
	udpAddr := fs.String("udp", "", "UDP echo listen address, e.g. 0.0.0.0:9000")
	http6Addr := fs.String("http6", "", "IPv6 HTTP listen address beside --http, e.g. [::]:80")
	udp6Addr := fs.String("udp6", "", "IPv6 UDP echo listen address beside --udp, e.g. [::]:9000")
	control := fs.String("control", "", "unix socket `path` to stop, start or hang the HTTP server on (POST /http/stop|start|hang)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return lab.Serve(ctx, lab.ServeOptions{Name: *name, HTTP: *httpAddr, UDP: *udpAddr, HTTP6: *http6Addr, UDP6: *udp6Addr, Control: *control})
}
