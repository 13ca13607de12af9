package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The new-connection profile: where a request's CPU went on the paths of
// the NAT targets. After the rounds, each of those paths runs wrk once
// more (not one of the rounds) while perf samples every CPU's stack, and
// each sample taken while wrk ran is put in one place by its stack
// (profileClass). The lab's CPU per request in the CPU table says how
// much a path costs; this says where.

// profiledPaths are the paths profiled, in this order: the floor and
// nftables DNAT, then xlb's. xlb's agent reaps a session tcpClosing
// (10 s) after its connection ended, so that xlb's sessions are reaped
// after these runs, not in another path's (profilePause before them
// lets the rounds' sessions go first).
var profiledPaths = []string{keyFloor, keyNft, keyDNAT, keyNAT}

// profileTable is the order of the document's table.
var profileTable = []string{keyNAT, keyDNAT, keyFloor, keyNft}

// profilePause is the wait before the profiled runs: twice tcpClosing,
// for the agent to reap the sessions of the rounds.
const profilePause = 20 * time.Second

// profileRounds is how many rounds' time a profiled run lasts.
const profileRounds = 3

// profileHz is perf's sampling rate, per CPU.
const profileHz = 999

// Where a sample's CPU time went.
const (
	profXLB       = "xlb program"
	profFloor     = "floor program"
	profNetfilter = "netfilter"
	profAgent     = "xlb agent"
	profRest      = "rest"
	profIdle      = "idle"
)

// profileColumns are the places, in the table's order.
var profileColumns = []string{profXLB, profFloor, profNetfilter, profAgent, profRest}

// Profile is one profiled run.
type Profile struct {
	Path     string  `json:"path"`
	Mode     string  `json:"mode"`
	Backends int     `json:"backends"`
	Command  string  `json:"command"`
	RPS      float64 `json:"rps"`
	Requests int     `json:"requests"`
	// Seconds is how long wrk ran: the samples counted are those taken
	// meanwhile, Samples of them, at Hz per CPU.
	Seconds float64 `json:"seconds"`
	Hz      int     `json:"hz"`
	Samples int     `json:"samples"`
	// Micros is the CPU time per request, in µs, by place
	// (profileColumns, and idle).
	Micros map[string]float64 `json:"us_per_request"`
}

// Busy is the CPU time per request outside idle, in µs.
func (p Profile) Busy() float64 {
	t := 0.0
	for _, c := range profileColumns {
		t += p.Micros[c]
	}
	return t
}

// profileFrom puts perf script's samples (`-F comm,time,ip,sym`) taken
// from start to end (CLOCK_MONOTONIC seconds) in their places and
// returns how many there were by place. agent is the xlb agent's command
// name.
func profileFrom(r io.Reader, start, end float64, agent string) (map[string]int, error) {
	counts := map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var comm string
	var frames []string
	in := false
	flush := func() {
		if in {
			counts[profileClass(comm, frames, agent)]++
		}
		in, frames = false, frames[:0]
	}
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			flush()
			continue
		}
		if line[0] != ' ' && line[0] != '\t' {
			// "comm [more words] 73950.135360:" starts a sample.
			flush()
			f := strings.Fields(line)
			if len(f) < 2 {
				return nil, fmt.Errorf("perf script: unexpected line %q", line)
			}
			t, err := strconv.ParseFloat(strings.TrimSuffix(f[len(f)-1], ":"), 64)
			if err != nil {
				return nil, fmt.Errorf("perf script: no time in %q", line)
			}
			comm = strings.Join(f[:len(f)-1], " ")
			in = t >= start && t <= end
			continue
		}
		// "\tffffffff822601ab pv_native_safe_halt" or "... [unknown]".
		if f := strings.Fields(line); len(f) >= 2 {
			frames = append(frames, f[1])
		}
	}
	flush()
	return counts, sc.Err()
}

