package main

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Where the CPU time of a run went: machine-wide shares from /proc/stat,
// and per role the user + system time of the processes in the role's
// namespaces (from /proc/PID/stat), in cores (CPU seconds per second).
// The client's own time is its rusage: it has exited when the run ends.

// userHZ is the unit of /proc/PID/stat's times (USER_HZ, 100 on Linux).
const userHZ = 100

// Roles of the processes, by the namespace they run in.
const (
	roleBackends  = "backends"
	roleNode      = "node"
	roleKsoftirqd = "ksoftirqd"
	roleOther     = "other"
)

// CPUUse is where the CPU went during a run.
type CPUUse struct {
	// Shares of all CPUs' time in percent: user (with nice), system,
	// softirq, idle (with iowait), and steal (time the hypervisor gave
	// the VM's CPUs to someone else).
	UserPct    float64 `json:"user_pct"`
	SystemPct  float64 `json:"system_pct"`
	SoftirqPct float64 `json:"softirq_pct"`
	IdlePct    float64 `json:"idle_pct"`
	StealPct   float64 `json:"steal_pct"`
	// Cores used by the client (wrk or the open-loop client), the
	// backends' nginx, the processes on the LB nodes (agent, proxies),
	// and every other process of the machine (this program, and other
	// work on a shared machine).
	Client   float64 `json:"client_cores"`
	Backends float64 `json:"backends_cores"`
	Node     float64 `json:"node_cores"`
	Other    float64 `json:"other_cores"`
	// Ksoftirqd is the kernel's softirq threads, outside Other: they
	// run softirq work that did not fit where it was raised, the lab's
	// packets among it.
	Ksoftirqd float64 `json:"ksoftirqd_cores"`
	// OtherTop are the busiest commands among the other processes.
	OtherTop []CommandCPU `json:"other_top,omitempty"`
}

// CommandCPU is the CPU use of the processes with one command name.
type CommandCPU struct {
	Command string  `json:"command"`
	Cores   float64 `json:"cores"`
}

// cpuSample is the machine's counters at one moment.
type cpuSample struct {
	at    time.Time
	stat  []uint64          // /proc/stat "cpu" line: user nice system idle iowait irq softirq steal ...
	procs map[int]procTimes // every process
}

type procTimes struct {
	ticks uint64 // utime + stime
	netns uint64 // inode of its network namespace
	comm  string // command name
}

// takeSample reads /proc/stat and every process's times.
func takeSample() (cpuSample, error) {
	s := cpuSample{at: time.Now(), procs: map[int]procTimes{}}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return s, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	for _, v := range f[1:] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return s, fmt.Errorf("/proc/stat: %w", err)
		}
		s.stat = append(s.stat, n)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return s, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if t, ok := readProcTimes(pid); ok {
			s.procs[pid] = t
		}
	}
	return s, nil
}

// readProcTimes reads a process's CPU time and network namespace; false
// if it is gone.
func readProcTimes(pid int) (procTimes, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procTimes{}, false
	}
	// Fields after the command name, which is in parentheses: state is
	// field 3, utime 14, stime 15.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procTimes{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return procTimes{}, false
	}
	u, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	var t procTimes
	t.ticks = u + st
	if j := strings.IndexByte(s, '('); j >= 0 && j < i {
		t.comm = s[j+1 : i]
	}
	var fi syscall.Stat_t
	if syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &fi) == nil {
		t.netns = fi.Ino
	}
	return t, true
}

// nsInode returns the inode of a named network namespace (0 if it has
// none), which is what /proc/PID/ns/net of its processes points to.
func nsInode(dir, name string) uint64 {
	var fi syscall.Stat_t
	if syscall.Stat(filepath.Join(dir, name), &fi) != nil {
		return 0
	}
	return fi.Ino
}

// cpuUse computes where the CPU went between samples a and b; roles
// maps namespace inodes to roles (other processes are roleOther, minus
// client, whose time is given), client is the client's CPU time.
func cpuUse(a, b cpuSample, roles map[uint64]string, client time.Duration) CPUUse {
	var u CPUUse
	if len(a.stat) < 8 || len(b.stat) < 8 {
		return u
	}
	d := func(i int) float64 { return float64(b.stat[i] - a.stat[i]) }
	var total float64
	for i := range min(len(a.stat), len(b.stat), 8) {
		total += d(i)
	}
	if total > 0 {
		pct := func(v float64) float64 { return round3(100 * v / total) }
		u.UserPct, u.SystemPct, u.SoftirqPct, u.IdlePct, u.StealPct = pct(d(0)+d(1)), pct(d(2)), pct(d(6)), pct(d(3)+d(4)), pct(d(7))
	}
	wall := b.at.Sub(a.at).Seconds()
	if wall <= 0 {
		return u
	}
	sums, others := map[string]uint64{}, map[string]uint64{}
	for pid, t := range b.procs {
		before := a.procs[pid] // zero: started during the run
		if before.ticks > t.ticks || (before.comm != "" && before.comm != t.comm && before.ticks > 0) {
			continue // another process with a reused PID
		}
		role, ok := roles[t.netns]
		switch {
		case ok:
		case strings.HasPrefix(t.comm, "ksoftirqd/"):
			role = roleKsoftirqd
		default:
			role = roleOther
			others[t.comm] += t.ticks - before.ticks
		}
		sums[role] += t.ticks - before.ticks
	}
	cores := func(ticks uint64) float64 { return round3(float64(ticks) / userHZ / wall) }
	u.Backends, u.Node, u.Other, u.Ksoftirqd = cores(sums[roleBackends]), cores(sums[roleNode]), cores(sums[roleOther]), cores(sums[roleKsoftirqd])
	for c, ticks := range others {
		if v := cores(ticks); v >= 0.02 {
			u.OtherTop = append(u.OtherTop, CommandCPU{c, v})
		}
	}
	slices.SortFunc(u.OtherTop, func(x, y CommandCPU) int { return cmp.Compare(y.Cores, x.Cores) })
	if len(u.OtherTop) > 3 {
		u.OtherTop = u.OtherTop[:3]
	}
	u.Client = round3(client.Seconds() / wall)
	return u
}

// rusageTime is the user + system time of an exited child.
func rusageTime(ps *os.ProcessState) time.Duration {
	if ps == nil {
		return 0
	}
	return ps.UserTime() + ps.SystemTime()
}
