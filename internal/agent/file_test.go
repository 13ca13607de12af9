package agent

import (
	"context"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/source"
	"github.com/xlbproject/xlb/internal/source/file"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// TestAgentWaitsForFileToSettle: a file written in two parts with a
// pause between them (shorter than the settle time) is read once, whole:
// its first part, a valid configuration without the second service, is
// never applied, although the agent polls the file all along and the
// first part has been written and closed.
func TestAgentWaitsForFileToSettle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "xlb.yaml")
	// Two services; the second comes last in the file.
	file := func(backend string) string {
		return strings.Replace(yamlTemplate, "BACKENDS", "      - address: "+backend+"\n", 1) +
			"  - name: extra\n    vip: 10.99.0.9\n    port: 80\n    backends:\n      - address: 10.0.3.9\n"
	}
	if err := os.WriteFile(path, []byte(file("10.0.3.2")), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := mustLoad(t, path)
	var mu sync.Mutex
	var loaded [][]string // the services of every configuration read
	load := func(p string) (*config.Config, error) {
		c, err := config.Load(p)
		if err == nil {
			var names []string
			for _, s := range c.Services {
				names = append(names, s.Name)
			}
			mu.Lock()
			loaded = append(loaded, names)
			mu.Unlock()
		}
		return c, err
	}
	a, _, _ := testAgentAt(t, path, cfg, load)
	a.pollEvery = 10 * time.Millisecond
	const settle = 2 * time.Second
	src := followFile(a, 10*time.Millisecond, settle)
	const pause = 300 * time.Millisecond // well below the settle time, many polls long

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go src.Run(ctx)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()

	// Written in place, as a copy or a shell redirection writes, in two
	// parts: the first is a valid configuration of its own, without the
	// service "extra".
	whole := file("10.0.3.3")
	cut := strings.Index(whole, "  - name: extra")
	if err := os.WriteFile(path, []byte(whole[:cut]), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(pause)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(whole[cut:]); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyTrue(t, 5*time.Second, "the whole file to be applied", func() bool { return status(t, a).Config.Generation >= 2 })
	// Long enough for another read, were one coming.
	time.Sleep(settle + 200*time.Millisecond)
	st := status(t, a)
	mu.Lock()
	defer mu.Unlock()
	if len(loaded) != 1 || len(loaded[0]) != 2 || st.Config.Generation != 2 || len(st.Services) != 2 {
		t.Errorf("read %d times, the services of each: %q; generation %d with %d services; want one read of the whole file", len(loaded), loaded, st.Config.Generation, len(st.Services))
	}
}

// TestReloadLogsServicesAddedAndRemoved: the reload's log line names the
// services that came and those that went.
func TestReloadLogsServicesAddedAndRemoved(t *testing.T) {
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	next := cfgOf(web(be("10.0.3.2", 1)))
	next.Services = append(next.Services, config.Service{Name: "extra", VIP: netip.MustParseAddr("10.99.0.9"), Port: 80,
		Protocol: config.TCP, Forwarding: config.DSRIPIP, Backends: []config.Backend{be("10.0.3.9", 1)}})
	a, _, _, _ := testAgentWith(t, "/etc/xlb/test.yaml", baseConfig(), func(string) (*config.Config, error) { return next, nil }, log)
	if err := reload(a); err != nil {
		t.Fatal(err)
	}
	var line string
	for l := range strings.Lines(buf.String()) {
		if strings.Contains(l, `msg="configuration reloaded"`) {
			line = l
		}
	}
	if !strings.Contains(line, "added=[extra]") || !strings.Contains(line, "removed=[dns]") {
		t.Errorf("reload logged %q, want added=[extra] and removed=[dns]", line)
	}
}

// TestAgentReadsRenamedFileAtOnce: a file renamed over the configuration
// (complete by construction) is read without waiting for it to settle.
func TestAgentReadsRenamedFileAtOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "xlb.yaml")
	writeConfig(t, path, "10.0.3.2")
	a, _, _ := testAgentAt(t, path, mustLoad(t, path), nil)
	a.pollEvery = time.Hour
	src := followFile(a, time.Hour, time.Hour) // only a rename gets through in this test's time

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go src.Run(ctx)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	gen := func() uint64 { return status(t, a).Config.Generation }

	// By rename: read at once. The source sets its watch up as it
	// starts, and nothing tells when it is done (polling is off): rename
	// again until one is seen.
	deadline := time.Now().Add(5 * time.Second)
	for gen() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for the renamed file to be applied")
		}
		writeConfig(t, path, "10.0.3.2", "10.0.3.3")
		for start := time.Now(); time.Since(start) < 500*time.Millisecond && gen() < 2; {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if st := status(t, a); len(st.Services[0].Backends) != 2 {
		t.Errorf("after the rename: %+v", st.Services[0].Backends)
	}
}

// loads is the file loader of each test agent that has one of its own
// (testAgentWith); the others load with LoadFile.
var loads sync.Map // *Agent -> func(string) (*config.Config, error)

func loaderOf(a *Agent) func(string) (*config.Config, error) {
	if l, ok := loads.Load(a); ok {
		return l.(func(string) (*config.Config, error))
	}
	return LoadFile
}

// reload reads a's file and applies it, as its file source delivers it.
func reload(a *Agent) error {
	cfg, err := loaderOf(a)(a.path)
	return a.Replace(source.Update{Config: cfg, Err: err, Source: file.Name, Trigger: "test"})
}

// followFile makes a file source for a's file the source of a, as the
// command does; the caller runs it.
func followFile(a *Agent, poll, settle time.Duration) *file.Source {
	src := file.New(file.Options{Path: a.path, Load: loaderOf(a), Poll: poll, Settle: settle})
	a.updates = src.Updates()
	return src
}
