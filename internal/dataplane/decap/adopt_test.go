package decap

import (
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/internal/dataplane/wire"
	"github.com/xlbproject/xlb/testbed/netns"
)

// olderChainStats is how many chaining counters an xlb before the
// chaining drops (chain_drop_untrusted_source, chain_drop_unknown_owner)
// pinned.
const olderChainStats = 8

// TestSetupDecapAdoptsOlderState: a host set up by an older xlb has a
// smaller chain_stats pinned; setting it up again replaces the array and
// keeps its counts, and the maps new in this version are created. A
// pinned map whose layout changed otherwise is refused with what to run.
func TestSetupDecapAdoptsOlderState(t *testing.T) {
	requirePrivileges(t)
	f := newFixtureNS(t)
	pin := testPinPath(t)
	setup := func() error {
		return netns.Do(f.Name, func() error {
			_, err := Setup(Options{Interface: "veth0", HostAddrs: []netip.Addr{fxBackend}, VIPs: []netip.Addr{fxVIP},
				PinPath: pin, Chain: chainSets})
			return err
		})
	}
	// What the older xlb left: its chain_stats, with counts. (Its other
	// maps have this version's layout; chain_from and chain_to are new.)
	if err := setup(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"chain_stats", "chain_from", "chain_to"} {
		if err := removePin(filepath.Join(pin, name)); err != nil {
			t.Fatal(err)
		}
	}
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	old, err := ebpf.NewMap(&ebpf.MapSpec{Name: "chain_stats", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 16, MaxEntries: olderChainStats})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	for k := uint32(0); k < olderChainStats; k++ {
		per := make([]wire.Counter, cpus)
		per[0] = wire.Counter{Packets: uint64(k) + 1, Bytes: 100 * (uint64(k) + 1)}
		if err := old.Put(k, per); err != nil {
			t.Fatal(err)
		}
	}
	if err := old.Pin(filepath.Join(pin, "chain_stats")); err != nil {
		t.Fatal(err)
	}

	if err := setup(); err != nil {
		t.Fatalf("set-up over the older state: %v", err)
	}
	st, err := ChainStats(pin)
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range wire.ChainStatNames {
		want := bpfobj.Counters{}
		if i < olderChainStats {
			want = bpfobj.Counters{Packets: uint64(i) + 1, Bytes: 100 * (uint64(i) + 1)}
		}
		if st[name] != want {
			t.Errorf("%s: %+v, want %+v", name, st[name], want)
		}
	}
	if got := pinnedPrefixes(t, pin, "chain_to"); len(got) != len(chainSets.To) {
		t.Errorf("chain_to holds %v, want %v", got, chainSets.To)
	}

	// A map of another layout holds state that cannot be carried over.
	if err := removePin(filepath.Join(pin, "host_addrs")); err != nil {
		t.Fatal(err)
	}
	other, err := ebpf.NewMap(&ebpf.MapSpec{Name: "host_addrs", Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.Pin(filepath.Join(pin, "host_addrs")); err != nil {
		t.Fatal(err)
	}
	err = setup()
	if err == nil || !strings.Contains(err.Error(), "host_addrs") || !strings.Contains(err.Error(), "--cleanup") {
		t.Errorf("set-up over a host_addrs of another layout: %v, want an error naming the map and --cleanup", err)
	}
}

func removePin(path string) error {
	m, err := ebpf.LoadPinnedMap(path, nil)
	if err != nil {
		return err
	}
	defer m.Close()
	return m.Unpin()
}
