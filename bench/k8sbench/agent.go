package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/testbed/netns"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// stalePrefix starts the names of the namespace and the pin path of a
// run, followed by the run's PID.
const stalePrefix = "xlbk8s"

// The agent's namespace: one veth pair, XDP on one end.
const (
	agentIface = "v0"
	agentAddr  = "10.0.0.10"
)

// removeStale removes what earlier runs left when they were killed
// before they could clean up: namespaces, pins and temporary directories
// of runs whose process is gone. (Their control planes and agents died
// with them: k8stest's processes have a parent-death signal, and so has
// the agent.)
func removeStale(progress func(string)) {
	tmp := os.TempDir()
	for _, pid := range benchutil.StaleRuns(stalePrefix, netns.Dir, bpfobj.BPFFSRoot, tmp) {
		name := stalePrefix + strconv.Itoa(pid)
		progress("removing what run " + strconv.Itoa(pid) + " left behind (" + name + ")")
		if err := removeNamespace(name); err != nil {
			progress("  " + err.Error())
		}
		if err := removePins(filepath.Join(bpfobj.BPFFSRoot, name)); err != nil {
			progress("  " + err.Error())
		}
		dirs, _ := filepath.Glob(filepath.Join(tmp, name+"-*"))
		for _, d := range dirs {
			if err := os.RemoveAll(d); err != nil {
				progress("  " + err.Error())
			}
		}
	}
}

