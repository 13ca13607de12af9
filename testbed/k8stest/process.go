package k8stest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/xlbproject/xlb/testbed/testenv"
)

// portAttempts bounds the restarts of a process that lost a race for
// its free port to another test.
const portAttempts = 3

// process is one child process with its output in logFile.
type process struct {
	name    string
	logFile string
	cmd     *exec.Cmd
	done    chan struct{} // closed once the process has exited
	err     error         // cmd.Wait's result, set before done closes
}

// launch starts bin with args(ports) on nports free loopback ports and
// polls ready until it succeeds or timeout passes. If the process exits
// because a port was taken in the meantime it starts again on new ports.
func (c *ControlPlane) launch(ctx context.Context, log *slog.Logger, name, bin string, nports int,
	timeout time.Duration, args func(ports []int) []string, ready func(ctx context.Context, ports []int) error,
) error {
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(nports)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		begin := time.Now()
		p, err := startProcess(c.Dir, name, bin, args(ports))
		if err != nil {
			return err
		}
		c.procs = append(c.procs, p)
		err = p.waitReady(ctx, timeout, func(ctx context.Context) error { return ready(ctx, ports) })
		if err == nil {
			log.Info("started", "process", name, "pid", p.cmd.Process.Pid, "ports", ports,
				"took", time.Since(begin).Round(time.Millisecond))
			return nil
		}
		logTail := tail(p.logFile, 30)
		if exited(p) && strings.Contains(logTail, "address already in use") && attempt < portAttempts {
			log.Warn("port taken, restarting", "process", name, "ports", ports,
				"fix", "nothing to do: new ports are picked; if it repeats, look for processes left over by earlier tests")
			c.procs = c.procs[:len(c.procs)-1]
			continue
		}
		return fmt.Errorf("%s: %w\n--- %s, last lines:\n%s", name, err, p.logFile, logTail)
	}
}

// startProcess starts bin with its output appended to DIR/NAME.log.
func startProcess(dir, name, bin string, args []string) (*process, error) {
	logFile := filepath.Join(dir, name+".log")
	out, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	p := &process{name: name, logFile: logFile, cmd: cmd, done: make(chan struct{})}
	// If the test binary dies (a timeout panic, a kill), the children die
	// with it rather than being left running.
	waited, err := testenv.StartTied(cmd)
	if err != nil {
		out.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		p.err = <-waited
		out.Close()
		close(p.done)
	}()
	return p, nil
}

// waitReady polls ready until it succeeds, the process exits, ctx ends or
// timeout passes.
func (p *process) waitReady(ctx context.Context, timeout time.Duration, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, 5*time.Second)
		last = ready(attempt)
		cancelAttempt()
		if last == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("exited before it was ready: %v", p.err)
		case <-ctx.Done():
			return fmt.Errorf("not ready after %s: %w (last check: %v)", timeout, ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// stop sends SIGTERM, then SIGKILL after grace, and waits for the exit.
func (p *process) stop(grace time.Duration) error {
	if exited(p) {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop %s: %w", p.name, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s: %w", p.name, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

func exited(p *process) bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// freePorts returns n distinct loopback TCP ports that were free a moment
// ago; launch copes with losing one to another process since.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		// Held open until all are picked, so that the n differ.
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// tail returns the last n lines of a file, or why it cannot.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
