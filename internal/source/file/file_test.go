package file

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/source"
)

// TestSourceDelivers: the source delivers each version of the file as it
// is changed in place (once settled) or renamed into place, why a version
// does not load, and a reading on SIGHUP; nothing for a file unchanged
// since New.
func TestSourceDelivers(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "xlb.yaml")
	write := func(iface string) {
		t.Helper()
		if err := os.WriteFile(path, []byte("node: {interface: "+iface+"}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("eth0")
	hup := make(chan os.Signal, 16) // keeps SIGHUP from ending the test
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	src := New(Options{Path: path, Load: config.Load, Poll: 10 * time.Millisecond, Settle: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go src.Run(ctx)
	next := func(what string) source.Update {
		t.Helper()
		select {
		case u := <-src.Updates():
			return u
		case <-time.After(5 * time.Second):
			t.Fatalf("no update: %s", what)
		}
		return source.Update{}
	}
	select {
	case u := <-src.Updates():
		t.Fatalf("an update for an unchanged file: %+v", u)
	case <-time.After(100 * time.Millisecond):
	}

	write("eth1")
	if u := next("in place"); u.Err != nil || u.Config.Node.Interface != "eth1" || u.Source != Name || u.Trigger == "" {
		t.Errorf("after a change in place: %+v", u)
	}
	write("eth/1")
	if u := next("broken"); u.Config != nil || u.Err == nil || !strings.Contains(u.Err.Error(), "node.interface") {
		t.Errorf("after a broken change: %+v", u)
	}
	tmp := filepath.Join(dir, "new.yaml")
	if err := os.WriteFile(tmp, []byte("node: {interface: eth2}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	if u := next("renamed"); u.Err != nil || u.Config.Node.Interface != "eth2" {
		t.Errorf("after a rename: %+v", u)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if u := next("SIGHUP"); u.Trigger != "SIGHUP" || u.Err != nil || u.Config.Node.Interface != "eth2" {
		t.Errorf("after SIGHUP: %+v", u)
	}
}
