package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/xlbproject/xlb/internal/k8s/controller"
)

func runController(args []string) error {
	fs := flag.NewFlagSet("xlb controller", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig `file` (default: $KUBECONFIG, ~/.kube/config, else the in-cluster service account)")
	namespace := fs.String("namespace", envOr("POD_NAMESPACE", "xlb-system"), "`namespace` of the leader Lease ($POD_NAMESPACE if set)")
	leaseName := fs.String("lease-name", "xlb-controller", "`name` of the leader Lease")
	identity := fs.String("identity", "", "this instance's identity in the Lease (default $POD_NAME, else HOSTNAME-PID)")
	classless := fs.Bool("serve-classless", false, "also serve Services of type LoadBalancer without a spec.loadBalancerClass")
	metricsAddr := fs.String("metrics-addr", ":9401", "`host:port` serving /healthz and /metrics (Prometheus); empty: none")
	leaseDuration := fs.Duration("lease-duration", controller.DefaultLeaseDuration, "how long the other instances wait after the leader's last renewal before taking over")
	renewDeadline := fs.Duration("renew-deadline", controller.DefaultRenewDeadline, "how long the leader tries to renew before it stops (less than --lease-duration)")
	retryPeriod := fs.Duration("retry-period", controller.DefaultRetryPeriod, "how often each instance tries to take or renew the Lease")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, `usage: xlb controller [--kubeconfig FILE] [--namespace NS] [--lease-name NAME] [--serve-classless] [--metrics-addr HOST:PORT]

Gives Services of type LoadBalancer with loadBalancerClass xlb.io/lb an address
from the AddressPools and writes it to their status. Run two or more: one leads
(the Lease), the others wait to take over.`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	log, err := newLogger(*logFormat, *logLevel)
	if err != nil {
		return err
	}
	// client-go's leader election and event broadcaster log through
	// klog: into the same log.
	klog.SetSlogLogger(log)
	if *identity == "" {
		*identity = os.Getenv("POD_NAME")
	}
	if *identity == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("no --identity given and no host name: %w", err)
		}
		*identity = host + "-" + strconv.Itoa(os.Getpid())
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	cfg, err := controllerKubeConfig(*kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := controller.NewMetrics(reg)
	if err != nil {
		return err
	}
	var leading atomic.Bool
	if *metricsAddr != "" {
		ln, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics-addr %s: %w", *metricsAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		// Healthy while the process runs: a standby instance is as
		// healthy as the leader, and a leader that loses the Lease
		// exits on its own.
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
			if leading.Load() {
				fmt.Fprintln(w, "ok: leading")
			} else {
				fmt.Fprintln(w, "ok: standby")
			}
		})
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics server stopped", "addr", *metricsAddr, "error", err,
					"fix", "restart the controller to serve /healthz and /metrics again (a liveness probe on /healthz does it)")
			}
		}()
		defer func() {
			shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(shutdown)
		}()
		log.Info("serving /healthz and /metrics", "addr", ln.Addr().String())
	}

	c, err := controller.New(controller.Options{
		Client: client, Dynamic: dyn, ServeClassless: *classless, Identity: *identity, Metrics: metrics, Log: log,
	})
	if err != nil {
		return err
	}
	log.Info("controller starting", "server", cfg.Host, "serveClassless", *classless, "version", version)
	err = controller.RunElected(ctx, controller.Election{
		Client: client, Namespace: *namespace, Name: *leaseName, Identity: *identity,
		LeaseDuration: *leaseDuration, RenewDeadline: *renewDeadline, RetryPeriod: *retryPeriod,
		Metrics: metrics, Log: log,
	}, func(ctx context.Context) error {
		leading.Store(true)
		defer leading.Store(false)
		return c.Run(ctx)
	})
	if err != nil {
		return err
	}
	log.Info("controller stopped")
	return nil
}

// controllerKubeConfig loads the client configuration: an explicit file,
// else the usual kubeconfig places, else the in-cluster service account.
func controllerKubeConfig(path string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes client configuration: %w (pass --kubeconfig FILE, or run in a pod with a service account)", err)
	}
	// A burst of new Services costs three requests each (status,
	// annotation, Event); client-go's default of 5 per second would
	// make the twentieth wait seconds.
	cfg.QPS, cfg.Burst = 50, 100
	return rest.AddUserAgent(cfg, "xlb-controller/"+version), nil
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}
