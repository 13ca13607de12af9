package lb

import (
	"fmt"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/testbed/xdptest"
)

// A table swap must be atomic: a packet reads either the whole old table
// or the whole new one. One packet reads one slot, so atomicity shows only
// across packets. The packets of one round are sent one after the other,
// on one CPU, for flows whose slots ascend through the table. While at
// most one swap can take effect during a round, an atomic swap lets the
// round see the old table and then the new one (old… new…), never the new
// table and then the old one again. A table rewritten in place (one batch
// update writes the slots in ascending order) is caught by exactly that: a
// round that starts mid-rewrite finds its first flows' slots rewritten and
// its last flows' slots not yet.

const (
	swapTableSize = 65537 // the default: a rewrite in place takes long enough to be seen
	swapFlows     = 64
	swapBackends  = 4 // per table
	swapSvc       = 0
)

// swapFlow is one flow of a round, with the backend each table gives it.
type swapFlow struct {
	slot  uint32
	frame []byte
	want  [2]netip.Addr // backend under table 0, under table 1
}

// swapStats summarise the rounds one run sent.
type swapStats struct {
	rounds   int    // rounds sent
	checked  int    // rounds during which at most one swap could take effect
	switched int    // checked rounds during which a swap took effect (old table, then new)
	bad      string // the first round no atomic swap can explain
}

// TestTableSwapAtomic swaps a service's table between two tables of
// disjoint backends as fast as it can while packets flow, and checks every
// round of packets against the tables. A control run rewrites the live
// table in place instead and must be caught, so that the test is known to
// detect what it exists to detect.
func TestTableSwapAtomic(t *testing.T) {
	requirePrivileges(t)
	f := newFixtureNS(t)
	d, err := New(Options{NodeAddr: fxNode, TableSize: swapTableSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })

	// Table 0 uses backends 0..3, table 1 backends 4..7; slot s goes to
	// the (s mod 4)th backend of either.
	var addrs [2][swapBackends]netip.Addr
	var tables [2][]uint32
	for tb := range tables {
		tables[tb] = make([]uint32, swapTableSize)
		for i := range swapBackends {
			id := uint32(tb*swapBackends + i)
			addrs[tb][i] = netip.AddrFrom4([4]byte{10, 0, 3, byte(10 + 10*tb + i)}) // via the router: XDP_TX
			if err := d.UpsertBackend(id, apOf(addrs[tb][i])); err != nil {
				t.Fatal(err)
			}
		}
		for s := range tables[tb] {
			tables[tb][s] = uint32(tb*swapBackends + s%swapBackends)
		}
	}
	install := func(tb int) error {
		return d.UpsertService(Service{ID: swapSvc, Key: ServiceKey{fxVIP, 80, ProtoTCP}, Encap: EncapIPIP, Table: tables[tb]})
	}
	// The control run's rewrite: the batch write UpsertService makes,
	// but into the inner map the service has now instead of a fresh one.
	var entries [2][]wire.TableEntry
	keys := make([]uint32, swapTableSize)
	for i := range keys {
		keys[i] = uint32(i)
	}
	for tb := range entries {
		entries[tb] = make([]wire.TableEntry, swapTableSize)
		for s, id := range tables[tb] {
			entries[tb][s] = wire.NewTableEntry(id, addrs[tb][id%swapBackends])
		}
	}
	rewrite := func(tb int) error {
		var id ebpf.MapID
		if err := d.objs.MaglevTables.Lookup(uint32(swapSvc), &id); err != nil {
			return err
		}
		inner, err := ebpf.NewMapFromID(id)
		if err != nil {
			return err
		}
		defer inner.Close()
		_, err = inner.BatchUpdate(keys, entries[tb], nil)
		return err
	}

	// Flows with distinct slots, in ascending slot order.
	var flows []swapFlow
	slots := map[uint32]bool{}
	for sport := uint16(20000); len(flows) < swapFlows; sport++ {
		p := tcpTo(fxVIP, 80)
		p.Sport = sport
		s := Slot(FlowHash(p.Src, fxVIP, sport, 80, 6), swapTableSize)
		if slots[s] {
			continue
		}
		slots[s] = true
		flows = append(flows, swapFlow{slot: s, frame: p.Frame(f.MAC), want: [2]netip.Addr{addrs[0][s%swapBackends], addrs[1][s%swapBackends]}})
	}
	slices.SortFunc(flows, func(a, b swapFlow) int { return int(a.slot) - int(b.slot) })

	t.Run("swap", func(t *testing.T) {
		if err := install(0); err != nil {
			t.Fatal(err)
		}
		st, swaps := swapWhileSending(t, f, d.objs.XlbLbProg, flows, install, 1500*time.Millisecond)
		t.Logf("%d swaps; %d rounds of %d packets, %d checked, %d saw a swap", swaps, st.rounds, swapFlows, st.checked, st.switched)
		if st.bad != "" {
			t.Fatalf("a packet saw a table no atomic swap can explain: %s", st.bad)
		}
		if st.switched < 5 {
			t.Fatalf("only %d rounds (of %d) saw a swap happen: the test did not exercise concurrent swaps", st.switched, st.rounds)
		}
	})
	t.Run("control: a rewrite in place is caught", func(t *testing.T) {
		if err := install(0); err != nil {
			t.Fatal(err)
		}
		st, swaps := swapWhileSending(t, f, d.objs.XlbLbProg, flows, rewrite, 3*time.Second)
		t.Logf("%d rewrites; %d rounds, %d checked: %s", swaps, st.rounds, st.checked, st.bad)
		if st.bad == "" {
			t.Fatalf("%d in-place rewrites went unnoticed over %d rounds: the check cannot tell a torn table", swaps, st.rounds)
		}
	})
}

