package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/xlbproject/xlb/internal/agent"
	"github.com/xlbproject/xlb/internal/announce"
	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/lb"
	"github.com/xlbproject/xlb/internal/flowhash"
	"github.com/xlbproject/xlb/internal/k8s/peerstatus"
	"github.com/xlbproject/xlb/internal/k8s/source"
	"github.com/xlbproject/xlb/internal/l2"
	"github.com/xlbproject/xlb/internal/l2/lease"
	"github.com/xlbproject/xlb/internal/source/file"
)

// sourceFile is --source file; the other source is source.Name.
const sourceFile = "file"

// kubernetesSyncTimeout bounds the wait for the API server's state
// before the first configuration: the data plane is programmed only from
// a complete picture of the cluster.
const kubernetesSyncTimeout = time.Minute

const agentUsage = `usage: xlb agent --config FILE [--log-format text|json] [--log-level debug|info|warn|error]
       xlb agent --source kubernetes [--config FILE | --interface IF --metrics HOST:PORT --nat-… ] [--kubeconfig FILE] [--serve-classless] [--log-format …] [--log-level …]
       xlb agent --check --config FILE [--socket PATH]

With --config FILE the file holds the whole configuration. With --source
kubernetes (or a kubernetes section in the file) the Services of type
LoadBalancer and the BGPPeers of the cluster are added to it; without a
file the agent runs as in the DaemonSet, with every default but those
--interface, --metrics (the file's api.metrics) and the --nat-… flags
(the file's nat section) set.

With --check the agent does not run: FILE is checked as the running agent
would check it on a reload (through its API socket) and what a reload
would change is printed; without a running agent FILE is checked as a
start would check it. The exit status is 0 for a valid file, 1 otherwise.

SIGTERM or SIGINT stops the agent; the pinned data plane keeps forwarding.
Without graceful restart (bgp.peers[].gracefulRestart) every route is
withdrawn first and the agent exits bgp.drainTime later. With it, nothing
is withdrawn: those peers keep the routes for the restart time, for the
next agent to take over. SIGUSR1 always withdraws and drains: for a node
that leaves. With Kubernetes, so does SIGTERM when the agent's Node is
cordoned, tainted for removal or being deleted.`