// profileClass is where a sample went, by its command and its stack
// (leaf first). Idle; else the first of these the stack meets from the
// leaf up: an XDP program of xlb or of the floor, with the kernel
// functions it calls (map lookups, the FIB); netfilter (hooks,
// conntrack, NAT, nftables and iptables rules); a function that carries
// a packet on after a hook (a hook's okfn, which netfilter calls in
// place) or softirq's entry: the rest. Else the xlb agent's process
// (user space and its system calls: the session sweeps, the health
// checks), by command: softirq work that interrupted the agent is the
// chain's, not the agent's. Anything else is the rest of the chain: TCP,
// the sockets, the routers' forwarding, the veths, wrk and nginx.
func profileClass(comm string, frames []string, agent string) string {
	if strings.HasPrefix(comm, "swapper") {
		return profIdle
	}
	for _, f := range frames {
		if f == "do_idle" || f == "cpuidle_enter" {
			return profIdle
		}
	}
	for _, f := range frames {
		switch {
		case strings.HasPrefix(f, "bpf_prog_") && strings.Contains(f, "natfloor"):
			return profFloor
		case strings.HasPrefix(f, "bpf_prog_") && strings.Contains(f, "reap"):
			// xlb_nat_reap: the agent's sweep, run from its system
			// call.
			return profAgent
		case strings.HasPrefix(f, "bpf_prog_") && (strings.Contains(f, "xlb_lb") || strings.Contains(f, "lbnat")):
			return profXLB
		case netfilterFunc(f):
			return profNetfilter
		case slices.Contains(packetGoesOn, f):
			return profRest
		}
	}
	if agent != "" && comm == agent {
		return profAgent
	}
	return profRest
}

// packetGoesOn are functions that carry a packet on after a hook or a
// program: a stack that reaches one of them from the leaf is about the
// packet's further way, whatever called it.
var packetGoesOn = []string{
	"ip_rcv_finish", "ip_forward_finish", "ip_output", "ip_finish_output", "ip_finish_output2",
	"ip_local_deliver_finish", "ip_local_out", "__ip_queue_xmit", "ip_sabotage_in",
	"br_nf_pre_routing_finish", "br_forward_finish", "br_pass_frame_up", "br_handle_frame_finish",
	"__netif_receive_skb_core", "__dev_queue_xmit", "ip6_rcv_finish", "ip6_output", "ip6_forward_finish",
	"net_rx_action", "handle_softirqs", "__do_softirq",
}

// netfilterFunc says whether kernel function f is netfilter's.
func netfilterFunc(f string) bool {
	for _, p := range []string{"nf_", "__nf_", "____nf_", "nft_", "__nft_", "ipt_", "ipv4_conntrack", "ipv6_conntrack", "ipv4_confirm", "hash_conntrack", "iptable_", "masquerade", "br_nf_"} {
		if strings.HasPrefix(f, p) {
			return true
		}
	}
	return false
}

// monotonic is CLOCK_MONOTONIC in seconds, perf's clock with `-k
// CLOCK_MONOTONIC`.
func monotonic() float64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return float64(ts.Sec) + float64(ts.Nsec)/1e9
}

