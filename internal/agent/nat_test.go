package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/dataplane/lb"
	"github.com/xlbproject/xlb/internal/health"
	"github.com/xlbproject/xlb/internal/source"
	"github.com/xlbproject/xlb/internal/source/file"
	"github.com/xlbproject/xlb/testbed/testenv"
)

func withFlows(s config.Service, flows config.Flows) config.Service {
	s.Flows = flows
	return s
}

// onPort gives a backend its own port, as nat and dnat services' have.
func onPort(b config.Backend, port uint16) config.Backend {
	b.Port = port
	return b
}

// natSvc is a service in forwarding fwd whose backends listen on port
// 8080.
func natSvc(name, vip string, fwd config.Forwarding, backends ...config.Backend) config.Service {
	s := svc(name, vip, 80, config.TCP, fwd, backends...)
	for i := range s.Backends {
		s.Backends[i].Port = 8080
	}
	return s
}

// natConfig is baseConfig with a nat service (app) and a dnat one (db),
// and the nat section's defaults.
func natConfig() *config.Config {
	cfg := baseConfig()
	cfg.Services = append(cfg.Services,
		natSvc("app", "10.99.0.3", config.NAT, be("10.0.4.2", 1), be("10.0.4.3", 1)),
		natSvc("db", "10.99.0.4", config.DNAT, be("10.0.4.2", 1)))
	cfg.NAT = config.DefaultNAT()
	return cfg
}

// nat and dnat services go in with their encapsulations, and each of
// their backends is written with its own port, which the data plane
// rewrites to.
func TestNATServicesInstalled(t *testing.T) {
	f, r := setup(t)
	cfg := natConfig()
	mustApply(t, r, cfg)
	verify(t, f, r, cfg)
	for _, tc := range []struct {
		svc  config.Service
		want lb.Encap
	}{{cfg.Services[2], lb.EncapNAT}, {cfg.Services[3], lb.EncapDNAT}} {
		ds, ok := f.serviceByKey(keyOf(t, tc.svc))
		if !ok || ds.Encap != tc.want || ds.Stateful {
			t.Errorf("service %s: %+v, want encap %d, not stateful", tc.svc.Name, ds, tc.want)
		}
		_, ids, _ := r.ids(keyOf(t, tc.svc))
		for _, b := range tc.svc.Backends {
			ap := netip.AddrPortFrom(b.Address, 8080)
			if got := f.backends[ids[ap]]; got != ap {
				t.Errorf("service %s: backend ID %d holds %s, want %s", tc.svc.Name, ids[ap], got, ap)
			}
		}
	}
}

// SetNAT goes in with the first apply, with the node address as the
// source when nat.address is not set, and again only when the section
// changes; a change of the section alone rewrites no table.
func TestSetNAT(t *testing.T) {
	f, r := setup(t)
	r.nodeAddr = netip.MustParseAddr("10.0.1.2")
	cfg := natConfig()
	mustApply(t, r, cfg)
	want := lb.NATConfig{Address: netip.MustParseAddr("10.0.1.2"), PortMin: 20000, PortMax: 32767,
		TCPSyn: 5 * time.Second, TCPEstablished: time.Hour, TCPClosing: 10 * time.Second, UDP: time.Minute, TCPTimeWait: time.Minute}
	if f.nat != want || count(f.calls, "SetNAT") != 1 {
		t.Fatalf("after the first apply: %d SetNAT calls, %+v; want one with %+v", count(f.calls, "SetNAT"), f.nat, want)
	}
	mark := f.mark()
	mustApply(t, r, cfg)
	if got := f.mutations(mark); len(got) != 0 {
		t.Errorf("the same configuration again: calls %v", got)
	}
	next := natConfig()
	next.NAT.Address = netip.MustParseAddr("10.0.1.9")
	next.NAT.Timeouts.UDP = 30 * time.Second
	mustApply(t, r, next)
	if got := f.mutations(mark); !slices.Equal(got, []string{"SetNAT 20000"}) || f.nat.Address != next.NAT.Address || f.nat.UDP != 30*time.Second {
		t.Errorf("a new nat section: calls %v, settings %+v; want SetNAT alone with 10.0.1.9 and udp 30s", got, f.nat)
	}
}

