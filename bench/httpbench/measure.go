package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/xlbproject/xlb/testbed/netns"
)

// Run is one wrk run.
type Run struct {
	Path     string `json:"path"`
	Mode     string `json:"mode"`
	Backends int    `json:"backends"`
	// Round is 0 for the warm-up, which is checked but not reported.
	Round   int    `json:"round"`
	Command string `json:"command"`
	WrkResult
	// Served is the requests each backend answered during the run
	// (nginx's count), be1 first, all eight.
	Served []int `json:"served"`
	// XDPPackets is the packets the xlb node's XDP program forwarded
	// for the service during the run (xlb paths only).
	XDPPackets uint64 `json:"xdp_packets,omitempty"`
	// NATAllocFailures is the connections the node found no free port or
	// room for during the run (xlb nat and dnat: their SYNs were dropped,
	// and the client retried).
	NATAllocFailures uint64 `json:"nat_allocation_failures,omitempty"`
	// SYNRetrans is the SYNs the client's stack sent again during the
	// run (TcpExt TCPSynRetrans): connections that waited a second or
	// more for their handshake. BackendPAWS is the segments (SYNs
	// among them) the backends refused because a TIME_WAIT socket held
	// the tuple with a newer TCP timestamp (PAWSTimewait), BackendListenDrops those their full
	// accept queues dropped (ListenDrops).
	SYNRetrans uint64 `json:"syn_retransmits"`
	// Drops is the loss counters of the lab that grew during the round,
	// by name ("namespace/interface/counter", dropCounters), and by how
	// much.
	Drops              map[string]uint64 `json:"drops,omitempty"`
	BackendPAWS        uint64            `json:"backend_paws_timewait"`
	BackendListenDrops uint64            `json:"backend_listen_drops"`
	CPU                CPUUse            `json:"cpu"`
	// monoStart and monoEnd are when wrk started and ended
	// (CLOCK_MONOTONIC seconds), for the profile.
	monoStart, monoEnd float64
}

// LatencyRun is one run of the constant-rate client.
type LatencyRun struct {
	Path     string `json:"path"`
	Backends int    `json:"backends"`
	Command  string `json:"command"`
	OpenloopResult
	CPU CPUUse `json:"cpu"`
	// Discarded: the run was disturbed and run again; the other run is
	// the one reported.
	Discarded bool `json:"discarded,omitempty"`
}

// url is what wrk asks for on path p.
func (l *benchLab) url(p Path) string {
	return "http://" + l.targets(p, l.n)[0].String() + "/"
}

