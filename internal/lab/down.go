package lab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	"github.com/xlbproject/xlb/internal/dataplane"
	"github.com/xlbproject/xlb/internal/netns"
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
	if err := terminate(procs); err != nil {
		errs = append(errs, err)
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
			if err := dataplane.RemoveLock(filepath.Join(PinDir(prefix), e.Name())); err != nil {
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
