package benchutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// TestStaleRuns: entries of a run whose process has exited are stale;
// those of a live process, of this process and of other names are not.
func TestStaleRuns(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip("no true(1):", err)
	}
	dead := cmd.Process.Pid // exited and reaped
	if Running(dead) {
		t.Skipf("PID %d was reused already", dead)
	}
	live := exec.Command("sleep", "30")
	if err := live.Start(); err != nil {
		t.Skip("no sleep(1):", err)
	}
	t.Cleanup(func() { _ = live.Process.Kill(); _ = live.Wait() })

	d1, d2 := t.TempDir(), t.TempDir()
	for _, p := range []string{
		filepath.Join(d1, "xlbt"+strconv.Itoa(dead)),
		filepath.Join(d2, "xlbt"+strconv.Itoa(dead)+"-rec"),
		filepath.Join(d1, "xlbt"+strconv.Itoa(live.Process.Pid)),
		filepath.Join(d1, "xlbt"+strconv.Itoa(os.Getpid())),
		filepath.Join(d2, "xlbtx"+strconv.Itoa(dead)),
		filepath.Join(d2, "other"+strconv.Itoa(dead)),
	} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if got := StaleRuns("xlbt", d1, d2, filepath.Join(d1, "missing")); !slices.Equal(got, []int{dead}) {
		t.Errorf("StaleRuns = %v, want [%d]", got, dead)
	}
	if !Running(os.Getpid()) || !Running(live.Process.Pid) {
		t.Error("Running is false for a live process")
	}
}
