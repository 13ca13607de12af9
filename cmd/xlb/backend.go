package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/xlbproject/xlb/internal/backendhost"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/dataplane/decap"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/internal/k8s/nodenat"
)

// vipList collects repeated or comma-separated --vip flags.
type vipList []netip.Addr

func (v *vipList) String() string { return fmt.Sprint([]netip.Addr(*v)) }

func (v *vipList) Set(s string) error {
	for _, part := range strings.Split(s, ",") {
		a, why := config.ParseUnicast(strings.TrimSpace(part))
		if why != "" {
			return errors.New(why)
		}
		// What the backend program can serve besides (no loopback).
		if err := decap.CheckVIP(a); err != nil {
			return err
		}
		*v = append(*v, a)
	}
	return nil
}

// prefixList collects repeated or comma-separated IPv4 and IPv6
// addresses and prefixes (--chain-from, --chain-to); an address is its
// /32 or /128.
type prefixList []netip.Prefix

func (p *prefixList) String() string { return fmt.Sprint([]netip.Prefix(*p)) }

func (p *prefixList) Set(s string) error {
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		var pf netip.Prefix
		if strings.Contains(part, "/") {
			x, err := netip.ParsePrefix(part)
			if err != nil || x.Addr().Is4In6() {
				return fmt.Errorf("%q is not an IPv4 or IPv6 address or CIDR prefix", part)
			}
			if x.Masked() != x {
				return fmt.Errorf("%q has host bits set: did you mean %v?", part, x.Masked())
			}
			pf = x
		} else {
			a, err := netip.ParseAddr(part)
			if err != nil || a.Is4In6() || a.Zone() != "" {
				return fmt.Errorf("%q is not an IPv4 or IPv6 address or CIDR prefix", part)
			}
			pf = netip.PrefixFrom(a, a.BitLen())
		}
		*p = append(*p, pf)
	}
	return nil
}

// natList collects repeated --nat flags.
type natList []backendhost.NATEntry

func (n *natList) String() string { return fmt.Sprint([]backendhost.NATEntry(*n)) }

func (n *natList) Set(s string) error {
	e, err := backendhost.ParseNATEntry(s)
	if err != nil {
		return err
	}
	*n = append(*n, e)
	return nil
}

// sourceKubernetes is the --source that keeps the translations in step
// with the cluster.
const sourceKubernetes = "kubernetes"

