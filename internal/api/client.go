package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"syscall"
	"time"
)

// ErrNotRunning means that nothing listens on the socket.
var ErrNotRunning = errors.New("no agent is running")

// GetStatus asks the agent listening on socket for its status.
func GetStatus(socket string) (*Status, error) {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	// The host part is ignored: the transport always dials the socket.
	resp, err := client.Get("http://xlb/v1/status")
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w on %s", ErrNotRunning, socket)
		}
		return nil, fmt.Errorf("ask the agent on %s: %w", socket, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("read the agent's answer on %s: %w", socket, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e errorBody
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return nil, fmt.Errorf("the agent on %s failed: %s", socket, e.Error)
		}
		return nil, fmt.Errorf("the agent on %s answered %s", socket, resp.Status)
	}
	var st Status
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("decode the agent's status from %s: %w", socket, err)
	}
	return &st, nil
}
