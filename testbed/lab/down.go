package lab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/testbed/netns"
)

// Down removes every trace of lab prefix: the processes it started (by
// their pid files) and any other process inside its namespaces, the
// namespaces, the pinned BPF objects and the state directory. It needs no
// state: after a crash it finds the namespaces by name. Running it on a
// lab that does not exist does nothing and is not an error.
func Down(prefix string) error {
	if err := checkPrefix(prefix); err != nil {
		return err
	}
	var errs []error

	recs, err := records(prefix)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	var procs []procRef
	for _, rec := range recs {
		if ours(rec) {
			procs = append(procs, procRef{rec.PID, rec.Start})
		}
	}
	namespaces, err := labNamespaces(prefix)
	if err != nil {
		errs = append(errs, err)
	}
	for _, ns := range namespaces {
		in, err := processesIn(ns)
		if err != nil {
			errs = append(errs, err)
		}
		for _, p := range in {
			if !slices.Contains(procs, p) {
				procs = append(procs, p)
			}
		}
	}
	if len(procs) > 0 || len(namespaces) > 0 {
		slog.Info("lab down", "prefix", prefix, "processes", len(procs), "namespaces", len(namespaces))
	}
	frrTmp := frrTempDirs(procs)
	if err := terminate(procs); err != nil {
		errs = append(errs, err)
	}
	// An FRR daemon removes its directory under /var/tmp/frr when it
	// exits cleanly; one that needed SIGKILL leaves it.
	for _, dir := range frrTmp {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", dir, err))
		}
	}

	// Deleting a namespace destroys its interfaces, and with them the
	// veth peers and bridges in the router namespace.
	for _, ns := range namespaces {
		// A concurrent Down may have deleted it in the meantime: only a
		// namespace that is still there is a failure.
		if _, err := ip(context.Background(), "netns", "del", ns); err != nil && netns.Exists(ns) {
			errs = append(errs, err)
		}
	}
	// Agents pin under PinDir(prefix)/<namespace>; their lock files go
	// with the pins.
	if ents, err := os.ReadDir(PinDir(prefix)); err == nil {
		for _, e := range ents {
			if err := bpfobj.RemoveLock(filepath.Join(PinDir(prefix), e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, dir := range []string{PinDir(prefix), StateDir(prefix)} {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", dir, err))
		}
	}
	// The shared parents go once the last lab is gone; while another lab
	// uses them, removing fails harmlessly.
	_ = os.Remove(pinRoot)
	_ = os.Remove(stateRoot)

	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("lab %q down: %w", prefix, err)
	}
	return nil
}

// frrTempDir is where FRR daemons keep their crash logs: per daemon
// and PID, <frrTempDir>/<daemon>.<pid>.
const frrTempDir = "/var/tmp/frr"

// frrTempDirs returns the temporary directories of those processes
// that are FRR daemons, by their executables.
func frrTempDirs(procs []procRef) []string {
	var dirs []string
	for _, p := range procs {
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.pid))
		if err != nil || filepath.Dir(exe) != frrDaemonDir {
			continue
		}
		dirs = append(dirs, filepath.Join(frrTempDir, fmt.Sprintf("%s.%d", filepath.Base(exe), p.pid)))
	}
	return dirs
}
