package labrun

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/testbed/lab"
)

// SetHTTP switches the HTTP server of backend be: lab.HTTPStop refuses
// connections, lab.HTTPHang accepts them and never answers, lab.HTTPStart
// serves again. It returns once the server has switched.
func SetHTTP(ctx context.Context, p lab.Plan, be lab.Host, mode lab.HTTPMode) error {
	if err := lab.SetHTTPMode(ctx, lab.ControlSocket(p.Spec.Prefix, be), mode); err != nil {
		return fmt.Errorf("%s: %w", be.Name, err)
	}
	return nil
}

// BackendHealth returns the health that node's agent reports for backend
// addr of service.
func BackendHealth(p lab.Plan, node lab.Host, service string, addr netip.Addr) (api.Health, error) {
	st, err := api.GetStatus(Socket(p, node))
	if err != nil {
		return api.Health{}, fmt.Errorf("%s: %w", node.Name, err)
	}
	for _, s := range st.Services {
		if s.Name != service {
			continue
		}
		for _, b := range s.Backends {
			if b.Address == addr {
				return b.Health, nil
			}
		}
	}
	return api.Health{}, fmt.Errorf("%s: no backend %s in service %q", node.Name, addr, service)
}

// healthPoll is how often WaitHealth reads the agents' status.
const healthPoll = 20 * time.Millisecond

// WaitHealth polls every node's agent until each reports backend addr of
// service in state (api.StateUp, api.StateDown), and returns the time the
// last one did, at the resolution of healthPoll.
func WaitHealth(ctx context.Context, p lab.Plan, service string, addr netip.Addr, state string, timeout time.Duration) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pending := slices.Clone(p.Nodes)
	var last api.Health
	for {
		var why error
		pending = slices.DeleteFunc(pending, func(n lab.Host) bool {
			h, err := BackendHealth(p, n, service, addr)
			if err != nil {
				why = err
				return false
			}
			last = h
			return h.State == state
		})
		if len(pending) == 0 {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			if why == nil {
				why = fmt.Errorf("it is %s (last error %q)", last.State, last.LastError)
			}
			return time.Time{}, fmt.Errorf("backend %s of %q is not %s on %s after %s: %w", addr, service, state, pending[0].Name, timeout, why)
		case <-time.After(healthPoll):
		}
	}
}

// Attempt is one request of Stream.
type Attempt struct {
	Start, End time.Time
	Backend    string // the backend that answered; "" if the request failed
	Err        error
}

// Stream starts a request for http://target/ from namespace ns every
// interval, each on a new TCP connection, until ctx ends, without waiting
// for earlier ones: a backend that never answers delays nothing else.
// Each request may take up to timeout. It returns every attempt that
// ended before ctx did, ordered by start; failures do not stop it. Tests
// use it to see when traffic moves.
func Stream(ctx context.Context, ns string, target netip.AddrPort, every, timeout time.Duration) ([]Attempt, error) {
	return stream(ctx, every, timeout, func(ctx context.Context) (string, error) {
		c, err := DialHTTP(ctx, ns, target)
		if err != nil {
			return "", err
		}
		defer c.Close()
		return c.Get(ctx, true)
	})
}

// stream runs one as Stream describes.
func stream(ctx context.Context, every, timeout time.Duration, one func(context.Context) (string, error)) ([]Attempt, error) {
	if every <= 0 || timeout <= 0 {
		return nil, fmt.Errorf("a request every %s, timeout %s: want both above 0", every, timeout)
	}
	var (
		mu  sync.Mutex
		out []Attempt
		wg  sync.WaitGroup
	)
	tick := time.NewTicker(every)
	defer tick.Stop()
	// At most timeout/every attempts run at once: each ends within timeout.
	for ctx.Err() == nil {
		wg.Go(func() {
			a := attempt(ctx, timeout, one)
			if ctx.Err() != nil && a.Err != nil {
				return // cut short by the end of the stream: not a result
			}
			mu.Lock()
			out = append(out, a)
			mu.Unlock()
		})
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b Attempt) int { return a.Start.Compare(b.Start) })
	return out, nil
}

func attempt(ctx context.Context, timeout time.Duration, one func(context.Context) (string, error)) Attempt {
	// Start before the deadline is set, so a timed-out attempt lasts at
	// least timeout by our own clock.
	a := Attempt{Start: time.Now()}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	name, err := one(ctx)
	a.End = time.Now()
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %s: %w", timeout, err)
		}
		return Attempt{Start: a.Start, End: a.End, Err: err}
	}
	a.Backend = name
	return a
}
