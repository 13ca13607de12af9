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
	var st Status
	if _, err := call(socket, http.MethodGet, "/v1/status", "", nil, 10*time.Second, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// call sends one request to the agent listening on socket and decodes a
// 200 answer into out. Another answer is an error carrying the agent's
// message, and its status code is returned for the caller to tell apart.
func call(socket, method, path, contentType string, body io.Reader, timeout time.Duration, out any) (int, error) {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: timeout}
	// The host part is ignored: the transport always dials the socket.
	req, err := http.NewRequest(method, "http://xlb"+path, body)
	if err != nil {
		return 0, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
			return 0, fmt.Errorf("%w on %s", ErrNotRunning, socket)
		}
		return 0, fmt.Errorf("ask the agent on %s: %w", socket, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("read the agent's answer on %s: %w", socket, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e errorBody
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			return resp.StatusCode, fmt.Errorf("the agent on %s failed: %s", socket, e.Error)
		}
		return resp.StatusCode, fmt.Errorf("the agent on %s answered %s", socket, resp.Status)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return resp.StatusCode, fmt.Errorf("decode the agent's answer from %s: %w", socket, err)
	}
	return resp.StatusCode, nil
}
