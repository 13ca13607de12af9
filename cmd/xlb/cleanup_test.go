package main

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/lb"
	"github.com/xlbproject/xlb/testbed/netns"
	"github.com/xlbproject/xlb/testbed/testenv"
	"github.com/xlbproject/xlb/testbed/xdptest"
)

// tempLockDir points bpfobj.LockDir, where agents and xlb cleanup keep
// their locks, at a fresh directory for the test.
func tempLockDir(t *testing.T) {
	t.Helper()
	old := bpfobj.LockDir
	bpfobj.LockDir = t.TempDir()
	t.Cleanup(func() { bpfobj.LockDir = old })
}

// TestCleanupRefusesWhileLocked: while someone holds a pin path's lock,
// as a running agent does, xlb cleanup names the holder, says what to do
// and removes nothing. Once the lock is free it goes on (and here stops
// at the bpffs check: a temporary directory is not on bpffs).
func TestCleanupRefusesWhileLocked(t *testing.T) {
	tempLockDir(t)
	pin := filepath.Join(t.TempDir(), "pins")
	if err := os.MkdirAll(pin, 0o700); err != nil {
		t.Fatal(err)
	}
	kept := filepath.Join(pin, "svc_index")
	if err := os.WriteFile(kept, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(bpfobj.LockFile(pin), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(lock, "pid 4242, %s\n", pin)

	err = runCleanup([]string{"--pin-path", pin})
	want := fmt.Sprintf("an xlb agent (pid 4242, %s) runs on the pinned state at %s: nothing removed; stop the agent first", pin, pin)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("xlb cleanup while the lock is held: %v, want an error containing %q", err, want)
	}
	if _, err := os.Stat(kept); err != nil {
		t.Errorf("xlb cleanup removed pins although it refused: %v", err)
	}

	lock.Close()
	err = runCleanup([]string{"--pin-path", pin})
	if err == nil || !strings.Contains(err.Error(), "is not on a bpffs") {
		t.Fatalf("xlb cleanup on a free lock, outside bpffs: %v, want the bpffs refusal", err)
	}
	if _, err := os.Stat(bpfobj.LockFile(pin)); !os.IsNotExist(err) {
		t.Errorf("lock file left behind after a failed cleanup: %v", err)
	}
}

func TestCleanupUsage(t *testing.T) {
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	old := os.Stderr
	os.Stderr = devnull
	defer func() { os.Stderr = old }()
	for _, args := range [][]string{nil, {"--pin-path", "/sys/fs/bpf/x", "--config", "c.yaml"}, {"--pin-path", "/sys/fs/bpf/x", "extra"}} {
		if err := runCleanup(args); err != errUsage {
			t.Errorf("xlb cleanup %q: %v, want the usage", args, err)
		}
	}
}

// TestCleanupCommand runs xlb cleanup against a real data plane attached
// to a veth in a namespace of its own: refused while the agent holds the
// pin path; once the agent is gone, the program is detached and the pins
// and the lock file are removed.
func TestCleanupCommand(t *testing.T) {
	testenv.RequireRoot(t, "xlb cleanup against an attached data plane (BPF, network namespaces)")
	tempLockDir(t)
	ns := fmt.Sprintf("xlbtest-cleanup-%d", os.Getpid())
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	ip("netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	ip("-n", ns, "link", "add", "veth0", "type", "veth", "peer", "name", "veth1")
	ip("-n", ns, "link", "set", "veth0", "up")
	ip("-n", ns, "link", "set", "veth1", "up")
	ip("-n", ns, "addr", "add", "10.0.1.2/24", "dev", "veth0")

	pin := filepath.Join(bpfobj.BPFFSRoot, fmt.Sprintf("xlbtest-cleanup-%d", os.Getpid()))
	t.Cleanup(func() { os.RemoveAll(pin) })
	cfg := filepath.Join(t.TempDir(), "agent.yaml")
	yaml := fmt.Sprintf("node: {interface: veth0, address: 10.0.1.2}\ndataplane: {pinPath: %s, tableSize: 251}\n", pin)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}

	var dp *lb.Dataplane
	err := netns.Do(ns, func() error {
		var err error
		dp, err = lb.Open(lb.Options{
			Interface: "veth0", NodeAddr: netip.MustParseAddr("10.0.1.2"), PinPath: pin, TableSize: 251,
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })
	attached := xdpProgID(t, ns, "veth0")
	if attached == 0 {
		t.Fatal("no XDP program on veth0 after Open")
	}
	pins, err := os.ReadDir(pin)
	if err != nil || len(pins) == 0 {
		t.Fatalf("nothing pinned at %s: %v", pin, err)
	}

	// The agent runs: refused, nothing touched.
	err = runCleanup([]string{"--config", cfg})
	want := fmt.Sprintf("an xlb agent (pid %d, %s) runs on the pinned state at %s", os.Getpid(), pin, pin)
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "stop the agent first") {
		t.Fatalf("xlb cleanup while the agent runs: %v, want an error containing %q and what to do", err, want)
	}
	if after, err := os.ReadDir(pin); err != nil || len(after) != len(pins) {
		t.Errorf("pins after the refusal: %d (%v), want the %d there were", len(after), err, len(pins))
	}
	if id := xdpProgID(t, ns, "veth0"); id != attached {
		t.Errorf("XDP program %d after the refusal, want %d still attached", id, attached)
	}

	// The agent is gone (its handles closed, as when its process ends):
	// the pinned link still holds the program until xlb cleanup.
	if err := dp.Close(); err != nil {
		t.Fatal(err)
	}
	if id := xdpProgID(t, ns, "veth0"); id != attached {
		t.Fatalf("XDP program %d once the agent is gone, want %d kept by the pinned link", id, attached)
	}
	read := capture(t, &os.Stdout)
	if err := runCleanup([]string{"--config", cfg}); err != nil {
		t.Fatalf("xlb cleanup once the agent is gone: %v", err)
	}
	if out := read(); !strings.Contains(out, "removed the data plane pinned at "+pin) {
		t.Errorf("xlb cleanup printed %q", out)
	}
	if _, err := os.Stat(pin); !os.IsNotExist(err) {
		t.Errorf("pin directory still there: %v", err)
	}
	if _, err := os.Stat(bpfobj.LockFile(pin)); !os.IsNotExist(err) {
		t.Errorf("lock file still there: %v", err)
	}
	// The kernel detaches a link when its last reference goes, which can
	// lag the unpin a little.
	deadline := time.Now().Add(3 * time.Second)
	for xdpProgID(t, ns, "veth0") != 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if id := xdpProgID(t, ns, "veth0"); id != 0 {
		t.Errorf("XDP program %d still attached 3s after xlb cleanup", id)
	}

	// Again: nothing left, and it says so.
	if err := runCleanup([]string{"--pin-path", pin}); err != nil {
		t.Fatalf("second xlb cleanup: %v", err)
	}
	if out := read(); !strings.Contains(out, "nothing is pinned at "+pin) {
		t.Errorf("second xlb cleanup printed %q", out)
	}
}

// xdpProgID is the XDP program attached to ifname in namespace ns (0:
// none).
func xdpProgID(t *testing.T, ns, ifname string) uint32 {
	t.Helper()
	id, err := xdptest.AttachedProgram(ns, ifname)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
