// Package netns runs code and processes inside named network namespaces
// (the ones `ip netns add` creates under /run/netns) without leaving the
// caller's mount namespace, so bpffs pins stay visible and persistent.
package netns

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// Dir is where iproute2 keeps named network namespaces.
const Dir = "/run/netns"

// ExecCommand is the hidden xlb subcommand that enters a namespace and
// execs a program: `xlb netns-exec NAME -- PROG ARGS...`.
const ExecCommand = "netns-exec"

// Path returns the bind-mount path of a named namespace.
func Path(name string) string { return filepath.Join(Dir, name) }

// Exists reports whether the named namespace exists.
func Exists(name string) bool {
	_, err := os.Stat(Path(name))
	return err == nil
}

// Do runs fn on an OS thread that has joined the named namespace. Sockets
// that fn creates belong to that namespace for their whole life, whichever
// thread uses them later. The thread is discarded afterwards, so no other
// goroutine ever runs in the wrong namespace.
func Do(name string, fn func() error) error {
	r, err := NewRunner(name)
	if err != nil {
		return err
	}
	defer r.Close()
	return r.Do(fn)
}

func enter(name string) error {
	fd, err := unix.Open(Path(name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open network namespace %q: %w (does it exist? see `ip netns list`)", name, err)
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("enter network namespace %q: %w (needs root)", name, err)
	}
	return nil
}

// Command returns a command that runs argv inside the named namespace,
// through this same binary's hidden ExecCommand (unlike `ip netns exec` it
// keeps the mount namespace, so /sys/fs/bpf is the host's bpffs).
func Command(name string, argv ...string) *exec.Cmd {
	self, err := os.Executable()
	if err != nil {
		self = "/proc/self/exe"
	}
	args := append([]string{ExecCommand, name, "--"}, argv...)
	return exec.Command(self, args...)
}

// ExecMain implements ExecCommand: args are NAME -- PROG ARGS... It only
// returns on error.
func ExecMain(args []string) error {
	if len(args) < 3 || args[1] != "--" {
		return fmt.Errorf("usage: xlb %s NAMESPACE -- PROGRAM [ARGS...]", ExecCommand)
	}
	runtime.LockOSThread()
	if err := enter(args[0]); err != nil {
		return err
	}
	prog := args[2]
	if filepath.Base(prog) == prog {
		p, err := exec.LookPath(prog)
		if err != nil {
			return fmt.Errorf("%s: %w", prog, err)
		}
		prog = p
	}
	if err := syscall.Exec(prog, args[2:], os.Environ()); err != nil {
		return fmt.Errorf("exec %s: %w", prog, err)
	}
	return nil
}

// Runner is one OS thread parked inside a namespace, for callers that
// enter the same namespace many times (a test feeding thousands of
// packets through BPF_PROG_TEST_RUN): it saves a thread per call.
type Runner struct {
	work chan func()
	done chan struct{}
}

// NewRunner starts a thread in the named namespace.
func NewRunner(name string) (*Runner, error) {
	r := &Runner{work: make(chan func()), done: make(chan struct{})}
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with the goroutine (see Do).
		runtime.LockOSThread()
		if err := enter(name); err != nil {
			errc <- err
			return
		}
		errc <- nil
		for {
			select {
			case fn := <-r.work:
				fn()
			case <-r.done:
				return
			}
		}
	}()
	if err := <-errc; err != nil {
		return nil, err
	}
	return r, nil
}

// Do runs fn on the runner's thread and returns its error.
func (r *Runner) Do(fn func() error) error {
	errc := make(chan error, 1)
	r.work <- func() { errc <- fn() }
	return <-errc
}

// Close ends the runner's thread.
func (r *Runner) Close() { close(r.done) }
