// Command xlb is the xlb load balancer: agent, backend set-up, status,
// lab and demo. Each subcommand lives in a file of its own; this one only
// dispatches.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/xlbproject/xlb/testbed/netns"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

type command struct {
	name, summary string
	run           func(args []string) error
}

func commands() []command {
	return []command{
		{"agent", "run the load balancer agent: xlb agent --config FILE", runAgent},
		{"status", "show the local agent's state: xlb status [--json]", runStatus},
		{"controller", "allocate VIPs to Services of type LoadBalancer (Kubernetes): xlb controller [--kubeconfig FILE]", runController},
		{"backend", "set up a backend host: xlb backend --interface IF --vip VIP... [--cleanup]", runBackend},
		{"cleanup", "remove an agent's pinned BPF state and detach it: xlb cleanup --config FILE | --pin-path DIR", runCleanup},
		{"lab", "network-namespace lab: xlb lab up|down|status", runLab},
		{"demo", "build a lab and show xlb forwarding: xlb demo", runDemo},
		{"version", "print the version", func([]string) error { fmt.Println("xlb", version); return nil }},
	}
}

// errUsage marks an error already explained to the user with usage text.
var errUsage = errors.New("usage")

func main() {
	if len(os.Args) >= 2 && os.Args[1] == netns.ExecCommand {
		err := netns.ExecMain(os.Args[2:])
		fmt.Fprintln(os.Stderr, "xlb:", err)
		os.Exit(2)
	}
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage()
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	for _, c := range commands() {
		if c.name == os.Args[1] {
			if err := c.run(os.Args[2:]); err != nil {
				if !errors.Is(err, errUsage) && !errors.Is(err, flag.ErrHelp) {
					fmt.Fprintln(os.Stderr, "xlb "+c.name+":", err)
				}
				if errors.Is(err, flag.ErrHelp) {
					return
				}
				os.Exit(1)
			}
			return
		}
	}
	fmt.Fprintf(os.Stderr, "xlb: unknown command %q\n\n", os.Args[1])
	usage()
	os.Exit(2)
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: xlb COMMAND [FLAGS]\n\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(os.Stderr, "  %-8s %s\n", c.name, c.summary)
	}
}
