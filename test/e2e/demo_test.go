package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/netns"
)

// demoPrefix is the lab of `xlb demo` in these tests.
var demoPrefix = labPrefix + "-demo"

// labGone fails t if anything of lab prefix is left.
func labGone(t *testing.T, prefix string) {
	t.Helper()
	p, err := lab.NewPlan(lab.Spec{Prefix: prefix, Binary: xlbBinary})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range p.Namespaces() {
		if netns.Exists(ns) {
			t.Errorf("namespace %s is left after the demo", ns)
		}
	}
	st, err := lab.ReadStatus(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if st.Up || st.Broken {
		t.Errorf("lab %q is left after the demo: up %v, broken %v", prefix, st.Up, st.Broken)
	}
}

// demoCommand returns `xlb demo` on lab demoPrefix with more flags. A
// demo that overruns or is interrupted gets SIGINT, as from Ctrl-C, so it
// still takes its lab down.
func demoCommand(t *testing.T, flags ...string) *exec.Cmd {
	ctx, cancel := context.WithTimeout(interrupted, time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, xlbBinary, append([]string{"demo", "--prefix", demoPrefix}, flags...)...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	return cmd
}

// TestDemo runs `xlb demo` as `make demo` does, with fewer requests, and
// checks that it passes, says so, and leaves nothing behind.
func TestDemo(t *testing.T) {
	needRoot(t)
	useLab(t, demoPrefix) // in case the demo itself fails to clean up
	cmd := demoCommand(t, "--requests", "400")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("xlb demo: %v\n%s", err, out.String())
	}
	text := out.String()
	for _, want := range []string{
		"[6/10] An IPv6 client: 100 HTTP requests from fd00:10:2::2 to http://[fd00:99::1]/",
		"direct server return over IPv6",
		"[7/10] Connections survive be2 leaving and coming back",
		"web-chained  daisy-chain  60           0",
		"[8/10] Remove be4",
		"[9/10] node2 leaves gracefully",
		"[10/10] node3 hangs",
		"direct server return",
		"Tearing down lab \"" + demoPrefix + "\" ... ok",
		"PASS in ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the demo's output lacks %q:\n%s", want, text)
		}
	}
	if t.Failed() {
		return
	}
	labGone(t, demoPrefix)
}

// TestDemoInterrupted stops the demo with SIGINT, as Ctrl-C does, while
// it sends requests: it must exit non-zero, say why, and still take the
// lab down.
func TestDemoInterrupted(t *testing.T) {
	needRoot(t)
	useLab(t, demoPrefix)
	cmd := demoCommand(t, "--requests", "1000000")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Interrupt once the requests are under way: the lab and its agents
	// are up then, and a million requests take minutes.
	var seen bytes.Buffer
	sc := bufio.NewScanner(io.TeeReader(stdout, &seen))
	for sc.Scan() {
		if strings.Contains(sc.Text(), "[3/10]") {
			break
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(stdout)
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("xlb demo after SIGINT: %v, want a non-zero exit\n%s%s%s", err, seen.String(), rest, stderr.String())
	}
	if !strings.Contains(stderr.String(), "interrupted") || !strings.Contains(string(rest), "Tearing down lab \""+demoPrefix+"\" ... ok") {
		t.Errorf("xlb demo after SIGINT: want \"interrupted\" on stderr and the teardown on stdout:\n%s%s%s", seen.String(), rest, stderr.String())
	}
	labGone(t, demoPrefix)
}
