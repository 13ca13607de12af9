package k8stest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeDaemon writes a script that fails with msg on its first fails runs
// and then marks itself ready and keeps running, as a daemon would.
func fakeDaemon(t *testing.T, fails int, msg string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "daemon")
	script := fmt.Sprintf(`#!/bin/sh
n=$(cat "$0.runs" 2>/dev/null || echo 0)
n=$((n + 1))
echo $n >"$0.runs"
if [ $n -le %d ]; then
	echo "port $1: %s" >&2
	exit 1
fi
touch "$0.ready"
exec sleep 60
`, fails, msg)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLaunchRetriesTakenPorts(t *testing.T) {
	const taken = "bind: address already in use"
	tests := []struct {
		name     string
		fails    int
		msg      string
		wantErr  string // "": started
		wantRuns int
	}{
		{"ready at once", 0, taken, "", 1},
		{"port taken twice", portAttempts - 1, taken, "", portAttempts},
		{"port always taken", portAttempts, taken, taken, portAttempts},
		{"other failure is not retried", 1, "config invalid", "config invalid", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bin := fakeDaemon(t, tt.fails, tt.msg)
			c := &ControlPlane{Dir: t.TempDir()}
			defer c.Stop()
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			err := c.launch(ctx, log, "daemon", bin, 1, 10*time.Second,
				func(p []int) []string { return []string{strconv.Itoa(p[0])} },
				func(context.Context, []int) error {
					_, err := os.Stat(bin + ".ready")
					return err
				})
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("launch: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("launch: error %v, want one with the log line %q", err, tt.wantErr)
			}
			runs, _ := os.ReadFile(bin + ".runs")
			if got := strings.TrimSpace(string(runs)); got != strconv.Itoa(tt.wantRuns) {
				t.Errorf("ran %s times, want %d", got, tt.wantRuns)
			}
			if tt.wantErr == "" && len(c.procs) != 1 {
				t.Errorf("%d processes kept, want 1: the running one", len(c.procs))
			}
		})
	}
}

// TestStartFailsClean checks that a start that fails says which process
// failed and why, and leaves no process and no directory behind.
func TestStartFailsClean(t *testing.T) {
	etcd, err := findEtcd("")
	if err != nil {
		t.Skip(err)
	}
	crashing := t.TempDir()
	for _, name := range []string{"kube-apiserver", "kube-controller-manager"} {
		script := "#!/bin/sh\necho \"" + name + " refuses: $*\" >&2\nexit 3\n"
		if err := os.WriteFile(filepath.Join(crashing, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		opts    Options
		wantErr []string
	}{
		{"no binaries", Options{BinDir: t.TempDir(), Etcd: etcd}, []string{"kube-apiserver"}},
		{"no etcd", Options{BinDir: crashing, Etcd: filepath.Join(crashing, "etcd")}, []string{"etcd", "etcd-server"}},
		{"etcd exits", Options{BinDir: crashing, Etcd: "/bin/false"}, []string{"etcd: exited before it was ready"}},
		{"API server exits", Options{BinDir: crashing, Etcd: etcd},
			[]string{"kube-apiserver: exited before it was ready", "kube-apiserver refuses: --etcd-servers="}},
		{"service CIDR too small", Options{BinDir: crashing, Etcd: etcd, ServiceCIDR: "10.96.0.0/30"}, []string{"10.96.0.0/30"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp)
			tt.opts.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
			c, err := Start(t.Context(), tt.opts)
			if err == nil {
				c.Stop()
				t.Fatal("Start succeeded")
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q: %v", want, err)
				}
			}
			if left, _ := os.ReadDir(tmp); len(left) > 0 {
				t.Errorf("left in TMPDIR: %v", left)
			}
			if pids := processesMentioning(t, tmp); len(pids) > 0 {
				t.Errorf("processes left running: %v", pids)
			}
		})
	}
}

// processesMentioning returns the PIDs whose command line contains s.
func processesMentioning(t *testing.T, s string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), s) {
			pids = append(pids, pid)
		}
	}
	return pids
}
