package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/xlbproject/xlb/internal/agent"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
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
			"Stop the agent first. Without dataplane.pinPath in the file, run it in the agent's network namespace.")
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
	unlock, err := bpfobj.LockForCleanup(path)
	if err != nil {
		return err
	}
	defer unlock()
	_, statErr := os.Stat(path)
	if err := bpfobj.Cleanup(path); err != nil {
		// Nobody else holds the lock file now: leave none behind.
		return errors.Join(fmt.Errorf("clean up %s: %w", path, err), bpfobj.RemoveLock(path))
	}
	if errors.Is(statErr, os.ErrNotExist) {
		fmt.Printf("nothing is pinned at %s\n", path)
		return nil
	}
	fmt.Printf("removed the data plane pinned at %s\n", path)
	return nil
}
