package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/dataplane/lb"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
)

// CheckParams is the health check of the lab's service, as configured.
type CheckParams struct {
	Type       string  `json:"type"`
	IntervalMs float64 `json:"interval_ms"`
	TimeoutMs  float64 `json:"timeout_ms"`
	Rise       int     `json:"rise"`
	Fall       int     `json:"fall"`
}

// The lab's health check: fast, as in the end-to-end tests, so that 50+
// events fit into a minute or two.
var labCheck = struct {
	interval, timeout time.Duration
	rise, fall        int
}{200 * time.Millisecond, 150 * time.Millisecond, 2, 2}

func (c CheckParams) detectMs() float64  { return c.IntervalMs * float64(c.Fall) }
func (c CheckParams) recoverMs() float64 { return c.IntervalMs * float64(c.Rise) }

// tablePoll is how often the watch reads the service's table ID.
const tablePoll = time.Millisecond

// eventTimeout bounds the wait for one data-plane update.
const eventTimeout = 5 * time.Second

// benchLab is a lab of one xlb node and three backends whose agent serves
// one service, "web", with an HTTP health check. The measurements watch
// the service's table in the node's pinned data plane.
type benchLab struct {
	p       lab.Plan
	node    lab.Host
	svc     labrun.Service
	weights []uint32 // of svc.Backends, as last written
	agent   int      // PID of the node's agent
	watch   *lb.TableWatch
	id      uint32 // the service's ID in the data plane
}

// upLab builds the lab, starts the agent and waits until every backend
// is healthy and in the service's table.
func upLab(ctx context.Context, prefix, xlb string) (*benchLab, error) {
	p, err := lab.Up(ctx, lab.Spec{Prefix: prefix, Clients: 1, Nodes: 1, Backends: 3, Binary: xlb})
	if err != nil {
		return nil, err
	}
	l := &benchLab{p: p, node: p.Nodes[0]}
	l.svc = labrun.Service{Name: "web", VIP: p.VIPs[0], Port: lab.HTTPPort, Protocol: config.TCP, Forwarding: config.DSRIPIP}
	for _, b := range p.Backends {
		l.svc.Backends = append(l.svc.Backends, b.Addr)
		l.weights = append(l.weights, 1)
	}
	if _, err := l.writeConfig(); err != nil {
		return nil, err
	}
	if _, err := labrun.StartAgent(ctx, p, l.node, []labrun.Service{l.svc}); err != nil {
		return nil, err
	}
	if l.agent, err = labrun.AgentPID(p, l.node); err != nil {
		return nil, err
	}
	for _, a := range l.svc.Backends {
		if _, err := labrun.WaitHealth(ctx, p, l.svc.Name, a, api.StateUp, 10*time.Second); err != nil {
			return nil, err
		}
	}
	if l.watch, err = lb.WatchTables(l.node.PinDir); err != nil {
		return nil, err
	}
	if err := l.findService(ctx); err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

// findService finds the service's ID in the data plane, the only one
// with a table, and waits until its table names every backend (the
// first probes find them up, which changes no table).
func (l *benchLab) findService(ctx context.Context) error {
	ids, err := l.watch.Services()
	if err != nil {
		return err
	}
	if len(ids) != 1 {
		return fmt.Errorf("the agent's data plane has tables for services %v, want exactly one", ids)
	}
	l.id = ids[0]
	if _, _, _, err := l.waitTable(ctx, 0, func(s map[netip.Addr]int) bool { return len(s) == len(l.svc.Backends) }); err != nil {
		return fmt.Errorf("the table never named every backend: %w", err)
	}
	return nil
}

func (l *benchLab) close() {
	if l.watch != nil {
		l.watch.Close()
	}
}

func (l *benchLab) params() CheckParams {
	return CheckParams{Type: string(config.CheckHTTP), IntervalMs: benchutil.Ms(labCheck.interval), TimeoutMs: benchutil.Ms(labCheck.timeout), Rise: labCheck.rise, Fall: labCheck.fall}
}

// renderConfig writes the agent's configuration: labrun's writer has no
// weights, and the reload measurement changes them.
func (l *benchLab) renderConfig() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by bench/ctlbench for %s.\n", l.node.Name)
	fmt.Fprintf(&b, "node: {interface: %s, address: %s}\n", l.node.Interface, l.node.Addr)
	fmt.Fprintf(&b, "api: {socket: %s}\n", labrun.Socket(l.p, l.node))
	fmt.Fprintf(&b, "dataplane: {pinPath: %s}\n", l.node.PinDir)
	fmt.Fprintf(&b, "services:\n  - name: %s\n    vip: %s\n    port: %d\n    protocol: %s\n    forwarding: %s\n",
		l.svc.Name, l.svc.VIP, l.svc.Port, l.svc.Protocol, l.svc.Forwarding)
	fmt.Fprintf(&b, "    healthCheck: {type: http, path: /, interval: %s, timeout: %s, rise: %d, fall: %d}\n",
		labCheck.interval, labCheck.timeout, labCheck.rise, labCheck.fall)
	b.WriteString("    backends:\n")
	for i, a := range l.svc.Backends {
		fmt.Fprintf(&b, "      - {address: %s, weight: %d}\n", a, l.weights[i])
	}
	return []byte(b.String())
}

