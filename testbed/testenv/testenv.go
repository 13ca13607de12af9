// Package testenv holds what xlb's privileged tests share: the rule for
// when they may skip, and a build of the xlb command for tests that run
// its subcommands.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Privileged reports whether this process can create network namespaces
// and load BPF programs.
func Privileged() bool { return os.Geteuid() == 0 }

// RequireRoot skips a test that needs root, except on CI (CI=true), where
// the suite runs as root and a skipped test would hide that it never ran.
func RequireRoot(t testing.TB, what string) {
	t.Helper()
	if Privileged() {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s need root (CI=true: not skipping)", what)
	}
	t.Skipf("%s need root", what)
}

// BuildXLB builds cmd/xlb, with the given build tags, into a new
// temporary directory and returns the binary's path and a function that
// removes it. Tests whose code runs xlb subcommands (lab serve,
// netns-exec) need it: the test binary has none.
func BuildXLB(tags ...string) (string, func(), error) {
	dir, err := os.MkdirTemp("", "xlb-test")
	if err != nil {
		return "", nil, err
	}
	bin := filepath.Join(dir, "xlb")
	args := []string{"build", "-o", bin}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	out, err := exec.Command("go", append(args, "github.com/xlbproject/xlb/cmd/xlb")...).CombinedOutput()
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("build xlb: %v\n%s", err, out)
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}
