package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// userHZ is the unit of /proc's CPU times: USER_HZ, 100 on every Linux
// architecture Go runs on.
const userHZ = 100

// cpuTimes is the machine's CPU time by kind, summed over all CPUs, in
// ticks: the "cpu" line of /proc/stat.
type cpuTimes struct {
	user, nice, system, idle, iowait, irq, softirq, steal uint64
}

func (c cpuTimes) total() uint64 {
	return c.user + c.nice + c.system + c.idle + c.iowait + c.irq + c.softirq + c.steal
}

// parseProcStat reads the "cpu" line of /proc/stat.
func parseProcStat(text string) (cpuTimes, error) {
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) < 9 || f[0] != "cpu" {
			continue
		}
		var v [8]uint64
		for i := range v {
			n, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				return cpuTimes{}, fmt.Errorf("/proc/stat: cpu field %d: %w", i+1, err)
			}
			v[i] = n
		}
		return cpuTimes{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]}, nil
	}
	return cpuTimes{}, fmt.Errorf("/proc/stat has no cpu line")
}

func readCPUTimes() (cpuTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	return parseProcStat(string(b))
}

// procTimes is a process's user and system CPU time in ticks.
type procTimes struct{ user, system uint64 }

// parsePIDStat reads utime and stime (fields 14 and 15) of a
// /proc/PID/stat line. The command name in parentheses may hold spaces
// and parentheses, so the fields are counted from the last ')'.
func parsePIDStat(text string) (procTimes, error) {
	i := strings.LastIndexByte(text, ')')
	if i < 0 {
		return procTimes{}, fmt.Errorf("malformed stat line")
	}
	f := strings.Fields(text[i+1:])
	// f[0] is field 3 (state): utime is field 14, stime 15.
	if len(f) < 13 {
		return procTimes{}, fmt.Errorf("stat line has %d fields after the name", len(f))
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return procTimes{}, fmt.Errorf("stat line: utime %q, stime %q", f[11], f[12])
	}
	return procTimes{u, s}, nil
}

// readProcTimes reads the CPU times of pid; a process that is gone reads
// as zero, so that a sum over a role does not fail.
func readProcTimes(pid int) procTimes {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procTimes{}
	}
	t, _ := parsePIDStat(string(b))
	return t
}

// ksoftirqds returns the PIDs of the kernel's ksoftirqd threads: the
// softirq work the kernel defers out of the context that raised it.
func ksoftirqds() []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/comm")
		if err == nil && strings.HasPrefix(string(b), "ksoftirqd/") {
			out = append(out, pid)
		}
	}
	return out
}

// rusageTimes converts a finished process's resource usage to ticks.
func rusageTimes(ru *syscall.Rusage) procTimes {
	tick := int64(time.Second / userHZ)
	return procTimes{uint64(ru.Utime.Nano() / tick), uint64(ru.Stime.Nano() / tick)}
}

// kernelConfig returns the value of option (CONFIG_...) in the running
// kernel's /proc/config.gz: "y", "m", "n" for "is not set", or "" if
// unknown.
func kernelConfig(option string) string {
	b, err := os.ReadFile("/proc/config.gz")
	if err != nil {
		return ""
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return ""
	}
	text, err := io.ReadAll(io.LimitReader(zr, 8<<20))
	if err != nil {
		return ""
	}
	return configValue(string(text), option)
}

// configValue finds option in the text of a kernel .config.
func configValue(text, option string) string {
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, option+"="); ok {
			return v
		}
		if line == "# "+option+" is not set" {
			return "n"
		}
	}
	return ""
}

// allProcTimes reads the CPU times of every process on the machine.
func allProcTimes() map[int]procTimes {
	entries, _ := os.ReadDir("/proc")
	out := make(map[int]procTimes, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		if t, err := parsePIDStat(string(b)); err == nil {
			out[pid] = t
		}
	}
	return out
}

// grown sums what the processes in b used since a: a process that is new
// in b counts whole, one that is gone counts nothing, one whose times
// went down (its PID was reused) counts whole.
func grown(a, b map[int]procTimes) procTimes {
	var sum procTimes
	for pid, y := range b {
		x := a[pid]
		if y.user < x.user || y.system < x.system {
			x = procTimes{}
		}
		sum.user += y.user - x.user
		sum.system += y.system - x.system
	}
	return sum
}