// writeConfig replaces the agent's configuration file by renaming a
// complete new one over it, as a careful operator or a config manager
// does, and returns the time just before the rename: from then on the
// agent can see the new file.
func (l *benchLab) writeConfig() (time.Time, error) {
	path := labrun.ConfigPath(l.p, l.node)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, l.renderConfig(), 0o644); err != nil {
		return time.Time{}, err
	}
	t0 := time.Now()
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return time.Time{}, err
	}
	return t0, nil
}

// waitTable polls the service's table ID every tablePoll until it
// differs from the ID from (0: any table) and the new table satisfies
// ok. It returns when it saw that table (taken right after the poll that
// saw its ID), its ID, and how many other table changes it saw before.
func (l *benchLab) waitTable(ctx context.Context, from ebpf.MapID, ok func(map[netip.Addr]int) bool) (time.Time, ebpf.MapID, int, error) {
	deadline := time.Now().Add(eventTimeout)
	others := 0
	for {
		id, err := l.watch.TableID(l.id)
		seen := time.Now()
		if err != nil {
			return time.Time{}, 0, others, err
		}
		if id != from && id != 0 {
			got, slots, err := l.watch.Slots(l.id)
			if err != nil {
				return time.Time{}, 0, others, err
			}
			if ok(slots) {
				return seen, got, others, nil
			}
			others++
			from = got
		}
		if seen.After(deadline) {
			return time.Time{}, 0, others, fmt.Errorf("no matching table change within %s", eventTimeout)
		}
		if err := ctx.Err(); err != nil {
			return time.Time{}, 0, others, err
		}
		time.Sleep(tablePoll)
	}
}

// currentTable returns the service's table ID and slot counts now.
func (l *benchLab) currentTable() (ebpf.MapID, map[netip.Addr]int, error) {
	return l.watch.Slots(l.id)
}

// reloadTriggers counts the agent's "configuration reloaded" log lines by
// trigger, to tell which way each reload came.
func (l *benchLab) reloadTriggers() (map[string]int, error) {
	b, err := os.ReadFile(lab.LogFile(l.p.Spec.Prefix, labrun.AgentName(l.node)))
	if err != nil {
		return nil, err
	}
	return countTriggers(string(b)), nil
}

// countTriggers counts the "configuration reloaded" lines of an agent's
// text log by their trigger attribute ("?" when a line has none).
func countTriggers(log string) map[string]int {
	out := map[string]int{}
	for line := range strings.Lines(log) {
		if !strings.Contains(line, `msg="configuration reloaded"`) {
			continue
		}
		_, rest, found := strings.Cut(line, " trigger=")
		if !found {
			out["?"]++
			continue
		}
		var trig string
		if strings.HasPrefix(rest, `"`) {
			trig, _, _ = strings.Cut(rest[1:], `"`)
		} else {
			trig, _, _ = strings.Cut(rest, " ")
		}
		out[strings.TrimSpace(trig)]++
	}
	return out
}
