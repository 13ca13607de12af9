package bfd

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

const (
	frrBFDD = "/usr/lib/frr/bfdd"
	// frrTempDir is where FRR daemons keep a directory each, by PID.
	frrTempDir = "/var/tmp/frr"
	frrVtysh   = "vtysh"
)

// frrBFD is an FRR bfdd running in a namespace of the test, with its own
// sockets and files in dir, so it never meets the host's FRR.
type frrBFD struct {
	t   *testing.T
	dir string
	cmd *exec.Cmd
}

func requireFRR(t *testing.T) {
	t.Helper()
	_, errD := os.Stat(frrBFDD)
	_, errV := exec.LookPath(frrVtysh)
	if err := errors.Join(errD, errV); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("FRR interop test needs the Debian package frr (%v) (CI=true: not skipping)", err)
		}
		t.Skipf("FRR interop test needs the Debian package frr: %v", err)
	}
}

func startFRR(t *testing.T, ns string) *frrBFD {
	t.Helper()
	dir, err := os.MkdirTemp("", "xlb-bfd-frr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// bfdd drops to user frr and must create its sockets here.
	if u, err := user.Lookup("frr"); err == nil {
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	empty := filepath.Join(dir, "empty.conf")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f := &frrBFD{t: t, dir: dir}
	f.cmd = exec.Command("ip", "netns", "exec", ns, frrBFDD,
		"-f", empty,
		"-i", filepath.Join(dir, "bfdd.pid"),
		"--vty_socket", dir,
		"--bfdctl", filepath.Join(dir, "bfdd.sock"),
		"-z", filepath.Join(dir, "zserv.api"), // no zebra: keeps it off the host's
		"-P", "0", // no TCP vty
		"--log", "file:"+filepath.Join(dir, "bfdd.log"))
	out, err := os.Create(filepath.Join(dir, "bfdd.out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	f.cmd.Stdout, f.cmd.Stderr = out, out
	if err := f.cmd.Start(); err != nil {
		t.Fatalf("start bfdd: %v", err)
	}
	exited := make(chan struct{})
	go func() { f.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		// By PID; an error means it already ended. bfdd leaves a
		// directory of its own, /var/tmp/frr/bfdd.<pid>, however it
		// ends: it goes once the process has.
		crashDir := filepath.Join(frrTempDir, fmt.Sprintf("bfdd.%d", f.cmd.Process.Pid))
		f.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			f.cmd.Process.Kill()
			<-exited
		}
		os.RemoveAll(crashDir)
		if t.Failed() {
			for _, name := range []string{"bfdd.out", "bfdd.log"} {
				if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
					t.Logf("%s:\n%s", name, b)
				}
			}
		}
	})
	vty := filepath.Join(dir, "bfdd.vty")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(vty); err == nil {
			break
		}
		select {
		case <-exited:
			t.Fatalf("bfdd exited: %v", f.cmd.ProcessState)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("bfdd did not open its vty socket within 10 s")
		}
	}
	return f
}

func (f *frrBFD) vtysh(cmds ...string) []byte {
	f.t.Helper()
	args := []string{"--vty_socket", f.dir}
	for _, c := range cmds {
		args = append(args, "-c", c)
	}
	out, err := exec.Command(frrVtysh, args...).CombinedOutput()
	if err != nil {
		f.t.Fatalf("vtysh %q: %v\n%s", cmds, err, out)
	}
	return out
}

// frrPeer is the part of `show bfd peers json` the test reads.
type frrPeer struct {
	Peer                   string `json:"peer"`
	ID                     uint32 `json:"id"`
	RemoteID               uint32 `json:"remote-id"`
	Status                 string `json:"status"`
	Diagnostic             string `json:"diagnostic"`
	RemoteDiagnostic       string `json:"remote-diagnostic"`
	RemoteReceiveInterval  int    `json:"remote-receive-interval"`
	RemoteTransmitInterval int    `json:"remote-transmit-interval"`
	RemoteDetectMultiplier int    `json:"remote-detect-multiplier"`
}

func (f *frrBFD) peer(addr string) (frrPeer, error) {
	var peers []frrPeer
	out := f.vtysh("show bfd peers json")
	if err := json.Unmarshal(out, &peers); err != nil {
		return frrPeer{}, fmt.Errorf("show bfd peers json: %v: %s", err, out)
	}
	for _, p := range peers {
		if p.Peer == addr {
			return p, nil
		}
	}
	return frrPeer{}, fmt.Errorf("FRR has no peer %s: %s", addr, out)
}

// waitPeer polls FRR until cond holds for the peer, and returns how
// long that took. Each poll is one vtysh run (a few ms), so the time is
// an upper bound, off by at most one poll.
func (f *frrBFD) waitPeer(addr string, timeout time.Duration, what string, cond func(frrPeer) bool) (frrPeer, time.Duration) {
	f.t.Helper()
	start := time.Now()
	var p frrPeer
	var err error
	for time.Since(start) < timeout {
		if p, err = f.peer(addr); err == nil && cond(p) {
			return p, time.Since(start)
		}
		time.Sleep(5 * time.Millisecond)
	}
	f.t.Fatalf("FRR: %s: not within %v; last: %+v, %v", what, timeout, p, err)
	return p, 0
}

