package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// MaxCheckBody bounds the configuration POST /v1/check takes, as the
// agent bounds the file it reads.
const MaxCheckBody = 16 << 20

// CheckFunc checks the configuration data (a file's content, named name
// in messages) as a reload would, against the running one, without
// applying it.
type CheckFunc func(name string, data []byte) (*Check, error)

// Check is the body of POST /v1/check: what the agent thinks of a
// configuration file it was sent (`xlb agent --check`). Nothing is
// applied.
type Check struct {
	// Errors are the file's problems, one per entry, as a reload would
	// log them ("FILE:LINE: field: reason"); empty: the file is valid.
	Errors []string `json:"errors,omitempty"`
	// Path and Generation name the running configuration compared with.
	Path       string `json:"path"`
	Generation uint64 `json:"generation"`
	// What a reload of the file would change: services added, removed
	// and changed (by name), and the bgp section.
	Added   []string        `json:"added,omitempty"`
	Removed []string        `json:"removed,omitempty"`
	Changed []ServiceChange `json:"changed,omitempty"`
	BGP     []string        `json:"bgp,omitempty"`
	// Policy lists what changes in the policy section (the deny list).
	Policy []string `json:"policy,omitempty"`
	// NAT lists what changes in the nat section that a reload applies
	// (all but nat.sessions, which Restart lists).
	NAT []string `json:"nat,omitempty"`
	// Restart lists the changed settings that take effect only when the
	// agent restarts (node, api, dataplane, kubernetes).
	Restart []string `json:"restart,omitempty"`
	// Notes say what was not compared, and why.
	Notes []string `json:"notes,omitempty"`
}

// ServiceChange is what changes in one service.
type ServiceChange struct {
	Name    string   `json:"name"`
	Changes []string `json:"changes"`
}

// Unchanged reports whether a reload would change nothing.
func (c *Check) Unchanged() bool {
	return len(c.Added)+len(c.Removed)+len(c.Changed)+len(c.BGP)+len(c.Policy)+len(c.NAT)+len(c.Restart) == 0
}

// ErrNoCheck means that the agent on the socket does not check files
// (an agent from before `xlb agent --check`).
var ErrNoCheck = errors.New("the running agent cannot check files (it predates xlb agent --check)")

func checkHandler(check CheckFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fail := func(code int, err error) {
			w.WriteHeader(code)
			json.NewEncoder(w).Encode(errorBody{Error: err.Error()})
		}
		data, err := io.ReadAll(io.LimitReader(r.Body, MaxCheckBody+1))
		if err != nil {
			fail(http.StatusBadRequest, fmt.Errorf("read the configuration: %w", err))
			return
		}
		if len(data) > MaxCheckBody {
			fail(http.StatusRequestEntityTooLarge, fmt.Errorf("the configuration is larger than %d MiB; this is not an xlb configuration", MaxCheckBody>>20))
			return
		}
		name := r.URL.Query().Get("name")
		if name == "" {
			name = "config"
		}
		c, err := check(name, data)
		if err != nil {
			fail(http.StatusInternalServerError, err)
			return
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(c)
	}
}

// PostCheck sends the configuration data, named name in messages, to the
// agent listening on socket for checking. It returns ErrNotRunning when
// no agent listens, ErrNoCheck when the agent cannot check files.
func PostCheck(socket, name string, data []byte) (*Check, error) {
	var c Check
	code, err := call(socket, http.MethodPost, "/v1/check?name="+url.QueryEscape(name), "application/yaml", bytes.NewReader(data), 30*time.Second, &c)
	switch {
	case code == http.StatusNotFound || code == http.StatusMethodNotAllowed:
		return nil, fmt.Errorf("%w (on %s)", ErrNoCheck, socket)
	case err != nil:
		return nil, err
	}
	return &c, nil
}
