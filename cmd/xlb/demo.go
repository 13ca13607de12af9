package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/xlbproject/xlb/testbed/demo"
)

func runDemo(args []string) error {
	fs := flag.NewFlagSet("xlb demo", flag.ContinueOnError)
	prefix := fs.String("prefix", demo.DefaultPrefix, "lab name: namespaces are PREFIX-router, PREFIX-node1, ...")
	requests := fs.Int("requests", demo.DefaultRequests, fmt.Sprintf("HTTP requests per round (%d to %d)", demo.MinRequests, demo.MaxRequests))
	keep := fs.Bool("keep", false, "leave the lab up at the end (remove it with: xlb lab down --prefix PREFIX)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *requests < demo.MinRequests || *requests > demo.MaxRequests {
		return fmt.Errorf("--requests %d: want %d to %d", *requests, demo.MinRequests, demo.MaxRequests)
	}
	// The lab's own progress logs would interleave with the demo's
	// output; warnings and errors still show.
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	// Ctrl-C or SIGTERM stops the demo at the next step or request; the
	// lab is still taken down.
	// A closed stdout (`xlb demo | head`) must not kill the demo before
	// it takes its lab down: with SIGPIPE noted, writes just fail.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return demo.Run(ctx, demo.Options{Prefix: *prefix, Requests: *requests, Keep: *keep})
}
