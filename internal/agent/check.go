package agent

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
)

// ParseFile parses the content of a configuration file named name and
// checks it against this host's addresses, as LoadFile does.
func ParseFile(name string, data []byte) (*config.Config, error) {
	h, err := LocalHost()
	if err != nil {
		return nil, err
	}
	return config.ParseOn(name, data, h)
}

// CheckStart returns why an agent could not start on cfg's node section
// in this network namespace: the interface is missing, or its node
// address cannot be found. Nil when it could.
func CheckStart(cfg *config.Config) error {
	if _, err := net.InterfaceByName(cfg.Node.Interface); err != nil {
		return fmt.Errorf("node.interface %q: %w; an agent would not start with this file (list the interfaces with `ip link`)", cfg.Node.Interface, err)
	}
	_, err := NodeAddress(cfg.Node)
	return err
}

// Check checks a configuration file's content (named name in messages)
// as a reload of it would, on this agent's host, and says what a reload
// would change: nothing is applied. It serves `xlb agent --check`.
// With a source other than the file (Kubernetes), whose services and
// peers the file does not hold, only the sections a restart applies are
// compared.
func (a *Agent) Check(name string, data []byte) (*api.Check, error) {
	cfg, err := a.parse(name, data)
	a.mu.Lock()
	old, gen := a.cfg, a.generation
	a.mu.Unlock()
	c := &api.Check{Path: a.path, Generation: gen}
	var cerr *config.Error
	switch {
	case err != nil && !errors.As(err, &cerr):
		// Not the file's fault: the host's addresses could not be read.
		return nil, err
	case err != nil:
		c.Errors = strings.Split(strings.TrimRight(err.Error(), "\n"), "\n")
		return c, nil
	}
	if err := CheckStart(cfg); err != nil {
		c.Errors = []string{name + ": " + err.Error()}
		return c, nil
	}
	if a.fileIsBase {
		c.Restart = restartChanges(old, cfg)
		c.Notes = []string{"this agent takes its services and BGP peers from Kubernetes as well as from its file: " +
			"the file's own checks ran, and its node, api and dataplane sections were compared; its services and bgp section join the cluster's when the file is read; " +
			"a changed kubernetes section takes effect when the agent restarts"}
		return c, nil
	}
	d := diffConfigs(old, cfg)
	d.Path, d.Generation = c.Path, c.Generation
	return d, nil
}
