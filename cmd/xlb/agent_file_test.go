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
	"syscall"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/testbed/netns"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// fileAgentLab is a network namespace with veth v0 (10.0.0.10/24, the
// node address: the file leaves node.address out) and an xlb binary
// that runs in it.
type fileAgentLab struct {
	t                    *testing.T
	bin, ns, dir         string
	socket, pin, cfgPath string
	agent                *exec.Cmd
	exited               chan error
}

func newFileAgentLab(t *testing.T) *fileAgentLab {
	testenv.RequireRoot(t, "the agent's file tests (BPF, network namespaces)")
	l := &fileAgentLab{t: t, ns: fmt.Sprintf("xlbfile%d", os.Getpid()), dir: t.TempDir()}
	_ = exec.Command("ip", "netns", "del", l.ns).Run()
	run(t, "ip", "netns", "add", l.ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", l.ns).Run() })
	run(t, "ip", "-n", l.ns, "link", "add", "v0", "type", "veth", "peer", "name", "v1")
	run(t, "ip", "-n", l.ns, "addr", "add", "10.0.0.10/24", "dev", "v0")
	for _, link := range []string{"lo", "v0", "v1"} {
		run(t, "ip", "-n", l.ns, "link", "set", link, "up")
	}
	bin, remove, err := testenv.BuildXLB()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
	l.bin = bin
	l.socket, l.pin, l.cfgPath = filepath.Join(l.dir, "xlb.sock"), "/sys/fs/bpf/"+l.ns, filepath.Join(l.dir, "agent.yaml")
	t.Cleanup(func() { _ = exec.Command(bin, "cleanup", "--pin-path", l.pin).Run() })
	return l
}

// file is a configuration for the lab's agent: the bgp section if bgp,
// then services (YAML list items).
func (l *fileAgentLab) file(bgp bool, services string) string {
	s := fmt.Sprintf("node: {interface: v0}\napi: {socket: %s}\ndataplane: {pinPath: %s, attachMode: generic, tableSize: 251}\n", l.socket, l.pin)
	if bgp {
		s += "bgp: {asn: 65001, drainTime: 0, peers: [{address: 10.0.0.1, asn: 65000}]}\n"
	}
	return s + "services:\n" + services
}

// write writes a file by rename, as the docs say to.
func (l *fileAgentLab) write(path, content string) {
	l.t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(content), 0o600); err != nil {
		l.t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		l.t.Fatal(err)
	}
}

// xlb runs xlb ARGS in the namespace, at most timeout, and returns its
// output and exit status (-1: killed at the timeout).
func (l *fileAgentLab) xlb(timeout time.Duration, args ...string) (stdout, stderr string, code int) {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, l.bin, append([]string{netns.ExecCommand, l.ns, "--", l.bin}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		code = -1
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		l.t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// start runs the agent on the file at cfgPath until the test ends.
func (l *fileAgentLab) start() {
	l.t.Helper()
	l.agent = exec.Command(l.bin, netns.ExecCommand, l.ns, "--", l.bin, "agent", "--config", l.cfgPath)
	l.agent.Stdout, l.agent.Stderr = l.t.Output(), l.t.Output()
	if err := l.agent.Start(); err != nil {
		l.t.Fatal(err)
	}
	l.exited = make(chan error, 1)
	go func() { l.exited <- l.agent.Wait() }()
	l.t.Cleanup(func() {
		_ = l.agent.Process.Signal(syscall.SIGTERM)
		select {
		case <-l.exited:
		case <-time.After(20 * time.Second):
			_ = l.agent.Process.Kill()
			<-l.exited
		}
	})
}

// status is the running agent's status; nil with what is missing.
func (l *fileAgentLab) status() (*api.Status, string) {
	select {
	case err := <-l.exited:
		l.exited <- err
		l.t.Fatalf("the agent exited: %v", err)
	default:
	}
	st, err := api.GetStatus(l.socket)
	if err != nil {
		return nil, err.Error()
	}
	return st, ""
}

// lineOf is the 1-based line of the first line of s that contains sub.
func lineOf(s, sub string) int {
	for i, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return i + 1
		}
	}
	return 0
}