// TestFRRInterop runs a session between our Manager and FRR's bfdd and
// breaks it from either side.
func TestFRRInterop(t *testing.T) {
	t.Parallel()
	requireFRR(t)
	p := newNSPair(t)
	ours, theirs := p.addr[0], p.addr[1]
	frr := startFRR(t, p.ns[1])
	frr.vtysh("configure terminal", "bfd",
		fmt.Sprintf("peer %s local-address %s", ours, theirs),
		"receive-interval 100", "transmit-interval 100", "detect-multiplier 3")

	m := p.manager(t, 0)
	if err := m.Add(theirs, fast); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitEvent(t, m, theirs, StateUp, 10*time.Second)
	t.Logf("FRR: ours Up after %v", time.Since(start))
	isUp := func(fp frrPeer) bool { return fp.Status == "up" }
	fp, _ := frr.waitPeer(ours.String(), 5*time.Second, "Up", isUp)

	// Timers and discriminators as both sides see them, after the polls.
	negotiated := func(fp frrPeer) bool {
		return fp.Status == "up" && fp.RemoteTransmitInterval == 100 && fp.RemoteReceiveInterval == 100
	}
	fp, _ = frr.waitPeer(ours.String(), 3*time.Second, "our 100 ms timers", negotiated)
	var st SessionStatus
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if st = sessionOf(t, m, theirs); st.DetectionTime == 300*time.Millisecond {
			break
		}
	}
	if st.State != StateUp || st.RemoteState != StateUp || st.DetectionTime != 300*time.Millisecond ||
		st.TxInterval != 100*time.Millisecond || st.RemoteDiscr != fp.ID || fp.RemoteID != st.LocalDiscr ||
		fp.RemoteDetectMultiplier != 3 {
		t.Fatalf("after negotiation: ours %+v, FRR %+v", st, fp)
	}

	// Our timers change through a Poll sequence that FRR answers.
	if err := m.Add(theirs, Config{MinTx: 200 * time.Millisecond, MinRx: 150 * time.Millisecond, Multiplier: 4}); err != nil {
		t.Fatal(err)
	}
	frr.waitPeer(ours.String(), 3*time.Second, "our 200/150 ms timers", func(fp frrPeer) bool {
		return fp.Status == "up" && fp.RemoteTransmitInterval == 200 && fp.RemoteReceiveInterval == 150 && fp.RemoteDetectMultiplier == 4
	})
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if st = sessionOf(t, m, theirs); st.TxInterval == 200*time.Millisecond && st.RxInterval == 150*time.Millisecond {
			break
		}
	}
	if st.TxInterval != 200*time.Millisecond || st.RxInterval != 150*time.Millisecond || st.State != StateUp || st.Downs != 0 {
		t.Fatalf("after the poll: %+v", st)
	}
	if err := m.Add(theirs, fast); err != nil {
		t.Fatal(err)
	}
	frr.waitPeer(ours.String(), 3*time.Second, "our 100 ms timers again", negotiated)

	// AdminDown reaches FRR.
	if err := m.Remove(theirs); err != nil {
		t.Fatal(err)
	}
	fp, took := frr.waitPeer(ours.String(), 2*time.Second, "Down after our AdminDown", func(fp frrPeer) bool { return fp.Status != "up" })
	t.Logf("FRR: Down %v after our Remove: %+v", took, fp)
	if fp.RemoteDiagnostic != "administratively down" {
		t.Errorf("FRR's remote diagnostic %q, want administratively down", fp.RemoteDiagnostic)
	}

	// We crash: FRR detects it within its detection time.
	if err := m.Add(theirs, fast); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, m, theirs, StateUp, 10*time.Second)
	frr.waitPeer(ours.String(), 3*time.Second, "Up with our 100 ms timers", negotiated)
	const frrDetection = 300 * time.Millisecond // our multiplier 3 × max(our 100 ms TX, its 100 ms RX)
	if err := m.shutdown(false); err != nil {
		t.Fatal(err)
	}
	fp, took = frr.waitPeer(ours.String(), 3*frrDetection, "Down after our crash", func(fp frrPeer) bool { return fp.Status != "up" })
	t.Logf("FRR: detected our crash after %v (detection time %v; vtysh polling, upper bound): %+v", took, frrDetection, fp)
	if fp.Diagnostic != "control detection time expired" {
		t.Errorf("FRR's diagnostic %q, want control detection time expired", fp.Diagnostic)
	}

	// FRR crashes: we detect it within our detection time.
	m = p.manager(t, 0)
	if err := m.Add(theirs, fast); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, m, theirs, StateUp, 10*time.Second)
	frr.waitPeer(ours.String(), 3*time.Second, "Up again", negotiated)
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if st = sessionOf(t, m, theirs); st.DetectionTime == 300*time.Millisecond {
			break
		}
	}
	if st.DetectionTime != 300*time.Millisecond {
		t.Fatalf("our detection time %v, want 300ms", st.DetectionTime)
	}
	start = time.Now()
	if err := frr.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	ev := waitEvent(t, m, theirs, StateDown, 3*st.DetectionTime)
	t.Logf("FRR: we detected its crash (SIGKILL) after %v (detection time %v)", ev.Time.Sub(start), st.DetectionTime)
	if ev.Diag != DiagDetectionTimeExpired {
		t.Fatalf("our event %+v, want diag Control Detection Time Expired", ev)
	}
}