// wrkRun runs wrk for d on path p in mode, with the backends configured
// now, and checks that the path answered every request and spread them
// over exactly the backends in use.
func (l *benchLab) wrkRun(ctx context.Context, s wrkSettings, p Path, mode string, d time.Duration, round int) (Run, error) {
	script := ""
	if baseKey(p.Key) == keyDirect {
		script = l.scriptPathOf(p)
	}
	args := wrkArgs(s, d, mode, script, l.url(p))
	run := Run{Path: p.Key, Mode: mode, Backends: l.n, Round: round, Command: shellJoin(args)}
	before, err := l.served()
	if err != nil {
		return run, err
	}
	xdp0, err := l.xdpPackets(p)
	if err != nil {
		return run, err
	}
	nat0, err := l.natFailures(p)
	if err != nil {
		return run, err
	}
	syn0, err := l.synCounters()
	if err != nil {
		return run, err
	}
	drop0, err := l.dropCounters()
	if err != nil {
		return run, err
	}
	s0, err := takeSample()
	if err != nil {
		return run, err
	}
	ctx, cancel := context.WithTimeout(ctx, d+s.Timeout+20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, l.xlb, append([]string{netns.ExecCommand, l.p.Clients[0].Namespace, "--"}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	run.monoStart = monotonic()
	runErr := cmd.Run()
	run.monoEnd = monotonic()
	s1, err := takeSample()
	if err != nil {
		return run, err
	}
	if runErr != nil {
		return run, fmt.Errorf("%s: %w: %s", run.Command, runErr, out.String())
	}
	run.CPU = cpuUse(s0, s1, l.roles, rusageTime(cmd.ProcessState))
	after, err := l.served()
	if err != nil {
		return run, err
	}
	xdp1, err := l.xdpPackets(p)
	if err != nil {
		return run, err
	}
	run.XDPPackets = xdp1 - xdp0
	nat1, err := l.natFailures(p)
	if err != nil {
		return run, err
	}
	run.NATAllocFailures = nat1 - nat0
	syn1, err := l.synCounters()
	if err != nil {
		return run, err
	}
	run.SYNRetrans = syn1.retrans - syn0.retrans
	run.BackendPAWS = syn1.paws - syn0.paws
	run.BackendListenDrops = syn1.listenDrops - syn0.listenDrops
	drop1, err := l.dropCounters()
	if err != nil {
		return run, err
	}
	run.Drops = dropDelta(drop0, drop1)
	run.Served = servedDelta(before, after)
	if run.WrkResult, err = parseWrk(out.String()); err != nil {
		return run, fmt.Errorf("%s: wrk's output: %w:\n%s", run.Command, err, out.String())
	}
	if err := checkWrk(run.WrkResult); err != nil {
		return run, fmt.Errorf("%s, %s, %d backends: %w (%s); wrk said:\n%s", p.Name, mode, l.n, err, run.Command, out.String())
	}
	if err := checkSpread(run.Served, l.n, run.Requests); err != nil {
		return run, fmt.Errorf("%s, %s, %d backends: %w", p.Name, mode, l.n, err)
	}
	if xlbKey(p.Key) && run.XDPPackets < uint64(run.Requests) {
		return run, fmt.Errorf("%s, %s: the node's XDP program forwarded %d packets for %d requests: the requests did not go through xlb",
			p.Name, mode, run.XDPPackets, run.Requests)
	}
	return run, nil
}

// servedDelta is the requests each backend answered between two reads
// of its count: the difference, less the later read itself.
func servedDelta(before, after []int) []int {
	out := make([]int, len(after))
	for i := range after {
		if i < len(before) {
			out[i] = max(0, after[i]-before[i]-1)
		}
	}
	return out
}

// checkSpread says whether the backends in use (the first n) answered
// the requests and the others none. wrk counts requests completed within
// its duration; the backends also answer those still open at its end, so
// their total may be a little larger.
func checkSpread(served []int, n, requests int) error {
	total := 0
	for i, v := range served {
		total += v
		switch {
		case i < n && v == 0:
			return fmt.Errorf("backend be%d, one of the %d in use, answered no request", i+1, n)
		case i >= n && v > 0:
			return fmt.Errorf("backend be%d, not in use, answered %d requests", i+1, v)
		}
	}
	if total < requests {
		return fmt.Errorf("the backends answered %d requests, wrk counted %d: something else answered", total, requests)
	}
	return nil
}

// latencyRun runs the constant-rate client from the client namespace on
// path p at rate requests a second.
func (l *benchLab) latencyRun(ctx context.Context, p Path, o openloopOptions) (LatencyRun, error) {
	self, err := os.Executable()
	if err != nil {
		return LatencyRun{}, err
	}
	o.Targets = nil
	for _, t := range l.targets(p, l.n) {
		o.Targets = append(o.Targets, t.String())
	}
	args := append([]string{self}, o.args()...)
	run := LatencyRun{Path: p.Key, Backends: l.n, Command: shellJoin(append([]string{"httpbench"}, args[1:]...))}
	s0, err := takeSample()
	if err != nil {
		return run, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Warmup+o.Duration+o.Timeout+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, l.xlb, append([]string{netns.ExecCommand, l.p.Clients[0].Namespace, "--"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	s1, err := takeSample()
	if err != nil {
		return run, err
	}
	if runErr != nil {
		return run, fmt.Errorf("%s: %w: %s", run.Command, runErr, stderr.String())
	}
	run.CPU = cpuUse(s0, s1, l.roles, rusageTime(cmd.ProcessState))
	if err := json.Unmarshal(stdout.Bytes(), &run.OpenloopResult); err != nil {
		return run, fmt.Errorf("%s: its output: %w: %q", run.Command, err, stdout.String())
	}
	in := map[string]bool{}
	for _, h := range l.p.Backends[:l.n] {
		in[h.Name] = true
	}
	for name := range run.AnsweredBy {
		if !in[name] {
			return run, fmt.Errorf("%s at %.0f/s: answered by %q, which is not in use", p.Name, o.Rate, name)
		}
	}
	return run, nil
}

// checkLatency says why a constant-rate run does not measure a working
// path: nothing answered, or (at the lowest rate, which every path must
// carry) more than 1 % of the requests failed.
func checkLatency(r OpenloopResult, lowest bool) error {
	if r.OK == 0 {
		return fmt.Errorf("no request of %d was answered: the path does not work (errors %v)", r.Scheduled, r.Errors)
	}
	if lowest && float64(r.ErrorCount()) > 0.01*float64(r.Scheduled) {
		return fmt.Errorf("%d of %d requests failed (%v) at %.0f/s, a rate every path carries", r.ErrorCount(), r.Scheduled, r.Errors, r.Rate)
	}
	return nil
}

// shellJoin writes argv as a shell command line.
func shellJoin(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a == "" || strings.ContainsAny(a, " \t'\"$\\;&|<>*?()") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}

// order is the order of the paths in the k-th series of runs: forward in
// even series, backward in odd ones, so that every path is measured
// early and late and a drift of the shared machine's load evens out.
func order(ps []Path, k int) []Path {
	out := slices.Clone(ps)
	if k%2 == 1 {
		slices.Reverse(out)
	}
	return out
}

// latencyTargets are the paths of the latency runs.
var latencyPaths = []string{keyGUE, keyNAT, keyNft, keyDirect}