func runAgent(args []string) error {
	fs := flag.NewFlagSet("xlb agent", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "agent configuration `file` (YAML); with --source kubernetes, the base the cluster's services and peers are added to")
	from := fs.String("source", "", "where services and peers come from: `file` or kubernetes (default: kubernetes if the file has a kubernetes section, else file)")
	kubeconfig := fs.String("kubeconfig", "", "with --source kubernetes: kubeconfig `file` (default: the file's kubernetes.kubeconfig, else the pod's service account)")
	iface := fs.String("interface", "", "with --source kubernetes and no --config: the `interface` XDP attaches to (default: the one holding the Node's InternalIP)")
	metrics := fs.String("metrics", "", "with --source kubernetes and no --config: serve /metrics over TCP on `HOST:PORT` too, e.g. 10.0.1.2:9400 (api.metrics; default: on the API socket only)")
	classless := fs.Bool("serve-classless", false, "with --source kubernetes: also serve Services of type LoadBalancer without a loadBalancerClass (default: the file's kubernetes.serveClassless, else false)")
	natAddress := fs.String("nat-address", "", "with --source kubernetes and no --config: the source `address` of full-NAT sessions (nat.address; default: the Node's InternalIP)")
	natPorts := fs.String("nat-ports", "", "with --source kubernetes and no --config: the source ports of full-NAT sessions, `MIN-MAX` (nat.ports; default 20000-32767)")
	natSessions := fs.Uint("nat-sessions", 0, "with --source kubernetes and no --config: the `number` of NAT sessions the node holds (nat.sessions; default 262144)")
	natTimeouts := fs.String("nat-timeouts", "", "with --source kubernetes and no --config: idle timeouts of NAT sessions, any of `tcpSyn=5s,tcpEstablished=1h,tcpClosing=10s,udp=60s,tcpTimeWait=60s` (nat.timeouts)")
	check := fs.Bool("check", false, "check the --config file as the agent would, print what a reload would change against the running agent, and exit (0: valid)")
	socket := fs.String("socket", "", "with --check: the running agent's API `socket` (default: the file's api.socket)")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, agentUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	kf := kubeFlags{kubeconfig: *kubeconfig, iface: *iface}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) {
		set[f.Name] = true
		if f.Name == "serve-classless" {
			kf.classless = classless
		}
	})
	nat, err := natFlags(*natAddress, *natPorts, *natSessions, *natTimeouts, set)
	if err != nil {
		fmt.Fprintln(os.Stderr, "xlb agent:", err)
		return errUsage
	}
	kf.nat = nat
	if set["metrics"] {
		if kf.metrics, err = metricsFlag(*metrics); err != nil {
			fmt.Fprintln(os.Stderr, "xlb agent:", err)
			return errUsage
		}
	}
	switch {
	case *check:
		if err := checkFlags(*cfgPath, set); err != nil {
			fmt.Fprintln(os.Stderr, "xlb agent:", err)
			fmt.Fprintln(os.Stderr, agentUsage)
			return errUsage
		}
		return runCheck(*cfgPath, *socket, os.Stdout, os.Stderr)
	case *socket != "":
		fmt.Fprintln(os.Stderr, "xlb agent: --socket applies to --check only; the agent's own socket is the file's api.socket")
		fmt.Fprintln(os.Stderr, agentUsage)
		return errUsage
	}
	log, err := newLogger(*logFormat, *logLevel)
	if err != nil {
		return err
	}
	// Subscribed first, so that a SIGTERM during start-up also ends with
	// the socket removed and the handles closed.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, drain := drainSignal(ctx)

	var cfg *config.Config
	if *cfgPath != "" {
		if cfg, err = agent.LoadFile(*cfgPath); err != nil {
			return err
		}
	}
	kube, err := useKubernetes(*from, *cfgPath, cfg, kf)
	if err != nil {
		fmt.Fprintln(os.Stderr, "xlb agent:", err)
		fmt.Fprintln(os.Stderr, agentUsage)
		return errUsage
	}

	var src *source.Source
	var dyn dynamic.Interface
	if kube {
		// client-go logs (watch errors and retries) through klog: into
		// the agent's log.
		klog.SetSlogLogger(log)
		if src, dyn, cfg, err = startKubernetes(ctx, log, *cfgPath, cfg, kf); err != nil {
			return err
		}
	}
	return serveAgent(ctx, log, *cfgPath, cfg, src, dyn, drain)
}

