package announce

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
)

// fakeAnnouncer logs what Routes does with it into a shared journal.
type fakeAnnouncer struct {
	id       int
	journal  *[]string
	startErr error
}

func (f *fakeAnnouncer) note(format string, args ...any) {
	*f.journal = append(*f.journal, fmt.Sprintf("%d ", f.id)+fmt.Sprintf(format, args...))
}

func (f *fakeAnnouncer) Start(context.Context) error {
	f.note("start")
	return f.startErr
}

func (f *fakeAnnouncer) Sync(routes []Route) error {
	var ps []string
	for _, r := range routes {
		ps = append(ps, r.Prefix.String())
	}
	f.note("sync %s", strings.Join(ps, ","))
	return nil
}

func (f *fakeAnnouncer) Reconfigure(_ context.Context, c *config.BGP) error {
	f.note("reconfigure %d peers", len(c.Peers))
	return nil
}

func (f *fakeAnnouncer) Shutdown(ctx context.Context) error {
	f.note("shutdown drain=%v", ctx.Err() == nil)
	return nil
}

func (f *fakeAnnouncer) Restart(context.Context) error {
	f.note("restart")
	return nil
}

func (f *fakeAnnouncer) Status() *api.BGP { return &api.BGP{ASN: uint32(f.id)} }

func section(asn uint32, peers ...string) *config.BGP {
	b := &config.BGP{ASN: asn, HoldTime: config.DefaultHoldTime}
	for _, p := range peers {
		b.Peers = append(b.Peers, config.Peer{Address: netip.MustParseAddr(p), ASN: 65000, Port: 179})
	}
	return b
}

func route(prefix string) Route {
	return Route{Prefix: netip.MustParsePrefix(prefix), Serve: true}
}

