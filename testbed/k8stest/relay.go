package k8stest

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/xlbproject/xlb/testbed/netns"
)

// Relay makes the API server, which listens on the host's loopback,
// reachable from inside network namespace ns: it listens on that
// namespace's loopback and relays every connection to the API server.
// TLS passes through unchanged, and the certificate's 127.0.0.1 still
// matches. It returns the relay's address and a kubeconfig file (in dir)
// that points there with the admin token. Close ends the relay and every
// connection through it.
func (c *ControlPlane) Relay(ns, dir string) (*Relay, error) {
	u, err := url.Parse(c.Server)
	if err != nil {
		return nil, err
	}
	var ln net.Listener
	if err := netns.Do(ns, func() (err error) {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		return nil, fmt.Errorf("relay in %s: %w", ns, err)
	}
	r := &Relay{ln: ln, target: u.Host, Addr: ln.Addr().String()}
	r.Kubeconfig = filepath.Join(dir, "kubeconfig-"+ns)
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: relay
  cluster:
    server: https://%s
    certificate-authority: %s
users:
- name: admin
  user:
    token: %s
contexts:
- name: relay
  context: {cluster: relay, user: admin}
current-context: relay
`, r.Addr, c.CAFile, c.Token)
	if err := os.WriteFile(r.Kubeconfig, []byte(kc), 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	r.wg.Go(r.accept)
	return r, nil
}

// RelayT is Relay for a test: the kubeconfig goes to a temporary
// directory and the relay closes when t ends. It returns the kubeconfig.
func (c *ControlPlane) RelayT(t testing.TB, ns string) string {
	t.Helper()
	r, err := c.Relay(ns, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r.Kubeconfig
}

// Relay is a running relay into a namespace.
type Relay struct {
	// Addr is host:port on the namespace's loopback.
	Addr string
	// Kubeconfig is the admin kubeconfig file for Addr.
	Kubeconfig string

	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
	wg     sync.WaitGroup
}

func (r *Relay) accept() {
	for {
		in, err := r.ln.Accept()
		if err != nil {
			return // closed
		}
		out, err := net.DialTimeout("tcp", r.target, 5*time.Second)
		if err != nil {
			in.Close()
			continue
		}
		if !r.track(in, out) {
			return
		}
		r.wg.Go(func() { _, _ = io.Copy(out, in); out.Close() })
		r.wg.Go(func() { _, _ = io.Copy(in, out); in.Close() })
	}
}

// track records a relayed pair; false (and both closed) once Close ran.
func (r *Relay) track(cs ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	r.conns = append(r.conns, cs...)
	return true
}

// Close stops accepting, closes every relayed connection and waits for
// the relay's goroutines.
func (r *Relay) Close() {
	r.ln.Close()
	r.mu.Lock()
	r.closed = true
	for _, c := range r.conns {
		c.Close()
	}
	r.conns = nil
	r.mu.Unlock()
	r.wg.Wait()
}
