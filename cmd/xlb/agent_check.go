package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/xlbproject/xlb/internal/agent"
	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
)

// errInvalid marks a check that found the file invalid: the problems
// are printed already.
var errInvalid = errors.New("invalid configuration")

// runCheck is `xlb agent --check --config FILE`: it checks the file as
// the agent would and prints what a reload would change against the
// running agent (on socket, or else on the file's api.socket), applying
// nothing. Without a running agent it checks the file on this host, as
// a start would. It returns an error when the file is invalid or the
// check could not be made.
func runCheck(path, socket string, out, errOut io.Writer) error {
	data, err := config.ReadFile(path)
	if err != nil {
		return err
	}
	// A file that fails the checks of its own is invalid wherever it is
	// checked; it also names the socket of the agent to ask.
	cfg, err := config.Parse(path, data)
	if err != nil {
		return invalid(path, err, "", errOut)
	}
	if socket == "" {
		socket = cfg.API.Socket
	}
	c, err := api.PostCheck(socket, path, data)
	switch {
	case errors.Is(err, api.ErrNotRunning), errors.Is(err, api.ErrNoCheck):
		// The checks the agent would make at start, here.
		if _, err := agent.ParseFile(path, data); err != nil {
			return invalid(path, err, "", errOut)
		}
		if err := agent.CheckStart(cfg); err != nil {
			return invalid(path, err, "", errOut)
		}
		fmt.Fprintf(out, "%s: valid, checked on this host (in this network namespace) as an agent starting with it would check it\n", path)
		if errors.Is(err, api.ErrNoCheck) {
			fmt.Fprintf(out, "The agent on %s predates xlb agent --check: nothing compared; upgrade it to see what a reload would change.\n", socket)
		} else {
			fmt.Fprintf(out, "No agent answers on %s: nothing to compare with (if one runs elsewhere, name its socket with --socket).\n", socket)
		}
		return nil
	case err != nil:
		return err
	}
	if len(c.Errors) > 0 {
		return invalid(path, errors.New(strings.Join(c.Errors, "\n")), socket, errOut)
	}
	fmt.Fprintf(out, "%s: valid, checked by the running agent on %s\n", path, socket)
	printCheck(out, c)
	return nil
}

// invalid prints a file's problems and returns the error that ends the
// command; by names the agent's socket when the agent checked it.
func invalid(path string, problems error, by string, errOut io.Writer) error {
	fmt.Fprintln(errOut, strings.TrimRight(problems.Error(), "\n"))
	where := "on this host"
	if by != "" {
		where = "by the running agent on " + by
	}
	return fmt.Errorf("%w: %s, checked %s: a reload of it would keep the running configuration, and an agent would not start with it; correct the lines above", errInvalid, path, where)
}

// printCheck writes what a reload would change.
func printCheck(w io.Writer, c *api.Check) {
	for _, n := range c.Notes {
		fmt.Fprintf(w, "Note: %s.\n", n)
	}
	running := c.Path
	if running == "" {
		running = "the running configuration"
	}
	if c.Unchanged() {
		fmt.Fprintf(w, "A reload would change nothing in %s (generation %d).\n", running, c.Generation)
		return
	}
	var lines []string
	for _, s := range c.Added {
		lines = append(lines, "add service "+s)
	}
	for _, s := range c.Removed {
		lines = append(lines, "REMOVE service "+s)
	}
	for _, s := range c.Changed {
		lines = append(lines, "change service "+s.Name+":")
		for _, ch := range s.Changes {
			lines = append(lines, "  "+ch)
		}
	}
	for _, b := range c.BGP {
		lines = append(lines, "bgp: "+b)
	}
	for _, p := range c.Policy {
		lines = append(lines, "policy: "+p)
	}
	for _, n := range c.NAT {
		lines = append(lines, "set "+n)
	}
	if len(lines) > 0 {
		fmt.Fprintf(w, "Against %s (generation %d), a reload would:\n", running, c.Generation)
		for _, l := range lines {
			fmt.Fprintln(w, "  "+l)
		}
	}
	if len(c.Restart) > 0 {
		fmt.Fprintln(w, "Changed, but taking effect only when the agent restarts (a reload leaves them as they run):")
		for _, l := range c.Restart {
			fmt.Fprintln(w, "  "+l)
		}
	}
}

// checkFlags rejects the flags that --check, which runs no agent, does
// not use.
func checkFlags(cfgPath string, set map[string]bool) error {
	if cfgPath == "" {
		return errors.New("--check needs --config FILE")
	}
	for _, f := range []string{"source", "kubeconfig", "interface", "serve-classless", "nat-address", "nat-ports", "nat-sessions", "nat-timeouts"} {
		if set[f] {
			return fmt.Errorf("--%s has no use with --check: the file alone is checked (against the running agent, if one answers)", f)
		}
	}
	return nil
}