// drainSignal returns a context that also ends on SIGUSR1, and whether
// that is what ended it: the agent then withdraws its routes and drains
// even with graceful restart.
func drainSignal(parent context.Context) (context.Context, func() bool) {
	ctx, cancel := context.WithCancel(parent)
	usr := make(chan os.Signal, 1)
	signal.Notify(usr, syscall.SIGUSR1)
	var got atomic.Bool
	go func() {
		defer signal.Stop(usr)
		select {
		case <-usr:
			got.Store(true)
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, got.Load
}

// kubeFlags are the flags of the Kubernetes source.
type kubeFlags struct {
	kubeconfig, iface string
	classless         *bool // nil unless given: the file's setting holds
	// metrics is the api.metrics of an agent without a file; "" unless
	// --metrics is given.
	metrics string
	// nat is the nat section of an agent without a file; nil unless a
	// --nat-… flag is given.
	nat *config.NATConfig
}

// metricsFlag checks --metrics as the file's api.metrics is checked;
// unlike the field, the flag may not be empty.
func metricsFlag(addr string) (string, error) {
	if addr == "" {
		return "", errors.New("--metrics needs HOST:PORT, e.g. 10.0.1.2:9400 (the node's address) or 127.0.0.1:9400; leave the flag out to serve /metrics on the API socket only")
	}
	if why := config.CheckMetrics(addr); why != "" {
		return "", fmt.Errorf("--metrics: %s", why)
	}
	return addr, nil
}

// natFlags reads the --nat-… flags (those set names) into a nat
// section, whose other fields are zero (their defaults); nil when none
// is given.
func natFlags(address, ports string, sessions uint, timeouts string, set map[string]bool) (*config.NATConfig, error) {
	if !set["nat-address"] && !set["nat-ports"] && !set["nat-sessions"] && !set["nat-timeouts"] {
		return nil, nil
	}
	var n config.NATConfig
	if set["nat-address"] {
		a, err := netip.ParseAddr(address)
		if err != nil || !a.Is4() || a.IsUnspecified() || a.IsLoopback() || a.IsMulticast() {
			return nil, fmt.Errorf("--nat-address %q: give a unicast IPv4 address of this node, which backends reply to", address)
		}
		n.Address = a
	}
	if set["nat-ports"] {
		r, why := config.ParsePortRange(ports)
		if why != "" {
			return nil, fmt.Errorf("--nat-ports: %s", why)
		}
		n.Ports = r
	}
	if set["nat-sessions"] {
		if sessions < config.MinNATSessions || sessions > config.MaxNATSessions {
			return nil, fmt.Errorf("--nat-sessions %d: give %d..%d", sessions, config.MinNATSessions, config.MaxNATSessions)
		}
		n.Sessions = uint32(sessions)
	}
	if set["nat-timeouts"] {
		t := &n.Timeouts
		fields := map[string]*time.Duration{"tcpSyn": &t.TCPSyn, "tcpEstablished": &t.TCPEstablished, "tcpClosing": &t.TCPClosing, "udp": &t.UDP, "tcpTimeWait": &t.TCPTimeWait}
		for _, kv := range strings.Split(timeouts, ",") {
			k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
			to, known := fields[k]
			if !ok || !known {
				return nil, fmt.Errorf("--nat-timeouts %q: %q is not NAME=DURATION with NAME tcpSyn, tcpEstablished, tcpClosing, udp or tcpTimeWait, e.g. tcpEstablished=2h,udp=30s", timeouts, kv)
			}
			d, err := time.ParseDuration(v)
			if err != nil || d < config.MinNATTimeout || d > config.MaxNATTimeout {
				return nil, fmt.Errorf("--nat-timeouts: %s=%s: give a duration from %s to 24h, e.g. %s=30s", k, v, config.MinNATTimeout, k)
			}
			*to = d
		}
	}
	return &n, nil
}

// useKubernetes decides the source from the flags and the file (nil
// without one), and rejects flags that the source does not use.
func useKubernetes(from, path string, cfg *config.Config, kf kubeFlags) (bool, error) {
	kube := false
	switch from {
	case "":
		kube = cfg == nil || cfg.Kubernetes != nil
	case sourceFile:
		if cfg != nil && cfg.Kubernetes != nil {
			return false, fmt.Errorf("%s has a kubernetes section, which takes --source kubernetes (or no --source)", path)
		}
	case source.Name:
		kube = true
	default:
		return false, fmt.Errorf("--source %q: want file or kubernetes", from)
	}
	switch {
	case !kube && cfg == nil:
		return false, errors.New("--source file needs --config FILE")
	case !kube && (kf.kubeconfig != "" || kf.iface != "" || kf.metrics != "" || kf.classless != nil || kf.nat != nil):
		return false, errors.New("--kubeconfig, --interface, --metrics, --serve-classless and --nat-… apply to --source kubernetes only")
	case kube && cfg == nil && from == "":
		return false, errors.New("give --config FILE, or --source kubernetes to run with the cluster's configuration alone")
	case kube && cfg != nil && kf.iface != "":
		return false, fmt.Errorf("--interface replaces the node section of a missing file; with --config, set node.interface in %s", path)
	case kube && cfg != nil && kf.metrics != "":
		return false, fmt.Errorf("--metrics replaces api.metrics of a missing file; with --config, set api.metrics in %s", path)
	case kube && cfg != nil && kf.nat != nil:
		return false, fmt.Errorf("--nat-… replace the nat section of a missing file; with --config, set the nat section in %s", path)
	}
	return kube, nil
}

// startKubernetes connects to the API server and waits for the cluster's
// state; it returns the source, the dynamic client (for the BGPPeers'
// status) and the first configuration, built on the file's (base, nil
// without a file) or on the DaemonSet defaults.
func startKubernetes(ctx context.Context, log *slog.Logger, path string, base *config.Config, kf kubeFlags) (*source.Source, dynamic.Interface, *config.Config, error) {
	kubeconfig := kf.kubeconfig
	if base != nil {
		var err error
		if base, err = withKubernetes(base, kf); err != nil {
			return nil, nil, nil, err
		}
		if kubeconfig == "" {
			kubeconfig = base.Kubernetes.Kubeconfig
		}
	}
	rc, err := agentKubeConfig(kubeconfig)
	if err != nil {
		return nil, nil, nil, err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	if base == nil {
		k, err := (config.Kubernetes{ServeClassless: kf.classless != nil && *kf.classless}).WithDefaults(os.Getenv, os.Hostname)
		if err != nil {
			return nil, nil, nil, err
		}
		var nat config.NATConfig
		if kf.nat != nil {
			nat = *kf.nat
		}
		if base, err = source.DaemonSetBase(ctx, client, k, kf.iface, nat); err != nil {
			return nil, nil, nil, err
		}
		// Checked with the flags already.
		base.API.Metrics = kf.metrics
	}
	src, err := source.New(source.Options{Base: base, Client: client, Dynamic: dyn, Logger: log, Host: agent.LocalHost})
	if err != nil {
		return nil, nil, nil, err
	}
	log.Info("reading the cluster's Services, EndpointSlices and BGPPeers", "server", rc.Host, "node", base.Kubernetes.NodeName, "base", baseName(path))
	cfg, err := src.Start(ctx, kubernetesSyncTimeout)
	if err != nil {
		return nil, nil, nil, err
	}
	if path != "" {
		go followBase(ctx, path, kf, src, log)
	} else {
		go ignoreHangups(ctx, log)
	}
	return src, dyn, cfg, nil
}

func baseName(path string) string {
	if path == "" {
		return "DaemonSet defaults"
	}
	return path
}

// withKubernetes returns cfg with its kubernetes section (an empty one
// if it has none) completed from the flags and the environment.
func withKubernetes(cfg *config.Config, kf kubeFlags) (*config.Config, error) {
	k := config.Kubernetes{}
	if cfg.Kubernetes != nil {
		k = *cfg.Kubernetes
	}
	if kf.classless != nil {
		k.ServeClassless = *kf.classless
	}
	k, err := k.WithDefaults(os.Getenv, os.Hostname)
	if err != nil {
		return nil, err
	}
	c := *cfg
	c.Kubernetes = &k
	return &c, nil
}

// agentKubeConfig loads the client configuration: the kubeconfig file
// given, else the pod's service account.
func agentKubeConfig(path string) (*rest.Config, error) {
	var rc *rest.Config
	var err error
	if path == "" {
		if rc, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("kubernetes: %w; outside a pod, name a kubeconfig file with --kubeconfig or kubernetes.kubeconfig", err)
		}
	} else if rc, err = clientcmd.BuildConfigFromFlags("", path); err != nil {
		return nil, fmt.Errorf("kubernetes: kubeconfig %s: %w", path, err)
	}
	// Informers list once and then watch; the start-up lists are the
	// only burst.
	rc.QPS, rc.Burst = 20, 40
	return rest.AddUserAgent(rc, "xlb-agent/"+version), nil
}

// followBase hands the source every version of the file, as the file
// source of an agent without Kubernetes reads it (package source/file):
// the agent does not read the file itself while the source builds on it.
func followBase(ctx context.Context, path string, kf kubeFlags, src *source.Source, log *slog.Logger) {
	base := file.New(file.Options{Path: path, Logger: log, Load: func(p string) (*config.Config, error) {
		cfg, err := agent.LoadFile(p)
		if err != nil {
			return nil, err
		}
		return withKubernetes(cfg, kf)
	}})
	go base.Run(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case u := <-base.Updates():
			if u.Err != nil {
				log.Error("configuration reload failed; the previous configuration keeps running", "path", path, "trigger", u.Trigger, "error", u.Err,
					"fix", "correct the file; it is read again when it changes or on SIGHUP")
			} else {
				log.Info("configuration file read; the cluster's services and peers are added to it", "path", path, "trigger", u.Trigger)
			}
			src.SetBase(u.Config, u.Err)
		}
	}
}

// ignoreHangups keeps SIGHUP from ending an agent that has no file to
// reload.
func ignoreHangups(ctx context.Context, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			log.Info("SIGHUP: no configuration file to reload; the cluster's changes apply as they happen")
		}
	}
}

