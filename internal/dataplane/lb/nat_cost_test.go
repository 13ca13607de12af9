package lb

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
)

// memlock is what the kernel accounts to map m (its fdinfo's memlock):
// for a hash map that allocates on use, its buckets and the elements it
// holds now.
func memlock(t testing.TB, m *ebpf.Map) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/self/fdinfo/%d", m.FD()))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "memlock:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no memlock for %v", m)
	return 0
}

// TestLBNATMemoryPerSession measures what an established session costs
// the kernel's accounting (docs/decisions/0007-nat-sessions.md): the
// growth of the two established tables' memlock over 2000 sessions the
// program opened and established (SYN, SYN-ACK, ACK), and what the tables hold before any (their
// buckets) and the embryonic tables, allocated whole at load. The
// figures are logged; the test holds a session to the size of its two
// entries' keys and values at least, and below 1 KiB.
func TestLBNATMemoryPerSession(t *testing.T) {
	x := newNATFixture(t)
	if err := x.d.SetNAT(NATConfig{Address: fxNode, PortMin: 20000, PortMax: 60000}); err != nil {
		t.Fatal(err)
	}
	fwd, rev := x.d.objs.NatFwd, x.d.objs.NatRev
	before := memlock(t, fwd) + memlock(t, rev)
	const n = 2000
	for i := range n {
		c := tuple{netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 2, byte(2 + i%250)}), uint16(1024+i)), vip(80), 6}
		src := x.source(segment(c, tcpSYN, nil).Frame(x.f.MAC))
		if v, _, r := x.run(segment(tuple{natBackends[30], src, 6}, tcpSYN|tcpACK, nil).Frame(x.f.MAC)); v != xdpTX {
			t.Fatalf("session %d: %s %v", i, verdictNames[v], r)
		}
		if v, _, r := x.run(segment(c, tcpACK, nil).Frame(x.f.MAC)); v != xdpTX {
			t.Fatalf("session %d's ACK: %s %v", i, verdictNames[v], r)
		}
	}
	per := float64(memlock(t, fwd)+memlock(t, rev)-before) / n
	t.Logf("established tables of %d sessions: %d bytes before any session; %.0f bytes per session (nat_fwd %d + nat_rev %d bytes of keys and values)",
		x.d.Shape().NATSessions, before, per, 40+40, 40+88)
	t.Logf("embryonic tables (allocated at load): nat_fwd_syn %d, nat_rev_syn %d bytes for %d sessions",
		memlock(t, x.d.objs.NatFwdSyn), memlock(t, x.d.objs.NatRevSyn), embryonicSessions(x.d.Shape().NATSessions))
	if per < 40+40+40+88 || per > 1024 {
		t.Errorf("%.0f bytes per session: below its keys and values, or above 1 KiB", per)
	}
}

// BenchmarkNATSweep measures the sweep of a full default table (262144
// established sessions, none expired): one call of ExpireSessions (the
// agent's every second, reading about sweepBudget sessions) and a whole
// pass through the table, and the count NATCounters walks when no sweep
// ran lately.
//
//	go test -run '^$' -bench NATSweep -benchtime 5x ./internal/dataplane/lb/
func BenchmarkNATSweep(b *testing.B) {
	requirePrivileges(b)
	d, err := New(Options{NodeAddr: fxNode, TableSize: fxTableSize})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	n := int(d.Shape().NATSessions)
	keys := make([]wire.SessionKey, n)
	fkeys := make([]wire.SessionKey, n)
	vals := make([]wire.Session, n)
	now := monotonicNow()
	for i := range n {
		client := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		keys[i] = wire.SessionKey{Src: wire.AddrOf(fxBackend), Dst: wire.AddrOf(client), Sport: wire.Port(8080), Dport: wire.Port(40000), Proto: 6}
		vals[i] = wire.Session{Client: wire.AddrOf(client), Vip: wire.AddrOf(fxVIP), ClientPort: wire.Port(40000), VipPort: wire.Port(80),
			BackendId: 1, Last: now, State: wire.SessionEstablished, Flags: wire.SessionReplied | wire.SessionDNAT}
		fkeys[i] = forwardKey(&keys[i], &vals[i])
	}
	if _, err := d.objs.NatRev.BatchUpdate(keys, vals, nil); err != nil {
		b.Fatal(err)
	}
	if _, err := d.objs.NatFwd.BatchUpdate(fkeys, keys, nil); err != nil {
		b.Fatal(err)
	}
	calls := 0
	b.Run("pass", func(b *testing.B) {
		for b.Loop() {
			for calls = 1; ; calls++ {
				if removed, err := d.ExpireSessions(); err != nil || removed != 0 {
					b.Fatalf("%d, %v", removed, err)
				}
				if d.nat.sweep.pending == (sessionCounts{}) {
					break
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/session")
		b.ReportMetric(float64(calls), "calls/pass")
		if d.nat.gauges.sessions != uint64(n) {
			b.Fatalf("a pass counted %d sessions, want %d", d.nat.gauges.sessions, n)
		}
	})
	b.Run("call", func(b *testing.B) {
		for b.Loop() {
			if _, err := d.ExpireSessions(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("count", func(b *testing.B) {
		for b.Loop() {
			if g, err := d.countSessions(); err != nil || g.sessions != uint64(n) {
				b.Fatalf("%+v, %v", g, err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/session")
	})
}
