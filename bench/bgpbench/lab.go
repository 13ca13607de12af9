package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"syscall"
	"time"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
)

// labNodes is the number of xlb nodes of every lab: the 1 → 4.
const labNodes = 4

// exitTimeout bounds the wait for a stopped agent to exit: the drain
// time after SIGTERM, and a little more.
const exitTimeout = labrun.DrainTime + 10*time.Second

// agentMode is how the agents peer with the router.
type agentMode struct {
	BFD      bool          `json:"bfd"`
	HoldTime time.Duration `json:"hold_time_ns"`
}

func (m agentMode) String() string {
	bfd := "no BFD"
	if m.BFD {
		bfd = "BFD 100 ms × 3"
	}
	return fmt.Sprintf("%s, hold time %s", bfd, m.HoldTime)
}

// benchLab is one lab: an upstream router of one kind with BFD, four xlb
// nodes whose agents serve the "web" service and announce its VIP, two
// backends and a client. The measurements watch the router's kernel
// route to the VIP.
type benchLab struct {
	p      lab.Plan
	kind   string // lab.RouterEmbedded or lab.RouterFRR
	svc    []labrun.Service
	vip    netip.Addr
	fib    *fibWatch
	mode   agentMode
	agents [labNodes]agent
}

// agent is the state of one node's agent as the benchmark drives it.
type agent struct {
	pid int // the running agent; 0 if none
	// gone is the PID of an agent that was signalled to end and may not
	// have exited yet; 0 if none.
	gone int
}

// upLab builds the lab with the router of the given kind and BFD on the
// router's side; the agents are not started.
func upLab(ctx context.Context, prefix, kind, bin string) (*benchLab, error) {
	p, err := lab.Up(ctx, lab.Spec{Prefix: prefix, Clients: 1, Nodes: labNodes, Backends: 2, Binary: bin, Router: kind, BFD: true})
	if err != nil {
		return nil, err
	}
	if len(p.Nodes) != labNodes || p.BGP == nil || p.BGP.BFD == nil {
		return nil, fmt.Errorf("lab %s: %d nodes, BGP %+v: want %d nodes and BFD", prefix, len(p.Nodes), p.BGP, labNodes)
	}
	svcs, err := labrun.Services(p)
	if err != nil {
		return nil, err
	}
	l := &benchLab{p: p, kind: kind, svc: svcs[:1], vip: svcs[0].VIP}
	if l.fib, err = watchFIB(p.Router, l.vip); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *benchLab) close() {
	if l.fib != nil {
		l.fib.close()
	}
}

// configure writes every node's configuration for mode; agents started
// from then on use it.
func (l *benchLab) configure(m agentMode) error {
	b := *l.p.BGP
	b.HoldTime = m.HoldTime
	if !m.BFD {
		b.BFD = nil
	}
	p := l.p
	p.BGP = &b
	for _, n := range l.p.Nodes {
		if err := labrun.WriteConfig(p, n, l.svc); err != nil {
			return err
		}
	}
	l.mode = m
	return nil
}

// defaultMode is the lab's own: BFD as the router runs it, its hold time.
func (l *benchLab) defaultMode() agentMode {
	return agentMode{BFD: true, HoldTime: l.p.BGP.HoldTime}
}

func (l *benchLab) node(i int) lab.Host { return l.p.Nodes[i] }

// running returns the indexes of the nodes whose agents run.
func (l *benchLab) running() []int {
	var out []int
	for i, a := range l.agents {
		if a.pid != 0 {
			out = append(out, i)
		}
	}
	return out
}

// runningAddrs returns the addresses of the nodes whose agents run.
func (l *benchLab) runningAddrs() []netip.Addr {
	var out []netip.Addr
	for _, i := range l.running() {
		out = append(out, l.node(i).Addr)
	}
	return out
}

// startResult is what start learned about one start.
type startResult struct {
	T0 time.Time // just before the agent's process was started
	// LogOffset is the size of the agent's log before the start: what
	// follows is this run's.
	LogOffset int64
	l         *benchLab
	i         int
	done      chan startDone
}

type startDone struct {
	pid int
	err error
}

// wait waits until the agent serves its configuration (or fails to) and
// records it as running.
func (r *startResult) wait() error {
	d := <-r.done
	if d.err != nil {
		return d.err
	}
	r.l.agents[r.i].pid = d.pid
	return nil
}

// start starts node i's agent and returns at once; the caller waits for
// the route and then for res.done. An agent that was stopped must have
// exited first: start waits for that before T0.
func (l *benchLab) start(ctx context.Context, i int) (*startResult, error) {
	a := &l.agents[i]
	if a.pid != 0 {
		return nil, fmt.Errorf("%s: its agent runs already (PID %d)", l.node(i).Name, a.pid)
	}
	if err := l.reap(ctx, i); err != nil {
		return nil, err
	}
	res := &startResult{l: l, i: i, done: make(chan startDone, 1), LogOffset: l.logSize(i)}
	res.T0 = time.Now()
	go func() {
		var d startDone
		if _, d.err = labrun.StartAgent(ctx, l.p, l.node(i), l.svc); d.err == nil {
			d.pid, d.err = labrun.AgentPID(l.p, l.node(i))
		}
		res.done <- d
	}()
	return res, nil
}