// serveAgent runs the agent on cfg, with src's later configurations when
// src is not nil, until ctx ends. With src, the sessions' states go into
// the BGPPeers' status through dyn.
func serveAgent(ctx context.Context, log *slog.Logger, path string, cfg *config.Config, src *source.Source, dyn dynamic.Interface, drain func() bool) error {
	nodeAddr, err := agent.NodeAddress(cfg.Node)
	if err != nil {
		return err
	}
	nodeAddr6, err := agent.NodeAddress6(cfg.Node)
	if err != nil {
		return err
	}
	pinPath, err := agent.PinPath(cfg)
	if err != nil {
		return err
	}
	// Forwarding outlives the agent only if the pins do: refuse a bpffs
	// that would vanish with this process (ip netns exec).
	if err := bpfobj.EnsurePinFS(pinPath); err != nil {
		return err
	}
	// The socket first: it also tells whether another agent is running,
	// before this one touches the data plane.
	ln, err := api.Listen(cfg.API.Socket)
	if err != nil {
		return err
	}
	defer ln.Close()

	dpOpts, err := dataplaneOptions(cfg, nodeAddr, nodeAddr6, pinPath)
	if err != nil {
		return err
	}
	dp, err := lb.Load(dpOpts)
	if err != nil {
		return fmt.Errorf("open the data plane on %s: %w", cfg.Node.Interface, err)
	}
	// Close only drops this process's handles: the pinned program, link
	// and maps stay, so forwarding continues and a restart is lossless.
	defer dp.Close()
	if why := dp.Migrated(); why != "" {
		log.Warn("the pinned maps do not fit this version: programming fresh ones before the program switches over; their counters restart at zero",
			"reason", why, "pinPath", pinPath,
			"fix", "nothing to do: forwarding continues; only the data plane's counters start again from zero")
	}

	// The configuration is programmed before the program is attached or
	// replaced: a new program (or fresh maps) takes over complete tables.
	// The speaker follows the bgp section: BGPPeer objects come, go or
	// change the AS at any time, and a reloaded file may add or remove
	// the section (removed, every route is withdrawn and nothing is
	// announced; status then shows no BGP).
	sp, err := announce.NewRoutes(cfg.BGP, nodeAddr, nodeAddr6, log)
	if err != nil {
		return err
	}
	opts := agent.Options{
		ConfigPath: path,
		Config:     cfg,
		Dataplane:  dp,
		NodeAddr:   nodeAddr,
		NodeAddr6:  nodeAddr6,
		PinPath:    pinPath,
		Version:    version,
		Logger:     log,
		Routes:     sp,
	}
	// Layer-2 mode: the election's socket opens now, so that a port in use
	// fails the start before the program is attached.
	var l2s *l2.Speaker
	if cfg.L2 != nil {
		if l2s, err = l2.New(l2.Options{Config: cfg.L2, Interface: cfg.Node.Interface, Dataplane: dp, Monotonic: lb.Monotonic, Logger: log}); err != nil {
			return err
		}
		opts.L2 = l2s
	} else if src != nil {
		// In a cluster, the Services of AddressPools with announce: l2
		// are answered by ARP, with the owners elected by Leases.
		// Without it (no Ethernet address, no CAP_NET_RAW) the BGP pools
		// are still served.
		if l2s, err = clusterL2(cfg, src, dp, log); err != nil {
			log.Warn("layer-2 mode is unavailable on this node: the Services of AddressPools with announce: l2 are not answered by ARP here", "error", err,
				"fix", "give the agent CAP_NET_RAW (deploy/30-agent.yaml) and an Ethernet node.interface, and restart it; BGP pools are served meanwhile")
		} else {
			opts.L2 = l2s
		}
	}
	// The file is read again from here on: an edit between its first
	// read and now is seen at the next change or SIGHUP.
	var follow func(context.Context)
	if src != nil {
		opts.Source, opts.FileIsBase = src, true
	} else {
		f := file.New(file.Options{Path: path, Load: agent.LoadFile, Logger: log})
		opts.Source, follow = f, f.Run
	}
	a, err := agent.New(opts)
	if err != nil {
		return err
	}
	if err := dp.Attach(); err != nil {
		return fmt.Errorf("attach the data plane to %s: %w", cfg.Node.Interface, err)
	}
	// The program caches next hops; this keeps the cache in step with the
	// kernel's neighbours and routes for as long as the agent runs.
	go dp.WatchNextHops(ctx, log)
	log.Info("data plane attached", "interface", cfg.Node.Interface, "mode", dp.Shape().AttachMode,
		"address", nodeAddr, "address6", nodeAddr6, "pinPath", pinPath)

	srv, err := api.Serve(ln, cfg.API.Metrics, a.Status, log, api.WithCheck(a.Check), api.WithSessions(a.Sessions))
	if err != nil {
		return err
	}
	defer srv.Close()
	log.Info("agent running", "socket", cfg.API.Socket, "metrics", cfg.API.Metrics)

	// Sessions start now (with graceful restart, at the first routes);
	// routes follow when Run has the data plane's state. On the way out
	// every route is withdrawn and the routers get bgp.drainTime to move
	// the traffic elsewhere, while the pinned data plane keeps forwarding
	// what still arrives; with graceful restart, unless SIGUSR1 asked for
	// a drain, the routers keep the routes instead, for the next agent.
	if err := sp.Start(ctx); err != nil {
		return err
	}
	defer func() {
		stopBGP := sp.Restart
		if drain() {
			stopBGP = sp.Shutdown
		} else if sp.Graceful() {
			if gone, why := leavingNode(log, cfg, dyn); gone {
				log.Info("the node is leaving: withdrawing the routes and draining, not a graceful restart", "why", why)
				stopBGP = sp.Shutdown
			}
		}
		if err := stopBGP(context.Background()); err != nil {
			log.Warn("BGP shutdown", "error", err,
				"fix", "check on the peers that this node's routes are gone; they remove them at the latest when the BGP hold time expires")
		}
	}()
	if src != nil {
		stopStatus, err := writePeerStatus(ctx, log, cfg, src, dyn, sp)
		if err != nil {
			return err
		}
		defer stopStatus()
	}
	if follow != nil {
		go follow(ctx)
	}
	if l2s != nil {
		// Its own context: on the way out it still sends the leaving
		// heartbeats, after ctx has ended.
		l2ctx, stopL2 := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { l2s.Run(l2ctx); close(done) }()
		if cfg.L2 != nil {
			log.Info("layer-2 mode: answering ARP for this node's share of the VIPs", "l2", cfg.L2.String())
		}
		defer func() {
			l2s.Leave()
			stopL2()
			<-done
		}()
	}
	if err := a.Run(ctx); err != nil {
		return err
	}
	hint := "remove it with `xlb cleanup --pin-path " + pinPath + "`"
	if path != "" {
		hint = "remove it with `xlb cleanup --config " + path + "`"
	}
	log.Info("agent stopping; the pinned data plane keeps forwarding", "pinPath", pinPath, "hint", hint)
	return nil
}