func runBackend(args []string) error {
	fs := flag.NewFlagSet("xlb backend", flag.ContinueOnError)
	iface := fs.String("interface", "", "interface the tunnelled traffic arrives on (required)")
	var vips vipList
	fs.Var(&vips, "vip", "VIP to accept, IPv4 or IPv6 (repeat, or comma-separated)")
	var nat natList
	fs.Var(&nat, "nat", "Kubernetes mode: translate VIP:PORT/PROTO to a local pod, as VIP:PORT/PROTO=PODIP:TARGETPORT (repeat)")
	fallback := fs.Bool("nat-reply-fallback", false, "translate a pod's reply without a flow record when one VIP:port maps to its port (also rewrites direct traffic to that pod port)")
	pin := fs.String("pin-path", "", "bpffs directory for the pinned program (default /sys/fs/bpf/xlb/backend-<netns>-<interface>)")
	mode := fs.String("attach-mode", "auto", "XDP attach mode: auto, native or generic")
	chainWindow := fs.Duration("chain-window", 2*time.Minute, "daisy chaining: how long after a load balancer's table slot moved to this host a TCP packet to a VIP without a connection here goes on to the slot's previous owner (whole seconds; 0: off)")
	var chainFrom, chainTo prefixList
	fs.Var(&chainFrom, "chain-from", "daisy chaining: the xlb nodes, as IPv4 or IPv6 `addresses or CIDRs` (repeat, or comma-separated): only their packets are chained; with --chain-to, else chaining is off (with --source kubernetes: added to the cluster's Nodes)")
	fs.Var(&chainTo, "chain-to", "daisy chaining: the backends that may be a slot's previous owner, as IPv4 or IPv6 `addresses or CIDRs` (repeat, or comma-separated): packets are chained only to them, and their chained packets are accepted; with --chain-from (with --source kubernetes: added to the cluster's endpoints and Nodes)")
	cleanup := fs.Bool("cleanup", false, "remove the VIPs, the translations and the programs instead")
	stats := fs.Bool("stats", false, "print the decapsulation, daisy-chaining and translation counters and exit")
	source := fs.String("source", "", "`kubernetes`: run until SIGTERM, translating VIP:port to the pods of this node as the cluster's Services and EndpointSlices say (instead of --nat)")
	kubeconfig := fs.String("kubeconfig", "", "with --source kubernetes: kubeconfig `file` (default: $KUBECONFIG, ~/.kube/config, else the in-cluster service account)")
	nodeName := fs.String("node-name", os.Getenv("NODE_NAME"), "with --source kubernetes: this node's name (default $NODE_NAME)")
	classless := fs.Bool("serve-classless", false, "with --source kubernetes: also serve Services of type LoadBalancer without a loadBalancerClass")
	cleanupOnExit := fs.Bool("cleanup-on-exit", false, "with --source kubernetes: remove the programs and translations on SIGTERM (default: leave them, so forwarding continues across a restart)")
	metricsAddr := fs.String("metrics-addr", "", "with --source kubernetes: `host:port` serving /healthz and /metrics (Prometheus); empty: none")
	logFormat := fs.String("log-format", "text", "with --source kubernetes: log format, text or json")
	logLevel := fs.String("log-level", "info", "with --source kubernetes: log level, debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, `usage: xlb backend --interface IF [--vip VIP...] [--nat VIP:PORT/PROTO=PODIP:TARGETPORT...] [--chain-from CIDR... --chain-to CIDR...] [--chain-window DURATION] [--pin-path DIR] [--cleanup | --stats]
       xlb backend --source kubernetes --interface IF [--kubeconfig FILE] [--node-name NAME] [--serve-classless] [--metrics-addr HOST:PORT] [--cleanup-on-exit] [--chain-from CIDR...] [--chain-to CIDR...]`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *iface == "" || fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	if err := decap.CheckChainWindow(*chainWindow); err != nil {
		return fmt.Errorf("--chain-window: %w", err)
	}
	if _, err := config.ParseAttachMode(*mode); err != nil {
		return fmt.Errorf("--attach-mode: %w", err)
	}
	// In Kubernetes mode the cluster gives both sets, the flags only add
	// to them; otherwise one without the other could never chain.
	if *source != sourceKubernetes && (len(chainFrom) > 0) != (len(chainTo) > 0) {
		return errors.New("--chain-from and --chain-to go together: give the xlb nodes with --chain-from and the backends that may be previous owners with --chain-to, or neither to leave daisy chaining off")
	}
	if *pin == "" {
		p, err := backendhost.DefaultPinPath(*iface)
		if err != nil {
			return err
		}
		*pin = p
	}
	switch {
	case *cleanup:
		removed, err := backendhost.Cleanup(*pin)
		if err != nil {
			return err
		}
		fmt.Printf("removed the backend programs and translations on %s (%s) and VIPs %v from lo\n", *iface, *pin, removed)
		return nil
	case *stats:
		st, err := decap.Stats(*pin)
		if err != nil {
			return err
		}
		for _, name := range wire.DecapStatNames {
			fmt.Printf("%-20s %12d packets %14d bytes\n", name, st[name].Packets, st[name].Bytes)
		}
		// Set-ups from before daisy chaining have no chain counters.
		if cst, err := decap.ChainStats(*pin); err == nil {
			for _, name := range wire.ChainStatNames {
				fmt.Printf("%-20s %12d packets %14d bytes\n", name, cst[name].Packets, cst[name].Bytes)
			}
		}
		// Set-ups from before the Kubernetes mode have no NAT counters.
		if nst, err := backendhost.NATStats(*pin); err == nil {
			for _, name := range wire.NATStatNames {
				fmt.Printf("%-20s %12d packets %14d bytes\n", name, nst[name].Packets, nst[name].Bytes)
			}
		}
		return nil
	case *source == sourceKubernetes:
		if len(nat) > 0 {
			return errors.New("--nat and --source kubernetes exclude each other: the cluster decides the translations")
		}
		log, err := newLogger(*logFormat, *logLevel)
		if err != nil {
			return err
		}
		return runNodeBackend(nodeBackendOptions{
			setup: backendhost.Options{
				Interface: *iface, VIPs: vips, NATOptions: backendhost.NATOptions{ReplyFallback: *fallback},
				PinPath: *pin, AttachMode: *mode, ChainWindow: *chainWindow, ChainFrom: chainFrom, ChainTo: chainTo,
			},
			kubeconfig: *kubeconfig, node: *nodeName, classless: *classless,
			cleanupOnExit: *cleanupOnExit, metricsAddr: *metricsAddr, log: log,
		})
	case *source != "":
		return fmt.Errorf("--source %q: want kubernetes (or no --source, with --vip or --nat)", *source)
	}
	res, err := backendhost.Setup(backendhost.Options{
		Interface: *iface, VIPs: vips, NAT: nat, NATOptions: backendhost.NATOptions{ReplyFallback: *fallback},
		PinPath: *pin, AttachMode: *mode, ChainWindow: *chainWindow, ChainFrom: chainFrom, ChainTo: chainTo,
	})
	if err != nil {
		return err
	}
	fmt.Printf("backend ready: %s decapsulates IPIP and GUE (port %d) to %v (%s XDP, pinned at %s)\n",
		*iface, wire.GUEPort, res.HostAddrs, res.Mode, res.PinPath)
	if len(vips) > 0 {
		fmt.Printf("VIPs %v on lo\n", []netip.Addr(vips))
	}
	if len(vips) > 0 || len(nat) > 0 {
		c := decap.Chain{Window: *chainWindow, From: chainFrom, To: chainTo}
		printChaining(*iface, c, res.ForwardingOn)
		if c.On() && slices.ContainsFunc(res.HostAddrs, netip.Addr.Is6) && !ipv6Forwarding() {
			fmt.Println("note: IPv6 forwarding is off on this host (net.ipv6.conf.all.forwarding=0): a packet chained over IPv6 to a previous owner whose neighbour is not resolved yet goes through the stack, which then drops it, and the neighbour stays unresolved; set net.ipv6.conf.all.forwarding=1 to chain over IPv6")
		}
	}
	if len(nat) > 0 {
		fmt.Printf("%d translations VIP:port -> pod:targetPort (%d added, %d changed, %d removed); replies translated back on the egress of %s\n",
			len(nat), res.NAT.Added, res.NAT.Updated, res.NAT.Removed, *iface)
	}
	return nil
}

// printChaining says what daisy chaining does on this host.
func printChaining(iface string, c decap.Chain, forwardingOn bool) {
	switch {
	case c.Window == 0:
		fmt.Println("daisy chaining off (--chain-window 0): TCP packets without a connection here are not sent on to a previous owner; the stack answers them (a reset)")
		return
	case !c.On():
		fmt.Println("daisy chaining off: no --chain-from and --chain-to, so no packet is sent on to a previous owner (the stack answers it, a reset); " +
			"to turn it on, pass --chain-from with the xlb nodes' addresses and --chain-to with the backends' (addresses or CIDRs)")
		return
	}
	fmt.Printf("daisy chaining: TCP packets without a connection here go on to the previous owner of their table slot for %v after it changed, "+
		"only from the xlb nodes %v (or the backends) and only to the backends %v; others are dropped and counted (chain_drop_untrusted_source, chain_drop_unknown_owner in --stats)\n",
		c.Window, c.From, c.To)
	if forwardingOn {
		fmt.Printf("turned on forwarding on %s (net.ipv4.conf.%s.forwarding=1, and net.ipv6.conf.%s.forwarding=1 when it has an IPv6 address): chaining looks up the route to the previous owner as a router does\n", iface, iface, iface)
	}
}

// nodeBackendOptions configure the backend DaemonSet's loop.
type nodeBackendOptions struct {
	setup         backendhost.Options // without NAT: the cluster gives it
	kubeconfig    string
	node          string
	classless     bool
	cleanupOnExit bool
	metricsAddr   string
	log           *slog.Logger
}

// runNodeBackend is `xlb backend --source kubernetes`: it keeps the node's
// translations in step with the cluster until SIGTERM, and leaves them in
// place then, so that forwarding continues while the DaemonSet pod is
// replaced.
func runNodeBackend(o nodeBackendOptions) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log := o.log
	if o.node == "" {
		return errors.New("no node name: pass --node-name NAME or set NODE_NAME (in a DaemonSet, from the downward API's spec.nodeName)")
	}
	// client-go logs through klog: into the same log, in the same format.
	klog.SetSlogLogger(log.With("component", "client-go"))

	local, err := interfaceAddrs(o.setup.Interface)
	if err != nil {
		return err
	}
	if err := checkForwarding(); err != nil {
		return err
	}
	cfg, err := kubeConfig(o.kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	nb := &nodeBackend{opts: o.setup, log: log}
	// What an earlier run left pinned lingers like a departed pod's.
	initial, _ := backendhost.PinnedNAT(o.setup.PinPath)
	w, err := nodenat.New(nodenat.Options{
		Client: client, Node: o.node, ServeClassless: o.classless, LocalAddrs: local, Apply: nb.apply, Log: log,
		// Pods that leave a Service keep their translations for the
		// chain window: daisy chaining sends their connections on to them.
		Linger: o.setup.ChainWindow, Initial: initial,
		ChainFrom: o.setup.ChainFrom, ChainTo: o.setup.ChainTo,
	})
	if err != nil {
		return err
	}

	var srv *http.Server
	if o.metricsAddr != "" {
		ln, err := net.Listen("tcp", o.metricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics-addr %s: %w", o.metricsAddr, err)
		}
		srv = &http.Server{Handler: backendMux(w, o.setup.PinPath), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics server stopped", "addr", o.metricsAddr, "err", err,
					"fix", "restart xlb backend to serve /healthz and /metrics again (a liveness probe on /healthz does it); the node's translations stay in place meanwhile")
			}
		}()
		log.Info("serving /healthz and /metrics", "addr", ln.Addr().String())
	}

	log.Info("backend for Kubernetes starting", "interface", o.setup.Interface, "addresses", local,
		"pinPath", o.setup.PinPath, "serveClassless", o.classless, "server", cfg.Host)
	if o.setup.ChainWindow == 0 {
		log.Info("daisy chaining off (--chain-window 0): TCP packets without a connection here are not sent on to a previous owner")
	} else {
		log.Info("daisy chaining from the cluster: packets are chained only from the Nodes' InternalIP/ExternalIP addresses (the xlb nodes) "+
			"and only to the endpoints of the Services xlb serves, their endpoint history and the Nodes (the previous owners); others are dropped and counted",
			"chainWindow", o.setup.ChainWindow.String(), "extraChainFrom", o.setup.ChainFrom, "extraChainTo", o.setup.ChainTo)
	}
	runErr := w.Run(ctx)
	if srv != nil {
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = srv.Shutdown(shutdown)
		cancel()
	}
	if runErr != nil {
		return runErr
	}
	if o.cleanupOnExit {
		if _, err := backendhost.Cleanup(o.setup.PinPath); err != nil {
			return fmt.Errorf("--cleanup-on-exit: %w", err)
		}
		log.Info("stopped; removed the programs and translations (--cleanup-on-exit)", "pinPath", o.setup.PinPath)
		return nil
	}
	log.Info("stopped; the programs and translations stay in place, so forwarding continues until the next start",
		"translations", w.Stats().Entries, "pinPath", o.setup.PinPath,
		"hint", "remove them with `xlb backend --interface "+o.setup.Interface+" --pin-path "+o.setup.PinPath+" --cleanup`")
	return nil
}

// nodeBackend applies the watcher's translations to the data plane.
// backendhost.Setup attaches the reply program only with translations, so
// the set-up waits for the first one: a node without pods behind a VIP
// needs nothing attached, and a restart finds the previous run's programs
// and translations still working until the new list replaces them.
type nodeBackend struct {
	opts backendhost.Options
	log  *slog.Logger
	// setUp: Setup ran in this process; replyAttached: with
	// translations, so the reply program is attached (SetNAT keeps it
	// attached when the list becomes empty, for draining flows).
	setUp, replyAttached bool
}

func (b *nodeBackend) apply(st nodenat.State) error {
	entries := st.NAT
	chain := decap.Chain{Window: b.opts.ChainWindow, From: st.ChainFrom, To: st.ChainTo}
	switch {
	case len(entries) > 0 && !b.replyAttached, !b.setUp && len(b.opts.VIPs) > 0:
		o := b.opts
		o.NAT = entries
		o.ChainFrom, o.ChainTo = st.ChainFrom, st.ChainTo
		res, err := backendhost.Setup(o)
		if err != nil {
			return fmt.Errorf("set up %s: %w", o.Interface, err)
		}
		b.setUp, b.replyAttached = true, len(entries) > 0
		attrs := []any{"interface", o.Interface, "xdpMode", res.Mode, "pinPath", res.PinPath,
			"translations", len(entries), "added", res.NAT.Added, "changed", res.NAT.Updated, "removed", res.NAT.Removed,
			"chainWindow", o.ChainWindow.String(), "chaining", res.Chaining, "chainFrom", len(st.ChainFrom), "chainTo", len(st.ChainTo)}
		if len(o.VIPs) > 0 {
			attrs = append(attrs, "forwardingTurnedOn", res.ForwardingOn)
		}
		b.log.Info("data plane set up", attrs...)
		b.warnNoNetns(res.NAT)
		return nil
	case !b.setUp && len(entries) == 0:
		// Nothing to translate yet. A previous run may have left
		// translations the cluster no longer asks for: clear them.
		ch, err := backendhost.SetNAT(b.opts.PinPath, nil, b.opts.NATOptions)
		if errors.Is(err, os.ErrNotExist) {
			return nil // never set up on this interface
		}
		if err != nil {
			return fmt.Errorf("clear the translations of a previous run under %s: %w", b.opts.PinPath, err)
		}
		if ch.Removed > 0 {
			b.log.Info("removed translations a previous run left", "removed", ch.Removed)
		}
		// The previous run's program still decapsulates: its chaining
		// sets follow the cluster too.
		if err := decap.SetChain(b.opts.PinPath, chain); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("update the daisy-chaining sets a previous run left under %s: %w", b.opts.PinPath, err)
		}
		return nil
	}
	ch, err := backendhost.SetNAT(b.opts.PinPath, entries, b.opts.NATOptions)
	if err != nil {
		return fmt.Errorf("update the translations under %s: %w (if the pinned state was removed, restart this pod to set it up again)", b.opts.PinPath, err)
	}
	if err := decap.SetChain(b.opts.PinPath, chain); err != nil {
		return fmt.Errorf("update the daisy-chaining sets under %s: %w (if the pinned state was removed, restart this pod to set it up again)", b.opts.PinPath, err)
	}
	b.log.Info("translations updated", "translations", len(entries), "added", ch.Added, "changed", ch.Updated, "removed", ch.Removed,
		"chaining", chain.On(), "chainFrom", len(st.ChainFrom), "chainTo", len(st.ChainTo))
	b.warnNoNetns(ch)
	return nil
}

// warnNoNetns says when daisy chaining cannot see some pods' sockets.
func (b *nodeBackend) warnNoNetns(ch backendhost.NATChange) {
	if ch.NoNetns > 0 && b.opts.ChainWindow > 0 {
		b.log.Warn("daisy chaining cannot look into the sockets of some local pods: their packets are delivered without it",
			"pods", ch.NoNetns,
			"fix", "the node finds a pod's network namespace through the veth its /32 host route leads to (the veth's link-netnsid); use a CNI with host routing over veth pairs, or ignore this for Services without xlb.io/flows: daisy-chain")
	}
}

// interfaceAddrs returns the IPv4 and global IPv6 addresses of the
// tunnels' interface: an endpoint with one of them is a hostNetwork pod,
// which the node cannot translate to.
func interfaceAddrs(name string) ([]netip.Addr, error) {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return nil, fmt.Errorf("interface %q: %w (pass the node's uplink with --interface)", name, err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return nil, fmt.Errorf("addresses of %s: %w", name, err)
	}
	return hostAddrsOf(name, addrs)
}

// hostAddrsOf is interfaceAddrs's choice among addrs.
func hostAddrsOf(name string, addrs []net.Addr) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && (ip.Unmap().Is4() || config.IsGlobal6(ip)) {
				out = append(out, ip.Unmap())
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("interface %s has neither an IPv4 nor a global IPv6 address: the tunnels from the load balancer arrive at one", name)
	}
	return out, nil
}

// ipv6Forwarding reports whether the host forwards IPv6
// (net.ipv6.conf.all.forwarding, which the stack checks for every
// forwarded IPv6 packet whatever the interface's own setting).
func ipv6Forwarding() bool {
	b, err := os.ReadFile("/proc/sys/net/ipv6/conf/all/forwarding")
	return err == nil && strings.TrimSpace(string(b)) == "1"
}

// checkForwarding fails early, with what to do, where the set-up would
// fail at the first translation.
func checkForwarding() error {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	if err != nil {
		return fmt.Errorf("read net.ipv4.ip_forward: %w", err)
	}
	if strings.TrimSpace(string(b)) != "1" {
		return errors.New("IPv4 forwarding is off (net.ipv4.ip_forward=0): the node could not route translated packets to its pods; enable it (a CNI with host routing does), or check that the pod runs in the host network namespace")
	}
	return nil
}

// kubeConfig loads the client configuration: the file given, else
// $KUBECONFIG or ~/.kube/config, else the pod's service account.
func kubeConfig(path string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes client configuration: %w (pass --kubeconfig FILE, or run in a pod with a service account)", err)
	}
	return rest.AddUserAgent(cfg, "xlb-backend/"+version), nil
}

// backendMux serves /healthz (ready once the caches synced and the last
// apply succeeded) and /metrics.
func backendMux(w *nodenat.Watcher, pinPath string) *http.ServeMux {
	reg := prometheus.NewRegistry()
	reg.MustRegister(&backendCollector{w: w, pinPath: pinPath})
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, _ *http.Request) {
		st := w.Stats()
		switch {
		case st.Synced:
			fmt.Fprintf(rw, "ok: %d translations\n", st.Entries)
		case st.LastError != "":
			http.Error(rw, "the last update of the translations failed: "+st.LastError, http.StatusServiceUnavailable)
		default:
			http.Error(rw, "starting: waiting for the Services and EndpointSlices caches", http.StatusServiceUnavailable)
		}
	})
	return mux
}

var (
	backendBuildInfo = prometheus.NewDesc("xlb_build_info", "Build information of the running xlb; the value is always 1.", []string{"version"}, nil)
	natEntries       = prometheus.NewDesc("xlb_backend_nat_entries", "Translations VIP:port -> pod:targetPort this node last applied.", nil, nil)
	natSynced        = prometheus.NewDesc("xlb_backend_nat_synced", "Whether the translations follow the cluster (1), or the caches have not synced or the last update failed (0).", nil, nil)
	natSyncs         = prometheus.NewDesc("xlb_backend_nat_syncs_total", "Updates of the node's translations, by result (ok, error).", []string{"result"}, nil)
	natLastSync      = prometheus.NewDesc("xlb_backend_nat_last_sync_timestamp_seconds", "Time of the last successful update of the translations, in seconds since the Unix epoch.", nil, nil)
	natPackets       = prometheus.NewDesc("xlb_backend_nat_packets_total", "Packets counted by the translation programs, by counter (see docs/kubernetes-datapath.md).", []string{"counter"}, nil)
	natBytes         = prometheus.NewDesc("xlb_backend_nat_bytes_total", "Bytes counted by the translation programs, by counter.", []string{"counter"}, nil)
	decapPackets     = prometheus.NewDesc("xlb_backend_decap_packets_total", "Packets counted by the decapsulation program, by counter.", []string{"counter"}, nil)
	decapBytes       = prometheus.NewDesc("xlb_backend_decap_bytes_total", "Bytes counted by the decapsulation program, by counter.", []string{"counter"}, nil)
	chainPackets     = prometheus.NewDesc("xlb_backend_chain_packets_total", "TCP packets with a daisy-chain hint, by what the decapsulation program did with them (see docs/operations.md).", []string{"counter"}, nil)
	chainBytes       = prometheus.NewDesc("xlb_backend_chain_bytes_total", "Bytes of TCP packets with a daisy-chain hint, by counter.", []string{"counter"}, nil)
	chainSetSize     = prometheus.NewDesc("xlb_backend_chain_set_entries", "Addresses in the daisy-chaining sets this node last applied, by set (from: the xlb nodes; to: the previous owners).", []string{"set"}, nil)
)

// backendCollector reads the watcher's stats and the pinned counters at
// scrape time.
type backendCollector struct {
	w       *nodenat.Watcher
	pinPath string
	mu      sync.Mutex // one scrape at a time reads the maps
}

func (c *backendCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{backendBuildInfo, natEntries, natSynced, natSyncs, natLastSync, natPackets, natBytes, decapPackets, decapBytes, chainPackets, chainBytes, chainSetSize} {
		ch <- d
	}
}

func (c *backendCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	count := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	st := c.w.Stats()
	gauge(backendBuildInfo, 1, version)
	gauge(natEntries, float64(st.Entries))
	gauge(chainSetSize, float64(st.ChainFrom), "from")
	gauge(chainSetSize, float64(st.ChainTo), "to")
	synced := 0.0
	if st.Synced {
		synced = 1
	}
	gauge(natSynced, synced)
	count(natSyncs, st.Applies, "ok")
	count(natSyncs, st.ApplyErrors, "error")
	if !st.LastApply.IsZero() {
		gauge(natLastSync, float64(st.LastApply.UnixMilli())/1000)
	}
	// Before the first translation nothing may be set up: no counters
	// yet, which is not an error.
	if nst, err := backendhost.NATStats(c.pinPath); err == nil {
		for _, name := range wire.NATStatNames {
			count(natPackets, nst[name].Packets, name)
			count(natBytes, nst[name].Bytes, name)
		}
	}
	if dst, err := decap.Stats(c.pinPath); err == nil {
		for _, name := range wire.DecapStatNames {
			count(decapPackets, dst[name].Packets, name)
			count(decapBytes, dst[name].Bytes, name)
		}
	}
	if cst, err := decap.ChainStats(c.pinPath); err == nil {
		for _, name := range wire.ChainStatNames {
			count(chainPackets, cst[name].Packets, name)
			count(chainBytes, cst[name].Bytes, name)
		}
	}
}
