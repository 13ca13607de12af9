package lb

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/testbed/xdptest"
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
		x.d.Shape().NATSessions, before, per, 40+56, 40+88)
	t.Logf("embryonic tables (allocated at load): nat_fwd_syn %d, nat_rev_syn %d bytes for %d sessions",
		memlock(t, x.d.objs.NatFwdSyn), memlock(t, x.d.objs.NatRevSyn), embryonicSessions(x.d.Shape().NATSessions))
	if per < 40+56+40+88 || per > 1024 {
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
	writeSessions(b, d, n, monotonicNow(), wire.SessionEstablished, wire.SessionDNAT)
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

// writeSessions writes n answered sessions of made-up clients (10.x.y.z
// port 40000, to the fixture's backend port 8080 from as many claims)
// into the established tables, both entries stamped last, in state, with
// flags besides wire.SessionReplied.
func writeSessions(b *testing.B, d *Dataplane, n int, last uint64, state, flags uint8) {
	b.Helper()
	keys := make([]wire.SessionKey, n)
	fkeys := make([]wire.SessionKey, n)
	fvals := make([]wire.SessionFwd, n)
	vals := make([]wire.Session, n)
	for i := range n {
		client := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		keys[i] = wire.SessionKey{Src: wire.AddrOf(fxBackend), Dst: wire.AddrOf(client), Sport: wire.Port(8080), Dport: wire.Port(40000), Proto: 6}
		vals[i] = wire.Session{Client: wire.AddrOf(client), Vip: wire.AddrOf(fxVIP), ClientPort: wire.Port(40000), VipPort: wire.Port(80),
			BackendId: 1, Last: last, State: state, Flags: wire.SessionReplied | flags}
		fkeys[i] = forwardKey(&keys[i], &vals[i])
		fvals[i] = forwardEntry(&keys[i], &vals[i])
	}
	if _, err := d.objs.NatRev.BatchUpdate(keys, vals, nil); err != nil {
		b.Fatal(err)
	}
	if _, err := d.objs.NatFwd.BatchUpdate(fkeys, fvals, nil); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkNATSweepExpired measures what the sweep costs per session it
// removes: 65536 established sessions of closed connections (state
// closing, both entries stamped 20 s ago, past tcpClosing), written
// before each run, then ExpireSessions until none is left. In the lab
// every connection of a new-connection run ends as one of these.
//
//	go test -run '^$' -bench NATSweepExpired -benchtime 5x ./internal/dataplane/lb/
func BenchmarkNATSweepExpired(b *testing.B) {
	requirePrivileges(b)
	d, err := New(Options{NodeAddr: fxNode, TableSize: fxTableSize})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	const n = 65536
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		writeSessions(b, d, n, monotonicNow()-uint64(20*time.Second), wire.SessionClosing, 0)
		b.StartTimer()
		removed := 0
		for calls := 0; removed < n; calls++ {
			r, err := d.ExpireSessions()
			if err != nil || calls > 10 {
				b.Fatalf("removed %d of %d in %d calls: %v", removed, n, calls, err)
			}
			removed += r
		}
		if removed != n {
			b.Fatalf("removed %d, want %d", removed, n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/session")
	var left int
	for _, t := range d.sessionTables() {
		if err := walkSessions(t.rev, func(*wire.SessionKey, *wire.Session) { left++ }); err != nil {
			b.Fatal(err)
		}
		var k wire.SessionKey
		var f wire.SessionFwd
		if t.fwd == d.objs.NatFwd && t.fwd.Iterate().Next(&k, &f) {
			b.Fatalf("a forward entry outlived its session: %+v", k)
		}
	}
	if left != 0 {
		b.Fatalf("%d sessions left", left)
	}
}

// fillPorts claims the given ports of the fixture's range for backend 30
// (natTCP's) with fresh established sessions of made-up clients, written
// in place: ports a new session must find taken.
func (x *natFixture) fillPorts(ports []uint16) {
	x.t.Helper()
	keys := make([]wire.SessionKey, len(ports))
	vals := make([]wire.Session, len(ports))
	now := monotonicNow()
	for i, p := range ports {
		client := netip.AddrFrom4([4]byte{10, 7, byte(i >> 8), byte(i)})
		keys[i] = sessionKey(netip.AddrPortFrom(fxNode, p), natBackends[30], 6)
		vals[i] = wire.Session{Client: wire.AddrOf(client), Vip: wire.AddrOf(fxVIP), ClientPort: wire.Port(40000), VipPort: wire.Port(80),
			BackendId: 30, Last: now, State: wire.SessionEstablished, Flags: wire.SessionReplied}
	}
	if _, err := x.d.objs.NatRev.BatchUpdate(keys, vals, nil); err != nil {
		x.t.Fatal(err)
	}
}

// BenchmarkNATNewSession measures the SYN of a new client of natTCP (its
// backend's range the fixture's 1000 ports) with the range empty, 90%
// taken, and all taken by fresh established sessions (every SYN fails:
// what a SYN flood costs once it has filled a backend's range). Each SYN
// is a new client's; a session opened is removed again outside the
// measurement, so the fill stays. ns/SYN is the kernel's time of the
// program runs (BPF_PROG_TEST_RUN, one run each), without the system
// call around it but with the run's own setup; at full range,
// ns/SYN-repeated is a failing SYN run 10 000 times in one call.
func BenchmarkNATNewSession(b *testing.B) {
	for _, fill := range []struct {
		name string
		pct  int
	}{{"empty", 0}, {"fill90", 90}, {"full", 100}} {
		b.Run(fill.name, func(b *testing.B) {
			x := newNATFixtureWith(b, Options{NATSessions: 16384})
			ports := make([]uint16, 0, natPortMax-natPortMin+1)
			for p := natPortMin; p <= natPortMax; p++ {
				ports = append(ports, p)
			}
			rand.New(rand.NewPCG(1, 2)).Shuffle(len(ports), func(i, j int) { ports[i], ports[j] = ports[j], ports[i] })
			x.fillPorts(ports[:len(ports)*fill.pct/100])
			var total time.Duration
			failed := 0
			for i := 0; b.Loop(); i++ {
				c := tuple{netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 2, byte(2 + i%250)}), uint16(1024+i/250)), vip(80), 6}
				frame := segment(c, tcpSYN, nil).Frame(x.f.MAC)
				v, d := x.timedRun(frame, 1)
				total += d
				switch {
				case (v == xdpTX || v == xdpRedirect) && fill.pct < 100:
					x.deleteSession(c)
				case v == xdpDrop && fill.pct > 0:
					failed++
				default:
					b.Fatalf("SYN %d at %d%% fill: verdict %s", i, fill.pct, verdictNames[v])
				}
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/SYN")
			b.ReportMetric(float64(failed)/float64(b.N), "failed/SYN")
			if fill.pct == 100 {
				// A failing SYN changes nothing but counters (and the
				// hint): the same one again and again, without the cost
				// of a run of its own.
				c := tuple{clientAt(1), vip(80), 6}
				v, d := x.timedRun(segment(c, tcpSYN, nil).Frame(x.f.MAC), 10000)
				if v != xdpDrop {
					b.Fatalf("a SYN at full range: verdict %s", verdictNames[v])
				}
				b.ReportMetric(float64(d.Nanoseconds()), "ns/SYN-repeated")
			}
		})
	}
}

// progRunAttr is the BPF_PROG_TEST_RUN member of union bpf_attr:
// cilium/ebpf's Benchmark takes no context, and the FIB lookup of the
// program starts from the ingress interface the context names.
type progRunAttr struct {
	progFD, retval, dataSizeIn, dataSizeOut uint32
	dataIn, dataOut                         uint64
	repeat, duration, ctxSizeIn, ctxSizeOut uint32
	ctxIn, ctxOut                           uint64
	flags, cpu, batchSize, _                uint32
}

// timedRun runs the LB program repeat times on frame, arriving on the
// fixture's veth0, and returns its last verdict and the kernel's mean time
// of a run.
func (x *natFixture) timedRun(frame []byte, repeat uint32) (uint32, time.Duration) {
	x.t.Helper()
	out := make([]byte, len(frame)+256)
	ctx := xdptest.XDPMD{DataEnd: uint32(len(frame)), IngressIfindex: uint32(x.f.Ifindex)}
	attr := progRunAttr{
		progFD: uint32(x.d.objs.XlbLbProg.FD()), dataSizeIn: uint32(len(frame)), dataSizeOut: uint32(len(out)),
		dataIn: uint64(uintptr(unsafe.Pointer(&frame[0]))), dataOut: uint64(uintptr(unsafe.Pointer(&out[0]))),
		repeat: repeat, ctxSizeIn: uint32(unsafe.Sizeof(ctx)), ctxIn: uint64(uintptr(unsafe.Pointer(&ctx))),
	}
	err := x.f.Runner.Do(func() error {
		for range 100 { // a signal cuts a run short: again, a bounded number of times
			_, _, errno := unix.Syscall(unix.SYS_BPF, 10 /* BPF_PROG_TEST_RUN */, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
			if errno != unix.EINTR {
				if errno != 0 {
					return errno
				}
				return nil
			}
		}
		return unix.EINTR
	})
	runtime.KeepAlive(frame)
	runtime.KeepAlive(out)
	runtime.KeepAlive(&ctx)
	if err != nil {
		x.t.Fatalf("BPF_PROG_TEST_RUN: %v", err)
	}
	return attr.retval, time.Duration(attr.duration)
}

// TestReapArgsLayout: the sweep hands xlb_nat_reap its context as the
// bytes of reapArgs, which must be struct lbnat_reap_args.
func TestReapArgsLayout(t *testing.T) {
	var a reapArgs
	if got, want := unsafe.Sizeof(a), uintptr(24+40*reapBatch); got != want {
		t.Errorf("reapArgs is %d bytes, struct lbnat_reap_args %d", got, want)
	}
	if got := unsafe.Offsetof(a.Keys); got != 24 {
		t.Errorf("reapArgs.Keys at %d, want 24", got)
	}
	if reapBatch > 64 {
		t.Errorf("reapBatch %d: the program reports a batch in 64-bit masks", reapBatch)
	}
}