// A data plane that refuses the NAT settings fails the apply of a
// configuration with a NAT service (retried), and only logs, once, for
// one without.
func TestSetNATFailure(t *testing.T) {
	f, r := setup(t)
	var logs syncBuffer
	r.log = slog.New(slog.NewTextHandler(&logs, nil))
	f.fail["SetNAT"] = errInjected
	mustApply(t, r, baseConfig())
	mustApply(t, r, baseConfig())
	if n := strings.Count(logs.String(), "the data plane did not take the nat settings"); n != 1 || !strings.Contains(logs.String(), "fix=") {
		t.Errorf("without a NAT service: %d warnings, want one with a fix:\n%s", n, logs.String())
	}
	if err := r.Apply(natConfig()); err == nil || !strings.Contains(err.Error(), "nat: injected failure") {
		t.Errorf("with a NAT service: %v, want the SetNAT error", err)
	}
	delete(f.fail, "SetNAT")
	mustApply(t, r, natConfig())
	verify(t, f, r, natConfig())
	if f.nat.PortMin != config.DefaultNATPortMin {
		t.Errorf("after the retry: %+v", f.nat)
	}
}

// An agent restarted on pinned state keeps a NAT service's backend IDs
// (its sessions name them) when the pinned backend has the same port;
// one pinned with another port stays an orphan, and the backend gets an
// ID of its own with its port.
func TestNATAdoptionChecksPort(t *testing.T) {
	f, r := setup(t)
	cfg := cfgOf(natSvc("app", "10.99.0.3", config.NAT, be("10.0.4.2", 1), be("10.0.4.3", 1)))
	mustApply(t, r, cfg)
	_, before, _ := r.ids(keyOf(t, cfg.Services[0]))

	// A restart on the same configuration: the same IDs.
	r2, err := newReconciler(f, quiet, f.maxServices, f.maxBackends)
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, r2, cfg)
	verify(t, f, r2, cfg)
	if _, after, _ := r2.ids(keyOf(t, cfg.Services[0])); !sameIDs(before, after) {
		t.Errorf("restarted: IDs %v, want %v", after, before)
	}

	// Restarted on a configuration whose backend moved to port 9090
	// while no agent ran: not the pinned ID of port 8080.
	moved := cfgOf(natSvc("app", "10.99.0.3", config.NAT, be("10.0.4.2", 1), be("10.0.4.3", 1)))
	moved.Services[0].Backends[0] = onPort(moved.Services[0].Backends[0], 9090)
	r3, err := newReconciler(f, quiet, f.maxServices, f.maxBackends)
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, r3, moved)
	verify(t, f, r3, moved)
	_, ids, _ := r3.ids(keyOf(t, moved.Services[0]))
	old := before[netip.MustParseAddrPort("10.0.4.2:8080")]
	if id := ids[netip.MustParseAddrPort("10.0.4.2:9090")]; id == old {
		t.Errorf("the backend on port 9090 took the ID %d pinned for port 8080", old)
	}
	if _, ok := f.backends[old]; ok {
		t.Errorf("the pinned backend of port 8080 (ID %d) was not deleted once no table named it", old)
	}
}

