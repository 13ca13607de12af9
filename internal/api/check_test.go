package api

import (
	"errors"
	"path/filepath"
	"reflect"
	"testing"
)

// TestPostCheck: the file's content and name reach the agent's check,
// whose answer comes back; an agent without checks and a socket without
// an agent are told apart.
func TestPostCheck(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "xlb.sock")
	ln, err := Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	want := &Check{Path: "/etc/xlb/agent.yaml", Generation: 3, Added: []string{"extra"},
		Changed: []ServiceChange{{Name: "web", Changes: []string{"backend 10.0.3.2:80 weight: 1 → 2"}}}}
	var gotName, gotData string
	srv, err := Serve(ln, "", func() (*Status, error) { return sampleStatus(), nil }, quiet, WithCheck(func(name string, data []byte) (*Check, error) {
		gotName, gotData = name, string(data)
		return want, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	got, err := PostCheck(socket, "/tmp/new agent.yaml", []byte("node: {interface: eth0}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) || gotName != "/tmp/new agent.yaml" || gotData != "node: {interface: eth0}\n" {
		t.Errorf("got %+v for %q %q", got, gotName, gotData)
	}

	_, plain := serve(t, "", func() (*Status, error) { return sampleStatus(), nil })
	if _, err := PostCheck(plain, "x.yaml", nil); !errors.Is(err, ErrNoCheck) {
		t.Errorf("an agent without checks: %v, want ErrNoCheck", err)
	}
	if _, err := PostCheck(filepath.Join(t.TempDir(), "none.sock"), "x.yaml", nil); !errors.Is(err, ErrNotRunning) {
		t.Errorf("no agent: %v, want ErrNotRunning", err)
	}
}
