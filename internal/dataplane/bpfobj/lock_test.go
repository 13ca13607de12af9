package bpfobj

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLockFile: one lock file per pin path, however it is spelt, and a
// cleanup cannot take the lock an agent holds, nor an agent the one a
// cleanup holds.
func TestLockFile(t *testing.T) {
	old := LockDir
	LockDir = t.TempDir()
	t.Cleanup(func() { LockDir = old })
	a := LockFile("/sys/fs/bpf/xlb/a")
	for _, spelt := range []string{"/sys/fs/bpf/xlb/a/", "/sys/fs/bpf/xlb/./b/../a"} {
		if got := LockFile(spelt); got != a {
			t.Errorf("LockFile(%q) = %s, want %s", spelt, got, a)
		}
	}
	if filepath.Dir(a) != LockDir || LockFile("/sys/fs/bpf/xlb/b") == a {
		t.Errorf("lock files %s and %s", a, LockFile("/sys/fs/bpf/xlb/b"))
	}

	pin := "/sys/fs/bpf/xlb/a"
	agent, err := Lock(pin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LockForCleanup(pin + "/"); err == nil || !strings.Contains(err.Error(), "pid ") || !strings.Contains(err.Error(), "stop the agent first") {
		t.Errorf("cleanup while an agent holds the lock: %v", err)
	}
	agent.Close()
	release, err := LockForCleanup(pin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Lock(pin); err == nil {
		t.Error("an agent took the lock while a cleanup held it")
	}
	release()
	if err := RemoveLock(pin); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a); !os.IsNotExist(err) {
		t.Errorf("RemoveLock left %s: %v", a, err)
	}
}
