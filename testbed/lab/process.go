package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xlbproject/xlb/testbed/netns"
)

// Grace periods of stopping: SIGTERM first, SIGKILL after termGrace.
const (
	termGrace = 5 * time.Second
	killGrace = 2 * time.Second
)

// procRecord is what StartProcess remembers about a process, in
// <statedir>/<name>.json next to the plain <name>.pid.
type procRecord struct {
	Name      string   `json:"name"`
	Namespace string   `json:"namespace"`
	PID       int      `json:"pid"`
	Start     uint64   `json:"start"`   // start time in /proc/PID/stat: tells a reused PID apart
	Wrapper   []string `json:"wrapper"` // the netns-exec command line before it execs Argv
	Argv      []string `json:"argv"`
}

var procNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

func pidFile(prefix, name string) string { return filepath.Join(StateDir(prefix), name+".pid") }

// PID returns the PID of process name of lab prefix, as StartProcess
// recorded it. The netns-exec wrapper execs the command, so it is the
// command's own PID.
func PID(prefix, name string) (int, error) {
	rec, err := readRecord(prefix, name)
	if err != nil {
		return 0, fmt.Errorf("process %q of lab %q: %w", name, prefix, err)
	}
	return rec.PID, nil
}
func recordFile(prefix, name string) string { return filepath.Join(StateDir(prefix), name+".json") }

// LogFile is where a process started by StartProcess writes its standard
// output and error.
func LogFile(prefix, name string) string { return filepath.Join(StateDir(prefix), name+".log") }

// StartProcess starts argv in the background inside namespace ns of lab
// prefix and returns its PID. The process runs in its own session (a
// terminal's Ctrl-C does not reach it) and outlives the caller; standard
// output and error go to LogFile(prefix, name), the PID to
// <statedir>/<name>.pid. It enters the namespace through the lab binary's
// netns-exec, which keeps the mount namespace, so the process sees and
// can pin to the host's bpffs. Down stops it; so does StopProcess.
func StartProcess(prefix, ns, name string, argv ...string) (pid int, err error) {
	p, err := Load(prefix)
	if err != nil {
		return 0, err
	}
	if !procNameRE.MatchString(name) || name == "lab" {
		return 0, fmt.Errorf("process name %q: want letters, digits, '_', '.', '-' (and not \"lab\")", name)
	}
	if len(argv) == 0 {
		return 0, fmt.Errorf("process %q: empty command", name)
	}
	if !slices.Contains(p.Namespaces(), ns) || !netns.Exists(ns) {
		return 0, fmt.Errorf("process %q: %q is not a namespace of lab %q (see `xlb lab status --prefix %s`)", name, ns, prefix, prefix)
	}
	if rec, err := readRecord(prefix, name); err == nil && alive(rec.PID, rec.Start) {
		return 0, fmt.Errorf("process %q already runs as PID %d (stop it first)", name, rec.PID)
	}

	logf, err := os.OpenFile(LogFile(prefix, name), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return 0, fmt.Errorf("process %q: %w", name, err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "--- %s: in %s: %s\n", time.Now().Format(time.RFC3339), ns, strings.Join(argv, " "))

	wrapper := []string{p.Spec.Binary, netns.ExecCommand, ns, "--"}
	cmd := exec.Command(wrapper[0], append(wrapper[1:], argv...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("process %q: start %s: %w", name, argv[0], err)
	}
	pid = cmd.Process.Pid
	// Read the start time before anything can reap the child: a zombie
	// still has its /proc entry.
	start, _, statErr := procStat(pid)
	// Reap the child when it ends, or it stays a zombie for as long as
	// this process lives and looks alive to everyone.
	go func() { _ = cmd.Wait() }()
	if statErr != nil {
		return pid, fmt.Errorf("process %q (PID %d): %w", name, pid, statErr)
	}

	rec := procRecord{Name: name, Namespace: ns, PID: pid, Start: start, Wrapper: wrapper, Argv: argv}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return pid, err
	}
	if err := os.WriteFile(recordFile(prefix, name), b, 0o644); err != nil {
		return pid, fmt.Errorf("process %q: %w", name, err)
	}
	if err := os.WriteFile(pidFile(prefix, name), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		return pid, fmt.Errorf("process %q: %w", name, err)
	}
	return pid, nil
}

// StopProcess stops a process that StartProcess started: SIGTERM, then
// SIGKILL if it has not exited within a few seconds. It signals the PID
// only while that PID still is the process it started (same start time,
// same command line), never a stranger that reused the number. A process
// that has already exited is not an error. Its pid file is removed, so the
// name can be started again.
func StopProcess(prefix, name string) error {
	if err := checkPrefix(prefix); err != nil {
		return err
	}
	rec, err := readRecord(prefix, name)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("lab %q has no process %q", prefix, name)
	}
	if err != nil {
		return err
	}
	if ours(rec) {
		if err := terminate([]procRef{{rec.PID, rec.Start}}); err != nil {
			return fmt.Errorf("process %q: %w", name, err)
		}
	}
	return errors.Join(removeIfExists(recordFile(prefix, name)), removeIfExists(pidFile(prefix, name)))
}