// leavingNode says whether the agent stops because its Kubernetes Node
// leaves (nodeLeaving), and why; false without Kubernetes, or when the
// Node cannot be read (logged): the stop is then taken for a restart.
func leavingNode(log *slog.Logger, cfg *config.Config, dyn dynamic.Interface) (bool, string) {
	if dyn == nil || cfg.Kubernetes == nil || cfg.Kubernetes.NodeName == "" {
		return false, ""
	}
	gone, why, err := nodeLeaving(context.Background(), dyn, cfg.Kubernetes.NodeName)
	if err != nil {
		log.Warn("cannot tell whether the node is leaving; stopping as for a restart", "error", err,
			"fix", "with graceful restart the routers keep this node's routes for the restart time: if the node is leaving, send SIGUSR1 instead of SIGTERM (it withdraws and drains), or check the agent's access to its Node (RBAC: get nodes)")
		return false, ""
	}
	return gone, why
}

// clusterL2 is the ARP speaker of the VIPs of AddressPools with
// announce: l2, elected by Leases in the agent's namespace
// (kubernetes.secretNamespace, the pod's namespace by default).
func clusterL2(cfg *config.Config, src *source.Source, dp *lb.Dataplane, log *slog.Logger) (*l2.Speaker, error) {
	k := cfg.Kubernetes
	e, err := lease.New(lease.Config{Client: src.Client(), Namespace: k.SecretNamespace, Self: k.NodeName,
		Renew: lease.DefaultRenew, DeadAfter: lease.DefaultDeadAfter}, log)
	if err != nil {
		return nil, err
	}
	s, err := l2.New(l2.Options{Config: &config.L2{NodeName: k.NodeName, Heartbeat: lease.DefaultRenew, DeadAfter: lease.DefaultDeadAfter},
		Interface: cfg.Node.Interface, Dataplane: dp, Monotonic: lb.Monotonic, Logger: log, Election: e})
	if err != nil {
		return nil, fmt.Errorf("%w (needed for the Services of AddressPools with announce: l2)", err)
	}
	return s, nil
}

