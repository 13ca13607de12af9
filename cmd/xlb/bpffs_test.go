package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
)

// runIn runs argv (a command that enters the lab's namespace: ip netns
// exec, nsenter) for at most 30 s and returns its output and exit
// status.
func runIn(t *testing.T, argv ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("%s: not done within 30s", strings.Join(argv, " "))
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// TestPinsMustOutliveTheCommand: under `ip netns exec` (a mount
// namespace and a /sys of the command's own) xlb backend and xlb agent
// refuse to pin anything, saying how to run them instead, and touch
// nothing; so they do with a bpffs mounted there. Under nsenter --net the
// same xlb backend sets up a program that stays attached after it exits.
func TestPinsMustOutliveTheCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds xlb; skipped with -short")
	}
	l := newFileAgentLab(t)
	pin := filepath.Join(bpfobj.BPFFSRoot, fmt.Sprintf("xlbtest-pins-%d", os.Getpid()))
	t.Cleanup(func() {
		_ = exec.Command("nsenter", "--net=/run/netns/"+l.ns, "--", l.bin, "backend", "--interface", "v0", "--cleanup", "--pin-path", pin).Run()
		_ = os.RemoveAll(pin)
	})
	backend := []string{l.bin, "backend", "--interface", "v0", "--vip", "10.99.0.1", "--pin-path", pin}
	hint := fmt.Sprintf("nsenter --net=/run/netns/%s -- xlb backend --interface v0 --vip 10.99.0.1 --pin-path %s", l.ns, pin)
	untouched := func(t *testing.T) {
		t.Helper()
		if id := xdpProgID(t, l.ns, "v0"); id != 0 {
			t.Errorf("XDP program %d attached on v0", id)
		}
		out, err := exec.Command("ip", "-n", l.ns, "-4", "addr", "show", "dev", "lo").CombinedOutput()
		if err != nil || strings.Contains(string(out), "10.99.0.1") {
			t.Errorf("the VIP went on lo: %s (%v)", out, err)
		}
		if _, err := os.Stat(pin); err == nil {
			t.Errorf("something was pinned at %s", pin)
		}
	}

	t.Run("ip netns exec: xlb backend", func(t *testing.T) {
		_, stderr, code := runIn(t, append([]string{"ip", "netns", "exec", l.ns}, backend...)...)
		if code != 1 || !strings.Contains(stderr, "would vanish when xlb exits") || !strings.Contains(stderr, hint) {
			t.Errorf("exit status %d, stderr:\n%s\nwant 1, the reason and %q", code, stderr, hint)
		}
		untouched(t)
	})

	t.Run("ip netns exec with a bpffs mounted there", func(t *testing.T) {
		script := "mount -t bpf bpf /sys/fs/bpf && exec " + strings.Join(backend, " ")
		_, stderr, code := runIn(t, "ip", "netns", "exec", l.ns, "sh", "-c", script)
		if code != 1 || !strings.Contains(stderr, "is mounted in this process's mount namespace only") {
			t.Errorf("exit status %d, stderr:\n%s", code, stderr)
		}
		untouched(t)
	})

	t.Run("ip netns exec: xlb agent", func(t *testing.T) {
		l.write(l.cfgPath, l.file(false, "  - {name: web, vip: 10.99.0.1, port: 80, backends: [{address: 10.0.0.20}]}\n"))
		_, stderr, code := runIn(t, "ip", "netns", "exec", l.ns, l.bin, "agent", "--config", l.cfgPath)
		if code != 1 || !strings.Contains(stderr, "would vanish when xlb exits") || !strings.Contains(stderr, "nsenter --net=/run/netns/"+l.ns+" -- xlb agent --config "+l.cfgPath) {
			t.Errorf("exit status %d, stderr:\n%s", code, stderr)
		}
		if _, err := os.Stat(l.pin); err == nil {
			t.Errorf("the agent pinned its data plane at %s", l.pin)
		}
	})

	t.Run("nsenter --net: the program outlives xlb backend", func(t *testing.T) {
		stdout, stderr, code := runIn(t, append([]string{"nsenter", "--net=/run/netns/" + l.ns, "--"}, backend...)...)
		if code != 0 {
			t.Fatalf("exit status %d, stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		if id := xdpProgID(t, l.ns, "v0"); id == 0 {
			t.Error("no XDP program on v0 after xlb backend exited")
		}
		if _, stderr, code := runIn(t, "nsenter", "--net=/run/netns/"+l.ns, "--", l.bin, "backend", "--interface", "v0", "--cleanup", "--pin-path", pin); code != 0 {
			t.Errorf("xlb backend --cleanup: exit status %d: %s", code, stderr)
		}
	})
}
