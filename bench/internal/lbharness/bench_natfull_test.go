package lbharness

import (
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/testbed/netns"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// The full-table NAT cases open their sessions through the LB program
// and hit another existing session, established, on every run: after k
// runs, the k sessions first in the shuffled order, and only they, have
// been stamped, the program forwarded each (XDP_TX) and opened none.
func TestNATFullTable(t *testing.T) {
	testenv.RequireRoot(t, "benchmarks (BPF, network namespaces)")
	env, err := openBenchEnv("xlb-bench-natfull", 16)
	if err != nil {
		t.Fatal(err)
	}
	defer env.close()
	const n, k = 3000, 700
	sessions, err := env.natFull(n)
	if err != nil {
		t.Fatal(err)
	}
	st, err := env.d.NATStatCounters()
	if err != nil {
		t.Fatal(err)
	}
	if st["created"] != n+1 || st["promoted"] != n+1 {
		t.Fatalf("NAT counters %v after opening %d sessions, want %d created and promoted", st, n, n+1)
	}
	// Every session's forward entry names the reply the case sends.
	for i, s := range sessions {
		var f wire.SessionFwd
		if err := env.objs.NatFwd.Lookup(natKey(s.fwd), &f); err != nil {
			t.Fatalf("session %d: no established forward entry: %v", i, err)
		}
		if f.Rk != *natKey(s.rev) {
			t.Fatalf("session %d: forward entry names %+v, the case replies as %+v", i, f.Rk, *natKey(s.rev))
		}
	}

	for _, c := range []struct {
		name    string
		prog    *ebpf.Program
		counter *ebpf.Variable
		frame   []byte
		stat    string
	}{
		{"forward", env.objs.BenchLbNatFwdFull, env.objs.BenchNatFwdI, benchFramePort(env.vip, natPort), "forward"},
		{"reverse", env.objs.BenchLbNatRevFull, env.objs.BenchNatRevI, env.natReply, "reverse"},
	} {
		before, err := env.d.NATStatCounters()
		if err != nil {
			t.Fatal(err)
		}
		// Past the age at which the program stamps a session again.
		time.Sleep(150 * time.Millisecond)
		t0 := coarseNow(t)
		if err := c.counter.Set(uint32(0)); err != nil {
			t.Fatal(err)
		}
		err = netns.Do(env.ns, func() error {
			idx, err := benchThread()
			if err != nil {
				return err
			}
			v, _, out, err := testRunXDP(c.prog.FD(), c.frame, idx, k)
			if err != nil {
				return err
			}
			if v != xdpVerdictTX {
				t.Errorf("%s: verdict %s, want XDP_TX", c.name, xdpVerdictName(v))
			}
			if string(out) != string(c.frame) {
				t.Errorf("%s: the harness did not restore the packet", c.name)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		want := map[wire.SessionKey]bool{}
		for _, s := range sessions[:k] {
			want[*natKey(s.rev)] = true
		}
		// A client's packet stamps its session's forward entry, a
		// reply the session.
		touched := 0
		hit := func(rk wire.SessionKey, last uint64) {
			if last < t0 {
				return
			}
			touched++
			if !want[rk] {
				t.Errorf("%s: session %+v was hit, not one of the first %d the case visits", c.name, rk, k)
			}
		}
		var key wire.SessionKey
		if c.name == "forward" {
			var f wire.SessionFwd
			it := env.objs.NatFwd.Iterate()
			for it.Next(&key, &f) {
				hit(f.Rk, f.Last)
			}
			if err := it.Err(); err != nil {
				t.Fatal(err)
			}
		} else {
			var v wire.Session
			it := env.objs.NatRev.Iterate()
			for it.Next(&key, &v) {
				hit(key, v.Last)
			}
			if err := it.Err(); err != nil {
				t.Fatal(err)
			}
		}
		if touched != k {
			t.Errorf("%s: %d sessions hit in %d runs, want %d distinct ones", c.name, touched, k, k)
		}
		after, err := env.d.NATStatCounters()
		if err != nil {
			t.Fatal(err)
		}
		if after[c.stat]-before[c.stat] != k || after["created"] != before["created"] {
			t.Errorf("%s: NAT counters %v after %v: want %d more %s packets and no session opened", c.name, after, before, k, c.stat)
		}
	}
}

// natKey is the session key of a case's packet.
func natKey(t natTuple) *wire.SessionKey {
	return &wire.SessionKey{
		Src: wire.AddrOf(netip.AddrFrom4(t.saddr)), Dst: wire.AddrOf(netip.AddrFrom4(t.daddr)),
		Sport: wire.Port(t.sport), Dport: wire.Port(t.dport), Proto: 6,
	}
}

// coarseNow is the clock the program stamps sessions with
// (bpf_ktime_get_coarse_ns).
func coarseNow(t *testing.T) uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC_COARSE, &ts); err != nil {
		t.Fatal(err)
	}
	return uint64(ts.Nano())
}

// The connection-life case runs every packet of each connection through
// the LB program with its verdict: each connection, a port's first and
// its next ones alike, is opened and established once, and every step
// and the whole connection get a time.
func TestNATConns(t *testing.T) {
	testenv.RequireRoot(t, "benchmarks (BPF, network namespaces)")
	const ports, conns = 50, 120
	res, err := RunNATConns(NATConnConfig{Backends: 4, Sessions: 100, Ports: ports, Conns: conns})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(NATConnSteps)+2 {
		t.Fatalf("%d results, want one per step, the connection and the first SYN: %+v", len(res), res)
	}
	for _, r := range res {
		if r.MedianNs <= 0 || r.P90Ns < r.MedianNs {
			t.Errorf("%s: median %.0f ns, p90 %.0f ns", r.Step, r.MedianNs, r.P90Ns)
		}
	}
}