// profileRun runs wrk on path p with a new connection per request while
// perf samples every CPU, and says where each request's CPU went. With
// keep set, the recording is left there as KEY.perf.data.
func (l *benchLab) profileRun(ctx context.Context, s wrkSettings, p Path, keep string) (Profile, Run, error) {
	prof := Profile{Path: p.Key, Mode: modeClose, Backends: l.n, Hz: profileHz}
	dir, err := os.MkdirTemp("", "httpbench-perf-")
	if err != nil {
		return prof, Run{}, err
	}
	defer os.RemoveAll(dir)
	data := filepath.Join(dir, "perf.data")
	if keep != "" {
		if err := os.MkdirAll(keep, 0o755); err != nil {
			return prof, Run{}, err
		}
		data = filepath.Join(keep, p.Key+".perf.data")
	}
	// perf stops at SIGINT, after wrk; the sleep bounds it if this
	// program dies first.
	args := []string{"record", "-e", "cpu-clock", "-a", "-g", "-F", strconv.Itoa(profileHz), "-k", "CLOCK_MONOTONIC", "-o", data, "--",
		"sleep", strconv.Itoa(int((profileRounds*s.Duration + s.Timeout + time.Minute).Seconds()))}
	prof.Command = "perf " + strings.Join(args[:len(args)-5], " ")
	rec := exec.Command("perf", args...)
	var recOut bytes.Buffer
	rec.Stdout, rec.Stderr = &recOut, &recOut
	if err := rec.Start(); err != nil {
		return prof, Run{}, fmt.Errorf("perf record: %w", err)
	}
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		_ = rec.Process.Signal(syscall.SIGINT)
		done := make(chan error, 1)
		go func() { done <- rec.Wait() }()
		select {
		case err := <-done:
			// perf ends its workload and then itself with the signal
			// it got, after writing what it recorded.
			if err != nil && !strings.Contains(recOut.String(), "Captured and wrote") {
				return fmt.Errorf("perf record: %w: %s", err, recOut.String())
			}
			return nil
		case <-time.After(30 * time.Second):
			_ = rec.Process.Kill()
			<-done
			return fmt.Errorf("perf record did not stop within 30 s of SIGINT: %s", recOut.String())
		}
	}
	defer stop()
	// perf takes a moment to open its buffers on every CPU; wrk's run
	// must fall inside what it records.
	select {
	case <-ctx.Done():
		return prof, Run{}, ctx.Err()
	case <-time.After(time.Second):
	}
	run, err := l.wrkRun(ctx, s, p, modeClose, profileRounds*s.Duration, profileRound)
	if err != nil {
		return prof, run, err
	}
	if err := stop(); err != nil {
		return prof, run, err
	}
	script := exec.CommandContext(ctx, "perf", "script", "-i", data, "-F", "comm,time,ip,sym")
	out, err := script.StdoutPipe()
	if err != nil {
		return prof, run, err
	}
	var stderr bytes.Buffer
	script.Stderr = &stderr
	if err := script.Start(); err != nil {
		return prof, run, fmt.Errorf("perf script: %w", err)
	}
	counts, perr := profileFrom(out, run.monoStart, run.monoEnd, agentComm(l.xlb))
	if err := script.Wait(); err != nil {
		return prof, run, fmt.Errorf("perf script: %w: %s", err, stderr.String())
	}
	if perr != nil {
		return prof, run, perr
	}
	prof.RPS, prof.Requests, prof.Seconds = run.RPS, run.Requests, round3(run.monoEnd-run.monoStart)
	if prof.Requests <= 0 {
		return prof, run, fmt.Errorf("%s: no requests in the profiled run", p.Name)
	}
	prof.Micros = map[string]float64{}
	for c, n := range counts {
		prof.Samples += n
		prof.Micros[c] = round3(float64(n) / profileHz / float64(prof.Requests) * 1e6)
	}
	// Every CPU sampled for the run's length gives profileHz samples a
	// second each; fewer than 0.8 of one CPU's means perf did not record
	// the run.
	if want := 0.8 * prof.Seconds * profileHz; float64(prof.Samples) < want {
		return prof, run, fmt.Errorf("%s: perf recorded %d samples during wrk's %.1f s, want at least %.0f a second: %s",
			p.Name, prof.Samples, prof.Seconds, 0.8*profileHz, recOut.String())
	}
	return prof, run, nil
}

// profileRound marks a profiled run (Run.Round): not one of the rounds.
const profileRound = -1

// agentComm is the command name the kernel gives the agent started from
// binary xlb (at most 15 bytes).
func agentComm(xlb string) string {
	c := filepath.Base(xlb)
	if len(c) > 15 {
		c = c[:15]
	}
	return c
}

// profileText is a profile's places on one line, for the progress.
func profileText(p Profile) string {
	var parts []string
	for _, c := range append(slices.Clone(profileColumns), profIdle) {
		parts = append(parts, fmt.Sprintf("%s %.1f", c, p.Micros[c]))
	}
	return strings.Join(parts, ", ")
}

// profile is the profile of path key, if any.
func (r *Report) profile(key string) *Profile {
	for i := range r.Profiles {
		if r.Profiles[i].Path == key {
			return &r.Profiles[i]
		}
	}
	return nil
}

