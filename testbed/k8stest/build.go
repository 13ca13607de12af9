package k8stest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// buildScript builds the binaries or finds them in its cache; the cache
// directory's naming lives there alone.
const buildScript = "scripts/kube-build.sh"

// Build returns the directory holding kube-apiserver and
// kube-controller-manager, running scripts/kube-build.sh: instant when its
// cache has them, minutes the first time. The script's progress goes to
// progress (nil: discarded).
func Build(ctx context.Context, progress io.Writer) (string, error) {
	script, err := findScript()
	if err != nil {
		return "", err
	}
	if progress == nil {
		progress = io.Discard
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, script)
	cmd.Stdout = &stdout
	cmd.Stderr = io.MultiWriter(progress, &stderr)
	// Cancel the script's go build with it: its own process group,
	// signalled as a whole; the script removes its partial build.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (the first build takes minutes: run %s or `make kube` beforehand, or raise go test -timeout)", ctx.Err(), buildScript)
		}
		return "", fmt.Errorf("build the kubernetes control plane (%s): %w\n%s", script, err, stderr.String())
	}
	dir := strings.TrimSpace(stdout.String())
	if i := strings.LastIndexByte(dir, '\n'); i >= 0 {
		dir = dir[i+1:]
	}
	if dir == "" {
		return "", fmt.Errorf("%s printed no directory", script)
	}
	return dir, nil
}

// findScript looks for the build script in the enclosing xlb checkout:
// upwards from the working directory (a test runs in its package's
// directory), else from this file's place in the source tree.
func findScript() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	for _, dir := range starts {
		for {
			path := filepath.Join(dir, buildScript)
			if _, err := os.Stat(path); err == nil {
				return path, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", errors.New("kubernetes control plane: " + buildScript + " not found above the working directory: run from the xlb source tree or set Options.BinDir")
}
