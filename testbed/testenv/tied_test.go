package testenv

import (
	"os/exec"
	"syscall"
	"testing"
)

func TestStartTied(t *testing.T) {
	cmd := exec.Command("sh", "-c", "exit 3")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	done, err := StartTied(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if !cmd.SysProcAttr.Setpgid || cmd.SysProcAttr.Pdeathsig != syscall.SIGKILL {
		t.Errorf("SysProcAttr %+v: want Setpgid kept and Pdeathsig SIGKILL", *cmd.SysProcAttr)
	}
	if err := <-done; cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 3 {
		t.Errorf("wait: %v, state %v; want exit status 3", err, cmd.ProcessState)
	}
	if _, err := StartTied(exec.Command("/nonexistent/binary")); err == nil {
		t.Error("StartTied of a missing binary: no error")
	}
}
