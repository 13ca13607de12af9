package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
	"github.com/xlbproject/xlb/testbed/netns"
)

// agentJob is the job label of the agents' series, as a scrape
// configuration would give it.
const agentJob = "xlb"

// conntrackSize is small so that the flow table's panel has something to
// show after a few thousand connections.
const conntrackSize = 1024

// agentLab is a lab of two xlb nodes with BGP and BFD to the embedded
// router, and three backends, serving the lab's two services; web is
// health-checked over HTTP and keeps its flows in the conntrack table.
type agentLab struct {
	p        lab.Plan
	services []labrun.Service
	opts     labrun.NodeOptions
}

func upAgentLab(ctx context.Context, prefix, xlb string) (*agentLab, error) {
	p, err := lab.Up(ctx, lab.Spec{Prefix: prefix, Clients: 1, Nodes: 2, Backends: 3, Binary: xlb, Router: lab.RouterEmbedded, BFD: true})
	if err != nil {
		return nil, err
	}
	services, err := labrun.Services(p)
	if err != nil {
		return nil, err
	}
	services = labrun.WithCheck(services, "web", &labrun.Check{Type: config.CheckHTTP, Path: "/", Interval: 200 * time.Millisecond,
		Timeout: 150 * time.Millisecond, Rise: 2, Fall: 2})
	services[0].Flows = config.FlowsStateful
	l := &agentLab{p: p, services: services, opts: labrun.NodeOptions{ConntrackSize: conntrackSize}}
	for _, n := range p.Nodes {
		if err := labrun.WriteConfigWith(p, n, services, l.opts); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// startAgents starts every node's agent and waits until each serves.
func (l *agentLab) startAgents(ctx context.Context) error {
	for _, n := range l.p.Nodes {
		if _, err := labrun.StartAgent(ctx, l.p, n, l.services); err != nil {
			return err
		}
	}
	return nil
}

// breakConfig replaces node's file with one that does not load: its agent
// keeps the configuration it runs and reports the failed reload.
func (l *agentLab) breakConfig(node lab.Host) error {
	path := labrun.ConfigPath(l.p, node)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte("# broken on purpose by bench/dashimg\nservices: [{name: web, port: 0}\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// fixConfig writes node's file again.
func (l *agentLab) fixConfig(node lab.Host) error {
	return labrun.WriteConfigWith(l.p, node, l.services, l.opts)
}

// traffic sends HTTP requests to web (each a new connection, so each a
// new conntrack entry), UDP echoes to echo, and UDP packets to a port of
// web's VIP that no service serves, until ctx ends. The first error of
// each kind goes to note: requests to a backend that just stopped fail
// until the health checks take it out.
func (l *agentLab) traffic(ctx context.Context, wg *sync.WaitGroup, note func(string)) {
	client := l.p.Clients[0].Namespace
	web, echo := l.services[0], l.services[1]
	loop := func(name string, every time.Duration, one func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			failed := 0
			for ctx.Err() == nil {
				if err := one(); err != nil && ctx.Err() == nil {
					failed++
					if failed == 1 {
						note(fmt.Sprintf("%s: %v (later errors of this kind not shown)", name, err))
					}
				}
				select {
				case <-ctx.Done():
				case <-time.After(every):
				}
			}
		}()
	}
	loop("http", 100*time.Millisecond, func() error {
		_, err := labrun.HTTPLoad(ctx, client, web.Target(), 20, 4, nil)
		return err
	})
	loop("udp", 200*time.Millisecond, func() error {
		_, err := labrun.UDPLoad(ctx, client, echo.Target(), 10, 2, nil)
		return err
	})
	closed := netip.AddrPortFrom(web.VIP, 9)
	loop("udp to a closed port", 100*time.Millisecond, func() error {
		return netns.Do(client, func() error {
			c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(closed))
			if err != nil {
				return err
			}
			defer c.Close()
			for range 5 {
				if _, err := c.Write([]byte("dashimg")); err != nil {
					return err
				}
			}
			return nil
		})
	})
}