// signal sends sig to node i's agent. SIGTERM and SIGKILL end it: it
// counts as stopped from then on (start waits for its exit).
func (l *benchLab) signal(i int, sig syscall.Signal) error {
	a := &l.agents[i]
	if a.pid == 0 {
		return fmt.Errorf("%s: no agent runs", l.node(i).Name)
	}
	if err := syscall.Kill(a.pid, sig); err != nil {
		return fmt.Errorf("%s: signal %v to PID %d: %w", l.node(i).Name, sig, a.pid, err)
	}
	if sig == syscall.SIGTERM || sig == syscall.SIGKILL {
		a.gone, a.pid = a.pid, 0
	}
	return nil
}

// reap waits until node i's stopped agent, if any, has exited.
func (l *benchLab) reap(ctx context.Context, i int) error {
	a := &l.agents[i]
	if a.gone == 0 {
		return nil
	}
	if err := labrun.WaitExit(ctx, a.gone, exitTimeout); err != nil {
		return fmt.Errorf("%s: %w", l.node(i).Name, err)
	}
	a.gone = 0
	return nil
}

// stopAll stops every agent gracefully and waits until all have exited.
// A hung agent is killed instead: it would not act on SIGTERM.
func (l *benchLab) stopAll(ctx context.Context) error {
	var errs []error
	for i := range l.agents {
		if l.agents[i].pid != 0 {
			errs = append(errs, l.signal(i, syscall.SIGTERM))
		}
	}
	for i := range l.agents {
		errs = append(errs, l.reap(ctx, i))
	}
	return errors.Join(errs...)
}

// startAll starts every stopped agent, one after the other (each takes
// the CPU for a while to load its data plane), and waits until the route
// has every node's next hop.
func (l *benchLab) startAll(ctx context.Context, timeout time.Duration) error {
	for i := range l.agents {
		if l.agents[i].pid != 0 {
			continue
		}
		res, err := l.start(ctx, i)
		if err != nil {
			return err
		}
		if err := res.wait(); err != nil {
			return err
		}
	}
	_, hops, _, err := l.fib.wait(ctx, timeout, exactly(l.runningAddrs()))
	if err != nil {
		return fmt.Errorf("after starting every agent: %w (route via %v)", err, hops)
	}
	return nil
}

// bfdPoll is how often waitReady reads an agent's status.
const bfdPoll = 20 * time.Millisecond

// waitReady waits until node i's next hop is in the route and, if the
// agents run BFD, until its BFD session is up at both ends as the agent
// sees it: a BGP session comes up before its BFD session, and a node
// that hangs in between is noticed only by the hold time.
func (l *benchLab) waitReady(ctx context.Context, i int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, hops, _, err := l.fib.wait(ctx, timeout, has(l.node(i).Addr)); err != nil {
		return fmt.Errorf("%s not in the route (via %v): %w", l.node(i).Name, hops, err)
	}
	if !l.mode.BFD {
		return nil
	}
	why := "no status"
	for {
		st, err := api.GetStatus(labrun.Socket(l.p, l.node(i)))
		switch {
		case err != nil:
			why = err.Error()
		case st.BGP == nil || len(st.BGP.Peers) != 1 || st.BGP.Peers[0].BFD == nil:
			why = "no BFD session in its status"
		case st.BGP.Peers[0].BFD.State == "up" && st.BGP.Peers[0].BFD.RemoteState == "up":
			return nil
		default:
			b := st.BGP.Peers[0].BFD
			why = fmt.Sprintf("BFD %s, the router's %s", b.State, b.RemoteState)
		}
		if err := benchutil.Sleep(ctx, bfdPoll); err != nil {
			return fmt.Errorf("%s: BFD not up after %s: %s", l.node(i).Name, timeout, why)
		}
	}
}

// restartAll stops every agent, rewrites the configurations for mode m
// and starts them all again.
func (l *benchLab) restartAll(ctx context.Context, m agentMode) error {
	if err := l.stopAll(ctx); err != nil {
		return err
	}
	if err := l.configure(m); err != nil {
		return err
	}
	return l.startAll(ctx, startTimeout)
}

// logSize is the size of node i's agent log now (0 if there is none).
func (l *benchLab) logSize(i int) int64 {
	fi, err := os.Stat(lab.LogFile(l.p.Spec.Prefix, labrun.AgentName(l.node(i))))
	if err != nil {
		return 0
	}
	return fi.Size()
}

// agentLog returns node i's agent log from offset on.
func (l *benchLab) agentLog(i int, offset int64) (string, error) {
	f, err := os.Open(lab.LogFile(l.p.Spec.Prefix, labrun.AgentName(l.node(i))))
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := f.Seek(offset, 0); err != nil {
		return "", err
	}
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	return string(b), err
}