func readRecord(prefix, name string) (procRecord, error) {
	var rec procRecord
	b, err := os.ReadFile(recordFile(prefix, name))
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("%s: %w", recordFile(prefix, name), err)
	}
	return rec, nil
}

// records returns every process record of a lab, by name.
func records(prefix string) ([]procRecord, error) {
	paths, err := filepath.Glob(filepath.Join(StateDir(prefix), "*.json"))
	if err != nil {
		return nil, err
	}
	var recs []procRecord
	for _, path := range paths {
		name := strings.TrimSuffix(filepath.Base(path), ".json")
		if !procNameRE.MatchString(name) || path == specFile(prefix) {
			continue
		}
		rec, err := readRecord(prefix, name)
		if err != nil {
			return nil, err
		}
		recs = append(recs, rec)
	}
	return recs, nil
}

// ours reports whether rec's PID is still the process StartProcess
// started: alive, same start time, and running either the netns-exec
// wrapper or, after its exec, the requested command line.
func ours(rec procRecord) bool {
	if !alive(rec.PID, rec.Start) {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", rec.PID))
	if err != nil {
		return false
	}
	if len(b) == 0 {
		// Mid-execve (the wrapper exec'ing the command) the new
		// image's arguments are not yet set and cmdline reads empty;
		// the start time already matched, so it is still ours.
		return true
	}
	cmdline := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
	return slices.Equal(cmdline, rec.Argv) || slices.Equal(cmdline, append(slices.Clone(rec.Wrapper), rec.Argv...))
}

// procStat returns the start time and state letter of a process from
// /proc/PID/stat.
func procStat(pid int) (start uint64, state byte, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The command name in parentheses may hold spaces and parentheses:
	// the fields that follow start after the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	fields := strings.Fields(string(b[i+1:]))
	// fields[0] is field 3 (state); field 22 is starttime.
	if len(fields) < 20 || len(fields[0]) != 1 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	start, err = strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat: start time: %w", pid, err)
	}
	return start, fields[0][0], nil
}

// alive reports whether PID runs and has the given start time. A zombie
// has exited: it only waits for its parent to reap it.
func alive(pid int, start uint64) bool {
	s, state, err := procStat(pid)
	return err == nil && s == start && state != 'Z' && state != 'X'
}

// procRef names one process instance: a PID and its start time.
type procRef struct {
	pid   int
	start uint64
}

// terminate sends SIGTERM to every process, waits up to termGrace for
// them to exit, then SIGKILLs the rest. It fails if any survives SIGKILL.
func terminate(procs []procRef) error {
	signal := func(sig syscall.Signal) []procRef {
		var left []procRef
		for _, p := range procs {
			if alive(p.pid, p.start) {
				_ = syscall.Kill(p.pid, sig)
				left = append(left, p)
			}
		}
		return left
	}
	wait := func(d time.Duration) {
		for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if !slices.ContainsFunc(procs, func(p procRef) bool { return alive(p.pid, p.start) }) {
				return
			}
		}
	}
	procs = signal(syscall.SIGTERM)
	wait(termGrace)
	procs = signal(syscall.SIGKILL)
	wait(killGrace)
	var pids []string
	for _, p := range procs {
		if alive(p.pid, p.start) {
			pids = append(pids, strconv.Itoa(p.pid))
		}
	}
	if len(pids) > 0 {
		return fmt.Errorf("PIDs %s survive SIGKILL", strings.Join(pids, ", "))
	}
	return nil
}

// processesIn lists the processes whose network namespace is the named
// one, compared by device and inode as `ip netns pids` does. It finds
// what a crashed lab left running even when no pid file survived.
func processesIn(ns string) ([]procRef, error) {
	var want syscall.Stat_t
	if err := syscall.Stat(netns.Path(ns), &want); err != nil {
		return nil, fmt.Errorf("namespace %s: %w", ns, err)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var procs []procRef
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st) != nil || st.Dev != want.Dev || st.Ino != want.Ino {
			continue
		}
		if start, _, err := procStat(pid); err == nil {
			procs = append(procs, procRef{pid, start})
		}
	}
	return procs, nil
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