// makeNamespace creates namespace ns with a veth pair, agentAddr on the
// agent's end.
func makeNamespace(ns string) error {
	for _, argv := range [][]string{
		{"ip", "netns", "add", ns},
		{"ip", "-n", ns, "link", "add", agentIface, "type", "veth", "peer", "name", "v1"},
		{"ip", "-n", ns, "addr", "add", agentAddr + "/24", "dev", agentIface},
		{"ip", "-n", ns, "link", "set", "lo", "up"},
		{"ip", "-n", ns, "link", "set", agentIface, "up"},
		{"ip", "-n", ns, "link", "set", "v1", "up"},
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

func removeNamespace(ns string) error {
	if !netns.Exists(ns) {
		return nil
	}
	if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns del %s: %v: %s", ns, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// removePins removes a pinned data plane, if there is one.
func removePins(pin string) error {
	if _, err := os.Stat(pin); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return bpfobj.Cleanup(pin)
}

// agentConfig is the agent's file: the node, its API socket, a data
// plane of its own and the cluster through the relay.
func agentConfig(socket, pin, kubeconfig string, tableSize uint, maxBackends int) string {
	var b strings.Builder
	b.WriteString("# Written by bench/k8sbench.\n")
	fmt.Fprintf(&b, "node: {interface: %s, address: %s}\n", agentIface, agentAddr)
	fmt.Fprintf(&b, "api: {socket: %s}\n", socket)
	fmt.Fprintf(&b, "dataplane: {pinPath: %s, attachMode: generic", pin)
	if tableSize > 0 {
		fmt.Fprintf(&b, ", tableSize: %d", tableSize)
	}
	if maxBackends > 0 {
		fmt.Fprintf(&b, ", maxBackends: %d", maxBackends)
	}
	b.WriteString("}\n")
	fmt.Fprintf(&b, "kubernetes: {kubeconfig: %s, nodeName: %s}\n", kubeconfig, nodeName)
	return b.String()
}

// agentProc is the running `xlb agent`.
type agentProc struct {
	pid     int
	started time.Time // just before the exec
	done    chan struct{}
	err     error // the exit, set before done closes
}

// startAgent runs `xlb agent --config cfg` in namespace ns through xlb's
// netns-exec, which keeps the host's bpffs and execs the agent in place:
// the PID is the agent's. Its output goes to logPath.
func startAgent(bin, ns, cfg, logPath string) (*agentProc, error) {
	out, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, netns.ExecCommand, ns, "--", bin, "agent", "--config", cfg, "--log-format", "json")
	cmd.Stdout, cmd.Stderr = out, out
	a := &agentProc{done: make(chan struct{}), started: time.Now()}
	// If this program dies, the agent dies with it.
	waited, err := testenv.StartTied(cmd)
	if err != nil {
		out.Close()
		return nil, fmt.Errorf("start the agent: %w", err)
	}
	go func() {
		a.err = <-waited
		out.Close()
		close(a.done)
	}()
	a.pid = cmd.Process.Pid
	return a, nil
}

// exited reports whether the agent has exited.
func (a *agentProc) exited() bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, and SIGKILL if the agent has not exited after
// grace; it returns once the agent is gone (at most grace + 5 s).
func (a *agentProc) stop(grace time.Duration) error {
	if a.exited() {
		return nil
	}
	_ = syscall.Kill(a.pid, syscall.SIGTERM)
	select {
	case <-a.done:
		return nil
	case <-time.After(grace):
	}
	_ = syscall.Kill(a.pid, syscall.SIGKILL)
	select {
	case <-a.done:
		return fmt.Errorf("the agent (PID %d) did not exit within %s of SIGTERM: killed", a.pid, grace)
	case <-time.After(5 * time.Second):
		return fmt.Errorf("the agent (PID %d) did not exit, even after SIGKILL", a.pid)
	}
}

// serviceIDs reads the pinned service index under pin: the data-plane ID
// of every service by VIP, for TCP port port.
func serviceIDs(pin string, port uint16) (map[netip.Addr]uint32, error) {
	path := filepath.Join(pin, "svc_index")
	m, err := ebpf.LoadPinnedMap(path, &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer m.Close()
	if m.KeySize() != 4 || m.ValueSize() != uint32(binary.Size(wire.SvcSlot{})) {
		return nil, fmt.Errorf("%s: key %d and value %d bytes, want 4 and %d: the agent runs another xlb version than this benchmark; build both from one tree",
			path, m.KeySize(), m.ValueSize(), binary.Size(wire.SvcSlot{}))
	}
	out := map[netip.Addr]uint32{}
	var k uint32
	var v wire.SvcSlot
	it := m.Iterate()
	for it.Next(&k, &v) {
		vip, p, proto := v.Service()
		if v.Vip == 0 || proto != syscall.IPPROTO_TCP || p != port {
			continue
		}
		out[vip] = v.Id
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return out, nil
}

// procUsage is a process's memory and CPU time at one moment.
type procUsage struct {
	at       time.Time
	rss, hwm uint64        // bytes: VmRSS, VmHWM
	cpu      time.Duration // utime + stime
}

// userHZ is the unit of /proc's CPU times: USER_HZ, 100 on every Linux
// architecture Go runs on.
const userHZ = 100

// readUsage reads pid's /proc/PID/status and /proc/PID/stat.
func readUsage(pid int) (procUsage, error) {
	u := procUsage{at: time.Now()}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	if u.rss, u.hwm, err = parseStatus(string(status)); err != nil {
		return u, err
	}
	user, sys, err := parseStat(string(stat))
	if err != nil {
		return u, err
	}
	u.cpu = time.Duration(user+sys) * time.Second / userHZ
	return u, nil
}

// parseStatus reads VmRSS and VmHWM (in bytes) of a /proc/PID/status.
func parseStatus(text string) (rss, hwm uint64, err error) {
	var seen int
	for line := range strings.Lines(text) {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		kb, perr := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if perr != nil {
			return 0, 0, fmt.Errorf("/proc status %s: %q", k, strings.TrimSpace(v))
		}
		if k == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
		seen++
	}
	if seen != 2 {
		return 0, 0, errors.New("/proc status: no VmRSS and VmHWM (a kernel thread, or a zombie)")
	}
	return rss, hwm, nil
}

// parseStat reads utime and stime (fields 14 and 15, in ticks) of a
// /proc/PID/stat line. The command name in parentheses may hold spaces
// and parentheses, so the fields are counted from the last ')'.
func parseStat(text string) (user, sys uint64, err error) {
	i := strings.LastIndexByte(text, ')')
	if i < 0 {
		return 0, 0, errors.New("/proc stat: malformed line")
	}
	f := strings.Fields(text[i+1:])
	// f[0] is field 3 (state): utime is field 14, stime 15.
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("/proc stat: %d fields after the name", len(f))
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("/proc stat: utime %q, stime %q", f[11], f[12])
	}
	return u, s, nil
}

// logLine is one line of the agent's JSON log, the fields k8sbench reads.
type logLine struct {
	Time       time.Time `json:"time"`
	Level      string    `json:"level"`
	Msg        string    `json:"msg"`
	Trigger    string    `json:"trigger"`
	Services   int       `json:"services"`
	Events     int       `json:"events"`
	Generation int       `json:"generation"`
	// Durations, as slog's JSON handler writes them: nanoseconds.
	Latency int64  `json:"latency"`
	Build   int64  `json:"build"`
	Error   string `json:"error"`
}

// The agent's log messages that k8sbench reads.
const (
	msgFirst    = "first configuration from the cluster" // the source's caches synced; build of the first configuration
	msgApplied  = "configuration applied"                // the first configuration in the data plane
	msgCluster  = "configuration from the cluster"       // the agent took a new one; latency from the first change seen
	msgReloaded = "configuration reloaded"               // … and applied it
)

// logTail reads the lines an agent's log gained since the last read.
type logTail struct {
	path string
	off  int64
}

// next returns the complete lines written since the last call; lines
// that are not JSON (a panic, netns-exec's own errors) come as a line
// with only Msg set to their text.
func (t *logTail) next() ([]logLine, error) {
	f, err := os.Open(t.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(t.off, io.SeekStart); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	end := bytes.LastIndexByte(b, '\n')
	if end < 0 {
		return nil, nil
	}
	t.off += int64(end + 1)
	return parseLog(b[:end+1]), nil
}

// parseLog parses the agent's JSON log lines.
func parseLog(b []byte) []logLine {
	var out []logLine
	for line := range bytes.Lines(b) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var l logLine
		if err := json.Unmarshal(line, &l); err != nil {
			out = append(out, logLine{Msg: string(line)})
			continue
		}
		out = append(out, l)
	}
	return out
}

// find returns the first line with message msg, and whether there is one.
func find(lines []logLine, msg string) (logLine, bool) {
	for _, l := range lines {
		if l.Msg == msg {
			return l, true
		}
	}
	return logLine{}, false
}

// problems returns the warnings and errors among lines, for the progress
// output: a benchmark whose agent complains measures something else.
func problems(lines []logLine) []string {
	var out []string
	for _, l := range lines {
		if l.Level == "WARN" || l.Level == "ERROR" || (l.Level == "" && l.Msg != "") {
			s := l.Msg
			if l.Error != "" {
				s += ": " + l.Error
			}
			out = append(out, s)
		}
	}
	return out
}
