// Package e2e tests xlb end to end: real agents with their XDP programs
// on the nodes of a lab (package lab), real backends, traffic from a
// client namespace through the router. It needs root; without root the
// tests skip, unless CI=true, where they fail.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/netns"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// xlbBinary is the xlb command built by TestMain. The lab runs its
// subcommands (agent, backend, lab serve, netns-exec) and the demo test
// runs `xlb demo`; the test binary has none of them.
var xlbBinary string

// labPrefix names this run's labs: unique per test process, so a
// developer's lab and a concurrent run are never touched.
var labPrefix = fmt.Sprintf("xlbe2e%d", os.Getpid())

// staleRE matches the namespaces of the labs that runs of these tests
// make, and captures the run's PID and the lab's prefix.
// A test's own suffix (TestBGPWithFRR's "b", TestIPv6WithBIRD's "v6b")
// follows the PID.
var staleRE = regexp.MustCompile(`^(xlbe2e([0-9]+)(?:-demo|[a-z][a-z0-9]*)?)-(?:router|rr|client[0-9]+|node[0-9]+|be[0-9]+(?:-pod[0-9]+)?)$`)

func TestMain(m *testing.M) {
	os.Exit(func() int {
		if !testenv.Privileged() {
			return m.Run() // every test skips, or fails on CI
		}
		removeStaleLabs()
		bin, remove, err := testenv.BuildXLB()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer remove()
		xlbBinary = bin
		finished := watchInterrupt()
		defer finished()
		return m.Run()
	}())
}

func needRoot(t *testing.T) { testenv.RequireRoot(t, "end-to-end tests") }

// interrupted ends when the test process gets SIGINT or SIGTERM (Ctrl-C
// on `go test`). Every test's context derives from it, so the tests stop
// early and their cleanups take the labs down, as after a failure.
var interrupted = context.Background()

// Labs that are up, for the last resort of watchInterrupt.
var (
	labsMu sync.Mutex
	labs   = map[string]bool{}
)

// useLab registers lab prefix for removal at the end of t, also when t
// fails or panics (the testing package runs a parent's cleanups when a
// subtest panics).
func useLab(t *testing.T, prefix string) {
	t.Helper()
	labsMu.Lock()
	labs[prefix] = true
	labsMu.Unlock()
	t.Cleanup(func() {
		// Under the lock, so that watchInterrupt's Down does not race
		// this one.
		labsMu.Lock()
		defer labsMu.Unlock()
		if err := lab.Down(prefix); err != nil {
			t.Errorf("take lab %q down: %v", prefix, err)
		}
		delete(labs, prefix)
	})
}

// interruptGrace is how long the tests get to clean up after a signal.
const interruptGrace = time.Minute

// watchInterrupt sets interrupted up. After a signal, a second one kills
// the process at once, as usual; if the tests have not returned within
// interruptGrace, it takes the labs down itself and exits. Call the
// returned function when the tests have returned.
func watchInterrupt() (finished func()) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	interrupted = ctx
	done := make(chan struct{})
	go func() {
		select {
		case <-done:
			return
		case <-ctx.Done():
		}
		stop()
		fmt.Fprintf(os.Stderr, "e2e: %v: stopping the tests and taking their labs down\n", context.Cause(ctx))
		select {
		case <-done:
			return
		case <-time.After(interruptGrace):
		}
		labsMu.Lock()
		for prefix := range labs {
			if err := lab.Down(prefix); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		}
		fmt.Fprintln(os.Stderr, "e2e: the tests did not stop; labs taken down")
		os.Exit(2)
	}()
	return func() {
		close(done)
		stop()
	}
}

// removeStaleLabs takes down the labs of earlier runs of these tests
// whose process is gone: a run killed by the test timeout, or by
// SIGKILL, had no chance to clean up.
func removeStaleLabs() {
	entries, err := os.ReadDir(netns.Dir)
	if err != nil {
		return
	}
	done := map[string]bool{}
	for _, e := range entries {
		m := staleRE.FindStringSubmatch(e.Name())
		if m == nil || done[m[1]] {
			continue
		}
		prefix := m[1]
		done[prefix] = true
		pid, err := strconv.Atoi(m[2])
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue
		}
		fmt.Fprintf(os.Stderr, "e2e: removing lab %q left by an earlier run (PID %d is gone)\n", prefix, pid)
		if err := lab.Down(prefix); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
}

// The labs of every test are found again after a crash, whatever the
// test's suffix, and nobody else's are.
func TestStaleRE(t *testing.T) {
	for name, prefix := range map[string]string{
		"xlbe2e123-router":         "xlbe2e123",
		"xlbe2e123-demo-node2":     "xlbe2e123-demo",
		"xlbe2e123b-be4":           "xlbe2e123b",
		"xlbe2e123v6b-client1":     "xlbe2e123v6b",
		"xlbe2e123nk-be1-pod2":     "xlbe2e123nk",
		"xlbe2e123b-rr":            "xlbe2e123b",
		"xlbe2e-router":            "",
		"xlb-router":               "",
		"xlbe2e123b-somethingelse": "",
	} {
		m := staleRE.FindStringSubmatch(name)
		if got := ""; m != nil {
			got = m[1]
			if got != prefix {
				t.Errorf("%s: lab %q, want %q", name, got, prefix)
			}
		} else if prefix != "" {
			t.Errorf("%s: not matched, want lab %q", name, prefix)
		}
	}
}