func sameIDs(a, b map[netip.AddrPort]uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// A backend of a NAT service that fails its health checks has its
// sessions ended, once, after the table without it went in; a DSR
// service's backend going down ends none; a NAT backend that leaves the
// configuration (drained) keeps its sessions.
func TestHealthEndsNATSessions(t *testing.T) {
	cfg := natConfig()
	a, f, _, p := testAgentWith(t, "/etc/xlb/test.yaml", cfg, nil, quiet)
	app, db := cfg.Services[2], cfg.Services[3]
	_, appIDs, _ := a.rec.ids(keyOf(t, app))
	_, dbIDs, _ := a.rec.ids(keyOf(t, db))
	down := netip.MustParseAddrPort("10.0.4.2:8080")

	mark := f.mark()
	p.set("web/10.0.3.2:80", health.Down, "timeout") // DSR
	a.syncHealth()
	if got := count(f.mutations(mark), "EndBackendSessions"); got != 0 {
		t.Errorf("a DSR backend going down ended sessions: %v", f.mutations(mark))
	}

	mark = f.mark()
	p.set("app/10.0.4.2:8080", health.Down, "timeout")
	p.set("db/10.0.4.2:8080", health.Down, "timeout")
	a.syncHealth()
	calls := f.mutations(mark)
	want := []string{fmt.Sprintf("EndBackendSessions %d", appIDs[down]), fmt.Sprintf("EndBackendSessions %d", dbIDs[down])}
	var ended []string
	for _, c := range calls {
		if strings.HasPrefix(c, "EndBackendSessions") {
			ended = append(ended, c)
		}
	}
	slices.Sort(ended)
	slices.Sort(want)
	if !slices.Equal(ended, want) {
		t.Errorf("two NAT backends going down: calls %v, want %v", calls, want)
	}
	// The new tables first: no new session may reach the backend after
	// its sessions ended.
	if i, j := slices.Index(calls, fmt.Sprintf("UpsertService %d", mustID(t, a, app))), slices.Index(calls, fmt.Sprintf("EndBackendSessions %d", appIDs[down])); i < 0 || j < i {
		t.Errorf("sessions ended before the table without the backend went in: %v", calls)
	}

	mark = f.mark()
	a.syncHealth() // nothing changed
	p.set("app/10.0.4.3:8080", health.Up, "")
	a.syncHealth()
	if got := count(f.mutations(mark), "EndBackendSessions"); got != 0 {
		t.Errorf("no new failure ended sessions again: %v", f.mutations(mark))
	}

	// Drained: app's 10.0.4.3 leaves the configuration.
	next := natConfig()
	next.Services[2].Backends = next.Services[2].Backends[:1]
	mark = f.mark()
	if err := a.Replace(source.Update{Config: next, Source: file.Name}); err != nil {
		t.Fatal(err)
	}
	if got := count(f.mutations(mark), "EndBackendSessions"); got != 0 {
		t.Errorf("a backend leaving the configuration ended its sessions: %v", f.mutations(mark))
	}
}

func mustID(t *testing.T, a *Agent, s config.Service) uint32 {
	t.Helper()
	id, _, ok := a.rec.ids(keyOf(t, s))
	if !ok {
		t.Fatalf("service %s not installed", s.Name)
	}
	return id
}

// The expired sessions are reclaimed while a NAT service is configured;
// a failure is logged when it starts, with a fix, shown in status, and
// logged again when it ends.
func TestExpireSessions(t *testing.T) {
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	a, f, _, _ := testAgentWith(t, "/etc/xlb/test.yaml", baseConfig(), nil, log)
	if a.expireOnce(""); f.expires != 0 {
		t.Errorf("without a NAT service: %d ExpireSessions calls", f.expires)
	}
	if err := a.Replace(source.Update{Config: natConfig(), Source: file.Name}); err != nil {
		t.Fatal(err)
	}
	failing := a.expireOnce("")
	if f.expires != 1 || failing != "" {
		t.Fatalf("with a NAT service: %d calls (%q), want 1", f.expires, failing)
	}
	f.mu.Lock()
	f.fail["ExpireSessions"] = errInjected
	f.mu.Unlock()
	for range 3 {
		failing = a.expireOnce(failing)
	}
	if n := strings.Count(logs.String(), "reclaiming expired NAT sessions failed"); n != 1 || !strings.Contains(logs.String(), "fix=") {
		t.Errorf("three failures logged %d times, want once with a fix:\n%s", n, logs.String())
	}
	if st := status(t, a); st.NAT == nil || st.NAT.ExpireError != errInjected.Error() {
		t.Errorf("status while failing: %+v", st.NAT)
	}
	f.mu.Lock()
	delete(f.fail, "ExpireSessions")
	f.mu.Unlock()
	a.expireOnce(failing)
	if !strings.Contains(logs.String(), "reclaiming expired NAT sessions works again") || status(t, a).NAT.ExpireError != "" {
		t.Errorf("recovery not logged or still shown:\n%s", logs.String())
	}
}

// Run reclaims expired sessions in the background, and stops with it.
func TestRunExpiresSessions(t *testing.T) {
	a, f, _, _ := testAgentWith(t, "/etc/xlb/test.yaml", natConfig(), nil, quiet)
	a.expireEvery = time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	testenv.EventuallyTrue(t, 5*time.Second, "ExpireSessions to be called a few times", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.expires >= 3
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	n := f.expires
	f.mu.Unlock()
	time.Sleep(20 * time.Millisecond)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.expires != n {
		t.Errorf("ExpireSessions called %d times after Run returned", f.expires-n)
	}
}

// Status shows the session table when a NAT service is configured, and
// the per-service forwarding mode.
func TestNATStatus(t *testing.T) {
	a, f, _, _ := testAgentWith(t, "/etc/xlb/test.yaml", baseConfig(), nil, quiet)
	if st := status(t, a); st.NAT != nil {
		t.Errorf("without a NAT service: %+v", st.NAT)
	}
	if err := a.Replace(source.Update{Config: natConfig(), Source: file.Name}); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.natCounters = lb.NATCounters{Sessions: 12, Embryonic: 2, Created: 40, AllocFailures: 1, Expired: 28, ReverseMisses: 3, NoReply: 5, Fragments: 4, ICMPTranslated: 6}
	f.mu.Unlock()
	st := status(t, a)
	want := api.NAT{Address: netip.MustParseAddr("10.0.1.2"), Ports: "20000-32767", Sessions: 12, Embryonic: 2, Capacity: 4096, Created: 40,
		AllocFailures: 1, Expired: 28, NoReply: 5, ReverseMisses: 3, FragmentsDropped: 4, ICMPTranslated: 6}
	if st.NAT == nil || *st.NAT != want {
		t.Errorf("nat status %+v, want %+v", st.NAT, want)
	}
	if fw := []string{st.Services[2].Forwarding, st.Services[3].Forwarding}; !slices.Equal(fw, []string{"nat", "dnat"}) {
		t.Errorf("forwarding of app and db: %v", fw)
	}
	f.mu.Lock()
	f.fail["NATCounters"] = errInjected
	f.mu.Unlock()
	if _, err := a.Status(); err == nil || !strings.Contains(err.Error(), "read NAT counters") {
		t.Errorf("a failed read: %v", err)
	}
}

// Sessions lists a sample of each NAT service of a VIP, port or port
// and protocol, says whether there are more, and names what the VIP
// holds when it has no NAT service.
func TestSessions(t *testing.T) {
	a, f, _, _ := testAgentWith(t, "/etc/xlb/test.yaml", natConfig(), nil, quiet)
	key := keyOf(t, natConfig().Services[2])
	for i := range 3 {
		f.sessions[key] = append(f.sessions[key], lb.Session{Protocol: lb.ProtoTCP,
			Client: netip.AddrPortFrom(netip.MustParseAddr("192.0.2.1"), uint16(40000+i)), VIP: netip.AddrPortFrom(key.VIP, 80),
			Backend: netip.MustParseAddrPort("10.0.4.2:8080"), Source: netip.AddrPortFrom(netip.MustParseAddr("10.0.1.2"), uint16(20000+i)),
			State: "established", Replied: true, Idle: 1500 * time.Millisecond})
	}
	q := api.SessionQuery{VIP: key.VIP, Max: 2}
	out, err := a.Sessions(q)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Services) != 1 || out.Services[0].Name != "app" || out.Services[0].Forwarding != "nat" || len(out.Services[0].Sessions) != 2 || !out.Services[0].More {
		t.Fatalf("sessions of %s: %+v", q, out)
	}
	if s := out.Services[0].Sessions[1]; s.Client != netip.MustParseAddrPort("192.0.2.1:40001") || s.Source != netip.MustParseAddrPort("10.0.1.2:20001") ||
		s.Backend != netip.MustParseAddrPort("10.0.4.2:8080") || s.State != "established" || !s.Replied || s.Idle() != 1500*time.Millisecond {
		t.Errorf("second session %+v", s)
	}
	q.Max = 3
	if out, err := a.Sessions(q); err != nil || out.Services[0].More {
		t.Errorf("all three: %+v, %v; want no more", out, err)
	}
	q = api.SessionQuery{VIP: key.VIP, Port: 80, Protocol: "udp", Max: 10}
	if _, err := a.Sessions(q); !errors.Is(err, api.ErrNoNATService) || !strings.Contains(err.Error(), "10.99.0.3:80/udp: it has no service") {
		t.Errorf("%s: %v", q, err)
	}
	q = api.SessionQuery{VIP: netip.MustParseAddr("10.99.0.1"), Max: 10}
	if _, err := a.Sessions(q); !errors.Is(err, api.ErrNoNATService) || !strings.Contains(err.Error(), "only web (80/tcp, dsr-ipip), which forward with direct server return") {
		t.Errorf("%s: %v", q, err)
	}
}

// A reload that changes nat.sessions says it needs a restart; the rest
// of the section applies at once, and --check says which is which.
func TestNATReloadAndCheck(t *testing.T) {
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	a, f, _, _ := testAgentWith(t, "/etc/xlb/test.yaml", natConfig(), nil, log)
	next := natConfig()
	next.NAT.Sessions = 1 << 20
	next.NAT.Ports = config.PortRange{Min: 40000, Max: 49999}
	next.NAT.Timeouts.TCPSyn = 3 * time.Second
	d := diffConfigs(natConfig(), next)
	if !slices.Equal(d.Restart, []string{"nat.sessions: 262144 → 1048576"}) ||
		!slices.Equal(d.NAT, []string{"nat.ports: 20000-32767 → 40000-49999", "nat.timeouts.tcpSyn: 5s → 3s"}) {
		t.Errorf("check: restart %q, nat %q", d.Restart, d.NAT)
	}
	mark := f.mark()
	if err := a.Replace(source.Update{Config: next, Source: file.Name}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "only takes effect when the agent restarts") || !strings.Contains(logs.String(), "section=nat.sessions") {
		t.Errorf("no restart warning for nat.sessions:\n%s", logs.String())
	}
	if got := f.mutations(mark); !slices.Equal(got, []string{"SetNAT 40000"}) {
		t.Errorf("the reload made the calls %v, want SetNAT alone", got)
	}
}
