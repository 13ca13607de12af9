package labrun

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"syscall"
	"time"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/testbed/lab"
)

// AgentTimeout bounds the wait for an agent to serve a configuration:
// start-up (loading and attaching the XDP program) or a reload.
const AgentTimeout = 20 * time.Second

// pollEvery is how often an agent's status is read while waiting.
const pollEvery = 100 * time.Millisecond

// AgentName is the lab process name of node's agent (its log is
// lab.LogFile(prefix, AgentName(node))).
func AgentName(node lab.Host) string { return "agent-" + node.Name }

// AgentPID returns the PID of node's agent.
func AgentPID(p lab.Plan, node lab.Host) (int, error) {
	return lab.PID(p.Spec.Prefix, AgentName(node))
}

// StartAgents writes every node's configuration with services, starts an
// agent on each node and waits until every agent serves them.
func StartAgents(ctx context.Context, p lab.Plan, services []Service) error {
	pids := make([]int, len(p.Nodes))
	for i, n := range p.Nodes {
		if err := WriteConfig(p, n, services); err != nil {
			return err
		}
		pid, err := startAgent(p, n)
		if err != nil {
			return err
		}
		pids[i] = pid
	}
	for i, n := range p.Nodes {
		if _, err := waitServing(ctx, p, n, 1, services, pids[i]); err != nil {
			return err
		}
	}
	return nil
}

// StartAgent starts node's agent on its configuration file as it is, and
// waits until the agent serves services; it returns the agent's status
// then. Tests restart a stopped agent with it: the file is not rewritten,
// so it may hold settings that WriteConfig does not write.
func StartAgent(ctx context.Context, p lab.Plan, node lab.Host, services []Service) (*api.Status, error) {
	return StartAgentBinary(ctx, p, node, services, p.Spec.Binary)
}

// StartAgentBinary is StartAgent with another xlb binary than the lab's:
// an upgrade, or a downgrade.
func StartAgentBinary(ctx context.Context, p lab.Plan, node lab.Host, services []Service, binary string) (*api.Status, error) {
	pid, err := startAgentBinary(p, node, binary)
	if err != nil {
		return nil, err
	}
	return waitServing(ctx, p, node, 1, services, pid)
}

// WaitExit waits until the agent with PID pid has exited (lab.StartProcess
// reaps it), at most timeout.
func WaitExit(ctx context.Context, pid int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for syscall.Kill(pid, 0) == nil {
		select {
		case <-ctx.Done():
			return fmt.Errorf("PID %d still runs after %s: %w", pid, timeout, context.Cause(ctx))
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

func startAgent(p lab.Plan, node lab.Host) (pid int, err error) {
	return startAgentBinary(p, node, p.Spec.Binary)
}

func startAgentBinary(p lab.Plan, node lab.Host, binary string) (pid int, err error) {
	pid, err = lab.StartProcess(p.Spec.Prefix, node.Namespace, AgentName(node), binary, "agent", "--config", ConfigPath(p, node))
	if err != nil {
		return 0, fmt.Errorf("start the agent of %s: %w", node.Name, err)
	}
	return pid, nil
}

// Reconfigure rewrites every node's configuration with services, hot,
// and waits until each running agent has reloaded it: a newer generation
// than before, loaded and applied without error, serving exactly
// services. It returns the generation each node reports, in node order.
func Reconfigure(ctx context.Context, p lab.Plan, services []Service) ([]uint64, error) {
	return ReconfigureWith(ctx, p, services, NodeOptions{})
}

// ReconfigureWith is Reconfigure with node options, the same for every
// node.
func ReconfigureWith(ctx context.Context, p lab.Plan, services []Service, opts NodeOptions) ([]uint64, error) {
	before := make([]uint64, len(p.Nodes))
	for i, n := range p.Nodes {
		st, err := api.GetStatus(Socket(p, n))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n.Name, err)
		}
		before[i] = st.Config.Generation
	}
	for _, n := range p.Nodes {
		if err := WriteConfigWith(p, n, services, opts); err != nil {
			return nil, err
		}
	}
	gens := make([]uint64, len(p.Nodes))
	for i, n := range p.Nodes {
		st, err := waitServing(ctx, p, n, before[i]+1, services, 0)
		if err != nil {
			return nil, err
		}
		gens[i] = st.Config.Generation
	}
	return gens, nil
}

// waitServing polls node's agent until it reports configuration
// generation minGen or later, without error, serving exactly services.
// pid, if not 0, is the agent's process: waiting ends early if it exits.
func waitServing(ctx context.Context, p lab.Plan, node lab.Host, minGen uint64, services []Service, pid int) (*api.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, AgentTimeout)
	defer cancel()
	socket := Socket(p, node)
	var why error
	for {
		st, err := api.GetStatus(socket)
		if err == nil {
			err = serving(st, minGen, services)
		}
		if err == nil {
			return st, nil
		}
		why = err
		if pid != 0 && syscall.Kill(pid, 0) != nil {
			return nil, fmt.Errorf("the agent of %s exited; its log ends with: %s", node.Name, logTail(p, AgentName(node)))
		}
		select {
		case <-ctx.Done():
			if ctxErr := context.Cause(ctx); !errors.Is(ctxErr, context.DeadlineExceeded) {
				return nil, ctxErr
			}
			return nil, fmt.Errorf("the agent of %s does not serve its configuration after %s: %w; its log ends with: %s",
				node.Name, AgentTimeout, why, logTail(p, AgentName(node)))
		case <-time.After(pollEvery):
		}
	}
}