// profileSection is the document's account of the profiled runs: the
// table, then what it says about the NAT target against nftables.
func (r *Report) profileSection() string {
	if len(r.Profiles) == 0 {
		return ""
	}
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p0 := r.Profiles[0]
	w("**Where a new connection's CPU went.** After the rounds, with %s, each path below ran wrk once more with a new connection per request, for %s (not one of the rounds above), while `%s` sampled both CPUs every %.1f ms: first the floor and nftables DNAT, then xlb dnat and xlb nat, after a pause of %s in which xlb's agent reaped the sessions of the rounds. It reaps a session `tcpClosing` (10 s) after its connection ended, so xlb's rows leave out the reaping of their own sessions: about 5 µs of the agent's CPU per connection (`BenchmarkNATSweepExpired`, [decision 0007](decisions/0007-nat-sessions.md#expiry-on-the-packet-path-the-sweep-off-it)). Each sample taken while wrk ran counts where its stack was, looked at from the leaf up until the packet's way goes on (a hook's continuation): an XDP program on the node (xlb's, with the kernel's map and FIB functions it calls; or the floor's), netfilter (hooks, conntrack, NAT, rules), the xlb agent's process (its session sweeps among others), idle, or the rest of the chain (TCP and the sockets of client and backends, the router's and the node's forwarding, the veths, wrk and nginx). CPU time per request, in µs:\n\n",
		backendsLabel(p0.Backends), time.Duration(p0.Seconds*float64(time.Second)).Round(time.Second), p0.Command, 1000.0/profileHz, profilePause)
	w("| path | req/s | samples |")
	for _, c := range profileColumns {
		w(" %s |", c)
	}
	w(" busy | idle |\n|---|---:|---:|")
	for range profileColumns {
		w("---:|")
	}
	w("---:|---:|\n")
	for _, key := range profileTable {
		p := r.profile(key)
		if p == nil {
			continue
		}
		w("| %s | %.0f | %d |", r.pathName(key), p.RPS, p.Samples)
		for _, c := range profileColumns {
			w(" %.1f |", p.Micros[c])
		}
		w(" %.1f | %.1f |\n", p.Busy(), p.Micros[profIdle])
	}
	w("\n")
	nat, floor, nft := r.profile(keyNAT), r.profile(keyFloor), r.profile(keyNft)
	if nat == nil || floor == nil || nft == nil {
		return b.String()
	}
	w("Over the floor's chain (%.1f µs busy per request), xlb nat's cost %+.1f µs: its XDP program %+.1f against the floor's, its agent %+.1f, the rest %+.1f. nftables DNAT's cost %+.1f: netfilter %+.1f, the rest %+.1f (the node's own stack, which XDP_TX skips). ",
		floor.Busy(), nat.Busy()-floor.Busy(), nat.Micros[profXLB]-floor.Micros[profFloor], nat.Micros[profAgent]-floor.Micros[profAgent], nat.Micros[profRest]-floor.Micros[profRest],
		nft.Busy()-floor.Busy(), nft.Micros[profNetfilter]-floor.Micros[profNetfilter], nft.Micros[profRest]-floor.Micros[profRest])
	target := 0.0
	for _, t := range natTargets {
		if t.Ref == keyNft {
			target = t.Min[modeClose]
		}
	}
	want := target * nft.RPS
	// At the floor's share of idle time, a path's rate goes inversely
	// with its busy time per request.
	limit := floor.Busy() * floor.RPS / want
	w("In these runs %.1fx nftables DNAT's rate is %.0f requests/s, and the floor, which keeps no state at all, reached %.0f (%.2fx nftables DNAT). At the floor's share of idle time a path's rate goes inversely with its busy time per request, so %.0f requests/s allow %.1f µs busy per request: %.1f above the floor's. xlb nat's was %.1f above it (its XDP program %.1f, its agent %.1f, besides the reaping of its sessions later), and it reached %.0f (%.2fx nftables DNAT).",
		target, want, floor.RPS, floor.RPS/nft.RPS, want, limit, limit-floor.Busy(), nat.Busy()-floor.Busy(), nat.Micros[profXLB], nat.Micros[profAgent], nat.RPS, nat.RPS/nft.RPS)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, p := range r.Profiles {
		c := (p.Busy() + p.Micros[profIdle]) * p.RPS / 1e6 / float64(max(r.Machine.CPUs, 1))
		lo, hi = min(lo, c), max(hi, c)
	}
	w(" The samples of a run add up to %.0f-%.0f%% of the CPUs' time while it ran: perf missed some time, idle or not, so the busy figures are lower bounds and the idle column compares runs with each other only.\n\n", 100*lo, 100*hi)
	return b.String()
}