// TestAgentFile runs `xlb agent` on a file in a namespace of its own:
// a VIP at the node's address is refused at start with the file's line;
// `xlb agent --check` checks files without an agent and against a
// running one (valid, invalid, what a reload would change); a reload
// that removes the bgp section leaves a status that says the new
// configuration runs, without BGP.
func TestAgentFile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds xlb and runs an agent; skipped with -short")
	}
	l := newFileAgentLab(t)
	web := "  - {name: web, vip: 10.99.0.1, port: 80, backends: [{address: 10.0.0.20}]}\n"

	t.Run("start refuses a VIP at the node address", func(t *testing.T) {
		bad := l.file(false, "  - {name: ssh, vip: 10.0.0.10, port: 22, backends: [{address: 10.0.0.20}]}\n")
		l.write(l.cfgPath, bad)
		_, stderr, code := l.xlb(20*time.Second, "agent", "--config", l.cfgPath)
		want := fmt.Sprintf("%s:%d: services[0].vip: 10.0.0.10 is this node's own address (the first IPv4 address of node.interface v0", l.cfgPath, lineOf(bad, "name: ssh"))
		if code != 1 || !strings.Contains(stderr, want) {
			t.Errorf("exit status %d, stderr:\n%s\nwant 1 and an error containing %q", code, stderr, want)
		}
		if _, err := os.Stat(l.pin); err == nil {
			t.Errorf("the refused start pinned a data plane at %s", l.pin)
		}
	})

	t.Run("check without an agent", func(t *testing.T) {
		l.write(l.cfgPath, l.file(true, web))
		stdout, stderr, code := l.xlb(20*time.Second, "agent", "--check", "--config", l.cfgPath)
		if code != 0 || !strings.Contains(stdout, l.cfgPath+": valid, checked on this host") || !strings.Contains(stdout, "No agent answers on "+l.socket) {
			t.Errorf("exit status %d, stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
	})

	l.start()
	waitUntil(t, "the agent with its BGP peer", func() string {
		st, why := l.status()
		switch {
		case st == nil:
			return why
		case st.BGP == nil || len(st.BGP.Peers) != 1 || len(st.Services) != 1:
			return fmt.Sprintf("bgp %+v, services %+v", st.BGP, st.Services)
		}
		return ""
	})

	candidate := filepath.Join(l.dir, "candidate.yaml")
	t.Run("check against the running agent: what a reload would change", func(t *testing.T) {
		l.write(candidate, strings.Replace(l.file(false, "  - {name: web, vip: 10.99.0.1, port: 80, backends: [{address: 10.0.0.20, weight: 3}]}\n"+
			"  - {name: extra, vip: 10.99.0.9, port: 80, backends: [{address: 10.0.0.21}]}\n"), "node: {interface: v0}", "node: {interface: v0, address: 10.0.0.10}", 1))
		stdout, stderr, code := l.xlb(20*time.Second, "agent", "--check", "--config", candidate)
		t.Logf("xlb agent --check:\n%s%s", stdout, stderr)
		for _, want := range []string{
			candidate + ": valid, checked by the running agent on " + l.socket,
			"Against " + l.cfgPath + " (generation 1), a reload would:",
			"  add service extra (10.99.0.9:80/tcp, 1 backends)",
			"  change service web:\n    backend 10.0.0.20:80 weight: 1 → 3\n",
			"  bgp: bgp section removed: every route is withdrawn and nothing is announced",
			"taking effect only when the agent restarts",
			"  node.address: (unset) → 10.0.0.10",
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("the output lacks %q", want)
			}
		}
		if code != 0 {
			t.Errorf("exit status %d, want 0", code)
		}
		stdout, _, code = l.xlb(20*time.Second, "agent", "--check", "--config", l.cfgPath)
		if code != 0 || !strings.Contains(stdout, "A reload would change nothing") {
			t.Errorf("the running file: exit status %d, stdout:\n%s", code, stdout)
		}
	})

	t.Run("check against the running agent: an invalid file", func(t *testing.T) {
		bad := l.file(true, web+"  - {name: ssh, vip: 10.0.0.10, port: 22, backends: [{address: 10.0.0.20}]}\n")
		l.write(candidate, bad)
		stdout, stderr, code := l.xlb(20*time.Second, "agent", "--check", "--config", candidate)
		want := fmt.Sprintf("%s:%d: services[1].vip: 10.0.0.10 is this node's own address", candidate, lineOf(bad, "name: ssh"))
		if code != 1 || !strings.Contains(stderr, want) || !strings.Contains(stderr, "checked by the running agent on "+l.socket) {
			t.Errorf("exit status %d, stdout:\n%s\nstderr:\n%s\nwant 1 and %q", code, stdout, stderr, want)
		}
		l.write(candidate, "node: {interface: v0}\nservices: [\n")
		if _, stderr, code := l.xlb(20*time.Second, "agent", "--check", "--config", candidate); code != 1 || !strings.Contains(stderr, candidate+":") {
			t.Errorf("a broken file: exit status %d, stderr:\n%s", code, stderr)
		}
		if st, _ := l.status(); st == nil || st.Config.Generation != 1 {
			t.Errorf("a check changed the running configuration: %+v", st)
		}
	})

	t.Run("status after a reload that removes the bgp section", func(t *testing.T) {
		l.write(l.cfgPath, l.file(false, web))
		waitUntil(t, "the reload", func() string {
			st, why := l.status()
			switch {
			case st == nil:
				return why
			case st.Config.Generation < 2:
				return fmt.Sprintf("generation %d", st.Config.Generation)
			}
			return ""
		})
		st, _ := l.status()
		if st.Config.Result != api.ResultOK || st.BGP != nil || len(st.Services) != 1 || !st.Services[0].Installed {
			t.Errorf("status after the reload: config %+v, bgp %+v, services %+v", st.Config, st.BGP, st.Services)
		}
		stdout, _, code := l.xlb(20*time.Second, "status", "--socket", l.socket)
		if code != 0 || !strings.Contains(stdout, "generation 2, last reload") || strings.Contains(stdout, "FAILED") || strings.Contains(stdout, "BGP:") {
			t.Errorf("xlb status (exit status %d):\n%s", code, stdout)
		}
	})
}