// swapWhileSending sends rounds of packets from a goroutine (on the
// fixture's thread, CPU 0) while this goroutine calls swap(1), swap(0),
// swap(1), … until the time is up or a round is caught. The table in
// place starts as table 0. It returns the rounds' summary and the number
// of swaps.
func swapWhileSending(t *testing.T, f *fixtureNS, prog *ebpf.Program, flows []swapFlow, swap func(tb int) error, limit time.Duration) (swapStats, int) {
	t.Helper()
	// gen is 2n-1 while swap n is under way and 2n once it returned;
	// after swap n the table in place is n%2.
	var gen atomic.Uint64
	var stop atomic.Bool
	done := make(chan swapStats)
	go func() {
		var st swapStats
		err := f.Runner.Do(func() error {
			var err error
			st, err = sendRounds(prog, uint32(f.Ifindex), flows, &gen, &stop)
			return err
		})
		if err != nil && st.bad == "" {
			st.bad = err.Error()
		}
		stop.Store(true)
		done <- st
	}()
	deadline := time.Now().Add(limit)
	n := 0
	for !stop.Load() && time.Now().Before(deadline) {
		n++
		gen.Store(uint64(2*n - 1))
		if err := swap(n % 2); err != nil {
			stop.Store(true)
			<-done
			t.Fatalf("swap %d: %v", n, err)
		}
		gen.Store(uint64(2 * n))
	}
	stop.Store(true)
	return <-done, n
}

// sendRounds runs on the fixture's thread: rounds of one packet per flow,
// each checked against the swaps that may have happened during it, until
// stop or the first round that breaks atomicity.
func sendRounds(prog *ebpf.Program, ifindex uint32, flows []swapFlow, gen *atomic.Uint64, stop *atomic.Bool) (swapStats, error) {
	var st swapStats
	out := make([]byte, 2048)
	seen := make([]int, len(flows))
	for !stop.Load() {
		g0 := gen.Load()
		for i, fl := range flows {
			opts := &ebpf.RunOptions{Data: fl.frame, DataOut: out, Context: xdptest.XDPMD{DataEnd: uint32(len(fl.frame)), IngressIfindex: ifindex}}
			v, err := prog.Run(opts)
			if err != nil {
				return st, err
			}
			if v != xdpTX || len(opts.DataOut) < 34 {
				st.bad = fmt.Sprintf("flow %d: verdict %s", i, verdictNames[v])
				return st, nil
			}
			got := netip.AddrFrom4([4]byte(opts.DataOut[30:34]))
			seen[i] = slices.Index(fl.want[:], got)
			if seen[i] < 0 {
				st.bad = fmt.Sprintf("flow %d went to %v, neither table's backend (%v, %v)", i, got, fl.want[0], fl.want[1])
				return st, nil
			}
		}
		g1 := gen.Load()
		st.rounds++
		// Swaps that may have taken effect during the round: from the
		// first not finished at its start to the last started by its end.
		first, last := g0/2+1, (g1+1)/2
		if last > first {
			continue // two or more: any sequence is possible
		}
		st.checked++
		old := int((first - 1) % 2)
		sawOld, sawNew := false, false
		for i, tb := range seen {
			switch {
			case tb != old && last < first:
				st.bad = fmt.Sprintf("round with no swap under way (gen %d..%d): flow %d saw table %d, table %d is in place", g0, g1, i, tb, old)
			case tb != old:
				sawNew = true
			case !sawNew:
				sawOld = true
			default:
				st.bad = fmt.Sprintf("round during swap %d (gen %d..%d): flow %d saw the old table %d after an earlier flow saw the new one; tables seen %v", first, g0, g1, i, old, seen)
			}
			if st.bad != "" {
				return st, nil
			}
		}
		if sawOld && sawNew {
			st.switched++
		}
	}
	return st, nil
}
