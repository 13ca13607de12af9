package benchutil

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Machine is where a run happened.
type Machine struct {
	CPU    string  `json:"cpu"`
	CPUs   int     `json:"cpus"`
	MemMiB float64 `json:"mem_total_mib"`
	Kernel string  `json:"kernel"`
	Go     string  `json:"go"`
	// Load is /proc/loadavg's 1, 5 and 15 minute averages at the start
	// and at the end: the machine is shared, and other work skews the
	// latencies.
	LoadStart string `json:"loadavg_start"`
	LoadEnd   string `json:"loadavg_end,omitempty"`
}

// ThisMachine describes the machine now (LoadEnd is left to the caller).
func ThisMachine() Machine {
	m := Machine{CPU: cpuModel(), CPUs: runtime.NumCPU(), Kernel: kernel(), Go: runtime.Version(), LoadStart: LoadAvg()}
	if total, err := MemInfo("MemTotal"); err == nil {
		m.MemMiB = MiB(total)
	}
	return m
}

// LoadAvg returns the three load averages of /proc/loadavg.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func kernel() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// MemInfo reads a field of /proc/meminfo (MemTotal, MemAvailable, …), in
// bytes.
func MemInfo(field string) (uint64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(line, ":")
		if !ok || k != field {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/meminfo %s: %w", field, err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("/proc/meminfo has no %s", field)
}

// MiB converts bytes to mebibytes, rounded to three decimals.
func MiB(b uint64) float64 { return Round3(float64(b) / (1 << 20)) }
