package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/xlbproject/xlb/internal/agent"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/dataplane"
)

func runCleanup(args []string) error {
	fs := flag.NewFlagSet("xlb cleanup", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "the agent's configuration `file`: clean up its pin path")
	pinPath := fs.String("pin-path", "", "bpffs `directory` to clean up")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (*cfgPath == "") == (*pinPath == "") || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: xlb cleanup --config FILE | --pin-path DIR\n\n"+
			"Detaches the agent's XDP program and removes its pinned maps: forwarding stops.\n"+
			"Without dataplane.pinPath in the file, run it in the agent's network namespace.")
		return errUsage
	}
	path := *pinPath
	if *cfgPath != "" {
		cfg, err := config.Load(*cfgPath)
		if err != nil {
			return err
		}
		if path, err = agent.PinPath(cfg); err != nil {
			return err
		}
	}
	if err := dataplane.Cleanup(path); err != nil {
		return fmt.Errorf("clean up %s: %w", path, err)
	}
	fmt.Printf("removed the data plane pinned at %s\n", path)
	return nil
}