// serving says why status st does not show configuration generation
// minGen (or later) loaded without error and serving exactly services,
// or nil if it does.
func serving(st *api.Status, minGen uint64, services []Service) error {
	if st.Config.Generation < minGen {
		return fmt.Errorf("configuration generation %d, waiting for %d", st.Config.Generation, minGen)
	}
	if st.Config.Result != api.ResultOK {
		return fmt.Errorf("configuration generation %d: %s", st.Config.Generation, st.Config.Error)
	}
	if len(st.Services) != len(services) {
		return fmt.Errorf("%d services, want %d", len(st.Services), len(services))
	}
	for _, want := range services {
		i := slices.IndexFunc(st.Services, func(s api.Service) bool { return s.Name == want.Name })
		if i < 0 {
			return fmt.Errorf("service %q missing", want.Name)
		}
		got := st.Services[i]
		if got.VIP != want.VIP || got.Port != want.Port || got.Protocol != string(want.Protocol) || got.Forwarding != string(want.Forwarding) {
			return fmt.Errorf("service %q is %s/%s %s, want %s/%s %s", want.Name,
				netip.AddrPortFrom(got.VIP, got.Port), got.Protocol, got.Forwarding, want.Target(), want.Protocol, want.Forwarding)
		}
		// An agent from before affinity existed reports none.
		if a := cmp.Or(got.Affinity, string(config.AffinityNone)); a != want.Affinity.Name() {
			return fmt.Errorf("service %q has affinity %s, want %s", want.Name, a, want.Affinity.Name())
		}
		if !got.Installed {
			return fmt.Errorf("service %q is not installed in the data plane", want.Name)
		}
		var backends []netip.Addr
		for _, b := range got.Backends {
			backends = append(backends, b.Address)
		}
		slices.SortFunc(backends, netip.Addr.Compare)
		wantBackends := slices.SortedFunc(slices.Values(append(slices.Clone(want.Backends), want.Drained...)), netip.Addr.Compare)
		if !slices.Equal(backends, wantBackends) {
			return fmt.Errorf("service %q has backends %v, want %v", want.Name, backends, wantBackends)
		}
		var ranges []string
		for _, r := range want.SourceRanges {
			ranges = append(ranges, r.String())
		}
		if !slices.Equal(got.SourceRanges, ranges) {
			return fmt.Errorf("service %q has source ranges %v, want %v", want.Name, got.SourceRanges, ranges)
		}
	}
	return nil
}

// logTail returns the last lines of a lab process's log, for an error
// message: the demo and tests take the lab down, and the log with it.
func logTail(p lab.Plan, name string) string {
	return lab.LogTail(lab.LogFile(p.Spec.Prefix, name), 8)
}

// AgentLogs returns the end of every node's agent log, for a report after
// a failure.
func AgentLogs(p lab.Plan) map[string]string {
	logs := make(map[string]string)
	for _, n := range p.Nodes {
		logs[n.Name] = logTail(p, AgentName(n))
	}
	return logs
}
