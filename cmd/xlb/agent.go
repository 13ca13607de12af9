package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/xlbproject/xlb/internal/agent"
	"github.com/xlbproject/xlb/internal/announce"
	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/dataplane"
)

func runAgent(args []string) error {
	fs := flag.NewFlagSet("xlb agent", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "agent configuration `file` (YAML)")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cfgPath == "" || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: xlb agent --config FILE [--log-format text|json] [--log-level debug|info|warn|error]")
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

	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	nodeAddr, err := agent.NodeAddress(cfg.Node)
	if err != nil {
		return err
	}
	pinPath, err := agent.PinPath(cfg)
	if err != nil {
		return err
	}
	// The socket first: it also tells whether another agent is running,
	// before this one touches the data plane.
	ln, err := api.Listen(cfg.API.Socket)
	if err != nil {
		return err
	}
	defer ln.Close()

	dp, err := dataplane.Load(dataplane.Options{
		Interface:   cfg.Node.Interface,
		NodeAddr:    nodeAddr,
		PinPath:     pinPath,
		AttachMode:  cfg.Dataplane.AttachMode,
		TableSize:   cfg.Dataplane.TableSize,
		MaxBackends: cfg.Dataplane.MaxBackends,
	})
	if err != nil {
		return fmt.Errorf("open the data plane on %s: %w", cfg.Node.Interface, err)
	}
	// Close only drops this process's handles: the pinned program, link
	// and maps stay, so forwarding continues and a restart is lossless.
	defer dp.Close()
	if why := dp.Migrated(); why != "" {
		log.Warn("the pinned maps do not fit this version: programming fresh ones before the program switches over; their counters restart at zero",
			"reason", why, "pinPath", pinPath)
	}

	// The configuration is programmed before the program is attached or
	// replaced: a new program (or fresh maps) takes over complete tables.
	var ann *announce.Announcer
	var routes agent.Routes
	if cfg.BGP != nil {
		if ann, err = announce.New(cfg.BGP, nodeAddr, log); err != nil {
			return err
		}
		routes = ann
	}
	a, err := agent.New(agent.Options{
		ConfigPath: *cfgPath,
		Config:     cfg,
		Dataplane:  dp,
		NodeAddr:   nodeAddr,
		PinPath:    pinPath,
		Version:    version,
		Logger:     log,
		Routes:     routes,
	})
	if err != nil {
		return err
	}
	if err := dp.Attach(); err != nil {
		return fmt.Errorf("attach the data plane to %s: %w", cfg.Node.Interface, err)
	}
	// The program caches next hops; this keeps the cache in step with the
	// kernel's neighbours and routes for as long as the agent runs.
	go dp.WatchNextHops(ctx, log)
	log.Info("data plane attached", "interface", cfg.Node.Interface, "mode", dp.AttachMode(),
		"address", nodeAddr, "pinPath", pinPath)

	srv, err := api.Serve(ln, cfg.API.Metrics, a.Status, log)
	if err != nil {
		return err
	}
	defer srv.Close()
	log.Info("agent running", "socket", cfg.API.Socket, "metrics", cfg.API.Metrics)

	if ann != nil {
		// Sessions start now; routes follow when Run has the data
		// plane's state. On the way out every route is withdrawn and the
		// routers get bgp.drainTime to move the traffic elsewhere, while
		// the pinned data plane keeps forwarding what still arrives.
		if err := ann.Start(ctx); err != nil {
			return err
		}
		defer func() {
			if err := ann.Shutdown(context.Background()); err != nil {
				log.Warn("BGP shutdown", "error", err)
			}
		}()
	}
	if err := a.Run(ctx); err != nil {
		return err
	}
	log.Info("agent stopping; the pinned data plane keeps forwarding", "pinPath", pinPath,
		"hint", "remove it with `xlb cleanup --config "+*cfgPath+"`")
	return nil
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
