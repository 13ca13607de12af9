package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"github.com/xlbproject/xlb/internal/dataplane"
	"github.com/xlbproject/xlb/internal/lab"
	"github.com/xlbproject/xlb/internal/netns"
)

// stalePrefix starts the name of everything a run creates, followed by
// the run's PID: the lab prefix, and <prefix>-rec for the namespace and
// pin path of the reconcile measurement.
const stalePrefix = "xlbctl"

var staleRE = regexp.MustCompile(`^` + stalePrefix + `([0-9]+)(?:-.*)?$`)

// running reports whether process pid exists and has not exited: a
// killed run stays a zombie until its parent reaps it.
func running(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}

// removeStale removes what earlier runs left when they were killed
// before they could clean up: labs, namespaces and pins of runs whose
// process is gone.
func removeStale(progress func(string)) {
	gone := map[int]bool{}
	for _, dir := range []string{netns.Dir, dataplane.BPFFSRoot, lab.StateDir(""), lab.PinDir("")} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			m := staleRE.FindStringSubmatch(e.Name())
			if m == nil {
				continue
			}
			pid, err := strconv.Atoi(m[1])
			if err != nil || pid == os.Getpid() || running(pid) {
				continue
			}
			gone[pid] = true
		}
	}
	for pid := range gone {
		prefix := stalePrefix + strconv.Itoa(pid)
		progress("removing what run " + strconv.Itoa(pid) + " left behind (" + prefix + ")")
		if err := lab.Down(prefix); err != nil {
			progress("  " + err.Error())
		}
		if err := removeNamespace(prefix + "-rec"); err != nil {
			progress("  " + err.Error())
		}
		pin := filepath.Join(dataplane.BPFFSRoot, prefix+"-rec")
		if _, err := os.Stat(pin); err == nil {
			if err := dataplane.Cleanup(pin); err != nil {
				progress("  " + err.Error())
			}
		}
	}
}