// TestRoutes follows a node through the life of its BGPPeers: none at
// first, one, another, a new AS, none again.
func TestRoutes(t *testing.T) {
	var journal []string
	n := 0
	var failStart bool
	r, err := NewRoutes(nil, netip.MustParseAddr("10.0.0.10"), netip.Addr{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	r.open = func(c *config.BGP) (announcer, error) {
		n++
		journal = append(journal, fmt.Sprintf("%d open as%d", n, c.ASN))
		a := &fakeAnnouncer{id: n, journal: &journal}
		if failStart {
			a.startErr = errors.New("port in use")
		}
		return a, nil
	}
	ctx := t.Context()
	step := func(name string, do func() error, want ...string) {
		t.Helper()
		journal = nil
		if err := do(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(journal, want) {
			t.Errorf("%s:\n got %q\nwant %q", name, journal, want)
		}
	}

	step("start without a section", func() error { return r.Start(ctx) })
	if r.Status() != nil {
		t.Error("a status without a speaker")
	}
	step("routes are remembered", func() error { return r.Sync([]Route{route("10.99.0.1/32")}) })
	step("the first peer", func() error { return r.Reconfigure(ctx, section(65001, "10.0.0.1")) },
		"1 open as65001", "1 start", "1 sync 10.99.0.1/32")
	step("routes", func() error { return r.Sync([]Route{route("10.99.0.1/32"), route("10.99.0.2/32")}) },
		"1 sync 10.99.0.1/32,10.99.0.2/32")
	step("a second peer: in place", func() error { return r.Reconfigure(ctx, section(65001, "10.0.0.1", "10.0.0.2")) },
		"1 reconfigure 2 peers")
	step("a new AS: a new speaker, the old one without draining", func() error { return r.Reconfigure(ctx, section(65002, "10.0.0.1")) },
		"1 shutdown drain=false", "2 open as65002", "2 start", "2 sync 10.99.0.1/32,10.99.0.2/32")
	if st := r.Status(); st == nil || st.ASN != 2 {
		t.Errorf("status %+v, want the second speaker's", st)
	}
	step("no peers left", func() error { return r.Reconfigure(ctx, nil) }, "2 shutdown drain=false")
	step("nothing to sync to", func() error { return r.Sync([]Route{route("10.99.0.1/32")}) })

	// A speaker that cannot start is tried again on a later Sync, not
	// at every one.
	failStart = true
	journal = nil
	if err := r.Reconfigure(ctx, section(65003, "10.0.0.1")); err == nil {
		t.Error("no error from a speaker that cannot start")
	}
	step("no retry at once", func() error { return r.Sync([]Route{route("10.99.0.1/32")}) })
	failStart = false
	r.lastOpen = time.Now().Add(-reopenEvery)
	step("retry once due", func() error { return r.Sync([]Route{route("10.99.0.3/32")}) },
		"4 open as65003", "4 start", "4 sync 10.99.0.3/32")

	step("shutdown drains", func() error { return r.Shutdown(context.Background()) }, "4 shutdown drain=true")
	step("nothing starts after shutdown", func() error { return r.Reconfigure(ctx, section(65004, "10.0.0.1")) })
}

// TestRoutesGracefulRestart: with graceful restart on a peer the speaker
// starts at the first Sync, with those routes recorded before, so that
// the End-of-RIB a router waits for follows them; a restart keeps the
// routes (Restart), a shutdown drains.
func TestRoutesGracefulRestart(t *testing.T) {
	var journal []string
	n := 0
	gr := section(65001, "10.0.0.1")
	gr.Peers[0].GracefulRestart = &config.GracefulRestart{RestartTime: config.DefaultRestartTime}
	newRoutes := func(cfg *config.BGP) *Routes {
		r := &Routes{log: slog.New(slog.NewTextHandler(io.Discard, nil)), want: cfg}
		r.open = func(c *config.BGP) (announcer, error) {
			n++
			journal = append(journal, fmt.Sprintf("%d open as%d", n, c.ASN))
			return &fakeAnnouncer{id: n, journal: &journal}, nil
		}
		a, err := r.open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		r.cur, r.cfg = a, cfg
		return r
	}
	check := func(name string, want ...string) {
		t.Helper()
		if !reflect.DeepEqual(journal, want) {
			t.Errorf("%s:\n got %q\nwant %q", name, journal, want)
		}
		journal = nil
	}
	ctx := t.Context()

	r := newRoutes(gr)
	check("open", "1 open as65001")
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	check("start waits for the routes")
	if err := r.Sync([]Route{route("10.99.0.1/32")}); err != nil {
		t.Fatal(err)
	}
	check("first sync", "1 sync 10.99.0.1/32", "1 start")
	if err := r.Sync([]Route{route("10.99.0.2/32")}); err != nil {
		t.Fatal(err)
	}
	check("later sync", "1 sync 10.99.0.2/32")
	if err := r.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	check("restart", "1 restart")

	r = newRoutes(gr)
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Sync(nil); err != nil {
		t.Fatal(err)
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	check("shutdown drains", "2 open as65001", "2 sync ", "2 start", "2 shutdown drain=true")

	// Without graceful restart the speaker starts at once, as before.
	r = newRoutes(section(65001, "10.0.0.1"))
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	check("start without graceful restart", "3 open as65001", "3 start")
}

// TestPlan: a VIP is announced while one of its services is installed,
// not down and not drained; services sharing a VIP share its route and
// attributes, and a VIP not served says why.
func TestPlan(t *testing.T) {
	med := uint32(10)
	svc := func(name, vip string, weights ...uint32) config.Service {
		s := config.Service{Name: name, VIP: netip.MustParseAddr(vip), Port: 80, Protocol: config.TCP, BGP: config.RouteAttributes{MED: &med}}
		for i, w := range weights {
			s.Backends = append(s.Backends, config.Backend{Address: netip.AddrFrom4([4]byte{10, 0, 3, byte(2 + i)}), Port: 80, Weight: w})
		}
		return s
	}
	services := []config.Service{
		svc("web", "10.99.0.1", 1, 1), svc("down", "10.99.0.2", 1), svc("drained", "10.99.0.3", 0),
		svc("shared-down", "10.99.0.4", 1), svc("shared-up", "10.99.0.4", 1), svc("missing", "10.99.0.5", 1),
		svc("web6", "fd00:99::1", 1),
	}
	down := map[string]bool{"down": true, "shared-down": true}
	got := Plan(services, down, func(s config.Service) bool { return s.Name != "missing" })
	want := []Route{
		{Prefix: netip.MustParsePrefix("10.99.0.1/32"), Attrs: services[0].BGP, Serve: true},
		{Prefix: netip.MustParsePrefix("10.99.0.2/32"), Attrs: services[0].BGP, Why: "every backend is down"},
		{Prefix: netip.MustParsePrefix("10.99.0.3/32"), Attrs: services[0].BGP, Why: "every backend is drained (weight 0)"},
		{Prefix: netip.MustParsePrefix("10.99.0.4/32"), Attrs: services[0].BGP, Serve: true},
		{Prefix: netip.MustParsePrefix("10.99.0.5/32"), Attrs: services[0].BGP, Why: "no service of this VIP is programmed"},
		{Prefix: netip.MustParsePrefix("fd00:99::1/128"), Attrs: services[0].BGP, Serve: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%+v\nwant\n%+v", got, want)
	}
}
