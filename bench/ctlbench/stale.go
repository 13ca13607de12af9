package main

import (
	"os"
	"path/filepath"
	"strconv"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/netns"
)

// stalePrefix starts the name of everything a run creates, followed by
// the run's PID: the lab prefix, and <prefix>-rec for the namespace and
// pin path of the reconcile measurement.
const stalePrefix = "xlbctl"

// removeStale removes what earlier runs left when they were killed
// before they could clean up: labs, namespaces and pins of runs whose
// process is gone.
func removeStale(progress func(string)) {
	dirs := []string{netns.Dir, bpfobj.BPFFSRoot, lab.StateDir(""), lab.PinDir("")}
	for _, pid := range benchutil.StaleRuns(stalePrefix, dirs...) {
		prefix := stalePrefix + strconv.Itoa(pid)
		progress("removing what run " + strconv.Itoa(pid) + " left behind (" + prefix + ")")
		if err := lab.Down(prefix); err != nil {
			progress("  " + err.Error())
		}
		if err := removeNamespace(prefix + "-rec"); err != nil {
			progress("  " + err.Error())
		}
		pin := filepath.Join(bpfobj.BPFFSRoot, prefix+"-rec")
		if _, err := os.Stat(pin); err == nil {
			if err := bpfobj.Cleanup(pin); err != nil {
				progress("  " + err.Error())
			}
		}
	}
}