// writePeerStatus starts writing the state of this node's sessions with
// the cluster's BGPPeers into their status (package peerstatus); the
// function returned stops it and waits until it has removed this node's
// entries.
func writePeerStatus(ctx context.Context, log *slog.Logger, cfg *config.Config, src *source.Source, dyn dynamic.Interface, sp *announce.Routes) (func(), error) {
	node := ""
	if cfg.Kubernetes != nil {
		node = cfg.Kubernetes.NodeName
	}
	w, err := peerstatus.New(peerstatus.Options{
		Dynamic: dyn,
		Node:    node,
		Peers: func() []peerstatus.Peer {
			var out []peerstatus.Peer
			for _, o := range src.PeerObjects() {
				out = append(out, peerstatus.Peer{Name: o.Name, UID: o.UID, Address: o.Address})
			}
			return out
		},
		Sessions: func() map[netip.Addr]peerstatus.Session { return peerstatus.Sessions(sp.Status()) },
		Logger:   log,
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}, nil
}

func newLogger(format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// dataplaneOptions are the LB data plane's options for cfg. A flow hash
// it does not name is an error, as config.Parse makes it: a node that
// guessed would hash otherwise than the others.
func dataplaneOptions(cfg *config.Config, nodeAddr, nodeAddr6 netip.Addr, pinPath string) (lb.Options, error) {
	flowHash, err := flowhash.Parse(cfg.Dataplane.FlowHash)
	if err != nil {
		return lb.Options{}, fmt.Errorf("dataplane.flowHash: %w", err)
	}
	return lb.Options{
		Interface:   cfg.Node.Interface,
		NodeAddr:    nodeAddr,
		NodeAddr6:   nodeAddr6,
		PinPath:     pinPath,
		AttachMode:  string(cfg.Dataplane.AttachMode),
		TableSize:   cfg.Dataplane.TableSize,
		MaxBackends: cfg.Dataplane.MaxBackends,
		// 0: the data plane's default.
		ConntrackSize: cfg.Dataplane.ConntrackSize,
		FlowHash:      flowHash,
		PingVIPs:      cfg.Dataplane.PingVIPs,
		NATSessions:   cfg.NAT.Sessions,
	}, nil
}
