package testenv

import (
	"os/exec"
	"runtime"
	"syscall"
)

// StartTied starts cmd so that it dies with this process, whatever ends
// it (a test's timeout panic, a kill): the kernel sends the child SIGKILL
// as its parent's death signal. That signal follows the thread that
// forked the child, not the process, and Go ends threads (a goroutine
// that exits while locked to one, as the netns helpers do), so the
// forking thread is held until the child has exited. Other fields of
// cmd.SysProcAttr (Setpgid, say) are kept. The channel receives
// cmd.Wait's result once the child has exited.
func StartTied(cmd *exec.Cmd) (<-chan error, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	started, done := make(chan error, 1), make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		done <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return done, nil
}
