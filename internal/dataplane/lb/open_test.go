package lb

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/dataplane/bpfobj"
	"github.com/xlbproject/xlb/testbed/netns"
	"github.com/xlbproject/xlb/testbed/xdptest"
)

func testPinPath(t *testing.T) string {
	t.Helper()
	p := filepath.Join(bpfobj.BPFFSRoot, fmt.Sprintf("xlbtest-%d-%d", os.Getpid(), nsCounter.Add(1)))
	t.Cleanup(func() {
		os.RemoveAll(p)
		os.Remove(bpfobj.LockFile(p))
	})
	return p
}

// xdpProgID is the XDP program attached to ifname in namespace ns (0:
// none).
func xdpProgID(t *testing.T, ns, ifname string) uint32 {
	t.Helper()
	id, err := xdptest.AttachedProgram(ns, ifname)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func openIn(t *testing.T, ns string, opts Options) (*Dataplane, error) {
	t.Helper()
	return callIn(ns, Open, opts)
}

// callIn runs open (Open or Load) inside namespace ns.
func callIn(ns string, open func(Options) (*Dataplane, error), opts Options) (*Dataplane, error) {
	var d *Dataplane
	err := netns.Do(ns, func() error {
		var err error
		d, err = open(opts)
		return err
	})
	return d, err
}

// TestOpenPinAdoptCleanup: the link and maps outlive the agent's handles,
// a new agent adopts them (same services, backends and counters) and
// replaces the program in place, and Cleanup detaches everything.
func TestOpenPinAdoptCleanup(t *testing.T) {
	requirePrivileges(t)
	f := newFixtureNS(t)
	pin := testPinPath(t)
	opts := Options{Interface: "veth0", NodeAddr: fxNode, PinPath: pin, TableSize: fxTableSize}

	d, err := openIn(t, f.Name, opts)
	if err != nil {
		t.Fatal(err)
	}
	// A second agent on the same pinned state is refused while the first
	// one runs.
	if _, err := openIn(t, f.Name, opts); err == nil || !strings.Contains(err.Error(), "another xlb agent") {
		t.Errorf("second Open on the same pin path: %v, want a refusal", err)
	}
	if d.Shape().AttachMode != bpfobj.ModeNative {
		t.Errorf("attach mode %q, want native on veth", d.Shape().AttachMode)
	}
	table := make([]uint32, fxTableSize)
	if err := d.UpsertBackend(0, apOf(fxBackend)); err != nil {
		t.Fatal(err)
	}
	svc := Service{ID: 3, Key: ServiceKey{fxVIP, 80, ProtoTCP}, Encap: EncapGUE, Table: table}
	if err := d.UpsertService(svc); err != nil {
		t.Fatal(err)
	}
	// One packet through the attached program's maps, via test-run.
	if v, _ := f.Run(t, d.objs.XlbLbProg, tcpTo(fxVIP, 80).Frame(f.MAC)); v != xdpTX {
		t.Fatalf("verdict %s", verdictNames[v])
	}
	first := xdpProgID(t, f.Name, "veth0")
	if first == 0 {
		t.Fatal("no XDP program on veth0 after Open")
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if xdpProgID(t, f.Name, "veth0") != first {
		t.Fatal("XDP program went away when the agent closed its handles")
	}
	for _, name := range []string{"link", "svc_index", "backends", "maglev_tables", "svc_retired", tableSizePin} {
		if _, err := os.Stat(filepath.Join(pin, name)); err != nil {
			t.Errorf("pinned %s: %v", name, err)
		}
	}

	d2, err := openIn(t, f.Name, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	second := xdpProgID(t, f.Name, "veth0")
	if second == 0 || second == first {
		t.Errorf("program id %d after re-open (was %d): want a new program in the same link", second, first)
	}
	svcs, err := servicesOf(d2)
	if err != nil || len(svcs) != 1 || svcs[0].ID != 3 || svcs[0].Key != svc.Key || svcs[0].Encap != EncapGUE {
		t.Fatalf("adopted services %+v (%v), want %+v", svcs, err, svc)
	}
	bes, err := backendsOf(d2)
	if err != nil || len(bes) != 1 || bes[0] != fxBackend {
		t.Fatalf("adopted backends %v (%v)", bes, err)
	}
	if c, _ := d2.ServiceCounters(3); c.Packets != 1 {
		t.Errorf("adopted counters %+v, want the 1 packet counted before", c)
	}
	if got, err := d2.Table(3); err != nil || len(got) != fxTableSize {
		t.Errorf("adopted table: %d slots, %v", len(got), err)
	}

	// Another table size would silently change every flow's slot: refused.
	d2.Close()
	bad := opts
	bad.TableSize = 257
	if _, err := openIn(t, f.Name, bad); err == nil || !strings.Contains(err.Error(), "size 251") {
		t.Errorf("re-open with another table size: %v, want a refusal naming size 251", err)
	}

	if err := bpfobj.Cleanup(pin); err != nil {
		t.Fatal(err)
	}
	// The kernel detaches a link when its last reference goes, which
	// can lag the unpin a little.
	deadline := time.Now().Add(3 * time.Second)
	for xdpProgID(t, f.Name, "veth0") != 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if id := xdpProgID(t, f.Name, "veth0"); id != 0 {
		t.Errorf("XDP program %d still attached 3s after Cleanup", id)
	}
	if _, err := os.Stat(pin); !os.IsNotExist(err) {
		t.Errorf("pin directory still there: %v", err)
	}
}

// TestAgentsDoNotShareState: two data planes with their own pin paths
// in two namespaces never see each other's services.
func TestAgentsDoNotShareState(t *testing.T) {
	requirePrivileges(t)
	f1, f2 := newFixtureNS(t), newFixtureNS(t)
	p1, p2 := testPinPath(t), testPinPath(t)
	d1, err := openIn(t, f1.Name, Options{Interface: "veth0", NodeAddr: fxNode, PinPath: p1, TableSize: fxTableSize})
	if err != nil {
		t.Fatal(err)
	}
	defer d1.Close()
	d2, err := openIn(t, f2.Name, Options{Interface: "veth0", NodeAddr: fxNode, PinPath: p2, TableSize: fxTableSize})
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if err := d1.UpsertService(Service{ID: 1, Key: ServiceKey{fxVIP, 80, ProtoTCP}, Encap: EncapIPIP, Table: make([]uint32, fxTableSize)}); err != nil {
		t.Fatal(err)
	}
	if s, _ := servicesOf(d2); len(s) != 0 {
		t.Fatalf("agent 2 sees agent 1's services: %v", s)
	}
}
